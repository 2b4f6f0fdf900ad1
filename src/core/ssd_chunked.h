/*
 * ssd_chunked.h — the validated problem of one stage of the staged SSD chunk pipeline
 * (SPEC §3), as the entry points in ssd_chunked_api.c hand it to a backend.
 *
 * One struct serves the five stages; the fields a stage does not use are zero. A backend may
 * assume: B, H, P, G, N, Q >= 1, L >= 0, K = ceil(L / Q) (state_passing: L is unknown and 0,
 * K comes from the states tensor), H % G == 0, shapes agree, dtypes are ones it declared, the
 * last dimension of every tensor is contiguous, and no output overlaps an input or another
 * output. Chunk k holds tokens [kQ, min(kQ + Q, L)).
 */
#ifndef MAMBA2C_SSD_CHUNKED_H
#define MAMBA2C_SSD_CHUNKED_H

#include "core/internal.h"

struct m2_ssd_chunk_problem {
    int64_t B, L, H, P, N, G; /* sizes a stage does not see are 0 (e.g. P, N for chunk_cumsum) */
    int64_t Q, K;             /* chunk size, number of chunks                                 */
    mamba2_dtype_t act_dtype; /* x, dt, Bm, Cm, z, out                                        */
    mamba2_dtype_t par_dtype; /* A, D, dt_bias, and every staged tensor (dt_out ... final)     */

    int dt_softplus;
    double dt_lo, dt_hi;
    int D_per_channel; /* D is [H,P] (1) or [H] (0) */

    /* inputs of the fused op                  shape            strides used                 */
    m2_view x;       /* [B,L,H,P]                                s[0..2]                     */
    m2_view dt;      /* [B,L,H]                                  s[0..1]                     */
    m2_view A;       /* [H]                                      (contiguous)                */
    m2_view Bm;      /* [B,L,G,N]                                s[0..2]                     */
    m2_view Cm;      /* [B,L,G,N]                                s[0..2]                     */
    m2_view D;       /* [H] or [H,P], optional                   s[0] for [H,P]              */
    m2_view z;       /* [B,L,H,P], optional                      s[0..2]                     */
    m2_view dt_bias; /* [H], optional                                                        */
    m2_view init;    /* [B,H,P,N], optional                      s[0..2]                     */

    /* staged tensors (outputs of one stage, inputs of a later one). For the rank-5 tensors
     * s[0..3] are the strides of the four outer dimensions; the last is contiguous. */
    m2_view dt_out;       /* [B,H,K,Q]                           s[0..2]                     */
    m2_view dA_cumsum;    /* [B,H,K,Q]                           s[0..2]                     */
    m2_view CB;           /* [B,K,G,Q,Q]                         s[0..3]                     */
    m2_view states;       /* [B,K,H,P,N] chunk_state's output    s[0..3]                     */
    m2_view states_start; /* [B,K,H,P,N] state_passing's output  s[0..3]                     */
    m2_view final;        /* [B,H,P,N], optional                 s[0..2]                     */
    m2_view out;          /* [B,L,H,P]                           s[0..2]                     */
};

/* Tokens of chunk k: [k*Q, k*Q + m2_chunk_len(pr, k)). */
static inline int64_t m2_chunk_len(const m2_ssd_chunk_problem *pr, int64_t k) {
    const int64_t rest = pr->L - k * pr->Q;
    return rest < pr->Q ? rest : pr->Q;
}

#endif /* MAMBA2C_SSD_CHUNKED_H */
