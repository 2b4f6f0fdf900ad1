/*
 * cl_api.h — the part of the OpenCL 1.2 host ABI the backend calls, declared here so that
 * libmamba2c builds without OpenCL headers and loads without libOpenCL: the functions are
 * looked up at run time in the ICD loader (dlopen "libOpenCL.so.1"). Types and constants
 * are the ones the Khronos specification fixes for every implementation.
 */
#ifndef MAMBA2C_CL_API_H
#define MAMBA2C_CL_API_H

#include <stddef.h>
#include <stdint.h>

typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef cl_bitfield cl_device_type;
typedef cl_bitfield cl_mem_flags;
typedef cl_bitfield cl_command_queue_properties;
typedef cl_uint cl_bool;
typedef cl_uint cl_platform_info;
typedef cl_uint cl_device_info;
typedef cl_uint cl_program_info;
typedef cl_uint cl_program_build_info;
typedef cl_uint cl_command_queue_info;
typedef intptr_t cl_context_properties;
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;

#define CL_SUCCESS 0
#define CL_DEVICE_NOT_FOUND -1
#define CL_BUILD_PROGRAM_FAILURE -11
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#define CL_TRUE 1
#define CL_PLATFORM_NAME 0x0902
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFF
#define CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004
#define CL_DEVICE_MEM_BASE_ADDR_ALIGN 0x1019
#define CL_DEVICE_LOCAL_MEM_SIZE 0x1023
#define CL_DEVICE_AVAILABLE 0x1027
#define CL_DEVICE_NAME 0x102B
#define CL_DEVICE_VERSION 0x102F
#define CL_QUEUE_CONTEXT 0x1090
#define CL_QUEUE_DEVICE 0x1091
#define CL_MEM_READ_WRITE (1 << 0)
#define CL_PROGRAM_BINARY_SIZES 0x1165
#define CL_PROGRAM_BINARIES 0x1166
#define CL_PROGRAM_BUILD_LOG 0x1183

/* X(return type, name, parameter list): every entry point the backend uses. */
#define M2CL_FUNCS(X)                                                                          \
    X(cl_int, clGetPlatformIDs, (cl_uint, cl_platform_id *, cl_uint *))                        \
    X(cl_int, clGetPlatformInfo, (cl_platform_id, cl_platform_info, size_t, void *, size_t *)) \
    X(cl_int, clGetDeviceIDs, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *,        \
                               cl_uint *))                                                     \
    X(cl_int, clGetDeviceInfo, (cl_device_id, cl_device_info, size_t, void *, size_t *))       \
    X(cl_context, clCreateContext, (const cl_context_properties *, cl_uint,                    \
                                    const cl_device_id *, void *, void *, cl_int *))           \
    X(cl_int, clRetainContext, (cl_context))                                                   \
    X(cl_int, clReleaseContext, (cl_context))                                                  \
    X(cl_command_queue, clCreateCommandQueue, (cl_context, cl_device_id,                       \
                                               cl_command_queue_properties, cl_int *))         \
    X(cl_int, clRetainCommandQueue, (cl_command_queue))                                        \
    X(cl_int, clReleaseCommandQueue, (cl_command_queue))                                       \
    X(cl_int, clGetCommandQueueInfo, (cl_command_queue, cl_command_queue_info, size_t, void *, \
                                      size_t *))                                               \
    X(cl_mem, clCreateBuffer, (cl_context, cl_mem_flags, size_t, void *, cl_int *))            \
    X(cl_int, clReleaseMemObject, (cl_mem))                                                    \
    X(cl_int, clEnqueueWriteBuffer, (cl_command_queue, cl_mem, cl_bool, size_t, size_t,        \
                                     const void *, cl_uint, const cl_event *, cl_event *))     \
    X(cl_int, clEnqueueReadBuffer, (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, \
                                    cl_uint, const cl_event *, cl_event *))                    \
    X(cl_program, clCreateProgramWithSource, (cl_context, cl_uint, const char **,              \
                                              const size_t *, cl_int *))                       \
    X(cl_program, clCreateProgramWithBinary, (cl_context, cl_uint, const cl_device_id *,       \
                                              const size_t *, const unsigned char **,          \
                                              cl_int *, cl_int *))                             \
    X(cl_int, clBuildProgram, (cl_program, cl_uint, const cl_device_id *, const char *,        \
                               void *, void *))                                                \
    X(cl_int, clGetProgramBuildInfo, (cl_program, cl_device_id, cl_program_build_info, size_t, \
                                      void *, size_t *))                                       \
    X(cl_int, clGetProgramInfo, (cl_program, cl_program_info, size_t, void *, size_t *))       \
    X(cl_int, clReleaseProgram, (cl_program))                                                  \
    X(cl_kernel, clCreateKernel, (cl_program, const char *, cl_int *))                         \
    X(cl_int, clReleaseKernel, (cl_kernel))                                                    \
    X(cl_int, clSetKernelArg, (cl_kernel, cl_uint, size_t, const void *))                      \
    X(cl_int, clEnqueueNDRangeKernel, (cl_command_queue, cl_kernel, cl_uint, const size_t *,   \
                                       const size_t *, const size_t *, cl_uint,                \
                                       const cl_event *, cl_event *))                          \
    X(cl_int, clFinish, (cl_command_queue))

#endif /* MAMBA2C_CL_API_H */
