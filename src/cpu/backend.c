/*
 * backend.c — the optimized CPU backend's function table: float32 (the fused SSD op also
 * bf16/f16 storage), AVX2+FMA or portable scalar kernels chosen at run time (ctx->isa),
 * threaded by the context's pool.
 * Entries of ops this backend does not implement stay NULL (the core reports
 * MAMBA2_STATUS_UNSUPPORTED for them).
 */
#include "cpu/cpu.h"

const m2_backend_ops m2_cpu_backend = {
    .name = "cpu",
    .act_dtypes = 1u << MAMBA2_DTYPE_F32,
    .ssd_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
    .ssd_forward_workspace = m2_cpu_ssd_forward_workspace,
    .ssd_forward = m2_cpu_ssd_forward,
    .ssd_backward_workspace = m2_cpu_ssd_backward_workspace,
    .ssd_backward = m2_cpu_ssd_backward,
    .rmsnorm_forward_workspace = m2_cpu_rmsnorm_forward_workspace,
    .rmsnorm_forward = m2_cpu_rmsnorm_forward,
    .rmsnorm_backward_workspace = m2_cpu_rmsnorm_backward_workspace,
    .rmsnorm_backward = m2_cpu_rmsnorm_backward,
    .conv1d_forward = m2_cpu_conv1d_forward,
    .conv1d_backward_workspace = m2_cpu_conv1d_backward_workspace,
    .conv1d_backward = m2_cpu_conv1d_backward,
    .conv1d_step = m2_cpu_conv1d_step,
    .ssd_step = m2_cpu_ssd_step,
    .ssd_chunk_cumsum = m2_cpu_ssd_chunk_cumsum,
    .ssd_bmm_chunk = m2_cpu_ssd_bmm_chunk,
    .ssd_chunk_state = m2_cpu_ssd_chunk_state,
    .ssd_state_passing = m2_cpu_ssd_state_passing,
    .ssd_chunk_scan = m2_cpu_ssd_chunk_scan,
    /* @@ more cpu ops are registered above this line @@ */
};
