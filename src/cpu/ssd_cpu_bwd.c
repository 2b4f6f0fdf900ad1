/*
 * ssd_cpu_bwd.c — the CPU SSD backward: plan, the span tasks, entry points and the per-head
 * sums (ssd_cpu.h has the overview; ssd_cpu_bwd_pass.c the passes of one head set).
 *
 * Per set of heads, two passes and no checkpoints of the whole sequence: A (forward) and B
 * (reverse), ssd_cpu_bwd_pass.c. A split sequence (ssd_cpu_span.c) first runs the forward's
 * span passes for its span start states (inside this workspace), then B1: spans 1 .. K-1 the
 * reverse recurrence alone for their local gradients, B2: the gradients into the span ends
 * carried from the last span, B3: every span's full backward from its true start state and
 * end gradient.
 */
#include <math.h>

#include "cpu/ssd_cpu.h"

/* Backward token block: half the forward's, so that the rows a backward sweep keeps per token
 * (pass B: x̂, E dy, B, C, dBm, Ĝ·B, the r partial sums) stay in L1, for twice the state
 * traffic per token (docs/cpu_ssd.md §4). */
#define BWD_BLOCK 16
/* λ restarts: a snapshot every BWD_SNAP_TOKENS tokens (every fourth block), as long as the
 * snapshots of the longest span fit in BWD_SNAP_BYTES per thread (at least BWD_SNAP_MIN of
 * them); beyond that the interval grows with the span length. */
#define BWD_SNAP_TOKENS 64
#define BWD_SNAP_BYTES ((size_t)64 << 20)
#define BWD_SNAP_MIN 256

static mamba2_status_t bwd_plan_make(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                     bwd_plan *pl) {
    const m2_cpu_kernels *K = m2_ssdc_bwd_kernels(ctx, pr);
    const int64_t H = pr->H;
    pl->T = BWD_BLOCK;
    /* transposed states [Pp][Np]: n along the register tile's vectors, p its columns */
    pl->Pp = round_up(pr->P > 0 ? pr->P : 1, K->tile_n);
    pl->Np = round_up(pr->N > 0 ? pr->N : 1, K->tile_p);
    pl->nthr = m2_cpu_plan_threads(ctx);
    mamba2_status_t st = m2_ssdc_fwd_plan(ctx, pr, &pl->fp);
    if (st != MAMBA2_STATUS_OK) return st;
    pl->nspan = pl->fp.nspan;
    pl->split = pl->fp.split;
    pl->Lmax = m2_span_longest(pr);
    pl->nblk = (pl->Lmax + pl->T - 1) / pl->T;
    pl->nD = pr->D_per_channel ? pr->P : 1;

    pl->want_decay = pr->ddt.p || pr->dA.p || pr->ddt_bias.p;
    pl->want_dc = pr->dCm.p != NULL;
    /* y_t in pass A only for dz; the decay's dy·y term comes from the dC contraction
     * (C_t·(S_tᵀ dy_t)), which pass A makes anyway when dCm is wanted */
    pl->want_y = pr->dz.p && pr->z.p && !pr->out_x.p; /* else dz reads the forward's out_x */
    pl->want_acc = pl->want_dc || pl->want_decay;
    pl->want_db = pr->dBm.p != NULL;
    pl->want_gb = pr->dx.p || pl->want_decay;
    pl->need_a_sweep = pl->want_dc || pl->want_y || pl->want_decay;
    pl->need_a_rows = pl->need_a_sweep || pr->dD.p || pr->dz.p; /* dz: pass A's rows */
    pl->need_b = pl->want_gb || pl->want_db || pr->dinit.p;

    /* every size below in size_t with checks (the forward's plan checked P N and H P N) */
    const size_t T = BWD_BLOCK, f = sizeof(float), Pp = (size_t)pl->Pp, Np = (size_t)pl->Np;
    const size_t P = (size_t)pr->P, PN = (size_t)pr->P * (size_t)pr->N; /* checked by fp */
    size_t SN, per_head, snap_state;
    if (!m2_size_mul(Np, Pp, &SN) || !m2_ssdc_size_fma(SN, T, 4 * Pp + 3 * Np, &per_head) ||
        !m2_size_mul(per_head, f, &per_head))
        return m2_ssdc_too_big(pr, "backward");
    pl->hs = m2_ssdc_head_set(pr, pl->nspan, pl->nthr, per_head);
    pl->nsets = (H + pl->hs - 1) / pl->hs;
    if (!m2_size_mul(SN, f, &snap_state) || !m2_size_mul(snap_state, (size_t)pl->hs, &snap_state))
        return m2_ssdc_too_big(pr, "backward");
    {
        int64_t smax = (int64_t)(BWD_SNAP_BYTES / snap_state); /* snap_state >= 1 */
        if (smax < BWD_SNAP_MIN) smax = BWD_SNAP_MIN;
        pl->snap_every = BWD_SNAP_TOKENS / pl->T;
        if (pl->nblk > pl->snap_every * smax) pl->snap_every = (pl->nblk + smax - 1) / smax;
    }
    pl->nsnap = pl->want_decay ? (pl->nblk + pl->snap_every - 1) / pl->snap_every : 0;
    const int64_t hpg = pr->G > 0 && H / pr->G > 0 ? H / pr->G : 1;
    pl->ngmax = (pl->hs + hpg - 1) / hpg + 1;
    if (pl->ngmax > pr->G) pl->ngmax = pr->G;
    const size_t hs = (size_t)pl->hs, ng = (size_t)pl->ngmax, RW = Pp > Np ? Pp : Np;
    const size_t nspan = (size_t)pl->nspan, nsets = (size_t)pl->nsets, nD = (size_t)pl->nD;
    const size_t nblk = (size_t)pl->nblk, nsnap = (size_t)pl->nsnap, M = (size_t)pl->snap_every;
    const size_t Lmax = (size_t)pl->Lmax, sdk = pl->want_decay ? 1 : 0;
    const size_t half = pr->act_dtype != MAMBA2_DTYPE_F32;
    const size_t Bt = (size_t)pr->B, L = (size_t)pr->L, G = (size_t)pr->G, N = (size_t)pr->N;
    /* half storage: a group's dBm, dCm rows are summed over its heads in float32 and rounded
     * once, by the task that holds the group's last head (put_group_rows); where a group
     * spans head sets, the partial sums wait in float32 rows of the workspace (grad_row) */
    const size_t gcopy = half && pl->hs % hpg != 0 && (pr->dBm.p || pr->dCm.p);
    size_t nsh;
    if (!m2_size_prod(&nsh, 2, (const int64_t[]){pl->nspan, H}))
        return m2_ssdc_too_big(pr, "backward");
    const size_t nstb = pl->split ? nsh : 0;

    bwd_layout *lay = &pl->lay;
    ws_acc acc = {pl->fp.lay.glob, 1}; /* after the forward's span buffers */
    lay->cs = pl->fp.lay.cs;
    lay->cl = pl->fp.lay.cl;
    lay->cdec = pl->fp.lay.cdec;
    BWD_GLOBAL(WS_TAKE)
    lay->glob = acc.off;
    acc.off = 0;
    BWD_THREAD(WS_TAKE)
    lay->per_thread = acc.off;
    if (!acc.ok || !m2_size_add(lay->glob, 63, &lay->glob) ||
        !m2_size_add(lay->per_thread, 63, &lay->per_thread))
        return m2_ssdc_too_big(pr, "backward");
    lay->glob &= ~(size_t)63;
    lay->per_thread &= ~(size_t)63;
    if (pl->fp.lay.per_thread > lay->per_thread) lay->per_thread = pl->fp.lay.per_thread;
    pl->fp.lay.glob = lay->glob; /* the forward passes use the same per-thread regions */
    pl->fp.lay.per_thread = lay->per_thread;
    if (!m2_ssdc_size_fma(lay->glob, lay->per_thread, (size_t)pl->nthr, &pl->total) ||
        !m2_size_add(pl->total, 64, &pl->total) || pl->total > INT64_MAX)
        return m2_ssdc_too_big(pr, "backward");
    return MAMBA2_STATUS_OK;
}

/* B1: spans 1 .. K-1 of a split sequence, their local gradients into their start states. */
static void bwd_task_b1(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    span_ref r;
    if (!m2_span_item(J->pr, SPANS_LAST, task / J->pl.nsets, &r)) return;
    const bwd_ws w = bwd_bind(&J->pl.lay, J->base, thread);
    m2_ssdc_bwd_local(J, &w, &r, task % J->pl.nsets);
}

/* B2: per (sequence, head), the gradients into the span end states, last span first:
 * ge[K-2] = gl[K-1]; ge[k-1] = gl[k] + (Π_{t in span k} a_t) ge[k]. */
static void bwd_task_b2(void *arg, int64_t task, int thread) {
    (void)thread;
    const bwd_job *J = (const bwd_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const int64_t si = task / pr->H, h = task % pr->H, P = pr->P, N = pr->N;
    int64_t b, t0, t1;
    m2_ssd_seq(pr, si, &b, &t0, &t1);
    const int64_t K = m2_span_count(pr, t1 - t0);
    if (K < 2) return;
    const int64_t c0 = m2_span_first(pr, si);
    const bwd_ws w = bwd_bind(&J->pl.lay, J->base, 0); /* the global region only */
    const m2_view ge = m2_span_view(w.ge, pr), gl = m2_span_view(w.gl, pr);
    const double *cdec = w.cdec;
    for (int64_t p = 0; p < P; p++)
        memcpy(row3(&ge, c0 + K - 2, h, p), row3(&gl, c0 + K - 1, h, p), (size_t)N * sizeof(float));
    for (int64_t k = K - 2; k >= 1; k--) {
        const float a = (float)exp(cdec[(c0 + k) * pr->H + h]);
        for (int64_t p = 0; p < P; p++) {
            const float *loc = row3(&gl, c0 + k, h, p), *src = row3(&ge, c0 + k, h, p);
            float *dst = row3(&ge, c0 + k - 1, h, p);
            for (int64_t n = 0; n < N; n++) dst[n] = loc[n] + a * src[n];
        }
    }
}

/* B3: the backward of every span from its true start state and end gradient. */
static void bwd_task_b3(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    span_ref r;
    if (!m2_span_item(pr, SPANS_ALL, task / pl->nsets, &r)) return;
    const bwd_ws w = bwd_bind(&pl->lay, J->base, thread);
    const m2_view cs = m2_span_view(w.cs, pr), ge = m2_span_view(w.ge, pr);
    const int first = r.k == 0, last = r.k == r.K - 1;
    m2_ssdc_bwd_range(J, &w, r.b, r.ta, r.tb, task % pl->nsets, r.c, first ? &pr->init : &cs,
              first ? r.s : r.c, last ? &pr->dfinal : &ge, last ? r.s : r.c,
              first ? &pr->dinit : NULL, r.s);
}

mamba2_status_t m2_cpu_ssd_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_ssd_problem *pr, size_t *bytes) {
    mamba2_status_t st = m2_ssdc_check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    if (pr->L == 0) { /* no tokens: no scan and no workspace (m2_cpu_ssd_backward) */
        *bytes = 0;
        return MAMBA2_STATUS_OK;
    }
    bwd_plan pl;
    st = bwd_plan_make(ctx, pr, &pl);
    if (st != MAMBA2_STATUS_OK) return st;
    *bytes = pl.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    mamba2_status_t st = m2_ssdc_check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    if (pr->L == 0) { /* no tokens: dinitial_state = dfinal_state, zero per-head sums */
        m2_ssdc_empty_states(ctx, pr, &pr->dinit, &pr->dfinal);
        const int64_t nD = pr->D_per_channel ? pr->P : 1;
        for (int64_t h = 0; h < pr->H; h++) {
            if (pr->dA.p) ((float *)pr->dA.p)[h * pr->dA.s[0]] = 0.0f;
            if (pr->ddt_bias.p) ((float *)pr->ddt_bias.p)[h * pr->ddt_bias.s[0]] = 0.0f;
            for (int64_t j = 0; pr->dD.p && j < nD; j++)
                ((float *)pr->dD.p)[h * pr->dD.s[0] + (nD > 1 ? j * pr->dD.s[1] : 0)] = 0.0f;
        }
        return MAMBA2_STATUS_OK;
    }
    bwd_job J;
    J.pr = pr;
    J.k = m2_ssdc_bwd_kernels(ctx, pr);
    st = bwd_plan_make(ctx, pr, &J.pl);
    if (st != MAMBA2_STATUS_OK) return st;
    if (!ws) return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "cpu ssd backward: no workspace");
    J.base = m2_ssdc_align64(ws);
    const int64_t H = pr->H, nspan = J.pl.nspan;
    const bwd_ws w = bwd_bind(&J.pl.lay, J.base, 0); /* the global region */
    bwd_progress *prog = w.prog;
    for (int64_t i = 0; i < nspan * J.pl.nsets; i++) {
        atomic_init(&prog[i].a, 0);
        atomic_init(&prog[i].b, 0);
    }
    if (J.pl.split) { /* span start states, then span end gradients (see above) */
        fwd_job F;
        F.pr = pr;
        F.k = m2_ssdc_fwd_kernels(ctx, pr); /* the forward's set, as its plan F.pl */
        F.base = J.base;
        F.pl = J.pl.fp;
        F.outputs = 0;
        m2_ssdc_fwd_run(ctx, &F);
        m2_cpu_run_tasks(ctx, m2_span_items(pr, SPANS_LAST) * J.pl.nsets, bwd_task_b1, &J);
        m2_cpu_run_tasks(ctx, pr->nseq * H, bwd_task_b2, &J);
    }
    m2_cpu_run_tasks(ctx, nspan * J.pl.nsets, bwd_task_b3, &J);

    /* per-head parameters: sum the (span, head) slots in span order (sequence by sequence) */
    const double *pA = w.pA, *pbias = w.pbias, *pD = w.pD;
    for (int64_t h = 0; h < H; h++) {
        if (pr->dA.p) {
            double acc = 0.0;
            for (int64_t c = 0; c < nspan; c++) acc += pA[c * H + h];
            ((float *)pr->dA.p)[h * pr->dA.s[0]] = (float)acc;
        }
        if (pr->ddt_bias.p) {
            double acc = 0.0;
            for (int64_t c = 0; c < nspan; c++) acc += pbias[c * H + h];
            ((float *)pr->ddt_bias.p)[h * pr->ddt_bias.s[0]] = (float)acc;
        }
        if (pr->dD.p) {
            for (int64_t j = 0; j < J.pl.nD; j++) {
                double acc = 0.0;
                for (int64_t c = 0; c < nspan; c++) acc += pD[(c * H + h) * J.pl.nD + j];
                ((float *)pr->dD.p)[h * pr->dD.s[0] + (J.pl.nD > 1 ? j * pr->dD.s[1] : 0)] =
                    (float)acc;
            }
        }
    }
    return MAMBA2_STATUS_OK;
}