/*
 * backend.c — the OpenCL backend's function table. Its entries are the shared GPU op code
 * of src/gpu/ (the same entries serve the CUDA backend); only the device layer under them
 * (src/opencl/opencl.c) is OpenCL's. An op family without a GPU kernel yet has a NULL entry:
 * the core then reports MAMBA2_STATUS_UNSUPPORTED naming the backend and the op.
 */
#include "gpu/gpu.h"

const m2_backend_ops m2_opencl_backend = {
    .name = "opencl",
    .act_dtypes = 1u << MAMBA2_DTYPE_F32,
    .ssd_forward_workspace = m2g_ssd_forward_workspace,
    .ssd_forward = m2g_ssd_forward,
    .ssd_backward_workspace = m2g_ssd_backward_workspace,
    .ssd_backward = m2g_ssd_backward,
    .ssd_chunk_cumsum = m2g_ssd_chunk_cumsum,
    .ssd_bmm_chunk = m2g_ssd_bmm_chunk,
    .ssd_chunk_state = m2g_ssd_chunk_state,
    .ssd_state_passing = m2g_ssd_state_passing,
    .ssd_chunk_scan = m2g_ssd_chunk_scan,
    .rmsnorm_forward_workspace = m2g_rmsnorm_forward_workspace,
    .rmsnorm_forward = m2g_rmsnorm_forward,
    .rmsnorm_backward_workspace = m2g_rmsnorm_backward_workspace,
    .rmsnorm_backward = m2g_rmsnorm_backward,
    .conv1d_forward = m2g_conv1d_forward,
    .conv1d_backward_workspace = m2g_conv1d_backward_workspace,
    .conv1d_backward = m2g_conv1d_backward,
    .conv1d_step = m2g_conv1d_step,
    .ssd_step = m2g_ssd_step,
    /* @@ more OpenCL ops are registered above this line @@ */
};
