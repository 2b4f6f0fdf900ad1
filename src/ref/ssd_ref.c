/*
 * ssd_ref.c — the float64 reference of the SSD scan: forward (SPEC §1) and backward (SPEC §2).
 *
 * This file is the documentation of the math and the oracle every other backend is tested
 * against, so it is written for clarity, not speed:
 *  - the plain recurrence, one (sequence, head) at a time, one loop nest per equation;
 *  - every value widened to double on load, every sum accumulated in double in a fixed
 *    order, each output rounded once when stored (F32, F64, or for the activations BF16 or
 *    F16 storage; see ref_common.h);
 *  - the chunk size Q is ignored (the result must not depend on it);
 *  - single-threaded (ctx->pool is not used);
 *  - the backward needs every forward state S_t. It never runs the recurrence in reverse
 *    (S_{t-1} = (S_t - d x ⊗ B) / exp(d A) is numerically unstable); it replays it forward
 *    from checkpoints instead: the forward pass of a (sequence, head) keeps the state at
 *    the start of every block of K ~ sqrt(len) tokens, and the backward, walking the blocks
 *    from last to first, recomputes each block's K states from its checkpoint. Memory is
 *    O(2 sqrt(len) P N) rather than O(len P N) (16 MB instead of 1 GB at L = 16384,
 *    P = 64, N = 128), at the cost of one extra forward; the replayed states are bitwise
 *    the ones the forward computed.
 * Scratch memory comes from malloc (freed on every path), so both workspace queries
 * report 0 bytes.
 *
 * Notation, per sequence s (tokens [t0, t1) of batch row b), head h, group g = h / (H/G):
 *   (1) d_t = clamp(softplus(dt[b,t,h] + dt_bias[h]), lo, hi)   (softplus only if asked)
 *   (2) S_t = exp(d_t A[h]) S_{t-1} + d_t x_t ⊗ Bm_t,  S_{t0-1} = init[s,h] or 0
 *   (3) y_t = S_t · Cm_t + D[h,:] ⊙ x_t                          (D[h] broadcast if per head)
 *   (4) out_t = y_t ⊙ silu(z_t)                                  (out_t = y_t without z)
 *       (options.out_x, when given, receives y_t: the output before the gate; the
 *       backward here recomputes y and does not read it)
 *   (5) final[s,h] = S_{t1-1}
 * with S_t, x_t ⊗ Bm_t: [P,N]; x_t, y_t, out_t: [P]; Bm_t, Cm_t: [N] (the steps of SPEC §1).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ref/ref_common.h"
#include "ref/ref.h"

/* ---- element offsets (last dimension contiguous; see m2_ssd_problem) ------------------ */

/* x, z, out, dout, dx, dz [B,L,H,P] at (b,t,h,p); Bm, Cm, dBm, dCm [B,L,G,N] at (b,t,g,n);
 * init, final, dfinal, dinit [S,H,P,N] at (s,h,p,n). */
static int64_t at4(const m2_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2] + i3;
}

/* dt, ddt [B,L,H] at (b,t,h). */
static int64_t at3(const m2_view *v, int64_t b, int64_t t, int64_t h) {
    return b * v->s[0] + t * v->s[1] + h;
}

/* D, dD: [H] at h, or [H,P] at (h,p). */
static int64_t at_D(const m2_ssd_problem *pr, const m2_view *v, int64_t h, int64_t p) {
    return pr->D_per_channel ? h * v->s[0] + p : h;
}

/* ---- scalar functions ------------------------------------------------------------------ */

static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* silu(v) = v / (1 + exp(-v)), as SPEC §1 step 4 writes it. */
static double silu(double v) { return v / (1.0 + exp(-v)); }

/* silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v))). */
static double silu_grad(double v) {
    const double sg = sigmoid(v);
    return sg * (1.0 + v * (1.0 - sg));
}

/*
 * SPEC §1 step 1: the processed step d = clamp(softplus(raw + bias), lo, hi), where
 * softplus(v) = v for v > 20, else log1p(exp(v)), applied only with dt_softplus; the clamp
 * is always applied. *dd_draw receives ∂d/∂raw: softplus'(v) = sigmoid(v) (1 above the
 * threshold) times clamp' (1 on [lo, hi] inclusive, 0 outside).
 */
static double dt_process(const m2_ssd_problem *pr, double bias, double raw, double *dd_draw) {
    const double v = raw + bias;
    double d = v, grad = 1.0;
    if (pr->dt_softplus && v <= 20.0) {
        d = log1p(exp(v));
        grad = sigmoid(v);
    }
    if (d < pr->dt_lo) {
        d = pr->dt_lo;
        grad = 0.0;
    } else if (d > pr->dt_hi) {
        d = pr->dt_hi;
        grad = 0.0;
    }
    *dd_draw = grad;
    return d;
}

/* ---- per-head parameters and per-token inputs, widened to double ------------------------ */

typedef struct head_params {
    double A;    /* A[h]                                           */
    double bias; /* dt_bias[h], or 0                               */
    double *D;   /* [P] D[h] (broadcast) or D[h,:], 0 when absent  */
} head_params;

static void load_head(const m2_ssd_problem *pr, int64_t h, head_params *hp) {
    const mamba2_dtype_t pt = pr->par_dtype;
    hp->A = m2r_load(pr->A.p, pt, h);
    hp->bias = pr->dt_bias.p ? m2r_load(pr->dt_bias.p, pt, h) : 0.0;
    for (int64_t p = 0; p < pr->P; p++)
        hp->D[p] = pr->D.p ? m2r_load(pr->D.p, pt, at_D(pr, &pr->D, h, p)) : 0.0;
}

typedef struct token {
    double d;       /* processed step d_t                 */
    double dd_draw; /* ∂d_t/∂dt[b,t,h]                    */
    double a;       /* decay exp(d_t A[h])                */
    double *x;      /* [P] x[b,t,h,:]                     */
    double *z;      /* [P] z[b,t,h,:] (unused without z)  */
    double *B;      /* [N] Bm[b,t,g,:]                    */
    double *C;      /* [N] Cm[b,t,g,:]                    */
} token;

static void load_token(const m2_ssd_problem *pr, const head_params *hp, int64_t b, int64_t t,
                       int64_t h, int64_t g, token *tk) {
    const mamba2_dtype_t at = pr->act_dtype;
    const double raw = m2r_load(pr->dt.p, at, at3(&pr->dt, b, t, h));
    tk->d = dt_process(pr, hp->bias, raw, &tk->dd_draw);
    tk->a = exp(tk->d * hp->A);
    for (int64_t p = 0; p < pr->P; p++)
        tk->x[p] = m2r_load(pr->x.p, at, at4(&pr->x, b, t, h, p));
    if (pr->z.p)
        for (int64_t p = 0; p < pr->P; p++)
            tk->z[p] = m2r_load(pr->z.p, at, at4(&pr->z, b, t, h, p));
    for (int64_t n = 0; n < pr->N; n++) {
        tk->B[n] = m2r_load(pr->Bm.p, at, at4(&pr->Bm, b, t, g, n));
        tk->C[n] = m2r_load(pr->Cm.p, at, at4(&pr->Cm, b, t, g, n));
    }
}

/* S[P,N] <- state tensor [S,H,P,N] at (s,h,:,:), or zeros when the tensor is absent. */
static void load_state(const m2_ssd_problem *pr, const m2_view *v, int64_t s, int64_t h,
                       double *S) {
    for (int64_t p = 0; p < pr->P; p++)
        for (int64_t n = 0; n < pr->N; n++)
            S[p * pr->N + n] = v->p ? m2r_load(v->p, pr->par_dtype, at4(v, s, h, p, n)) : 0.0;
}

/* State tensor [S,H,P,N] at (s,h,:,:) <- S[P,N]. */
static void store_state(const m2_ssd_problem *pr, const m2_view *v, int64_t s, int64_t h,
                        const double *S) {
    for (int64_t p = 0; p < pr->P; p++)
        for (int64_t n = 0; n < pr->N; n++)
            m2r_store(v->p, pr->par_dtype, at4(v, s, h, p, n), S[p * pr->N + n]);
}

/* A problem without tokens (L = 0, every sequence empty) runs no recurrence, so it needs
 * no [P,N] scratch (a state too large to allocate is still a valid empty call): the state
 * leaves as it came, element by element, dst[s,h] = src[s,h] (0 without src), as
 * load_state + store_state would copy it: final = init, dinit = dfinal. */
static void empty_states(const m2_ssd_problem *pr, const m2_view *dst, const m2_view *src) {
    if (!dst->p)
        return;
    for (int64_t s = 0; s < pr->nseq; s++)
        for (int64_t h = 0; h < pr->H; h++)
            for (int64_t p = 0; p < pr->P; p++)
                for (int64_t n = 0; n < pr->N; n++)
                    m2r_store(dst->p, pr->par_dtype, at4(dst, s, h, p, n),
                              src->p ? m2r_load(src->p, pr->par_dtype, at4(src, s, h, p, n))
                                     : 0.0);
}

/* SPEC §1 step 2: S_t = exp(d_t A) S_{t-1} + d_t x_t ⊗ Bm_t. prev, cur: [P,N]; they may be
 * the same array (the update is elementwise). */
static void state_update(const m2_ssd_problem *pr, const token *tk, const double *prev,
                         double *cur) {
    for (int64_t p = 0; p < pr->P; p++)
        for (int64_t n = 0; n < pr->N; n++)
            cur[p * pr->N + n] = tk->a * prev[p * pr->N + n] + tk->d * tk->x[p] * tk->B[n];
}

/* SPEC §1 step 3: y_t[p] = Σ_n S_t[p,n] Cm_t[n] + D[p] x_t[p]. S: [P,N], y: [P]. */
static void readout(const m2_ssd_problem *pr, const head_params *hp, const token *tk,
                    const double *S, double *y) {
    for (int64_t p = 0; p < pr->P; p++) {
        double acc = 0.0;
        for (int64_t n = 0; n < pr->N; n++)
            acc += S[p * pr->N + n] * tk->C[n];
        y[p] = acc + hp->D[p] * tk->x[p];
    }
}

/* ---- forward ------------------------------------------------------------------------------ */

mamba2_status_t m2_ref_ssd_forward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                  size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0; /* the reference mallocs its scratch */
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_ref_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    (void)ctx;
    (void)ws;
    const int64_t H = pr->H, P = pr->P, N = pr->N, hpg = pr->H / pr->G;
    const mamba2_dtype_t at = pr->act_dtype;
    if (pr->L == 0) { /* step 5 alone: final = init (or 0) */
        empty_states(pr, &pr->final, &pr->init);
        return MAMBA2_STATUS_OK;
    }

    double *S = m2r_zeros(m2r_mul(P, N)); /* [P,N] running state S_t of one (sequence, head) */
    double *vec = m2r_zeros(m2r_add(m2r_mul(4, P), m2r_mul(2, N))); /* [P] x4, [N] x2: below */
    if (!S || !vec) {
        free(S);
        free(vec);
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "ssd reference forward: cannot allocate scratch for P=%lld, N=%lld",
                        (long long)P, (long long)N);
    }
    head_params hp;
    token tk;
    hp.D = vec;              /* [P] D[h,:] */
    tk.x = vec + P;          /* [P] x_t    */
    tk.z = vec + 2 * P;      /* [P] z_t    */
    double *y = vec + 3 * P; /* [P] y_t    */
    tk.B = vec + 4 * P;      /* [N] Bm_t   */
    tk.C = vec + 4 * P + N;  /* [N] Cm_t   */

    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        /* flat token index of (b, t) is b*L + t; states requested inside this sequence */
        const int64_t pos0 = pr->npos ? m2_ssd_pos_lower_bound(pr, b * pr->L + t0) : 0;
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / hpg;
            int64_t next = pos0; /* next requested state position */
            load_head(pr, h, &hp);
            load_state(pr, &pr->init, s, h, S); /* S_{t0-1} = init[s,h] or 0 */
            for (int64_t t = t0; t < t1; t++) {
                load_token(pr, &hp, b, t, h, g, &tk); /* step 1: d_t, exp(d_t A) */
                state_update(pr, &tk, S, S);          /* step 2: S_t (in place)   */
                if (next < pr->npos && m2_ssd_pos(pr, next) == b * pr->L + t)
                    store_state(pr, &pr->pos_states, next++, h, S); /* S_t after token t */
                readout(pr, &hp, &tk, S, y);          /* step 3: y_t              */
                /* step 4: out_t = y_t ⊙ silu(z_t), or y_t without z */
                for (int64_t p = 0; p < P; p++) {
                    const double o = pr->z.p ? y[p] * silu(tk.z[p]) : y[p];
                    m2r_store(pr->out.p, at, at4(&pr->out, b, t, h, p), o);
                    if (pr->out_x.p) /* the output before the gate (options.out_x) */
                        m2r_store(pr->out_x.p, at, at4(&pr->out_x, b, t, h, p), y[p]);
                }
            }
            /* step 5: final[s,h] = S_{t1-1} (= init or 0 for an empty sequence) */
            if (pr->final.p)
                store_state(pr, &pr->final, s, h, S);
        }
    }
    free(S);
    free(vec);
    return MAMBA2_STATUS_OK;
}

/* ---- backward ----------------------------------------------------------------------------- */

mamba2_status_t m2_ref_ssd_backward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                  size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0; /* the reference mallocs its scratch */
    return MAMBA2_STATUS_OK;
}

/* Scratch of the backward; K is the checkpoint block length. */
typedef struct bwd_scratch {
    int64_t K;
    double *ckpt;      /* [K,P,N] ckpt[j] = S_{t0-1+jK}, state entering block j          */
    double *blk;       /* [K+1,P,N] blk[i] = S_{t0-1+kb+i}, the states of one block      */
    double *dS;        /* [P,N] ∂loss/∂S_t                                               */
    double *dB_g;      /* [len,N] dBm[b,t0+k,g,:], summed over the heads of group g      */
    double *dC_g;      /* [len,N] dCm[b,t0+k,g,:], likewise                              */
    double *dA_acc;    /* [H] dA, summed over sequences and time                         */
    double *dbias_acc; /* [H] ddt_bias, likewise                                         */
    double *dD_acc;    /* [H,P] dD per channel, likewise (summed over p when D is [H])   */
    double *vec;       /* [P] x9 and [N] x2, carved below                                */
    head_params hp;
    token tk;
    double *go;  /* [P] dout_t                   */
    double *y;   /* [P] y_t (before the gate)    */
    double *dy;  /* [P] ∂loss/∂y_t               */
    double *dx;  /* [P] ∂loss/∂x_t               */
    double *dz;  /* [P] ∂loss/∂z_t               */
    double *dSB; /* [P] Σ_n dS[p,n] Bm_t[n]      */
} bwd_scratch;

/*
 * Backward of one token t of head h: given dS = ∂loss/∂S_t (the gradient arriving from
 * the future) and the states S_t, S_{t-1} ([P,N] each), writes dx, ddt, dz of (b,t,h),
 * adds this head's share to dB_k, dC_k ([N], the rows of dB_g, dC_g for t) and to the
 * per-head sums, and leaves ∂loss/∂S_{t-1} in dS.
 */
static void token_backward(const m2_ssd_problem *pr, bwd_scratch *w, int64_t b, int64_t t,
                           int64_t h, const double *S_t, const double *S_prev, double *dB_k,
                           double *dC_k) {
    const int64_t P = pr->P, N = pr->N;
    const mamba2_dtype_t at = pr->act_dtype;
    const head_params *hp = &w->hp;
    const token *tk = &w->tk;
    double *dS = w->dS, *go = w->go, *y = w->y, *dy = w->dy, *dx = w->dx, *dz = w->dz;

    for (int64_t p = 0; p < P; p++)
        go[p] = m2r_load(pr->dout.p, at, at4(&pr->dout, b, t, h, p));
    readout(pr, hp, tk, S_t, y); /* y_t, recomputed */

    /* out_t[p] = y_t[p] * silu(z_t[p])   (or out_t = y_t without z) */
    for (int64_t p = 0; p < P; p++) {
        if (pr->z.p) {
            dy[p] = go[p] * silu(tk->z[p]);
            dz[p] = go[p] * y[p] * silu_grad(tk->z[p]);
        } else {
            dy[p] = go[p];
        }
    }

    /* y_t[p] = Σ_n S_t[p,n] Cm_t[n] + D[p] x_t[p] */
    for (int64_t p = 0; p < P; p++)
        for (int64_t n = 0; n < N; n++)
            dS[p * N + n] += dy[p] * tk->C[n];
    for (int64_t n = 0; n < N; n++) {
        double acc = 0.0;
        for (int64_t p = 0; p < P; p++)
            acc += dy[p] * S_t[p * N + n];
        dC_k[n] += acc;
    }
    for (int64_t p = 0; p < P; p++)
        w->dD_acc[h * P + p] += dy[p] * tk->x[p];
    for (int64_t p = 0; p < P; p++)
        dx[p] = hp->D[p] * dy[p];

    /* S_t[p,n] = a S_{t-1}[p,n] + d x_t[p] Bm_t[n],  a = exp(d A) */
    for (int64_t p = 0; p < P; p++) {
        double acc = 0.0;
        for (int64_t n = 0; n < N; n++)
            acc += dS[p * N + n] * tk->B[n];
        w->dSB[p] = acc;
    }
    for (int64_t p = 0; p < P; p++)
        dx[p] += tk->d * w->dSB[p];
    for (int64_t n = 0; n < N; n++) {
        double acc = 0.0;
        for (int64_t p = 0; p < P; p++)
            acc += dS[p * N + n] * tk->x[p];
        dB_k[n] += tk->d * acc;
    }
    double dd = 0.0; /* ∂loss/∂d */
    for (int64_t p = 0; p < P; p++)
        dd += tk->x[p] * w->dSB[p];
    double da = 0.0; /* ∂loss/∂a */
    for (int64_t p = 0; p < P; p++)
        for (int64_t n = 0; n < N; n++)
            da += dS[p * N + n] * S_prev[p * N + n];
    for (int64_t p = 0; p < P; p++) /* dS becomes ∂loss/∂S_{t-1} */
        for (int64_t n = 0; n < N; n++)
            dS[p * N + n] *= tk->a;

    /* a = exp(d A) */
    dd += da * tk->a * hp->A;
    w->dA_acc[h] += da * tk->a * tk->d;

    /* d = clamp(softplus(dt[b,t,h] + dt_bias[h]), lo, hi) */
    const double draw = dd * tk->dd_draw; /* ∂loss/∂dt[b,t,h] */
    w->dbias_acc[h] += draw;

    if (pr->dx.p)
        for (int64_t p = 0; p < P; p++)
            m2r_store(pr->dx.p, at, at4(&pr->dx, b, t, h, p), dx[p]);
    if (pr->dz.p)
        for (int64_t p = 0; p < P; p++)
            m2r_store(pr->dz.p, at, at4(&pr->dz, b, t, h, p), dz[p]);
    if (pr->ddt.p)
        m2r_store(pr->ddt.p, at, at3(&pr->ddt, b, t, h), draw);
}

/* Backward of one (sequence s = tokens [t0, t1) of row b, head h of group g). */
static void head_backward(const m2_ssd_problem *pr, bwd_scratch *w, int64_t s, int64_t b,
                          int64_t t0, int64_t t1, int64_t h, int64_t g) {
    const int64_t PN = pr->P * pr->N, N = pr->N, K = w->K, len = t1 - t0;
    load_head(pr, h, &w->hp);

    /* Forward, keeping the state entering each block: ckpt[j] = S_{t0-1+jK}. */
    double *S = w->blk; /* [P,N] running state */
    load_state(pr, &pr->init, s, h, S);
    for (int64_t k = 0; k < len; k++) {
        if (k % K == 0)
            memcpy(w->ckpt + (k / K) * PN, S, (size_t)PN * sizeof(double));
        load_token(pr, &w->hp, b, t0 + k, h, g, &w->tk);
        state_update(pr, &w->tk, S, S);
    }

    /* final[s,h] = S_{t1-1}: the gradient flowing in is dfinal[s,h], or 0. */
    load_state(pr, &pr->dfinal, s, h, w->dS);

    for (int64_t j = (len + K - 1) / K - 1; j >= 0; j--) {
        const int64_t kb = j * K, ke = kb + K < len ? kb + K : len; /* block [kb, ke) */
        /* Replay the block: blk[i] = S_{t0-1+kb+i}, i in [0, ke-kb]. */
        memcpy(w->blk, w->ckpt + j * PN, (size_t)PN * sizeof(double));
        for (int64_t k = kb; k < ke; k++) {
            load_token(pr, &w->hp, b, t0 + k, h, g, &w->tk);
            state_update(pr, &w->tk, w->blk + (k - kb) * PN, w->blk + (k - kb + 1) * PN);
        }
        for (int64_t k = ke - 1; k >= kb; k--) {
            load_token(pr, &w->hp, b, t0 + k, h, g, &w->tk);
            token_backward(pr, w, b, t0 + k, h, w->blk + (k - kb + 1) * PN,
                           w->blk + (k - kb) * PN, w->dB_g + k * N, w->dC_g + k * N);
        }
    }

    /* S_{t0-1} = init[s,h]: dS now holds ∂loss/∂init (= dfinal for an empty sequence). */
    if (pr->dinit.p)
        store_state(pr, &pr->dinit, s, h, w->dS);
}

static void bwd_scratch_free(bwd_scratch *w) {
    free(w->ckpt);
    free(w->blk);
    free(w->dS);
    free(w->dB_g);
    free(w->dC_g);
    free(w->dA_acc);
    free(w->dbias_acc);
    free(w->dD_acc);
    free(w->vec);
}

/*
 * Loop order: sequence s, group g, head h of g, token t (backwards). Every per-token
 * gradient (dx, ddt, dz) belongs to one (sequence, head) and is written once. dBm and dCm
 * sum over the heads of a group: they are accumulated per (sequence, group) in double, in
 * head order, then written once. dA, dD and ddt_bias sum over sequences and time: they are
 * accumulated in double in the loop order above and written once at the end. Every token
 * lies in exactly one sequence (cu_seqlens tiles [0, L) of row 0; otherwise sequence s is
 * all of row s), so every element of every requested gradient is written.
 */
mamba2_status_t m2_ref_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    (void)ctx;
    (void)ws;
    const int64_t H = pr->H, P = pr->P, N = pr->N, G = pr->G, hpg = pr->H / pr->G;
    const int64_t PN = m2r_mul(P, N);
    const mamba2_dtype_t at = pr->act_dtype, pt = pr->par_dtype;
    if (pr->L == 0) { /* dinit = dfinal (or 0); the sums over no tokens are 0 */
        empty_states(pr, &pr->dinit, &pr->dfinal);
        for (int64_t h = 0; h < H; h++) {
            if (pr->dA.p)
                m2r_store(pr->dA.p, pt, h, 0.0);
            if (pr->ddt_bias.p)
                m2r_store(pr->ddt_bias.p, pt, h, 0.0);
            for (int64_t p = 0; pr->dD.p && p < (pr->D_per_channel ? P : 1); p++)
                m2r_store(pr->dD.p, pt, pr->D_per_channel ? at_D(pr, &pr->dD, h, p) : h, 0.0);
        }
        return MAMBA2_STATUS_OK;
    }

    int64_t maxlen = 0; /* longest sequence */
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        if (t1 - t0 > maxlen)
            maxlen = t1 - t0;
    }

    bwd_scratch w;
    memset(&w, 0, sizeof w);
    /* Checkpoint block length: the smallest K >= 1 with K * K >= maxlen, so that no
     * sequence has more than K blocks. */
    w.K = 1;
    while (w.K * w.K < maxlen)
        w.K++;
    w.ckpt = m2r_zeros(m2r_mul(w.K, PN));
    w.blk = m2r_zeros(m2r_mul(m2r_add(w.K, 1), PN));
    w.dS = m2r_zeros(PN);
    w.dB_g = m2r_zeros(m2r_mul(maxlen, N));
    w.dC_g = m2r_zeros(m2r_mul(maxlen, N));
    w.dA_acc = m2r_zeros(H);
    w.dbias_acc = m2r_zeros(H);
    w.dD_acc = m2r_zeros(m2r_mul(H, P));
    w.vec = m2r_zeros(m2r_add(m2r_mul(9, P), m2r_mul(2, N)));
    if (!w.ckpt || !w.blk || !w.dS || !w.dB_g || !w.dC_g || !w.dA_acc || !w.dbias_acc ||
        !w.dD_acc || !w.vec) {
        bwd_scratch_free(&w);
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "ssd reference backward: cannot allocate scratch for a sequence of "
                        "%lld tokens with H=%lld, P=%lld, N=%lld",
                        (long long)maxlen, (long long)H, (long long)P, (long long)N);
    }
    w.hp.D = w.vec;             /* [P] */
    w.tk.x = w.vec + P;         /* [P] */
    w.tk.z = w.vec + 2 * P;     /* [P] */
    w.go = w.vec + 3 * P;       /* [P] */
    w.y = w.vec + 4 * P;        /* [P] */
    w.dy = w.vec + 5 * P;       /* [P] */
    w.dx = w.vec + 6 * P;       /* [P] */
    w.dz = w.vec + 7 * P;       /* [P] */
    w.dSB = w.vec + 8 * P;      /* [P] */
    w.tk.B = w.vec + 9 * P;     /* [N] */
    w.tk.C = w.vec + 9 * P + N; /* [N] */

    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        const int64_t len = t1 - t0;
        for (int64_t g = 0; g < G; g++) {
            memset(w.dB_g, 0, (size_t)(len * N) * sizeof(double));
            memset(w.dC_g, 0, (size_t)(len * N) * sizeof(double));
            for (int64_t h = g * hpg; h < (g + 1) * hpg; h++)
                head_backward(pr, &w, s, b, t0, t1, h, g);
            for (int64_t k = 0; k < len; k++)
                for (int64_t n = 0; n < N; n++) {
                    if (pr->dBm.p)
                        m2r_store(pr->dBm.p, at, at4(&pr->dBm, b, t0 + k, g, n), w.dB_g[k * N + n]);
                    if (pr->dCm.p)
                        m2r_store(pr->dCm.p, at, at4(&pr->dCm, b, t0 + k, g, n), w.dC_g[k * N + n]);
                }
        }
    }

    /* Per-head parameter gradients, summed over sequences and time above. */
    for (int64_t h = 0; h < H; h++) {
        if (pr->dA.p)
            m2r_store(pr->dA.p, pt, h, w.dA_acc[h]);
        if (pr->ddt_bias.p)
            m2r_store(pr->ddt_bias.p, pt, h, w.dbias_acc[h]);
        if (pr->dD.p) {
            if (pr->D_per_channel) {
                for (int64_t p = 0; p < P; p++)
                    m2r_store(pr->dD.p, pt, at_D(pr, &pr->dD, h, p), w.dD_acc[h * P + p]);
            } else {
                double acc = 0.0; /* D[h] is shared by the head's P channels */
                for (int64_t p = 0; p < P; p++)
                    acc += w.dD_acc[h * P + p];
                m2r_store(pr->dD.p, pt, h, acc);
            }
        }
    }

    bwd_scratch_free(&w);
    return MAMBA2_STATUS_OK;
}
