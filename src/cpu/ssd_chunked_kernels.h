/*
 * ssd_chunked_kernels.h — the CPU kernels of the staged SSD chunk pipeline (SPEC §3), one
 * table per instruction set with the same signatures (as kernels.h does for the fused SSD).
 *
 * ssd_chunked_cpu.c (tasks, chunk bookkeeping, dt processing) calls them only through an
 * m2_ssd_chunk_kernels table chosen from ctx->isa. Both tables are generated from the one
 * kernel text in ssd_chunked_kernels_impl.h.
 *
 * Conventions: rows are contiguous float arrays; `ld*` is the element distance between
 * consecutive rows (any value >= 0). The tiling of every kernel depends only on its sizes, so
 * each output element is produced by the same float operations in every run and on every
 * thread.
 */
#ifndef MAMBA2C_CPU_SSD_CHUNKED_KERNELS_H
#define MAMBA2C_CPU_SSD_CHUNKED_KERNELS_H

#include <stdint.h>

#include "core/ksets.h"

typedef struct m2_ssd_chunk_kernels {
    const char *isa;

    /* Dot products of rows ("A Btᵀ"), for i < M, j < Nc:
     *   Y[i*ldy + j] = alpha_i * Σ_{n<K} A[i*lda + n] * Bt[j*ldb + n]
     * alpha_i = alpha[i], or 1 when alpha == NULL. Tiles of 4 rows of A x 2 rows of Bt, the
     * sum over n in vector lanes, reduced once per element. (CB = C Bᵀ; C_i · S_start rows.) */
    void (*dots)(int64_t M, int64_t Nc, int64_t K, const float *A, int64_t lda, const float *Bt,
                 int64_t ldb, const float *alpha, float *Y, int64_t ldy);

    /* Rank-J update of R rows ("Aᵀ-weighted rows of Bv"), for r < R, c < Nc:
     *   Y[r*ldy + c] = (accumulate ? Y[r*ldy + c] : 0) + Σ_{j<J} a_rj * Bv[j*ldb + c]
     * a_rj = A[r*ars + j*ajs] * w[j] (w[j] = 1 when w == NULL), summed over j in order.
     * Tiles of 4 rows x 16 columns. (chunk states: x_jᵀ w_j B_j; the chunk's own outputs:
     * W x.) */
    void (*rank_update)(int64_t R, int64_t Nc, int64_t J, const float *A, int64_t ars,
                        int64_t ajs, const float *w, const float *Bv, int64_t ldb, float *Y,
                        int64_t ldy, int accumulate);

    /* w[j] = exp(ref - cs[j]) * d[j] * cb[j] for j < n (cb == NULL: the factor is 1). */
    void (*weights)(int64_t n, float ref, const float *cs, const float *d, const float *cb,
                    float *w);

    /* out[i] = a * S[i] + X[i] (one rounding where the ISA has FMA); out may be S. */
    void (*decay_add)(int64_t n, float a, const float *S, const float *X, float *out);

    /* out[i] = (y[i] + D_i x[i]) * silu(z[i]), D_i = D[i*Ds] (Ds = 0 broadcasts D[0]); D and z
     * may be NULL (term dropped). y and out may be the same array. */
    void (*epilogue)(int64_t n, const float *y, const float *x, const float *D, int64_t Ds,
                     const float *z, float *out);
} m2_ssd_chunk_kernels;

extern const m2_ssd_chunk_kernels m2_ssd_chunk_kernels_scalar; /* ssd_chunked_kernels_scalar.c */
#if defined(M2_KSETS_X86)
extern const m2_ssd_chunk_kernels m2_ssd_chunk_kernels_avx2;   /* ssd_chunked_kernels_avx2.c   */
#elif defined(M2_KSETS_NEON)
extern const m2_ssd_chunk_kernels m2_ssd_chunk_kernels_neon;   /* ssd_chunked_kernels_neon.c   */
#endif

#endif /* MAMBA2C_CPU_SSD_CHUNKED_KERNELS_H */
