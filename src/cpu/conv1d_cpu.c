/*
 * conv1d_cpu.c — the CPU backend of the causal depthwise conv1d (SPEC §4) and its decode step
 * (SPEC §6): tiling, threading, conv-state packing and the fixed-order reductions. The
 * arithmetic lives in the per-ISA kernel sets (conv1d_kernels.h), picked from ctx->isa.
 *
 * Work is split into tasks over (batch row, token block, group of channel blocks of CB
 * channels); a task walks its channel blocks in order. With cu_seqlens the L packed tokens of
 * row 0 are cut into blocks without regard to sequence boundaries, and a block is processed
 * segment by segment (the part of each sequence it holds), so the split is balanced however
 * the sequences are distributed. Inside a task the kernels run a chunk of tokens at a time.
 * The input window of a chunk's first token reaches W-1 tokens back: earlier tokens of the
 * same sequence are read in place from x; positions before the sequence start come from the
 * initial conv state (or zeros), packed channel-major into a small history buffer.
 *
 * Forward: tasks write disjoint slices of out; a second pass, one task per sequence, writes
 * final_conv_state (the last W-1 inputs; for a sequence shorter than W-1 they include initial
 * state entries).
 *
 * Backward: one fused kernel run per segment [a, e) of a sequence [s0, s1), chunk by chunk,
 * its input and gradient windows carried from chunk to chunk: g_t = dout_t act'(pre_t) (pre
 * recomputed) for t < min(e + W-1, s1) (the W-1 tokens past e are the look-ahead dx needs),
 * the dweight / dbias sums over [a, e), dx_j = Σ_k w_k g_{j+W-1-k} for j in [a, e), plus
 * dfinal where j is among the last W-1 positions. A segment at a sequence start also runs the
 * first W-1 tokens once more on their own for dinit (positions s0-W+1 .. s0-1). x and dout
 * are read once, dx written once.
 * Determinism: dweight and dbias are sums over all tokens. A segment sums its tokens in float
 * in a fixed order (per kernel call, then FLUSH_TOKENS tokens at a time), and adds each such
 * float sum (in order) to its token block's double partial row in the workspace; after all
 * tasks, the partial rows are added in block order.
 * Token blocks and kernel calls depend on the problem alone (never on the thread count), and
 * channel blocks start at multiples of 16 (M2C1_BLOCK_ALIGN: the lanes of every kernel set map
 * to fixed channels), so each channel's float operations are the same in every run: results
 * are bitwise identical for any thread count.
 *
 * Decode step with one token per row and a packed cache (the common case): a task is a block
 * of channels over all rows, its weights packed once; the step kernel de-interleaves each
 * cache slot in registers and writes it back in place. Small steps run on the calling thread.
 * BF16/F16 steps widen each block's inputs to float32 and run the forward kernel on them.
 */
#include <stdint.h>
#include <string.h>

#include "core/conv1d.h"
#include "core/half.h"
#include "cpu/conv1d_kernels.h"
#include "cpu/cpu.h"

/*
 * Blocking. Rows of consecutive tokens are far apart in memory (a row of x is C or more
 * floats, usually over a 4 KiB page), and a kernel call walks its tokens once per vector of
 * channels. A call therefore covers few tokens (the pages of its x and out rows stay within
 * the first-level TLB, its rows in L1, and the rows' streams few enough for the prefetchers;
 * longer calls were measured slower, docs/code_notes.md) and many channels (long contiguous runs
 * per row). The history of a chunk that does not start a sequence is read from x in place,
 * so short chunks cost only W-1 reloaded rows each. Few backward blocks keep the partial
 * rows of dweight / dbias (written, then read once more) small next to x, dout and dx.
 */
#define CB 512            /* channels per block; a multiple of 16 (lanes map to fixed channels) */
#define FWD_CHUNK 16      /* tokens per forward kernel call                                   */
#define BWD_CHUNK 16      /* tokens per backward kernel call (the last + W-1 look-ahead)      */
#define FWD_BLOCK 256     /* tokens per forward task                                          */
#define BWD_MAX_BLOCKS 16 /* at most about this many backward token blocks (partial rows)     */
#define FLUSH_TOKENS 64   /* dweight/dbias: float sums over this many tokens, then into double */
#define MAXW M2C1_MAX_W
#define TASKS_PER_THREAD 4 /* forward / backward: at least about this many tasks per thread  */
#define STEP_CB 1024      /* at most this many channels per decode-step task                  */
#define STEP_SERIAL_BYTES (512 * 1024) /* a decode step moving less runs on one thread        */

#define ALIGN M2C1_BLOCK_ALIGN
#if CB % ALIGN != 0 || STEP_CB % ALIGN != 0 || FLUSH_TOKENS % BWD_CHUNK != 0
#error "CB and STEP_CB must be multiples of M2C1_BLOCK_ALIGN, FLUSH_TOKENS one of BWD_CHUNK"
#endif

/* ---- helpers ------------------------------------------------------------------------ */

static const m2_conv1d_kernels *kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86)
    return ctx->isa == M2_ISA_AVX512 ? &m2_conv1d_kernels_avx512
           : ctx->isa == M2_ISA_AVX2 ? &m2_conv1d_kernels_avx2
                                     : &m2_conv1d_kernels_scalar;
#elif defined(M2_KSETS_NEON)
    return ctx->isa == M2_ISA_NEON ? &m2_conv1d_kernels_neon : &m2_conv1d_kernels_scalar;
#else
    (void)ctx;
    return &m2_conv1d_kernels_scalar;
#endif
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Channel blocks per task: as many as still leave about TASKS_PER_THREAD tasks per thread
 * over the ntb token blocks. A task walks its channel blocks in order over the same rows,
 * so the rows' next columns (which the kernels prefetch) are its own next work. Channel
 * grouping never changes a result. */
static int64_t group_blocks(int64_t ntb, int64_t ncb, int nthreads) {
    int64_t ngroups = ceil_div((int64_t)TASKS_PER_THREAD * nthreads, ntb > 0 ? ntb : 1);
    if (ngroups > ncb) ngroups = ncb;
    if (ngroups < 1) ngroups = 1;
    return ceil_div(ncb, ngroups);
}

/* Row length of the packed per-block buffers: CB, or C rounded up to ALIGN when smaller. */
static int64_t pack_width(const m2_conv1d_problem *pr) {
    const int64_t ca = ceil_div(pr->C, ALIGN) * ALIGN;
    return ca < CB ? ca : CB;
}

/* Rows of x that hold independent token streams: B, or the one packed row. */
static int64_t nrows(const m2_conv1d_problem *pr) { return pr->cu_seqlens ? 1 : pr->B; }

static int64_t cu_at(const m2_conv1d_problem *pr, int64_t i) {
    return pr->cu_dtype == MAMBA2_DTYPE_I32 ? ((const int32_t *)pr->cu_seqlens)[i]
                                            : ((const int64_t *)pr->cu_seqlens)[i];
}

/* The sequence of row r holding token A (A < L): the first s with cu[s+1] > A. */
static int64_t seq_of(const m2_conv1d_problem *pr, int64_t r, int64_t A) {
    if (!pr->cu_seqlens) return r;
    int64_t lo = 0, hi = pr->nseq - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cu_at(pr, mid + 1) <= A)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Packed weights of channels [c0, c0+n), rows of length ld: wt[k*ld + c] = weight[c0+c, k]. */
static void pack_weights(const m2_conv1d_kernels *k, const m2_conv1d_problem *pr, int64_t c0,
                         int64_t n, int64_t ld, float *wt) {
    const float *w = (const float *)pr->weight.p;
    k->pack_w(pr->W, n, w + c0 * pr->weight.s[0], pr->weight.s[0], wt, ld);
}

/* W-1 history rows of channels [c0, c0+n) from a conv state view st[S,C,W-1] at slot q
 * (zeros when st has no data): hist[i*ld + c] = st[q, c0+c, i]. */
static void pack_state(const m2_conv1d_problem *pr, const m2_view *st, int64_t q, int64_t c0,
                       int64_t n, int64_t ld, float *hist) {
    const int64_t W1 = pr->W - 1;
    if (!st->p) {
        for (int64_t i = 0; i < W1; i++) memset(hist + i * ld, 0, (size_t)n * sizeof(float));
        return;
    }
    const float *base = (const float *)st->p + q * st->s[0] + c0 * st->s[1];
    for (int64_t c = 0; c < n; c++)
        for (int64_t i = 0; i < W1; i++) hist[i * ld + c] = base[c * st->s[1] + i];
}

/*
 * The W-1 inputs before token a of sequence s (start s0, row b), channels [c0, c0+n):
 * when all lie in the sequence they are rows of x, used in place (*ldh = x's row stride);
 * otherwise they are packed into buf (rows of length ld): initial-state entries (or 0)
 * before s0, x after.
 */
static const float *history(const m2_conv1d_problem *pr, int64_t s, int64_t b, int64_t s0,
                            int64_t a, int64_t c0, int64_t n, int64_t ld, float *buf,
                            int64_t *ldh) {
    const int64_t W1 = pr->W - 1;
    const float *x = (const float *)pr->x.p + b * pr->x.s[0] + c0;
    if (a - W1 >= s0) {
        *ldh = pr->x.s[1];
        return x + (a - W1) * pr->x.s[1];
    }
    pack_state(pr, &pr->init, s, c0, n, ld, buf); /* row i holds position s0 - W1 + i */
    const int64_t shift = a - s0;                 /* 0 <= shift < W-1: rows move up by shift */
    for (int64_t i = 0; i < W1; i++) {
        const int64_t j = a - W1 + i; /* position of history row i */
        if (j < s0)
            memmove(buf + i * ld, buf + (i + shift) * ld, (size_t)n * sizeof(float));
        else
            memcpy(buf + i * ld, x + j * pr->x.s[1], (size_t)n * sizeof(float));
    }
    *ldh = ld;
    return buf;
}

/* Calls fn(arg, s, s0, s1, a, e) for each sequence s (tokens [s0, s1)) meeting the tokens
 * [A, E) of row r (A < E), with [a, e) the part inside [A, E). */
typedef void (*segment_fn)(void *arg, int64_t r, int64_t s, int64_t s0, int64_t s1, int64_t a,
                           int64_t e);
static void for_each_segment(const m2_conv1d_problem *pr, int64_t r, int64_t A, int64_t E,
                             segment_fn fn, void *arg) {
    if (!pr->cu_seqlens) {
        fn(arg, r, r, 0, pr->L, A, E);
        return;
    }
    for (int64_t s = seq_of(pr, r, A); s < pr->nseq; s++) {
        const int64_t s0 = cu_at(pr, s), s1 = cu_at(pr, s + 1);
        if (s0 >= E) break;
        const int64_t a = s0 > A ? s0 : A, e = s1 < E ? s1 : E;
        if (e > a) fn(arg, r, s, s0, s1, a, e);
    }
}

/* ---- forward ------------------------------------------------------------------------ */

typedef struct fwd_job {
    const m2_conv1d_problem *pr;
    const m2_conv1d_kernels *k;
    int64_t nblk, ncb, gcb, block, ld; /* token blocks per row, channel blocks, channel blocks
                                          per task, tokens per block, packed row length */
    /* per task (set by fwd_task before the segments run) */
    int64_t c0, n;
    const float *wt;
    float *hbuf;
} fwd_job;

static void fwd_segment(void *arg, int64_t b, int64_t s, int64_t s0, int64_t s1, int64_t a,
                        int64_t e) {
    const fwd_job *J = (const fwd_job *)arg;
    const m2_conv1d_problem *pr = J->pr;
    const float *x = (const float *)pr->x.p + b * pr->x.s[0] + J->c0;
    float *out = (float *)pr->out.p + b * pr->out.s[0] + J->c0;
    const float *bias = pr->bias.p ? (const float *)pr->bias.p + J->c0 : NULL;
    for (int64_t ca = a; ca < e; ca += FWD_CHUNK) {
        const int64_t ce = ca + FWD_CHUNK < e ? ca + FWD_CHUNK : e;
        int64_t ldh;
        const float *hist = history(pr, s, b, s0, ca, J->c0, J->n, J->ld, J->hbuf, &ldh);
        J->k->fwd(pr->W, pr->silu, ce - ca, J->n, x + ca * pr->x.s[1], pr->x.s[1], hist, ldh,
                  J->wt, J->ld, bias, out + ca * pr->out.s[1], pr->out.s[1]);
    }
}

static void fwd_task(void *arg, int64_t task, int thread) {
    fwd_job J = *(const fwd_job *)arg; /* a private copy: the per-task fields below */
    const m2_conv1d_problem *pr = J.pr;
    const int64_t ngr = ceil_div(J.ncb, J.gcb);
    const int64_t grp = task % ngr, blk = (task / ngr) % J.nblk, r = task / (ngr * J.nblk);
    float wt[MAXW * CB], hbuf[(MAXW - 1) * CB]; /* 30 KiB of stack at most */
    J.wt = wt;
    J.hbuf = hbuf;
    const int64_t A = blk * J.block, E = A + J.block < pr->L ? A + J.block : pr->L;
    for (int64_t cb = grp * J.gcb; cb < (grp + 1) * J.gcb && cb < J.ncb; cb++) {
        J.c0 = cb * CB;
        J.n = pr->C - J.c0 < CB ? pr->C - J.c0 : CB;
        pack_weights(J.k, pr, J.c0, J.n, J.ld, wt);
        for_each_segment(pr, r, A, E, fwd_segment, &J);
    }
}

/* final[s, c, i] = u_{len-W+1+i}: x inside the sequence, the initial state (or 0) before. */
static void final_task(void *arg, int64_t s, int thread) {
    const m2_conv1d_problem *pr = (const m2_conv1d_problem *)arg;
    const int64_t W1 = pr->W - 1;
    int64_t b, s0, s1;
    m2_conv1d_seq(pr, s, &b, &s0, &s1);
    /* x may be an empty tensor with no data (L = 0): no offset from NULL */
    const float *x = pr->x.p ? (const float *)pr->x.p + b * pr->x.s[0] : NULL;
    const float *init = (const float *)pr->init.p;
    float *fin = (float *)pr->final.p + s * pr->final.s[0];
    for (int64_t c = 0; c < pr->C; c++)
        for (int64_t i = 0; i < W1; i++) {
            const int64_t r = s1 - s0 - W1 + i; /* position relative to s0 */
            float v;
            if (r >= 0)
                v = x[(s0 + r) * pr->x.s[1] + c];
            else
                v = init ? init[s * pr->init.s[0] + c * pr->init.s[1] + W1 + r] : 0.0f;
            fin[c * pr->final.s[1] + i] = v;
        }
}

mamba2_status_t m2_cpu_conv1d_forward(mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    fwd_job J;
    memset(&J, 0, sizeof J);
    J.pr = pr;
    J.k = kernels_for(ctx);
    J.ncb = ceil_div(pr->C, CB);
    J.ld = pack_width(pr);
    J.block = FWD_BLOCK;
    J.nblk = ceil_div(pr->L, J.block);
    J.gcb = group_blocks(nrows(pr) * J.nblk, J.ncb, m2_cpu_plan_threads(ctx));
    m2_cpu_run_tasks(ctx, nrows(pr) * J.nblk * ceil_div(J.ncb, J.gcb), fwd_task, &J);
    if (pr->final.p && pr->W > 1) m2_cpu_run_tasks(ctx, pr->nseq, final_task, (void *)pr);
    return MAMBA2_STATUS_OK;
}

/* ---- backward ----------------------------------------------------------------------- */

typedef struct bwd_plan {
    int64_t block, nblk, ncb, gcb, ld; /* tokens per block, blocks per row, channel blocks,
                                          channel blocks per task, packed row length      */
    int64_t nparts;               /* partial rows: nrows * nblk (0: no dweight / dbias)   */
    int nthreads;
    size_t parts_bytes, scratch_floats; /* workspace: partial rows, then per-thread scratch */
} bwd_plan;

/* Per-thread scratch (floats, rows of ld): the kernel's carried windows (W-1 input rows, W-1
 * gradient rows), the history buffer, the dinit rows, float sums of dweight and dbias, the
 * packed weights. */
static int64_t off_hist(int64_t W, int64_t ld) { return 2 * (W - 1) * ld; }
static int64_t off_tmp(int64_t W, int64_t ld) { return off_hist(W, ld) + (W - 1) * ld; }
static int64_t off_dw(int64_t W, int64_t ld) { return off_tmp(W, ld) + (W - 1) * ld; }
static int64_t off_db(int64_t W, int64_t ld) { return off_dw(W, ld) + W * ld; }
static int64_t off_wt(int64_t W, int64_t ld) { return off_db(W, ld) + ld; }
static int64_t scratch_floats(int64_t W, int64_t ld) {
    return ceil_div(off_wt(W, ld) + W * ld, 16) * 16;
}

/* The token blocks depend on B and L only (never on the thread count): about
 * BWD_MAX_BLOCKS blocks over all B*L tokens, each a multiple of BWD_CHUNK and >= 64 tokens. */
static bwd_plan plan_bwd(const mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    bwd_plan p;
    const int64_t total = nrows(pr) * pr->L;
    int64_t block = ceil_div(total, BWD_MAX_BLOCKS);
    block = ceil_div(block, BWD_CHUNK) * BWD_CHUNK;
    if (block < 64) block = 64;
    p.block = block;
    p.nblk = ceil_div(pr->L, block);
    p.ncb = ceil_div(pr->C, CB);
    p.ld = pack_width(pr);
    p.nparts = (pr->dweight.p || pr->dbias.p) ? nrows(pr) * p.nblk : 0;
    p.nthreads = m2_cpu_plan_threads(ctx);
    p.gcb = group_blocks(nrows(pr) * p.nblk, p.ncb, p.nthreads);
    p.parts_bytes = (size_t)(ceil_div(p.nparts * (pr->W + 1) * pr->C, 8) * 8) * sizeof(double);
    p.scratch_floats = (size_t)scratch_floats(pr->W, p.ld);
    return p;
}

mamba2_status_t m2_cpu_conv1d_backward_workspace(const mamba2_context_t *ctx,
                                                 const m2_conv1d_problem *pr, size_t *bytes) {
    const bwd_plan p = plan_bwd(ctx, pr);
    /* [nparts][W+1][C] doubles (k < W: dweight, k == W: dbias), then the threads' scratch;
     * the sizes are bounded by validation (nparts * C <= B*L*C <= 2^46 elements, W <= 8),
     * the sum checked all the same */
    size_t scr;
    const int64_t f[3] = {p.nthreads, (int64_t)p.scratch_floats, (int64_t)sizeof(float)};
    if (!m2_size_prod(&scr, 3, f) || !m2_size_add(p.parts_bytes, scr, bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "the conv1d backward's workspace exceeds the address space");
    return MAMBA2_STATUS_OK;
}

typedef struct bwd_job {
    const m2_conv1d_problem *pr;
    const m2_conv1d_kernels *k;
    bwd_plan p;
    double *parts;
    float *scratch;
    /* per task */
    int64_t c0, n;
    float *sc;    /* this thread's scratch */
    double *part; /* this task's partial row: part[k*C + c] for c in [c0, c0+n) */
} bwd_job;

/* The kernel's windows at the start of a run at token a: the W-1 inputs before a, zero
 * gradients. */
static void init_windows(const bwd_job *J, int64_t b, int64_t s, int64_t s0, int64_t a,
                         float *st) {
    const int64_t W1 = J->pr->W - 1, n = J->n, ld = J->p.ld;
    int64_t ldh;
    const float *hist = history(J->pr, s, b, s0, a, J->c0, n, ld, J->sc + off_hist(J->pr->W, ld),
                                &ldh);
    for (int64_t i = 0; i < W1; i++) {
        memcpy(st + i * ld, hist + i * ldh, (size_t)n * sizeof(float));
        memset(st + (W1 + i) * ld, 0, (size_t)n * sizeof(float));
    }
}

/*
 * Tokens [a, e) of sequence s ([s0, s1), row b). One run of the fused kernel over
 * [a, e + W-1) in chunks of BWD_CHUNK tokens: g for tokens < min(e + W-1, s1) (past e only
 * the look-ahead dx needs, past s1 zeros), dweight/dbias sums over [a, e), dx of inputs
 * [a, e). The chunks start at a + i*BWD_CHUNK and the last one takes the look-ahead too,
 * whatever else is requested, so the float sums group the same way in every call. At a sequence start a short separate run over the first
 * W-1 tokens yields dinit (the gradients of positions s0-W+1 .. s0-1).
 */
static void bwd_segment(void *arg, int64_t b, int64_t s, int64_t s0, int64_t s1, int64_t a,
                        int64_t e) {
    const bwd_job *J = (const bwd_job *)arg;
    const m2_conv1d_problem *pr = J->pr;
    const m2_conv1d_kernels *K = J->k;
    const int64_t W = pr->W, W1 = W - 1, n = J->n, c0 = J->c0, C = pr->C, ld = J->p.ld;
    float *st = J->sc, *tmp = J->sc + off_tmp(W, ld);
    float *dwc = J->sc + off_dw(W, ld), *dbc = J->sc + off_db(W, ld);
    const float *wt = J->sc + off_wt(W, ld);
    const int64_t xs = pr->x.s[1], ds = pr->dout.s[1];
    const float *x = (const float *)pr->x.p + b * pr->x.s[0] + c0;
    const float *dout = (const float *)pr->dout.p + b * pr->dout.s[0] + c0;
    float *dx = pr->dx.p ? (float *)pr->dx.p + b * pr->dx.s[0] + c0 : NULL;
    const int64_t dxs = pr->dx.s[1];
    const float *bias = pr->bias.p ? (const float *)pr->bias.p + c0 : NULL;
    const float *dfin = pr->dfinal.p ? (const float *)pr->dfinal.p + s * pr->dfinal.s[0] +
                                           c0 * pr->dfinal.s[1]
                                     : NULL;
    const int64_t fs = s1 - W1; /* first position the final state holds */
    const int64_t gend = e + W1 < s1 ? e + W1 : s1;

    /* dinit: the first W-1 tokens' gradients reach back before s0 */
    if (a == s0 && pr->dinit.p && W1 > 0) {
        init_windows(J, b, s, s0, a, st);
        const int64_t Tg = gend - a < W1 ? gend - a : W1;
        K->bwd(W, pr->silu, W1, Tg, 0, 0, n, x + a * xs, xs, dout + a * ds, ds, wt, ld, bias, st,
               ld, tmp, ld, dwc, dbc, 0);
        float *di = (float *)pr->dinit.p + s * pr->dinit.s[0] + c0 * pr->dinit.s[1];
        for (int64_t c = 0; c < n; c++)
            for (int64_t i = 0; i < W1; i++) {
                const int64_t j = s0 - W1 + i;
                float v = tmp[i * ld + c];
                if (dfin && j >= fs) v += dfin[c * pr->dfinal.s[1] + (j - fs)];
                di[c * pr->dinit.s[1] + i] = v;
            }
    }
    if (!dx && !J->part) return;

    init_windows(J, b, s, s0, a, st);
    if (J->part) {
        for (int64_t k = 0; k < W; k++) memset(dwc + k * ld, 0, (size_t)n * sizeof(float));
        memset(dbc, 0, (size_t)n * sizeof(float));
    }
    const int64_t tend = dx ? e + W1 : e; /* the look-ahead serves dx alone */
    for (int64_t ca = a, ce; ca < tend; ca = ce) {
        ce = ca + BWD_CHUNK < e ? ca + BWD_CHUNK : tend; /* the look-ahead joins the last chunk */
        const int64_t T = ce - ca;
        const int64_t Tg = gend - ca < 0 ? 0 : gend - ca < T ? gend - ca : T;
        const int64_t Tacc = e - ca < 0 ? 0 : e - ca < T ? e - ca : T;
        const int64_t temit = a + W1 - ca > 0 ? a + W1 - ca : 0; /* first dx: input a */
        const int64_t r0 = Tg > 0 ? ca : a;                       /* rows read: < Tg only */
        K->bwd(W, pr->silu, T, Tg, Tacc, temit, n, x + r0 * xs, xs, dout + r0 * ds, ds, wt, ld,
               bias, st, ld, dx ? dx + (ca + temit - W1) * dxs : NULL, dxs, dwc, dbc, 1);
        if (J->part && Tacc > 0 && ((ce - a) % FLUSH_TOKENS == 0 || ce >= e)) {
            for (int64_t k = 0; k <= W; k++) { /* row k == W: dbias */
                double *prow = J->part + k * C + c0;
                const float *frow = k < W ? dwc + k * ld : dbc;
                for (int64_t c = 0; c < n; c++) prow[c] += (double)frow[c];
            }
            for (int64_t k = 0; k < W; k++) memset(dwc + k * ld, 0, (size_t)n * sizeof(float));
            memset(dbc, 0, (size_t)n * sizeof(float));
        }
    }
    if (dx && dfin) /* inputs held by the final state also receive its gradient */
        for (int64_t j = a > fs ? a : fs; j < e; j++)
            for (int64_t c = 0; c < n; c++)
                dx[j * dxs + c] += dfin[c * pr->dfinal.s[1] + (j - fs)];
}

static void bwd_task(void *arg, int64_t task, int thread) {
    bwd_job J = *(const bwd_job *)arg; /* a private copy: the per-task fields below */
    const m2_conv1d_problem *pr = J.pr;
    const int64_t ncb = J.p.ncb, gcb = J.p.gcb, nblk = J.p.nblk, ld = J.p.ld;
    const int64_t ngr = ceil_div(ncb, gcb);
    const int64_t grp = task % ngr, blk = (task / ngr) % nblk, r = task / (ngr * nblk);
    const int64_t A = blk * J.p.block, E = A + J.p.block < pr->L ? A + J.p.block : pr->L;
    J.sc = J.scratch + (size_t)thread * J.p.scratch_floats;
    for (int64_t cb = grp * gcb; cb < (grp + 1) * gcb && cb < ncb; cb++) {
        J.c0 = cb * CB;
        J.n = pr->C - J.c0 < CB ? pr->C - J.c0 : CB;
        pack_weights(J.k, pr, J.c0, J.n, ld, J.sc + off_wt(pr->W, ld));
        J.part = NULL;
        if (J.parts) {
            J.part = J.parts + (r * nblk + blk) * (pr->W + 1) * pr->C;
            for (int64_t k = 0; k <= pr->W; k++)
                memset(J.part + k * pr->C + J.c0, 0, (size_t)J.n * sizeof(double));
        }
        for_each_segment(pr, r, A, E, bwd_segment, &J);
    }
    J.k->stream_fence(); /* dx may have been streamed: visible before the task ends */
}

/* dweight / dbias of channel block `task`: the partial rows added in block order (row by
 * row, so the reads are contiguous). */
static void reduce_task(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    const m2_conv1d_problem *pr = J->pr;
    const int64_t W = pr->W, C = pr->C, c0 = task * CB, n = c0 + CB < C ? CB : C - c0;
    double acc[(MAXW + 1) * CB];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < J->p.nparts; p++)
        for (int64_t k = 0; k <= W; k++) {
            const double *row = J->parts + (p * (W + 1) + k) * C + c0;
            for (int64_t c = 0; c < n; c++) acc[k * CB + c] += row[c];
        }
    for (int64_t c = 0; c < n; c++) {
        if (pr->dweight.p)
            for (int64_t k = 0; k < W; k++)
                ((float *)pr->dweight.p)[(c0 + c) * pr->dweight.s[0] + k] = (float)acc[k * CB + c];
        if (pr->dbias.p) ((float *)pr->dbias.p)[c0 + c] = (float)acc[W * CB + c];
    }
}

mamba2_status_t m2_cpu_conv1d_backward(mamba2_context_t *ctx, const m2_conv1d_problem *pr,
                                       void *ws) {
    bwd_job J;
    memset(&J, 0, sizeof J);
    J.pr = pr;
    J.k = kernels_for(ctx);
    J.p = plan_bwd(ctx, pr);
    J.parts = J.p.nparts ? (double *)ws : NULL;
    J.scratch = (float *)((unsigned char *)ws + J.p.parts_bytes);
    const int any = pr->dx.p || pr->dweight.p || pr->dbias.p || pr->dinit.p;
    if (!any) return MAMBA2_STATUS_OK;
    m2_cpu_run_tasks(ctx, nrows(pr) * J.p.nblk * ceil_div(J.p.ncb, J.p.gcb), bwd_task, &J);
    if (pr->dweight.p || pr->dbias.p) m2_cpu_run_tasks(ctx, J.p.ncb, reduce_task, &J);
    /* empty sequences: no task saw them; final = init there, so dinit = dfinal (or 0) */
    if (pr->dinit.p && pr->W > 1)
        for (int64_t s = 0; s < pr->nseq; s++) {
            int64_t b, s0, s1;
            m2_conv1d_seq(pr, s, &b, &s0, &s1);
            if (s1 > s0) continue;
            float *di = (float *)pr->dinit.p + s * pr->dinit.s[0];
            const float *df = pr->dfinal.p ? (const float *)pr->dfinal.p + s * pr->dfinal.s[0] : NULL;
            for (int64_t c = 0; c < pr->C; c++)
                for (int64_t i = 0; i < pr->W - 1; i++)
                    di[c * pr->dinit.s[1] + i] = df ? df[c * pr->dfinal.s[1] + i] : 0.0f;
        }
    return MAMBA2_STATUS_OK;
}

/* ---- decode step -------------------------------------------------------------------- */

typedef struct step_job {
    const m2_conv1d_problem *pr;
    const m2_conv1d_kernels *k;
    int64_t ncb, cb, ld; /* channel blocks, channels per block, packed row length */
} step_job;

/* One token per row with a packed cache (conv_cache[q, c, i] at c*(W-1) + i): the step kernel
 * reads and rewrites each slot in place. A task is a block of channels over all rows, so its
 * weights are packed once. */
static void step1_task(void *arg, int64_t task, int thread) {
    const step_job *J = (const step_job *)arg;
    const m2_conv1d_problem *pr = J->pr;
    const int64_t c0 = task * J->cb, n = pr->C - c0 < J->cb ? pr->C - c0 : J->cb;
    float wt[MAXW * STEP_CB];
    pack_weights(J->k, pr, c0, n, J->ld, wt);
    const float *bias = pr->bias.p ? (const float *)pr->bias.p + c0 : NULL;
    for (int64_t b = 0; b < pr->B; b++) {
        const int64_t q = m2_conv1d_slot(pr, b);
        if (q < 0) continue; /* padding row: out and cache untouched */
        J->k->step(pr->W, pr->silu, n, (const float *)pr->x.p + b * pr->x.s[0] + c0,
                   (float *)pr->cache.p + q * pr->cache.s[0] + c0 * (pr->W - 1), wt, J->ld, bias,
                   (float *)pr->out.p + b * pr->out.s[0] + c0);
    }
}

/* The general case (T tokens per row, any cache length Lc >= W-1 and strides, shift or
 * circular mode). Row b, channel block cb: the W-1 history inputs are copied out (their
 * positions from m2_conv1d_cache_pos), the forward runs over the T tokens with them as history,
 * and then the slot is updated in place: shift mode moves entry i+T to i in increasing i (each
 * read is ahead of every write) and appends the last new tokens; circular mode writes token t
 * at (seqlen + t) mod Lc, in token order. */
static void step_task(void *arg, int64_t task, int thread) {
    const step_job *J = (const step_job *)arg;
    const m2_conv1d_problem *pr = J->pr;
    const int64_t b = task / J->ncb, cb = task % J->ncb;
    const int64_t q = m2_conv1d_slot(pr, b);
    if (q < 0) return; /* padding row: out and cache untouched */
    const int64_t W1 = pr->W - 1, T = pr->L, c0 = cb * CB, Lc = pr->Lc;
    const int64_t n = pr->C - c0 < CB ? pr->C - c0 : CB;
    const int64_t ld = J->ld, s1 = pr->cache.s[1], s2 = pr->cache.s[2];
    const int64_t sl = pr->cache_seqlens ? m2_conv1d_seqlen(pr, b) : 0;
    float wt[MAXW * CB], hist[(MAXW - 1) * CB]; /* 30 KiB of stack at most */
    pack_weights(J->k, pr, c0, n, ld, wt);
    /* Lc == 0 (only with W = 1): the cache holds nothing and may have no data */
    float *cache = Lc > 0 ? (float *)pr->cache.p + q * pr->cache.s[0] + c0 * s1 : NULL;
    for (int64_t i = 0; i < W1; i++) {
        const int64_t pos = m2_conv1d_cache_pos(pr, sl, i);
        for (int64_t c = 0; c < n; c++) hist[i * ld + c] = cache[c * s1 + pos * s2];
    }
    /* T = 0: x and out may be empty tensors with no data (no offset from NULL) */
    const float *x = pr->x.p ? (const float *)pr->x.p + b * pr->x.s[0] + c0 : NULL;
    float *out = pr->out.p ? (float *)pr->out.p + b * pr->out.s[0] + c0 : NULL;
    const float *bias = pr->bias.p ? (const float *)pr->bias.p + c0 : NULL;
    if (T > 0) J->k->fwd(pr->W, pr->silu, T, n, x, pr->x.s[1], hist, ld, wt, ld, bias, out, pr->out.s[1]);
    if (Lc == 0 || T == 0) return;
    if (pr->cache_seqlens) {
        const int64_t p0 = sl % Lc;
        for (int64_t t = 0; t < T; t++) {
            const int64_t pos = (p0 + t % Lc) % Lc;
            const float *xt = x + t * pr->x.s[1];
            for (int64_t c = 0; c < n; c++) cache[c * s1 + pos * s2] = xt[c];
        }
        return;
    }
    for (int64_t c = 0; c < n; c++) {
        float *cc = cache + c * s1;
        for (int64_t i = 0; i < Lc; i++) {
            const int64_t j = T + i; /* index into [old slot (Lc entries), x (T rows)] */
            cc[i * s2] = j < Lc ? cc[j * s2] : x[(j - Lc) * pr->x.s[1] + c];
        }
    }
}

/* BF16/F16 activations (x, out and conv_cache share the dtype; weight and bias F32 or that
 * dtype): the general case's structure, per (row, block of HCB channels), with the inputs
 * widened to float32 on the way in. The window buffer holds the W-1 history rows followed by
 * up to HTCH token rows; fwd runs on it (history rows in front of the token rows), its float
 * outputs are rounded once (to nearest even) into out, and the last W-1 rows slide to the
 * front for the next tokens. Each channel sees fwd's float operations on the widened values,
 * so the result is the float32 step's on the same (rounded) inputs, rounded once. The cache
 * update copies elements (x and the cache share the dtype: nothing is rounded there). */
#define HCB 256 /* channels per half-activation step task (about 48 KiB of stack) */
#define HTCH 16 /* tokens per kernel call of the half-activation step */
#if HCB % ALIGN != 0
#error "HCB must be a multiple of M2C1_BLOCK_ALIGN"
#endif

static float half_at(const uint16_t *p, mamba2_dtype_t dt) {
    return dt == MAMBA2_DTYPE_BF16 ? m2_bf16_to_f32(*p) : m2_f16_to_f32(*p);
}

static void step_half_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const step_job *J = (const step_job *)arg;
    const m2_conv1d_problem *pr = J->pr;
    const int64_t b = task / J->ncb, cb = task % J->ncb;
    const int64_t q = m2_conv1d_slot(pr, b);
    if (q < 0) return; /* padding row: out and cache untouched */
    const mamba2_dtype_t dt = pr->act_dtype;
    const int64_t W1 = pr->W - 1, T = pr->L, c0 = cb * HCB, Lc = pr->Lc;
    const int64_t n = pr->C - c0 < HCB ? pr->C - c0 : HCB;
    const int64_t ld = J->ld, s1 = pr->cache.s[1], s2 = pr->cache.s[2];
    const int64_t sl = pr->cache_seqlens ? m2_conv1d_seqlen(pr, b) : 0;
    float wt[MAXW * HCB], win[(MAXW - 1 + HTCH) * HCB], ob[HTCH * HCB], hb[HCB];
    if (pr->par_dtype == MAMBA2_DTYPE_F32) {
        pack_weights(J->k, pr, c0, n, ld, wt);
    } else {
        const uint16_t *w = (const uint16_t *)pr->weight.p + c0 * pr->weight.s[0];
        for (int64_t c = 0; c < n; c++)
            for (int64_t k = 0; k < pr->W; k++)
                wt[k * ld + c] = half_at(w + c * pr->weight.s[0] + k, pr->par_dtype);
    }
    const float *bias = NULL;
    if (pr->bias.p && pr->par_dtype == MAMBA2_DTYPE_F32) {
        bias = (const float *)pr->bias.p + c0;
    } else if (pr->bias.p) {
        m2_row_to_f32((const uint16_t *)pr->bias.p + c0, pr->par_dtype, n, hb);
        bias = hb;
    }
    /* Lc == 0 (only with W = 1): the cache holds nothing and may have no data */
    uint16_t *cache = Lc > 0 ? (uint16_t *)pr->cache.p + q * pr->cache.s[0] + c0 * s1 : NULL;
    for (int64_t i = 0; i < W1; i++) {
        const int64_t pos = m2_conv1d_cache_pos(pr, sl, i);
        for (int64_t c = 0; c < n; c++) win[i * ld + c] = half_at(cache + c * s1 + pos * s2, dt);
    }
    /* T = 0: x and out may be empty tensors with no data (no offset from NULL) */
    const uint16_t *x = pr->x.p ? (const uint16_t *)pr->x.p + b * pr->x.s[0] + c0 : NULL;
    uint16_t *out = pr->out.p ? (uint16_t *)pr->out.p + b * pr->out.s[0] + c0 : NULL;
    for (int64_t t0 = 0; t0 < T; t0 += HTCH) {
        const int64_t nt = T - t0 < HTCH ? T - t0 : HTCH;
        for (int64_t i = 0; i < nt; i++)
            m2_row_to_f32(x + (t0 + i) * pr->x.s[1], dt, n, win + (W1 + i) * ld);
        J->k->fwd(pr->W, pr->silu, nt, n, win + W1 * ld, ld, win, ld, wt, ld, bias, ob, ld);
        for (int64_t i = 0; i < nt; i++)
            m2_row_from_f32(out + (t0 + i) * pr->out.s[1], dt, n, ob + i * ld);
        if (W1 > 0) memmove(win, win + nt * ld, (size_t)(W1 * ld) * sizeof(float));
    }
    if (Lc == 0 || T == 0) return;
    if (pr->cache_seqlens) {
        const int64_t p0 = sl % Lc;
        for (int64_t t = 0; t < T; t++) {
            const int64_t pos = (p0 + t % Lc) % Lc;
            const uint16_t *xt = x + t * pr->x.s[1];
            for (int64_t c = 0; c < n; c++) cache[c * s1 + pos * s2] = xt[c];
        }
        return;
    }
    for (int64_t c = 0; c < n; c++) {
        uint16_t *cc = cache + c * s1;
        for (int64_t i = 0; i < Lc; i++) {
            const int64_t j = T + i; /* index into [old slot (Lc entries), x (T rows)] */
            cc[i * s2] = j < Lc ? cc[j * s2] : x[(j - Lc) * pr->x.s[1] + c];
        }
    }
}

mamba2_status_t m2_cpu_conv1d_step(mamba2_context_t *ctx, const m2_conv1d_problem *pr) {
    step_job J;
    J.pr = pr;
    J.k = kernels_for(ctx);
    if (pr->act_dtype != MAMBA2_DTYPE_F32) {
        const int64_t ca = ceil_div(pr->C, ALIGN) * ALIGN;
        const int64_t bytes = pr->B * pr->C * (int64_t)sizeof(uint16_t) * (2 * pr->L + pr->Lc);
        J.ld = ca < HCB ? ca : HCB;
        J.ncb = ceil_div(pr->C, HCB);
        if (bytes < STEP_SERIAL_BYTES || !ctx->pool)
            for (int64_t t = 0; t < pr->B * J.ncb; t++) step_half_task(&J, t, 0);
        else
            m2_cpu_run_tasks(ctx, pr->B * J.ncb, step_half_task, &J);
        return MAMBA2_STATUS_OK;
    }
    if (pr->L == 1 && pr->W > 1 && pr->Lc == pr->W - 1 && !pr->cache_seqlens &&
        pr->cache.s[2] == 1 && pr->cache.s[1] == pr->W - 1) {
        /* Equal blocks of at most STEP_CB channels (long contiguous runs of each cache slot);
         * a call moving little data runs on the calling thread alone (waking the pool costs
         * more than it saves there). */
        const int64_t bytes = pr->B * pr->C * (int64_t)sizeof(float) * 2 * pr->W;
        J.ncb = ceil_div(pr->C, STEP_CB);
        J.cb = ceil_div(ceil_div(pr->C, J.ncb), ALIGN) * ALIGN; /* equal, multiples of ALIGN */
        J.ld = J.cb;
        J.ncb = ceil_div(pr->C, J.cb);
        if (bytes < STEP_SERIAL_BYTES || !ctx->pool)
            for (int64_t t = 0; t < J.ncb; t++) step1_task(&J, t, 0);
        else
            m2_cpu_run_tasks(ctx, J.ncb, step1_task, &J);
        return MAMBA2_STATUS_OK;
    }
    J.ncb = ceil_div(pr->C, CB);
    J.ld = pack_width(pr);
    /* as above: a step moving little data runs on the calling thread (e.g. transformers'
     * [B,C,K] cache, Lc = W, at batch 1) */
    const int64_t bytes = pr->B * pr->C * (int64_t)sizeof(float) * (2 * pr->L + pr->Lc);
    if (bytes < STEP_SERIAL_BYTES || !ctx->pool)
        for (int64_t t = 0; t < pr->B * J.ncb; t++) step_task(&J, t, 0);
    else
        m2_cpu_run_tasks(ctx, pr->B * J.ncb, step_task, &J);
    return MAMBA2_STATUS_OK;
}
