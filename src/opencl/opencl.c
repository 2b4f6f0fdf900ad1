/*
 * opencl.c — the OpenCL device layer (m2g_dev of src/gpu/gpu.h) over OpenCL 1.2.
 *
 * libOpenCL.so.1 (the ICD loader) is opened with dlopen when the first OpenCL context is
 * created and its entry points are looked up once; libmamba2c itself never links it. A
 * context holds one device, one in-order queue, the program (this library's kernel files,
 * src/gpu/kernels/, embedded at build time) built once for that context, and every kernel
 * object looked up once. Built program binaries are kept per device for the life of the
 * process, so a second context on the same device skips the compiler.
 *
 * Device choice: MAMBA2C_OPENCL_DEVICE = an index into all devices of all platforms in
 * platform order (as `clinfo -l` lists them), or a case-sensitive substring of
 * "<platform name> / <device name>"; unset: the first available device.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "opencl/cl_api.h"
#include "opencl/opencl.h"

/* ---- the ICD loader ------------------------------------------------------------------- */

static struct {
#define M2CL_PTR(ret, name, args) ret(*name) args;
    M2CL_FUNCS(M2CL_PTR)
#undef M2CL_PTR
} cl;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256]; /* empty when the loader and every entry point were found */

static void load_api(void) {
    void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error,
                 "no OpenCL ICD loader (libOpenCL.so.1) could be loaded: install one and a "
                 "device driver (e.g. ocl-icd-libopencl1 and pocl-opencl-icd)");
        return;
    }
#define M2CL_SYM(ret, name, args)                                                              \
    *(void **)(&cl.name) = dlsym(h, #name);                                                    \
    if (!cl.name) {                                                                            \
        snprintf(load_error, sizeof load_error, "the OpenCL loader lacks %s (OpenCL 1.2)", #name); \
        return;                                                                                \
    }
    M2CL_FUNCS(M2CL_SYM)
#undef M2CL_SYM
}

static mamba2_status_t cl_fail(cl_int err, const char *what) {
    return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "OpenCL: %s failed (error %d)", what, (int)err);
}

/* ---- per-process cache of program binaries ---------------------------------------------- */

typedef struct bin_entry {
    cl_device_id dev;
    size_t size;
    unsigned char *bytes;
    struct bin_entry *next;
} bin_entry;
static bin_entry *bin_cache;
static pthread_mutex_t bin_lock = PTHREAD_MUTEX_INITIALIZER;

static bin_entry *bin_find(cl_device_id dev) {
    for (bin_entry *e = bin_cache; e; e = e->next)
        if (e->dev == dev) return e;
    return NULL;
}

static void bin_store(cl_program prog, cl_device_id dev) {
    size_t size = 0;
    if (cl.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS ||
        size == 0)
        return;
    bin_entry *e = calloc(1, sizeof *e);
    unsigned char *bytes = malloc(size);
    if (!e || !bytes ||
        cl.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bytes, &bytes, NULL) != CL_SUCCESS) {
        free(e);
        free(bytes);
        return;
    }
    e->dev = dev;
    e->size = size;
    e->bytes = bytes;
    pthread_mutex_lock(&bin_lock);
    if (!bin_find(dev)) {
        e->next = bin_cache;
        bin_cache = e;
        e = NULL;
    }
    pthread_mutex_unlock(&bin_lock);
    if (e) {
        free(e->bytes);
        free(e);
    }
}

/* ---- the device ------------------------------------------------------------------------- */

typedef struct cl_dev {
    m2g_dev base; /* first: a cl_dev * is an m2g_dev * */
    cl_context context;
    cl_device_id device;
    cl_command_queue queue;
    cl_program program;
    cl_kernel kernels[M2G_NUM_KERNELS];
} cl_dev;

static mamba2_status_t d_alloc(m2g_dev *d, size_t bytes, m2g_mem *mem) {
    cl_int err = 0;
    cl_mem m = cl.clCreateBuffer(((cl_dev *)d)->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!m || err != CL_SUCCESS)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "OpenCL: cannot allocate %zu bytes on %s (error %d)", bytes, d->name,
                        (int)err);
    *mem = (m2g_mem)(uintptr_t)m;
    return MAMBA2_STATUS_OK;
}
static void d_release(m2g_dev *d, m2g_mem mem) {
    (void)d;
    if (mem) cl.clReleaseMemObject((cl_mem)(uintptr_t)mem);
}
static mamba2_status_t d_write(m2g_dev *d, m2g_mem dst, size_t off, const void *src, size_t n) {
    cl_int e = cl.clEnqueueWriteBuffer(((cl_dev *)d)->queue, (cl_mem)(uintptr_t)dst, CL_TRUE, off,
                                       n, src, 0, NULL, NULL);
    return e == CL_SUCCESS ? MAMBA2_STATUS_OK : cl_fail(e, "clEnqueueWriteBuffer");
}
static mamba2_status_t d_read(m2g_dev *d, void *dst, m2g_mem src, size_t off, size_t n) {
    cl_int e = cl.clEnqueueReadBuffer(((cl_dev *)d)->queue, (cl_mem)(uintptr_t)src, CL_TRUE, off,
                                      n, dst, 0, NULL, NULL);
    return e == CL_SUCCESS ? MAMBA2_STATUS_OK : cl_fail(e, "clEnqueueReadBuffer");
}
static mamba2_status_t d_launch(m2g_dev *d, int id, const size_t groups[3], const size_t local[3],
                                size_t smem, int nargs, const m2g_arg *args) {
    cl_dev *c = (cl_dev *)d;
    if (id < 0 || id >= M2G_NUM_KERNELS || nargs > M2G_MAX_ARGS || smem)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "OpenCL: bad launch of kernel %d", id);
    if (groups[0] == 0 || groups[1] == 0 || groups[2] == 0) return MAMBA2_STATUS_OK;
    m2g_trace_launch(m2g_kernel_names[id], groups, local, 0, nargs, args);
    cl_kernel k = c->kernels[id];
    for (int i = 0; i < nargs; i++) {
        const m2g_arg *a = &args[i];
        cl_mem m = (cl_mem)(uintptr_t)a->v.mem;
        cl_int e = a->kind == M2G_ARG_MEM   ? cl.clSetKernelArg(k, (cl_uint)i, sizeof m, &m)
                   : a->kind == M2G_ARG_I64 ? cl.clSetKernelArg(k, (cl_uint)i, 8, &a->v.i64)
                   : a->kind == M2G_ARG_I32 ? cl.clSetKernelArg(k, (cl_uint)i, 4, &a->v.i32)
                                            : cl.clSetKernelArg(k, (cl_uint)i, 4, &a->v.f32);
        if (e != CL_SUCCESS)
            return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                            "OpenCL: argument %d of %s rejected (error %d)", i,
                            m2g_kernel_names[id], (int)e);
    }
    size_t global[3];
    for (int i = 0; i < 3; i++) global[i] = groups[i] * local[i];
    cl_int e = cl.clEnqueueNDRangeKernel(c->queue, k, 3, NULL, global, local, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "OpenCL: launch of %s failed (error %d)",
                        m2g_kernel_names[id], (int)e);
    return MAMBA2_STATUS_OK;
}
static mamba2_status_t d_finish(m2g_dev *d) {
    cl_int e = cl.clFinish(((cl_dev *)d)->queue);
    return e == CL_SUCCESS ? MAMBA2_STATUS_OK : cl_fail(e, "clFinish");
}
static void d_destroy(m2g_dev *d) {
    cl_dev *c = (cl_dev *)d;
    if (!c) return;
    if (c->queue) cl.clFinish(c->queue);
    if (d->dummy) d_release(d, d->dummy);
    if (d->arena) d_release(d, d->arena);
    for (int i = 0; i < M2G_NUM_KERNELS; i++)
        if (c->kernels[i]) cl.clReleaseKernel(c->kernels[i]);
    if (c->program) cl.clReleaseProgram(c->program);
    if (c->queue) cl.clReleaseCommandQueue(c->queue);
    if (c->context) cl.clReleaseContext(c->context);
    free(c);
}

/* ---- program ------------------------------------------------------------------------------ */

static const char build_options[] = "-cl-std=CL1.2";

static mamba2_status_t build_program(cl_dev *c) {
    cl_int err = CL_SUCCESS;
    pthread_mutex_lock(&bin_lock);
    bin_entry *e = bin_find(c->device);
    pthread_mutex_unlock(&bin_lock);
    int from_binary = 0;
    if (e) { /* entries are never removed: safe to read unlocked */
        const unsigned char *bytes = e->bytes;
        cl_int bst = 0;
        c->program = cl.clCreateProgramWithBinary(c->context, 1, &c->device, &e->size, &bytes,
                                                  &bst, &err);
        from_binary = c->program && err == CL_SUCCESS && bst == CL_SUCCESS;
        if (!from_binary && c->program) {
            cl.clReleaseProgram(c->program);
            c->program = NULL;
        }
    }
    if (!from_binary) {
        c->program = cl.clCreateProgramWithSource(c->context, (cl_uint)m2g_kernel_sources_count,
                                                  m2g_kernel_sources, NULL, &err);
        if (!c->program || err != CL_SUCCESS) return cl_fail(err, "clCreateProgramWithSource");
    }
    err = cl.clBuildProgram(c->program, 1, &c->device, build_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char log[512] = "";
        cl.clGetProgramBuildInfo(c->program, c->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log,
                                 NULL);
        log[sizeof log - 1] = 0;
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                        "OpenCL: building the kernels for %s failed (error %d): %s",
                        c->base.name, (int)err, log);
    }
    if (!from_binary) bin_store(c->program, c->device);
    for (int i = 0; i < M2G_NUM_KERNELS; i++) {
        c->kernels[i] = cl.clCreateKernel(c->program, m2g_kernel_names[i], &err);
        if (!c->kernels[i] || err != CL_SUCCESS)
            return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "OpenCL: kernel %s not found (error %d)",
                            m2g_kernel_names[i], (int)err);
    }
    return MAMBA2_STATUS_OK;
}

/* ---- device choice ------------------------------------------------------------------------ */

#define MAX_DEVICES 64

static mamba2_status_t pick_device(cl_device_id *out, char *name, size_t name_size) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_int err = cl.clGetPlatformIDs(16, plats, &np);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && np == 0))
        return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                        "OpenCL: no platform is installed (no ICD: e.g. install pocl-opencl-icd "
                        "or a GPU driver)");
    if (err != CL_SUCCESS) return cl_fail(err, "clGetPlatformIDs");
    if (np > 16) np = 16;
    const char *want = getenv("MAMBA2C_OPENCL_DEVICE");
    if (want && !*want) want = NULL;
    char *end = NULL;
    long want_index = want ? strtol(want, &end, 10) : -1;
    const int by_index = want && end && *end == 0 && want_index >= 0;
    int count = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        if (cl.clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        if (nd > MAX_DEVICES) nd = MAX_DEVICES;
        char pname[64] = "";
        cl.clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        for (cl_uint i = 0; i < nd; i++, count++) {
            char dname[96] = "";
            cl_bool avail = 0;
            cl.clGetDeviceInfo(devs[i], CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
            cl.clGetDeviceInfo(devs[i], CL_DEVICE_AVAILABLE, sizeof avail, &avail, NULL);
            char full[176];
            snprintf(full, sizeof full, "%s / %s", pname, dname);
            const int match = !want ? avail : by_index ? count == want_index : strstr(full, want) != NULL;
            if (match) {
                *out = devs[i];
                snprintf(name, name_size, "%s", full);
                return MAMBA2_STATUS_OK;
            }
        }
    }
    if (want)
        return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                        "OpenCL: no device matches MAMBA2C_OPENCL_DEVICE=\"%s\" (%d devices found)",
                        want, count);
    return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE, "OpenCL: no available device (%d found)",
                    count);
}

/* ---- contexts ------------------------------------------------------------------------------ */

static mamba2_status_t finish_open(mamba2_context_t *ctx, cl_dev *c) {
    c->base.api = "OpenCL";
    c->base.alloc = d_alloc;
    c->base.release = d_release;
    c->base.write = d_write;
    c->base.read = d_read;
    c->base.launch = d_launch;
    c->base.finish = d_finish;
    c->base.destroy = d_destroy;
    /* the 16x16 kernels need 256 work-items per group and ~2.2 KB of local memory */
    size_t wg = 0;
    cl_ulong lmem = 0;
    cl.clGetDeviceInfo(c->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    cl.clGetDeviceInfo(c->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
    if (wg < 256 || lmem < 4096) {
        const size_t w = wg;
        const unsigned long long lm = (unsigned long long)lmem;
        d_destroy(&c->base);
        return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                        "OpenCL: the device allows %zu work-items per group and %llu bytes of "
                        "local memory; the kernels need 256 and 4096",
                        w, lm);
    }
    c->base.local_mem = (size_t)lmem;
    mamba2_status_t st = build_program(c);
    if (st == MAMBA2_STATUS_OK) st = d_alloc(&c->base, 64, &c->base.dummy);
    if (st != MAMBA2_STATUS_OK) {
        d_destroy(&c->base);
        return st;
    }
    ctx->gpu = &c->base;
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t load(void) {
    pthread_once(&load_once, load_api);
    if (load_error[0]) return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE, "%s", load_error);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_opencl_open(mamba2_context_t *ctx) {
    M2_TRY(load());
    cl_device_id dev = NULL;
    char name[176];
    M2_TRY(pick_device(&dev, name, sizeof name));
    cl_dev *c = calloc(1, sizeof *c);
    if (!c) return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate an OpenCL context");
    snprintf(c->base.name, sizeof c->base.name, "%s", name);
    c->device = dev;
    cl_int err = CL_SUCCESS;
    c->context = cl.clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    if (!c->context || err != CL_SUCCESS) {
        free(c);
        return cl_fail(err, "clCreateContext");
    }
    c->queue = cl.clCreateCommandQueue(c->context, dev, 0, &err); /* in order */
    if (!c->queue || err != CL_SUCCESS) {
        d_destroy(&c->base);
        return cl_fail(err, "clCreateCommandQueue");
    }
    return finish_open(ctx, c);
}

mamba2_status_t m2_opencl_open_device(mamba2_context_t *ctx, void *context, void *device,
                                      void *queue) {
    M2_TRY(load());
    cl_dev *c = calloc(1, sizeof *c);
    if (!c) return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate an OpenCL context");
    c->base.device_memory = 1;
    c->context = (cl_context)context;
    c->device = (cl_device_id)device;
    c->queue = (cl_command_queue)queue;
    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    if (cl.clGetCommandQueueInfo(c->queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL) != CL_SUCCESS ||
        cl.clGetCommandQueueInfo(c->queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL) != CL_SUCCESS ||
        qctx != c->context || qdev != c->device) {
        free(c);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "OpenCL: the queue is not a valid queue of the given context and device");
    }
    cl.clRetainContext(c->context);
    cl.clRetainCommandQueue(c->queue);
    char dname[96] = "";
    cl.clGetDeviceInfo(c->device, CL_DEVICE_NAME, sizeof dname - 1, dname, NULL);
    snprintf(c->base.name, sizeof c->base.name, "%s", dname);
    return finish_open(ctx, c);
}

/* ---- device mode: the caller's buffers ------------------------------------------------------ */

static mamba2_status_t device_ctx(mamba2_context_t *ctx, m2g_dev **d) {
    m2_clear_error();
    if (!ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    if (ctx->backend != MAMBA2_BACKEND_OPENCL || !ctx->gpu || !m2g_of(ctx)->device_memory)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "ctx is not a device-mode OpenCL context (mamba2_context_create_opencl)");
    *d = m2g_of(ctx);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t mamba2_opencl_register_buffer(mamba2_context_t *ctx, void *cl_buffer,
                                              size_t bytes, void **base) {
    m2g_dev *d = NULL;
    M2_TRY(device_ctx(ctx, &d));
    if (!base) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "base (output pointer) is NULL");
    *base = NULL;
    return m2g_register(d, (m2g_mem)(uintptr_t)cl_buffer, bytes, base);
}

mamba2_status_t mamba2_opencl_unregister_buffer(mamba2_context_t *ctx, void *cl_buffer) {
    m2g_dev *d = NULL;
    M2_TRY(device_ctx(ctx, &d));
    return m2g_unregister(d, (m2g_mem)(uintptr_t)cl_buffer);
}
