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

/* The caller's OpenCL objects (mamba2_context_create_opencl), NULL for host mode. */
typedef struct cl_handles {
    void *context, *device, *queue;
} cl_handles;

/* GPU backends: attach the device (src/opencl/, src/cuda/). */
static mamba2_status_t open_device(mamba2_context_t *c, const cl_handles *cl) {
    if (c->backend == MAMBA2_BACKEND_OPENCL)
        return cl ? m2_opencl_open_device(c, cl->context, cl->device, cl->queue)
                  : m2_opencl_open(c);
#ifdef MAMBA2C_HAVE_CUDA
    if (c->backend == MAMBA2_BACKEND_CUDA) return m2_cuda_open(c);
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
    mamba2_status_t st = mamba2_context_set_num_threads(c, num_threads);
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
    const cl_handles cl = {cl_context, cl_device, cl_queue};
    return create(ctx, MAMBA2_BACKEND_OPENCL, 1, &cl);
}

void mamba2_context_destroy(mamba2_context_t *ctx) {
    if (!ctx) return;
    m2_gpu_close(ctx);
    m2_pool_destroy(ctx->pool);
    free(ctx);
}

mamba2_status_t mamba2_context_set_num_threads(mamba2_context_t *ctx, int32_t num_threads) {
    m2_clear_error();
    if (!ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
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
    return ctx->isa == M2_ISA_AVX512 ? "avx512" : ctx->isa == M2_ISA_AVX2 ? "avx2+fma" : "scalar";
}

mamba2_status_t mamba2_context_force_isa(mamba2_context_t *ctx, const char *isa) {
    m2_clear_error();
    if (!ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    if (!isa) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "isa is NULL");
    if (strcmp(isa, "scalar") == 0) {
        ctx->isa = M2_ISA_SCALAR;
        return MAMBA2_STATUS_OK;
    }
    /* a set below the detected level is always usable (the levels are ordered) */
    if (strcmp(isa, "avx2+fma") == 0 || strcmp(isa, "avx2") == 0) {
        if (m2_detect_isa() < M2_ISA_AVX2)
            return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                            "this CPU does not support AVX2+FMA (or MAMBA2C_ISA caps it)");
        ctx->isa = M2_ISA_AVX2;
        return MAMBA2_STATUS_OK;
    }
    if (strcmp(isa, "avx512") == 0) {
        if (m2_detect_isa() < M2_ISA_AVX512)
            return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                            "this CPU does not support AVX-512 F/VL/BW/DQ (or MAMBA2C_ISA caps it)");
        ctx->isa = M2_ISA_AVX512;
        return MAMBA2_STATUS_OK;
    }
    if (strcmp(isa, "auto") == 0) {
        ctx->isa = m2_detect_isa();
        return MAMBA2_STATUS_OK;
    }
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                    "isa is \"%s\"; expected \"scalar\", \"avx2+fma\", \"avx512\" or \"auto\"",
                    isa);
}
