/*
 * kernels.h — the CPU backend's kernel sets: one table per instruction set, same signatures.
 *
 * ssd_cpu.c (planning, threading, dt processing, reductions) calls the kernels only through
 * an m2_cpu_kernels table chosen from ctx->isa, so the per-ISA files hold nothing but
 * arithmetic on packed or row-contiguous float32 data. Both tables are generated from the
 * one kernel text in ssd_kernels_impl.h.
 *
 * Conventions: a "row" is P (or N) contiguous floats; `ld*` is the element distance between
 * the rows of consecutive tokens (any value, 0 included, as for a broadcast input). States
 * are [P][N] row-major with row length N. All kernels are deterministic: the same inputs
 * give the same bits whatever thread runs them.
 */
#ifndef MAMBA2C_CPU_KERNELS_H
#define MAMBA2C_CPU_KERNELS_H

#include <stdint.h>

typedef struct m2_cpu_kernels {
    const char *isa;

    /*
     * Forward recurrence over a block of T tokens, tiled 4 state rows (P) at a time with the
     * token loop inside the tile (the tile stays in L1 while B_t, C_t stream by):
     *   S_t = a[t] * S_{t-1} + xd_t ⊗ B_t              xd: [T][P], xd_t = d_t x_t
     *   y[t*P + p] = S_t[p,:] · C_t                     only when y != NULL ([T][P])
     * Bp, Cp: [T][N] (Cp unused when y == NULL). S_{-1} is S0. S_t is written to
     * Sout + t*s_tstride: s_tstride = 0 with Sout == S0 updates one state in place.
     */
    void (*fwd_block)(int64_t T, int64_t P, int64_t N, const float *a, const float *xd,
                      const float *Bp, const float *Cp, const float *S0, float *Sout,
                      int64_t s_tstride, float *y);

    /*
     * Backward of a block of T tokens, starting from its checkpoint S0 = S_{-1}. Per 4-row
     * tile it recomputes the tile's S_t (as fwd_block, into Stile: T*4*N floats) and y
     * (when y != NULL), then runs the reverse recurrence t = T-1 .. 0:
     *   G_t = dy_t ⊗ C_t + an_t G_{t+1}       an_t = a[t+1], or a_after for t = T-1;
     *                                          G holds G_T on entry, G_0 on return
     *   gb[t*P + p] = G_t[p,:] · B_t           (dx_t = d_t gb_t + D dy_t)
     *   dBacc[t*N + n] += Σ_p G_t[p,n] x_t[p]  (dBm_t = d_t dBacc_t)
     *   dCacc[t*N + n] += Σ_p S_t[p,n] dy_t[p]
     *   dec[t] += Σ_{p,n} G_t[p,n] S_{t-1}[p,n] (the decay's gradient, ∂L/∂a_t)
     * xd, dy, y, gb: [T][P]; x: raw x rows, ldx apart; Bp, Cp: [T][N]. dBacc, dCacc and
     * dec must be zeroed by the caller; the sums over p run tile after tile in p order.
     */
    void (*bwd_block)(int64_t T, int64_t P, int64_t N, const float *a, float a_after,
                      const float *xd, const float *x, int64_t ldx, const float *dy,
                      const float *Bp, const float *Cp, const float *S0, float *G, float *Stile,
                      float *y, float *gb, float *dBacc, float *dCacc, float *dec);

    /* out[i] = s * x[i] */
    void (*scale)(int64_t n, float s, const float *x, float *out);
    /* out[i] = (y[i] + D[i] x[i]) * silu(z[i]); D and z may be NULL (term dropped). */
    void (*fwd_out)(int64_t n, const float *y, const float *x, const float *D, const float *z,
                    float *out);
    /* dy[i] = dout[i] * silu(z[i]), or dout[i] when z == NULL. */
    void (*bwd_dy)(int64_t n, const float *dout, const float *z, float *dy);
    /* dx[i] = d gb[i] + D[i] dy[i]  (when dx != NULL; D may be NULL)
     * dz[i] = dout[i] (y[i] + D[i] x[i]) silu'(z[i])  (when dz != NULL; needs z and y) */
    void (*bwd_dxdz)(int64_t n, float d, const float *gb, const float *dy, const float *x,
                     const float *D, const float *y, const float *dout, const float *z,
                     float *dx, float *dz);
} m2_cpu_kernels;

extern const m2_cpu_kernels m2_cpu_kernels_scalar; /* ssd_kernels_scalar.c, any CPU     */
extern const m2_cpu_kernels m2_cpu_kernels_avx2;   /* ssd_kernels_avx2.c, -mavx2 -mfma */

#endif /* MAMBA2C_CPU_KERNELS_H */
