/*
 * rmsnorm_inst.c — the guarded instances, data and calls of test_rmsnorm (see rmsnorm_inst.h).
 */
#include "rmsnorm_inst.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ guarded buffers --- */

int buf_new(inst *I, size_t bytes, int is_out) {
    gbuf *g = &I->b[I->nbuf];
    memset(g, 0, sizeof *g);
    size_t total = bytes + 2 * TH_GUARD;
    g->alloc = th_xmalloc(total);
    g->data = g->alloc + TH_GUARD;
    g->bytes = bytes;
    g->is_out = is_out;
    memset(g->alloc, TH_PAT_GUARD, total);
    if (!is_out) memset(g->data, TH_PAT_UNSET, bytes); /* padding of inputs: NaN */
    g->mask = calloc(total, 1);
    g->snap = th_xmalloc(total);
    return I->nbuf++;
}

/* A rank-1 or rank-2 view into buffer `bi` at element offset off, row stride ld. */
mamba2_tensor_t view(inst *I, int bi, int64_t off, int rank, int64_t rows, int64_t cols, int64_t ld) {
    gbuf *g = &I->b[bi];
    size_t es = mamba2_dtype_size(I->dt);
    int64_t shape[2], stride[2];
    if (rank == 1) {
        shape[0] = cols;
        stride[0] = 1;
    } else {
        shape[0] = rows;
        shape[1] = cols;
        stride[0] = ld;
        stride[1] = 1;
    }
    mamba2_tensor_t t = mamba2_tensor_make_strided(g->data + (size_t)off * es, I->dt, rank, shape, stride);
    for (int64_t r = 0; r < (rank == 1 ? 1 : rows); r++)
        memset(g->mask + TH_GUARD + (size_t)(off + r * ld) * es, 1, (size_t)cols * es);
    return t;
}

/* Own buffer for a [rows, cols] tensor with row stride cols + pad (rank 1 when rows < 0). */
mamba2_tensor_t own(inst *I, int is_out, int64_t rows, int64_t cols, int64_t pad) {
    size_t es = mamba2_dtype_size(I->dt);
    int rank = rows < 0 ? 1 : 2;
    int64_t r = rows < 0 ? 1 : rows, ld = cols + pad;
    int64_t span = r > 0 ? (r - 1) * ld + cols : 0;
    int bi = buf_new(I, (size_t)span * es, is_out);
    return view(I, bi, 0, rank, r, cols, ld);
}

/* Outputs back to NaN (payload) / guard pattern (gaps), inputs snapshotted. */
void arm(inst *I) {
    for (int i = 0; i < I->nbuf; i++) {
        gbuf *g = &I->b[i];
        size_t total = g->bytes + 2 * TH_GUARD;
        if (g->is_out)
            for (size_t k = 0; k < total; k++) g->alloc[k] = g->mask[k] ? TH_PAT_UNSET : TH_PAT_GUARD;
        memcpy(g->snap, g->alloc, total);
    }
}

/* Guards and gaps intact, inputs unchanged. */
int mem_ok(const inst *I, char *msg, size_t n) {
    for (int i = 0; i < I->nbuf; i++) {
        const gbuf *g = &I->b[i];
        size_t total = g->bytes + 2 * TH_GUARD;
        for (size_t k = 0; k < total; k++) {
            if (g->is_out && g->mask[k]) continue;
            if (g->alloc[k] != g->snap[k]) {
                snprintf(msg, n, "buffer %d (%s) byte %zd (relative to payload) changed", i,
                         g->is_out ? "output" : "input", (ptrdiff_t)k - TH_GUARD);
                return 0;
            }
        }
    }
    return 1;
}

/* Payload bytes of every output buffer equal? */
int outs_equal(const inst *a, const inst *b, char *msg, size_t n) {
    for (int i = 0; i < a->nbuf; i++) {
        if (!a->b[i].is_out) continue;
        if (a->b[i].bytes != b->b[i].bytes || memcmp(a->b[i].alloc, b->b[i].alloc, a->b[i].bytes + 2 * TH_GUARD)) {
            snprintf(msg, n, "output buffer %d differs", i);
            return 0;
        }
    }
    return 1;
}

void inst_free(inst *I) {
    for (int i = 0; i < I->nbuf; i++) {
        free(I->b[i].alloc);
        free(I->b[i].mask);
        free(I->b[i].snap);
    }
    memset(I, 0, sizeof *I);
}

/* ------------------------------------------------------------------------- cases --- */

const char *const rname[R_N] = {"out", "rstd", "dx", "dz", "dweight", "dbias"};

double f32r(double v) { return (double)(float)v; }

void data_make(rdata *d, const rcase *c) {
    th_rng r;
    th_rng_seed(&r, c->seed ? c->seed : 0x5eed + (uint64_t)(c->M * 131 + c->D * 7 + c->S));
    int64_t n = c->M * c->D;
    d->x = th_xmalloc((size_t)(n + 1) * sizeof(double));
    d->z = th_xmalloc((size_t)(n + 1) * sizeof(double));
    d->dout = th_xmalloc((size_t)(n + 1) * sizeof(double));
    d->w = th_xmalloc((size_t)c->D * sizeof(double));
    d->b = th_xmalloc((size_t)c->D * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        d->x[i] = f32r(th_rng_normal(&r));
        d->z[i] = f32r(th_rng_normal(&r));
        d->dout[i] = f32r(th_rng_normal(&r));
    }
    for (int64_t i = 0; i < c->D; i++) {
        d->w[i] = f32r(1.0 + 0.5 * th_rng_normal(&r)); /* signed, around mamba_ssm's ones init */
        d->b[i] = f32r(0.5 * th_rng_normal(&r));
    }
}

void data_free(rdata *d) {
    free(d->x);
    free(d->z);
    free(d->w);
    free(d->b);
    free(d->dout);
}

int64_t groups_of(const rcase *c) { return c->D / (c->S ? c->S : c->D); }

void inst_make(inst *I, const rcase *c, const rdata *d, mamba2_dtype_t dt, int layout) {
    memset(I, 0, sizeof *I);
    I->dt = dt;
    const int64_t M = c->M, D = c->D, G = groups_of(c), p = c->pad;
    if (layout == 1) {
        /* z | x | 3 spare in one input row (in_proj output), dz | dx | 3 spare in one output row */
        int64_t W = 2 * D + 3;
        size_t es = mamba2_dtype_size(dt);
        int ib = buf_new(I, (size_t)(M > 0 ? (M - 1) * W + 2 * D : 0) * es, 0);
        int ob = buf_new(I, (size_t)(M > 0 ? (M - 1) * W + 2 * D : 0) * es, 1);
        if (c->z) I->z = view(I, ib, 0, 2, M, D, W);
        I->x = view(I, ib, D, 2, M, D, W);
        if (c->z) I->dz = view(I, ob, 0, 2, M, D, W);
        I->dx = view(I, ob, D, 2, M, D, W);
    } else {
        I->x = own(I, 0, M, D, p);
        if (c->z) I->z = own(I, 0, M, D, p + 1);
        I->dx = own(I, 1, M, D, p + 2);
        if (c->z) I->dz = own(I, 1, M, D, p + 3);
    }
    I->w = own(I, 0, -1, D, 0);
    if (c->bias) I->bias = own(I, 0, -1, D, 0);
    I->out = own(I, 1, M, D, p ? p + 4 : 0);
    I->rstd = own(I, 1, M, G, p ? 1 : 0);
    I->dout = own(I, 0, M, D, p ? p + 5 : 0);
    I->dw = own(I, 1, -1, D, 0);
    if (c->bias) I->db = own(I, 1, -1, D, 0);
    th_tensor_scatter(&I->x, d->x);
    if (c->z) th_tensor_scatter(&I->z, d->z);
    th_tensor_scatter(&I->w, d->w);
    if (c->bias) th_tensor_scatter(&I->bias, d->b);
    th_tensor_scatter(&I->dout, d->dout);
    arm(I);
}

mamba2_rmsnorm_gated_options_t opts_of(const rcase *c) {
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.eps = c->eps;
    o.group_size = c->S;
    o.norm_before_gate = c->nbg;
    return o;
}

/* Fails the open unit when the call wrote past its workspace; frees it. */
static void ws_check(unsigned char *ws, size_t need, const char *pass) {
    size_t k;
    if (!th_ws_tail_ok(ws, need, &k)) th_fail("%s wrote past its workspace (%zu bytes) at byte %zu", pass, need, k);
    free(ws);
}

/* ws_mode 0: NULL workspace (library allocates); 1: exactly the queried size, guarded tail */
mamba2_status_t call_fwd(mamba2_context_t *ctx, inst *I, const rcase *c, int want_rstd, int ws_mode) {
    mamba2_rmsnorm_gated_options_t o = opts_of(c);
    const mamba2_tensor_t *rs = want_rstd ? &I->rstd : NULL;
    if (!ws_mode)
        return mamba2_rmsnorm_gated_forward(ctx, &I->out, rs, &I->x, T(I->z), &I->w, T(I->bias), &o, NULL, 0);
    size_t need = 0;
    mamba2_status_t st = mamba2_rmsnorm_gated_forward_workspace_size(ctx, &I->out, rs, &I->x, T(I->z), &I->w,
                                                                      T(I->bias), &o, &need);
    if (st != MAMBA2_STATUS_OK) return st;
    unsigned char *ws = th_ws_alloc(need);
    st = mamba2_rmsnorm_gated_forward(ctx, &I->out, rs, &I->x, T(I->z), &I->w, T(I->bias), &o, need ? ws : NULL, need);
    ws_check(ws, need, "forward");
    return st;
}

mamba2_status_t call_bwd(mamba2_context_t *ctx, inst *I, const rcase *c, int use_rstd, int ws_mode) {
    mamba2_rmsnorm_gated_options_t o = opts_of(c);
    mamba2_rmsnorm_gated_grads_t g = {0, &I->dx, T(I->dz), &I->dw, T(I->db)};
    const mamba2_tensor_t *rs = use_rstd ? &I->rstd : NULL;
    if (!ws_mode)
        return mamba2_rmsnorm_gated_backward(ctx, &g, &I->dout, &I->x, T(I->z), &I->w, T(I->bias), rs, &o, NULL, 0);
    size_t need = 0;
    mamba2_status_t st = mamba2_rmsnorm_gated_backward_workspace_size(ctx, &g, &I->dout, &I->x, T(I->z), &I->w,
                                                                       T(I->bias), rs, &o, &need);
    if (st != MAMBA2_STATUS_OK) return st;
    unsigned char *ws = th_ws_alloc(need);
    st = mamba2_rmsnorm_gated_backward(ctx, &g, &I->dout, &I->x, T(I->z), &I->w, T(I->bias), rs, &o,
                                       need ? ws : NULL, need);
    ws_check(ws, need, "backward");
    return st;
}

void res_read(res *r, const inst *I) {
    const mamba2_tensor_t *t[R_N] = {&I->out, &I->rstd, &I->dx, T(I->dz), &I->dw, T(I->db)};
    for (int i = 0; i < R_N; i++) {
        r->v[i] = NULL;
        r->n[i] = 0;
        if (!t[i]) continue;
        r->n[i] = th_numel(t[i]->rank, t[i]->shape);
        r->v[i] = th_xmalloc((size_t)(r->n[i] + 1) * sizeof(double));
        th_tensor_gather(t[i], r->v[i]);
    }
}

void res_free(res *r) {
    for (int i = 0; i < R_N; i++) free(r->v[i]);
}

/* Full forward (with rstd) + backward (rstd reused or not) on one instance. */
int run_both(mamba2_context_t *ctx, inst *I, const rcase *c, int use_rstd, int ws_mode) {
    arm(I);
    mamba2_status_t st = call_fwd(ctx, I, c, 1, ws_mode);
    if (st == MAMBA2_STATUS_OK) st = call_bwd(ctx, I, c, use_rstd, ws_mode);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("returned %s: %s", mamba2_status_string(st), mamba2_last_error());
        return 0;
    }
    char msg[256];
    return th_expect(mem_ok(I, msg, sizeof msg), "%s", msg);
}
