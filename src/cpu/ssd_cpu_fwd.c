/*
 * ssd_cpu_fwd.c — the CPU SSD forward: plan, the pass over a token range, tasks, entry points
 * (ssd_cpu.h has the overview).
 *
 * A task is a set of consecutive heads of one sequence (or span), walking the blocks: per
 * block it processes dt for all its heads at once (dt_block), scales d_t x_t / E_t per head
 * and packs B, C once per group, token-major so that each token's rows of all the set's heads
 * are read together (rows of one head are H*P floats apart: a new 4 KiB page per token, whose
 * page walk is then paid once per set, not per head), then runs one sweep per head — while
 * they run, the set's z rows of this block and x, B, C rows of the next are requested into L2
 * in address order (fwd_prefetch_plan) — and the epilogue (E y + D x, the silu gate) token by
 * token, out streamed with non-temporal stores. Sets are chosen from the thread count; they
 * never change a result.
 */
#include <math.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "cpu/ssd_cpu.h"

/* Forward token block: per head of a set, d_t x_t / E_t and y_t of a block are packed
 * (FWD_BLOCK * P floats each) and B, C per group (FWD_BLOCK * N each); the best measured
 * (docs/cpu_ssd.md §3). Results do not depend on it. */
#define FWD_BLOCK 32

/* Per-thread bytes the head set of a forward task may occupy (its states and block
 * buffers), so that they stay in L2 next to the streamed rows. */
#ifndef M2_CPU_HSET_BUDGET
#define M2_CPU_HSET_BUDGET (1536u << 10)
#endif
/* The head-set search below is exact up to this many heads and spans; beyond, the budget
 * alone sizes the sets (there are then far more sets than threads either way). */
#define HSET_SEARCH_MAX_HEADS ((int64_t)1 << 16)
#define HSET_SEARCH_MAX_ITEMS ((int64_t)1 << 40)

/* Heads per task. A task runs a set of consecutive heads of one sequence (or span) through
 * the blocks together: it reads each token's rows of x, z, out for all its heads at once
 * (rows of one head are H*P floats apart, a new 4 KiB page per token: one page walk per
 * token per tensor is paid per task, not per head), and packs B and C once per group. So
 * sets are large: the fewest sets whose makespan on nthr threads, ceil(tasks / nthr) rounds
 * of hs heads (`items` sequences or spans of equal length, ceil(H / hs) sets each), is the
 * smallest; then halved until a set's buffers fit M2_CPU_HSET_BUDGET. The split never
 * changes a result: every head's arithmetic is the same in any set. O(H) steps, H bounded
 * by HSET_SEARCH_MAX_HEADS (the costs then stay far below 2^63); O(log H) beyond. */
int64_t m2_ssdc_head_set(const m2_ssd_problem *pr, int64_t items, int nthr, size_t per_head) {
    const int64_t H = pr->H, W = nthr > 0 ? nthr : 1, it = items > 0 ? items : 1;
    const size_t cap_ = (size_t)M2_CPU_HSET_BUDGET / (per_head > 0 ? per_head : 1);
    const int64_t cap = (int64_t)cap_;
    int64_t best = H, best_cost = -1;
    if (H <= HSET_SEARCH_MAX_HEADS && it <= HSET_SEARCH_MAX_ITEMS)
        for (int64_t ns = 1; ns <= H; ns++) {
            const int64_t hs = (H + ns - 1) / ns, sets = (H + hs - 1) / hs;
            const int64_t cost = (it * sets + W - 1) / W * hs;
            if (best_cost < 0 || cost < best_cost) {
                best_cost = cost;
                best = hs;
            }
        }
    int64_t hs = best;
    while (hs > 1 && hs > cap) hs = (hs + 1) / 2;
    return hs > 0 ? hs : 1;
}

mamba2_status_t m2_ssdc_fwd_plan(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                 fwd_plan *pl) {
    /* the core bounds every size by MAX_DIM; checked again here so that the int64 arithmetic
     * below (round_up, a product of two sizes) cannot overflow whoever calls */
    const int64_t dims[7] = {pr->B, pr->L, pr->H, pr->P, pr->N, pr->G, pr->nseq};
    for (int i = 0; i < 7; i++)
        if (dims[i] < 0 || dims[i] > MAX_DIM) return m2_ssdc_too_big(pr, "forward");
    const m2_cpu_kernels *K = m2_ssdc_fwd_kernels(ctx, pr);
    pl->T = FWD_BLOCK;
    pl->pf_how = ctx->amd ? M2_PF_NTA : M2_PF_L2;
    pl->Pp = round_up(pr->P > 0 ? pr->P : 1, K->tile_p);
    pl->Np = round_up(pr->N > 0 ? pr->N : 1, K->tile_n);
    pl->nthr = m2_cpu_plan_threads(ctx);
    pl->nspan = m2_span_total(pr);
    pl->split = pl->nspan > pr->nseq;
    /* every size below in size_t with checks; PN, the state of one head, also bounds the
     * int64 index arithmetic of the span views */
    const size_t T = FWD_BLOCK, f = sizeof(float), Pp = (size_t)pl->Pp, Np = (size_t)pl->Np;
    const size_t P = (size_t)pr->P, G = (size_t)(pr->G > 0 ? pr->G : 1);
    size_t PN, HPN, SN, per_head;
    if (!m2_size_prod(&PN, 2, (const int64_t[]){pr->P, pr->N}) ||
        !m2_size_prod(&HPN, 4, (const int64_t[]){pr->H, pr->P, pr->N, 4}) || HPN > INT64_MAX ||
        !m2_size_mul(Np, Pp, &SN) || !m2_ssdc_size_fma(SN, 2 * T, Pp + Np, &per_head) ||
        !m2_size_mul(per_head, f, &per_head))
        return m2_ssdc_too_big(pr, "forward");
    pl->hs = m2_ssdc_head_set(pr, pl->nspan, pl->nthr, per_head);
    pl->nsets = (pr->H + pl->hs - 1) / pl->hs;
    const int64_t hpg = pr->H / (int64_t)G > 0 ? pr->H / (int64_t)G : 1; /* H, G >= 1: valid */
    pl->ngmax = (pl->hs + hpg - 1) / hpg + 1;
    if (pl->ngmax > (int64_t)G) pl->ngmax = (int64_t)G;
    const size_t hs = (size_t)pl->hs, ng = (size_t)pl->ngmax, RW = Pp > Np ? Pp : Np;
    const size_t half = pr->act_dtype != MAMBA2_DTYPE_F32;
    size_t nst = 0;
    if (pl->split && !m2_size_prod(&nst, 2, (const int64_t[]){pl->nspan, pr->H}))
        return m2_ssdc_too_big(pr, "forward");
    fwd_layout *lay = &pl->lay;
    ws_acc acc = {0, 1};
    FWD_GLOBAL(WS_TAKE)
    lay->glob = acc.off;
    acc.off = 0;
    FWD_THREAD(WS_TAKE)
    lay->per_thread = acc.off;
    if (!acc.ok || !m2_size_add(lay->glob, 63, &lay->glob) ||
        !m2_size_add(lay->per_thread, 63, &lay->per_thread))
        return m2_ssdc_too_big(pr, "forward");
    lay->glob &= ~(size_t)63;
    lay->per_thread &= ~(size_t)63;
    /* + slack for the alignment of the caller's pointer */
    if (!m2_ssdc_size_fma(lay->glob, lay->per_thread, (size_t)pl->nthr, &pl->total) ||
        !m2_size_add(pl->total, 64, &pl->total) || pl->total > INT64_MAX)
        return m2_ssdc_too_big(pr, "forward");
    return MAMBA2_STATUS_OK;
}

/* Rows of T tokens (n floats each) into the sweep's packed [Np/C][T][C] layout, C =
 * M2_TILE_COLS (the forward's B and C: a constant stride in the sweep's token loop), columns
 * n >= N zero. */
#define TC M2_TILE_COLS
static void pack_row(float *dst, const float *r, int64_t t, int64_t T, int64_t n, int64_t Np) {
    int64_t j = 0;
    for (; j + TC <= n; j += TC) memcpy(dst + j * T + TC * t, r + j, TC * sizeof(float));
    if (j < n) {
        float tmp[TC] = {0.0f};
        memcpy(tmp, r + j, (size_t)(n - j) * sizeof(float));
        memcpy(dst + j * T + TC * t, tmp, sizeof tmp);
        j += TC;
    }
    for (; j < Np; j += TC) memset(dst + j * T + TC * t, 0, TC * sizeof(float));
}

/* Rows (b, u + t, g), t < T, of a [B,L,G,N] activation, packed (tmp: one row, for half). */
static void pack_act(const m2_ssd_problem *pr, const m2_cpu_kernels *K, float *dst,
                     const m2_view *v, int64_t b, int64_t u, int64_t g, int64_t T, int64_t n,
                     int64_t Np, float *tmp) {
    int64_t t = 0;
    if (act_f32(pr) && n == Np) /* TC tokens at a time: a column group's TC x TC in one go */
        for (; t + TC <= T; t += TC) {
            const float *rt[TC];
            for (int64_t q = 0; q < TC; q++) rt[q] = row3(v, b, u + t + q, g);
            for (int64_t j = 0; j < n; j += TC) {
                float *d = dst + j * T + TC * t;
                for (int64_t q = 0; q < TC; q++) memcpy(d + q * TC, rt[q] + j, TC * sizeof(float));
            }
        }
    for (; t < T; t++) pack_row(dst, act_in(pr, K, v, b, u + t, g, n, tmp), t, T, n, Np);
}
#undef TC

/* dst(c, r) = f * src(r, c) for r < R, c < C; a side is rows ld floats apart, or with tb a
 * tile-major sweep state with rows of ld floats (m2_tile_off). 4 x 4 blocks through SSE
 * registers where x86-64 has them and the tiles hold whole blocks (the state transposes of
 * every forward call, a noticeable share of a short sequence's forward when scalar), element
 * by element at the edges. The same products either way. */
static void transpose_scaled(const float *src, int64_t ld_s, int64_t tb_s, int64_t R, int64_t C,
                             float *dst, int64_t ld_d, int64_t tb_d, float f) {
#define SRC_AT(r, c) (tb_s ? m2_tile_off(r, c, ld_s, tb_s) : (r) * ld_s + (c))
#define DST_AT(c, r) (tb_d ? m2_tile_off(c, r, ld_d, tb_d) : (c) * ld_d + (r))
    int64_t r0 = 0;
#if defined(__SSE2__)
    const __m128 vf = _mm_set1_ps(f);
    if (tb_s % 4 == 0 && tb_d % 4 == 0 && M2_TILE_COLS % 4 == 0)
        for (; r0 + 4 <= R; r0 += 4) {
            int64_t c = 0;
            for (; c + 4 <= C; c += 4) {
                __m128 a = _mm_loadu_ps(src + SRC_AT(r0, c)), b = _mm_loadu_ps(src + SRC_AT(r0 + 1, c)),
                       e = _mm_loadu_ps(src + SRC_AT(r0 + 2, c)), d = _mm_loadu_ps(src + SRC_AT(r0 + 3, c));
                _MM_TRANSPOSE4_PS(a, b, e, d);
                _mm_storeu_ps(dst + DST_AT(c, r0), _mm_mul_ps(vf, a));
                _mm_storeu_ps(dst + DST_AT(c + 1, r0), _mm_mul_ps(vf, b));
                _mm_storeu_ps(dst + DST_AT(c + 2, r0), _mm_mul_ps(vf, e));
                _mm_storeu_ps(dst + DST_AT(c + 3, r0), _mm_mul_ps(vf, d));
            }
            for (; c < C; c++)
                for (int64_t q = 0; q < 4; q++) dst[DST_AT(c, r0 + q)] = f * src[SRC_AT(r0 + q, c)];
        }
#endif
    for (; r0 < R; r0++)
        for (int64_t c = 0; c < C; c++) dst[DST_AT(c, r0)] = f * src[SRC_AT(r0, c)];
#undef SRC_AT
#undef DST_AT
}

/* State [S,H,P,N] row (s,h) -> the forward sweep's [Np][Pp] layout, tile-major with tiles tb
 * wide (zeros when absent or padded). */
static void state_in(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N, int64_t Pp,
                     int64_t Np, int64_t tb, float *S) {
    memset(S, 0, (size_t)(Pp * Np) * sizeof(float));
    if (!st->p) return;
    transpose_scaled(row3(st, s, h, 0), st->s[2], 0, P, N, S, Pp, tb, 1.0f); /* 1 * x is exactly x */
}

/* dst[s,h] = e * S (true state from the carried one), back in [P][N]. */
static void state_out(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                      int64_t Pp, int64_t tb, const float *S, float e) {
    transpose_scaled(S, Pp, tb, N, P, row3(st, s, h, 0), st->s[2], 0, e);
}

/* Rows requested (`how`: into L2 with prefetcht1, or prefetchnta on AMD cores) while the sweeps
 * of a block [u, u + Tb) run (one plan for the set's heads h0 .. h0 + nh - 1, walked sweep
 * after sweep): with outputs the set's z rows of this block (the epilogue reads them after the
 * sweeps); then its x rows of the next block [v, v + Tn) and the B (and, with outputs, C) rows
 * of its groups g0 .. g0 + ng - 1. A token's rows of a set are one range (heads adjacent: a set
 * of all H heads makes the block of a tensor one contiguous range; head-major views: one range
 * per head, pf_add_rows), so the requests walk each tensor in address order: a page is entered
 * once per block, not once per head. (Per-head rows 4 KiB apart, requested into L1, thrash a
 * few L1 sets and cost a page walk per row; measured, they slowed the sweep more than they
 * saved.) out is written with non-temporal stores and not requested. */
static void fwd_prefetch_plan(const m2_ssd_problem *pr, int64_t b, int64_t u, int64_t Tb,
                              int64_t v, int64_t Tn, int64_t h0, int64_t nh, int64_t g0,
                              int64_t ng, int outputs, int how, m2_pf *pf) {
    const int64_t P = pr->P, N = pr->N;
    m2_pf_init(pf);
    if (outputs) m2_ssdc_pf_add_rows(pf, pr, &pr->z, b, u, h0, Tb, nh, P, how);
    if (Tn <= 0) return;
    m2_ssdc_pf_add_rows(pf, pr, &pr->x, b, v, h0, Tn, nh, P, how);
    m2_ssdc_pf_add_rows(pf, pr, &pr->Bm, b, v, g0, Tn, ng, N, how);
    if (outputs) m2_ssdc_pf_add_rows(pf, pr, &pr->Cm, b, v, g0, Tn, ng, N, how);
}

/* The forward's x̂ rows of head j (of the set from h0) over a block:
 * ub[i][:] = w[i] x(b, u + i, h0 + j) for tokens i < Tb, rows Pp apart. x from the tensor (float32) or from hr, the block's rows
 * of the set converted (half storage: token i's nh * P floats at hr + i * nh * P). */
static void scale_head(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b, int64_t u,
                       int64_t Tb, int64_t h0, int64_t nh, int64_t j, const float *w,
                       const float *hr, int64_t Pp, float *ub) {
    if (act_f32(pr))
        K->scale(Tb, pr->P, w, 1, row3(&pr->x, b, u, h0 + j), pr->x.s[1], ub, Pp);
    else
        K->scale(Tb, pr->P, w, 1, hr + j * pr->P, nh * pr->P, ub, Pp);
}

/* One forward pass of heads [h0, h0 + nh) of sequence row b over tokens [ta, tb), from the
 * state row `in` of view vin (zeros when vin->p is NULL), the end state to row `out` of vout
 * (when vout->p). With outputs: out, and the requested position states. Else only the state
 * (and, when ldec, Σ d_t A per head). The pass starts a segment at ta, as a sequence does. */
static void fwd_range(const fwd_plan *pl, const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                      const fwd_ws *ws, int64_t b, int64_t ta, int64_t tb, int64_t h0,
                      int64_t nh, const m2_view *vin, int64_t in, const m2_view *vout,
                      int64_t out, int outputs, double *ldec) {
    const int64_t H = pr->H, P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t hpg = H / pr->G, g0 = h0 / hpg, ng = (h0 + nh - 1) / hpg - g0 + 1;
    float *S = ws->S, *ub = ws->u, *y = ws->y, *Bp = ws->B, *Cp = ws->C;
    float *d = ws->d, *E = ws->E, *w = ws->w, *Db = ws->D, *rf = ws->rf;
    int32_t *ridx = ws->ri;
    float *cv = ws->cv, *cvd = ws->cvd, *hr = ws->hr; /* half storage: converted rows */
    double *c = ws->c, *dec = ws->dec;
    int *nr = ws->nr;
    float *e_last = ws->e_last;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np;
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;

    /* requested states (mamba2_ssd_forward_states): a block ends at each such token */
    const int64_t flat0 = b * pr->L;
    int64_t next = outputs && pr->npos ? m2_ssd_pos_lower_bound(pr, flat0 + ta) : pr->npos;

    for (int64_t j = 0; j < nh; j++) {
        state_in(vin, in, h0 + j, P, N, Pp, Np, K->tile_p, S + j * SN);
        c[j] = dec[j] = 0.0;
        e_last[j] = 1.0f;
        if (pr->D.p && !pr->D_per_channel) m2_ssdc_head_D(pr, h0 + j, Db + j * Pp);
    }
    memset(ub, 0, (size_t)TP * sizeof(float)); /* the padding columns stay zero */
    const int64_t slots_per_sweep = (Np / K->tile_n) * (Pp / K->tile_p);
    for (int64_t u = ta, Tb; u < tb; u += Tb) {
        Tb = tb - u < T ? tb - u : T;
        const int64_t tp = next < pr->npos ? m2_ssd_pos(pr, next) - flat0 : -1;
        if (tp >= u && tp < u + Tb) Tb = tp - u + 1;
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, u == ta, c, d, E, w, NULL, nr, ridx, rf);
        if (ldec)
            for (int64_t j = 0; j < nh; j++)
                for (int64_t i = 0; i < Tb; i++) dec[j] += (double)d[j * T + i] * (double)Ah[j];
        /* half storage: the block's x rows of the set converted once (for x̂ and the
         * epilogue), token after token (a token's rows of the set are adjacent) */
        if (!act_f32(pr))
            for (int64_t i = 0; i < Tb; i++) {
                int64_t ldx;
                act_in_heads(pr, K, &pr->x, b, u + i, h0, nh, P, hr + i * nh * P, &ldx);
            }
        /* token-major packing: each token's rows for all groups at once */
        for (int64_t k = 0; k < ng; k++) {
            pack_act(pr, K, Bp + k * TN, &pr->Bm, b, u, g0 + k, Tb, N, Np, cv);
            if (outputs)
                pack_act(pr, K, Cp + k * TN, &pr->Cm, b, u, g0 + k, Tb, N, Np, cv);
        }
        const int64_t v = u + Tb, Tn = tb - v < T ? tb - v : T;
        m2_pf pf;
        fwd_prefetch_plan(pr, b, u, Tb, v, Tn, h0, nh, g0, ng, outputs, pl->pf_how, &pf);
        const int64_t slots = nh * slots_per_sweep * ((Tb + 7) / 8);
        pf.per8 = (pf.left + slots - 1) / slots;
        for (int64_t j = 0; j < nh; j++) {
            const int64_t k = (h0 + j) / hpg - g0;
            /* the w rows accumulate: zeroed right before the sweep, into L1 */
            if (outputs) memset(y + j * TP, 0, (size_t)(Tb * Pp) * sizeof(float));
            /* the head's x̂ rows right before its sweep, into one buffer: in L1 for the sweep
             * (all heads' rows first left them in L2: forward 1-3 % slower) */
            scale_head(pr, K, b, u, Tb, h0, nh, j, w + j * T, hr, Pp, ub);
            K->sweep(Tb, Np, Pp, nr[j], ridx + j * T, rf + j * T, 0, ub, Bp + k * TN,
                     outputs ? Cp + k * TN : NULL, NULL, S + j * SN, NULL,
                     outputs ? y + j * TP : NULL, NULL, &pf);
        }
        /* the epilogue token by token: a token's rows of the set are adjacent in x, z, out */
        if (outputs) {
            const float *D0 = !pr->D.p             ? NULL
                              : pr->D_per_channel ? (const float *)pr->D.p + h0 * pr->D.s[0]
                                                  : Db;
            const int64_t ldD = pr->D_per_channel ? pr->D.s[0] : Pp, hP = nh * P;
            float *hz = hr + T * hP; /* past the block's converted x rows */
            for (int64_t i = 0; i < Tb; i++) {
                const int64_t t = u + i;
                int64_t ldx = P, ldz = 0, ldo, ldox = 0;
                /* x: half storage converted it for x̂ already */
                const float *xr = act_f32(pr) ? act_in_heads(pr, K, &pr->x, b, t, h0, nh, P, NULL, &ldx)
                                              : hr + i * hP;
                const float *zr = pr->z.p ? act_in_heads(pr, K, &pr->z, b, t, h0, nh, P, hz, &ldz) : NULL;
                float *orr = act_out_heads(pr, &pr->out, b, t, h0, P, hz + hP, &ldo);
                float *oxr = pr->out_x.p ? act_out_heads(pr, &pr->out_x, b, t, h0, P, hz + 2 * hP, &ldox) : NULL;
                /* f32: streamed into the tensor; half: into the staging rows */
                K->fwd_out(nh, P, E + i, T, y + i * Pp, TP, xr, ldx, D0, ldD, zr, ldz, orr, ldo, oxr,
                           ldox, act_f32(pr));
                act_flush_heads(pr, K, &pr->out, b, t, h0, nh, P, orr);
                if (oxr) act_flush_heads(pr, K, &pr->out_x, b, t, h0, nh, P, oxr);
            }
        }
        for (int64_t j = 0; j < nh; j++) e_last[j] = E[j * T + Tb - 1];
        if (tp == u + Tb - 1) { /* the states after token tp */
            for (int64_t j = 0; j < nh; j++)
                state_out(&pr->pos_states, next, h0 + j, P, N, Pp, K->tile_p, S + j * SN, e_last[j]);
            next++;
        }
    }
    /* out and out_x went out with non-temporal stores (fwd_out, store_row): order them before
     * the task ends */
    if (outputs) atomic_thread_fence(memory_order_seq_cst);
    if (vout->p)
        for (int64_t j = 0; j < nh; j++) state_out(vout, out, h0 + j, P, N, Pp, K->tile_p, S + j * SN, e_last[j]);
    if (ldec)
        for (int64_t j = 0; j < nh; j++) ldec[j] = dec[j];
}

/* Pass 1: whole sequences that are not split; of a split one, span 0 from the initial
 * state (its end state is span 1's start) and spans 1 .. K-2 from zero (their local end
 * states and log decays). */
static void fwd_task_p1(void *arg, int64_t task, int thread) {
    const fwd_job *J = (const fwd_job *)arg;
    const fwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    span_ref r;
    if (!m2_span_item(pr, SPANS_FIRST, task / pl->nsets, &r)) return;
    const int64_t h0 = (task % pl->nsets) * pl->hs, nh = h0 + pl->hs < pr->H ? pl->hs : pr->H - h0;
    const fwd_ws w = fwd_bind(&pl->lay, J->base, thread), *ws = &w;
    const m2_view cs = m2_span_view(w.cs, pr), cl = m2_span_view(w.cl, pr);
    double *cdec = w.cdec;
    const m2_view none = {NULL, {0, 0, 0, 0}};
    if (r.K == 1) {
        if (J->outputs) /* the backward needs nothing from unsplit sequences here */
            fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &pr->init, r.s, &pr->final,
                      r.s, 1, NULL);
    } else if (r.k == 0)
        fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &pr->init, r.s, &cs, r.c + 1,
                  J->outputs, NULL);
    else
        fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &none, 0, &cl, r.c, 0,
                  cdec + r.c * pr->H + h0);
}

/* Pass 2: the true span start states, per (sequence, head); nothing for unsplit ones. */
static void fwd_task_p2(void *arg, int64_t task, int thread) {
    (void)thread;
    const fwd_job *J = (const fwd_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const int64_t si = task / pr->H, h = task % pr->H;
    int64_t b, t0, t1;
    m2_ssd_seq(pr, si, &b, &t0, &t1);
    const int64_t K = m2_span_count(pr, t1 - t0);
    if (K < 2) return;
    const int64_t c0 = m2_span_first(pr, si);
    const fwd_ws w = fwd_bind(&J->pl.lay, J->base, 0); /* the global region only */
    const m2_view cs = m2_span_view(w.cs, pr), cl = m2_span_view(w.cl, pr);
    m2_span_carry(pr, &cs, &cl, w.cdec, c0, K, h);
}

/* Pass 3: spans 1 .. K-1 of the split sequences from their true start states. */
static void fwd_task_p3(void *arg, int64_t task, int thread) {
    const fwd_job *J = (const fwd_job *)arg;
    const fwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    span_ref r;
    if (!m2_span_item(pr, SPANS_LAST, task / pl->nsets, &r)) return;
    const int64_t h0 = (task % pl->nsets) * pl->hs, nh = h0 + pl->hs < pr->H ? pl->hs : pr->H - h0;
    const fwd_ws w = fwd_bind(&pl->lay, J->base, thread), *ws = &w;
    const m2_view cs = m2_span_view(w.cs, pr);
    const m2_view none = {NULL, {0, 0, 0, 0}};
    fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &cs, r.c,
              r.k == r.K - 1 && J->outputs ? &pr->final : &none, r.s, J->outputs, NULL);
}

void m2_ssdc_fwd_run(mamba2_context_t *ctx, fwd_job *J) {
    const m2_ssd_problem *pr = J->pr;
    m2_cpu_run_tasks(ctx, m2_span_items(pr, SPANS_FIRST) * J->pl.nsets, fwd_task_p1, J);
    if (!J->pl.split) return;
    m2_cpu_run_tasks(ctx, pr->nseq * pr->H, fwd_task_p2, J);
    if (J->outputs)
        m2_cpu_run_tasks(ctx, m2_span_items(pr, SPANS_LAST) * J->pl.nsets, fwd_task_p3, J);
}

mamba2_status_t m2_cpu_ssd_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_ssd_problem *pr, size_t *bytes) {
    mamba2_status_t st = m2_ssdc_check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    if (pr->L == 0) { /* no tokens: final = initial_state, no scan (m2_ssdc_empty_states) */
        *bytes = 0;
        return MAMBA2_STATUS_OK;
    }
    fwd_plan pl;
    st = m2_ssdc_fwd_plan(ctx, pr, &pl);
    if (st != MAMBA2_STATUS_OK) return st;
    *bytes = pl.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    mamba2_status_t st = m2_ssdc_check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    if (pr->L == 0) {
        m2_ssdc_empty_states(ctx, pr, &pr->final, &pr->init);
        return MAMBA2_STATUS_OK;
    }
    fwd_job J;
    J.pr = pr;
    J.k = m2_ssdc_fwd_kernels(ctx, pr);
    J.outputs = 1;
    st = m2_ssdc_fwd_plan(ctx, pr, &J.pl);
    if (st != MAMBA2_STATUS_OK) return st;
    if (!ws) return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "cpu ssd forward: no workspace");
    J.base = m2_ssdc_align64(ws);
    m2_ssdc_fwd_run(ctx, &J);
    return MAMBA2_STATUS_OK;
}