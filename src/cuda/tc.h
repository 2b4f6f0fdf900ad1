/*
 * tc.h — the CUDA-only tensor-core path of the fused SSD forward and backward (host side:
 * ssd_tc.c; kernels: ssd_tc.cuh, ssd_tc_bwd.cuh; tile math: tc_tiles.h). Kernel ids follow the portable ones of gpu/kernels/list.h.
 */
#ifndef MAMBA2C_CUDA_TC_H
#define MAMBA2C_CUDA_TC_H

#include "gpu/gpu.h"

enum m2cu_tc_kernel {
#define M2G_TC_KERNEL(name) M2CU_TC_##name,
#include "cuda/tc_list.h"
#undef M2G_TC_KERNEL
    M2CU_TC_NUM
};
extern const char *const m2cu_tc_names[M2CU_TC_NUM];
/* the launch id of tensor-core kernel k */
#define M2CU_TC_ID(k) (M2G_NUM_KERNELS + (k))

/* m2g_dev.ssd_tc of a CUDA context created with MAMBA2C_CUDA_TC=1 */
mamba2_status_t m2cu_ssd_tc(m2g_dev *d, const struct ssd_dev *s, int stage, int bf16);
/* m2g_dev.ssd_tc_bwd: the tensor-core twin of a backward kernel (ssd_tc_bwd.cuh) */
mamba2_status_t m2cu_ssd_tc_bwd(m2g_dev *d, int kernel, const struct ssd_dev *s, int bf16,
                                const m2g_args *a);
/* the on-chip tc scan: the largest N, and the dynamic shared bytes it then needs */
int m2cu_tc_seq_nmax(void);
int m2cu_tc_seq_max_smem(void);
/* cuda.c: a launch with `smem` bytes of dynamic shared memory */
mamba2_status_t m2cu_launch_smem(m2g_dev *d, int id, const size_t groups[3],
                                 const size_t local[3], size_t smem, int nargs,
                                 const m2g_arg *args);

#endif /* MAMBA2C_CUDA_TC_H */
