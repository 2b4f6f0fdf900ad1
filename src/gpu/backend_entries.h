/*
 * backend_entries.h — the op entries every GPU backend table shares (designated
 * initializers of m2_backend_ops), included inside src/opencl/backend.c and
 * src/cuda/backend.c: the op code of src/gpu/ is the same for both APIs, so an op family
 * registers here once. One section per op family.
 */
/* ---- SSD: fused forward / backward, staged stages (src/gpu/ssd_ops.c) ---- */
.ssd_forward_workspace = m2g_ssd_forward_workspace,
.ssd_forward = m2g_ssd_forward,
.ssd_backward_workspace = m2g_ssd_backward_workspace,
.ssd_backward = m2g_ssd_backward,
.ssd_chunk_cumsum = m2g_ssd_chunk_cumsum,
.ssd_bmm_chunk = m2g_ssd_bmm_chunk,
.ssd_chunk_state = m2g_ssd_chunk_state,
.ssd_state_passing = m2g_ssd_state_passing,
.ssd_chunk_scan = m2g_ssd_chunk_scan,
/* @@ more GPU op entries go above this line @@ */
