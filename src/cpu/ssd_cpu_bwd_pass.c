/*
 * ssd_cpu_bwd_pass.c — the CPU SSD backward of one head set over a token range: passes A and
 * B (ssd_cpu.h has the overview, ssd_cpu_bwd.c the plan and the tasks).
 *
 * The rescaled backward, per head. With Ĝ_t = E_t G_t inside a segment, the reverse
 * recurrence G_t = dy_t ⊗ C_t + a_{t+1} G_{t+1} becomes
 *     Ĝ_t = Ĝ_{t+1} + (E_t dy_t) ⊗ C_t               (one FMA, the forward's sweep reversed)
 * with the forward's restart factors applied after a segment's first token, and
 *     dBm_t += Ĝ_tᵀ x̂_t (x̂_t = d_t x_t / E_t),   d_t G_t B_t = w_t (Ĝ_t B_t),
 *     dCm_t += Ŝ_tᵀ (E_t dy_t),                   y_t = E_t (Ŝ_t C_t).
 * The decay needs no per-element work: λ_t = ∂L/∂log a_t = a_t Σ G_t ∘ S_{t-1} obeys
 *     λ_t = λ_{t+1} + dy_t·y_t − d_t x_t·(G_t B_t)
 * (y_t = S_t C_t without the D term), so ∂L/∂d_t = x_t·(G_t B_t) + A λ_t and ∂L/∂A = Σ d_t λ_t.
 * The terms dy·y and x·(G B) cancel (they share the token's own contribution), so the
 * suffix sum is restarted from its definition, λ_{e+1} = Σ Ĝ_{e+1} ∘ Ŝ_e, every
 * BWD_SNAP_TOKENS tokens: pass A's sweep writes its end state a second time into a snapshot
 * (no extra pass; non-temporal stores), pass B prefetches it one block ahead and contracts it
 * with Ĝ (the interval's accuracy and cost: docs/cpu_ssd.md §4). Blocks with a strong decay
 * (d·A < BWD_STRONG_LOG) take λ directly (sweep_direct, the block's states recomputed from
 * the snapshots), where the telescoping form cancels.
 * Pass A (forward over the range): Ŝ with dCm, dz, dD, Σ dy·y per token, the segment scale
 *   at each block start, the snapshots. The output y (the sweep's r contraction,
 *   M2_SWEEP_R_PRE) only when dz needs it; else dy·y = C·(Ŝᵀ r) comes from the dC
 *   contraction (the sweep's w rows), taken from the state before the update
 *   (M2_SWEEP_W_PRE, then dCm = that + (r·u) B) so that the cancelling own-token term is
 *   never formed.
 * Pass B (reverse): Ĝ with Ĝ B (dx, ddt; r contraction, before the update) and dBm (w rows);
 *   dA, ddt_bias, dinitial_state.
 * Both sweeps are the forward's kernel on transposed states ([Pp][Np], n along the vectors,
 * so dC and dB are the vertical w contractions) with x̂ and E dy read as rows
 * (M2_SWEEP_VROWS): 2-3 FMAs per state element per token each; 5 per token in all (6 when y
 * is formed) against the forward's 2. States are never rebuilt by running the recurrence
 * backwards (SPEC §2).
 */
#include <sched.h>

#include "cpu/ssd_cpu.h"

/* A token whose log decay d·A is below this makes its (block, head) take the direct
 * contraction of the decay gradient in pass B (sweep_direct, the block's states recomputed
 * from its snapshot): with strong decays λ is tiny against the cancelling terms. */
#define BWD_STRONG_LOG (-1.0)

/* Rows requested (hint `how`, as fwd_prefetch_plan) while the backward sweeps of a block
 * [u, u + Tb) run (pass A, or pass B walking the blocks the other way; one plan for the set's
 * heads h0 .. h0 + nh - 1, walked sweep after sweep, as in the forward): `extra` first (a
 * contiguous range: pass B's λ restart snapshots of the next block), the row `wr` the pass
 * writes after the sweeps (dz in pass A, dx in pass B) for this block unless its rows are
 * whole cache lines (then streamed with non-temporal stores, no read for ownership), then for
 * the block [v, v + Tn) it visits next the x, dout, z rows (and rd's: out_x, read by pass A
 * with dz) of the set and the B and C rows of its groups g0 .. g0 + ng - 1. A token's rows of
 * a set are one range, so each tensor is requested in address order. */
static void bwd_prefetch_plan(const m2_ssd_problem *pr, const m2_view *wr, const m2_view *rd,
                              int64_t b, int64_t u, int64_t Tb, int64_t v, int64_t Tn, int64_t h0,
                              int64_t nh, int64_t g0, int64_t ng, const float *extra,
                              int64_t extra_bytes, int64_t slots, int how, m2_pf *pf) {
    const int64_t P = pr->P, N = pr->N;
    m2_pf_init(pf);
    m2_pf_add(pf, extra, extra_bytes, 1, extra_bytes, how);
    if (wr && (P * act_size(pr)) % 64 != 0) m2_ssdc_pf_add_rows(pf, pr, wr, b, u, h0, Tb, nh, P, how);
    if (Tn > 0) {
        m2_ssdc_pf_add_rows(pf, pr, &pr->x, b, v, h0, Tn, nh, P, how);
        m2_ssdc_pf_add_rows(pf, pr, &pr->dout, b, v, h0, Tn, nh, P, how);
        m2_ssdc_pf_add_rows(pf, pr, &pr->z, b, v, h0, Tn, nh, P, how);
        if (rd) m2_ssdc_pf_add_rows(pf, pr, rd, b, v, h0, Tn, nh, P, how);
        m2_ssdc_pf_add_rows(pf, pr, &pr->Bm, b, v, g0, Tn, ng, N, how);
        m2_ssdc_pf_add_rows(pf, pr, &pr->Cm, b, v, g0, Tn, ng, N, how);
    }
    pf->per8 = (pf->left + slots - 1) / slots;
}

/* x̂ rows of a block: ub[j][i][:] = w[j*T + i] x(b, u + i, h0 + j) for tokens i < Tb and heads j
 * < nh, one call per token for the set (the backward's recompute). Half storage: token i's rows
 * converted into hr + i * hst (nh * P floats; hst = 0 reuses one staging row set). */
static void scale_rows(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b, int64_t u,
                       int64_t Tb, int64_t h0, int64_t nh, int64_t T, int64_t Pp, const float *w,
                       float *hr, int64_t hst, float *ub) {
    for (int64_t i = 0; i < Tb; i++) {
        int64_t ldx;
        const float *xr = act_in_heads(pr, K, &pr->x, b, u + i, h0, nh, pr->P, hr + i * hst, &ldx);
        K->scale(nh, pr->P, w + i, T, xr, ldx, ub + i * Pp, T * Pp);
    }
}
/* The backward's per-token rows of a block, heads [h0, h0 + nh) over tokens [u, u + Tb):
 * x̂ = w x into ub, dy = dout silu(z) into dyb, E dy into rb, dout silu'(z) into gzb (when
 * given; dz = (y + D x) gz); rows [j][T][Pp]. dD += dy x into dDb + j * Pp (when given).
 * cv: three staging rows of RW floats (half storage). */
static void prep_rows(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b, int64_t u,
                      int64_t Tb, int64_t h0, int64_t nh, int64_t T, int64_t Pp, const float *wt,
                      const float *E, float *cv, int64_t RW, float *ub, float *dyb, float *rb,
                      float *gzb, float *dDb) {
    const int64_t P = pr->P, TP = T * Pp;
    for (int64_t i = 0; i < Tb; i++)
        for (int64_t j = 0; j < nh; j++) {
            const int64_t h = h0 + j, o = j * TP + i * Pp;
            K->bwd_prep(P, wt[j * T + i], E[j * T + i], act_in(pr, K, &pr->x, b, u + i, h, P, cv),
                        act_in(pr, K, &pr->dout, b, u + i, h, P, cv + RW),
                        pr->z.p ? act_in(pr, K, &pr->z, b, u + i, h, P, cv + 2 * RW) : NULL,
                        ub + o, dyb + o, rb + o, gzb ? gzb + o : NULL, dDb ? dDb + j * Pp : NULL);
        }
}

/* Where row (b, t, g) of dBm (which 0) or dCm (1) is summed over the group's heads when the
 * group spans tasks: the tensor itself for F32; for half storage a float32 row in the
 * workspace ([B*L*G][N] each), rounded into the tensor once by the task that adds the
 * group's last head (put_group_rows), so that the sum over heads is rounded once. */
static float *grad_row(const bwd_job *J, const bwd_ws *w, const m2_view *v, int which,
                       int64_t b, int64_t t, int64_t g) {
    const m2_ssd_problem *pr = J->pr;
    if (act_f32(pr)) return row3(v, b, t, g);
    const int64_t rows = pr->B * pr->L * pr->G;
    return w->gbc + ((which * rows + (b * pr->L + t) * pr->G + g) * pr->N);
}

/* Rows [u, u + Tb) of dBm (which 0) or dCm (1), from the task's per-head rows acc (head j at
 * acc + j*TN, token i at + i*Np): per group, the sum over its heads in head order. The heads
 * of a group that starts in this task are summed in cache and written once — streamed into
 * the tensor (its lines are not read first; bf16/f16: rounded once, through tmp, N floats)
 * when the whole group is here; a group that started in the previous task is added to head
 * by head (after the caller's wait_progress), and with half storage rounded into the tensor
 * by the task that holds its last head. Either way the sums and their order are those of
 * adding head after head, so the split between tasks, and with it the thread count, changes
 * no bit. */
static void put_group_rows(const bwd_job *J, const bwd_ws *w, const m2_cpu_kernels *K,
                           const m2_view *v, int which, int64_t b, int64_t u, int64_t Tb, int64_t h0, int64_t nh,
                           int64_t hpg, const float *acc, int64_t TN, int64_t Np, float *tmp) {
    const m2_ssd_problem *pr = J->pr;
    for (int64_t j = 0; j < nh;) {
        const int64_t g = (h0 + j) / hpg, je = (g + 1) * hpg - h0 < nh ? (g + 1) * hpg - h0 : nh;
        /* the task holds the group's first head: its heads are a prefix of the group, summed
         * in cache; streamed only when no other task adds to the rows afterwards */
        const int first = (h0 + j) % hpg == 0, last = (h0 + je) % hpg == 0;
        const int whole = first && last, half = !act_f32(pr);
        for (int64_t i = 0; i < Tb; i++) {
            if (half && whole) { /* summed here in float32, rounded once, streamed */
                K->head_sum(pr->N, hpg, acc + j * TN + i * Np, TN, tmp, 0);
                K->store_row(pr->N, (int)pr->act_dtype, tmp, arow(pr, v, b, u + i, g), 1);
                continue;
            }
            float *dst = grad_row(J, w, v, which, b, u + i, g);
            if (first)
                K->head_sum(pr->N, je - j, acc + j * TN + i * Np, TN, dst, whole);
            else /* the group's earlier heads are in the row: add ours one by one */
                for (int64_t q = j; q < je; q++)
                    K->axpy(pr->N, 1.0f, acc + q * TN + i * Np, dst); /* exactly dst + v */
            if (half && last) /* the group's sum is complete: rounded once */
                K->store_row(pr->N, (int)pr->act_dtype, dst, arow(pr, v, b, u + i, g), 1);
        }
        j = je;
    }
}

static void wait_progress(_Atomic int64_t *p, int64_t need) {
    while (atomic_load_explicit(p, memory_order_acquire) < need) sched_yield();
}

/* The states before blocks k0..k1 of one head set (into rcs, [k - k0][j][Pp][Np]), rerun
 * from the state before block k0 (snapshot s0, or row `in` of vin when NULL) with the
 * forward's update: bitwise the states pass A had. Uses the block buffers of pass B. */
static void bwd_recompute(const bwd_job *J, int64_t b, const m2_view *vin, int64_t in,
                          int64_t t0, int64_t t1,
                          int64_t h0, int64_t nh, int64_t g0, int64_t ng, int64_t k0, int64_t k1,
                          const double *cb, const float *s0, float *st, float *rcs,
                          const bwd_ws *ws) {
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    const int64_t P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np, hpg = pr->H / pr->G;
    float *ub = ws->u, *Bp = ws->B, *d = ws->d, *E = ws->E, *wt = ws->wt, *rf = ws->rf;
    int32_t *ridx = ws->ri;
    float *cv = ws->cv, *cvd = ws->cvd; /* converted activation rows (half storage) */
    double *ctmp = ws->ctmp;
    int *nr = ws->nr;
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;
    if (s0)
        memcpy(st, s0, (size_t)(nh * SN) * sizeof(float));
    else
        for (int64_t j = 0; j < nh; j++) m2_ssdc_state_in_t(vin, in, h0 + j, P, N, Pp, Np, K->tile_p, st + j * SN);
    for (int64_t k = k0; k <= k1; k++) {
        const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
        memcpy(rcs + (k - k0) * nh * SN, st, (size_t)(nh * SN) * sizeof(float));
        if (k == k1) break;
        for (int64_t j = 0; j < nh; j++) ctmp[j] = cb[k * nh + j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, ctmp, d, E, wt, NULL, nr, ridx, rf);
        scale_rows(pr, K, b, u, Tb, h0, nh, T, Pp, wt, ws->hr, 0, ub);
        for (int64_t q = 0; q < ng; q++)
            m2_ssdc_rows_act(pr, K, Bp + q * TN, &pr->Bm, b, u, g0 + q, Tb, N, Np, cv);
        for (int64_t j = 0; j < nh; j++)
            K->sweep(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T, M2_SWEEP_VROWS,
                     Bp + ((h0 + j) / hpg - g0) * TN, ub + j * TP, NULL, NULL, st + j * SN, NULL,
                     NULL, NULL, NULL);
    }
}

/* One head set's backward over a token range: what its passes share. */
typedef struct bwd_set {
    const bwd_job *J;
    const bwd_plan *pl;
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *K;
    const bwd_ws *w;
    int64_t b, t0, t1, set, h0, nh, hpg, g0, ng;
    int64_t nb, M;     /* blocks of the range, blocks between λ snapshots */
    int64_t per_sweep; /* prefetch slots of one sweep per 8 tokens */
    const float *Ah, *dtb;
    bwd_progress *prog, *pred; /* this span's counters; the previous set's when it shares our
                                * first head's group (its dBm/dCm rows go first: head order) */
    double *pD;                /* the span's dD slots of our heads */
    const m2_view *vin;        /* the state before t0: row `in` of vin */
    int64_t in;
} bwd_set;

/* D row of head j of the set: [H,P] in place, [H] broadcast (into w->Dh by bwd_range) */
static const float *d_row(const bwd_set *s, int64_t j) {
    const m2_ssd_problem *pr = s->pr;
    if (!pr->D.p) return NULL;
    if (pr->D_per_channel) return (const float *)pr->D.p + (s->h0 + j) * pr->D.s[0];
    return s->w->Dh + j * s->pl->Pp;
}

/* Pass A, the sweeps of block k ([u, u + Tb)): transposed, the update Ŝᵀ += B ⊗ x̂; the w rows
 * Ŝᵀ r (dCm: from the state after the update when y is formed, before it otherwise), the acc
 * rows ŷ = Ŝ_{t-1} C; the λ snapshot at an interval's end. */
static void pass_a_sweeps(const bwd_set *s, int64_t k, int64_t u, int64_t Tb) {
    const bwd_plan *pl = s->pl;
    const m2_ssd_problem *pr = s->pr;
    const m2_cpu_kernels *K = s->K;
    const bwd_ws *ws = s->w;
    const int64_t N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np, nh = s->nh, b = s->b;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np, RW = Pp > Np ? Pp : Np;
    const int64_t g0 = s->g0, M = s->M;
    float *cv = ws->cv, *Bp = ws->B, *Cp = ws->C, *cbv = ws->cbv, *acc = ws->acc;
    for (int64_t q = 0; q < s->ng; q++) {
        m2_ssdc_rows_act(pr, K, Bp + q * TN, &pr->Bm, b, u, g0 + q, Tb, N, Np, cv);
        if (pl->want_y) m2_ssdc_rows_act(pr, K, Cp + q * TN, &pr->Cm, b, u, g0 + q, Tb, N, Np, cv);
        if (pl->want_y || pl->want_decay)
            for (int64_t i = 0; i < Tb; i++)
                cbv[q * T + i] =
                    (float)K->dot(N, act_in(pr, K, &pr->Bm, b, u + i, g0 + q, N, cv),
                                  act_in(pr, K, &pr->Cm, b, u + i, g0 + q, N, cv + RW));
    }
    const int64_t v = u + Tb, Tn = s->t1 - v < T ? s->t1 - v : T;
    /* the λ restart snapshots (pass B) are the sweep's second copy of its end state */
    float *snapk = pl->want_decay && ((k + 1) % M == 0 || k == s->nb - 1)
                       ? ws->snap + (k / M) * nh * SN : NULL;
    m2_pf pf;
    bwd_prefetch_plan(pr, pr->z.p ? &pr->dz : NULL, pr->dz.p && pr->z.p ? &pr->out_x : NULL, b,
                      u, Tb, v, Tn, s->h0, nh, g0, s->ng, NULL, 0,
                      nh * s->per_sweep * ((Tb + 7) / 8), pl->fp.pf_how, &pf);
    for (int64_t j = 0; j < nh; j++) {
        const int64_t q = (s->h0 + j) / s->hpg - g0;
        /* the w rows (dCm) accumulate: zeroed right before the sweep, into L1 */
        if (pl->want_acc) memset(acc + j * TN, 0, (size_t)(Tb * Np) * sizeof(float));
        K->sweep(Tb, Pp, Np, ws->nr[j], ws->ri + j * T, ws->rf + j * T,
                 M2_SWEEP_VROWS | (pl->want_y ? M2_SWEEP_R_PRE : M2_SWEEP_W_PRE), Bp + q * TN,
                 ws->u + j * TP, pl->want_acc ? ws->r + j * TP : NULL,
                 pl->want_y ? Cp + q * TN : NULL, ws->S + j * SN, snapk ? snapk + j * SN : NULL,
                 pl->want_acc ? acc + j * TN : NULL, pl->want_y ? ws->w + j * TP : NULL, &pf);
    }
}

/* Pass A, the rows of block [u, u + Tb) after its sweeps, token by token: dz, Σ dy·y (or
 * a_t dy·(S_{t-1} C)) per token, the dCm rows. */
static void pass_a_rows(const bwd_set *s, int64_t u, int64_t Tb) {
    const bwd_plan *pl = s->pl;
    const m2_ssd_problem *pr = s->pr;
    const m2_cpu_kernels *K = s->K;
    const bwd_ws *ws = s->w;
    const int64_t P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np, nh = s->nh;
    const int64_t TP = T * Pp, TN = T * Np, RW = Pp > Np ? Pp : Np, b = s->b;
    const int64_t hpg = s->hpg, g0 = s->g0, t0 = s->t0;
    float *cv = ws->cv, *acc = ws->acc, *E = ws->E, *cbv = ws->cbv, *wb = ws->w;
    float *ub = ws->u, *rb = ws->r, *gzb = ws->sg;
    double *s1 = ws->s1;
    for (int64_t i = 0; i < Tb; i++)
        for (int64_t j = 0; j < nh; j++) {
            const int64_t h = s->h0 + j, t = u + i;
            const float *Dr = d_row(s, j);
            const int64_t jt = j * TP + i * Pp;
            float *dzr = pr->dz.p && pr->z.p ? act_out(pr, &pr->dz, b, t, h, cv + 3 * RW) : NULL;
            const float *vx =
                dzr && pr->out_x.p ? act_in(pr, K, &pr->out_x, b, t, h, P, cv + 4 * RW) : NULL;
            /* x only for y + D x formed here (no out_x) */
            const float *xr = dzr && !vx && Dr ? act_in(pr, K, &pr->x, b, t, h, P, cv) : NULL;
            const float sdy = K->bwd_a_out(
                P, E[j * T + i], pl->want_y ? cbv[(h / hpg - g0) * T + i] : 0.0f,
                pl->want_y ? wb + jt : NULL, vx, ub + jt, rb + jt, xr, xr ? Dr : NULL, gzb + jt,
                dzr, act_f32(pr)); /* stream into the tensor, not into a bf16/f16 staging row */
            if (dzr) act_flush(pr, K, &pr->dz, b, t, h, P, dzr);
            if (pl->want_y) {
                /* the sweep ran in M2_SWEEP_R_PRE: acc already holds the dCm row Ŝ_tᵀ r (from
                 * the updated state), so nothing is added to it here */
                if (pl->want_decay) s1[(t - t0) * nh + j] = (double)sdy;
            } else if (pl->want_acc) {
                /* without y, the sweep's w row (in acc) is Ŝ_{t-1}ᵀ r (M2_SWEEP_W_PRE):
                 * a_t dy·(S_{t-1} C) = C·acc, and the dCm row Ŝ_tᵀ r = acc + (r·u) B */
                float *ar = acc + j * TN + i * Np;
                if (pl->want_decay)
                    s1[(t - t0) * nh + j] =
                        K->dot(N, act_in(pr, K, &pr->Cm, b, t, h / hpg, N, cv), ar);
                if (pl->want_dc) {
                    const float ru = (float)K->dot(P, rb + jt, ub + jt);
                    const float *Br = act_in(pr, K, &pr->Bm, b, t, h / hpg, N, cv + RW);
                    K->axpy(N, ru, Br, ar);
                }
            }
        }
}

/* Pass A: forward over the range from the state before t0. */
static void pass_a(const bwd_set *s) {
    const bwd_plan *pl = s->pl;
    const m2_ssd_problem *pr = s->pr;
    const m2_cpu_kernels *K = s->K;
    const bwd_ws *ws = s->w;
    const int64_t P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np, nh = s->nh;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np, RW = Pp > Np ? Pp : Np;
    const int64_t b = s->b, h0 = s->h0, t0 = s->t0, t1 = s->t1;
    float *dDacc = ws->dD, *E = ws->E, *d = ws->d;
    for (int64_t j = 0; j < nh; j++) {
        m2_ssdc_state_in_t(s->vin, s->in, h0 + j, P, N, Pp, Np, K->tile_p, ws->S + j * SN);
        ws->c[j] = 0.0;
        ws->e_last[j] = 1.0f;
    }
    memset(ws->u, 0, (size_t)(nh * TP) * sizeof(float));
    memset(ws->r, 0, (size_t)(nh * TP) * sizeof(float));
    memset(dDacc, 0, (size_t)(nh * Pp) * sizeof(float));
    for (int64_t k = 0; k < s->nb; k++) {
        const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
        for (int64_t j = 0; j < nh; j++) ws->cb[k * nh + j] = ws->c[j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, ws->cvd), ACT_DT_LD(nh), s->dtb,
                    s->Ah, pr->dt_softplus, pr->dt_lo, pr->dt_hi, k == 0, ws->c, d, E, ws->wt,
                    NULL, ws->nr, ws->ri, ws->rf);
        for (int64_t j = 0; j < nh; j++) ws->e_last[j] = E[j * T + Tb - 1];
        if (pl->want_decay)
            for (int64_t j = 0; j < nh; j++) {
                unsigned char st = 0;
                for (int64_t i = 0; i < Tb; i++)
                    st |= (double)d[j * T + i] * s->Ah[j] < BWD_STRONG_LOG;
                ws->strong[k * nh + j] = st;
            }
        if (!pl->need_a_rows) continue;
        prep_rows(pr, K, b, u, Tb, h0, nh, T, Pp, ws->wt, E, ws->cv, RW, ws->u, ws->dy, ws->r,
                  pr->dz.p && pr->z.p ? ws->sg : NULL, pr->dD.p ? dDacc : NULL);
        if (pl->need_a_sweep) pass_a_sweeps(s, k, u, Tb);
        pass_a_rows(s, u, Tb);
        if (pl->want_dc) {
            if (s->pred) wait_progress(&s->pred->a, u + Tb - t0);
            put_group_rows(s->J, ws, K, &pr->dCm, 1, b, u, Tb, h0, nh, s->hpg, ws->acc, TN, Np,
                           ws->cv);
        }
        atomic_store_explicit(&s->prog[s->set].a, u + Tb - t0, memory_order_release);
        if (pr->dD.p) {
            for (int64_t j = 0; j < nh; j++) {
                if (pl->nD == 1) {
                    double sd = 0.0;
                    for (int64_t p = 0; p < P; p++) sd += (double)dDacc[j * Pp + p];
                    s->pD[j] += sd;
                } else {
                    for (int64_t p = 0; p < P; p++)
                        s->pD[j * pl->nD + p] += (double)dDacc[j * Pp + p];
                }
            }
            memset(dDacc, 0, (size_t)(nh * Pp) * sizeof(float));
        }
    }
    atomic_store_explicit(&s->prog[s->set].a, t1 - t0, memory_order_release);
}

/* Pass B, the rows of block k ([u, u + Tb)) after its sweeps, last token first: dx, ddt, and
 * the suffix sum λ (or the directly contracted one) into the dA and ddt_bias sums. */
static void pass_b_rows(const bwd_set *s, int64_t k, int64_t u, int64_t Tb) {
    const bwd_plan *pl = s->pl;
    const m2_ssd_problem *pr = s->pr;
    const m2_cpu_kernels *K = s->K;
    const bwd_ws *ws = s->w;
    const int64_t P = pr->P, T = pl->T, Pp = pl->Pp, Np = pl->Np, nh = s->nh, b = s->b;
    const int64_t TP = T * Pp, RW = Pp > Np ? Pp : Np, hpg = s->hpg, g0 = s->g0;
    float *cv = ws->cv, *E = ws->E, *wt = ws->wt, *gf = ws->gf, *d = ws->d;
    double *lam = ws->lam;
    for (int64_t i = Tb - 1; i >= 0; i--)
        for (int64_t j = 0; j < nh; j++) {
            const int64_t h = s->h0 + j, t = u + i, jt = j * T + i;
            const float *Dr = d_row(s, j);
            const int64_t jp = j * TP + i * Pp;
            float xg[2];
            float *dxr = pr->dx.p ? act_out(pr, &pr->dx, b, t, h, cv + RW) : NULL;
            K->bwd_b_out(P, wt[jt], ws->cbv[(h / hpg - g0) * T + i], ws->w + jp, ws->r + jp,
                         ws->u + jp, act_in(pr, K, &pr->x, b, t, h, P, cv), Dr, ws->dy + jp, dxr,
                         xg, act_f32(pr));
            if (dxr) act_flush(pr, K, &pr->dx, b, t, h, P, dxr);
            if (pl->want_decay) {
                /* λ_t = λ_{t+1} + a_t dy·(S_{t-1} C) − a_{t+1} d x·(G_{t+1} B),
                 * ∂L/∂d_t = x·(G_t B) + A λ_t */
                if (ws->strong[k * nh + j]) /* contracted directly */
                    lam[j] = (double)ws->lamb[j * T + i];
                else
                    lam[j] += ws->s1[(t - s->t0) * nh + j] - (double)xg[1];
                const double dd = (double)xg[0] / (double)E[jt] + (double)s->Ah[j] * lam[j];
                const double draw = dd * (double)gf[jt];
                if (pr->ddt.p) act_store1(pr, &pr->ddt, b, t, h, (float)draw);
                ws->accA[j] += (double)d[jt] * lam[j];
                ws->accB[j] += draw;
            }
        }
}

/* Pass B, the sweeps of block k ([u, u + Tb)): transposed, the update Ĝᵀ += C ⊗ (E dy); the w
 * rows Ĝᵀ x̂ (dBm, after the update), the acc rows Ĝ_{t+1} B (before it); strong-decay blocks
 * through sweep_direct against the recomputed states. */
static void pass_b_sweeps(const bwd_set *s, int64_t k, int64_t k0, int64_t Tb, m2_pf *pf) {
    const bwd_plan *pl = s->pl;
    const m2_cpu_kernels *K = s->K;
    const bwd_ws *ws = s->w;
    const int64_t T = pl->T, Pp = pl->Pp, Np = pl->Np, nh = s->nh;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np;
    float *acc = ws->acc, *Bp = ws->B, *Cp = ws->C, *ub = ws->u, *rb = ws->r;
    for (int64_t j = 0; j < nh; j++) {
        const int64_t q = (s->h0 + j) / s->hpg - s->g0;
        /* the w rows (dBm) accumulate: zeroed right before the sweep, into L1 */
        if (pl->want_db) memset(acc + j * TN, 0, (size_t)(Tb * Np) * sizeof(float));
        if (pl->want_decay && ws->strong[k * nh + j])
            K->sweep_direct(Tb, Pp, Np, ws->nr[j], ws->ri + j * T, ws->rf + j * T,
                            ws->rcs + ((k - k0) * nh + j) * SN, Bp + q * TN, ub + j * TP,
                            Cp + q * TN, rb + j * TP, pl->want_db ? ub + j * TP : NULL,
                            pl->want_gb ? Bp + q * TN : NULL, ws->S + j * SN,
                            pl->want_db ? acc + j * TN : NULL,
                            pl->want_gb ? ws->w + j * TP : NULL, ws->lamb + j * T);
        else
            K->sweep(Tb, Pp, Np, ws->nr[j], ws->ri + j * T, ws->rf + j * T,
                     M2_SWEEP_REV | M2_SWEEP_R_PRE | M2_SWEEP_VROWS, Cp + q * TN, rb + j * TP,
                     pl->want_db ? ub + j * TP : NULL, pl->want_gb ? Bp + q * TN : NULL,
                     ws->S + j * SN, NULL, pl->want_db ? acc + j * TN : NULL,
                     pl->want_gb ? ws->w + j * TP : NULL, pf);
    }
}

/* Pass B: reverse over the range from the gradient row dfi of vdf into the state after
 * t1 - 1 (zeros when absent). */
static void pass_b(const bwd_set *s, const m2_view *vdf, int64_t dfi) {
    const bwd_plan *pl = s->pl;
    const m2_ssd_problem *pr = s->pr;
    const m2_cpu_kernels *K = s->K;
    const bwd_ws *ws = s->w;
    const int64_t P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np, nh = s->nh;
    const int64_t SN = Np * Pp, TN = T * Np, RW = Pp > Np ? Pp : Np;
    const int64_t b = s->b, h0 = s->h0, g0 = s->g0, t0 = s->t0, t1 = s->t1, nb = s->nb, M = s->M;
    float *S = ws->S, *snap = ws->snap, *cv = ws->cv, *Bp = ws->B, *Cp = ws->C;
    double *lam = ws->lam;
    for (int64_t j = 0; j < nh; j++) {
        float *G = S + j * SN;
        m2_ssdc_state_in_t(vdf, dfi, h0 + j, P, N, Pp, Np, K->tile_p, G);
        for (int64_t e = 0; e < SN; e++) G[e] *= ws->e_last[j]; /* into the last segment's scale */
        lam[j] = ws->accA[j] = ws->accB[j] = 0.0;
    }
    if (!pl->need_b) return;
    for (int64_t k = nb - 1; k >= 0; k--) {
        const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
        if (pl->want_decay && ((k + 1) % M == 0 || k == nb - 1))
            for (int64_t j = 0; j < nh; j++) /* λ_{e+1} = Σ Ĝ_{e+1} ∘ Ŝ_e */
                lam[j] = K->dot(SN, S + j * SN, snap + (k / M) * nh * SN + j * SN);
        const int64_t k0 = k / M * M;
        if (pl->want_decay && (k == nb - 1 || (k + 1) % M == 0)) {
            /* entering a snapshot interval from its end: if any of its blocks needs the
             * direct contraction, recompute the states before each of its blocks */
            unsigned char any = 0;
            for (int64_t e = k0 * nh; e < (k + 1) * nh; e++) any |= ws->strong[e];
            if (any)
                bwd_recompute(s->J, b, s->vin, s->in, t0, t1, h0, nh, g0, s->ng, k0, k, ws->cb,
                              k0 == 0 ? NULL : snap + (k0 / M - 1) * nh * SN, ws->stmp, ws->rcs,
                              ws);
        }
        for (int64_t j = 0; j < nh; j++) ws->ctmp[j] = ws->cb[k * nh + j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, ws->cvd), ACT_DT_LD(nh), s->dtb,
                    s->Ah, pr->dt_softplus, pr->dt_lo, pr->dt_hi, k == 0, ws->ctmp, ws->d, ws->E,
                    ws->wt, ws->gf, ws->nr, ws->ri, ws->rf);
        prep_rows(pr, K, b, u, Tb, h0, nh, T, Pp, ws->wt, ws->E, cv, RW, ws->u, ws->dy, ws->r,
                  NULL, NULL);
        for (int64_t q = 0; q < s->ng; q++) {
            m2_ssdc_rows_act(pr, K, Cp + q * TN, &pr->Cm, b, u, g0 + q, Tb, N, Np, cv);
            if (pl->want_gb || pl->want_decay) {
                m2_ssdc_rows_act(pr, K, Bp + q * TN, &pr->Bm, b, u, g0 + q, Tb, N, Np, cv);
                for (int64_t i = 0; i < Tb; i++)
                    ws->cbv[q * T + i] =
                        (float)K->dot(N, act_in(pr, K, &pr->Bm, b, u + i, g0 + q, N, cv),
                                      act_in(pr, K, &pr->Cm, b, u + i, g0 + q, N, cv + RW));
            }
        }
        const int64_t v = u - T, Tn = k > 0 ? T : 0; /* the block visited next */
        /* the λ snapshot of the interval visited next (read at its first block), a share of
         * it per block of this interval, so that no block carries the whole (nh states) on
         * top of its own rows */
        const float *snext = NULL;
        int64_t sbytes = 0;
        if (pl->want_decay && k0 > 0) { /* in 64-byte lines of 16 floats */
            const int64_t kend = k0 + M < nb ? k0 + M : nb, cnt = kend - k0;
            const int64_t vis = kend - 1 - k, lines = nh * SN / 16;
            const int64_t l0 = lines * vis / cnt, l1 = lines * (vis + 1) / cnt;
            snext = snap + (k0 / M - 1) * nh * SN + l0 * 16;
            sbytes = (l1 - l0) * 64;
        }
        m2_pf pf;
        bwd_prefetch_plan(pr, &pr->dx, NULL, b, u, Tb, v, Tn, h0, nh, g0, s->ng, snext, sbytes,
                          nh * s->per_sweep * ((Tb + 7) / 8), pl->fp.pf_how, &pf);
        /* the block's Σ dy·y terms (pass A wrote them, one double per token and head, a
         * whole sequence ago): requested now, read after the sweeps */
        if (pl->want_decay && pl->want_gb)
            for (int64_t e = 0; e < Tb * nh; e += 8) m2_pf_line(ws->s1 + (u - t0) * nh + e);
        pass_b_sweeps(s, k, k0, Tb, &pf);
        if (pl->want_gb) pass_b_rows(s, k, u, Tb);
        if (pl->want_db) {
            if (s->pred) wait_progress(&s->pred->b, t1 - u);
            put_group_rows(s->J, ws, K, &pr->dBm, 0, b, u, Tb, h0, nh, s->hpg, ws->acc, TN, Np, cv);
        }
        atomic_store_explicit(&s->prog[s->set].b, t1 - u, memory_order_release);
    }
}

void m2_ssdc_bwd_range(const bwd_job *J, const bwd_ws *w, int64_t b, int64_t t0, int64_t t1,
                       int64_t set, int64_t ci, const m2_view *vin, int64_t in,
                       const m2_view *vdf, int64_t dfi, const m2_view *vdi, int64_t dii) {
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    const int64_t H = pr->H, T = pl->T;
    bwd_set s;
    s.J = J;
    s.pl = pl;
    s.pr = pr;
    s.K = J->k;
    s.w = w;
    s.b = b;
    s.t0 = t0;
    s.t1 = t1;
    s.set = set;
    s.h0 = set * pl->hs;
    s.nh = s.h0 + pl->hs < H ? pl->hs : H - s.h0;
    s.hpg = H / pr->G;
    s.g0 = s.h0 / s.hpg;
    s.ng = (s.h0 + s.nh - 1) / s.hpg - s.g0 + 1;
    s.nb = (t1 - t0 + T - 1) / T;
    s.M = pl->snap_every;
    s.per_sweep = (pl->Pp / s.K->tile_n) * (pl->Np / s.K->tile_p);
    s.Ah = (const float *)pr->A.p + s.h0;
    s.dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + s.h0 : NULL;
    s.prog = w->prog + ci * pl->nsets;
    s.pred = (s.h0 % s.hpg != 0) ? &s.prog[set - 1] : NULL;
    s.pD = w->pD + (ci * H + s.h0) * pl->nD;
    s.vin = vin;
    s.in = in;
    for (int64_t j = 0; j < s.nh * pl->nD; j++) s.pD[j] = 0.0;
    for (int64_t j = 0; j < s.nh; j++)
        if (pr->D.p && !pr->D_per_channel) m2_ssdc_head_D(pr, s.h0 + j, w->Dh + j * pl->Pp);

    pass_a(&s);
    pass_b(&s, vdf, dfi);
    atomic_store_explicit(&s.prog[set].b, t1 - t0, memory_order_release);
    /* dz and dx went out with non-temporal stores: order them before the task ends */
    atomic_thread_fence(memory_order_seq_cst);
    for (int64_t j = 0; j < s.nh; j++) {
        if (vdi && vdi->p)
            m2_ssdc_state_out_t(vdi, dii, s.h0 + j, pr->P, pr->N, pl->Np, s.K->tile_p,
                                w->S + j * pl->Np * pl->Pp, 1.0f);
        w->pA[ci * H + s.h0 + j] = w->accA[j];
        w->pbias[ci * H + s.h0 + j] = w->accB[j];
    }
}

/* The reverse recurrence alone (no outputs) over span r of a split sequence, head set `set`:
 * from a zero gradient (the last span: from dfinal, which makes it exact), the span's local
 * gradient into its start state, to the workspace's gl. */
void m2_ssdc_bwd_local(const bwd_job *J, const bwd_ws *ws, const span_ref *sr, int64_t set) {
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    const span_ref r = *sr;
    const int64_t H = pr->H, P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t h0 = set * pl->hs, nh = h0 + pl->hs < H ? pl->hs : H - h0;
    const int64_t hpg = H / pr->G, g0 = h0 / hpg, ng = (h0 + nh - 1) / hpg - g0 + 1;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np, b = r.b;
    float *G = ws->S, *ub = ws->u, *rb = ws->r, *dyb = ws->dy, *Cp = ws->C;
    float *d = ws->d, *E = ws->E, *wt = ws->wt, *rf = ws->rf;
    int32_t *ridx = ws->ri;
    const int64_t RW = Pp > Np ? Pp : Np; /* converted activation rows (half storage) */
    float *cv = ws->cv, *cvd = ws->cvd;
    double *c = ws->c, *ctmp = ws->ctmp;
    int *nr = ws->nr;
    double *cb = ws->cb;
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;
    const int64_t nb = (r.tb - r.ta + T - 1) / T;
    /* the segment scales at every block start (forward over the dt), E at the end */
    for (int64_t j = 0; j < nh; j++) c[j] = 0.0;
    for (int64_t k = 0; k < nb; k++) {
        const int64_t u = r.ta + k * T, Tb = r.tb - u < T ? r.tb - u : T;
        for (int64_t j = 0; j < nh; j++) cb[k * nh + j] = c[j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, c, d, E, wt, NULL, nr, ridx, rf);
    }
    const int last = r.k == r.K - 1;
    for (int64_t j = 0; j < nh; j++) {
        const m2_view none = {NULL, {0, 0, 0, 0}};
        m2_ssdc_state_in_t(last ? &pr->dfinal : &none, r.s, h0 + j, P, N, Pp, Np, K->tile_p, G + j * SN);
        const float e = E[j * T + (r.tb - r.ta - 1) % T]; /* the last token's scale */
        for (int64_t i = 0; i < SN; i++) G[j * SN + i] *= e;
    }
    memset(ub, 0, (size_t)(nh * TP) * sizeof(float));
    memset(rb, 0, (size_t)(nh * TP) * sizeof(float));
    for (int64_t k = nb - 1; k >= 0; k--) {
        const int64_t u = r.ta + k * T, Tb = r.tb - u < T ? r.tb - u : T;
        for (int64_t j = 0; j < nh; j++) ctmp[j] = cb[k * nh + j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, ctmp, d, E, wt, NULL, nr, ridx, rf);
        prep_rows(pr, K, b, u, Tb, h0, nh, T, Pp, wt, E, cv, RW, ub, dyb, rb, NULL, NULL);
        for (int64_t q = 0; q < ng; q++)
            m2_ssdc_rows_act(pr, K, Cp + q * TN, &pr->Cm, b, u, g0 + q, Tb, N, Np, cv);
        for (int64_t j = 0; j < nh; j++)
            K->sweep(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T, M2_SWEEP_REV | M2_SWEEP_VROWS,
                     Cp + ((h0 + j) / hpg - g0) * TN, rb + j * TP, NULL, NULL, G + j * SN, NULL,
                     NULL, NULL, NULL);
    }
    const m2_view gl = m2_span_view(ws->gl, pr);
    for (int64_t j = 0; j < nh; j++)
        m2_ssdc_state_out_t(&gl, r.c, h0 + j, P, N, Np, K->tile_p, G + j * SN, 1.0f);
}
