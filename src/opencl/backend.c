/*
 * backend.c — the OpenCL backend's function table. Its entries are the shared GPU op code
 * of src/gpu/ (gpu/backend_entries.h; the same entries serve the CUDA backend); only the
 * device layer under them (src/opencl/opencl.c) is OpenCL's. An op family without a GPU
 * kernel yet has a NULL entry: the core then reports MAMBA2_STATUS_UNSUPPORTED naming the
 * backend and the op.
 */
#include "gpu/gpu.h"

const m2_backend_ops m2_opencl_backend = {
    .name = "opencl",
    .act_dtypes = 1u << MAMBA2_DTYPE_F32,
    /* the fused SSD op reads and writes bf16/f16 activations as stored (m2k_ld / m2k_st) */
    .ssd_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
#include "gpu/backend_entries.h"
};
