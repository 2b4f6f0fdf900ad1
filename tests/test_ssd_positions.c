/*
 * test_ssd_positions.c — states after chosen tokens (mamba2_ssd_forward_states).
 *
 * For batched and packed (cu_seqlens) problems with every option on, the states returned at
 * the requested flat token positions must equal
 *   - on the reference: the final state of a reference run over that sequence's prefix ending
 *     at the position (the definition), to float64 rounding;
 *   - on the CPU backend (default kernel set; AVX2 forced where the default is AVX-512; scalar):
 *     the float64 reference, within SPEC §8 (1e-5);
 * and asking for them must not change out or final_state by a single bit. Guard bytes after
 * the position states; invalid position lists are rejected with a message.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define GUARD 16
#define GUARD_VAL 12345.0f

typedef struct pcase {
    const char *name;
    int64_t B, L, H, P, N, Q, G;
    int nseq;               /* 0: batched; else packed with cu below */
    int64_t cu[8];
    int npos;
    int64_t pos[16];
} pcase;

typedef struct pdata {
    int64_t S; /* states rows */
    double *x, *dt, *A, *Bm, *Cm, *D, *z, *dtb, *init;
} pdata;

static double *filled(th_rng *r, int64_t n, int kind) {
    double *p = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case 0: p[i] = th_rng_normal(r); break;                   /* x, z, D */
        case 1: p[i] = th_rng_uniform(r, 0.01, 0.11); break;      /* dt      */
        case 2: p[i] = -th_rng_uniform(r, 0.1, 0.5); break;       /* A       */
        case 3: p[i] = th_rng_normal(r) / 5; break;               /* B, C, init */
        default: p[i] = 0.1 * th_rng_normal(r); break;            /* dt_bias */
        }
    }
    return p;
}

static void *as_dtype(const double *src, int64_t n, mamba2_dtype_t dt) {
    if (dt == MAMBA2_DTYPE_F64) {
        double *d = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        memcpy(d, src, (size_t)n * sizeof(double));
        return d;
    }
    float *f = th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) f[i] = (float)src[i];
    return f;
}

/* Run the forward with state positions on ctx with storage dtype dt. Inputs: rows
 * [b0, b0+nb) of batch, tokens [t0, t0+nl) (a prefix window), state row srow for the initial
 * state when nb == 1 and a window is used. Returns out, final, pos states as doubles. */
typedef struct result {
    double *out, *fin, *ps;
    int guard_ok;
} result;

static mamba2_status_t run(mamba2_context_t *ctx, mamba2_dtype_t dt, const pcase *c, const pdata *d,
                           int64_t b0, int64_t nb, int64_t t0, int64_t nl, int64_t srow, int64_t nS,
                           const int64_t *cu, int64_t ncu, const int64_t *pos, int64_t npos,
                           result *res) {
    const int64_t L = c->L, H = c->H, P = c->P, N = c->N, G = c->G;
    const size_t es = dt == MAMBA2_DTYPE_F64 ? 8 : 4;
    void *x = as_dtype(d->x, c->B * L * H * P, dt), *dtv = as_dtype(d->dt, c->B * L * H, dt),
         *A = as_dtype(d->A, H, dt), *Bm = as_dtype(d->Bm, c->B * L * G * N, dt),
         *Cm = as_dtype(d->Cm, c->B * L * G * N, dt), *D = as_dtype(d->D, H * P, dt),
         *z = as_dtype(d->z, c->B * L * H * P, dt), *dtb = as_dtype(d->dtb, H, dt),
         *init = as_dtype(d->init, d->S * H * P * N, dt);
    const int64_t nout = nb * nl * H * P, nfin = nS * H * P * N, nps = npos * H * P * N;
    char *out = th_xmalloc((size_t)(nout + 1) * es), *fin = th_xmalloc((size_t)(nfin + 1) * es);
    char *ps = th_xmalloc((size_t)(nps + GUARD) * es);
    for (int64_t i = 0; i < nps + GUARD; i++) {
        if (dt == MAMBA2_DTYPE_F64) ((double *)ps)[i] = GUARD_VAL;
        else ((float *)ps)[i] = GUARD_VAL;
    }
    const int64_t off_x = (b0 * L + t0) * H * P, off_dt = (b0 * L + t0) * H, off_bc = (b0 * L + t0) * G * N;
    const int64_t sx[4] = {L * H * P, H * P, P, 1}, shx[4] = {nb, nl, H, P};
    const int64_t sdt[3] = {L * H, H, 1}, shdt[3] = {nb, nl, H};
    const int64_t sbc[4] = {L * G * N, G * N, N, 1}, shbc[4] = {nb, nl, G, N};
    const int64_t shh[1] = {H}, shd[2] = {H, P}, shs[4] = {nS, H, P, N}, shps[4] = {npos, H, P, N};
    const int64_t sho[4] = {nb, nl, H, P};
    mamba2_tensor_t tx = mamba2_tensor_make_strided((char *)x + off_x * es, dt, 4, shx, sx);
    mamba2_tensor_t tz = mamba2_tensor_make_strided((char *)z + off_x * es, dt, 4, shx, sx);
    mamba2_tensor_t tdt = mamba2_tensor_make_strided((char *)dtv + off_dt * es, dt, 3, shdt, sdt);
    mamba2_tensor_t tB = mamba2_tensor_make_strided((char *)Bm + off_bc * es, dt, 4, shbc, sbc);
    mamba2_tensor_t tC = mamba2_tensor_make_strided((char *)Cm + off_bc * es, dt, 4, shbc, sbc);
    mamba2_tensor_t tA = mamba2_tensor_make(A, dt, 1, shh), tD = mamba2_tensor_make(D, dt, 2, shd),
                    tdtb = mamba2_tensor_make(dtb, dt, 1, shh);
    mamba2_tensor_t tinit = mamba2_tensor_make((char *)init + srow * H * P * N * es, dt, 4, shs);
    mamba2_tensor_t tout = mamba2_tensor_make(out, dt, 4, sho), tfin = mamba2_tensor_make(fin, dt, 4, shs);
    mamba2_tensor_t tps = mamba2_tensor_make(ps, dt, 4, shps);
    const int64_t shcu[1] = {ncu}, shpos[1] = {npos};
    mamba2_tensor_t tcu = mamba2_tensor_make((void *)cu, MAMBA2_DTYPE_I64, 1, shcu);
    mamba2_tensor_t tpos = mamba2_tensor_make((void *)pos, MAMBA2_DTYPE_I64, 1, shpos);
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = c->Q;
    o.D = &tD;
    o.z = &tz;
    o.dt_bias = &tdtb;
    o.dt_softplus = 1;
    o.initial_state = &tinit;
    o.cu_seqlens = cu ? &tcu : NULL;
    o.state_positions = pos ? &tpos : NULL;
    mamba2_status_t st = mamba2_ssd_forward_states(ctx, &tout, NULL, &tfin, pos ? &tps : NULL, &tx, &tdt,
                                                   &tA, &tB, &tC, &o, NULL, 0);
    res->out = th_xmalloc((size_t)(nout + 1) * sizeof(double));
    res->fin = th_xmalloc((size_t)(nfin + 1) * sizeof(double));
    res->ps = th_xmalloc((size_t)(nps + 1) * sizeof(double));
    for (int64_t i = 0; i < nout; i++)
        res->out[i] = dt == MAMBA2_DTYPE_F64 ? ((double *)out)[i] : ((float *)out)[i];
    for (int64_t i = 0; i < nfin; i++)
        res->fin[i] = dt == MAMBA2_DTYPE_F64 ? ((double *)fin)[i] : ((float *)fin)[i];
    for (int64_t i = 0; i < nps; i++)
        res->ps[i] = dt == MAMBA2_DTYPE_F64 ? ((double *)ps)[i] : ((float *)ps)[i];
    res->guard_ok = 1;
    for (int64_t i = nps; i < nps + GUARD; i++) {
        double v = dt == MAMBA2_DTYPE_F64 ? ((double *)ps)[i] : ((float *)ps)[i];
        if (v != GUARD_VAL) res->guard_ok = 0;
    }
    void *bufs[] = {x, dtv, A, Bm, Cm, D, z, dtb, init, out, fin, ps};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    return st;
}

static void free_result(result *r) {
    free(r->out);
    free(r->fin);
    free(r->ps);
}

static void run_case(const pcase *c, mamba2_context_t *ref, mamba2_context_t *cpu,
                     mamba2_context_t *cpu_avx2, mamba2_context_t *cpu_scalar) {
    th_rng r;
    th_rng_seed(&r, 0x5eed0000u + (uint64_t)c->L * 31 + (uint64_t)c->npos);
    pdata d;
    const int64_t B = c->B, L = c->L, H = c->H, P = c->P, N = c->N, G = c->G;
    d.S = c->nseq ? c->nseq : B;
    d.x = filled(&r, B * L * H * P, 0);
    d.dt = filled(&r, B * L * H, 1);
    d.A = filled(&r, H, 2);
    d.Bm = filled(&r, B * L * G * N, 3);
    d.Cm = filled(&r, B * L * G * N, 3);
    d.D = filled(&r, H * P, 0);
    d.z = filled(&r, B * L * H * P, 0);
    d.dtb = filled(&r, H, 4);
    d.init = filled(&r, d.S * H * P * N, 3);
    const int64_t *cu = c->nseq ? c->cu : NULL;
    const int64_t ncu = c->nseq + 1, HPN = H * P * N;

    /* the float64 reference, with positions */
    result rr;
    th_begin("%s ref-f64 vs prefix runs", c->name);
    mamba2_status_t st = run(ref, MAMBA2_DTYPE_F64, c, &d, 0, B, 0, L, 0, d.S, cu, ncu, c->pos,
                             c->npos, &rr);
    if (th_expect(st == MAMBA2_STATUS_OK, "forward_states: %s", mamba2_last_error())) {
        th_expect(rr.guard_ok, "guard after position_states overwritten");
        /* each position against a reference run over the prefix that ends there */
        double worst = 0;
        for (int i = 0; i < c->npos; i++) {
            int64_t b = c->pos[i] / L, t = c->pos[i] % L, s = b, start = 0;
            if (c->nseq) {
                for (s = 0; s < c->nseq && !(t >= c->cu[s] && t < c->cu[s + 1]); s++) {
                }
                start = c->cu[s];
            }
            result pr;
            st = run(ref, MAMBA2_DTYPE_F64, c, &d, b, 1, start, t - start + 1, s, 1, NULL, 0, NULL,
                     0, &pr);
            if (!th_expect(st == MAMBA2_STATUS_OK, "prefix run: %s", mamba2_last_error())) {
                free_result(&pr);
                break;
            }
            double e = th_nerr(rr.ps + i * HPN, pr.fin, HPN);
            if (!(e <= worst)) worst = e;
            free_result(&pr);
        }
        th_metric("pos_states", worst, TH_TOL_ORACLE);
    }
    th_end();

    /* plain forward on the CPU for the bitwise no-change check */
    /* cpu_avx2: NULL where the default kernel set is AVX2 already */
    mamba2_context_t *cpus[3] = {cpu, cpu_scalar, cpu_avx2};
    const char *names[3] = {"cpu", "cpu[scalar]", "cpu[avx2]"};
    result plain;
    mamba2_status_t stp = run(cpu, MAMBA2_DTYPE_F32, c, &d, 0, B, 0, L, 0, d.S, cu, ncu, NULL, 0, &plain);
    for (int k = 0; k < 3; k++) {
        if (!cpus[k]) continue;
        result cr;
        th_begin("%s %s vs ref-f64", c->name, names[k]);
        st = run(cpus[k], MAMBA2_DTYPE_F32, c, &d, 0, B, 0, L, 0, d.S, cu, ncu, c->pos, c->npos, &cr);
        if (th_expect(st == MAMBA2_STATUS_OK && stp == MAMBA2_STATUS_OK, "forward_states: %s",
                      mamba2_last_error())) {
            th_expect(cr.guard_ok, "guard after position_states overwritten");
            th_metric("pos_states", th_nerr(cr.ps, rr.ps, c->npos * HPN), TH_TOL_F32);
            th_metric("out", th_nerr(cr.out, rr.out, B * L * H * P), TH_TOL_F32);
            th_metric("final", th_nerr(cr.fin, rr.fin, d.S * HPN), TH_TOL_F32);
            if (k == 0) {
                th_expect(memcmp(cr.out, plain.out, (size_t)(B * L * H * P) * sizeof(double)) == 0 &&
                              memcmp(cr.fin, plain.fin, (size_t)(d.S * HPN) * sizeof(double)) == 0,
                          "asking for position states changed out or final_state");
            }
        }
        free_result(&cr);
        th_end();
    }
    free_result(&plain);
    free_result(&rr);
    double *arrs[] = {d.x, d.dt, d.A, d.Bm, d.Cm, d.D, d.z, d.dtb, d.init};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) free(arrs[i]);
}

/* Invalid position lists and mismatched output/positions. */
static void run_errors(mamba2_context_t *cpu) {
    const int64_t B = 2, L = 5, H = 2, P = 3, N = 4, G = 1;
    float x[B * L * H * P], dt[B * L * H], A[H], Bm[B * L * G * N], Cm[B * L * G * N], out[B * L * H * P],
        ps[4 * H * P * N];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = 0.1f * (float)(i % 7);
    for (size_t i = 0; i < sizeof dt / sizeof dt[0]; i++) dt[i] = 0.05f;
    for (int i = 0; i < H; i++) A[i] = -0.3f;
    for (size_t i = 0; i < sizeof Bm / sizeof Bm[0]; i++) Bm[i] = Cm[i] = 0.01f * (float)(i % 5);
    const int64_t shx[4] = {B, L, H, P}, shdt[3] = {B, L, H}, shh[1] = {H}, shbc[4] = {B, L, G, N};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 4, shx),
                    tdt = mamba2_tensor_make(dt, MAMBA2_DTYPE_F32, 3, shdt),
                    tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, shh),
                    tB = mamba2_tensor_make(Bm, MAMBA2_DTYPE_F32, 4, shbc),
                    tC = mamba2_tensor_make(Cm, MAMBA2_DTYPE_F32, 4, shbc),
                    tout = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 4, shx);
    struct {
        const char *name;
        int64_t pos[4];
        int n;
        int64_t ps_rows;
        int give_ps, give_pos;
        mamba2_status_t want;
        const char *word;
    } cases[] = {
        {"not increasing", {3, 3}, 2, 2, 1, 1, MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions"},
        {"decreasing", {4, 1}, 2, 2, 1, 1, MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions"},
        {"out of range", {0, 10}, 2, 2, 1, 1, MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions"},
        {"negative", {-1}, 1, 1, 1, 1, MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions"},
        {"rows mismatch", {1, 2, 3}, 3, 2, 1, 1, MAMBA2_STATUS_INVALID_ARGUMENT, "position_states"},
        {"positions without output", {1}, 1, 1, 0, 1, MAMBA2_STATUS_INVALID_ARGUMENT, "position_states"},
        {"output without positions", {1}, 1, 1, 1, 0, MAMBA2_STATUS_INVALID_ARGUMENT, "state_positions"},
        {"empty list", {0}, 0, 0, 1, 1, MAMBA2_STATUS_OK, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        th_begin("errors: %s", cases[i].name);
        const int64_t shp[1] = {cases[i].n}, shps[4] = {cases[i].ps_rows, H, P, N};
        mamba2_tensor_t tpos = mamba2_tensor_make(cases[i].pos, MAMBA2_DTYPE_I64, 1, shp);
        mamba2_tensor_t tps = mamba2_tensor_make(ps, MAMBA2_DTYPE_F32, 4, shps);
        mamba2_ssd_options_t o = mamba2_ssd_options_default();
        o.state_positions = cases[i].give_pos ? &tpos : NULL;
        mamba2_status_t st = mamba2_ssd_forward_states(cpu, &tout, NULL, NULL, cases[i].give_ps ? &tps : NULL,
                                                       &tx, &tdt, &tA, &tB, &tC, &o, NULL, 0);
        th_expect(st == cases[i].want, "status %s, want %s (%s)", mamba2_status_string(st),
                  mamba2_status_string(cases[i].want), mamba2_last_error());
        if (cases[i].word)
            th_expect(th_has_word(mamba2_last_error(), cases[i].word), "message \"%s\" does not name %s",
                      mamba2_last_error(), cases[i].word);
        th_end();
    }
    /* the workspace query accepts opts with positions */
    th_begin("errors: workspace query with positions");
    int64_t pos[1] = {2};
    const int64_t shp[1] = {1};
    mamba2_tensor_t tpos = mamba2_tensor_make(pos, MAMBA2_DTYPE_I64, 1, shp);
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.state_positions = &tpos;
    size_t ws = 0;
    mamba2_status_t st = mamba2_ssd_forward_workspace_size(cpu, &tout, NULL, NULL, &tx, &tdt, &tA, &tB, &tC, &o, &ws);
    th_expect(st == MAMBA2_STATUS_OK, "query: %s", mamba2_last_error());
    th_end();
}

int main(void) {
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    mamba2_context_t *cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    mamba2_context_t *cpu_scalar = th_ctx(MAMBA2_BACKEND_CPU, 2, "scalar");
    mamba2_context_t *cpu_avx2 = strcmp(mamba2_context_get_isa(cpu), "avx512") == 0
                                     ? th_ctx(MAMBA2_BACKEND_CPU, 2, "avx2")
                                     : NULL;
    static const pcase cases[] = {
        {"batched B2 L37 H4 P5 N7 G2 Q8", 2, 37, 4, 5, 7, 8, 2, 0, {0}, 6, {0, 5, 31, 36, 37, 73}},
        {"batched B1 L100 H2 P16 N32 G1 Q64 dense", 1, 100, 2, 16, 32, 64, 1, 0, {0}, 9,
         {0, 1, 2, 31, 32, 33, 63, 64, 99}},
        {"varlen 3 seqs L40", 1, 40, 3, 4, 9, 16, 3, 3, {0, 1, 15, 40}, 6, {0, 1, 14, 15, 20, 39}},
        {"varlen 7 seqs L50 one pos", 1, 50, 2, 8, 8, 4, 1, 7, {0, 3, 4, 10, 25, 26, 40, 50}, 1, {25}},
        {"batched L1", 3, 1, 2, 3, 5, 1, 1, 0, {0}, 2, {0, 2}},
        {"no positions", 2, 20, 2, 4, 4, 8, 2, 0, {0}, 0, {0}},
        /* the AVX-512 kernel set's shapes (P >= 64) where the CPU has it */
        {"varlen 3 seqs L60 P64 N12", 1, 60, 2, 64, 12, 16, 1, 3, {0, 25, 26, 60}, 5, {0, 24, 25, 30, 59}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], ref, cpu, cpu_avx2, cpu_scalar);
    run_errors(cpu);
    mamba2_context_destroy(ref);
    mamba2_context_destroy(cpu);
    mamba2_context_destroy(cpu_scalar);
    if (cpu_avx2) mamba2_context_destroy(cpu_avx2);
    return th_finish();
}
