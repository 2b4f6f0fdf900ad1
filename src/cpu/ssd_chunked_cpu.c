/*
 * ssd_chunked_cpu.c — the CPU backend of the staged SSD chunk pipeline (SPEC §3): tasks, chunk
 * bookkeeping and dt processing. The arithmetic lives in the per-ISA kernel sets
 * (ssd_chunked_kernels.h), picked from ctx->isa.
 *
 * Every stage is a static set of independent tasks handed to the context's pool, each writing
 * its own slice of the outputs:
 *   chunk_cumsum   (b, h, k)        dt processing in double (as the fused forward does), d
 *                                   rounded to float, the cumsum of d A accumulated in double
 *                                   and rounded once per position
 *   bmm_chunk      (b, k, g)        CB = C Bᵀ over the chunk's rows (dots), padding zeroed
 *   chunk_state    (b, k, h)        w_j = exp(cs_last - cs_j) d_j, then Σ_j w_j x_j ⊗ B_j
 *                                   (rank_update), JB tokens at a time
 *   state_passing  (b, h, p-block)  S_start[k+1] = exp(cs_last[k]) S_start[k] + states[k],
 *                                   computed in the output itself (no scratch)
 *   chunk_scan     (b, k, h)        per 4 output rows: exp(cs_i) C_i · S_start (dots) into the
 *                                   out rows, plus Σ_{j<=i} CB[i,j] exp(cs_i - cs_j) d_j x_j
 *                                   (weights, then rank_update), then D and the z gate
 * Tasks never share an output element and their float operations do not depend on the thread
 * that runs them: results are bitwise identical for any thread count. No workspace: the only
 * scratch (weights of JB tokens, at most 4 rows) lives on the stack.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/ssd_chunked.h"
#include "cpu/cpu.h"
#include "cpu/ssd_chunked_kernels.h"

#define JB 256 /* tokens per weight block (chunk_state, chunk_scan): 4 x 1 KiB of stack     */
#define PB 16  /* state rows per state_passing task                                          */

static const m2_ssd_chunk_kernels *kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86) /* AVX2 also at the AVX-512 level */
    return ctx->isa != M2_ISA_SCALAR ? &m2_ssd_chunk_kernels_avx2 : &m2_ssd_chunk_kernels_scalar;
#elif defined(M2_KSETS_NEON)
    return ctx->isa == M2_ISA_NEON ? &m2_ssd_chunk_kernels_neon : &m2_ssd_chunk_kernels_scalar;
#else
    (void)ctx;
    return &m2_ssd_chunk_kernels_scalar;
#endif
}

static mamba2_status_t check_f32(const m2_ssd_chunk_problem *pr, const char *stage) {
    if (pr->act_dtype != MAMBA2_DTYPE_F32 || pr->par_dtype != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "the cpu backend runs %s in f32 only", stage);
    return MAMBA2_STATUS_OK;
}

typedef struct chunk_job {
    const m2_ssd_chunk_problem *pr;
    const m2_ssd_chunk_kernels *k;
} chunk_job;

/* Row (i0, i1, i2) of a view: the element offset i0*s[0] + i1*s[1] + i2*s[2]. */
static inline float *row3(const m2_view *v, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)v->p + i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2];
}

/* ---- chunk_cumsum ----------------------------------------------------------------------- */

static void cumsum_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const m2_ssd_chunk_problem *pr = ((const chunk_job *)arg)->pr;
    const int64_t k = task % pr->K, bh = task / pr->K, h = bh % pr->H, b = bh / pr->H;
    const int64_t len = m2_chunk_len(pr, k);
    const double A = (double)((const float *)pr->A.p)[h];
    const double bias = pr->dt_bias.p ? (double)((const float *)pr->dt_bias.p)[h] : 0.0;
    const float *dt = (const float *)pr->dt.p + b * pr->dt.s[0] + k * pr->Q * pr->dt.s[1] + h;
    float *dout = row3(&pr->dt_out, b, h, k), *cso = row3(&pr->dA_cumsum, b, h, k);
    double cs = 0.0;
    for (int64_t i = 0; i < len; i++) {
        double v = (double)dt[i * pr->dt.s[1]] + bias;
        if (pr->dt_softplus && v <= 20.0) v = log1p(exp(v));
        if (v < pr->dt_lo) v = pr->dt_lo;
        if (v > pr->dt_hi) v = pr->dt_hi;
        const float d = (float)v;
        cs += (double)d * A;
        dout[i] = d;
        cso[i] = (float)cs;
    }
    for (int64_t i = len; i < pr->Q; i++) { /* padding: no step, the cumsum stays flat */
        dout[i] = 0.0f;
        cso[i] = (float)cs;
    }
}

mamba2_status_t m2_cpu_ssd_chunk_cumsum(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    mamba2_status_t st = check_f32(pr, "ssd_chunk_cumsum");
    if (st != MAMBA2_STATUS_OK) return st;
    chunk_job job = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, pr->B * pr->H * pr->K, cumsum_task, &job);
    return MAMBA2_STATUS_OK;
}

/* ---- bmm_chunk -------------------------------------------------------------------------- */

static void bmm_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const chunk_job *job = (const chunk_job *)arg;
    const m2_ssd_chunk_problem *pr = job->pr;
    const int64_t g = task % pr->G, bk = task / pr->G, k = bk % pr->K, b = bk / pr->K;
    const int64_t Q = pr->Q, len = m2_chunk_len(pr, k), ldcb = pr->CB.s[3];
    const float *C = row3(&pr->Cm, b, k * Q, g), *Bm = row3(&pr->Bm, b, k * Q, g);
    float *CB = row3(&pr->CB, b, k, g);
    job->k->dots(len, len, pr->N, C, pr->Cm.s[1], Bm, pr->Bm.s[1], NULL, CB, ldcb);
    if (len < Q) { /* padding rows and columns */
        for (int64_t i = 0; i < len; i++)
            memset(CB + i * ldcb + len, 0, (size_t)(Q - len) * sizeof(float));
        for (int64_t i = len; i < Q; i++) memset(CB + i * ldcb, 0, (size_t)Q * sizeof(float));
    }
}

mamba2_status_t m2_cpu_ssd_bmm_chunk(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    mamba2_status_t st = check_f32(pr, "ssd_bmm_chunk");
    if (st != MAMBA2_STATUS_OK) return st;
    chunk_job job = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, pr->B * pr->K * pr->G, bmm_task, &job);
    return MAMBA2_STATUS_OK;
}

/* ---- chunk_state ------------------------------------------------------------------------ */

static void state_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const chunk_job *job = (const chunk_job *)arg;
    const m2_ssd_chunk_problem *pr = job->pr;
    const int64_t h = task % pr->H, bk = task / pr->H, k = bk % pr->K, b = bk / pr->K;
    const int64_t g = h / (pr->H / pr->G), Q = pr->Q, len = m2_chunk_len(pr, k);
    const float *cs = row3(&pr->dA_cumsum, b, h, k), *d = row3(&pr->dt_out, b, h, k);
    float *S =
        (float *)pr->states.p + b * pr->states.s[0] + k * pr->states.s[1] + h * pr->states.s[2];
    float w[JB];
    for (int64_t j0 = 0; j0 < len; j0 += JB) {
        const int64_t jn = len - j0 < JB ? len - j0 : JB;
        job->k->weights(jn, cs[Q - 1], cs + j0, d + j0, NULL, w);
        /* S[p,n] (+)= Σ_j (w_j x_j[p]) B_j[n] */
        job->k->rank_update(pr->P, pr->N, jn, row3(&pr->x, b, k * Q + j0, h), 1, pr->x.s[1], w,
                            row3(&pr->Bm, b, k * Q + j0, g), pr->Bm.s[1], S, pr->states.s[3],
                            j0 > 0);
    }
}

mamba2_status_t m2_cpu_ssd_chunk_state(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    mamba2_status_t st = check_f32(pr, "ssd_chunk_state");
    if (st != MAMBA2_STATUS_OK) return st;
    chunk_job job = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, pr->B * pr->K * pr->H, state_task, &job);
    return MAMBA2_STATUS_OK;
}

/* ---- state_passing ---------------------------------------------------------------------- */

static void passing_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const chunk_job *job = (const chunk_job *)arg;
    const m2_ssd_chunk_problem *pr = job->pr;
    const int64_t npb = (pr->P + PB - 1) / PB;
    const int64_t pb = task % npb, bh = task / npb, h = bh % pr->H, b = bh / pr->H;
    const int64_t p0 = pb * PB, p1 = p0 + PB < pr->P ? p0 + PB : pr->P, N = pr->N;
    const m2_view *ss = &pr->states_start, *st = &pr->states, *cs = &pr->dA_cumsum;
    const size_t row_bytes = (size_t)N * sizeof(float);
    for (int64_t p = p0; p < p1; p++) {
        const float *init = pr->init.p ? row3(&pr->init, b, h, p) : NULL;
        float *fin = pr->final.p ? row3(&pr->final, b, h, p) : NULL;
        float *ss0 = (float *)ss->p + b * ss->s[0] + h * ss->s[2] + p * ss->s[3];
        const float *st0 = (const float *)st->p + b * st->s[0] + h * st->s[2] + p * st->s[3];
        if (pr->K == 0) { /* no tokens: the final state is the initial one */
            if (fin && init) memcpy(fin, init, row_bytes);
            if (fin && !init) memset(fin, 0, row_bytes);
            continue;
        }
        /* S_start[0] = initial state (or 0) */
        if (init)
            memcpy(ss0, init, row_bytes);
        else
            memset(ss0, 0, row_bytes);
        /* S_start[k+1] = exp(cs_last[k]) S_start[k] + states[k]; after the last chunk: final */
        for (int64_t k = 0; k < pr->K; k++) {
            float *next = k + 1 < pr->K ? ss0 + (k + 1) * ss->s[1] : fin;
            if (!next) break;
            const float a = (float)exp((double)row3(cs, b, h, k)[pr->Q - 1]);
            job->k->decay_add(N, a, ss0 + k * ss->s[1], st0 + k * st->s[1], next);
        }
    }
}

mamba2_status_t m2_cpu_ssd_state_passing(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    mamba2_status_t st = check_f32(pr, "ssd_state_passing");
    if (st != MAMBA2_STATUS_OK) return st;
    chunk_job job = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, pr->B * pr->H * ((pr->P + PB - 1) / PB), passing_task, &job);
    return MAMBA2_STATUS_OK;
}

/* ---- chunk_scan ------------------------------------------------------------------------- */

static void scan_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const chunk_job *job = (const chunk_job *)arg;
    const m2_ssd_chunk_kernels *kk = job->k;
    const m2_ssd_chunk_problem *pr = job->pr;
    const int64_t h = task % pr->H, bk = task / pr->H, k = bk % pr->K, b = bk / pr->K;
    const int64_t g = h / (pr->H / pr->G), Q = pr->Q, len = m2_chunk_len(pr, k), P = pr->P;
    const float *cs = row3(&pr->dA_cumsum, b, h, k), *d = row3(&pr->dt_out, b, h, k);
    const float *CB = row3(&pr->CB, b, k, g);
    const float *Sst = (const float *)pr->states_start.p + b * pr->states_start.s[0] +
                       k * pr->states_start.s[1] + h * pr->states_start.s[2];
    const float *D = NULL;
    int64_t Ds = 0;
    if (pr->D.p) {
        D = pr->D_per_channel ? (const float *)pr->D.p + h * pr->D.s[0]
                              : (const float *)pr->D.p + h;
        Ds = pr->D_per_channel ? 1 : 0;
    }
    const int64_t ldx = pr->x.s[1], ldo = pr->out.s[1];
    float W[4 * JB];
    for (int64_t i0 = 0; i0 < len; i0 += 4) {
        const int64_t R = len - i0 < 4 ? len - i0 : 4;
        float *Y = row3(&pr->out, b, k * Q + i0, h);
        /* the state entering the chunk: Y[r,p] = exp(cs_i) C_i · S_start[p,:] */
        float alpha[4];
        for (int64_t r = 0; r < R; r++) alpha[r] = (float)exp((double)cs[i0 + r]);
        kk->dots(R, P, pr->N, row3(&pr->Cm, b, k * Q + i0, g), pr->Cm.s[1], Sst,
                 pr->states_start.s[3], alpha, Y, ldo);
        /* the chunk's own tokens j <= i: Y[r,:] += Σ_j CB[i,j] exp(cs_i - cs_j) d_j x_j */
        const int64_t jend = i0 + R;
        for (int64_t j0 = 0; j0 < jend; j0 += JB) {
            const int64_t jn = jend - j0 < JB ? jend - j0 : JB;
            for (int64_t r = 0; r < R; r++) {
                const int64_t i = i0 + r;
                int64_t nv = i + 1 - j0; /* weights of j in [j0, i] */
                if (nv > jn) nv = jn;
                if (nv < 0) nv = 0;
                kk->weights(nv, cs[i], cs + j0, d + j0, CB + i * pr->CB.s[3] + j0, W + r * JB);
                for (int64_t j = nv; j < jn; j++) W[r * JB + j] = 0.0f;
            }
            kk->rank_update(R, P, jn, W, JB, 1, NULL, row3(&pr->x, b, k * Q + j0, h), ldx, Y, ldo,
                            1);
        }
        /* out = (y + D x) * silu(z) */
        for (int64_t r = 0; r < R; r++) {
            const int64_t t = k * Q + i0 + r;
            kk->epilogue(P, Y + r * ldo, row3(&pr->x, b, t, h), D, Ds,
                         pr->z.p ? row3(&pr->z, b, t, h) : NULL, Y + r * ldo);
        }
    }
}

mamba2_status_t m2_cpu_ssd_chunk_scan(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    mamba2_status_t st = check_f32(pr, "ssd_chunk_scan");
    if (st != MAMBA2_STATUS_OK) return st;
    chunk_job job = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, pr->B * pr->K * pr->H, scan_task, &job);
    return MAMBA2_STATUS_OK;
}
