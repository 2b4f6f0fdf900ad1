/*
 * test_linear_q8x.c — Q8_0 weights with integer activations (mamba2_linear_options_t's
 * quantize_x) on every CPU kernel set, against float64.
 *
 * The test rounds x to Q8_0 itself, with the rule include/mamba2c.h states (per 32-element
 * block dx = amax / 127 in float32, qx = x / dx rounded to nearest even), and computes in
 * float64 from the logical weights dw · qw:
 *   yq   = Σ_b dw_b dx_b Σ_j qw_j qx_j       the product the kernels compute (only their
 *                                              float32 roundings differ)
 *   yex  = Σ w x                             the exact product (what the reference backend
 *                                              and the exact Q8_0 path approximate)
 *   bnd  = Σ_b dx_b / 2 · Σ_j |w_j|          the bound of the rounding of x: |x - dx qx| <=
 *                                              dx (1/2 + 2^-17) (x / dx is rounded once to
 *                                              float32 before the integer rounding)
 *   sabs = Σ_b |dw_b dx_b| Σ_j |qw_j qx_j|   the size the float32 roundings scale with
 * Units:
 *   <case>/<set>_<n>thr  1 and 2 threads: ‖out - yq‖ / ‖yq‖ within TH_TOL_F32 (the float32
 *                 accumulation, SPEC §8's tolerance); every element within the derived bound
 *                 |out - yex| <= bnd (1 + 2^-15) + (nb + 8) 2^-24 (sabs + |bias| + |out0|)
 *                 (metric "bound": the largest ratio, <= 1); the guard bytes and gaps intact,
 *                 inputs unchanged; the figure "vs_exact" is ‖out - yex‖ / ‖yex‖ (reported,
 *                 the bound is the check);
 *   <case>/<set>_same_bits  1, 2, 3 threads identical; each row of x alone gives its row,
 *                 with M = 1 each weight row alone its output (a lone row is never a
 *                 whole 64-row task, whatever tile the task split gives those);
 *                 (the note: a hash of the bits, to compare runs with and without sdot);
 *   <case>/avx512_eq_avx2   VNNI (avx512 set, where the CPU has it) equals AVX2 bit for bit;
 *   <case>/ref_exact  the reference ignores quantize_x (the exact product, TH_TOL_F32);
 *   ignored_*     f32 / bf16 weights, and a v1-sized struct, ignore quantize_x (same bits);
 *   api_q8x_*     I not a multiple of 32 is still refused (INVALID_ARGUMENT, out untouched);
 *   nan_*         NaN or inf in x makes its row NaN; a NaN scale its column.
 * Q8_0 weights draw every int8 value (-128 included) and f16 scales 2^-12 .. 2^-6.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct qcase {
    const char *name;
    int64_t M, O, I;
    int strided, bias, accumulate;
    uint64_t seed;
} qcase;

#define G 64

/* ---- one problem ---------------------------------------------------------------------- */

typedef struct qprob {
    qcase c;
    int64_t xs, os, ws, nb;
    float *x;                    /* [M, xs] f32 with G bytes of guard either side (xbuf)   */
    unsigned char *xbuf, *xsnap; /* x's allocation and its snapshot                        */
    unsigned char *w, *wsnap;    /* Q8_0 weight rows of ws/32 blocks (guards either side)  */
    size_t xbytes, wbytes, obytes;
    unsigned char *obuf;         /* out [M, os] f32 with guards                            */
    float *bias, *out0;          /* [O], [M*O]                                             */
    double *yq, *yex, *bnd, *sabs;
} qprob;

static float f16_value(uint16_t h) { /* normal, positive halves only (the test draws them) */
    const int e = (h >> 10) & 31, m = h & 1023;
    return ldexpf(1.0f + (float)m / 1024.0f, e - 15);
}

/* the rule of include/mamba2c.h, written out independently of the library */
static void quantize_block(const float *x, int8_t *q, float *d) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    *d = amax / 127.0f;
    for (int j = 0; j < 32; j++) q[j] = (int8_t)(*d == 0.0f ? 0 : nearbyintf(x[j] / *d));
}

static unsigned char *blk_at(const qprob *p, int64_t o, int64_t b) {
    return p->w + (o * (p->ws / 32) + b) * 34;
}

static void prob_make(qprob *p, const qcase *c) {
    memset(p, 0, sizeof *p);
    p->c = *c;
    const int64_t M = c->M, O = c->O, I = c->I, nb = I / 32;
    p->nb = nb;
    p->xs = I + (c->strided ? 5 : 0);
    p->os = O + (c->strided ? 3 : 0);
    p->ws = I + (c->strided ? 64 : 0);
    th_rng r;
    th_rng_seed(&r, c->seed);
    p->xbytes = sizeof(float) * (size_t)((M - 1) * p->xs + I);
    p->xbuf = th_xmalloc(p->xbytes + 2 * G);
    memset(p->xbuf, TH_PAT_GUARD, p->xbytes + 2 * G);
    p->x = (float *)(void *)(p->xbuf + G);
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < I; i++) p->x[m * p->xs + i] = (float)th_rng_normal(&r);
    p->wbytes = (size_t)((O - 1) * (p->ws / 32) + nb) * 34;
    unsigned char *wa = th_xmalloc(p->wbytes + 2 * G);
    memset(wa, TH_PAT_GUARD, p->wbytes + 2 * G);
    p->w = wa + G;
    for (int64_t o = 0; o < O; o++)
        for (int64_t b = 0; b < nb; b++) {
            unsigned char *blk = blk_at(p, o, b);
            const uint16_t h = (uint16_t)(((3 + th_rng_next(&r) % 7) << 10) | (th_rng_next(&r) & 1023));
            memcpy(blk, &h, 2);
            for (int j = 0; j < 32; j++) blk[2 + j] = (unsigned char)(th_rng_next(&r) & 0xFF);
        }
    p->bias = th_xmalloc(sizeof(float) * (size_t)O);
    p->out0 = th_xmalloc(sizeof(float) * (size_t)(M * O));
    for (int64_t o = 0; o < O; o++) p->bias[o] = (float)th_rng_normal(&r);
    for (int64_t k = 0; k < M * O; k++) p->out0[k] = (float)th_rng_normal(&r);
    p->obytes = sizeof(float) * (size_t)((M - 1) * p->os + O);
    p->obuf = th_xmalloc(p->obytes + 2 * G);
    p->xsnap = th_xmalloc(p->xbytes + 2 * G);
    p->wsnap = th_xmalloc(p->wbytes + 2 * G);
    memcpy(p->xsnap, p->xbuf, p->xbytes + 2 * G);
    memcpy(p->wsnap, p->w - G, p->wbytes + 2 * G);

    /* float64 figures */
    const size_t n = (size_t)(M * O);
    p->yq = th_xmalloc(sizeof(double) * n);
    p->yex = th_xmalloc(sizeof(double) * n);
    p->bnd = th_xmalloc(sizeof(double) * n);
    p->sabs = th_xmalloc(sizeof(double) * n);
    int8_t *qx = th_xmalloc((size_t)(nb * 32 + 1));
    float *dx = th_xmalloc(sizeof(float) * (size_t)(nb + 1));
    for (int64_t m = 0; m < M; m++) {
        const float *xm = p->x + m * p->xs;
        for (int64_t b = 0; b < nb; b++) quantize_block(xm + b * 32, qx + b * 32, dx + b);
        for (int64_t o = 0; o < O; o++) {
            double yq = 0, yex = 0, bnd = 0, sabs = 0;
            for (int64_t b = 0; b < nb; b++) {
                const unsigned char *blk = blk_at(p, o, b);
                uint16_t h;
                memcpy(&h, blk, 2);
                const double dw = f16_value(h);
                double iq = 0, iabs = 0, wabs = 0;
                for (int j = 0; j < 32; j++) {
                    const double qw = (int8_t)blk[2 + j];
                    iq += qw * qx[b * 32 + j];
                    iabs += fabs(qw * qx[b * 32 + j]);
                    wabs += fabs(dw * qw);
                    yex += dw * qw * xm[b * 32 + j];
                }
                yq += dw * dx[b] * iq;
                sabs += dw * dx[b] * iabs;
                bnd += dx[b] / 2.0 * wabs;
            }
            double add = c->bias ? p->bias[o] : 0.0;
            if (c->accumulate) add += p->out0[m * O + o];
            p->yq[m * O + o] = yq + add;
            p->yex[m * O + o] = yex + add;
            p->bnd[m * O + o] = bnd;
            p->sabs[m * O + o] = sabs + fabs(c->bias ? p->bias[o] : 0.0) +
                                 fabs(c->accumulate ? p->out0[m * O + o] : 0.0);
        }
    }
    free(qx);
    free(dx);
}

static void prob_free(qprob *p) {
    free(p->xbuf);
    free(p->xsnap);
    free(p->w - G);
    free(p->wsnap);
    free(p->obuf);
    free(p->bias);
    free(p->out0);
    free(p->yq);
    free(p->yex);
    free(p->bnd);
    free(p->sabs);
}

static mamba2_tensor_t t2(void *d, mamba2_dtype_t dt, int64_t a, int64_t b, int64_t s0) {
    const int64_t sh[2] = {a, b}, st[2] = {s0, 1};
    return mamba2_tensor_make_strided(d, dt, 2, sh, st);
}

static float *out_data(const qprob *p) { return (float *)(void *)(p->obuf + G); }

/* out pre-filled (NaN, or out0 with accumulate; gaps and guards the guard pattern), then
 * one call over rows [m0, m0 + M) with quantize_x = qx */
static mamba2_status_t run_rows(mamba2_context_t *ctx, qprob *p, int64_t m0, int64_t M, int qx) {
    const qcase *c = &p->c;
    if (m0 == 0 && M == c->M) {
        memset(p->obuf, TH_PAT_GUARD, p->obytes + 2 * G);
        for (int64_t m = 0; m < c->M; m++)
            for (int64_t o = 0; o < c->O; o++)
                out_data(p)[m * p->os + o] = c->accumulate ? p->out0[m * c->O + o] : NAN;
    }
    mamba2_tensor_t out = t2(out_data(p) + m0 * p->os, MAMBA2_DTYPE_F32, M, c->O, p->os);
    mamba2_tensor_t x = t2(p->x + m0 * p->xs, MAMBA2_DTYPE_F32, M, c->I, p->xs);
    mamba2_tensor_t w = t2(p->w, MAMBA2_DTYPE_Q8_0, c->O, c->I, p->ws);
    const int64_t shb[1] = {c->O};
    mamba2_tensor_t b = mamba2_tensor_make(p->bias, MAMBA2_DTYPE_F32, 1, shb);
    mamba2_linear_options_t o = mamba2_linear_options_default();
    o.bias = c->bias ? &b : NULL;
    o.accumulate = c->accumulate;
    o.quantize_x = qx;
    return mamba2_linear_forward(ctx, &out, &x, &w, &o);
}
static mamba2_status_t run(mamba2_context_t *ctx, qprob *p) { return run_rows(ctx, p, 0, p->c.M, 1); }

static void gather(const qprob *p, double *dst) {
    for (int64_t m = 0; m < p->c.M; m++)
        for (int64_t o = 0; o < p->c.O; o++) dst[m * p->c.O + o] = out_data(p)[m * p->os + o];
}

static int memory_ok(const qprob *p) {
    for (int k = 0; k < G; k++)
        if (p->obuf[k] != TH_PAT_GUARD || p->obuf[G + p->obytes + k] != TH_PAT_GUARD)
            return th_expect(0, "a guard byte of out was written");
    for (int64_t m = 0; m + 1 < p->c.M; m++)
        for (int64_t o = p->c.O; o < p->os; o++) {
            const unsigned char *e = (const unsigned char *)(out_data(p) + m * p->os + o);
            for (int k = 0; k < 4; k++)
                if (e[k] != TH_PAT_GUARD) return th_expect(0, "a gap of out's rows was written");
        }
    return th_expect(!memcmp(p->xsnap, p->xbuf, p->xbytes + 2 * G) &&
                         !memcmp(p->wsnap, p->w - G, p->wbytes + 2 * G),
                     "an input (or its guards) changed");
}

/* the checks of one result against yq, yex and the bound */
static void check_values(const qprob *p, const double *got) {
    const int64_t n = p->c.M * p->c.O;
    th_metric("out", th_nerr(got, p->yq, n), TH_TOL_F32);
    const double gamma = (double)(p->nb + 8) * ldexp(1.0, -24);
    double worst = 0;
    for (int64_t k = 0; k < n; k++) {
        const double allowed = p->bnd[k] * (1.0 + ldexp(1.0, -15)) + gamma * p->sabs[k] + 1e-30;
        const double ratio = fabs(got[k] - p->yex[k]) / allowed;
        worst = ratio > worst || isnan(ratio) ? ratio : worst;
    }
    th_metric("bound", worst, 1.0);
    th_note("vs_exact %.2e", th_nerr(got, p->yex, n));
}

/* ---- kernel sets ---------------------------------------------------------------------- */

static const char *const isas[4] = {"scalar", "avx2", "avx512", "neon"};
static mamba2_context_t *set_ctx[4][4]; /* [set][threads 1..3]; NULL: not on this CPU */

static void open_sets(void) {
    for (int s = 0; s < 4; s++)
        for (int t = 1; t <= 3; t++) {
            mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, t, NULL);
            if (mamba2_context_force_isa(ctx, isas[s]) != MAMBA2_STATUS_OK) {
                mamba2_context_destroy(ctx);
                ctx = NULL;
            }
            set_ctx[s][t] = ctx;
        }
}

static int rows_equal(const qprob *p, const float *bits) {
    for (int64_t m = 0; m < p->c.M; m++)
        if (memcmp(bits + m * p->c.O, out_data(p) + m * p->os, sizeof(float) * (size_t)p->c.O))
            return 0;
    return 1;
}
static void save_rows(const qprob *p, float *bits) {
    for (int64_t m = 0; m < p->c.M; m++)
        memcpy(bits + m * p->c.O, out_data(p) + m * p->os, sizeof(float) * (size_t)p->c.O);
}

/* out[0, o] of a call on weight row o alone (one row: no whole task) is want, bit for bit */
static int out_row_alone(mamba2_context_t *ctx, const qprob *p, int64_t o, float want) {
    const qcase *c = &p->c;
    float one = c->accumulate ? p->out0[o] : NAN;
    mamba2_tensor_t out = t2(&one, MAMBA2_DTYPE_F32, 1, 1, 1);
    mamba2_tensor_t x = t2(p->x, MAMBA2_DTYPE_F32, 1, c->I, p->xs);
    mamba2_tensor_t w = t2(p->w + o * (p->ws / 32) * 34, MAMBA2_DTYPE_Q8_0, 1, c->I, p->ws);
    const int64_t sh1[1] = {1};
    mamba2_tensor_t b = mamba2_tensor_make(p->bias + o, MAMBA2_DTYPE_F32, 1, sh1);
    mamba2_linear_options_t lo = mamba2_linear_options_default();
    lo.bias = c->bias ? &b : NULL;
    lo.accumulate = c->accumulate;
    lo.quantize_x = 1;
    return mamba2_linear_forward(ctx, &out, &x, &w, &lo) == MAMBA2_STATUS_OK &&
           !memcmp(&one, &want, sizeof one);
}

/* FNV-1a of a result's bits: printed with same_bits, so that two runs on CPUs with and
 * without a dot-product extension (qemu -cpu max / cortex-a72) can be compared line by line */
static unsigned long long bits_hash(const float *v, int64_t n) {
    unsigned long long h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)v;
    for (int64_t k = 0; k < n * 4; k++) h = (h ^ b[k]) * 1099511628211ull;
    return h;
}

static void test_case(mamba2_context_t *ref, const qcase *c) {
    qprob p;
    prob_make(&p, c);
    const int64_t n = c->M * c->O;
    double *got = th_xmalloc(sizeof(double) * (size_t)n);
    float *bits = th_xmalloc(sizeof(float) * (size_t)n), *bits_avx2 = NULL;
    mamba2_status_t st;

    th_begin("%s/ref_exact", c->name);
    st = run(ref, &p);
    if (th_expect(st == MAMBA2_STATUS_OK, "%s", mamba2_last_error())) {
        gather(&p, got);
        th_metric("out", th_nerr(got, p.yex, n), TH_TOL_F32);
    }
    th_end();

    for (int s = 0; s < 4; s++) {
        if (!set_ctx[s][1]) {
            th_begin("%s/%s", c->name, isas[s]);
            th_note("skipped: not on this CPU");
            th_end();
            continue;
        }
        for (int t = 1; t <= 2; t++) {
            th_begin("%s/%s_%dthr", c->name, isas[s], t);
            st = run(set_ctx[s][t], &p);
            if (th_expect(st == MAMBA2_STATUS_OK, "%s", mamba2_last_error())) {
                gather(&p, got);
                check_values(&p, got);
                memory_ok(&p);
            }
            th_end();
        }
        th_begin("%s/%s_same_bits", c->name, isas[s]);
        run(set_ctx[s][1], &p);
        save_rows(&p, bits);
        int same = 1;
        for (int t = 2; t <= 3; t++) {
            run(set_ctx[s][t], &p);
            same &= rows_equal(&p, bits);
        }
        th_expect(same, "thread counts 1, 2, 3 disagree");
        th_note("bits %016llx", bits_hash(bits, n));
        for (int64_t m = 0; m < c->M && c->M > 1; m++) { /* each row alone */
            float *dst = out_data(&p) + m * p.os;
            for (int64_t o = 0; o < c->O; o++) dst[o] = c->accumulate ? p.out0[m * c->O + o] : NAN;
            st = run_rows(set_ctx[s][2], &p, m, 1, 1);
            if (!th_expect(st == MAMBA2_STATUS_OK &&
                               !memcmp(bits + m * c->O, dst, sizeof(float) * (size_t)c->O),
                           "row %lld alone differs from its row in the batch", (long long)m))
                break;
        }
        if (c->M == 1) /* each output row alone (whole 64-row tasks may tile differently) */
            for (int64_t o = 0; o < c->O; o += o < 70 ? 1 : 37)
                if (!th_expect(out_row_alone(set_ctx[s][2], &p, o, bits[o]),
                               "output row %lld alone differs from its row in the layer",
                               (long long)o))
                    break;
        th_end();
        if (s == 1) {
            bits_avx2 = th_xmalloc(sizeof(float) * (size_t)n);
            memcpy(bits_avx2, bits, sizeof(float) * (size_t)n);
        }
        if (s == 2 && bits_avx2) {
            th_begin("%s/avx512_eq_avx2", c->name);
            th_expect(!memcmp(bits, bits_avx2, sizeof(float) * (size_t)n),
                      "the avx512 set's integer path differs from avx2's");
            th_end();
        }
    }
    free(bits_avx2);
    free(bits);
    free(got);
    prob_free(&p);
}

/* ---- quantize_x is ignored where it does not apply ------------------------------------ */

static void test_ignored(mamba2_context_t *ctx) {
    enum { M = 3, O = 9, I = 64 };
    float x[M * I], w[O * I], a[M * O], b[M * O];
    uint16_t wb[O * I];
    th_rng r;
    th_rng_seed(&r, 5);
    for (int k = 0; k < M * I; k++) x[k] = (float)th_rng_normal(&r);
    for (int k = 0; k < O * I; k++) {
        w[k] = (float)th_rng_normal(&r);
        uint32_t u;
        memcpy(&u, &w[k], 4);
        wb[k] = (uint16_t)(u >> 16);
    }
    mamba2_tensor_t xt = t2(x, MAMBA2_DTYPE_F32, M, I, I);
    mamba2_tensor_t ta = t2(a, MAMBA2_DTYPE_F32, M, O, O), tb = t2(b, MAMBA2_DTYPE_F32, M, O, O);
    for (int f = 0; f < 2; f++) {
        th_begin("ignored_%s", f ? "bf16" : "f32");
        mamba2_tensor_t wt = f ? t2(wb, MAMBA2_DTYPE_BF16, O, I, I) : t2(w, MAMBA2_DTYPE_F32, O, I, I);
        mamba2_linear_options_t o = mamba2_linear_options_default();
        mamba2_status_t s1 = mamba2_linear_forward(ctx, &ta, &xt, &wt, &o);
        o.quantize_x = 1;
        mamba2_status_t s2 = mamba2_linear_forward(ctx, &tb, &xt, &wt, &o);
        th_expect(s1 == MAMBA2_STATUS_OK && s2 == MAMBA2_STATUS_OK && !memcmp(a, b, sizeof a),
                  "quantize_x changed an f32/bf16 product (%s)", mamba2_last_error());
        th_end();
    }
    /* a caller of the v1 struct (struct_size 24 covers accumulate, not quantize_x) */
    th_begin("ignored_v1_struct_size");
    const qcase c = {"v1", 2, 7, 64, 0, 0, 0, 9};
    qprob p;
    prob_make(&p, &c);
    run_rows(ctx, &p, 0, 2, 0);
    float ex[2 * 7];
    save_rows(&p, ex);
    mamba2_tensor_t out = t2(out_data(&p), MAMBA2_DTYPE_F32, 2, 7, p.os);
    mamba2_tensor_t xq = t2(p.x, MAMBA2_DTYPE_F32, 2, 64, p.xs);
    mamba2_tensor_t wq = t2(p.w, MAMBA2_DTYPE_Q8_0, 7, 64, p.ws);
    mamba2_linear_options_t o = mamba2_linear_options_default();
    o.struct_size = (uint32_t)offsetof(mamba2_linear_options_t, quantize_x);
    o.quantize_x = 1;
    mamba2_status_t st = mamba2_linear_forward(ctx, &out, &xq, &wq, &o);
    th_expect(st == MAMBA2_STATUS_OK && rows_equal(&p, ex), "a v1-sized struct read quantize_x (%s)",
              mamba2_last_error());
    run_rows(ctx, &p, 0, 2, 1);
    th_expect(!rows_equal(&p, ex), "quantize_x = 1 gave the exact path's bits");
    th_end();
    /* the Q8_0 checks come first: I not a multiple of 32 is refused, out untouched */
    th_begin("api_q8x_I_not_32");
    save_rows(&p, ex);
    mamba2_tensor_t x48 = t2(p.x, MAMBA2_DTYPE_F32, 2, 48, p.xs);
    mamba2_tensor_t w48 = t2(p.w, MAMBA2_DTYPE_Q8_0, 7, 48, p.ws);
    o = mamba2_linear_options_default();
    o.quantize_x = 1;
    st = mamba2_linear_forward(ctx, &out, &x48, &w48, &o);
    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(mamba2_last_error(), "q8_0") &&
                  rows_equal(&p, ex),
              "status %s (%s)", mamba2_status_string(st), mamba2_last_error());
    prob_free(&p);
    th_end();
}

/* ---- NaN and inf ---------------------------------------------------------------------- */

static void test_nan(void) {
    const qcase c = {"nan", 3, 11, 96, 0, 1, 0, 77};
    static const char *const what[3] = {"x_nan", "x_inf", "scale_nan"};
    for (int s = 0; s < 4; s++) {
        if (!set_ctx[s][2]) continue;
        for (int k = 0; k < 3; k++) {
            th_begin("nan_%s_%s", what[k], isas[s]);
            qprob p;
            prob_make(&p, &c);
            if (k < 2) {
                p.x[1 * p.xs + 40] = k == 0 ? NAN : -INFINITY;
                memcpy(p.xsnap, p.xbuf, p.xbytes + 2 * G);
            } else {
                const uint16_t h = 0x7E00; /* f16 quiet NaN: row 2's block 1 */
                memcpy(blk_at(&p, 2, 1), &h, 2);
                memcpy(p.wsnap, p.w - G, p.wbytes + 2 * G);
            }
            const mamba2_status_t st = run(set_ctx[s][2], &p);
            th_expect(st == MAMBA2_STATUS_OK, "%s", mamba2_last_error());
            for (int64_t m = 0; m < c.M; m++)
                for (int64_t o = 0; o < c.O; o++) {
                    const float v = out_data(&p)[m * p.os + o];
                    const int want_nan = k < 2 ? m == 1 : o == 2;
                    if (!th_expect(want_nan ? isnan(v) : isfinite(v), "out[%lld,%lld] = %g",
                                   (long long)m, (long long)o, v))
                        m = c.M, o = c.O;
                }
            memory_ok(&p);
            prob_free(&p);
            th_end();
        }
    }
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    open_sets();
    const int reduced = th_reduced();
    /* name, M, O, I, strided, bias, accumulate, seed. x's quantized copy: M * ceil64(I/32 * 36)
     * bytes, on the stack up to 16 KiB: the *_heap cases take the heap block. */
    const qcase cases[] = {
        {"gemv_I32", 1, 5, 32, 0, 1, 0, 1},
        {"gemv_O37", 1, 37, 64, 0, 0, 0, 2},
        {"gemv_I160_O1", 1, 1, 160, 1, 1, 1, 3},
        {"batch2_odd_blocks", 2, 67, 96, 0, 0, 0, 4},
        {"batch3_strided", 3, 130, 256, 1, 1, 0, 5},
        {"batch4", 4, 33, 224, 0, 0, 1, 6},
        {"batch5_strided_acc", 5, 67, 96, 1, 1, 1, 7},
        {"batch6", 6, 9, 1024, 0, 1, 0, 8},
        {"batch7", 7, 20, 64, 1, 0, 0, 9},
        {"batch8", 8, 64, 1024, 0, 0, 1, 10},
        {"gemv_wide", 1, 300, 2048, 1, 0, 0, 11},
        {"batch5_heap", 5, 70, 4096, 0, 1, 0, 12},
        {"gemv_heap", 1, 9, 16384, 1, 0, 1, 13},
        {"gemv_tasks", 1, 128, 96, 0, 1, 0, 14},
        {"gemv_tasks_acc", 1, 197, 160, 1, 1, 1, 15},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        if (reduced && cases[i].I >= 1024 && cases[i].M > 1) continue;
        test_case(ref, &cases[i]);
    }
    test_ignored(set_ctx[0][1]);
    test_nan();
    mamba2_context_destroy(ref);
    for (int s = 0; s < 4; s++)
        for (int t = 1; t <= 3; t++) mamba2_context_destroy(set_ctx[s][t]);
    return th_finish();
}
