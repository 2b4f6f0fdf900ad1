/*
 * test_linear.c — the decode linear layer (mamba2_linear_forward): every CPU kernel set
 * against the float64 reference, for f32, bf16 and Q8_0 weights (Q8_0: against its
 * dequantized values d * q, which the reference uses exactly).
 *
 * Units:
 *   <case>/<set>_<n>thr  each case on every kernel set this CPU runs (scalar, avx2+fma,
 *                 avx512, neon; one it lacks is skipped with a note), 1 and 2 threads, and on
 *                 the reference fed f32, vs the f64 reference: out within TH_TOL_F32; the
 *                 guard bytes around every buffer and the gaps of strided views intact,
 *                 inputs unchanged byte for byte, out pre-filled with NaN (or, with
 *                 accumulate, with values the result must add to);
 *   <case>/<set>_same_bits  1, 2 and 3 threads give identical bits; every row of x alone
 *                 (M = 1) gives the bits of its row in the batch; a bf16 weight gives the bits
 *                 of its float32 copy;
 *   nan_*         a NaN in x reaches its row of out only; a NaN weight (a NaN Q8_0 scale) its
 *                 column only;
 *   api_*         invalid arguments: the status, a message naming the argument, out
 *                 untouched.
 * Weights are drawn exactly representable: bf16 bit patterns, Q8_0 blocks of an f16 scale
 * and int8 values, so the logical weights are known in double without any rounding.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { F32 = 0, BF16 = 1, Q8 = 2 };
static const char *const fmt_name[3] = {"f32", "bf16", "q8_0"};
static const mamba2_dtype_t fmt_dtype[3] = {MAMBA2_DTYPE_F32, MAMBA2_DTYPE_BF16,
                                            MAMBA2_DTYPE_Q8_0};

typedef struct lcase {
    const char *name;
    int64_t M, O, I;
    int fmt;
    int strided; /* row strides of x, out and weight wider than their rows */
    int bias, accumulate;
    uint64_t seed;
    int xbf16; /* 1: x rounded to bf16 values (a bf16 model's activation); 2: odd rows only */
} lcase;

/* ---- guarded buffers ---------------------------------------------------------------- */

#define G 64
typedef struct gbuf {
    unsigned char *alloc, *data;
    size_t bytes;
    unsigned char *snap;
} gbuf;

static void gb_make(gbuf *b, size_t bytes) {
    b->bytes = bytes;
    b->alloc = th_xmalloc(bytes + 2 * G);
    memset(b->alloc, TH_PAT_GUARD, bytes + 2 * G);
    b->data = b->alloc + G;
    b->snap = th_xmalloc(bytes + 2 * G);
}
static void gb_snap(gbuf *b) { memcpy(b->snap, b->alloc, b->bytes + 2 * G); }
static int gb_same(const gbuf *b) { return memcmp(b->snap, b->alloc, b->bytes + 2 * G) == 0; }
static void gb_free(gbuf *b) {
    free(b->alloc);
    free(b->snap);
}

/* ---- one problem: logical values in double, stored tensors ---------------------------- */

typedef struct lprob {
    lcase c;
    int64_t xs, os, ws;    /* row strides (elements) of x, out, weight                       */
    double *x, *w, *bias;  /* logical values (row-major [M,I], [O,I], [O])                   */
    double *out0;          /* initial out (accumulate)                                        */
    gbuf bx, bw, bb, bo;   /* storage: x f32, weight in its format, bias f32, out f32         */
    gbuf bw32;             /* bf16 cases: the weight's float32 copy                           */
} lprob;

static float f16_value(uint16_t h) { /* normal, positive halves only (the test draws them) */
    const int e = (h >> 10) & 31, m = h & 1023;
    return ldexpf(1.0f + (float)m / 1024.0f, e - 15);
}

static void prob_make(lprob *p, const lcase *c) {
    memset(p, 0, sizeof *p);
    p->c = *c;
    const int64_t M = c->M, O = c->O, I = c->I;
    p->xs = I + (c->strided ? 5 : 0);
    p->os = O + (c->strided ? 3 : 0);
    p->ws = I + (c->strided ? (c->fmt == Q8 ? 64 : 7) : 0);
    th_rng r;
    th_rng_seed(&r, c->seed);
    p->x = th_xmalloc(sizeof(double) * (size_t)(M * I + 1));
    p->w = th_xmalloc(sizeof(double) * (size_t)(O * I + 1));
    p->bias = th_xmalloc(sizeof(double) * (size_t)(O + 1));
    p->out0 = th_xmalloc(sizeof(double) * (size_t)(M * O + 1));
    for (int64_t k = 0; k < M * I; k++) p->x[k] = (float)th_rng_normal(&r);
    for (int64_t m = 0; m < M; m++) /* bf16 x: the top halves of the floats */
        for (int64_t i = 0; c->xbf16 && (c->xbf16 == 1 || m % 2 == 1) && i < I; i++) {
            float v = (float)p->x[m * I + i];
            uint32_t u;
            memcpy(&u, &v, 4);
            u &= 0xFFFF0000u;
            memcpy(&v, &u, 4);
            p->x[m * I + i] = v;
        }
    for (int64_t k = 0; k < O; k++) p->bias[k] = (float)th_rng_normal(&r);
    for (int64_t k = 0; k < M * O; k++) p->out0[k] = (float)th_rng_normal(&r);

    /* x, bias, out as f32 with their strides; gaps keep the guard pattern */
    gb_make(&p->bx, sizeof(float) * (size_t)(M ? (M - 1) * p->xs + I : 0));
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < I; i++) ((float *)p->bx.data)[m * p->xs + i] = (float)p->x[m * I + i];
    gb_make(&p->bb, sizeof(float) * (size_t)O);
    for (int64_t o = 0; o < O; o++) ((float *)p->bb.data)[o] = (float)p->bias[o];
    gb_make(&p->bo, sizeof(float) * (size_t)(M ? (M - 1) * p->os + O : 0));

    /* the weight, drawn in its own format */
    const double sc = 1.0 / sqrt((double)(I ? I : 1));
    if (c->fmt == Q8) {
        const int64_t nb = I / 32, rows = O ? (O - 1) * (p->ws / 32) + nb : 0;
        gb_make(&p->bw, (size_t)rows * 34);
        for (int64_t o = 0; o < O; o++)
            for (int64_t b = 0; b < nb; b++) {
                unsigned char *blk = p->bw.data + (o * (p->ws / 32) + b) * 34;
                /* scale: exponent 2^-12 .. 2^-6, any mantissa */
                const uint16_t h = (uint16_t)(((3 + th_rng_next(&r) % 7) << 10) | (th_rng_next(&r) & 1023));
                memcpy(blk, &h, 2);
                for (int j = 0; j < 32; j++) {
                    const int q = (int)(th_rng_next(&r) % 255) - 127;
                    blk[2 + j] = (unsigned char)(int8_t)q;
                    p->w[o * I + b * 32 + j] = (double)f16_value(h) * q;
                }
            }
    } else {
        const size_t es = c->fmt == F32 ? 4 : 2;
        gb_make(&p->bw, es * (size_t)(O ? (O - 1) * p->ws + I : 0));
        gb_make(&p->bw32, 4 * (size_t)(O ? (O - 1) * p->ws + I : 0));
        for (int64_t o = 0; o < O; o++)
            for (int64_t i = 0; i < I; i++) {
                float v = (float)(th_rng_normal(&r) * sc);
                uint32_t u;
                memcpy(&u, &v, 4);
                if (c->fmt == BF16) {
                    u &= 0xFFFF0000u; /* a bf16 value: the top half of a float */
                    memcpy(&v, &u, 4);
                    const uint16_t h = (uint16_t)(u >> 16);
                    memcpy(p->bw.data + 2 * (o * p->ws + i), &h, 2);
                } else {
                    ((float *)p->bw.data)[o * p->ws + i] = v;
                }
                ((float *)p->bw32.data)[o * p->ws + i] = v;
                p->w[o * I + i] = v;
            }
    }
    gb_snap(&p->bx);
    gb_snap(&p->bw);
    gb_snap(&p->bb);
}

static void prob_free(lprob *p) {
    free(p->x);
    free(p->w);
    free(p->bias);
    free(p->out0);
    gb_free(&p->bx);
    gb_free(&p->bw);
    gb_free(&p->bb);
    gb_free(&p->bo);
    if (p->bw32.alloc) gb_free(&p->bw32);
}

static mamba2_tensor_t t2(void *d, mamba2_dtype_t dt, int64_t a, int64_t b, int64_t s0) {
    const int64_t sh[2] = {a, b}, st[2] = {s0, 1};
    return mamba2_tensor_make_strided(d, dt, 2, sh, st);
}

/* out pre-filled (NaN, or out0 with accumulate; gaps keep the guard pattern) and snapshot */
static void out_reset(lprob *p) {
    memset(p->bo.alloc, TH_PAT_GUARD, p->bo.bytes + 2 * G);
    for (int64_t m = 0; m < p->c.M; m++)
        for (int64_t o = 0; o < p->c.O; o++)
            ((float *)p->bo.data)[m * p->os + o] =
                p->c.accumulate ? (float)p->out0[m * p->c.O + o] : NAN;
}

/* runs the CPU/ref f32 call; w32: the bf16 case's float32 copy instead */
static mamba2_status_t run_f32(mamba2_context_t *ctx, lprob *p, int w32) {
    out_reset(p);
    const lcase *c = &p->c;
    mamba2_tensor_t out = t2(p->bo.data, MAMBA2_DTYPE_F32, c->M, c->O, p->os);
    mamba2_tensor_t x = t2(p->bx.data, MAMBA2_DTYPE_F32, c->M, c->I, p->xs);
    mamba2_tensor_t w = w32 ? t2(p->bw32.data, MAMBA2_DTYPE_F32, c->O, c->I, p->ws)
                            : t2(p->bw.data, fmt_dtype[c->fmt], c->O, c->I, p->ws);
    const int64_t shb[1] = {c->O};
    mamba2_tensor_t b = mamba2_tensor_make(p->bb.data, MAMBA2_DTYPE_F32, 1, shb);
    mamba2_linear_options_t o = mamba2_linear_options_default();
    o.bias = c->bias ? &b : NULL;
    o.accumulate = c->accumulate;
    return mamba2_linear_forward(ctx, &out, &x, &w, &o);
}

static void gather_out(const lprob *p, double *dst) {
    for (int64_t m = 0; m < p->c.M; m++)
        for (int64_t o = 0; o < p->c.O; o++)
            dst[m * p->c.O + o] = ((const float *)p->bo.data)[m * p->os + o];
}

/* out's guards and gaps intact, inputs unchanged */
static int memory_ok(const lprob *p) {
    const unsigned char *a = p->bo.alloc;
    for (int k = 0; k < G; k++)
        if (a[k] != TH_PAT_GUARD || a[G + p->bo.bytes + k] != TH_PAT_GUARD)
            return th_expect(0, "a guard byte of out was written");
    for (int64_t m = 0; m + 1 < p->c.M; m++)
        for (int64_t o = p->c.O; o < p->os; o++) {
            const unsigned char *e = p->bo.data + 4 * (m * p->os + o);
            for (int k = 0; k < 4; k++)
                if (e[k] != TH_PAT_GUARD) return th_expect(0, "a gap of out's rows was written");
        }
    return th_expect(gb_same(&p->bx) && gb_same(&p->bw) && gb_same(&p->bb),
                     "an input (or its guards) changed");
}

/* the float64 reference on the logical values */
static void reference(mamba2_context_t *ref, const lprob *p, double *y) {
    const lcase *c = &p->c;
    double *x = th_xmalloc(sizeof(double) * (size_t)(c->M * c->I + 1));
    memcpy(x, p->x, sizeof(double) * (size_t)(c->M * c->I));
    for (int64_t k = 0; k < c->M * c->O; k++) y[k] = c->accumulate ? p->out0[k] : NAN;
    mamba2_tensor_t out = t2(y, MAMBA2_DTYPE_F64, c->M, c->O, c->O);
    mamba2_tensor_t xt = t2(x, MAMBA2_DTYPE_F64, c->M, c->I, c->I);
    mamba2_tensor_t w = t2(p->bw.data, fmt_dtype[c->fmt], c->O, c->I, p->ws);
    const int64_t shb[1] = {c->O};
    mamba2_tensor_t b = mamba2_tensor_make(p->bias, MAMBA2_DTYPE_F64, 1, shb);
    mamba2_linear_options_t o = mamba2_linear_options_default();
    o.bias = c->bias ? &b : NULL;
    o.accumulate = c->accumulate;
    mamba2_status_t st = mamba2_linear_forward(ref, &out, &xt, &w, &o);
    if (st != MAMBA2_STATUS_OK) th_fail("f64 reference: %s: %s", mamba2_status_string(st), mamba2_last_error());
    free(x);
}

/* ---- the kernel sets ---------------------------------------------------------------- */

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

/* the avx512 set takes vdpbf16ps for bf16 weights and bf16-exact x (src/cpu/linear_cpu.c) */
static int cpu_bf16_dot(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    const char *e = getenv("MAMBA2C_LINEAR_BF16DOT");
    return __builtin_cpu_supports("avx512bf16") && !(e && strcmp(e, "0") == 0);
#else
    return 0;
#endif
}

static void test_case(mamba2_context_t *ref, const lcase *c) {
    lprob p;
    prob_make(&p, c);
    const int64_t n = c->M * c->O;
    double *y = th_xmalloc(sizeof(double) * (size_t)(n + 1));
    double *got = th_xmalloc(sizeof(double) * (size_t)(n + 1));
    reference(ref, &p, y);

    th_begin("%s/ref_f32", c->name);
    mamba2_status_t st = run_f32(ref, &p, 0);
    if (th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error())) {
        gather_out(&p, got);
        th_metric("out", th_nerr(got, y, n), TH_TOL_F32);
        memory_ok(&p);
    }
    th_end();

    float *bits = th_xmalloc(sizeof(float) * (size_t)(n + 1));
    for (int s = 0; s < 4; s++) {
        if (!set_ctx[s][1]) {
            th_begin("%s/%s", c->name, isas[s]);
            th_note("skipped: not on this CPU");
            th_end();
            continue;
        }
        for (int t = 1; t <= 2; t++) {
            th_begin("%s/%s_%dthr", c->name, isas[s], t);
            st = run_f32(set_ctx[s][t], &p, 0);
            if (th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error())) {
                gather_out(&p, got);
                th_metric("out", th_nerr(got, y, n), TH_TOL_F32);
                memory_ok(&p);
            }
            th_end();
        }
        /* same bits: thread counts, rows alone, the bf16 weight's float32 copy */
        th_begin("%s/%s_same_bits", c->name, isas[s]);
        run_f32(set_ctx[s][1], &p, 0);
        for (int64_t m = 0; m < c->M; m++)
            memcpy(bits + m * c->O, (float *)p.bo.data + m * p.os, sizeof(float) * (size_t)c->O);
        int same = 1;
        for (int t = 2; t <= 3; t++) {
            run_f32(set_ctx[s][t], &p, 0);
            for (int64_t m = 0; m < c->M; m++)
                same &= !memcmp(bits + m * c->O, (float *)p.bo.data + m * p.os, sizeof(float) * (size_t)c->O);
        }
        th_expect(same, "thread counts 1, 2, 3 disagree");
        if (c->fmt == BF16 && c->xbf16 && s == 2 && cpu_bf16_dot()) {
            th_note("bf16 x on AVX512-BF16: vdpbf16ps sums in its own order (no f32-copy check)");
        } else if (c->fmt == BF16) {
            run_f32(set_ctx[s][2], &p, 1);
            same = 1;
            for (int64_t m = 0; m < c->M; m++)
                same &= !memcmp(bits + m * c->O, (float *)p.bo.data + m * p.os, sizeof(float) * (size_t)c->O);
            th_expect(same, "the bf16 weight and its float32 copy disagree");
        }
        if (c->M == 1 && c->fmt != Q8) { /* each output row alone: whole tasks of 64 rows
                                            take the 4x1s tile over rows 16 apart */
            const size_t esz = c->fmt == F32 ? 4 : 2;
            const int64_t picks[] = {0, 1, 15, 16, 47, 63, 64, 100, c->O - 1};
            for (size_t k = 0; k < sizeof picks / sizeof picks[0]; k++) {
                const int64_t o = picks[k];
                if (o >= c->O) continue;
                float one = c->accumulate ? (float)p.out0[o] : NAN;
                const int64_t s1[1] = {1};
                mamba2_tensor_t out = t2(&one, MAMBA2_DTYPE_F32, 1, 1, 1);
                mamba2_tensor_t x = t2(p.bx.data, MAMBA2_DTYPE_F32, 1, c->I, p.xs);
                mamba2_tensor_t w = t2(p.bw.data + (size_t)(o * p.ws) * esz, fmt_dtype[c->fmt], 1,
                                       c->I, p.ws);
                mamba2_tensor_t b = mamba2_tensor_make((float *)p.bb.data + o, MAMBA2_DTYPE_F32, 1, s1);
                mamba2_linear_options_t lo = mamba2_linear_options_default();
                lo.bias = c->bias ? &b : NULL;
                lo.accumulate = c->accumulate;
                st = mamba2_linear_forward(set_ctx[s][2], &out, &x, &w, &lo);
                same = st == MAMBA2_STATUS_OK && !memcmp(&one, bits + o, sizeof one);
                if (!th_expect(same, "output row %lld alone differs from its row in the layer",
                               (long long)o))
                    break;
            }
        }
        if (c->M > 1) { /* each row alone */
            lcase one = *c;
            one.M = 1;
            for (int64_t m = 0; m < c->M; m++) {
                lprob q = p; /* shares the buffers; x and out start at row m */
                q.c = one;
                q.bx.data = p.bx.data + 4 * m * p.xs;
                q.bo.data = p.bo.data + 4 * m * p.os;
                mamba2_tensor_t out = t2(q.bo.data, MAMBA2_DTYPE_F32, 1, c->O, p.os);
                mamba2_tensor_t x = t2(q.bx.data, MAMBA2_DTYPE_F32, 1, c->I, p.xs);
                mamba2_tensor_t w = t2(p.bw.data, fmt_dtype[c->fmt], c->O, c->I, p.ws);
                const int64_t shb[1] = {c->O};
                mamba2_tensor_t b = mamba2_tensor_make(p.bb.data, MAMBA2_DTYPE_F32, 1, shb);
                mamba2_linear_options_t o = mamba2_linear_options_default();
                o.bias = c->bias ? &b : NULL;
                o.accumulate = c->accumulate;
                for (int64_t k = 0; k < c->O; k++)
                    ((float *)q.bo.data)[k] = c->accumulate ? (float)p.out0[m * c->O + k] : NAN;
                st = mamba2_linear_forward(set_ctx[s][2], &out, &x, &w, &o);
                same = st == MAMBA2_STATUS_OK &&
                       !memcmp(bits + m * c->O, q.bo.data, sizeof(float) * (size_t)c->O);
                if (!th_expect(same, "row %lld alone differs from its row in the batch", (long long)m))
                    break;
            }
        }
        th_end();
    }
    free(bits);
    free(y);
    free(got);
    prob_free(&p);
}

/* ---- NaN propagation ------------------------------------------------------------------ */

static void test_nan(int fmt, int xbf16) {
    const lcase c = {"nan", 3, 11, fmt == Q8 ? 64 : 40, fmt, 0, 0, 0, 77, xbf16};
    for (int s = 0; s < 4; s++) {
        if (!set_ctx[s][2]) continue;
        for (int where = 0; where < 2; where++) {
            th_begin("nan_%s_%s%s_%s", where ? "weight" : "x", fmt_name[fmt],
                     xbf16 ? "_xbf16" : "", isas[s]);
            lprob p;
            prob_make(&p, &c);
            if (where == 0) {
                ((float *)p.bx.data)[1 * p.xs + 3] = NAN;
                gb_snap(&p.bx);
            } else if (fmt == Q8) {
                const uint16_t h = 0x7E00; /* f16 quiet NaN as the scale of row 2's block 1 */
                memcpy(p.bw.data + (2 * (p.ws / 32) + 1) * 34, &h, 2);
                gb_snap(&p.bw);
            } else if (fmt == BF16) {
                const uint16_t h = 0x7FC0;
                memcpy(p.bw.data + 2 * (2 * p.ws + 5), &h, 2);
                gb_snap(&p.bw);
            } else {
                ((float *)p.bw.data)[2 * p.ws + 5] = NAN;
                gb_snap(&p.bw);
            }
            mamba2_status_t st = run_f32(set_ctx[s][2], &p, 0);
            th_expect(st == MAMBA2_STATUS_OK, "%s", mamba2_last_error());
            for (int64_t m = 0; m < c.M; m++)
                for (int64_t o = 0; o < c.O; o++) {
                    const float v = ((float *)p.bo.data)[m * p.os + o];
                    const int want_nan = where == 0 ? m == 1 : o == 2;
                    if (!th_expect(want_nan ? isnan(v) : isfinite(v),
                                   "out[%lld,%lld] = %g", (long long)m, (long long)o, v))
                        m = c.M, o = c.O;
                }
            memory_ok(&p);
            prob_free(&p);
            th_end();
        }
    }
}

/* ---- invalid arguments ---------------------------------------------------------------- */

static void expect_refused(mamba2_context_t *ctx, const char *name, mamba2_status_t want,
                           const char *word, const mamba2_tensor_t *out, const mamba2_tensor_t *x,
                           const mamba2_tensor_t *w, const mamba2_linear_options_t *o,
                           const float *outbuf, size_t outn) {
    th_begin("api_%s", name);
    float *snap = th_xmalloc(sizeof(float) * outn);
    memcpy(snap, outbuf, sizeof(float) * outn);
    const mamba2_status_t st = mamba2_linear_forward(ctx, out, x, w, o);
    th_expect(st == want, "status %s (%s); expected %s", mamba2_status_string(st),
              mamba2_last_error(), mamba2_status_string(want));
    if (want != MAMBA2_STATUS_OK)
        th_expect(th_has_word(mamba2_last_error(), word), "message \"%s\" does not name %s",
              mamba2_last_error(), word);
    th_expect(!memcmp(snap, outbuf, sizeof(float) * outn), "out was written");
    free(snap);
    th_end();
}

static void test_api(mamba2_context_t *cpu) {
    enum { M = 2, O = 6, I = 64 };
    static float xb[M * I], ob[M * O + 64], wb[O * I], bb[O + 1];
    static _Alignas(16) unsigned char qb[O * (I / 32) * 34];
    static uint16_t hb[O * I];
    static double db[O * I];
    for (int k = 0; k < M * O + 64; k++) ob[k] = 1.0f;
    mamba2_tensor_t out = t2(ob, MAMBA2_DTYPE_F32, M, O, O), x = t2(xb, MAMBA2_DTYPE_F32, M, I, I);
    mamba2_tensor_t w = t2(wb, MAMBA2_DTYPE_F32, O, I, I), q = t2(qb, MAMBA2_DTYPE_Q8_0, O, I, I);
    mamba2_linear_options_t opt = mamba2_linear_options_default();
    const size_t on = M * O + 64;
#define REFUSE(nm, st, word, o_, x_, w_, op_)                                                  \
    expect_refused(cpu, nm, st, word, o_, x_, w_, op_, ob, on)
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT, UNS = MAMBA2_STATUS_UNSUPPORTED;

    th_begin("api_null_ctx");
    th_expect(mamba2_linear_forward(NULL, &out, &x, &w, NULL) == INV, "NULL ctx accepted");
    th_end();
    REFUSE("null_out", INV, "out", NULL, &x, &w, NULL);
    REFUSE("null_x", INV, "x", &out, NULL, &w, NULL);
    REFUSE("null_weight", INV, "weight", &out, &x, NULL, NULL);
    const int64_t sh3[3] = {1, M, I};
    mamba2_tensor_t x3 = mamba2_tensor_make(xb, MAMBA2_DTYPE_F32, 3, sh3);
    REFUSE("x_rank", INV, "x", &out, &x3, &w, NULL);
    mamba2_tensor_t wI = t2(wb, MAMBA2_DTYPE_F32, O, I - 1, I);
    REFUSE("weight_I", INV, "weight", &out, &x, &wI, NULL);
    mamba2_tensor_t o7 = t2(ob, MAMBA2_DTYPE_F32, M, O + 1, O + 1);
    REFUSE("out_shape", INV, "out", &o7, &x, &w, NULL);
    mamba2_tensor_t x48 = t2(xb, MAMBA2_DTYPE_F32, M, 48, 48), q48 = t2(qb, MAMBA2_DTYPE_Q8_0, O, 48, 48);
    REFUSE("q8_0_I_not_32", INV, "q8_0", &out, &x48, &q48, NULL);
    mamba2_tensor_t q40 = t2(qb, MAMBA2_DTYPE_Q8_0, 2, I, 80);
    mamba2_tensor_t o2 = t2(ob, MAMBA2_DTYPE_F32, M, 2, 2);
    REFUSE("q8_0_row_stride", INV, "weight", &o2, &x, &q40, NULL);
    mamba2_tensor_t wf16 = t2(hb, MAMBA2_DTYPE_F16, O, I, I);
    REFUSE("weight_f16", UNS, "weight", &out, &x, &wf16, NULL);
    mamba2_tensor_t wf64 = t2(db, MAMBA2_DTYPE_F64, O, I, I);
    REFUSE("weight_f64", UNS, "weight", &out, &x, &wf64, NULL);
    mamba2_tensor_t wi32 = t2(wb, MAMBA2_DTYPE_I32, O, I, I);
    REFUSE("weight_i32", INV, "weight", &out, &x, &wi32, NULL);
    mamba2_tensor_t xbf = t2(hb, MAMBA2_DTYPE_BF16, M, I, I);
    REFUSE("x_bf16_cpu", UNS, "x", &out, &xbf, &w, NULL);
    mamba2_tensor_t o64 = t2(db, MAMBA2_DTYPE_F64, M, O, O);
    REFUSE("out_dtype", INV, "out", &o64, &x, &w, NULL);
    const int64_t shb[1] = {O + 1};
    mamba2_tensor_t b7 = mamba2_tensor_make(bb, MAMBA2_DTYPE_F32, 1, shb);
    opt.bias = &b7;
    REFUSE("bias_shape", INV, "bias", &out, &x, &w, &opt);
    opt = mamba2_linear_options_default();
    opt.struct_size = 3;
    REFUSE("opts_struct_size", INV, "opts", &out, &x, &w, &opt);
    const int64_t sho[2] = {M, O}, sto[2] = {O * 2, 2};
    mamba2_tensor_t os2 = mamba2_tensor_make_strided(ob, MAMBA2_DTYPE_F32, 2, sho, sto);
    REFUSE("out_last_stride", INV, "out", &os2, &x, &w, NULL);
    /* overlaps: out over x, out over a q8_0 weight */
    mamba2_tensor_t xo = t2(ob, MAMBA2_DTYPE_F32, M, 4, 4), oo = t2(ob + 2, MAMBA2_DTYPE_F32, M, 3, 3);
    mamba2_tensor_t w34 = t2(wb, MAMBA2_DTYPE_F32, 3, 4, 4);
    REFUSE("out_overlaps_x", INV, "x", &oo, &xo, &w34, NULL);
    mamba2_tensor_t oq = t2(qb, MAMBA2_DTYPE_F32, M, O, O);
    th_begin("api_out_overlaps_q8_0");
    const mamba2_status_t st = mamba2_linear_forward(cpu, &oq, &x, &q, NULL);
    th_expect(st == INV && th_has_word(mamba2_last_error(), "weight"), "%s: %s",
              mamba2_status_string(st), mamba2_last_error());
    th_end();
    /* empty problems: nothing to do, nothing written */
    mamba2_tensor_t x0 = t2(xb, MAMBA2_DTYPE_F32, 0, I, I), out0 = t2(ob, MAMBA2_DTYPE_F32, 0, O, O);
    REFUSE("empty_M_ok", MAMBA2_STATUS_OK, "", &out0, &x0, &w, NULL);
    mamba2_tensor_t wO0 = t2(wb, MAMBA2_DTYPE_F32, 0, I, I), oO0 = t2(ob, MAMBA2_DTYPE_F32, M, 0, 1);
    REFUSE("empty_O_ok", MAMBA2_STATUS_OK, "", &oO0, &x, &wO0, NULL);
#undef REFUSE
}

/* I = 0: out = bias (or 0), accumulated when asked */
static void test_i0(mamba2_context_t *ctx, const char *name) {
    th_begin("empty_I_%s", name);
    float ob[6] = {1, 2, 3, 4, 5, 6}, bb[3] = {10, 20, 30}, xb[1], wb[1];
    mamba2_tensor_t out = t2(ob, MAMBA2_DTYPE_F32, 2, 3, 3), x = t2(xb, MAMBA2_DTYPE_F32, 2, 0, 0);
    mamba2_tensor_t w = t2(wb, MAMBA2_DTYPE_F32, 3, 0, 0);
    const int64_t shb[1] = {3};
    mamba2_tensor_t b = mamba2_tensor_make(bb, MAMBA2_DTYPE_F32, 1, shb);
    mamba2_linear_options_t o = mamba2_linear_options_default();
    o.bias = &b;
    o.accumulate = 1;
    mamba2_status_t st = mamba2_linear_forward(ctx, &out, &x, &w, &o);
    th_expect(st == MAMBA2_STATUS_OK && ob[0] == 11 && ob[5] == 36, "%s: out %g .. %g",
              mamba2_last_error(), ob[0], ob[5]);
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    open_sets();
    const int reduced = th_reduced();
    /* name, M, O, I, fmt, strided, bias, accumulate, seed */
    const lcase cases[] = {
        {"f32_gemv_odd", 1, 37, 67, F32, 0, 0, 0, 1, 0},
        {"f32_I1", 1, 5, 1, F32, 0, 1, 0, 2, 0},
        {"f32_batch2", 2, 130, 256, F32, 0, 0, 0, 3, 0},
        {"f32_batch3_odd", 3, 67, 100, F32, 1, 1, 0, 4, 0},
        {"f32_batch8", 8, 64, 1024, F32, 0, 0, 1, 5, 0},
        {"f32_strided_acc", 5, 9, 33, F32, 1, 1, 1, 6, 0},
        /* M = 1 over whole 64-row tasks (four streams, 4x1s) and a partial one */
        {"f32_gemv_tasks", 1, 150, 96, F32, 1, 1, 0, 7, 0},
        {"f32_gemv_tasks_acc", 1, 128, 37, F32, 0, 0, 1, 8, 0},
        {"bf16_gemv_odd", 1, 37, 67, BF16, 0, 0, 0, 11, 0},
        {"bf16_batch3", 3, 66, 130, BF16, 1, 1, 0, 12, 0},
        {"bf16_batch8", 8, 40, 1024, BF16, 0, 0, 1, 13, 0},
        {"bf16_I7", 2, 3, 7, BF16, 1, 0, 0, 14, 0},
        {"bf16_gemv_tasks", 1, 150, 40, BF16, 1, 1, 0, 9, 0},
        /* bf16 x (AVX512-BF16 where the CPU has it): tails of 3, 32 + 0, 1; batches mixed */
        {"bf16x_gemv_odd", 1, 37, 67, BF16, 0, 0, 0, 15, 1},
        {"bf16x_gemv_1024", 1, 70, 1024, BF16, 0, 1, 0, 16, 1},
        {"bf16x_I96_acc", 1, 9, 96, BF16, 1, 1, 1, 17, 1},
        {"bf16x_I1", 1, 5, 1, BF16, 0, 1, 0, 18, 1},
        {"bf16x_batch3_mixed", 3, 66, 130, BF16, 1, 1, 0, 19, 2},
        {"bf16x_batch5_mixed", 5, 9, 33, BF16, 1, 1, 1, 20, 2},
        {"bf16x_batch8", 8, 40, 1024, BF16, 0, 0, 1, 27, 1},
        {"bf16x_I7", 2, 3, 7, BF16, 1, 0, 0, 28, 1},
        {"bf16x_gemv_tasks", 1, 150, 100, BF16, 1, 1, 1, 10, 1},
        {"q8_0_gemv", 1, 37, 64, Q8, 0, 0, 0, 21, 0},
        {"q8_0_I32", 1, 5, 32, Q8, 0, 1, 0, 22, 0},
        {"q8_0_batch2", 2, 130, 256, Q8, 0, 0, 0, 23, 0},
        {"q8_0_batch5_strided", 5, 67, 96, Q8, 1, 1, 1, 24, 0},
        {"q8_0_batch8", 8, 64, 1024, Q8, 0, 0, 1, 25, 0},
        {"q8_0_wide", 1, 300, 2048, Q8, 1, 0, 0, 26, 0},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        if (reduced && cases[i].I >= 1024 && cases[i].M > 1) continue; /* repeats of batch2 */
        test_case(ref, &cases[i]);
    }
    for (int f = 0; f < 3; f++) test_nan(f, 0);
    test_nan(BF16, 1);
    test_api(set_ctx[0][2]);
    test_i0(set_ctx[0][1], "cpu_scalar");
    test_i0(ref, "ref");
    mamba2_context_destroy(ref);
    for (int s = 0; s < 4; s++)
        for (int t = 1; t <= 3; t++) mamba2_context_destroy(set_ctx[s][t]);
    return th_finish();
}
