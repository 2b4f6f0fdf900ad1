/*
 * ssd_host.h — what the SSD host files of src/gpu/ share: the device tensors of one SSD call
 * and one launch function per stage kernel (ssd_ops.c), used by the fused forward there and by
 * the fused backward (ssd_bwd.c).
 */
#ifndef MAMBA2C_GPU_SSD_HOST_H
#define MAMBA2C_GPU_SSD_HOST_H

#include "gpu/gpu.h"

/* The fused ops' own block size (SPEC §1 lets a backend choose): 64 keeps the float32
 * cumulative decay sums short and fills the 16x16 tiles of every stage (docs/gpu.md §3). */
#define M2G_FUSED_Q 64

typedef struct ssd_dev {
    m2g_mem ct, stab;
    int64_t nc, nseq, Q, H, G, P, N;
    m2g_t x, dt, A, Bm, Cm, D, z, bias, init;
    int D_mode, softplus;
    float lo, hi;       /* the dt limits rounded to nearest: the clamp's values          */
    float lo_up, hi_dn; /* the least float >= lo, the greatest <= hi: its compares       */
    m2g_t dto, dac, CB, states, start, final, out, outx;
    int tc_split; /* m2g_run_bmm, m2g_run_state on the CUDA tensor cores in split tf32 (the
                   * backward's recomputed forward; m2g_dev.ssd_tc_bwd) */
} ssd_dev;

/* one launch of each stage kernel of ssd_chunked.cl over the tensors of s */
mamba2_status_t m2g_run_cumsum(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_bmm(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_state(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_passing(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_scan(m2g_dev *d, const ssd_dev *s);
/* UNSUPPORTED unless both dtypes are F32 */
mamba2_status_t m2g_need_f32(const char *api, mamba2_dtype_t at, mamba2_dtype_t pt);
/* The chunk table of a fused call (chunks of every sequence in order, Q tokens each but the
 * last of a sequence) and its sequence table; *nc_out = number of chunks. */
mamba2_status_t m2g_fused_tables(m2g_call *c, const m2_ssd_problem *pr, int64_t Q,
                                 int64_t *nc_out, m2g_mem *ct, m2g_mem *stab);

#endif /* MAMBA2C_GPU_SSD_HOST_H */
