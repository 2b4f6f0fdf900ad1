/*
 * backend.c — the optimized CPU backend's function table: float32 (the fused SSD op and the
 * decode steps also bf16/f16 storage), AVX2+FMA or portable scalar kernels chosen at run time
 * (ctx->isa), threaded by the context's pool.
 * Entries of ops this backend does not implement stay NULL (the core reports
 * MAMBA2_STATUS_UNSUPPORTED for them).
 */
#include "cpu/cpu.h"

const m2_backend_ops m2_cpu_backend = {
    .name = "cpu",
    .act_dtypes = 1u << MAMBA2_DTYPE_F32,
    .ssd_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
    /* the decode steps widen half activations to float32 per block (conv1d_cpu.c,
     * ssd_step_cpu.c; the reference through m2r_load/m2r_store) */
    .step_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
    /* every operator of core/ops.def */
#define M2_OP(name, problem, kind) .name = m2_cpu_##name,
#include "core/ops.def"
};
