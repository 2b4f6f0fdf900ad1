/*
 * cu_loader.h — the few CUDA driver-API entry points a test or benchmark needs to drive the
 * CUDA device mode (mamba2_context_create_cuda) itself: device memory, a stream, events.
 * Looked up in libcuda.so.1 with dlopen, so the program builds without CUDA headers or
 * libraries, as the library does. The types are the driver API's ABI (handles are pointers,
 * device pointers 64-bit integers, results int).
 */
#ifndef MAMBA2C_TEST_CU_LOADER_H
#define MAMBA2C_TEST_CU_LOADER_H

#include <dlfcn.h>
#include <stddef.h>

typedef int tcu_result;
typedef unsigned long long tcu_ptr;
typedef void *tcu_handle; /* CUcontext, CUstream, CUevent */

#define TCU_FUNCS(X)                                                                           \
    X(tcu_result, cuInit, (unsigned int))                                                      \
    X(tcu_result, cuDeviceGetCount, (int *))                                                   \
    X(tcu_result, cuDeviceGet, (int *, int))                                                   \
    X(tcu_result, cuDeviceGetName, (char *, int, int))                                         \
    X(tcu_result, cuDeviceTotalMem_v2, (size_t *, int))                                        \
    X(tcu_result, cuDeviceGetAttribute, (int *, int, int))                                     \
    X(tcu_result, cuDevicePrimaryCtxRetain, (tcu_handle *, int))                               \
    X(tcu_result, cuDevicePrimaryCtxRelease_v2, (int))                                         \
    X(tcu_result, cuCtxSetCurrent, (tcu_handle))                                               \
    X(tcu_result, cuMemAlloc_v2, (tcu_ptr *, size_t))                                          \
    X(tcu_result, cuMemFree_v2, (tcu_ptr))                                                     \
    X(tcu_result, cuMemGetInfo_v2, (size_t *, size_t *))                                       \
    X(tcu_result, cuMemcpyHtoD_v2, (tcu_ptr, const void *, size_t))                            \
    X(tcu_result, cuMemcpyDtoH_v2, (void *, tcu_ptr, size_t))                                  \
    X(tcu_result, cuMemsetD8_v2, (tcu_ptr, unsigned char, size_t))                             \
    X(tcu_result, cuStreamCreate, (tcu_handle *, unsigned int))                                \
    X(tcu_result, cuStreamDestroy_v2, (tcu_handle))                                            \
    X(tcu_result, cuStreamSynchronize, (tcu_handle))                                           \
    X(tcu_result, cuEventCreate, (tcu_handle *, unsigned int))                                 \
    X(tcu_result, cuEventDestroy_v2, (tcu_handle))                                             \
    X(tcu_result, cuEventRecord, (tcu_handle, tcu_handle))                                     \
    X(tcu_result, cuEventSynchronize, (tcu_handle))                                            \
    X(tcu_result, cuEventElapsedTime, (float *, tcu_handle, tcu_handle))

typedef struct tcu {
#define TCU_X(ret, name, args) ret(*name) args;
    TCU_FUNCS(TCU_X)
#undef TCU_X
    int device;
    tcu_handle ctx;
} tcu;

/* 1 when the driver loads, has device `ordinal`, and its primary context is current. */
static inline int tcu_open(tcu *t, int ordinal) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
#define TCU_X(ret, name, args)                                                                 \
    *(void **)&t->name = dlsym(h, #name);                                                      \
    if (!t->name) return 0;
    TCU_FUNCS(TCU_X)
#undef TCU_X
    int n = 0;
    if (t->cuInit(0) || t->cuDeviceGetCount(&n) || ordinal >= n) return 0;
    if (t->cuDeviceGet(&t->device, ordinal) || t->cuDevicePrimaryCtxRetain(&t->ctx, t->device))
        return 0;
    return t->cuCtxSetCurrent(t->ctx) == 0;
}

#endif /* MAMBA2C_TEST_CU_LOADER_H */
