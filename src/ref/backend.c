/*
 * backend.c — the reference backend's function table: float64 accumulation, single thread,
 * f32 or f64 storage (and bf16/f16 activation storage for the fused SSD op and the decode
 * steps). It documents the
 * math and serves as the oracle of every test.
 */
#include "ref/ref.h"

const m2_backend_ops m2_ref_backend = {
    .name = "ref",
    .act_dtypes = (1u << MAMBA2_DTYPE_F32) | (1u << MAMBA2_DTYPE_F64),
    /* the SSD kernels load and store every activation through m2r_load/m2r_store */
    .ssd_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
    /* the decode steps widen half activations to float32 per block (conv1d_cpu.c,
     * ssd_step_cpu.c; the reference through m2r_load/m2r_store) */
    .step_extra_act_dtypes = (1u << MAMBA2_DTYPE_BF16) | (1u << MAMBA2_DTYPE_F16),
    /* every operator of core/ops.def */
#define M2_OP(name, problem, kind) .name = m2_ref_##name,
#include "core/ops.def"
};
