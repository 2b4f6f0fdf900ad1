/*
 * list.h — every GPU kernel, one M2G_KERNEL(name) line each (an X-macro list). The host
 * layers look each name up once per context (clCreateKernel / cuModuleGetFunction) and
 * launch it by its id M2G_K_<name> (src/gpu/gpu.h). A kernel's name states its work-group
 * shape: _16x16 is a 16 x 16 group (local size {16, 16, 1}), _wi64 a 1-D group of 64
 * work-items each doing one task. Keep one section per op family (and its kernel file).
 */
/* ---- SSD staged pipeline / fused forward: ssd_chunked.cl ---- */
M2G_KERNEL(m2_ssd_chunk_cumsum_wi64)
M2G_KERNEL(m2_ssd_bmm_chunk_16x16)
M2G_KERNEL(m2_ssd_chunk_state_16x16)
M2G_KERNEL(m2_ssd_state_passing_wi64)
M2G_KERNEL(m2_ssd_chunk_scan_16x16)
M2G_KERNEL(m2_ssd_pos_state_16x16)
M2G_KERNEL(m2_ssd_scan_seq_16x16)
/* ---- SSD fused backward: ssd_bwd.cl ---- */
M2G_KERNEL(m2_ssd_bwd_gate_wi64)
M2G_KERNEL(m2_ssd_bwd_state_passing_wi64)
M2G_KERNEL(m2_ssd_bwd_dx_16x16)
M2G_KERNEL(m2_ssd_bwd_E_16x16)
M2G_KERNEL(m2_ssd_bwd_dcb_wi64)
M2G_KERNEL(m2_ssd_bwd_rq_wi64)
M2G_KERNEL(m2_ssd_bwd_dbc_16x16)
M2G_KERNEL(m2_ssd_bwd_tok_16x16)
M2G_KERNEL(m2_ssd_bwd_dt_wi64)
M2G_KERNEL(m2_ssd_bwd_dD_wi64)
M2G_KERNEL(m2_ssd_bwd_params_wi64)
/* ---- conv1d, gated RMSNorm, decode steps: their own sections below ---- */
/* ---- causal conv1d: conv1d.cl ---- */
M2G_KERNEL(m2_conv1d_fwd_wi64)
M2G_KERNEL(m2_conv1d_final_wi64)
M2G_KERNEL(m2_conv1d_bwd_t64_wi64)
M2G_KERNEL(m2_conv1d_bwd_dinit_wi64)
M2G_KERNEL(m2_conv1d_bwd_reduce_wi64)
/* ---- gated RMSNorm: rmsnorm.cl (_wg128: one 1-D group of 128 per row group) ---- */
M2G_KERNEL(m2_rmsnorm_fwd_wg128)
M2G_KERNEL(m2_rmsnorm_bwd_wg128)
M2G_KERNEL(m2_rmsnorm_bwd_dw_r64_wi64)
M2G_KERNEL(m2_rmsnorm_bwd_reduce_wi64)
/* ---- decode steps: step.cl ---- */
M2G_KERNEL(m2_conv1d_step_wi64)
M2G_KERNEL(m2_ssd_step_32x4)
/* ---- index tables built on the device: tables.cl ---- */
M2G_KERNEL(m2_idx_load_wi64)
M2G_KERNEL(m2_ssd_seq_table_wi64)
M2G_KERNEL(m2_ssd_chunk_table_wi64)
M2G_KERNEL(m2_ssd_pos_table_wi64)
/* @@ more kernels go above this line @@ */
