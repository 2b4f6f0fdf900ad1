/*
 * ssd_step.h — the validated SSD decode step (SPEC §6 ssd_step), as the entry point in
 * ssd_step_api.c hands it to a backend.
 *
 * A backend may assume: B, H, P, G, N >= 1, T >= 0, H % G == 0, shapes agree, dtypes are ones
 * it declared (act_dtype: F32, F64, or BF16/F16 where the backend declares
 * step_extra_act_dtypes; state_dtype: F32/BF16/F16 with F32/BF16/F16 activations, F64 with F64
 * ones; par_dtype F32, F64 with F64 activations), the last
 * dimension of every tensor is contiguous, state_cache overlaps no other
 * tensor, out and all_states overlap nothing, state indices are < S and the non-negative ones
 * are distinct (so the (b, h) tasks touch disjoint slots).
 */
#ifndef MAMBA2C_SSD_STEP_H
#define MAMBA2C_SSD_STEP_H

#include "core/internal.h"

struct m2_ssd_step_problem {
    int64_t B, T, H, P, N, G; /* T: tokens per row (1 for the x[B,H,P] form)                   */
    int64_t S;                /* state_cache slots                                             */
    mamba2_dtype_t act_dtype; /* x, dt, Bm, Cm, z, out                                         */
    mamba2_dtype_t par_dtype; /* A, D, dt_bias                                                 */
    mamba2_dtype_t state_dtype; /* state_cache, all_states: par_dtype, or BF16/F16 with
                                 * F32/BF16/F16 activations (stored rounded after every token) */

    int dt_softplus;
    double dt_lo, dt_hi;
    int D_per_channel; /* D is [H,P] (1) or [H] (0); meaningless when D is absent */

    /* state_indices[B] (NULL: row b uses slot b) */
    const void *state_indices;
    mamba2_dtype_t idx_dtype;

    /* Every activation is presented in its multi-token form; for the T = 1 form (x[B,H,P])
     * the T stride is 0.
     *                                  shape          strides used                          */
    m2_view x;          /* [B,T,H,P]                   s[0..2], P contiguous                  */
    m2_view dt;         /* [B,T,H]                     s[0..1], H contiguous                  */
    m2_view A;          /* [H]                         (contiguous)                           */
    m2_view Bm;         /* [B,T,G,N]                   s[0..2]                                */
    m2_view Cm;         /* [B,T,G,N]                   s[0..2]                                */
    m2_view D;          /* [H] or [H,P], optional      s[0] for [H,P]                         */
    m2_view z;          /* [B,T,H,P], optional         s[0..2]                                */
    m2_view dt_bias;    /* [H], optional                                                      */
    m2_view cache;      /* [S,H,P,N], in/out           s[0..2]                                */
    m2_view out;        /* [B,T,H,P]                   s[0..2]                                */
    m2_view all_states; /* [B,T,H,P,N], optional: s[0..3] are the strides of B, T, H, P (N is
                         * contiguous); T = 1 form ([B,H,P,N]): s[1] = 0                      */
};

/* The cache slot of row b (negative: padding row, skip it). */
static inline int64_t m2_ssd_step_slot(const m2_ssd_step_problem *pr, int64_t b) {
    if (!pr->state_indices) return b;
    if (pr->idx_dtype == MAMBA2_DTYPE_I32) return ((const int32_t *)pr->state_indices)[b];
    return ((const int64_t *)pr->state_indices)[b];
}

/* ssd_step_api.c: mamba2_ssd_step's checks (no all_states; opts not NULL), for an entry
 * point already holding ctx (mamba2_block_step). */
mamba2_status_t m2_ssd_step_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *state_cache,
                                    const mamba2_tensor_t *out, const mamba2_tensor_t *x,
                                    const mamba2_tensor_t *dt, const mamba2_tensor_t *A,
                                    const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
                                    const mamba2_ssd_step_options_t *opts,
                                    m2_ssd_step_problem *pr);

#endif /* MAMBA2C_SSD_STEP_H */
