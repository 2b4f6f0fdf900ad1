/*
 * backend.c — the CUDA backend's function table: the same shared GPU op code as the
 * OpenCL table (gpu/backend_entries.h) over the CUDA device layer (src/cuda/cuda.c), but
 * for the fused SSD forward and backward, which are the tensor-core entries of ssd_tc.c
 * (they fall back to the shared ones where the tensor cores are not used).
 */
#include "cuda/tc.h"
#include "gpu/gpu.h"

const m2_backend_ops m2_cuda_backend = {
    .name = "cuda",
    .act_dtypes = 1u << MAMBA2_DTYPE_F32,
    /* the fused SSD op reads and writes bf16/f16 activations as stored (m2k_ld / m2k_st) */
    .ssd_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
#define M2G_OWN_SSD_FUSED
    .ssd_forward = m2cu_ssd_forward,
    .ssd_backward = m2cu_ssd_backward,
#include "gpu/backend_entries.h"
};
