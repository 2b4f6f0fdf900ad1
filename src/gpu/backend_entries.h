/*
 * backend_entries.h — the op entries every GPU backend table shares (designated
 * initializers of m2_backend_ops), included inside src/opencl/backend.c and
 * src/cuda/backend.c: the op code of src/gpu/ is the same for both APIs, so an op family
 * registers here once. One section per op family.
 */
/* ---- SSD: fused forward / backward, staged stages (src/gpu/ssd_ops.c) ---- */
.ssd_forward_workspace = m2g_ssd_forward_workspace,
#ifndef M2G_OWN_SSD_FUSED /* a backend with its own fused SSD entries (CUDA: src/cuda/ssd_tc.c) */
.ssd_forward = m2g_ssd_forward,
.ssd_backward = m2g_ssd_backward,
#endif
.ssd_backward_workspace = m2g_ssd_backward_workspace,
.ssd_chunk_cumsum = m2g_ssd_chunk_cumsum,
.ssd_bmm_chunk = m2g_ssd_bmm_chunk,
.ssd_chunk_state = m2g_ssd_chunk_state,
.ssd_state_passing = m2g_ssd_state_passing,
.ssd_chunk_scan = m2g_ssd_chunk_scan,
/* ---- gated RMSNorm (src/gpu/ops_rmsnorm.c) ---- */
.rmsnorm_forward_workspace = m2g_rmsnorm_forward_workspace,
.rmsnorm_forward = m2g_rmsnorm_forward,
.rmsnorm_backward_workspace = m2g_rmsnorm_backward_workspace,
.rmsnorm_backward = m2g_rmsnorm_backward,
/* ---- causal conv1d and its decode step (src/gpu/ops_conv1d.c) ---- */
.conv1d_forward = m2g_conv1d_forward,
.conv1d_backward_workspace = m2g_conv1d_backward_workspace,
.conv1d_backward = m2g_conv1d_backward,
.conv1d_step = m2g_conv1d_step,
/* ---- SSD decode step (src/gpu/ops_step.c) ---- */
.ssd_step = m2g_ssd_step,
/* @@ more GPU op entries go above this line @@ */
