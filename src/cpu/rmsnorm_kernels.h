/*
 * rmsnorm_kernels.h — the CPU backend's gated RMSNorm kernels: one table per instruction
 * set, same signatures (the arrangement of kernels.h for the SSD).
 *
 * rmsnorm_cpu.c (row blocks, threads, the fixed-order dweight/dbias reduction) calls these
 * through an m2_rmsnorm_kernels table chosen from ctx->isa. A kernel handles one group of
 * n contiguous channels of one row; every pointer is already offset to that group. The
 * arithmetic is float32; the reductions over n (mean square, the backward's c1) run in an
 * order fixed by n alone, so results never depend on the thread that runs them.
 */
#ifndef MAMBA2C_CPU_RMSNORM_KERNELS_H
#define MAMBA2C_CPU_RMSNORM_KERNELS_H

#include <stdint.h>

#include "core/ksets.h"

/* One row's group for the backward; every pointer already offset to the group. */
typedef struct m2_rms_row {
    const float *x, *z, *dout; /* z may be NULL                                       */
    float *dx, *dz;            /* may be NULL (not wanted)                            */
    const float *r_in;         /* the forward's r, or NULL to recompute it            */
    float *scr;                /* 2n floats of scratch                                */
} m2_rms_row;

typedef struct m2_rmsnorm_kernels {
    const char *isa;

    /*
     * Forward of one group; returns r = 1/sqrt(mean(v²) + eps).
     *   nbg == 0: v = x * silu(z) (x when z == NULL); out = v r w (+ b)
     *   nbg != 0: v = x;                              out = (x r w (+ b)) * silu(z)
     * z and b may be NULL.
     */
    float (*fwd_group)(int64_t n, double eps, int nbg, const float *x, const float *z,
                       const float *w, const float *b, float *out);

    /*
     * Backward of one group in nrows (1 or 2) rows at once: the rows share the loads of w
     * and b and the update of dw and db. Per row: writes dx, dz (each may be NULL). Then
     * ACCUMULATES dw += dy ∘ xhat and db += dy (each may be NULL; row 0 first, then row 1),
     * where dy is the gradient w.r.t. y = xhat w + b.
     */
    void (*bwd_group)(int64_t n, double eps, int nbg, int nrows, const m2_rms_row *rows,
                      const float *w, const float *b, float *dw, float *db);
} m2_rmsnorm_kernels;

extern const m2_rmsnorm_kernels m2_rmsnorm_kernels_scalar; /* rmsnorm_kernels_scalar.c      */
#if defined(M2_KSETS_X86)
extern const m2_rmsnorm_kernels m2_rmsnorm_kernels_avx2;   /* rmsnorm_kernels_avx2.c, -mavx2 */
#elif defined(M2_KSETS_NEON)
extern const m2_rmsnorm_kernels m2_rmsnorm_kernels_neon;   /* rmsnorm_kernels_neon.c         */
#endif

#endif /* MAMBA2C_CPU_RMSNORM_KERNELS_H */
