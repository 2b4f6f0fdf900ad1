/*
 * rmsnorm_cpu.c — the CPU backend of the gated RMSNorm (SPEC §5): row blocks, threads and
 * the fixed-order dweight/dbias reduction. The arithmetic on a group of channels lives in
 * the per-ISA kernel sets (rmsnorm_kernels.h), picked from ctx->isa at every call.
 *
 * Forward: one task per FWD_ROWS rows; each row is independent, so no workspace.
 *
 * Backward: the rows are cut into blocks whose size depends on M alone (bwd_block_rows), one
 * task per block. A task writes dx and dz of its rows and accumulates its rows' dweight and
 * dbias contributions, in row order (two rows per kernel call), into its own partial row of
 * the workspace. A second pass over column chunks adds the partial rows in block order. Every float operation and
 * its order is fixed by (M, D, group_size): results are bitwise identical for any thread
 * count, and no float atomics are used.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"
#include "core/rmsnorm.h"
#include "cpu/cpu.h"
#include "cpu/rmsnorm_kernels.h"

/* Rows per forward task (scheduling only; a row's result does not depend on it). */
#define FWD_ROWS 8
/* Backward blocks: at most BWD_MAX_BLOCKS partial rows of D floats (so the reduction reads
 * little next to the M*D traffic of the op), blocks of at least BWD_MIN_ROWS rows. */
#define BWD_MAX_BLOCKS 64
#define BWD_MIN_ROWS 8
/* Columns per reduction task. */
#define RED_COLS 1024

static const m2_rmsnorm_kernels *kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86) /* AVX2 also at the AVX-512 level */
    return ctx->isa != M2_ISA_SCALAR ? &m2_rmsnorm_kernels_avx2 : &m2_rmsnorm_kernels_scalar;
#elif defined(M2_KSETS_NEON)
    return ctx->isa == M2_ISA_NEON ? &m2_rmsnorm_kernels_neon : &m2_rmsnorm_kernels_scalar;
#else
    (void)ctx;
    return &m2_rmsnorm_kernels_scalar;
#endif
}

/* Rows per backward block: a function of M only (never of the thread count). */
static int64_t bwd_block_rows(int64_t M) {
    int64_t rows = (M + BWD_MAX_BLOCKS - 1) / BWD_MAX_BLOCKS;
    return rows < BWD_MIN_ROWS ? BWD_MIN_ROWS : rows;
}

/* Element (m, c) of a [M,D] (or [M,G]) view, or NULL when the view is absent. */
static const float *at_in(const m2_view *v, int64_t m, int64_t c) {
    return v->p ? (const float *)v->p + m * v->s[0] + c : NULL;
}
static float *at_out(const m2_view *v, int64_t m, int64_t c) {
    return v->p ? (float *)v->p + m * v->s[0] + c : NULL;
}

/* ---- forward ------------------------------------------------------------------------ */

typedef struct fwd_arg {
    const m2_rmsnorm_problem *pr;
    const m2_rmsnorm_kernels *k;
} fwd_arg;

static void fwd_task(void *arg_, int64_t task, int thread) {
    (void)thread;
    const fwd_arg *a = arg_;
    const m2_rmsnorm_problem *pr = a->pr;
    const int64_t S = pr->S;
    const float *w = (const float *)pr->weight.p, *b = (const float *)pr->bias.p;
    const int64_t m1 = (task + 1) * FWD_ROWS < pr->M ? (task + 1) * FWD_ROWS : pr->M;
    for (int64_t m = task * FWD_ROWS; m < m1; m++) {
        float *rstd = at_out(&pr->rstd, m, 0);
        for (int64_t g = 0; g < pr->G; g++) {
            const int64_t c = g * S;
            const float r = a->k->fwd_group(S, pr->eps, pr->norm_before_gate, at_in(&pr->x, m, c),
                                            at_in(&pr->z, m, c), w + c, b ? b + c : NULL,
                                            at_out(&pr->out, m, c));
            if (rstd) rstd[g] = r;
        }
    }
}

mamba2_status_t m2_cpu_rmsnorm_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_rmsnorm_problem *pr, size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_rmsnorm_forward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                       void *ws) {
    (void)ws;
    fwd_arg a = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, (pr->M + FWD_ROWS - 1) / FWD_ROWS, fwd_task, &a);
    return MAMBA2_STATUS_OK;
}

/* ---- backward ----------------------------------------------------------------------- */

typedef struct bwd_layout {
    int64_t rows, nblk; /* rows per block, number of blocks                               */
    size_t dw, db, scr; /* byte offsets of the partial rows [nblk][D] and the scratch      */
    size_t scr_stride;  /* bytes of scratch per thread (4 S floats, rounded to 64)         */
    size_t total;
} bwd_layout;

/* The layout (checked size arithmetic: 0 when a size does not fit a size_t). */
static int bwd_plan(const mamba2_context_t *ctx, const m2_rmsnorm_problem *pr, bwd_layout *Lp) {
    bwd_layout L;
    memset(&L, 0, sizeof L);
    L.rows = bwd_block_rows(pr->M);
    L.nblk = (pr->M + L.rows - 1) / L.rows;
    size_t part, scr, thr;
    const int64_t fp[3] = {L.nblk, pr->D, (int64_t)sizeof(float)};
    const int64_t fs[3] = {4, pr->S, (int64_t)sizeof(float)}; /* 2 rows x 2 S floats */
    if (!m2_size_prod(&part, 3, fp) || !m2_size_add(part, 63, &part) || !m2_size_prod(&scr, 3, fs) ||
        !m2_size_add(scr, 63, &scr))
        return 0;
    part = m2_round64(part - 63);
    L.scr_stride = m2_round64(scr - 63);
    size_t off = 0;
    if (pr->dweight.p) {
        L.dw = off;
        off += part;
    }
    if (pr->dbias.p) {
        L.db = off;
        if (!m2_size_add(off, part, &off)) return 0;
    }
    L.scr = off;
    if (!m2_size_mul((size_t)m2_cpu_plan_threads(ctx), L.scr_stride, &thr) ||
        !m2_size_add(off, thr, &L.total))
        return 0;
    *Lp = L;
    return 1;
}

typedef struct bwd_arg {
    const m2_rmsnorm_problem *pr;
    const m2_rmsnorm_kernels *k;
    bwd_layout L;
    unsigned char *ws;
} bwd_arg;

static void bwd_task(void *arg_, int64_t task, int thread) {
    const bwd_arg *a = arg_;
    const m2_rmsnorm_problem *pr = a->pr;
    const int64_t S = pr->S, D = pr->D;
    const float *w = (const float *)pr->weight.p, *b = (const float *)pr->bias.p;
    float *dw = pr->dweight.p ? (float *)(a->ws + a->L.dw) + task * D : NULL;
    float *db = pr->dbias.p ? (float *)(a->ws + a->L.db) + task * D : NULL;
    float *scr = (float *)(a->ws + a->L.scr + (size_t)thread * a->L.scr_stride);
    if (dw) memset(dw, 0, (size_t)D * sizeof(float));
    if (db) memset(db, 0, (size_t)D * sizeof(float));
    const int64_t m0 = task * a->L.rows;
    const int64_t m1 = m0 + a->L.rows < pr->M ? m0 + a->L.rows : pr->M;
    /* rows in pairs (the kernel shares w, b and the dw, db update between them); the
     * pairing starts at the block's first row, so it depends on M alone */
    for (int64_t m = m0; m < m1; m += 2) {
        const int nrows = m + 1 < m1 ? 2 : 1;
        for (int64_t g = 0; g < pr->G; g++) {
            const int64_t c = g * S;
            m2_rms_row rows[2];
            for (int q = 0; q < nrows; q++) {
                const int64_t mm = m + q;
                const float *rin = at_in(&pr->rstd_in, mm, 0);
                rows[q].x = at_in(&pr->x, mm, c);
                rows[q].z = at_in(&pr->z, mm, c);
                rows[q].dout = at_in(&pr->dout, mm, c);
                rows[q].dx = at_out(&pr->dx, mm, c);
                rows[q].dz = at_out(&pr->dz, mm, c);
                rows[q].r_in = rin ? rin + g : NULL;
                rows[q].scr = scr + q * 2 * S;
            }
            a->k->bwd_group(S, pr->eps, pr->norm_before_gate, nrows, rows, w + c,
                            b ? b + c : NULL, dw ? dw + c : NULL, db ? db + c : NULL);
        }
    }
}

/* dweight[c] = ((part[0][c] + part[1][c]) + part[2][c]) + ...: block order, fixed. */
static void reduce_task(void *arg_, int64_t task, int thread) {
    (void)thread;
    const bwd_arg *a = arg_;
    const m2_rmsnorm_problem *pr = a->pr;
    const int64_t D = pr->D, c0 = task * RED_COLS;
    const int64_t nc = c0 + RED_COLS < D ? RED_COLS : D - c0;
    for (int which = 0; which < 2; which++) {
        float *dst = (float *)(which ? pr->dbias.p : pr->dweight.p);
        if (!dst) continue;
        const float *part = (const float *)(a->ws + (which ? a->L.db : a->L.dw));
        float acc[RED_COLS];
        memcpy(acc, part + c0, (size_t)nc * sizeof(float));
        for (int64_t blk = 1; blk < a->L.nblk; blk++) {
            const float *row = part + blk * D + c0;
            for (int64_t j = 0; j < nc; j++) acc[j] += row[j];
        }
        memcpy(dst + c0, acc, (size_t)nc * sizeof(float));
    }
}

mamba2_status_t m2_cpu_rmsnorm_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_rmsnorm_problem *pr, size_t *bytes) {
    bwd_layout L;
    if (!bwd_plan(ctx, pr, &L))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "the gated RMSNorm backward's workspace exceeds the address space");
    *bytes = L.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_rmsnorm_backward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                        void *ws) {
    bwd_arg a = {pr, kernels_for(ctx), {0}, (unsigned char *)ws};
    if (!bwd_plan(ctx, pr, &a.L)) /* the workspace query refused it before */
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "the RMSNorm backward plan does not fit");
    if (a.L.nblk == 0) { /* M == 0: the sums over no rows */
        if (pr->dweight.p) memset(pr->dweight.p, 0, (size_t)pr->D * sizeof(float));
        if (pr->dbias.p) memset(pr->dbias.p, 0, (size_t)pr->D * sizeof(float));
        return MAMBA2_STATUS_OK;
    }
    m2_cpu_run_tasks(ctx, a.L.nblk, bwd_task, &a);
    if (pr->dweight.p || pr->dbias.p) m2_cpu_run_tasks(ctx, (pr->D + RED_COLS - 1) / RED_COLS, reduce_task, &a);
    return MAMBA2_STATUS_OK;
}
