/*
 * test_block_step.c — the Mamba-2 block decode step (mamba2_block_step, mamba2c_block.h)
 * against the composition of the single ops.
 *
 * Units:
 *   <case>/<variant>  the block step on the CPU backend (default kernel set with 1 and 2
 *                 threads, the scalar set, the caller's workspace or none) and on the reference
 *                 fed f32, two tokens in a row on the same caches, against the single ops
 *                 composed on the reference in float64 (the oracle: rmsnorm, linear,
 *                 conv1d_step, ssd_step, gated rmsnorm, linear, on float64 activations and
 *                 caches): hidden, residual, conv_cache and state_cache within TH_TOL_F32;
 *                 guard bytes and row gaps intact, weights unchanged, the caches' unused slots
 *                 unchanged, the workspace tail intact;
 *   <case>/same_bits  CPU 1 vs 2 threads bitwise identical, and the block step bitwise
 *                 identical to the same ops called one by one on the same context;
 *   api_*         invalid arguments: the status, a message naming the argument, nothing
 *                 written.
 *   <case>/ref_same_bits, cpu_scalar_same_bits  (round_bf16 cases, a bf16 model's roundings
 *                 between the ops) the block step bitwise identical to the ops one by one with
 *                 the same roundings, on the reference and the scalar set too; these cases
 *                 have no f64 oracle (rounding to bf16 at the oracle's values would move some
 *                 elements by one bf16 ulp).
 * Sizes are awkward on purpose (d_model, d_inner, N not multiples of 8/16, G < H), M is 1 and
 * 3, slots are permuted, one case has a padding row, weights are f32, bf16 and Q8_0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { F32 = 0, BF16 = 1, Q8 = 2 };

typedef struct bcase {
    const char *name;
    int64_t M, Dm, H, P, N, G, W, Lc, S;
    int wfmt, in_bias, out_bias, conv_bias, D_mode /* 0 none, 1 [H], 2 [H,P] */, dt_bias;
    int64_t gsize;
    int nbg, add_res;
    int idx; /* 0 identity, 1 permuted slots, 2 permuted + own conv slots + a padding row */
    int64_t hpad; /* extra elements per row of hidden and residual */
    uint64_t seed;
    int rbf; /* round_bf16: 0 off; 1 with round_norm_input; 2 without (a fused add + norm) */
} bcase;

static const bcase cases[] = {
    {"tiny_m1", 1, 20, 3, 5, 7, 1, 4, 3, 1, F32, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 11, 0},
    {"awk_m3_bf16", 3, 37, 6, 6, 11, 2, 4, 3, 5, BF16, 0, 1, 1, 2, 1, 12, 0, 1, 1, 5, 12, 0},
    {"q8_pad", 3, 96, 4, 24, 13, 4, 3, 2, 4, Q8, 0, 1, 1, 1, 1, 0, 0, 1, 2, 3, 13, 0},
    {"long_cache_nbg", 2, 24, 2, 8, 16, 1, 4, 6, 4, F32, 1, 0, 0, 0, 0, 4, 1, 1, 1, 0, 14, 0},
    /* a bf16 model's roundings (round_bf16): bf16 weights, the vdpbf16ps GEMV on a CPU with
     * AVX512-BF16; d_model 64 and d_inner 96 reach its full 64-element steps */
    {"bf16_round_m1", 1, 64, 4, 24, 16, 1, 4, 3, 2, BF16, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 15, 1},
    {"bf16_round_m3_fused_pad", 3, 37, 6, 6, 11, 2, 4, 3, 5, BF16, 0, 1, 1, 2, 1, 12, 0, 1, 2, 5,
     16, 2},
    {"bf16_round_q8", 2, 96, 4, 24, 13, 4, 3, 2, 4, Q8, 0, 1, 1, 1, 1, 0, 1, 1, 1, 3, 17, 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- guarded storage ---------------------------------------------------------------- */

#define GB 64
typedef struct gbuf {
    unsigned char *alloc, *data, *snap;
    size_t bytes;
} gbuf;
static void gb_make(gbuf *b, size_t bytes) {
    b->bytes = bytes;
    b->alloc = th_xmalloc(bytes + 2 * GB);
    memset(b->alloc, TH_PAT_GUARD, bytes + 2 * GB);
    b->data = b->alloc + GB;
    b->snap = th_xmalloc(bytes + 2 * GB);
}
static void gb_snap(gbuf *b) { memcpy(b->snap, b->alloc, b->bytes + 2 * GB); }
static int gb_same(const gbuf *b) { return memcmp(b->snap, b->alloc, b->bytes + 2 * GB) == 0; }
static void gb_free(gbuf *b) {
    free(b->alloc);
    free(b->snap);
}
/* an output: every byte outside its elements as in the snapshot */
static unsigned char *mask_cur;
static size_t mask_es;
static void mark(void *arg, int64_t off, int64_t i) {
    (void)arg;
    (void)i;
    memset(mask_cur + GB + (size_t)off * mask_es, 1, mask_es);
}
static int gb_outside_same(const gbuf *b, const mamba2_tensor_t *t) {
    unsigned char *mask = calloc(b->bytes + 2 * GB, 1);
    mask_cur = mask;
    mask_es = mamba2_dtype_size(t->dtype);
    th_tensor_for_each(t, mark, NULL);
    int ok = 1;
    for (size_t k = 0; k < b->bytes + 2 * GB; k++)
        if (!mask[k] && b->alloc[k] != b->snap[k]) ok = 0;
    free(mask);
    return ok;
}

/* ---- the logical problem (double), and its tensors in f32 or f64 --------------------- */

static float f16_value(uint16_t h) { /* normal, positive halves only (drawn below) */
    const int e = (h >> 10) & 31, m = h & 1023;
    return ldexpf(1.0f + (float)m / 1024.0f, e - 15);
}

typedef struct model {
    bcase c;
    int64_t Di, C, Din;
    double *hidden, *residual, *conv, *state; /* the in/out tensors' initial values */
    double *norm_w, *in_b, *conv_w, *conv_b, *A, *D, *dt_bias, *gnorm_w, *out_b;
    gbuf in_w, out_w;   /* the linear weights in their own format (shared by every run) */
    int64_t sidx[4], cidx[4];
} model;

static double *draw(th_rng *r, int64_t n, double mu, double sd) {
    double *v = th_xmalloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t k = 0; k < n; k++) v[k] = (float)(mu + sd * th_rng_normal(r));
    return v;
}

static void draw_weight(gbuf *b, th_rng *r, int fmt, int64_t O, int64_t I) {
    if (fmt == Q8) {
        gb_make(b, (size_t)(O * I / 32 * 34));
        for (int64_t k = 0; k < O * I / 32; k++) {
            unsigned char *blk = b->data + k * 34;
            const uint16_t h = (uint16_t)(((5 + th_rng_next(r) % 4) << 10) | (th_rng_next(r) & 1023));
            memcpy(blk, &h, 2);
            for (int j = 0; j < 32; j++) blk[2 + j] = (unsigned char)(int8_t)((int)(th_rng_next(r) % 255) - 127);
        }
        (void)f16_value;
    } else {
        gb_make(b, (size_t)(O * I) * (fmt == F32 ? 4 : 2));
        for (int64_t k = 0; k < O * I; k++) {
            float v = (float)(th_rng_normal(r) / sqrt((double)I));
            uint32_t u;
            memcpy(&u, &v, 4);
            if (fmt == BF16) {
                const uint16_t h = (uint16_t)(u >> 16);
                memcpy(b->data + 2 * k, &h, 2);
            } else {
                memcpy(b->data + 4 * k, &v, 4);
            }
        }
    }
    gb_snap(b);
}

static void model_make(model *m, const bcase *c) {
    memset(m, 0, sizeof *m);
    m->c = *c;
    th_rng r;
    th_rng_seed(&r, c->seed);
    m->Di = c->H * c->P;
    m->C = m->Di + 2 * c->G * c->N;
    m->Din = 2 * m->Di + 2 * c->G * c->N + c->H;
    m->hidden = draw(&r, c->M * c->Dm, 0, 1);
    m->residual = draw(&r, c->M * c->Dm, 0, 1);
    m->conv = draw(&r, c->S * m->C * c->Lc, 0, 1);
    m->state = draw(&r, c->S * c->H * c->P * c->N, 0, 0.2);
    m->norm_w = draw(&r, c->Dm, 1, 0.1);
    m->in_b = draw(&r, m->Din, 0, 0.1);
    m->conv_w = draw(&r, m->C * c->W, 0, 0.5);
    m->conv_b = draw(&r, m->C, 0, 0.1);
    m->A = draw(&r, c->H, 0, 1);
    for (int64_t h = 0; h < c->H; h++) m->A[h] = (float)-(0.5 + 3.5 * th_rng_uniform(&r, 0, 1));
    m->D = draw(&r, c->H * c->P, 0, 1);
    m->dt_bias = draw(&r, c->H, -1, 0.5);
    m->gnorm_w = draw(&r, m->Di, 1, 0.1);
    m->out_b = draw(&r, c->Dm, 0, 0.1);
    draw_weight(&m->in_w, &r, c->wfmt, m->Din, c->Dm);
    draw_weight(&m->out_w, &r, c->wfmt, c->Dm, m->Di);
    static const int64_t perm[4] = {3, 0, 4, 1}, pad_s[3] = {2, -1, 0}, pad_c[3] = {1, -1, 3};
    for (int64_t i = 0; i < c->M; i++) {
        m->sidx[i] = c->idx == 0 ? i : c->idx == 1 ? perm[i] : pad_s[i];
        m->cidx[i] = c->idx == 2 ? pad_c[i] : m->sidx[i];
    }
}

static void model_free(model *m) {
    double *v[] = {m->hidden, m->residual, m->conv, m->state, m->norm_w, m->in_b, m->conv_w,
                   m->conv_b, m->A, m->D, m->dt_bias, m->gnorm_w, m->out_b};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) free(v[i]);
    gb_free(&m->in_w);
    gb_free(&m->out_w);
}

/* One instance: every tensor in f32 or f64 storage (linear weights: the model's). */
enum { T_HID, T_RES, T_CONV, T_STATE, T_NORMW, T_INB, T_CONVW, T_CONVB, T_A, T_D, T_DTB,
       T_GNW, T_OUTB, T_SIDX, T_CIDX, NT };
typedef struct inst {
    mamba2_dtype_t dt;
    gbuf b[NT];
    mamba2_tensor_t t[NT], in_w, out_w;
    mamba2_block_step_weights_t w;
    mamba2_block_step_options_t o;
} inst;

static void put(inst *s, int id, const double *v, int rank, const int64_t *shape,
                const int64_t *stride) {
    const size_t es = mamba2_dtype_size(s->dt);
    int64_t span = 1;
    for (int d = 0; d < rank; d++) span += (shape[d] - 1) * stride[d];
    gb_make(&s->b[id], (size_t)span * es);
    s->t[id] = mamba2_tensor_make_strided(s->b[id].data, s->dt, rank, shape, stride);
    th_tensor_scatter(&s->t[id], v);
    gb_snap(&s->b[id]);
}
static void put_c(inst *s, int id, const double *v, int rank, const int64_t *shape) {
    int64_t st[4];
    st[rank - 1] = 1;
    for (int d = rank - 2; d >= 0; d--) st[d] = st[d + 1] * shape[d + 1];
    put(s, id, v, rank, shape, st);
}

static void inst_make(inst *s, const model *m, mamba2_dtype_t dt) {
    memset(s, 0, sizeof *s);
    s->dt = dt;
    const bcase *c = &m->c;
    const int64_t hs[2] = {c->M, c->Dm}, hst[2] = {c->Dm + c->hpad, 1};
    put(s, T_HID, m->hidden, 2, hs, hst);
    put(s, T_RES, m->residual, 2, hs, hst);
    const int64_t cs[3] = {c->S, m->C, c->Lc}, ss[4] = {c->S, c->H, c->P, c->N};
    put_c(s, T_CONV, m->conv, 3, cs);
    put_c(s, T_STATE, m->state, 4, ss);
    const int64_t dm[1] = {c->Dm}, din[1] = {m->Din}, cw[2] = {m->C, c->W}, cc[1] = {m->C},
                  h[1] = {c->H}, hp[2] = {c->H, c->P}, di[1] = {m->Di};
    put_c(s, T_NORMW, m->norm_w, 1, dm);
    put_c(s, T_INB, m->in_b, 1, din);
    put_c(s, T_CONVW, m->conv_w, 2, cw);
    put_c(s, T_CONVB, m->conv_b, 1, cc);
    put_c(s, T_A, m->A, 1, h);
    if (c->D_mode == 2) put_c(s, T_D, m->D, 2, hp);
    else put_c(s, T_D, m->D, 1, h);
    put_c(s, T_DTB, m->dt_bias, 1, h);
    put_c(s, T_GNW, m->gnorm_w, 1, di);
    put_c(s, T_OUTB, m->out_b, 1, dm);
    /* index tensors: int64 state slots, int32 conv slots */
    gb_make(&s->b[T_SIDX], 8 * (size_t)c->M);
    gb_make(&s->b[T_CIDX], 4 * (size_t)c->M);
    for (int64_t i = 0; i < c->M; i++) {
        ((int64_t *)s->b[T_SIDX].data)[i] = m->sidx[i];
        ((int32_t *)s->b[T_CIDX].data)[i] = (int32_t)m->cidx[i];
    }
    const int64_t mm[1] = {c->M};
    s->t[T_SIDX] = mamba2_tensor_make(s->b[T_SIDX].data, MAMBA2_DTYPE_I64, 1, mm);
    s->t[T_CIDX] = mamba2_tensor_make(s->b[T_CIDX].data, MAMBA2_DTYPE_I32, 1, mm);
    gb_snap(&s->b[T_SIDX]);
    gb_snap(&s->b[T_CIDX]);
    static const mamba2_dtype_t wdt[3] = {MAMBA2_DTYPE_F32, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_Q8_0};
    const int64_t ish[2] = {m->Din, c->Dm}, osh[2] = {c->Dm, m->Di};
    s->in_w = mamba2_tensor_make(m->in_w.data, wdt[c->wfmt], 2, ish);
    s->out_w = mamba2_tensor_make(m->out_w.data, wdt[c->wfmt], 2, osh);

    s->w = mamba2_block_step_weights_default();
    s->w.norm_weight = &s->t[T_NORMW];
    s->w.in_proj_weight = &s->in_w;
    s->w.in_proj_bias = c->in_bias ? &s->t[T_INB] : NULL;
    s->w.conv_weight = &s->t[T_CONVW];
    s->w.conv_bias = c->conv_bias ? &s->t[T_CONVB] : NULL;
    s->w.A = &s->t[T_A];
    s->w.D = c->D_mode ? &s->t[T_D] : NULL;
    s->w.dt_bias = c->dt_bias ? &s->t[T_DTB] : NULL;
    s->w.gnorm_weight = &s->t[T_GNW];
    s->w.out_proj_weight = &s->out_w;
    s->w.out_proj_bias = c->out_bias ? &s->t[T_OUTB] : NULL;
    s->o = mamba2_block_step_options_default();
    s->o.add_residual = c->add_res;
    s->o.norm_eps = 1e-5;
    s->o.gnorm_eps = 1e-6;
    s->o.gnorm_group_size = c->gsize;
    s->o.norm_before_gate = c->nbg;
    s->o.dt_limit_lo = 0.001;
    s->o.dt_limit_hi = 8.0;
    if (c->idx) s->o.state_indices = &s->t[T_SIDX];
    if (c->idx == 2) s->o.conv_state_indices = &s->t[T_CIDX];
    s->o.round_bf16 = c->rbf != 0;
    s->o.round_norm_input = c->rbf == 1;
}

static void inst_free(inst *s) {
    for (int i = 0; i < NT; i++)
        if (s->b[i].alloc) gb_free(&s->b[i]);
}

static mamba2_status_t block(mamba2_context_t *ctx, inst *s, int ws_mode, unsigned char **ws,
                             size_t *need) {
    *ws = NULL;
    *need = 0;
    if (ws_mode) {
        mamba2_status_t st = mamba2_block_step_workspace_size(
            ctx, &s->t[T_HID], &s->t[T_RES], &s->t[T_CONV], &s->t[T_STATE], &s->w, &s->o, need);
        if (st) return st;
        *ws = th_ws_alloc(*need);
    }
    return mamba2_block_step(ctx, &s->t[T_HID], &s->t[T_RES], &s->t[T_CONV], &s->t[T_STATE],
                             &s->w, &s->o, *ws, *need);
}

/* round_bf16: float32 values rounded to bf16 in place (to nearest even; NaN kept NaN), rows
 * `stride` apart; f64 instances never take this mode */
static void rnd_bf16(void *p, int64_t rows, int64_t cols, int64_t stride) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) {
            float *v = (float *)p + r * stride + k;
            uint32_t u;
            memcpy(&u, v, 4);
            if ((u & 0x7FFFFFFFu) > 0x7F800000u) u = (u | 0x00400000u) & 0xFFFF0000u;
            else u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
            memcpy(v, &u, 4);
        }
}

/* The same step as the single ops, one call each (the oracle on f64, and the bitwise twin;
 * with round_bf16 each op's output rounded to bf16 between the calls, as Mamba2.step in
 * bf16, and the block norm reading bf16(residual) with round_norm_input). */
static mamba2_status_t compose(mamba2_context_t *ctx, inst *s, const model *m) {
    const bcase *c = &m->c;
    const mamba2_dtype_t dt = s->dt;
    const size_t es = mamba2_dtype_size(dt);
    const int64_t M = c->M, Dm = c->Dm, Di = m->Di, C = m->C, Din = m->Din, H = c->H, P = c->P,
                  N = c->N, G = c->G;
    unsigned char *u = calloc((size_t)(M * Dm), es), *zx = calloc((size_t)(M * Din), es),
                  *xbc = calloc((size_t)(M * C), es), *y = calloc((size_t)(M * Di), es),
                  *g = calloc((size_t)(M * Di), es);
    /* residual = hidden (+ residual) */
    for (int64_t r = 0; r < M; r++)
        for (int64_t k = 0; k < Dm; k++) {
            const int64_t off = r * s->t[T_HID].stride[0] + k;
            if (dt == MAMBA2_DTYPE_F64) {
                double *R = (double *)s->b[T_RES].data, *Hh = (double *)s->b[T_HID].data;
                R[off] = c->add_res ? Hh[off] + R[off] : Hh[off];
            } else {
                float *R = (float *)s->b[T_RES].data, *Hh = (float *)s->b[T_HID].data;
                R[off] = c->add_res ? Hh[off] + R[off] : Hh[off];
            }
        }
#define V2(p, a, b, sa) mamba2_tensor_make_strided(p, dt, 2, (int64_t[]){a, b}, (int64_t[]){sa, 1})
#define V3(p, a, b, cc, sa)                                                                        \
    mamba2_tensor_make_strided(p, dt, 3, (int64_t[]){a, b, cc}, (int64_t[]){sa, cc, 1})
    mamba2_tensor_t tu = V2(u, M, Dm, Dm), tzx = V2(zx, M, Din, Din), tz = V2(zx, M, Di, Din),
                    txin = V2(zx + Di * es, M, C, Din), tdt = V2(zx + (Di + C) * es, M, H, Din),
                    txbc = V2(xbc, M, C, C), tx = V3(xbc, M, H, P, C),
                    tB = V3(xbc + Di * es, M, G, N, C), tC = V3(xbc + (Di + G * N) * es, M, G, N, C),
                    ty = V3(y, M, H, P, Di), ty2 = V2(y, M, Di, Di), tg = V2(g, M, Di, Di);
    mamba2_status_t st;
    const int rb = c->rbf != 0 && dt == MAMBA2_DTYPE_F32;
    unsigned char *rr = calloc((size_t)(M * Dm), es); /* bf16(residual), round_norm_input */
    mamba2_tensor_t tres = s->t[T_RES];
    if (rb && c->rbf == 1) {
        for (int64_t r = 0; r < M; r++)
            memcpy(rr + r * Dm * es, (float *)s->b[T_RES].data + r * s->t[T_RES].stride[0],
                   (size_t)Dm * es);
        rnd_bf16(rr, M, Dm, Dm);
        tres = V2(rr, M, Dm, Dm);
    }
    mamba2_rmsnorm_gated_options_t no = mamba2_rmsnorm_gated_options_default();
    no.eps = s->o.norm_eps;
    st = mamba2_rmsnorm_gated_forward(ctx, &tu, NULL, &tres, NULL, s->w.norm_weight, NULL, &no,
                                      NULL, 0);
    if (!st && rb) rnd_bf16(u, M, Dm, Dm);
    mamba2_linear_options_t lo = mamba2_linear_options_default();
    lo.bias = s->w.in_proj_bias;
    if (!st) st = mamba2_linear_forward(ctx, &tzx, &tu, s->w.in_proj_weight, &lo);
    if (!st && rb) rnd_bf16(zx, M, Din, Din);
    mamba2_conv1d_step_options_t co = mamba2_conv1d_step_options_default();
    co.bias = s->w.conv_bias;
    co.state_indices = s->o.conv_state_indices ? s->o.conv_state_indices : s->o.state_indices;
    co.activation = MAMBA2_ACTIVATION_SILU;
    if (!st) st = mamba2_conv1d_step(ctx, &txbc, &s->t[T_CONV], &txin, s->w.conv_weight, &co);
    if (!st && rb) rnd_bf16(xbc, M, C, C);
    mamba2_ssd_step_options_t so = mamba2_ssd_step_options_default();
    so.D = s->w.D;
    so.dt_bias = s->w.dt_bias;
    so.state_indices = s->o.state_indices;
    so.dt_softplus = s->o.dt_softplus;
    so.dt_limit_lo = s->o.dt_limit_lo;
    so.dt_limit_hi = s->o.dt_limit_hi;
    if (!st) st = mamba2_ssd_step(ctx, &s->t[T_STATE], &ty, NULL, &tx, &tdt, s->w.A, &tB, &tC, &so);
    if (!st && rb) rnd_bf16(y, M, Di, Di);
    mamba2_rmsnorm_gated_options_t go = mamba2_rmsnorm_gated_options_default();
    go.eps = s->o.gnorm_eps;
    go.group_size = s->o.gnorm_group_size;
    go.norm_before_gate = s->o.norm_before_gate;
    if (!st)
        st = mamba2_rmsnorm_gated_forward(ctx, &tg, NULL, &ty2, &tz, s->w.gnorm_weight, NULL, &go,
                                          NULL, 0);
    if (!st && rb) rnd_bf16(g, M, Di, Di);
    lo.bias = s->w.out_proj_bias;
    if (!st) st = mamba2_linear_forward(ctx, &s->t[T_HID], &tg, s->w.out_proj_weight, &lo);
    if (!st && rb) rnd_bf16(s->b[T_HID].data, M, Dm, s->t[T_HID].stride[0]);
    free(rr);
#undef V2
#undef V3
    free(u);
    free(zx);
    free(xbc);
    free(y);
    free(g);
    return st;
}

static const int outs[4] = {T_HID, T_RES, T_CONV, T_STATE};
static const char *const out_name[4] = {"hidden", "residual", "conv_cache", "state_cache"};

static double *gather(const inst *s, int id) {
    double *v = th_xmalloc(sizeof(double) * (size_t)(th_tensor_span(&s->t[id]) + 1));
    th_tensor_gather(&s->t[id], v);
    return v;
}
static int64_t nel(const mamba2_tensor_t *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

/* Do two f32 instances hold the same bits in every in/out tensor? */
static int same_bits(const inst *a, const inst *b) {
    for (int k = 0; k < 4; k++)
        if (memcmp(a->b[outs[k]].alloc, b->b[outs[k]].alloc, a->b[outs[k]].bytes + 2 * GB))
            return 0;
    return 1;
}

#define STEPS 2

/* Runs the block step STEPS times on a fresh f32 instance; checks it against the oracle. */
static void run_variant(const model *m, inst *oracle, const char *vname, mamba2_backend_t be,
                        int threads, const char *isa, int ws_mode, inst *keep) {
    th_begin("%s/%s", m->c.name, vname);
    mamba2_context_t *ctx = th_ctx(be, threads, isa);
    inst s;
    inst_make(&s, m, MAMBA2_DTYPE_F32);
    int ok = 1;
    for (int step = 0; step < STEPS && ok; step++) {
        for (int k = 0; k < 4; k++) gb_snap(&s.b[outs[k]]);
        unsigned char *ws;
        size_t need;
        mamba2_status_t st = block(ctx, &s, ws_mode, &ws, &need);
        if (!th_expect(st == MAMBA2_STATUS_OK, "step %d: %s: %s", step, mamba2_status_string(st),
                       mamba2_last_error())) {
            free(ws);
            ok = 0;
            break;
        }
        size_t first;
        if (ws) th_expect(th_ws_tail_ok(ws, need, &first), "workspace tail written at %zu", first);
        free(ws);
        for (int k = 0; k < 4; k++)
            th_expect(gb_outside_same(&s.b[outs[k]], &s.t[outs[k]]),
                      "step %d: bytes around %s written", step, out_name[k]);
        for (int id = T_NORMW; id < NT; id++)
            th_expect(gb_same(&s.b[id]), "step %d: input %d changed", step, id);
        th_expect(gb_same(&m->in_w) && gb_same(&m->out_w), "a linear weight changed");
    }
    if (ok) { /* no oracle (round_bf16 cases): the bitwise comparisons in run_case instead */
        for (int k = 0; k < 4 && oracle; k++) {
            double *got = gather(&s, outs[k]), *ref = gather(oracle, outs[k]);
            char lab[32];
            snprintf(lab, sizeof lab, "%s", out_name[k]);
            th_metric(lab, th_nerr(got, ref, nel(&s.t[outs[k]])), TH_TOL_F32);
            free(got);
            free(ref);
        }
        /* unused cache slots: bit for bit as they were */
        const bcase *c = &m->c;
        for (int64_t slot = 0; slot < c->S; slot++) {
            int used_s = 0, used_c = 0;
            for (int64_t i = 0; i < c->M; i++) {
                used_s |= m->sidx[i] == slot;
                used_c |= m->cidx[i] == slot;
            }
            const int64_t sn = c->H * c->P * c->N, cn = m->C * c->Lc;
            float *st = (float *)s.b[T_STATE].data + slot * sn, *cv = (float *)s.b[T_CONV].data + slot * cn;
            for (int64_t k = 0; k < sn && !used_s; k++)
                if (st[k] != (float)m->state[slot * sn + k]) {
                    th_fail("state slot %lld (unused) changed", (long long)slot);
                    break;
                }
            for (int64_t k = 0; k < cn && !used_c; k++)
                if (cv[k] != (float)m->conv[slot * cn + k]) {
                    th_fail("conv slot %lld (unused) changed", (long long)slot);
                    break;
                }
        }
    }
    th_note("isa=%s", mamba2_context_get_isa(ctx));
    th_end();
    mamba2_context_destroy(ctx);
    if (keep) *keep = s;
    else inst_free(&s);
}

static void run_case(const bcase *c) {
    model m;
    model_make(&m, c);
    /* the oracle: the single ops on the reference, float64 activations and caches */
    inst o;
    inst_make(&o, &m, MAMBA2_DTYPE_F64);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    for (int step = 0; step < STEPS; step++) {
        mamba2_status_t st = compose(ref, &o, &m);
        if (st) {
            th_begin("%s/oracle", c->name);
            th_fail("the f64 composition failed: %s", mamba2_last_error());
            th_end();
            break;
        }
    }
    mamba2_context_destroy(ref);

    /* round_bf16: the f64 oracle would round to bf16 at other points than float32 does (a
     * value near a bf16 tie goes the other way, one bf16 ulp), so these cases are checked bit
     * for bit against the ops one by one with the same roundings on each backend */
    inst *orc = c->rbf ? NULL : &o;
    inst t1, t2;
    run_variant(&m, orc, "cpu_1thr", MAMBA2_BACKEND_CPU, 1, NULL, 1, &t1);
    run_variant(&m, orc, "cpu_2thr_nows", MAMBA2_BACKEND_CPU, 2, NULL, 0, &t2);
    if (!th_cpu_default_isa_is("scalar"))
        run_variant(&m, orc, "cpu_scalar", MAMBA2_BACKEND_CPU, 2, "scalar", 1, NULL);
    run_variant(&m, orc, "ref_f32", MAMBA2_BACKEND_REF, 1, NULL, 0, NULL);
    if (c->rbf) { /* the reference and the scalar set: block step = ops one by one, bitwise */
        const char *isa2[2] = {NULL, "scalar"};
        for (int v = 0; v < 2; v++) {
            if (v == 1 && th_cpu_default_isa_is("scalar")) continue;
            th_begin("%s/%s_same_bits", c->name, v ? "cpu_scalar" : "ref");
            mamba2_context_t *cx = v ? th_ctx(MAMBA2_BACKEND_CPU, 2, isa2[v])
                                     : th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
            inst a, b;
            inst_make(&a, &m, MAMBA2_DTYPE_F32);
            inst_make(&b, &m, MAMBA2_DTYPE_F32);
            for (int step = 0; step < STEPS; step++) {
                unsigned char *ws;
                size_t need;
                mamba2_status_t st = block(cx, &a, 0, &ws, &need);
                free(ws);
                th_expect(st == MAMBA2_STATUS_OK, "block step: %s", mamba2_last_error());
                st = compose(cx, &b, &m);
                th_expect(st == MAMBA2_STATUS_OK, "single ops: %s", mamba2_last_error());
            }
            th_expect(same_bits(&a, &b), "the block step differs from the ops called one by one");
            mamba2_context_destroy(cx);
            inst_free(&a);
            inst_free(&b);
            th_end();
        }
    }

    th_begin("%s/same_bits", c->name);
    th_expect(same_bits(&t1, &t2), "1 and 2 threads differ");
    /* the ops one by one on a CPU context: the block step's exact bits */
    inst s;
    inst_make(&s, &m, MAMBA2_DTYPE_F32);
    mamba2_context_t *cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    for (int step = 0; step < STEPS; step++) {
        mamba2_status_t st = compose(cpu, &s, &m);
        th_expect(st == MAMBA2_STATUS_OK, "single ops: %s", mamba2_last_error());
    }
    th_expect(same_bits(&t1, &s), "the block step differs from the ops called one by one");
    mamba2_context_destroy(cpu);
    th_end();
    inst_free(&s);
    inst_free(&t1);
    inst_free(&t2);
    inst_free(&o);
    model_free(&m);
}

/* ---- invalid arguments ---------------------------------------------------------------- */

static void expect_error(mamba2_context_t *ctx, inst *s, const char *name, mamba2_status_t want,
                         const char *word) {
    th_begin("api_%s", name);
    for (int k = 0; k < 4; k++) gb_snap(&s->b[outs[k]]);
    mamba2_status_t st = mamba2_block_step(ctx, &s->t[T_HID], &s->t[T_RES], &s->t[T_CONV],
                                           &s->t[T_STATE], &s->w, &s->o, NULL, 0);
    th_expect(st == want, "status %s, expected %s (%s)", mamba2_status_string(st),
              mamba2_status_string(want), mamba2_last_error());
    th_expect(strstr(mamba2_last_error(), word) != NULL, "message \"%s\" does not name %s",
              mamba2_last_error(), word);
    for (int k = 0; k < 4; k++) th_expect(gb_same(&s->b[outs[k]]), "%s written", out_name[k]);
    th_end();
}

static void api_cases(void) {
    model m;
    model_make(&m, &cases[1]);
    inst s;
    inst_make(&s, &m, MAMBA2_DTYPE_F32);
    mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    const inst keep = s;

    th_begin("api_null");
    mamba2_status_t st = mamba2_block_step(ctx, NULL, &s.t[T_RES], &s.t[T_CONV], &s.t[T_STATE],
                                           &s.w, &s.o, NULL, 0);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "hidden"),
              "NULL hidden: %s", mamba2_last_error());
    st = mamba2_block_step(ctx, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV], &s.t[T_STATE], NULL, &s.o,
                           NULL, 0);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "weights"),
              "NULL weights: %s", mamba2_last_error());
    st = mamba2_block_step(NULL, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV], &s.t[T_STATE], &s.w,
                           &s.o, NULL, 0);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT, "NULL ctx: %s", mamba2_status_string(st));
    size_t need = 0;
    st = mamba2_block_step_workspace_size(ctx, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV],
                                          &s.t[T_STATE], &s.w, &s.o, NULL);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT, "NULL workspace_size accepted");
    s.w.A = NULL;
    st = mamba2_block_step_workspace_size(ctx, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV],
                                          &s.t[T_STATE], &s.w, &s.o, &need);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "A is NULL"),
              "NULL A: %s", mamba2_last_error());
    s = keep;
    th_end();

    mamba2_tensor_t bad = s.t[T_RES];
    bad.shape[1] += 1;
    s.t[T_RES] = bad;
    expect_error(ctx, &s, "residual_shape", MAMBA2_STATUS_INVALID_ARGUMENT, "residual");
    s = keep;
    mamba2_tensor_t w = s.in_w;
    w.shape[0] -= 1;
    s.w.in_proj_weight = &w;
    expect_error(ctx, &s, "in_proj_shape", MAMBA2_STATUS_INVALID_ARGUMENT, "in_proj_weight");
    s = keep;
    w = s.out_w;
    w.shape[1] += 1;
    s.w.out_proj_weight = &w;
    expect_error(ctx, &s, "out_proj_shape", MAMBA2_STATUS_INVALID_ARGUMENT, "out_proj_weight");
    s = keep;
    w = s.t[T_CONVW];
    w.shape[0] -= 2;
    s.w.conv_weight = &w;
    expect_error(ctx, &s, "conv_weight_shape", MAMBA2_STATUS_INVALID_ARGUMENT, "conv_weight");
    s = keep;
    w = s.t[T_GNW];
    w.shape[0] -= 1;
    s.w.gnorm_weight = &w;
    expect_error(ctx, &s, "gnorm_weight_shape", MAMBA2_STATUS_INVALID_ARGUMENT, "gated RMSNorm");
    s = keep;
    s.o.gnorm_group_size = 7; /* does not divide d_inner = 36 */
    expect_error(ctx, &s, "gnorm_group", MAMBA2_STATUS_INVALID_ARGUMENT, "gated RMSNorm");
    s = keep;
    w = s.t[T_HID];
    w.dtype = MAMBA2_DTYPE_BF16;
    s.t[T_HID] = w;
    expect_error(ctx, &s, "hidden_bf16", MAMBA2_STATUS_UNSUPPORTED, "f32");
    s = keep;
    s.t[T_RES].data = s.t[T_HID].data; /* residual overlaps hidden */
    expect_error(ctx, &s, "overlap_hidden_residual", MAMBA2_STATUS_INVALID_ARGUMENT, "overlaps");
    s = keep;
    s.t[T_HID].data = s.t[T_NORMW].data; /* hidden over a weight */
    s.t[T_HID].shape[0] = 1;
    s.t[T_RES].shape[0] = 1;
    s.o.state_indices = NULL;
    expect_error(ctx, &s, "overlap_weight", MAMBA2_STATUS_INVALID_ARGUMENT, "overlaps");
    s = keep;
    mamba2_tensor_t sc = s.t[T_STATE];
    sc.data = s.t[T_CONV].data; /* the two caches on one buffer */
    sc.shape[0] = 1;
    s.t[T_STATE] = sc;
    s.o.state_indices = NULL;
    s.t[T_HID].shape[0] = s.t[T_RES].shape[0] = 1;
    expect_error(ctx, &s, "overlap_caches", MAMBA2_STATUS_INVALID_ARGUMENT, "overlaps");
    s = keep;
    s.o.struct_size = 3;
    expect_error(ctx, &s, "struct_size", MAMBA2_STATUS_INVALID_ARGUMENT, "struct_size");
    s = keep;
    s.w.struct_size = 5;
    expect_error(ctx, &s, "weights_struct_size", MAMBA2_STATUS_INVALID_ARGUMENT, "weights");
    s = keep;
    /* padding in the state slots only */
    const int64_t ci[3] = {1, 2, 3};
    gbuf cb;
    gb_make(&cb, sizeof ci);
    memcpy(cb.data, ci, sizeof ci);
    const int64_t m3[1] = {3};
    mamba2_tensor_t cit = mamba2_tensor_make(cb.data, MAMBA2_DTYPE_I64, 1, m3);
    int64_t *sx = (int64_t *)s.b[T_SIDX].data;
    const int64_t old1 = sx[1];
    sx[1] = -1;
    s.o.conv_state_indices = &cit;
    expect_error(ctx, &s, "padding_disagree", MAMBA2_STATUS_INVALID_ARGUMENT, "padding");
    sx[1] = sx[0]; /* a duplicate slot */
    s.o.conv_state_indices = NULL;
    expect_error(ctx, &s, "duplicate_slot", MAMBA2_STATUS_INVALID_ARGUMENT, "state_indices");
    sx[1] = old1;
    gb_free(&cb);
    s = keep;
    th_begin("api_workspace_too_small");
    for (int k = 0; k < 4; k++) gb_snap(&s.b[outs[k]]);
    st = mamba2_block_step_workspace_size(ctx, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV],
                                          &s.t[T_STATE], &s.w, &s.o, &need);
    th_expect(st == MAMBA2_STATUS_OK && need > 0, "query: %s", mamba2_last_error());
    unsigned char *ws = th_ws_alloc(need);
    st = mamba2_block_step(ctx, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV], &s.t[T_STATE], &s.w,
                           &s.o, ws, need - 1);
    th_expect(st == MAMBA2_STATUS_WORKSPACE_TOO_SMALL, "status %s", mamba2_status_string(st));
    for (int k = 0; k < 4; k++) th_expect(gb_same(&s.b[outs[k]]), "%s written", out_name[k]);
    free(ws);
    th_end();

    /* GPU backends, where one is available: UNSUPPORTED with a message */
    mamba2_context_t *gpu = NULL;
    th_begin("api_gpu_unsupported");
    if (mamba2_context_create(&gpu, MAMBA2_BACKEND_OPENCL, 1) == MAMBA2_STATUS_OK) {
        st = mamba2_block_step(gpu, &s.t[T_HID], &s.t[T_RES], &s.t[T_CONV], &s.t[T_STATE], &s.w,
                               &s.o, NULL, 0);
        th_expect(st == MAMBA2_STATUS_UNSUPPORTED && strstr(mamba2_last_error(), "block_step"),
                  "opencl: %s: %s", mamba2_status_string(st), mamba2_last_error());
        mamba2_context_destroy(gpu);
    } else {
        th_note("no OpenCL device: skipped");
    }
    th_end();
    mamba2_context_destroy(ctx);
    inst_free(&s);
    model_free(&m);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    for (int i = 0; i < NCASES; i++) run_case(&cases[i]);
    api_cases();
    return th_finish();
}
