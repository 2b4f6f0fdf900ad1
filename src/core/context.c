/*
 * context.c — contexts: which backend runs the ops, its thread pool, its kernel set.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

static int32_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 1024) n = 1024;
    return (int32_t)n;
}

static mamba2_status_t set_num_threads(mamba2_context_t *ctx, int32_t num_threads);

/* The caller's OpenCL objects (mamba2_context_create_opencl), or CUDA device and stream
 * (mamba2_context_create_cuda: cuda set); NULL for host mode. */
typedef struct cl_handles {
    void *context, *device, *queue;
    int cuda;
    int32_t cuda_device;
    void *cuda_stream;
} cl_handles;

#ifdef MAMBA2C_HAVE_CUDA
mamba2_status_t m2_cuda_open_device(mamba2_context_t *ctx, int32_t device, void *stream);
#endif

/* GPU backends: attach the device (src/opencl/, src/cuda/). */
static mamba2_status_t open_device(mamba2_context_t *c, const cl_handles *cl) {
    if (c->backend == MAMBA2_BACKEND_OPENCL)
        return cl ? m2_opencl_open_device(c, cl->context, cl->device, cl->queue)
                  : m2_opencl_open(c);
#ifdef MAMBA2C_HAVE_CUDA
    if (c->backend == MAMBA2_BACKEND_CUDA)
        return cl && cl->cuda ? m2_cuda_open_device(c, cl->cuda_device, cl->cuda_stream)
                              : m2_cuda_open(c);
#endif
    return MAMBA2_STATUS_OK;
}

static mamba2_status_t create(mamba2_context_t **ctx, mamba2_backend_t backend,
                              int32_t num_threads, const cl_handles *cl) {
    if (!ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx (output pointer) is NULL");
    *ctx = NULL;
    const m2_backend_ops *ops = NULL;
    switch (backend) {
    case MAMBA2_BACKEND_CPU: ops = &m2_cpu_backend; break;
    case MAMBA2_BACKEND_REF: ops = &m2_ref_backend; break;
    case MAMBA2_BACKEND_CUDA:
#ifdef MAMBA2C_HAVE_CUDA
        ops = &m2_cuda_backend;
        break;
#else
        return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                        "the CUDA backend is not built into this library");
#endif
    case MAMBA2_BACKEND_OPENCL: ops = &m2_opencl_backend; break;
    default:
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "unknown backend %d", (int)backend);
    }
    mamba2_context_t *c = calloc(1, sizeof *c);
    if (!c) return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate a context");
    c->backend = backend;
    c->ops = ops;
    c->isa = m2_detect_isa();
    c->amd = m2_detect_amd();
    atomic_init(&c->in_use, 0);
    mamba2_status_t st = set_num_threads(c, num_threads);
    if (st == MAMBA2_STATUS_OK) st = open_device(c, cl);
    if (st != MAMBA2_STATUS_OK) {
        mamba2_context_destroy(c);
        return st;
    }
    *ctx = c;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t mamba2_context_create(mamba2_context_t **ctx, mamba2_backend_t backend,
                                      int32_t num_threads) {
    m2_clear_error();
    return create(ctx, backend, num_threads, NULL);
}

mamba2_status_t mamba2_context_create_opencl(mamba2_context_t **ctx, void *cl_context,
                                             void *cl_device, void *cl_queue) {
    m2_clear_error();
    if (ctx) *ctx = NULL;
    if (!cl_context || !cl_device || !cl_queue)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cl_context, cl_device and cl_queue must all be given");
    const cl_handles cl = {cl_context, cl_device, cl_queue, 0, 0, NULL};
    return create(ctx, MAMBA2_BACKEND_OPENCL, 1, &cl);
}

mamba2_status_t mamba2_context_create_cuda(mamba2_context_t **ctx, int32_t device,
                                           void *stream) {
    m2_clear_error();
    if (ctx) *ctx = NULL;
    if (device < 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "device is %d; must be >= 0",
                        (int)device);
    const cl_handles h = {NULL, NULL, NULL, 1, device, stream};
    return create(ctx, MAMBA2_BACKEND_CUDA, 1, &h);
}

mamba2_status_t m2_ctx_enter(mamba2_context_t *ctx) {
    if (!ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    int idle = 0;
    if (!atomic_compare_exchange_strong_explicit(&ctx->in_use, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return m2_error(MAMBA2_STATUS_BUSY,
                        "the context is in use by a call from another thread; a context serves "
                        "one call at a time (use one context per calling thread)");
    return MAMBA2_STATUS_OK;
}

void m2_ctx_leave(mamba2_context_t *ctx) {
    atomic_store_explicit(&ctx->in_use, 0, memory_order_release);
}

void mamba2_context_destroy(mamba2_context_t *ctx) {
    if (!ctx) return;
    m2_gpu_close(ctx);
    m2_pool_destroy(ctx->pool);
    free(ctx);
}

static mamba2_status_t set_num_threads(mamba2_context_t *ctx, int32_t num_threads) {
    if (num_threads <= 0) num_threads = online_cpus();
    if (num_threads > 1024)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "num_threads is %d; at most 1024 supported",
                        (int)num_threads);
    if (ctx->pool && m2_pool_num_threads(ctx->pool) == num_threads) return MAMBA2_STATUS_OK;
    m2_pool *pool = NULL;
    mamba2_status_t st = m2_pool_create(&pool, num_threads);
    if (st != MAMBA2_STATUS_OK) return st;
    m2_pool_destroy(ctx->pool);
    ctx->pool = pool;
    ctx->num_threads = num_threads;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t mamba2_context_set_num_threads(mamba2_context_t *ctx, int32_t num_threads) {
    m2_clear_error();
    M2_TRY(m2_ctx_enter(ctx));
    mamba2_status_t st = set_num_threads(ctx, num_threads);
    m2_ctx_leave(ctx);
    return st;
}

int32_t mamba2_context_get_num_threads(const mamba2_context_t *ctx) {
    return ctx ? ctx->num_threads : 0;
}

mamba2_backend_t mamba2_context_get_backend(const mamba2_context_t *ctx) {
    return ctx ? ctx->backend : MAMBA2_BACKEND_CPU;
}

const char *mamba2_context_get_isa(const mamba2_context_t *ctx) {
    if (!ctx) return "none";
    if (ctx->backend == MAMBA2_BACKEND_REF) return "reference";
    if (ctx->backend == MAMBA2_BACKEND_OPENCL || ctx->backend == MAMBA2_BACKEND_CUDA) return "gpu";
    switch (ctx->isa) {
    case M2_ISA_AVX512: return "avx512";
    case M2_ISA_AVX2: return "avx2+fma";
    case M2_ISA_NEON: return "neon";
    default: return "scalar";
    }
}

static mamba2_status_t force_isa(mamba2_context_t *ctx, const char *isa);

mamba2_status_t mamba2_context_force_isa(mamba2_context_t *ctx, const char *isa) {
    m2_clear_error();
    M2_TRY(m2_ctx_enter(ctx));
    mamba2_status_t st = force_isa(ctx, isa);
    m2_ctx_leave(ctx);
    return st;
}

static mamba2_status_t force_isa(mamba2_context_t *ctx, const char *isa) {
    if (!isa) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "isa is NULL");
    if (strcmp(isa, "scalar") == 0) {
        ctx->isa = M2_ISA_SCALAR;
        return MAMBA2_STATUS_OK;
    }
    /* a set below the detected level of the same architecture is always usable */
    if (strcmp(isa, "avx2+fma") == 0 || strcmp(isa, "avx2") == 0) {
        if (!m2_isa_usable(M2_ISA_AVX2, m2_detect_isa()))
            return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                            "this CPU does not support AVX2+FMA (or MAMBA2C_ISA caps it)");
        ctx->isa = M2_ISA_AVX2;
        return MAMBA2_STATUS_OK;
    }
    if (strcmp(isa, "avx512") == 0) {
        if (!m2_isa_usable(M2_ISA_AVX512, m2_detect_isa()))
            return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                            "this CPU does not support AVX-512 F/VL/BW/DQ (or MAMBA2C_ISA caps it)");
        ctx->isa = M2_ISA_AVX512;
        return MAMBA2_STATUS_OK;
    }
    if (strcmp(isa, "neon") == 0) {
        if (!m2_isa_usable(M2_ISA_NEON, m2_detect_isa()))
            return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                            "this CPU has no NEON (AArch64 ASIMD) set (or MAMBA2C_ISA caps it)");
        ctx->isa = M2_ISA_NEON;
        return MAMBA2_STATUS_OK;
    }
    if (strcmp(isa, "auto") == 0) {
        ctx->isa = m2_detect_isa();
        return MAMBA2_STATUS_OK;
    }
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                    "isa is \"%s\"; expected \"scalar\", \"avx2+fma\", \"avx512\", \"neon\" or \"auto\"",
                    isa);
}
