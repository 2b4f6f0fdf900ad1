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

/* The backend's operators (core/ops.def): m2_cpu_<name>, defined in ssd_cpu.c (SSD fused
 * scan), rmsnorm_cpu.c, conv1d_cpu.c (conv1d and its step), ssd_step_cpu.c and
 * ssd_chunked_cpu.c (the staged pipeline). */
#define M2_OP(name, problem, kind) mamba2_status_t m2_cpu_##name(M2_OP_ARGS_##kind(problem));
#include "core/ops.def"

#endif /* MAMBA2C_CPU_H */
