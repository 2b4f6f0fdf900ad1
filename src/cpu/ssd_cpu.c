/*
 * ssd_cpu.c — the CPU backend of the SSD scan (SPEC §1–2): workspace planning, threading,
 * dt processing and the fixed-order reductions. The arithmetic on states lives in the
 * per-ISA kernel sets (kernels.h), picked from ctx->isa at every call.
 *
 * Forward: one task per (sequence, head). The task walks its tokens in blocks of FWD_BLOCK:
 * it processes dt (bias, softplus, clamp, decay), packs d_t x_t and the block's B and C
 * rows, runs the recurrence kernel, then applies D and the z gate row by row. This is the
 * plain recurrence (SPEC §1 lets Q only block the work); the state never leaves the
 * thread's scratch.
 *
 * Backward, per (sequence, head):
 *   pass 1  runs the recurrence without outputs and keeps the state before every block of
 *           BWD_BLOCK tokens (checkpoints; past M2_CPU_CKPT_BUDGET bytes per thread, one
 *           checkpoint per m ~ sqrt(blocks) blocks, the segment's other block states
 *           being recomputed from it when the reverse pass reaches it);
 *   pass 2  walks the blocks in reverse. bwd_block recomputes a block's states from its
 *           checkpoint one 4-row tile at a time and runs the reverse recurrence
 *           G_t = dy_t ⊗ C_t + a_{t+1} G_{t+1} (G starts at dfinal) on the tile while its
 *           states are in L1, giving G_t B_t, Σ_p G_t x_t, S_tᵀ dy_t and Σ G_t ∘ S_{t-1};
 *           dx, ddt, dBm, dCm, dz and the per-head sums follow per token here.
 *   States are never rebuilt by running the recurrence backwards (SPEC §2).
 *
 * Workspace (64-byte aligned inside the caller's buffer; sizes from fwd_make_plan /
 * bwd_make_plan, which the *_workspace queries report exactly):
 *   forward   nthreads x { state P*N, block buffers (decays, d x, y, packed B and C) }
 *   backward  global { per-(sequence, head) double slots for dA, ddt_bias, dD;
 *                      BWD_PARTIAL only: per-head dBm/dCm rows, H*B*L*N floats each }
 *             nthreads x { checkpoints, segment states (two-level only), G (P*N),
 *                          tile states BWD_BLOCK*4*N, block buffers }
 *   e.g. [B,L,H,P,N] = [4,2048,16,64,128], 2 threads: 0.2 MB forward, 17 MB backward.
 *
 * Determinism: every value is produced by one task, and every sum over tasks runs in an
 * order fixed by the problem alone:
 *   - dA, dD, ddt_bias: each (sequence, head) task keeps its time sum in double in its own
 *     workspace slot; the slots are added in sequence order after the tasks finish.
 *   - dBm, dCm (a group is shared by H/G heads): the head contributions are added in head
 *     order, either inside one task per (sequence, group) that runs the group's heads in
 *     order (BWD_GROUP), or from per-head rows in the workspace by a reduction pass
 *     (BWD_PARTIAL, chosen when there are too few (sequence, group) tasks to keep the
 *     threads busy). Both perform the same float operations — row = c_h0, then
 *     row = row + c_h for each next head — so they give the same bits.
 * No float atomics anywhere; the pool's task-to-thread assignment never touches a result.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"

/* Forward token block: per thread, d_t x_t and y_t of a block are packed (FWD_BLOCK * P
 * floats each), and each 4-row state tile re-reads the block's B and C rows, so 2 * 32 * N
 * floats (32 KiB at N = 128) stay near L1. */
#define FWD_BLOCK 32
/* Backward block: bwd_block recomputes a 4-row tile's states for the whole block
 * (BWD_BLOCK * 4 * N floats, 16 KiB at N = 128) and consumes them while they are in L1.
 * Measured on the 2-core dev VM, 8/16/32 differ by < 5% end to end; overridable with -D
 * for such experiments: results are bitwise the same for any block size. */
#ifndef BWD_BLOCK
#define BWD_BLOCK 8
#endif
/* Per-thread bytes of backward checkpoints (one state per block) above which the backward
 * switches to two-level checkpointing. */
#ifndef M2_CPU_CKPT_BUDGET
#define M2_CPU_CKPT_BUDGET (32u << 20)
#endif
/* Tokens per task of the BWD_PARTIAL head reduction. */
#define REDUCE_TOKENS 64

enum { BWD_HEAD = 0, BWD_GROUP = 1, BWD_PARTIAL = 2 };

/* ---- small helpers ------------------------------------------------------------------ */

static const m2_cpu_kernels *kernels_for(const mamba2_context_t *ctx) {
    return ctx->isa == M2_ISA_AVX2 ? &m2_cpu_kernels_avx2 : &m2_cpu_kernels_scalar;
}

/* Per-thread scratch is indexed by the pool's worker id, so plan for every worker. */
static int plan_threads(const mamba2_context_t *ctx) {
    int n = ctx->pool ? m2_pool_num_threads(ctx->pool) : 1;
    if (ctx->num_threads > n) n = ctx->num_threads;
    return n < 1 ? 1 : n;
}

static void run_tasks(mamba2_context_t *ctx, int64_t ntasks, m2_task_fn fn, void *arg) {
    if (ntasks <= 0) return;
    if (ctx->pool)
        m2_pool_run(ctx->pool, ntasks, fn, arg);
    else
        for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
}

/* Reserve `bytes` at the next 64-byte boundary of a layout; returns the offset. */
static size_t carve(size_t *off, size_t bytes) {
    const size_t o = (*off + 63) & ~(size_t)63;
    *off = o + bytes;
    return o;
}

static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

static unsigned char *align64(void *p) {
    return (unsigned char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Row (i0, i1, i2) of a 4-dim view: [B,L,H,P] at (b,t,h), [B,L,G,N] at (b,t,g),
 * [S,H,P,N] at (s,h,p); for [B,L,H] it is the element (b,t,h). */
static inline float *row3(const m2_view *v, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)v->p + i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2];
}
static inline float at1(const m2_view *v, int64_t i) { return ((const float *)v->p)[i * v->s[0]]; }

static int64_t max_seq_len(const m2_ssd_problem *pr) {
    int64_t m = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        if (t1 - t0 > m) m = t1 - t0;
    }
    return m;
}

/* State [P][N] (row length N) <- st[s,h] ([S,H,P,N] view), or zeros when absent. */
static void load_state(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N, float *S) {
    if (!st->p) {
        memset(S, 0, (size_t)(P * N) * sizeof(float));
        return;
    }
    for (int64_t p = 0; p < P; p++) memcpy(S + p * N, row3(st, s, h, p), (size_t)N * sizeof(float));
}

/* Copy T rows of n floats, `ld` apart, into a packed [T][n] buffer. B and C rows of
 * consecutive tokens are G*N floats apart in the caller's layout: at 2 KiB strides every row
 * maps to the same few L1 sets and a block's rows evict each other while the 4-row tiles
 * re-read them, so the kernels get a contiguous copy instead. */
static void pack_rows(float *dst, const float *src, int64_t ld, int64_t T, int64_t n) {
    for (int64_t i = 0; i < T; i++) memcpy(dst + i * n, src + i * ld, (size_t)n * sizeof(float));
}

#if defined(__GNUC__)
#define M2_PREFETCH(p, rw) __builtin_prefetch((p), (rw), 3)
#else
#define M2_PREFETCH(p, rw) ((void)(p))
#endif

/* Ask for T rows of n floats, `ld` apart, ahead of use. Rows of consecutive tokens in
 * [B,L,H,P] tensors are H*P floats apart (a new 4 KiB page per token at H*P = 1024), which
 * the hardware prefetchers do not follow, so the next block's rows are requested while
 * the current block computes. */
static void prefetch_rows(const float *src, int64_t ld, int64_t T, int64_t n, int rw) {
    if (!src) return;
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < n; j += 16) {
            if (rw)
                M2_PREFETCH(src + i * ld + j, 1);
            else
                M2_PREFETCH(src + i * ld + j, 0);
        }
}

/* D row of head h as P floats: [H,P] is read in place, [H] is broadcast into buf. */
static const float *head_D(const m2_ssd_problem *pr, int64_t h, float *buf) {
    if (!pr->D.p) return NULL;
    if (pr->D_per_channel) return (const float *)pr->D.p + h * pr->D.s[0];
    const float v = at1(&pr->D, h);
    for (int64_t p = 0; p < pr->P; p++) buf[p] = v;
    return buf;
}

/* dt processing of one head (SPEC §1 step 1), in double: d = clamp(softplus(dt + bias)),
 * the decay a = exp(d A), and gfac = ∂d/∂dt (softplus' times the clamp's pass-through). */
typedef struct dt_params {
    double bias, A, lo, hi;
    int softplus;
} dt_params;

static dt_params head_dt(const m2_ssd_problem *pr, int64_t h) {
    dt_params q;
    q.bias = pr->dt_bias.p ? (double)at1(&pr->dt_bias, h) : 0.0;
    q.A = (double)at1(&pr->A, h);
    q.lo = pr->dt_lo;
    q.hi = pr->dt_hi;
    q.softplus = pr->dt_softplus;
    return q;
}

static inline void dt_step(const dt_params *q, float raw, float *d, float *a, float *gfac) {
    const double r = (double)raw + q->bias;
    double v = r, dv = 1.0;
    if (q->softplus && r <= 20.0) {
        v = log1p(exp(r));
        dv = 1.0 / (1.0 + exp(-r));
    }
    double c = v;
    if (c < q->lo) c = q->lo;
    if (c > q->hi) c = q->hi;
    *d = (float)c;
    *a = (float)exp(c * q->A);
    if (gfac) *gfac = (q->lo <= v && v <= q->hi) ? (float)dv : 0.0f;
}

static mamba2_status_t check_dtype(const m2_ssd_problem *pr) {
    if (pr->act_dtype != MAMBA2_DTYPE_F32 || pr->par_dtype != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the cpu backend supports float32 tensors only (got dtypes %d/%d)",
                        (int)pr->act_dtype, (int)pr->par_dtype);
    return MAMBA2_STATUS_OK;
}

/* ---- forward ------------------------------------------------------------------------ */

typedef struct fwd_plan {
    int64_t T;
    int nthr;
    size_t o_S, o_a, o_xd, o_y, o_D, o_B, o_C; /* offsets inside one thread's scratch */
    size_t per_thread, total;
} fwd_plan;

static void fwd_make_plan(const mamba2_context_t *ctx, const m2_ssd_problem *pr, fwd_plan *pl) {
    const size_t P = (size_t)pr->P, N = (size_t)pr->N, T = FWD_BLOCK, f = sizeof(float);
    size_t off = 0;
    pl->T = FWD_BLOCK;
    pl->nthr = plan_threads(ctx);
    pl->o_S = carve(&off, P * N * f); /* the running state [P][N]     */
    pl->o_a = carve(&off, T * f);     /* decays of the block          */
    pl->o_xd = carve(&off, T * P * f);/* d_t x_t, packed [T][P]       */
    pl->o_y = carve(&off, T * P * f); /* S_t C_t, packed [T][P]       */
    pl->o_D = carve(&off, P * f);     /* D[h] broadcast over P        */
    pl->o_B = carve(&off, T * N * f); /* B rows of the block, packed  */
    pl->o_C = carve(&off, T * N * f); /* C rows of the block, packed  */
    pl->per_thread = round64(off);
    pl->total = pl->per_thread * (size_t)pl->nthr + 64; /* + slack to align the base */
}

typedef struct fwd_job {
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *k;
    unsigned char *base;
    fwd_plan pl;
} fwd_job;

static void fwd_task(void *arg, int64_t task, int thread) {
    const fwd_job *J = (const fwd_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    const int64_t H = pr->H, P = pr->P, N = pr->N, T = J->pl.T;
    const int64_t s = task / H, h = task % H, g = h / (H / pr->G);
    unsigned char *ws = J->base + (size_t)thread * J->pl.per_thread;
    float *S = (float *)(ws + J->pl.o_S), *a = (float *)(ws + J->pl.o_a);
    float *xd = (float *)(ws + J->pl.o_xd), *y = (float *)(ws + J->pl.o_y);
    float *Bp = (float *)(ws + J->pl.o_B), *Cp = (float *)(ws + J->pl.o_C);
    const float *D = head_D(pr, h, (float *)(ws + J->pl.o_D));
    const dt_params q = head_dt(pr, h);
    int64_t b, t0, t1;
    m2_ssd_seq(pr, s, &b, &t0, &t1);

    /* requested states (mamba2_ssd_forward_states): a block ends at each such token */
    const int64_t flat0 = b * pr->L;
    int64_t next = pr->npos ? m2_ssd_pos_lower_bound(pr, flat0 + t0) : 0;

    load_state(&pr->init, s, h, P, N, S);
    for (int64_t u = t0, Tb; u < t1; u += Tb) {
        Tb = t1 - u < T ? t1 - u : T;
        const int64_t tp = next < pr->npos ? m2_ssd_pos(pr, next) - flat0 : -1;
        if (tp >= u && tp < u + Tb) Tb = tp - u + 1;
        if (u + Tb < t1) { /* the next block's streamed rows */
            const int64_t v = u + Tb, Tn = t1 - v < T ? t1 - v : T;
            prefetch_rows(row3(&pr->x, b, v, h), pr->x.s[1], Tn, P, 0);
            if (pr->z.p) prefetch_rows(row3(&pr->z, b, v, h), pr->z.s[1], Tn, P, 0);
            prefetch_rows(row3(&pr->out, b, v, h), pr->out.s[1], Tn, P, 1);
        }
        for (int64_t i = 0; i < Tb; i++) {
            float d;
            dt_step(&q, *row3(&pr->dt, b, u + i, h), &d, &a[i], NULL);
            K->scale(P, d, row3(&pr->x, b, u + i, h), xd + i * P);
        }
        pack_rows(Bp, row3(&pr->Bm, b, u, g), pr->Bm.s[1], Tb, N);
        pack_rows(Cp, row3(&pr->Cm, b, u, g), pr->Cm.s[1], Tb, N);
        K->fwd_block(Tb, P, N, a, xd, Bp, Cp, S, S, 0, y);
        for (int64_t i = 0; i < Tb; i++)
            K->fwd_out(P, y + i * P, row3(&pr->x, b, u + i, h), D,
                       pr->z.p ? row3(&pr->z, b, u + i, h) : NULL, row3(&pr->out, b, u + i, h));
        if (tp == u + Tb - 1) { /* S is now the state after token tp */
            for (int64_t p = 0; p < P; p++)
                memcpy(row3(&pr->pos_states, next, h, p), S + p * N, (size_t)N * sizeof(float));
            next++;
        }
    }
    if (pr->final.p)
        for (int64_t p = 0; p < P; p++)
            memcpy(row3(&pr->final, s, h, p), S + p * N, (size_t)N * sizeof(float));
}

mamba2_status_t m2_cpu_ssd_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_ssd_problem *pr, size_t *bytes) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    fwd_plan pl;
    fwd_make_plan(ctx, pr, &pl);
    *bytes = pl.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    fwd_job J;
    J.pr = pr;
    J.k = kernels_for(ctx);
    fwd_make_plan(ctx, pr, &J.pl);
    if (!ws) return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "cpu ssd forward: no workspace");
    J.base = align64(ws);
    run_tasks(ctx, pr->nseq * pr->H, fwd_task, &J);
    return MAMBA2_STATUS_OK;
}

/* ---- backward ----------------------------------------------------------------------- */

typedef struct bwd_plan {
    int64_t T;        /* token block of the reverse pass                          */
    int64_t ck_every; /* blocks per checkpoint (m): 1, or ~sqrt(blocks) when long  */
    int nthr, mode, want_y;
    int64_t nD;       /* dD partial length per (sequence, head): P or 1           */
    /* global region (offsets from the aligned base) */
    size_t o_pA, o_pbias, o_pD, o_hB, o_hC, glob;
    /* per-thread region (offsets inside one thread's scratch) */
    size_t o_ck, o_sub, o_St, o_G, o_d, o_a, o_gf, o_xd, o_dy, o_y, o_gb, o_dB, o_dC, o_dec, o_D;
    size_t o_Bp, o_Cp;
    size_t per_thread, total;
} bwd_plan;

static void bwd_make_plan(const mamba2_context_t *ctx, const m2_ssd_problem *pr, bwd_plan *pl) {
    const int64_t H = pr->H, G = pr->G, hpg = H / G;
    const size_t P = (size_t)pr->P, N = (size_t)pr->N, PN = P * N, f = sizeof(float);
    const size_t nsh = (size_t)(pr->nseq * H), BL = (size_t)(pr->B * pr->L);
    const int64_t Lmax = max_seq_len(pr);
    pl->T = BWD_BLOCK;
    /* One checkpoint per block while they fit the budget; beyond it, one per m blocks and
     * the m states of a segment recomputed when the reverse pass reaches it (one more
     * state-only forward pass; memory ~ 2 sqrt(blocks) states instead of blocks). Both
     * schemes compute every state with the same operations, so results do not change. */
    const int64_t nblk = Lmax > 0 ? (Lmax + pl->T - 1) / pl->T : 1;
    pl->ck_every = 1;
    if ((size_t)nblk * PN * f > (size_t)M2_CPU_CKPT_BUDGET) {
        int64_t m = (int64_t)ceil(sqrt((double)nblk));
        pl->ck_every = m < 2 ? 2 : m;
    }
    const int64_t nck = (nblk + pl->ck_every - 1) / pl->ck_every;
    pl->nthr = plan_threads(ctx);
    pl->want_y = pr->dz.p != NULL && pr->z.p != NULL;
    pl->nD = pr->D_per_channel ? pr->P : 1;

    /* How the head contributions to dBm/dCm meet (see the file comment). The choice may
     * depend on the thread count because both orders produce the same bits. */
    const int need_bc = pr->dBm.p != NULL || pr->dCm.p != NULL;
    if (!need_bc || hpg == 1)
        pl->mode = BWD_HEAD;
    else if (pl->nthr == 1 || pr->nseq * G >= 2 * (int64_t)pl->nthr)
        pl->mode = BWD_GROUP;
    else
        pl->mode = BWD_PARTIAL;

    const size_t T = (size_t)pl->T;
    size_t off = 0;
    pl->o_pA = carve(&off, nsh * sizeof(double));
    pl->o_pbias = carve(&off, nsh * sizeof(double));
    pl->o_pD = carve(&off, nsh * (size_t)pl->nD * sizeof(double));
    const int partial = pl->mode == BWD_PARTIAL;
    pl->o_hB = carve(&off, partial && pr->dBm.p ? (size_t)H * BL * N * f : 0);
    pl->o_hC = carve(&off, partial && pr->dCm.p ? (size_t)H * BL * N * f : 0);
    pl->glob = round64(off);

    off = 0;
    pl->o_ck = carve(&off, (size_t)nck * PN * f);      /* checkpoints              */
    /* the states of one segment (two-level only) */
    pl->o_sub = carve(&off, pl->ck_every > 1 ? (size_t)pl->ck_every * PN * f : 0);
    pl->o_St = carve(&off, T * 4 * N * f);             /* S_t of one 4-row tile    */
    pl->o_G = carve(&off, PN * f);                     /* dL/dS, carried backwards */
    pl->o_d = carve(&off, T * f);
    pl->o_a = carve(&off, T * f);
    pl->o_gf = carve(&off, T * f);
    pl->o_xd = carve(&off, T * P * f);                 /* d_t x_t, [T][P]          */
    pl->o_dy = carve(&off, T * P * f);                 /* dout_t silu(z_t), [T][P] */
    pl->o_y = carve(&off, pl->want_y ? T * P * f : 0); /* S_t C_t for dz           */
    pl->o_gb = carve(&off, T * P * f);                 /* G_t B_t, [T][P]          */
    pl->o_dB = carve(&off, T * N * f);                 /* Σ_p G_t x_t, [T][N]      */
    pl->o_dC = carve(&off, T * N * f);                 /* S_tᵀ dy_t, [T][N]        */
    pl->o_dec = carve(&off, T * f);                    /* Σ G_t ∘ S_{t-1}          */
    pl->o_D = carve(&off, P * f);
    pl->o_Bp = carve(&off, T * N * f);                 /* B rows of the block      */
    pl->o_Cp = carve(&off, T * N * f);                 /* C rows of the block      */
    pl->per_thread = round64(off);
    pl->total = pl->glob + pl->per_thread * (size_t)pl->nthr + 64;
}

typedef struct bwd_job {
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *k;
    unsigned char *base;
    bwd_plan pl;
} bwd_job;

/* dst = v (first contribution) or dst = dst + v (the next head's), element by element. */
static void put_row(float *dst, const float *v, int64_t n, int accumulate) {
    if (accumulate)
        for (int64_t i = 0; i < n; i++) dst[i] = dst[i] + v[i];
    else
        memcpy(dst, v, (size_t)n * sizeof(float));
}

/* The inputs of fwd_block for tokens [u, u+Tb) of head h: d_t, a_t (and ∂d/∂dt when gf is
 * given), d_t x_t packed [Tb][P], and the group's B rows packed [Tb][N]. */
static void block_prep(const m2_ssd_problem *pr, const m2_cpu_kernels *K, const dt_params *q,
                       int64_t b, int64_t u, int64_t Tb, int64_t h, int64_t g, float *d, float *a,
                       float *gf, float *xd, float *Bp) {
    for (int64_t i = 0; i < Tb; i++) {
        dt_step(q, *row3(&pr->dt, b, u + i, h), &d[i], &a[i], gf ? &gf[i] : NULL);
        K->scale(pr->P, d[i], row3(&pr->x, b, u + i, h), xd + i * pr->P);
    }
    pack_rows(Bp, row3(&pr->Bm, b, u, g), pr->Bm.s[1], Tb, pr->N);
}

/* The whole backward of one (sequence, head). */
static void bwd_head(const bwd_job *J, unsigned char *ws, int64_t s, int64_t h) {
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    const bwd_plan *pl = &J->pl;
    const int64_t H = pr->H, P = pr->P, N = pr->N, PN = P * N, T = pl->T, m = pl->ck_every;
    const int64_t hpg = H / pr->G, g = h / hpg, BL = pr->B * pr->L;
    float *ck = (float *)(ws + pl->o_ck), *sub = (float *)(ws + pl->o_sub);
    float *St = (float *)(ws + pl->o_St);
    float *Gs = (float *)(ws + pl->o_G);
    float *d = (float *)(ws + pl->o_d), *a = (float *)(ws + pl->o_a);
    float *gf = (float *)(ws + pl->o_gf);
    float *xd = (float *)(ws + pl->o_xd), *dy = (float *)(ws + pl->o_dy);
    float *y = pl->want_y ? (float *)(ws + pl->o_y) : NULL;
    float *gb = (float *)(ws + pl->o_gb);
    float *dB = (float *)(ws + pl->o_dB), *dC = (float *)(ws + pl->o_dC);
    float *dec = (float *)(ws + pl->o_dec);
    float *Bp = (float *)(ws + pl->o_Bp), *Cp = (float *)(ws + pl->o_Cp);
    const float *D = head_D(pr, h, (float *)(ws + pl->o_D));
    const dt_params q = head_dt(pr, h);
    int64_t b, t0, t1;
    m2_ssd_seq(pr, s, &b, &t0, &t1);
    const int64_t nb = (t1 - t0 + T - 1) / T; /* blocks of T tokens              */
    const int64_t nseg = (nb + m - 1) / m;     /* segments of m blocks, 1 checkpoint each */
    /* In BWD_GROUP the group's first head writes dBm/dCm rows, the others add to them. */
    const int accumulate = pl->mode == BWD_GROUP && h % hpg != 0;
    float *hB = pl->mode == BWD_PARTIAL ? (float *)(J->base + pl->o_hB) : NULL;
    float *hC = pl->mode == BWD_PARTIAL ? (float *)(J->base + pl->o_hC) : NULL;

    /* pass 1: ck[c] = state before block c*m (the state after the last block is unused);
     * with m > 1 the blocks in between run in place in sub[0] */
    load_state(&pr->init, s, h, P, N, ck);
    for (int64_t j = 0; j + 1 < nb; j++) {
        if (j + 2 < nb) prefetch_rows(row3(&pr->x, b, t0 + (j + 1) * T, h), pr->x.s[1], T, P, 0);
        block_prep(pr, K, &q, b, t0 + j * T, T, h, g, d, a, NULL, xd, Bp);
        const float *src = j % m == 0 ? ck + (j / m) * PN : sub;
        float *dst = (j + 1) % m == 0 ? ck + ((j + 1) / m) * PN : sub;
        K->fwd_block(T, P, N, a, xd, Bp, NULL, src, dst, 0, NULL);
    }

    /* pass 2: segments in reverse; in each, the states before its blocks (sub[i] before
     * block j0 + i, recomputed from the checkpoint when m > 1), then its blocks in reverse */
    load_state(&pr->dfinal, s, h, P, N, Gs);
    float a_after = 1.0f; /* decay of the token after the current block (none: 1) */
    double accA = 0.0, accBias = 0.0;
    double *pD = (double *)(J->base + pl->o_pD) + (s * H + h) * pl->nD;
    for (int64_t j = 0; j < pl->nD; j++) pD[j] = 0.0;
    for (int64_t c = nseg - 1; c >= 0; c--) {
        const int64_t j0 = c * m, j1 = j0 + m < nb ? j0 + m : nb;
        for (int64_t j = j0; j + 1 < j1; j++) {
            block_prep(pr, K, &q, b, t0 + j * T, T, h, g, d, a, NULL, xd, Bp);
            K->fwd_block(T, P, N, a, xd, Bp, NULL, j == j0 ? ck + c * PN : sub + (j - j0) * PN,
                         sub + (j + 1 - j0) * PN, 0, NULL);
        }
        for (int64_t k = j1 - 1; k >= j0; k--) {
            const float *S0 = k == j0 ? ck + c * PN : sub + (k - j0) * PN;
            const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
            if (k > 0) { /* the rows of the block processed next (the previous one) */
                const int64_t v = u - T;
                prefetch_rows(row3(&pr->x, b, v, h), pr->x.s[1], T, P, 0);
                prefetch_rows(row3(&pr->dout, b, v, h), pr->dout.s[1], T, P, 0);
                if (pr->z.p) prefetch_rows(row3(&pr->z, b, v, h), pr->z.s[1], T, P, 0);
                if (pr->dx.p) prefetch_rows(row3(&pr->dx, b, v, h), pr->dx.s[1], T, P, 1);
                if (pr->dz.p) prefetch_rows(row3(&pr->dz, b, v, h), pr->dz.s[1], T, P, 1);
            }
            block_prep(pr, K, &q, b, u, Tb, h, g, d, a, gf, xd, Bp);
            pack_rows(Cp, row3(&pr->Cm, b, u, g), pr->Cm.s[1], Tb, N);
            for (int64_t i = 0; i < Tb; i++)
                K->bwd_dy(P, row3(&pr->dout, b, u + i, h),
                          pr->z.p ? row3(&pr->z, b, u + i, h) : NULL, dy + i * P);
            memset(dB, 0, (size_t)(Tb * N) * sizeof(float));
            memset(dC, 0, (size_t)(Tb * N) * sizeof(float));
            memset(dec, 0, (size_t)Tb * sizeof(float));
            K->bwd_block(Tb, P, N, a, a_after, xd, row3(&pr->x, b, u, h), pr->x.s[1], dy, Bp, Cp,
                         S0, Gs, St, y, gb, dB, dC, dec);

            for (int64_t i = 0; i < Tb; i++) {
                const int64_t t = u + i;
                const float *xr = row3(&pr->x, b, t, h), *gbr = gb + i * P, *dyr = dy + i * P;
                K->bwd_dxdz(P, d[i], gbr, dyr, xr, D, y ? y + i * P : NULL,
                            row3(&pr->dout, b, t, h), pr->z.p ? row3(&pr->z, b, t, h) : NULL,
                            pr->dx.p ? row3(&pr->dx, b, t, h) : NULL,
                            pr->dz.p ? row3(&pr->dz, b, t, h) : NULL);
                /* ∂L/∂d_t = x_t·(G_t B_t) + A a_t Σ G_t∘S_{t-1},
                 * ∂L/∂A   = Σ_t d_t a_t Σ G_t∘S_{t-1} */
                double xg = 0.0;
                for (int64_t p = 0; p < P; p++) xg += (double)xr[p] * (double)gbr[p];
                const double ga = (double)dec[i] * (double)a[i];
                const double draw = (xg + q.A * ga) * (double)gf[i];
                if (pr->ddt.p) *row3(&pr->ddt, b, t, h) = (float)draw;
                accA += ga * (double)d[i];
                accBias += draw;
                if (pr->dD.p) {
                    if (pl->nD == 1) {
                        double sdx = 0.0;
                        for (int64_t p = 0; p < P; p++) sdx += (double)dyr[p] * (double)xr[p];
                        pD[0] += sdx;
                    } else {
                        for (int64_t p = 0; p < P; p++) pD[p] += (double)dyr[p] * (double)xr[p];
                    }
                }
                if (pr->dBm.p) {
                    float *v = dB + i * N;
                    K->scale(N, d[i], v, v); /* dBm_t = d_t Σ_p G_t x_t */
                    if (hB) /* this head's row, reduced in head order later */
                        memcpy(hB + (size_t)((h * BL + b * pr->L + t) * N), v,
                               (size_t)N * sizeof(float));
                    else
                        put_row(row3(&pr->dBm, b, t, g), v, N, accumulate);
                }
                if (pr->dCm.p) {
                    const float *v = dC + i * N;
                    if (hC) /* this head's row, reduced in head order later */
                        memcpy(hC + (size_t)((h * BL + b * pr->L + t) * N), v,
                               (size_t)N * sizeof(float));
                    else
                        put_row(row3(&pr->dCm, b, t, g), v, N, accumulate);
                }
            }
            a_after = a[0];
        }
    }
    /* dinit = ∂L/∂S_{-1} = a_0 G_0 */
    if (pr->dinit.p)
        for (int64_t p = 0; p < P; p++) K->scale(N, a_after, Gs + p * N, row3(&pr->dinit, s, h, p));
    ((double *)(J->base + pl->o_pA))[s * H + h] = accA;
    ((double *)(J->base + pl->o_pbias))[s * H + h] = accBias;
}

static void bwd_task_head(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    const int64_t H = J->pr->H;
    unsigned char *ws = J->base + J->pl.glob + (size_t)thread * J->pl.per_thread;
    bwd_head(J, ws, task / H, task % H);
}

static void bwd_task_group(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    const int64_t G = J->pr->G, hpg = J->pr->H / G;
    const int64_t s = task / G, g = task % G;
    unsigned char *ws = J->base + J->pl.glob + (size_t)thread * J->pl.per_thread;
    for (int64_t j = 0; j < hpg; j++) bwd_head(J, ws, s, g * hpg + j); /* head order */
}

/* BWD_PARTIAL: dBm/dCm rows = head contributions added in head order. */
static void bwd_task_reduce(void *arg, int64_t task, int thread) {
    (void)thread;
    const bwd_job *J = (const bwd_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const int64_t G = pr->G, hpg = pr->H / G, N = pr->N, L = pr->L, BL = pr->B * L;
    const int64_t e = (task + 1) * REDUCE_TOKENS < BL ? (task + 1) * REDUCE_TOKENS : BL;
    for (int which = 0; which < 2; which++) {
        const m2_view *out = which == 0 ? &pr->dBm : &pr->dCm;
        if (!out->p) continue;
        const float *part = (const float *)(J->base + (which == 0 ? J->pl.o_hB : J->pl.o_hC));
        for (int64_t tok = task * REDUCE_TOKENS; tok < e; tok++)
            for (int64_t g = 0; g < G; g++) {
                float *dst = row3(out, tok / L, tok % L, g);
                for (int64_t j = 0; j < hpg; j++)
                    put_row(dst, part + (size_t)(((g * hpg + j) * BL + tok) * N), N, j > 0);
            }
    }
}

mamba2_status_t m2_cpu_ssd_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_ssd_problem *pr, size_t *bytes) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    bwd_plan pl;
    bwd_make_plan(ctx, pr, &pl);
    *bytes = pl.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    bwd_job J;
    J.pr = pr;
    J.k = kernels_for(ctx);
    bwd_make_plan(ctx, pr, &J.pl);
    if (!ws) return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "cpu ssd backward: no workspace");
    J.base = align64(ws);
    const int64_t H = pr->H, nseq = pr->nseq;

    if (J.pl.mode == BWD_GROUP)
        run_tasks(ctx, nseq * pr->G, bwd_task_group, &J);
    else
        run_tasks(ctx, nseq * H, bwd_task_head, &J);
    if (J.pl.mode == BWD_PARTIAL)
        run_tasks(ctx, (pr->B * pr->L + REDUCE_TOKENS - 1) / REDUCE_TOKENS, bwd_task_reduce, &J);

    /* per-head parameters: sum the (sequence, head) slots in sequence order */
    const double *pA = (const double *)(J.base + J.pl.o_pA);
    const double *pbias = (const double *)(J.base + J.pl.o_pbias);
    const double *pD = (const double *)(J.base + J.pl.o_pD);
    for (int64_t h = 0; h < H; h++) {
        if (pr->dA.p) {
            double acc = 0.0;
            for (int64_t s = 0; s < nseq; s++) acc += pA[s * H + h];
            ((float *)pr->dA.p)[h * pr->dA.s[0]] = (float)acc;
        }
        if (pr->ddt_bias.p) {
            double acc = 0.0;
            for (int64_t s = 0; s < nseq; s++) acc += pbias[s * H + h];
            ((float *)pr->ddt_bias.p)[h * pr->ddt_bias.s[0]] = (float)acc;
        }
        if (pr->dD.p) {
            for (int64_t j = 0; j < J.pl.nD; j++) {
                double acc = 0.0;
                for (int64_t s = 0; s < nseq; s++) acc += pD[(s * H + h) * J.pl.nD + j];
                ((float *)pr->dD.p)[h * pr->dD.s[0] + (J.pl.nD > 1 ? j * pr->dD.s[1] : 0)] =
                    (float)acc;
            }
        }
    }
    return MAMBA2_STATUS_OK;
}
