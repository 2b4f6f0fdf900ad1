/*
 * test_ssd_outx.c — out_x, the output before the z gate (y + D x, mamba_ssm's out_x):
 * the forward writes it, the backward reads it instead of recomputing y.
 *
 * Per case and backend (CPU default kernels; the AVX2 ones forced where the default is AVX-512;
 * CPU scalar; reference fed float32; bf16 on the
 * CPU for one case): against the reference run on float64 copies of the same inputs,
 *   - forward with out_x: out and out_x within SPEC §8 (1e-5; 1e-2 for bf16), out bitwise
 *     equal to a forward without out_x, guard elements after out_x untouched;
 *   - backward given that out_x: every gradient within 1e-5 (2e-2 bf16), and within 1e-5 of
 *     the backward that recomputes y;
 * plus the argument checks (shape, dtype, overlap) and 1-vs-2-thread bitwise determinism.
 *
 * Usage: test_ssd_outx [-q]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mamba2c.h"

static int g_fail, g_pass, g_quiet;
static double g_worst;

#define GUARD 16 /* elements after every buffer, checked after each call */
static const float GUARD_F = 12288.0f; /* exact in bf16 too */

/* ---- inputs ------------------------------------------------------------------------- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) {
    const double u = urand() + 1e-300, v = urand();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

typedef struct cfg {
    const char *name;
    int64_t B, L, H, P, N, Q, G;
    int z, D_per_channel, nseq;
    int64_t seqlen[4];
} cfg;

enum { I_X, I_DT, I_A, I_B, I_C, I_D, I_Z, I_DTB, I_INIT, I_DOUT, I_DFIN, NI };
enum { O_OUT, O_OUTX, O_FIN, O_DX, O_DDT, O_DA, O_DB, O_DC, O_DD, O_DZ, O_DDTB, O_DINIT, NO };
static const char *o_name[NO] = {"out", "out_x", "final_state", "dx", "ddt", "dA", "dBm",
                                 "dCm", "dD", "dz", "ddt_bias", "dinitial_state"};

/* the values of one case, in double; every tensor contiguous */
typedef struct vals {
    int64_t n[NI + NO];
    int rank[NI + NO];
    int64_t shape[NI + NO][4];
    double *v[NI]; /* inputs */
    int64_t cu[5];
    int64_t S;
} vals;

static void set_shape(vals *V, int id, int rank, int64_t a, int64_t b, int64_t c, int64_t d) {
    V->rank[id] = rank;
    int64_t s[4] = {a, b, c, d}, n = 1;
    for (int i = 0; i < rank; i++) {
        V->shape[id][i] = s[i];
        n *= s[i];
    }
    V->n[id] = n;
}

static void make_vals(const cfg *c, vals *V) {
    memset(V, 0, sizeof *V);
    const int64_t B = c->B, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G;
    V->S = c->nseq ? c->nseq : B;
    if (c->nseq) {
        V->cu[0] = 0;
        for (int i = 0; i < c->nseq; i++) V->cu[i + 1] = V->cu[i] + c->seqlen[i];
    }
    set_shape(V, I_X, 4, B, L, H, P);
    set_shape(V, I_DT, 3, B, L, H, 0);
    set_shape(V, I_A, 1, H, 0, 0, 0);
    set_shape(V, I_B, 4, B, L, G, N);
    set_shape(V, I_C, 4, B, L, G, N);
    if (c->D_per_channel)
        set_shape(V, I_D, 2, H, P, 0, 0);
    else
        set_shape(V, I_D, 1, H, 0, 0, 0);
    set_shape(V, I_Z, 4, B, L, H, P);
    set_shape(V, I_DTB, 1, H, 0, 0, 0);
    set_shape(V, I_INIT, 4, V->S, H, P, N);
    set_shape(V, I_DOUT, 4, B, L, H, P);
    set_shape(V, I_DFIN, 4, V->S, H, P, N);
    const int map[NO] = {I_X, I_X, I_INIT, I_X, I_DT, I_A, I_B, I_C, I_D, I_Z, I_DTB, I_INIT};
    for (int o = 0; o < NO; o++) {
        V->rank[NI + o] = V->rank[map[o]];
        memcpy(V->shape[NI + o], V->shape[map[o]], sizeof V->shape[0]);
        V->n[NI + o] = V->n[map[o]];
    }
    /* SPEC §8's distributions: signed, never all zeros */
    for (int i = 0; i < NI; i++) {
        V->v[i] = (double *)malloc((size_t)(V->n[i] > 0 ? V->n[i] : 1) * sizeof(double));
        for (int64_t k = 0; k < V->n[i]; k++) {
            double x;
            switch (i) {
            case I_DT: x = -4.6 + 2.4 * urand(); break; /* softplus(.) ~ (0.01, 0.105) */
            case I_A: x = -(0.1 + 0.4 * urand()); break;
            case I_B: case I_C: case I_INIT: case I_DFIN: x = 0.2 * nrand(); break;
            case I_DTB: x = 0.1 * nrand(); break;
            default: x = nrand();
            }
            V->v[i][k] = x;
        }
    }
}

static void free_vals(vals *V) {
    for (int i = 0; i < NI; i++) free(V->v[i]);
}

/* ---- one run: buffers of a dtype, tensors, calls ------------------------------------ */

typedef struct run {
    mamba2_dtype_t adt, pdt;
    void *buf[NI + NO];
    mamba2_tensor_t t[NI + NO];
    mamba2_tensor_t cu;
    mamba2_ssd_options_t opts;
    mamba2_ssd_grads_t grads;
} run;

static size_t esz(mamba2_dtype_t d) { return mamba2_dtype_size(d); }

static int is_act(int id) {
    return id == I_X || id == I_DT || id == I_B || id == I_C || id == I_Z || id == I_DOUT ||
           id == NI + O_OUT || id == NI + O_OUTX || id == NI + O_DX || id == NI + O_DDT ||
           id == NI + O_DB || id == NI + O_DC || id == NI + O_DZ;
}

static void put(void *p, mamba2_dtype_t d, int64_t i, double v) {
    if (d == MAMBA2_DTYPE_F64) {
        ((double *)p)[i] = v;
    } else if (d == MAMBA2_DTYPE_F32) {
        ((float *)p)[i] = (float)v;
    } else { /* bf16: round to nearest even from the float */
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        u += 0x7FFFu + ((u >> 16) & 1u);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    }
}
static double get(const void *p, mamba2_dtype_t d, int64_t i) {
    if (d == MAMBA2_DTYPE_F64) return ((const double *)p)[i];
    if (d == MAMBA2_DTYPE_F32) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void make_run(const cfg *c, const vals *V, mamba2_dtype_t adt, run *R) {
    memset(R, 0, sizeof *R);
    R->adt = adt;
    R->pdt = adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    for (int id = 0; id < NI + NO; id++) {
        const mamba2_dtype_t d = is_act(id) ? adt : R->pdt;
        const int64_t n = V->n[id];
        R->buf[id] = malloc((size_t)(n + GUARD) * esz(d) + 64);
        for (int64_t k = 0; k < n + GUARD; k++)
            put(R->buf[id], d, k, id < NI && k < n ? V->v[id][k] : (double)GUARD_F);
        R->t[id] = mamba2_tensor_make(R->buf[id], d, V->rank[id], V->shape[id]);
    }
    R->opts = mamba2_ssd_options_default();
    R->opts.chunk_size = c->Q;
    R->opts.D = &R->t[I_D];
    if (c->z) R->opts.z = &R->t[I_Z];
    R->opts.dt_bias = &R->t[I_DTB];
    R->opts.initial_state = &R->t[I_INIT];
    R->opts.dt_softplus = 1;
    if (c->nseq) {
        const int64_t ncu = c->nseq + 1;
        R->cu = mamba2_tensor_make((void *)V->cu, MAMBA2_DTYPE_I64, 1, &ncu);
        R->opts.cu_seqlens = &R->cu;
    }
    mamba2_tensor_t *T = R->t;
    R->grads = (mamba2_ssd_grads_t){0, &T[NI + O_DX], &T[NI + O_DDT], &T[NI + O_DA], &T[NI + O_DB],
                                    &T[NI + O_DC], &T[NI + O_DD], c->z ? &T[NI + O_DZ] : NULL,
                                    &T[NI + O_DDTB], &T[NI + O_DINIT]};
}

static void free_run(run *R) {
    for (int id = 0; id < NI + NO; id++) free(R->buf[id]);
}

static mamba2_status_t fwd(mamba2_context_t *ctx, run *R, int with_outx) {
    const mamba2_tensor_t *ox = with_outx ? &R->t[NI + O_OUTX] : NULL;
    return mamba2_ssd_forward(ctx, &R->t[NI + O_OUT], ox, &R->t[NI + O_FIN], &R->t[I_X],
                              &R->t[I_DT], &R->t[I_A], &R->t[I_B], &R->t[I_C], &R->opts, NULL, 0);
}
static mamba2_status_t bwd(mamba2_context_t *ctx, run *R, int with_outx) {
    const mamba2_tensor_t *ox = with_outx ? &R->t[NI + O_OUTX] : NULL;
    return mamba2_ssd_backward(ctx, &R->grads, &R->t[I_DOUT], &R->t[I_DFIN], &R->t[I_X],
                               &R->t[I_DT], &R->t[I_A], &R->t[I_B], &R->t[I_C], ox, &R->opts, NULL,
                               0);
}

/* ---- checks ------------------------------------------------------------------------- */

static void result(int ok, const char *what) {
    if (ok) {
        g_pass++;
    } else {
        g_fail++;
        printf("FAIL %s\n", what);
    }
}

/* normalised error of output o of run R against the reference run F (float64) */
static double nerr(const vals *V, const run *R, const run *F, int o) {
    const int id = NI + o;
    const mamba2_dtype_t d = is_act(id) ? R->adt : R->pdt;
    double num = 0, den = 0;
    for (int64_t k = 0; k < V->n[id]; k++) {
        const double a = get(R->buf[id], d, k), b = get(F->buf[id], MAMBA2_DTYPE_F64, k);
        if (!isfinite(a)) return INFINITY;
        num += (a - b) * (a - b);
        den += b * b;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int guards_ok(const vals *V, const run *R, int o) {
    const int id = NI + o;
    const mamba2_dtype_t d = is_act(id) ? R->adt : R->pdt;
    for (int64_t k = V->n[id]; k < V->n[id] + GUARD; k++)
        if (get(R->buf[id], d, k) != (double)GUARD_F) return 0;
    return 1;
}

static void check_err(const char *label, const cfg *c, double e, double tol, const char *what) {
    char line[256];
    snprintf(line, sizeof line, "%s %s: %s normalised error %.2e (tolerance %.0e)", c->name, label,
             what, e, tol);
    if (e <= tol && e > g_worst) g_worst = e;
    result(e <= tol, line);
}

static void run_case(const cfg *c) {
    vals V;
    make_vals(c, &V);
    /* the oracle: the reference backend on float64 copies */
    mamba2_context_t *ref = NULL;
    mamba2_context_create(&ref, MAMBA2_BACKEND_REF, 1);
    run F; /* on the exact inputs (each variant below has its own, on its rounded inputs) */
    make_run(c, &V, MAMBA2_DTYPE_F64, &F);
    result(fwd(ref, &F, 1) == MAMBA2_STATUS_OK && bwd(ref, &F, 0) == MAMBA2_STATUS_OK,
           "reference float64 run");
    /* without z, out_x is out */
    if (!c->z) {
        int same = 1;
        for (int64_t k = 0; k < V.n[NI + O_OUT]; k++)
            same &= ((double *)F.buf[NI + O_OUT])[k] == ((double *)F.buf[NI + O_OUTX])[k];
        result(same, "reference: out_x == out without z");
    }

    struct {
        const char *label;
        mamba2_backend_t be;
        const char *isa;
        mamba2_dtype_t dt;
        double tol_out, tol_grad;
    } variants[] = {
        {"cpu", MAMBA2_BACKEND_CPU, NULL, MAMBA2_DTYPE_F32, 1e-5, 1e-5},
        {"cpu-avx2", MAMBA2_BACKEND_CPU, "avx2", MAMBA2_DTYPE_F32, 1e-5, 1e-5}, /* if wider default */
        {"cpu-scalar", MAMBA2_BACKEND_CPU, "scalar", MAMBA2_DTYPE_F32, 1e-5, 1e-5},
        {"ref-f32", MAMBA2_BACKEND_REF, NULL, MAMBA2_DTYPE_F32, 1e-5, 1e-5},
        {"cpu-bf16", MAMBA2_BACKEND_CPU, NULL, MAMBA2_DTYPE_BF16, 1e-2, 2e-2},
    };
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        mamba2_context_t *ctx = NULL;
        mamba2_context_create(&ctx, variants[vi].be, 2);
        /* the AVX2 set forced only where the default kernel set is wider (AVX-512) */
        if (variants[vi].isa && !strcmp(variants[vi].isa, "avx2") &&
            strcmp(mamba2_context_get_isa(ctx), "avx512") != 0) {
            mamba2_context_destroy(ctx);
            continue;
        }
        /* a scalar default (MAMBA2C_ISA=scalar): the "cpu" variant already ran the scalar set */
        if (variants[vi].isa && !strcmp(variants[vi].isa, "scalar") &&
            !strcmp(mamba2_context_get_isa(ctx), "scalar")) {
            mamba2_context_destroy(ctx);
            continue;
        }
        if (variants[vi].isa) mamba2_context_force_isa(ctx, variants[vi].isa);
        const char *lb = variants[vi].label;
        const double to = variants[vi].tol_out, tg = variants[vi].tol_grad;
        char what[128];
        run R0, R1;
        make_run(c, &V, variants[vi].dt, &R0);
        make_run(c, &V, variants[vi].dt, &R1);
        run Fh; /* float64 oracle on the inputs as this run's dtype holds them */
        make_run(c, &V, MAMBA2_DTYPE_F64, &Fh);
        for (int i = 0; i < NI; i++)
            for (int64_t k = 0; k < V.n[i]; k++)
                ((double *)Fh.buf[i])[k] = get(R0.buf[i], is_act(i) ? R0.adt : R0.pdt, k);
        fwd(ref, &Fh, 1);
        bwd(ref, &Fh, 0);

        /* forward: without and with out_x */
        snprintf(what, sizeof what, "%s %s forward", c->name, lb);
        result(fwd(ctx, &R0, 0) == MAMBA2_STATUS_OK && fwd(ctx, &R1, 1) == MAMBA2_STATUS_OK, what);
        check_err(lb, c, nerr(&V, &R1, &Fh, O_OUT), to, "out");
        check_err(lb, c, nerr(&V, &R1, &Fh, O_OUTX), to, "out_x");
        snprintf(what, sizeof what, "%s %s: out with out_x == out without (bitwise)", c->name, lb);
        result(memcmp(R0.buf[NI + O_OUT], R1.buf[NI + O_OUT],
                      (size_t)V.n[NI + O_OUT] * esz(R0.adt)) == 0, what);
        snprintf(what, sizeof what, "%s %s: guards after out_x", c->name, lb);
        result(guards_ok(&V, &R1, O_OUTX), what);

        /* backward: recomputing y (R0) and reading out_x (R1) */
        snprintf(what, sizeof what, "%s %s backward", c->name, lb);
        result(bwd(ctx, &R0, 0) == MAMBA2_STATUS_OK && bwd(ctx, &R1, 1) == MAMBA2_STATUS_OK, what);
        for (int o = O_DX; o < NO; o++) {
            if (o == O_DZ && !c->z) continue;
            snprintf(what, sizeof what, "%s (given out_x)", o_name[o]);
            check_err(lb, c, nerr(&V, &R1, &Fh, o), tg, what);
            snprintf(what, sizeof what, "%s (recomputed y)", o_name[o]);
            check_err(lb, c, nerr(&V, &R0, &Fh, o), tg, what);
            snprintf(what, sizeof what, "%s %s: guards after %s", c->name, lb, o_name[o]);
            result(guards_ok(&V, &R1, o), what);
        }
        if (!g_quiet) printf("ok   %-24s %s\n", c->name, lb);

        /* determinism: 1 thread gives the same bits as 2 */
        if (variants[vi].be == MAMBA2_BACKEND_CPU) {
            run R2;
            make_run(c, &V, variants[vi].dt, &R2);
            mamba2_context_set_num_threads(ctx, 1);
            fwd(ctx, &R2, 1);
            bwd(ctx, &R2, 1);
            int same = 1;
            for (int o = 0; o < NO; o++) {
                const int id = NI + o;
                same &= memcmp(R1.buf[id], R2.buf[id],
                               (size_t)V.n[id] * esz(is_act(id) ? R1.adt : R1.pdt)) == 0;
            }
            snprintf(what, sizeof what, "%s %s: 1 and 2 threads bitwise equal", c->name, lb);
            result(same, what);
            free_run(&R2);
        }
        free_run(&R0);
        free_run(&R1);
        free_run(&Fh);
        mamba2_context_destroy(ctx);
    }
    free_run(&F);
    mamba2_context_destroy(ref);
    free_vals(&V);
}

/* invalid out_x arguments: status and a message naming out_x, outputs untouched */
static void run_errors(void) {
    const cfg c = {"errors", 2, 9, 2, 4, 4, 4, 1, 1, 0, 0, {0}};
    vals V;
    make_vals(&c, &V);
    mamba2_context_t *ctx = NULL;
    mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, 2);
    run R;
    make_run(&c, &V, MAMBA2_DTYPE_F32, &R);
    struct {
        const char *what;
        int kind;
    } cases[] = {{"out_x with the wrong shape", 0},
                 {"out_x F64 with F32 activations", 1},
                 {"out_x aliasing out", 2},
                 {"out_x aliasing x (backward: an input, but a forward output)", 3}};
    for (int i = 0; i < 4; i++) {
        mamba2_tensor_t bad = R.t[NI + O_OUTX];
        int64_t shp[4] = {2, 9, 2, 5};
        if (cases[i].kind == 0) bad = mamba2_tensor_make(bad.data, bad.dtype, 4, shp);
        if (cases[i].kind == 1) bad.dtype = MAMBA2_DTYPE_F64;
        if (cases[i].kind == 2) bad.data = R.buf[NI + O_OUT];
        if (cases[i].kind == 3) bad.data = R.buf[I_X];
        for (int64_t k = 0; k < V.n[NI + O_OUT]; k++) ((float *)R.buf[NI + O_OUT])[k] = GUARD_F;
        const mamba2_status_t st =
            mamba2_ssd_forward(ctx, &R.t[NI + O_OUT], &bad, NULL, &R.t[I_X], &R.t[I_DT], &R.t[I_A],
                               &R.t[I_B], &R.t[I_C], &R.opts, NULL, 0);
        int untouched = 1;
        for (int64_t k = 0; k < V.n[NI + O_OUT]; k++)
            untouched &= ((float *)R.buf[NI + O_OUT])[k] == GUARD_F;
        char what[160];
        snprintf(what, sizeof what, "forward, %s -> invalid argument naming out_x (\"%s\")",
                 cases[i].what, mamba2_last_error());
        result(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "out_x") &&
                   untouched,
               what);
        if (!g_quiet) printf("ok   %s\n", what);
    }
    /* the backward takes out_x as an input: a wrong shape is an error there too */
    {
        int64_t shp[4] = {2, 9, 3, 4};
        mamba2_tensor_t bad = mamba2_tensor_make(R.buf[NI + O_OUTX], MAMBA2_DTYPE_F32, 4, shp);
        const mamba2_status_t st =
            mamba2_ssd_backward(ctx, &R.grads, &R.t[I_DOUT], NULL, &R.t[I_X], &R.t[I_DT],
                                &R.t[I_A], &R.t[I_B], &R.t[I_C], &bad, &R.opts, NULL, 0);
        result(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "out_x"),
               "backward, out_x with the wrong shape -> invalid argument naming out_x");
    }
    free_run(&R);
    mamba2_context_destroy(ctx);
    free_vals(&V);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-q") == 0) g_quiet = 1;
    static const cfg cases[] = {
        {"z_DHP_G2", 2, 37, 4, 8, 16, 16, 2, 1, 1, 0, {0}},
        {"z_DH_P17_N9", 1, 33, 2, 17, 9, 8, 1, 1, 0, 0, {0}},
        {"z_L1", 2, 1, 4, 8, 8, 16, 2, 1, 1, 0, {0}},
        {"no_z", 2, 29, 3, 5, 7, 8, 3, 0, 1, 0, {0}},
        {"z_varlen", 1, 28, 4, 8, 8, 8, 2, 1, 0, 3, {10, 1, 17}},
        {"z_P64_N128_L300", 1, 300, 2, 64, 128, 64, 1, 1, 1, 0, {0}},
        {"z_P65_N9_varlen", 1, 40, 3, 65, 9, 16, 1, 1, 1, 3, {12, 1, 27}}, /* AVX-512 tails */
        {"z_chunked_L5000_H1", 1, 5000, 1, 8, 16, 64, 1, 1, 1, 0, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    run_errors();
    printf("worst normalised error %.3e\n", g_worst);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
