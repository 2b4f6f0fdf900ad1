/*
 * ssd_step_kernels.h — the CPU kernels of the SSD decode step (SPEC §6), one table per
 * instruction set with the same signatures (as kernels.h does for the fused SSD).
 *
 * ssd_step_cpu.c (slots, dt processing, threading) calls them only through an
 * m2_ssd_step_kernels table chosen from ctx->isa. Both tables are generated from the one
 * kernel text in ssd_step_kernels_impl.h.
 *
 * Every token of a row is processed by the same float operations in the same order whatever
 * T is and whichever thread runs it, so one call with T tokens is bitwise identical to T
 * calls with one token, and results do not depend on the thread count.
 */
#ifndef MAMBA2C_CPU_SSD_STEP_KERNELS_H
#define MAMBA2C_CPU_SSD_STEP_KERNELS_H

#include <stdint.h>

#include "core/ksets.h"

typedef struct m2_ssd_step_kernels {
    const char *isa;

    /*
     * One head's P state rows over T tokens, updated in place (row r at S + r*lds, N floats):
     *   for t = 0 .. T-1:  xd = d[t] * x_t[r]                    (float product)
     *                      S[r,:] = xd * Bm_t + a[t] * S[r,:]
     *                      y_t[r] = S[r,:] · Cm_t
     *                      all_t row r <- S[r,:]                 (when all != NULL)
     * x_t = x + t*ldx (P floats), Bm_t = Bm + t*ldb and Cm_t = Cm + t*ldc (N floats), y_t =
     * y + t*ldy (P floats), all_t row r = all + t*ldat + r*ldar. Rows are tiled 4 at a time
     * with the token loop inside the tile (its rows stay in L1 across the tokens).
     */
    void (*rows)(int64_t T, int64_t P, int64_t N, const float *a, const float *d, const float *x,
                 int64_t ldx, const float *Bm, int64_t ldb, const float *Cm, int64_t ldc, float *S,
                 int64_t lds, float *y, int64_t ldy, float *all, int64_t ldat, int64_t ldar);

    /* out[i] = (y[i] + D_i x[i]) * silu(z[i]), D_i = D[i*Ds] (Ds = 0 broadcasts D[0]); D and z
     * may be NULL (term dropped). y and out may be the same array. */
    void (*epilogue)(int64_t n, const float *y, const float *x, const float *D, int64_t Ds,
                     const float *z, float *out);
} m2_ssd_step_kernels;

extern const m2_ssd_step_kernels m2_ssd_step_kernels_scalar; /* ssd_step_kernels_scalar.c */
#if defined(M2_KSETS_X86)
extern const m2_ssd_step_kernels m2_ssd_step_kernels_avx2;   /* ssd_step_kernels_avx2.c   */
#elif defined(M2_KSETS_NEON)
extern const m2_ssd_step_kernels m2_ssd_step_kernels_neon;   /* ssd_step_kernels_neon.c   */
#endif

#endif /* MAMBA2C_CPU_SSD_STEP_KERNELS_H */
