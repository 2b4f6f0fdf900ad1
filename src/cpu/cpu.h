/*
 * cpu.h — entry points of the optimized CPU backend (src/cpu/), one block per operator.
 * The backend's function table (src/cpu/backend.c) points at these. Each op dispatches on
 * ctx->isa to its per-ISA kernel files (scalar, avx2+fma; conv1d and the fused SSD scan also
 * avx512, where the other ops take their avx2 kernels).
 */
#ifndef MAMBA2C_CPU_H
#define MAMBA2C_CPU_H

#include "core/internal.h"

/* ---- helpers every op's planner uses ------------------------------------------------- */

/* Threads to plan per-thread scratch for: scratch is indexed by the pool's worker id, so
 * every worker (and at least the requested count) gets a slot. */
static inline int m2_cpu_plan_threads(const mamba2_context_t *ctx) {
    int n = ctx->pool ? m2_pool_num_threads(ctx->pool) : 1;
    if (ctx->num_threads > n) n = ctx->num_threads;
    return n < 1 ? 1 : n;
}

/* Run tasks 0..ntasks-1 on the context's pool (in the calling thread without one). */
static inline void m2_cpu_run_tasks(mamba2_context_t *ctx, int64_t ntasks, m2_task_fn fn,
                                    void *arg) {
    if (ntasks <= 0) return;
    if (ctx->pool)
        m2_pool_run(ctx->pool, ntasks, fn, arg);
    else
        for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
}

/* x rounded up to a multiple of 64 (workspace layouts are 64-byte aligned) */
static inline size_t m2_round64(size_t x) { return (x + 63) & ~(size_t)63; }

/* SSD fused scan (ssd_cpu.c) */
mamba2_status_t m2_cpu_ssd_forward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                             size_t *bytes);
mamba2_status_t m2_cpu_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);
mamba2_status_t m2_cpu_ssd_backward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                              size_t *bytes);
mamba2_status_t m2_cpu_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);

/* gated RMSNorm (rmsnorm_cpu.c) */
mamba2_status_t m2_cpu_rmsnorm_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_rmsnorm_problem *pr, size_t *bytes);
mamba2_status_t m2_cpu_rmsnorm_forward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                       void *ws);
mamba2_status_t m2_cpu_rmsnorm_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_rmsnorm_problem *pr, size_t *bytes);
mamba2_status_t m2_cpu_rmsnorm_backward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                        void *ws);

/* causal depthwise conv1d and its decode step (conv1d_cpu.c) */
mamba2_status_t m2_cpu_conv1d_forward(mamba2_context_t *ctx, const m2_conv1d_problem *pr);
mamba2_status_t m2_cpu_conv1d_backward_workspace(const mamba2_context_t *ctx,
                                                 const m2_conv1d_problem *pr, size_t *bytes);
mamba2_status_t m2_cpu_conv1d_backward(mamba2_context_t *ctx, const m2_conv1d_problem *pr,
                                       void *ws);
mamba2_status_t m2_cpu_conv1d_step(mamba2_context_t *ctx, const m2_conv1d_problem *pr);

/* SSD decode step (ssd_step_cpu.c) */
mamba2_status_t m2_cpu_ssd_step(mamba2_context_t *ctx, const m2_ssd_step_problem *pr);

/* staged SSD chunk pipeline (ssd_chunked_cpu.c) */
mamba2_status_t m2_cpu_ssd_chunk_cumsum(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_cpu_ssd_bmm_chunk(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_cpu_ssd_chunk_state(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_cpu_ssd_state_passing(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_cpu_ssd_chunk_scan(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
/* @@ more cpu ops are declared above this line @@ */

#endif /* MAMBA2C_CPU_H */
