/*
 * tc.h — the CUDA-only tensor-core path of the fused SSD forward and backward (host side:
 * ssd_tc.c; kernels: ssd_tc.cuh, ssd_tc_bwd.cuh, listed in tc_list.h and given kernel ids
 * after the portable ones in gpu/gpu.h; tile math: tc_tiles.h). The CUDA backend's op table
 * (backend.c) takes its fused SSD entries from here: they choose the tensor cores or the
 * portable drivers of src/gpu/ per call. cuda.c only says what the context allows
 * (m2cu_tc_config); it calls nothing here.
 */
#ifndef MAMBA2C_CUDA_TC_H
#define MAMBA2C_CUDA_TC_H

#include "gpu/gpu.h"

/* what a CUDA context allows the tensor cores (MAMBA2C_CUDA_TC at its creation, cuda.c) */
typedef struct m2cu_tc_cfg {
    int forward;        /* 0: never (MAMBA2C_CUDA_TC=0, or auto without the on-chip scan) */
    int backward;       /* the backward's twins: MAMBA2C_CUDA_TC=1 only                  */
    int64_t seq_nmax;   /* the largest N of the on-chip scan; 0: none                    */
    int64_t min_blocks; /* auto: the on-chip scan only with at least this many blocks
                         * (sequences x H x ceil(P / M2TC_SEQ_PC)); 0: every call (=1)    */
} m2cu_tc_cfg;
/* the configuration of CUDA context d (cuda.c) */
m2cu_tc_cfg m2cu_tc_config(const m2g_dev *d);

/* the CUDA backend's fused SSD entries (ssd_tc.c) */
mamba2_status_t m2cu_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);
mamba2_status_t m2cu_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);

#endif /* MAMBA2C_CUDA_TC_H */
