/*
 * test_conv1d_step_contig.c — mamba2_conv1d_step on contiguous caches (the CPU backend's
 * one-token in-place kernel; test_conv1d.c exercises strided caches).
 *
 * For widths 2..8, channel counts around and above the kernel's vector and block sizes, batch
 * sizes that do and do not wake the thread pool, identity / permuted / padding slot indices:
 *   - out and the updated cache on the CPU, with every kernel set the CPU has (avx512, avx2,
 *     scalar; one it lacks is skipped with a note), vs the float64 reference run on float64
 *     copies (SPEC §8, 1e-5), padding rows and unused slots untouched (bitwise);
 *   - 1 vs 2 threads bitwise identical, per kernel set;
 *   - L steps == one mamba2_conv1d_forward over L tokens with the cache as initial state
 *     (outputs and final state, within 1e-5), per kernel set.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef struct step_io {
    int64_t B, S, C, W;
    float *x, *w, *bias, *cache, *out;
    int64_t *ix;
} step_io;

static mamba2_status_t step(mamba2_context_t *ctx, const step_io *s, int silu) {
    const int64_t shx[2] = {s->B, s->C}, shc[3] = {s->S, s->C, s->W - 1}, shw[2] = {s->C, s->W},
                  shb[1] = {s->C}, shi[1] = {s->B};
    mamba2_tensor_t tx = mamba2_tensor_make(s->x, MAMBA2_DTYPE_F32, 2, shx),
                    tc = mamba2_tensor_make(s->cache, MAMBA2_DTYPE_F32, 3, shc),
                    tw = mamba2_tensor_make(s->w, MAMBA2_DTYPE_F32, 2, shw),
                    tb = mamba2_tensor_make(s->bias, MAMBA2_DTYPE_F32, 1, shb),
                    to = mamba2_tensor_make(s->out, MAMBA2_DTYPE_F32, 2, shx),
                    ti = mamba2_tensor_make(s->ix, MAMBA2_DTYPE_I64, 1, shi);
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = &tb;
    o.state_indices = s->ix ? &ti : NULL;
    o.activation = silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    return mamba2_conv1d_step(ctx, &to, &tc, &tx, &tw, &o);
}

/* The same step on the reference backend in float64. */
static mamba2_status_t step_ref64(mamba2_context_t *ref, const step_io *s, int silu, double *cache64,
                                  double *out64) {
    const int64_t shx[2] = {s->B, s->C}, shc[3] = {s->S, s->C, s->W - 1}, shw[2] = {s->C, s->W},
                  shb[1] = {s->C}, shi[1] = {s->B};
    double *x = th_xmalloc((size_t)(s->B * s->C) * 8), *w = th_xmalloc((size_t)(s->C * s->W) * 8),
           *b = th_xmalloc((size_t)s->C * 8);
    for (int64_t i = 0; i < s->B * s->C; i++) x[i] = s->x[i];
    for (int64_t i = 0; i < s->C * s->W; i++) w[i] = s->w[i];
    for (int64_t i = 0; i < s->C; i++) b[i] = s->bias[i];
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F64, 2, shx),
                    tc = mamba2_tensor_make(cache64, MAMBA2_DTYPE_F64, 3, shc),
                    tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F64, 2, shw),
                    tb = mamba2_tensor_make(b, MAMBA2_DTYPE_F64, 1, shb),
                    to = mamba2_tensor_make(out64, MAMBA2_DTYPE_F64, 2, shx),
                    ti = mamba2_tensor_make(s->ix, MAMBA2_DTYPE_I64, 1, shi);
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = &tb;
    o.state_indices = s->ix ? &ti : NULL;
    o.activation = silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    mamba2_status_t st = mamba2_conv1d_step(ref, &to, &tc, &tx, &tw, &o);
    free(x), free(w), free(b);
    return st;
}

static float *rnd(th_rng *r, int64_t n, double scale) {
    float *p = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(scale * th_rng_normal(r));
    return p;
}

/* The CPU contexts under test: per kernel set, 1 thread then 2 threads. */
#define MAXCTX 6
static int g_nctx;
static mamba2_context_t *g_cpus[MAXCTX];
static char g_names[MAXCTX][48];

static void run_case(mamba2_context_t *ref, int64_t B, int64_t C, int64_t W, int ix_mode, int silu) {
    mamba2_context_t **cpus = g_cpus;
    const int nctx = g_nctx;
    th_rng r;
    th_rng_seed(&r, 0xc0ffee00u + (uint64_t)(B * 131 + C * 7 + W + ix_mode * 1000 + silu));
    const int64_t S = ix_mode ? B + 3 : B; /* spare slots must stay untouched */
    const int64_t nc = S * C * (W - 1);
    step_io s = {B, S, C, W, rnd(&r, B * C, 1.0), rnd(&r, C * W, 0.5), rnd(&r, C, 0.1),
                 rnd(&r, nc, 1.0), NULL, NULL};
    if (ix_mode) { /* permuted slots, every third row padding */
        s.ix = th_xmalloc((size_t)B * sizeof(int64_t));
        for (int64_t b = 0; b < B; b++) s.ix[b] = (ix_mode == 2 && b % 3 == 1) ? -1 : (b * 5 + 2) % S;
        /* make the permuted slots distinct: (b*5+2) % S is a bijection when gcd(5,S)=1 */
        if (S % 5 == 0)
            for (int64_t b = 0; b < B; b++) s.ix[b] = (ix_mode == 2 && b % 3 == 1) ? -1 : S - 1 - b;
    }
    /* reference */
    double *c64 = th_xmalloc((size_t)nc * 8), *o64 = th_xmalloc((size_t)(B * C) * 8);
    for (int64_t i = 0; i < nc; i++) c64[i] = s.cache[i];
    for (int64_t i = 0; i < B * C; i++) o64[i] = NAN;
    mamba2_status_t st = step_ref64(ref, &s, silu, c64, o64);
    float *cache0 = th_xmalloc((size_t)nc * sizeof(float));
    memcpy(cache0, s.cache, (size_t)nc * sizeof(float));
    float *outs[MAXCTX], *caches[MAXCTX];
    for (int k = 0; k < nctx; k++) {
        th_begin("B%lld C%lld W%lld %s%s %s", (long long)B, (long long)C, (long long)W,
                 ix_mode == 0 ? "identity" : ix_mode == 1 ? "permuted" : "padding",
                 silu ? " silu" : "", g_names[k]);
        caches[k] = th_xmalloc((size_t)nc * sizeof(float));
        memcpy(caches[k], cache0, (size_t)nc * sizeof(float));
        outs[k] = th_xmalloc((size_t)(B * C + 16) * sizeof(float));
        for (int64_t i = 0; i < B * C + 16; i++) outs[k][i] = 777.0f; /* untouched marker + guard */
        step_io sk = s;
        sk.cache = caches[k];
        sk.out = outs[k];
        mamba2_status_t stk = step(cpus[k], &sk, silu);
        if (th_expect(st == MAMBA2_STATUS_OK && stk == MAMBA2_STATUS_OK, "step: %s", mamba2_last_error())) {
            double num = 0, den = 0;
            int pad_ok = 1;
            for (int64_t b = 0; b < B; b++) {
                const int pad = s.ix && s.ix[b] < 0;
                for (int64_t c = 0; c < C; c++) {
                    const float v = outs[k][b * C + c];
                    if (pad) {
                        if (v != 777.0f) pad_ok = 0;
                        continue;
                    }
                    const double d = v - o64[b * C + c];
                    num += d * d;
                    den += o64[b * C + c] * o64[b * C + c];
                }
            }
            th_metric("out", den > 0 ? sqrt(num / den) : sqrt(num), TH_TOL_F32);
            double cn = 0, cd = 0;
            for (int64_t i = 0; i < nc; i++) {
                const double d = caches[k][i] - c64[i];
                cn += d * d;
                cd += c64[i] * c64[i];
            }
            th_metric("cache", cd > 0 ? sqrt(cn / cd) : sqrt(cn), TH_TOL_F32);
            th_expect(pad_ok, "a padding row's output was written");
            int guard_ok = 1;
            for (int64_t i = B * C; i < B * C + 16; i++) guard_ok &= outs[k][i] == 777.0f;
            th_expect(guard_ok, "guard after out overwritten");
            /* slots no row uses keep their bits */
            int spare_ok = 1;
            for (int64_t sl = 0; sl < S; sl++) {
                int used = 0;
                for (int64_t b = 0; b < B; b++) used |= s.ix ? s.ix[b] == sl : b == sl;
                if (!used)
                    spare_ok &= memcmp(caches[k] + sl * C * (W - 1), cache0 + sl * C * (W - 1),
                                       (size_t)(C * (W - 1)) * sizeof(float)) == 0;
            }
            th_expect(spare_ok, "an unused or padding slot of the cache changed");
        }
        th_end();
    }
    for (int k = 0; k + 1 < nctx; k += 2) {
        th_begin("B%lld C%lld W%lld ix%d 1 vs 2 threads %s", (long long)B, (long long)C,
                 (long long)W, ix_mode, g_names[k]);
        th_expect(memcmp(outs[k], outs[k + 1], (size_t)(B * C) * sizeof(float)) == 0 &&
                      memcmp(caches[k], caches[k + 1], (size_t)nc * sizeof(float)) == 0,
                  "1 and 2 threads differ");
        th_end();
    }
    for (int k = 0; k < nctx; k++) free(outs[k]), free(caches[k]);
    free(s.x), free(s.w), free(s.bias), free(s.cache), free(s.ix), free(c64), free(o64), free(cache0);
}

/* L one-token steps on a contiguous cache == one forward with that cache as initial state. */
static void run_parity(mamba2_context_t *cpu, const char *name, int64_t B, int64_t C, int64_t W,
                       int64_t L) {
    th_rng r;
    th_rng_seed(&r, 0xbeef0000u + (uint64_t)(C * 3 + W + L));
    float *x = rnd(&r, B * L * C, 1.0), *w = rnd(&r, C * W, 0.5), *bias = rnd(&r, C, 0.1),
          *init = rnd(&r, B * C * (W - 1), 1.0);
    float *cache = th_xmalloc((size_t)(B * C * (W - 1)) * sizeof(float));
    memcpy(cache, init, (size_t)(B * C * (W - 1)) * sizeof(float));
    float *outs = th_xmalloc((size_t)(B * L * C) * sizeof(float)), *xt = th_xmalloc((size_t)(B * C) * 4),
          *ot = th_xmalloc((size_t)(B * C) * 4);
    th_begin("parity B%lld C%lld W%lld: %lld steps == forward %s", (long long)B, (long long)C,
             (long long)W, (long long)L, name);
    mamba2_status_t st = MAMBA2_STATUS_OK;
    for (int64_t t = 0; t < L && st == MAMBA2_STATUS_OK; t++) {
        for (int64_t b = 0; b < B; b++) memcpy(xt + b * C, x + (b * L + t) * C, (size_t)C * 4);
        step_io s = {B, B, C, W, xt, w, bias, cache, ot, NULL};
        st = step(cpu, &s, 1);
        for (int64_t b = 0; b < B; b++) memcpy(outs + (b * L + t) * C, ot + b * C, (size_t)C * 4);
    }
    float *fo = th_xmalloc((size_t)(B * L * C) * 4), *ff = th_xmalloc((size_t)(B * C * (W - 1)) * 4);
    const int64_t shx[3] = {B, L, C}, shw[2] = {C, W}, shb[1] = {C}, shs[3] = {B, C, W - 1};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 3, shx),
                    tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 2, shw),
                    tb = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, shb),
                    ti = mamba2_tensor_make(init, MAMBA2_DTYPE_F32, 3, shs),
                    to = mamba2_tensor_make(fo, MAMBA2_DTYPE_F32, 3, shx),
                    tf = mamba2_tensor_make(ff, MAMBA2_DTYPE_F32, 3, shs);
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.bias = &tb;
    o.initial_conv_state = &ti;
    o.activation = MAMBA2_ACTIVATION_SILU;
    mamba2_status_t st2 = mamba2_conv1d_forward(cpu, &to, &tf, &tx, &tw, &o);
    if (th_expect(st == MAMBA2_STATUS_OK && st2 == MAMBA2_STATUS_OK, "%s", mamba2_last_error())) {
        double *a = th_xmalloc((size_t)(B * L * C) * 8), *bb = th_xmalloc((size_t)(B * L * C) * 8);
        for (int64_t i = 0; i < B * L * C; i++) a[i] = outs[i], bb[i] = fo[i];
        th_metric("out", th_nerr(a, bb, B * L * C), TH_TOL_F32);
        for (int64_t i = 0; i < B * C * (W - 1); i++) a[i] = cache[i], bb[i] = ff[i];
        th_metric("final_state", th_nerr(a, bb, B * C * (W - 1)), TH_TOL_F32);
        free(a), free(bb);
    }
    th_end();
    free(x), free(w), free(bias), free(init), free(cache), free(outs), free(xt), free(ot), free(fo), free(ff);
}

int main(void) {
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    static const char *const isas[4] = {"avx512", "avx2", "neon", "scalar"};
    mamba2_context_t *probe = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    for (int i = 0; i < 4; i++) {
        if (mamba2_context_force_isa(probe, isas[i]) != MAMBA2_STATUS_OK) {
            printf("note: kernel set %s skipped: %s\n", isas[i], mamba2_last_error());
            continue;
        }
        for (int nt = 1; nt <= 2; nt++) {
            snprintf(g_names[g_nctx], sizeof g_names[g_nctx], "cpu[%s] %d thread%s", isas[i], nt,
                     nt > 1 ? "s" : "");
            g_cpus[g_nctx++] = th_ctx(MAMBA2_BACKEND_CPU, nt, isas[i]);
        }
    }
    mamba2_context_destroy(probe);
    const int64_t Ws[] = {2, 3, 4, 5, 8}, Cs[] = {1, 5, 13, 40, 64, 1030, 5376}, Bs[] = {1, 3, 33};
    for (size_t wi = 0; wi < sizeof Ws / sizeof Ws[0]; wi++)
        for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++)
            for (size_t bi = 0; bi < sizeof Bs / sizeof Bs[0]; bi++) {
                if (Cs[ci] == 5376 && Bs[bi] == 33 && Ws[wi] != 4) continue; /* keep it quick */
                const int ix_mode = (int)((wi + ci + bi) % 3);
                run_case(ref, Bs[bi], Cs[ci], Ws[wi], ix_mode, (int)((ci + bi) % 2));
            }
    for (int k = 1; k < g_nctx; k += 2) { /* 2 threads */
        run_parity(g_cpus[k], g_names[k], 2, 5376, 4, 9);
        run_parity(g_cpus[k], g_names[k], 3, 13, 5, 12);
        run_parity(g_cpus[k], g_names[k], 1, 64, 2, 7);
        run_parity(g_cpus[k], g_names[k], 2, 40, 3, 5); /* 16 + 16 + a tail of 8 */
    }
    mamba2_context_destroy(ref);
    for (int k = 0; k < g_nctx; k++) mamba2_context_destroy(g_cpus[k]);
    return th_finish();
}
