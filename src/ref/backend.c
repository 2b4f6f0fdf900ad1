/*
 * backend.c — the reference backend's function table: float64 accumulation, single thread,
 * f32 or f64 storage (and bf16/f16 activation storage for the fused SSD op). It documents the
 * math and serves as the oracle of every test.
 */
#include "ref/ref.h"

const m2_backend_ops m2_ref_backend = {
    .name = "ref",
    .act_dtypes = (1u << MAMBA2_DTYPE_F32) | (1u << MAMBA2_DTYPE_F64),
    /* the SSD kernels load and store every activation through m2r_load/m2r_store */
    .ssd_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
    .ssd_forward_workspace = m2_ref_ssd_forward_workspace,
    .ssd_forward = m2_ref_ssd_forward,
    .ssd_backward_workspace = m2_ref_ssd_backward_workspace,
    .ssd_backward = m2_ref_ssd_backward,
    .rmsnorm_forward_workspace = m2_ref_rmsnorm_forward_workspace,
    .rmsnorm_forward = m2_ref_rmsnorm_forward,
    .rmsnorm_backward_workspace = m2_ref_rmsnorm_backward_workspace,
    .rmsnorm_backward = m2_ref_rmsnorm_backward,
    .conv1d_forward = m2_ref_conv1d_forward,
    .conv1d_backward_workspace = m2_ref_conv1d_backward_workspace,
    .conv1d_backward = m2_ref_conv1d_backward,
    .conv1d_step = m2_ref_conv1d_step,
    .ssd_step = m2_ref_ssd_step,
    .ssd_chunk_cumsum = m2_ref_ssd_chunk_cumsum,
    .ssd_bmm_chunk = m2_ref_ssd_bmm_chunk,
    .ssd_chunk_state = m2_ref_ssd_chunk_state,
    .ssd_state_passing = m2_ref_ssd_state_passing,
    .ssd_chunk_scan = m2_ref_ssd_chunk_scan,
    /* @@ more reference ops are registered above this line @@ */
};
