/*
 * test_ssd_step.c — the SSD decode step (SPEC §6 ssd_step): mamba2_ssd_step.
 *
 * Units:
 *  - oracle: every case of the table on the CPU backend (detected ISA and forced "scalar") and
 *    on the reference backend with f32 storage, against the reference run on float64 copies
 *    of the same (float32-rounded) inputs: out, state_cache and all_states within TH_TOL_F32
 *    (SPEC §8). Outputs are pre-filled with NaN, guard bytes sit before and after every
 *    buffer, gaps of strided views must stay untouched and inputs unchanged byte for byte;
 *    padding rows (negative state_indices) must leave their out / all_states rows NaN and
 *    unused slots must keep their bits;
 *  - parity: one fused prefill (mamba2_ssd_forward, all options on) over L tokens == L
 *    one-token steps, and == steps of T tokens (outputs and final state), with permuted slots;
 *  - multi-token: one call with T tokens == T one-token calls (bitwise on the CPU), and
 *    all_states[:, T-1] == the slot afterwards;
 *  - determinism: CPU results bitwise identical for 1, 2 and 3 threads;
 *  - errors: invalid arguments give the right status and a message naming the tensor, and
 *    leave every output untouched.
 * Uses only the public API; prints one line per unit and "N passed, M failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mamba2c.h"
#include "gt.h"

/* ============================================================== the problem === */

typedef struct step_case {
    const char *name;
    int64_t B, T, H, P, N, G, S;
    int multi; /* x[B,T,H,P] form; else x[B,H,P] (T must be 1) */
    int D_mode, z, dt_bias, softplus, limit;
    double lo, hi;
    int idx; /* 0: no state_indices (row b -> slot b); 32 / 64: permuted i32 / i64 indices,
              * every third row (b % 3 == 1) a padding row (-1) */
    int all; /* request all_states */
    int pad; /* strided views for the f32 runs */
    uint64_t seed;
} step_case;

/* Inputs of one case: the fused-op data of a [B,T,H,P,N,G] problem (th_ssd_data: x, dt, A,
 * Bm, Cm, D, z, dt_bias in the multi-token layout), the initial cache and the indices. */
typedef struct step_data {
    th_ssd_case tc;
    th_ssd_data d;
    double *cache; /* [S,H,P,N] */
    double *idx;   /* [B] (NULL: identity) */
} step_data;

static void sdata_make(step_data *sd, const step_case *c) {
    memset(sd, 0, sizeof *sd);
    th_ssd_case tc = {.name = c->name,
                      .B = c->B,
                      .L = c->T,
                      .H = c->H,
                      .P = c->P,
                      .N = c->N,
                      .Q = 1,
                      .G = c->G,
                      .D_mode = c->D_mode,
                      .z = c->z,
                      .dt_bias = c->dt_bias,
                      .softplus = c->softplus,
                      .limit = c->limit,
                      .lo = c->lo,
                      .hi = c->hi,
                      .seed = c->seed};
    sd->tc = tc;
    th_ssd_data_make(&sd->d, &sd->tc);
    const int64_t ncache = c->S * c->H * c->P * c->N;
    sd->cache = (double *)th_xmalloc((size_t)(ncache > 0 ? ncache : 1) * sizeof(double));
    th_rng r;
    th_rng_seed(&r, (c->seed ? c->seed : 7) * 7919u + 13u);
    for (int64_t i = 0; i < ncache; i++) sd->cache[i] = (double)(float)(th_rng_normal(&r) / 5.0);
    if (c->idx) {
        sd->idx = (double *)th_xmalloc((size_t)c->B * sizeof(double));
        for (int64_t b = 0; b < c->B; b++)
            sd->idx[b] = (b % 3 == 1) ? -1.0 : (double)(c->S - 1 - b); /* reversed slots */
    }
}

static void sdata_free(step_data *sd) {
    th_ssd_data_free(&sd->d);
    free(sd->cache);
    free(sd->idx);
}

static int64_t slot_of(const step_case *c, const step_data *sd, int64_t b) {
    return sd->idx ? (int64_t)sd->idx[b] : b;
}

/* The guarded tensors of one call. */
typedef struct step_io {
    gt x, dt, A, Bm, Cm, D, z, dtb, idx, cache, out, all;
    mamba2_ssd_step_options_t o;
} step_io;

/* Tensors for tokens [t0, t0+T) of the case's data (T = 1 and !multi: the one-token form). */
static void sio_make_range(step_io *s, const step_case *c, const step_data *sd, const double *cache,
                           mamba2_dtype_t dt, int pad, int multi, int64_t t0, int64_t T) {
    memset(s, 0, sizeof *s);
    const int64_t B = c->B, H = c->H, P = c->P, N = c->N, G = c->G, L = c->T;
    const th_ssd_data *d = &sd->d;
    /* slice tokens [t0, t0+T) of the [B,L,...] arrays */
    double *xs = th_xmalloc((size_t)(B * T * H * P + 1) * sizeof(double));
    double *zs = th_xmalloc((size_t)(B * T * H * P + 1) * sizeof(double));
    double *dts = th_xmalloc((size_t)(B * T * H + 1) * sizeof(double));
    double *bs = th_xmalloc((size_t)(B * T * G * N + 1) * sizeof(double));
    double *cs = th_xmalloc((size_t)(B * T * G * N + 1) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            memcpy(xs + (b * T + t) * H * P, d->v[TH_X] + (b * L + t0 + t) * H * P,
                   (size_t)(H * P) * sizeof(double));
            if (c->z)
                memcpy(zs + (b * T + t) * H * P, d->v[TH_Z] + (b * L + t0 + t) * H * P,
                       (size_t)(H * P) * sizeof(double));
            memcpy(dts + (b * T + t) * H, d->v[TH_DT] + (b * L + t0 + t) * H,
                   (size_t)H * sizeof(double));
            memcpy(bs + (b * T + t) * G * N, d->v[TH_BM] + (b * L + t0 + t) * G * N,
                   (size_t)(G * N) * sizeof(double));
            memcpy(cs + (b * T + t) * G * N, d->v[TH_CM] + (b * L + t0 + t) * G * N,
                   (size_t)(G * N) * sizeof(double));
        }
    const int64_t shx4[4] = {B, T, H, P}, shx3[3] = {B, H, P};
    const int64_t shdt3[3] = {B, T, H}, shdt2[2] = {B, H};
    const int64_t shb4[4] = {B, T, G, N}, shb3[3] = {B, G, N};
    const int64_t sha5[5] = {B, T, H, P, N}, sha4[4] = {B, H, P, N};
    const int64_t shh[1] = {H}, shhp[2] = {H, P}, shc[4] = {c->S, H, P, N}, shi[1] = {B};
    const int xr = multi ? 4 : 3;
    gt_make(&s->x, dt, xr, multi ? shx4 : shx3, pad, 0, xs);
    gt_make(&s->dt, dt, xr - 1, multi ? shdt3 : shdt2, pad, 0, dts);
    gt_make(&s->A, dt, 1, shh, 0, 0, d->v[TH_A]);
    gt_make(&s->Bm, dt, xr, multi ? shb4 : shb3, pad, 0, bs);
    gt_make(&s->Cm, dt, xr, multi ? shb4 : shb3, pad, 0, cs);
    if (c->D_mode)
        gt_make(&s->D, dt, c->D_mode == 2 ? 2 : 1, c->D_mode == 2 ? shhp : shh, pad, 0, d->v[TH_D]);
    if (c->z) gt_make(&s->z, dt, xr, multi ? shx4 : shx3, pad, 0, zs);
    if (c->dt_bias) gt_make(&s->dtb, dt, 1, shh, 0, 0, d->v[TH_DTB]);
    if (sd->idx)
        gt_make(&s->idx, c->idx == 64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32, 1, shi, 0, 0, sd->idx);
    gt_make(&s->cache, dt, 4, shc, pad, 1, cache);
    gt_make(&s->out, dt, xr, multi ? shx4 : shx3, pad, 1, NULL);
    if (c->all) gt_make(&s->all, dt, xr + 1, multi ? sha5 : sha4, pad, 1, NULL);
    s->o = mamba2_ssd_step_options_default();
    s->o.D = gt_t(&s->D);
    s->o.z = gt_t(&s->z);
    s->o.dt_bias = gt_t(&s->dtb);
    s->o.state_indices = gt_t(&s->idx);
    s->o.dt_softplus = c->softplus;
    if (c->limit) {
        s->o.dt_limit_lo = c->lo;
        s->o.dt_limit_hi = c->hi;
    }
    free(xs);
    free(zs);
    free(dts);
    free(bs);
    free(cs);
}

static void sio_make(step_io *s, const step_case *c, const step_data *sd, mamba2_dtype_t dt,
                     int pad) {
    sio_make_range(s, c, sd, sd->cache, dt, pad, c->multi, 0, c->T);
}

static mamba2_status_t sio_run(mamba2_context_t *ctx, step_io *s) {
    return mamba2_ssd_step(ctx, gt_t(&s->cache), gt_t(&s->out), gt_t(&s->all), gt_t(&s->x),
                           gt_t(&s->dt), gt_t(&s->A), gt_t(&s->Bm), gt_t(&s->Cm), &s->o);
}

static int sio_check_memory(const step_io *s) {
    char msg[256];
    const gt *g[12] = {&s->x, &s->dt,  &s->A,   &s->Bm,    &s->Cm,  &s->D,
                       &s->z, &s->dtb, &s->idx, &s->cache, &s->out, &s->all};
    const char *nm[12] = {
        "x",           "dt",  "A",         "Bm", "Cm", "D", "z", "dt_bias", "state_indices",
        "state_cache", "out", "all_states"};
    for (int i = 0; i < 12; i++)
        if (!gt_check(g[i], nm[i], msg, sizeof msg)) {
            th_fail("%s", msg);
            return 0;
        }
    return 1;
}

static void sio_free(step_io *s) {
    gt *g[12] = {&s->x, &s->dt,  &s->A,   &s->Bm,    &s->Cm,  &s->D,
                 &s->z, &s->dtb, &s->idx, &s->cache, &s->out, &s->all};
    for (int i = 0; i < 12; i++) gt_free(g[i]);
}

/* Values of the rows of a [B, ...] output that belong to non-padding batch rows (row length
 * `row`), packed; padding rows must be entirely unwritten (NaN pattern). Returns the count. */
static int64_t live_rows(const step_case *c, const step_data *sd, const gt *g, int64_t row,
                         double *dst) {
    double *v = gt_values(g);
    int64_t k = 0;
    for (int64_t b = 0; b < c->B; b++) {
        if (slot_of(c, sd, b) < 0) {
            for (int64_t i = 0; i < row; i++)
                if (!gt_unwritten(g, b * row + i)) {
                    th_fail("padding row %lld of an output was written", (long long)b);
                    break;
                }
            continue;
        }
        memcpy(dst + k, v + b * row, (size_t)row * sizeof(double));
        k += row;
    }
    free(v);
    return k;
}

/* ================================================================= the cases === */

#define SH(b, t, h, p, n, g, s) .B = b, .T = t, .H = h, .P = p, .N = n, .G = g, .S = s
#define OPTS_BUT_D \
    .z = 1, .dt_bias = 1, .softplus = 1, .limit = 1, .lo = 0.02, .hi = 0.08
#define ALL_OPTS .D_mode = 1, OPTS_BUT_D

static const step_case cases[] = {
    {"T1_basic", SH(2, 1, 4, 8, 16, 2, 2)},
    {"T1_tiny_1x1x1x1x1", SH(1, 1, 1, 1, 1, 1, 1), ALL_OPTS, .all = 1},
    {"T1_P3_N5_G3_H6_all_opts_idx32", SH(4, 1, 6, 3, 5, 3, 6), ALL_OPTS, .idx = 32, .all = 1,
     .pad = 1},
    {"T1_G_eq_H_D_per_channel", SH(3, 1, 4, 5, 9, 4, 3), .D_mode = 2, .z = 1, .pad = 1},
    {"T1_G1_H8_idx64_softplus", SH(5, 1, 8, 12, 20, 1, 7), .softplus = 1, .dt_bias = 1, .idx = 64,
     .all = 1},
    {"T1_mamba2_dims_P64_N128", SH(2, 1, 8, 64, 128, 1, 2), .D_mode = 1, .z = 1, .dt_bias = 1,
     .softplus = 1, .pad = 1},
    {"T1_as_rank4", SH(3, 1, 4, 8, 16, 2, 4), ALL_OPTS, .multi = 1, .idx = 32, .all = 1},
    {"T4_P17_N9_D_hp_idx64", SH(3, 4, 4, 17, 9, 2, 5), .D_mode = 2, .z = 1, .dt_bias = 1,
     .softplus = 1, .multi = 1, .idx = 64, .all = 1, .pad = 1},
    {"T7_G1_all_opts", SH(2, 7, 6, 6, 24, 1, 2), ALL_OPTS, .multi = 1, .all = 1},
    {"T70_long_block_edge", SH(1, 70, 2, 4, 8, 1, 1), .D_mode = 1, .z = 1, .multi = 1, .all = 1},
    {"T0_empty", SH(2, 0, 4, 8, 8, 2, 3), ALL_OPTS, .multi = 1, .idx = 32, .all = 1},
    {"dt_limit_lo_only", SH(2, 3, 4, 8, 8, 2, 2), .softplus = 1, .limit = 1, .lo = 0.05,
     .hi = INFINITY, .multi = 1},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ==================================================================== oracle === */

static void test_oracle(const step_case *c) {
    step_data sd;
    sdata_make(&sd, c);
    const int64_t HP = c->H * c->P, row_out = c->T * HP, row_all = c->T * HP * c->N;
    const int64_t ncache = c->S * HP * c->N;

    /* the float64 oracle */
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    step_io o;
    sio_make(&o, c, &sd, MAMBA2_DTYPE_F64, 0);
    mamba2_status_t st = sio_run(ref, &o);
    double *out64 = th_xmalloc((size_t)(c->B * row_out + 1) * sizeof(double));
    double *all64 = th_xmalloc((size_t)(c->B * row_all + 1) * sizeof(double));
    double *cache64 = gt_values(&o.cache);
    int64_t nout = 0, nall = 0;

    struct {
        const char *label;
        mamba2_backend_t be;
        const char *isa;
    } var[3] = {{"cpu", MAMBA2_BACKEND_CPU, NULL},
                {"cpu-scalar", MAMBA2_BACKEND_CPU, "scalar"},
                {"ref-f32", MAMBA2_BACKEND_REF, NULL}};
    for (int v = 0; v < 3; v++) {
        th_begin("oracle %-32s %-10s", c->name, var[v].label);
        if (!th_expect(st == MAMBA2_STATUS_OK, "f64 reference: %s", mamba2_last_error())) continue;
        nout = live_rows(c, &sd, &o.out, row_out, out64);
        if (c->all) nall = live_rows(c, &sd, &o.all, row_all, all64);
        mamba2_context_t *ctx = th_ctx(var[v].be, 2, var[v].isa);
        step_io s;
        sio_make(&s, c, &sd, MAMBA2_DTYPE_F32, c->pad);
        st = sio_run(ctx, &s);
        if (th_expect(st == MAMBA2_STATUS_OK, "ssd_step: %s", mamba2_last_error())) {
            sio_check_memory(&s);
            double *got =
                th_xmalloc((size_t)(c->B * row_all + c->B * row_out + 1) * sizeof(double));
            int64_t n = live_rows(c, &sd, &s.out, row_out, got);
            th_expect(n == nout, "out: %lld live values, expected %lld", (long long)n,
                      (long long)nout);
            gt_cmp("out", got, out64, nout, 0, TH_TOL_F32);
            if (c->all) {
                n = live_rows(c, &sd, &s.all, row_all, got);
                gt_cmp("all_states", got, all64, nall, 0, TH_TOL_F32);
            }
            double *cache = gt_values(&s.cache);
            gt_cmp("state_cache", cache, cache64, ncache, 0, TH_TOL_F32);
            /* slots no row uses keep their bits */
            const int64_t slot = HP * c->N;
            for (int64_t q = 0; q < c->S; q++) {
                int used = 0;
                for (int64_t b = 0; b < c->B; b++) used |= slot_of(c, &sd, b) == q;
                if (used && c->T > 0) continue;
                for (int64_t i = 0; i < slot; i++)
                    if (cache[q * slot + i] != (double)(float)sd.cache[q * slot + i]) {
                        th_fail("slot %lld (no row uses it%s) changed", (long long)q,
                                c->T == 0 ? ", or T = 0" : "");
                        break;
                    }
            }
            free(cache);
            free(got);
        }
        sio_free(&s);
        mamba2_context_destroy(ctx);
        th_end();
    }
    free(out64);
    free(all64);
    free(cache64);
    sio_free(&o);
    mamba2_context_destroy(ref);
    sdata_free(&sd);
}

/* ==================================================================== parity === */

/* One fused prefill over L tokens == steps of T tokens (T = 1: the one-token form), all
 * options on, initial state = the slots, final state = the slots afterwards. */
static void test_prefill_vs_steps(mamba2_backend_t be, const char *isa, int64_t T) {
    const step_case c = {"prefill",    SH(3, 23, 4, 8, 16, 2, 4),
                         .D_mode = 2,  .z = 1,
                         .dt_bias = 1, .softplus = 1,
                         .limit = 1,   .lo = 0.02,
                         .hi = 0.08,   .multi = 1,
                         .seed = 41};
    step_data sd;
    sdata_make(&sd, &c);
    const int64_t B = c.B, L = c.T, H = c.H, P = c.P, N = c.N, HPN = H * P * N;
    /* slot of row b: S-1-b (slot 0 unused); the fused op's initial_state = those slots */
    sd.idx = (double *)th_xmalloc((size_t)B * sizeof(double));
    for (int64_t b = 0; b < B; b++) sd.idx[b] = (double)(c.S - 1 - b);
    const mamba2_dtype_t dt = be == MAMBA2_BACKEND_REF ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    th_begin("parity prefill == %lld steps of %lld token%s (%s%s%s)", (long long)((L + T - 1) / T),
             (long long)T, T > 1 ? "s" : "", be == MAMBA2_BACKEND_CPU ? "cpu" : "ref-f64",
             isa ? " " : "", isa ? isa : "");

    /* the fused prefill: on this backend, and the float64 reference */
    th_ssd_case fc = sd.tc;
    fc.Q = 8;
    fc.init = 1;
    fc.final = 1;
    th_ssd_data fd = sd.d; /* borrowed arrays; initial_state set below */
    double *init = th_xmalloc((size_t)(B * HPN) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        memcpy(init + b * HPN, sd.cache + (c.S - 1 - b) * HPN, (size_t)HPN * sizeof(double));
    fd.v[TH_INIT] = init;
    fd.S = B;
    mamba2_context_t *ctx = th_ctx(be, 2, isa);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    th_ssd_io fio, rio;
    th_ssd_io_make(&fio, &fc, &fd, dt, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&rio, &fc, &fd, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    th_expect(th_ssd_io_forward(ctx, &fio, 0) == MAMBA2_STATUS_OK, "fused: %s",
              mamba2_last_error());
    th_expect(th_ssd_io_forward(ref, &rio, 0) == MAMBA2_STATUS_OK, "fused ref: %s",
              mamba2_last_error());
    double *out_f = th_xmalloc((size_t)(B * L * H * P) * sizeof(double));
    double *fin_f = th_xmalloc((size_t)(B * HPN) * sizeof(double));
    double *out_r = th_xmalloc((size_t)(B * L * H * P) * sizeof(double));
    double *fin_r = th_xmalloc((size_t)(B * HPN) * sizeof(double));
    th_ssd_io_read(&fio, TH_OUT, out_f);
    th_ssd_io_read(&fio, TH_FINAL, fin_f);
    th_ssd_io_read(&rio, TH_OUT, out_r);
    th_ssd_io_read(&rio, TH_FINAL, fin_r);

    /* the steps */
    double *out_s = th_xmalloc((size_t)(B * L * H * P) * sizeof(double));
    double *cache = th_xmalloc((size_t)(c.S * HPN) * sizeof(double));
    memcpy(cache, sd.cache, (size_t)(c.S * HPN) * sizeof(double));
    for (int64_t t0 = 0; t0 < L; t0 += T) {
        const int64_t nt = t0 + T <= L ? T : L - t0;
        step_io s;
        step_case cc = c;
        cc.idx = 32;
        sio_make_range(&s, &cc, &sd, cache, dt, 1, T > 1, t0, nt);
        mamba2_status_t st = sio_run(ctx, &s);
        if (!th_expect(st == MAMBA2_STATUS_OK, "step at t=%lld: %s", (long long)t0,
                       mamba2_last_error())) {
            sio_free(&s);
            break;
        }
        sio_check_memory(&s);
        double *o = gt_values(&s.out);
        for (int64_t b = 0; b < B; b++)
            memcpy(out_s + (b * L + t0) * H * P, o + b * nt * H * P,
                   (size_t)(nt * H * P) * sizeof(double));
        free(o);
        gt_read(&s.cache, cache);
        sio_free(&s);
    }
    double *fin_s = th_xmalloc((size_t)(B * HPN) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        memcpy(fin_s + b * HPN, cache + (c.S - 1 - b) * HPN, (size_t)HPN * sizeof(double));
    const double tol = be == MAMBA2_BACKEND_REF ? TH_TOL_ORACLE : TH_TOL_F32;
    gt_cmp("out", out_s, out_r, B * L * H * P, 0, tol);
    gt_cmp("final", fin_s, fin_r, B * HPN, 0, tol);
    gt_cmp("out_vs_fused", out_s, out_f, B * L * H * P, 0, tol);
    gt_cmp("final_vs_fused", fin_s, fin_f, B * HPN, 0, tol);
    /* slot 0 is used by no row */
    th_expect(memcmp(cache, sd.cache, (size_t)HPN * sizeof(double)) == 0, "unused slot 0 changed");
    th_end();
    free(out_f);
    free(fin_f);
    free(out_r);
    free(fin_r);
    free(out_s);
    free(fin_s);
    free(cache);
    free(init);
    th_ssd_io_free(&fio);
    th_ssd_io_free(&rio);
    mamba2_context_destroy(ctx);
    mamba2_context_destroy(ref);
    sdata_free(&sd);
}

/* One call with T tokens == T one-token calls; all_states[:, T-1] == the slot afterwards. */
static void test_multi_vs_single(mamba2_backend_t be, const char *isa) {
    const step_case c = {"multi",    SH(4, 5, 4, 6, 12, 2, 6),
                         OPTS_BUT_D, .D_mode = 2,
                         .multi = 1, .idx = 32,
                         .all = 1,   .pad = 1,
                         .seed = 43};
    step_data sd;
    sdata_make(&sd, &c);
    const int exact = be == MAMBA2_BACKEND_CPU;
    const int64_t B = c.B, T = c.T, HP = c.H * c.P, HPN = HP * c.N;
    th_begin("multi-token T=%lld == %lld single steps (%s%s%s)", (long long)T, (long long)T,
             exact ? "cpu" : "ref-f32", isa ? " " : "", isa ? isa : "");
    mamba2_context_t *ctx = th_ctx(be, 2, isa);
    step_io m;
    sio_make(&m, &c, &sd, MAMBA2_DTYPE_F32, 1);
    th_expect(sio_run(ctx, &m) == MAMBA2_STATUS_OK, "T-token step: %s", mamba2_last_error());
    sio_check_memory(&m);
    double *out_m = gt_values(&m.out), *all_m = gt_values(&m.all), *cache_m = gt_values(&m.cache);

    double *cache = th_xmalloc((size_t)(c.S * HPN) * sizeof(double));
    memcpy(cache, sd.cache, (size_t)(c.S * HPN) * sizeof(double));
    double *out_s = th_xmalloc((size_t)(B * T * HP) * sizeof(double));
    double *all_s = th_xmalloc((size_t)(B * T * HPN) * sizeof(double));
    for (int64_t i = 0; i < B * T * HP; i++) out_s[i] = out_m[i]; /* padding rows: compared below */
    for (int64_t i = 0; i < B * T * HPN; i++) all_s[i] = all_m[i];
    for (int64_t t = 0; t < T; t++) {
        step_io s;
        sio_make_range(&s, &c, &sd, cache, MAMBA2_DTYPE_F32, 1, 0, t, 1);
        if (!th_expect(sio_run(ctx, &s) == MAMBA2_STATUS_OK, "step %lld: %s", (long long)t,
                       mamba2_last_error())) {
            sio_free(&s);
            break;
        }
        sio_check_memory(&s);
        double *o = gt_values(&s.out), *a = gt_values(&s.all);
        for (int64_t b = 0; b < B; b++) {
            if (slot_of(&c, &sd, b) < 0) continue;
            memcpy(out_s + (b * T + t) * HP, o + b * HP, (size_t)HP * sizeof(double));
            memcpy(all_s + (b * T + t) * HPN, a + b * HPN, (size_t)HPN * sizeof(double));
        }
        free(o);
        free(a);
        gt_read(&s.cache, cache);
        sio_free(&s);
    }
    /* padding rows are NaN in both; compare the live rows */
    double *g1 = th_xmalloc((size_t)(B * T * HPN + 1) * sizeof(double));
    double *g2 = th_xmalloc((size_t)(B * T * HPN + 1) * sizeof(double));
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++)
        if (slot_of(&c, &sd, b) >= 0) {
            memcpy(g1 + n, out_s + b * T * HP, (size_t)(T * HP) * sizeof(double));
            memcpy(g2 + n, out_m + b * T * HP, (size_t)(T * HP) * sizeof(double));
            n += T * HP;
        }
    gt_cmp("out", g1, g2, n, exact, TH_TOL_F32);
    n = 0;
    for (int64_t b = 0; b < B; b++)
        if (slot_of(&c, &sd, b) >= 0) {
            memcpy(g1 + n, all_s + b * T * HPN, (size_t)(T * HPN) * sizeof(double));
            memcpy(g2 + n, all_m + b * T * HPN, (size_t)(T * HPN) * sizeof(double));
            n += T * HPN;
        }
    gt_cmp("all_states", g1, g2, n, exact, TH_TOL_F32);
    gt_cmp("state_cache", cache, cache_m, c.S * HPN, exact, TH_TOL_F32);
    /* all_states[b, T-1] is the slot afterwards, bit for bit (both are the stored state) */
    n = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t q = slot_of(&c, &sd, b);
        if (q < 0) continue;
        memcpy(g1 + n, all_m + (b * T + T - 1) * HPN, (size_t)HPN * sizeof(double));
        memcpy(g2 + n, cache_m + q * HPN, (size_t)HPN * sizeof(double));
        n += HPN;
    }
    gt_cmp("all_last_vs_cache", g1, g2, n, 1, 0.0);
    th_end();
    free(g1);
    free(g2);
    free(out_m);
    free(all_m);
    free(cache_m);
    free(out_s);
    free(all_s);
    free(cache);
    sio_free(&m);
    mamba2_context_destroy(ctx);
    sdata_free(&sd);
}

/* ============================================================= determinism === */

static void test_determinism(void) {
    const step_case c = {"det",      SH(3, 2, 8, 16, 32, 2, 5),
                         OPTS_BUT_D, .D_mode = 2,
                         .multi = 1, .idx = 64,
                         .all = 1,   .pad = 1,
                         .seed = 47};
    step_data sd;
    sdata_make(&sd, &c);
    th_begin("determinism cpu 1 vs 2 vs 3 threads, bitwise");
    double *ref[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, k + 1, NULL);
        step_io s;
        sio_make(&s, &c, &sd, MAMBA2_DTYPE_F32, 1);
        th_expect(sio_run(ctx, &s) == MAMBA2_STATUS_OK, "%d threads: %s", k + 1,
                  mamba2_last_error());
        if (k == 0) {
            ref[0] = gt_values(&s.out);
            ref[1] = gt_values(&s.all);
            ref[2] = gt_values(&s.cache);
        } else {
            const gt *g[3] = {&s.out, &s.all, &s.cache};
            const char *nm[3] = {"out", "all_states", "state_cache"};
            for (int i = 0; i < 3; i++) {
                /* compare the raw bytes (NaN padding rows included) */
                double *v = gt_values(g[i]);
                th_expect(memcmp(v, ref[i], (size_t)g[i]->n * sizeof(double)) == 0 || g[i]->n == 0,
                          "%s differs between 1 and %d threads", nm[i], k + 1);
                free(v);
            }
        }
        sio_free(&s);
        mamba2_context_destroy(ctx);
    }
    for (int i = 0; i < 3; i++) free(ref[i]);
    th_end();
    sdata_free(&sd);
}

/* ================================================================== errors === */

static void test_errors(mamba2_backend_t be) {
    const step_case c = {"err",     SH(3, 1, 4, 8, 16, 2, 4), ALL_OPTS, .idx = 32, .all = 1,
                         .seed = 53};
    step_data sd;
    sdata_make(&sd, &c);
    mamba2_context_t *ctx = th_ctx(be, 2, NULL);
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT;
    step_io s;
    sio_make(&s, &c, &sd, MAMBA2_DTYPE_F32, 0);
    double *cache0 = gt_values(&s.cache);
    const char *bn = be == MAMBA2_BACKEND_CPU ? "cpu" : "ref";
#define RUN(cache_, out_, all_, x_, dt_, A_, B_, C_, o_)                                           \
    mamba2_ssd_step(ctx, cache_, out_, all_, x_, dt_, A_, B_, C_, o_)
    const mamba2_tensor_t *X = &s.x.t, *DT = &s.dt.t, *A = &s.A.t, *BM = &s.Bm.t, *CM = &s.Cm.t;
    const mamba2_tensor_t *CA = &s.cache.t, *OU = &s.out.t, *AL = &s.all.t;
    mamba2_ssd_step_options_t o = s.o;

    th_begin("errors %s: required tensors and ctx", bn);
    gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &o), MAMBA2_STATUS_OK, NULL, NULL);
    sio_free(&s);
    sio_make(&s, &c, &sd, MAMBA2_DTYPE_F32, 0); /* re-armed: outputs NaN, cache = initial */
    X = &s.x.t, DT = &s.dt.t, A = &s.A.t, BM = &s.Bm.t, CM = &s.Cm.t;
    CA = &s.cache.t, OU = &s.out.t, AL = &s.all.t;
    o = s.o;
    gt_expect_err(mamba2_ssd_step(NULL, CA, OU, AL, X, DT, A, BM, CM, &o), INV, "ctx", NULL);
    gt_expect_err(RUN(NULL, OU, AL, X, DT, A, BM, CM, &o), INV, "state_cache", NULL);
    gt_expect_err(RUN(CA, NULL, AL, X, DT, A, BM, CM, &o), INV, "out", NULL);
    gt_expect_err(RUN(CA, OU, AL, NULL, DT, A, BM, CM, &o), INV, "x", NULL);
    gt_expect_err(RUN(CA, OU, AL, X, NULL, A, BM, CM, &o), INV, "dt", NULL);
    gt_expect_err(RUN(CA, OU, AL, X, DT, NULL, BM, CM, &o), INV, "A", NULL);
    gt_expect_err(RUN(CA, OU, AL, X, DT, A, NULL, CM, &o), INV, "Bm", NULL);
    gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, NULL, &o), INV, "Cm", NULL);

    th_begin("errors %s: shapes, ranks, dtypes, strides", bn);
    {
        mamba2_tensor_t t = *X;
        t.rank = 2;
        gt_expect_err(RUN(CA, OU, AL, &t, DT, A, BM, CM, &o), INV, "x", NULL);
        t = *BM;
        t.rank = 4; /* x is the one-token form */
        t.shape[3] = 16;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, &t, CM, &o), INV, "Bm", NULL);
        t = *DT;
        t.shape[1] = 3;
        gt_expect_err(RUN(CA, OU, AL, X, &t, A, BM, CM, &o), INV, "dt", "B,H");
        t = *CM;
        t.shape[2] = 1;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, &t, &o), INV, "Cm", NULL);
        t = *BM;
        t.shape[1] = 3; /* G = 3 does not divide H = 4 */
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, &t, CM, &o), INV, "H", "G");
        t = *A;
        t.dtype = MAMBA2_DTYPE_F64;
        gt_expect_err(RUN(CA, OU, AL, X, DT, &t, BM, CM, &o), INV, "A", NULL);
        t = *CA;
        t.shape[3] = 8;
        gt_expect_err(RUN(&t, OU, AL, X, DT, A, BM, CM, &o), INV, "state_cache", NULL);
        t = *CA;
        t.rank = 3;
        gt_expect_err(RUN(&t, OU, AL, X, DT, A, BM, CM, &o), INV, "state_cache", NULL);
        t = *CA;
        t.dtype = MAMBA2_DTYPE_I32;
        gt_expect_err(RUN(&t, OU, AL, X, DT, A, BM, CM, &o), INV, "state_cache", NULL);
        t = *OU;
        t.dtype = MAMBA2_DTYPE_F64;
        gt_expect_err(RUN(CA, &t, AL, X, DT, A, BM, CM, &o), INV, "out", NULL);
        t = *OU;
        t.shape[2] = 7;
        gt_expect_err(RUN(CA, &t, AL, X, DT, A, BM, CM, &o), INV, "out", NULL);
        t = *AL;
        t.rank = 5;
        gt_expect_err(RUN(CA, OU, &t, X, DT, A, BM, CM, &o), INV, "all_states", NULL);
        t = *AL;
        t.shape[3] = 15;
        gt_expect_err(RUN(CA, OU, &t, X, DT, A, BM, CM, &o), INV, "all_states", NULL);
        t = *X;
        t.stride[2] = 2; /* last dim not contiguous */
        gt_expect_err(RUN(CA, OU, AL, &t, DT, A, BM, CM, &o), INV, "x", NULL);
        t = *X;
        t.stride[0] = -1;
        gt_expect_err(RUN(CA, OU, AL, &t, DT, A, BM, CM, &o), INV, "x", NULL);
        t = *OU;
        t.stride[1] = 0; /* an output whose elements overlap each other */
        gt_expect_err(RUN(CA, &t, AL, X, DT, A, BM, CM, &o), INV, "out", NULL);
        t = *X;
        t.dtype = MAMBA2_DTYPE_I32;
        gt_expect_err(RUN(CA, OU, AL, &t, DT, A, BM, CM, &o), INV, "x", NULL);
        t = *X;
        t.data = NULL;
        gt_expect_err(RUN(CA, OU, AL, &t, DT, A, BM, CM, &o), INV, "x", NULL);
        if (be == MAMBA2_BACKEND_CPU) {
            t = *X;
            t.dtype = MAMBA2_DTYPE_F64;
            gt_expect_err(RUN(CA, OU, AL, &t, DT, A, BM, CM, &o), MAMBA2_STATUS_UNSUPPORTED, "x",
                          NULL);
        }
    }

    th_begin("errors %s: options", bn);
    {
        mamba2_ssd_step_options_t oo = o;
        mamba2_tensor_t t = *o.D;
        t.shape[0] = 3;
        oo.D = &t;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "D", NULL);
        t.rank = 3;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "D", NULL);
        oo = o;
        t = *o.z;
        t.shape[1] = 5;
        oo.z = &t;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "z", NULL);
        oo = o;
        t = *o.dt_bias;
        t.dtype = MAMBA2_DTYPE_F64;
        oo.dt_bias = &t;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "dt_bias", NULL);
        oo = o;
        oo.dt_limit_lo = NAN;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "dt_limit", NULL);
        oo = o;
        oo.dt_limit_lo = 1.0;
        oo.dt_limit_hi = 0.5;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "dt_limit", NULL);
    }

    th_begin("errors %s: state_indices and slots", bn);
    {
        mamba2_ssd_step_options_t oo = o;
        int32_t ix[3] = {3, -1, 0};
        const int64_t shi[1] = {3};
        mamba2_tensor_t it = mamba2_tensor_make(ix, MAMBA2_DTYPE_I32, 1, shi);
        oo.state_indices = &it;
        ix[2] = 4; /* >= S */
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "state_indices", "S");
        ix[2] = 3; /* duplicate */
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "state_indices", NULL);
        ix[2] = 0;
        it.dtype = MAMBA2_DTYPE_F32;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "state_indices", NULL);
        it.dtype = MAMBA2_DTYPE_I32;
        it.shape[0] = 2;
        gt_expect_err(RUN(CA, OU, AL, X, DT, A, BM, CM, &oo), INV, "state_indices", "B");
        it.shape[0] = 3;
        /* identity slots need B <= S */
        oo.state_indices = NULL;
        mamba2_tensor_t c2 = *CA;
        c2.shape[0] = 2;
        gt_expect_err(RUN(&c2, OU, AL, X, DT, A, BM, CM, &oo), INV, "state_cache", "B");
    }

    th_begin("errors %s: overlaps", bn);
    {
        /* every view stays inside one allocation, so no unrelated buffer is hit first */
        mamba2_tensor_t t = *OU;
        t.data = s.cache.t.data; /* out inside the cache */
        gt_expect_err(RUN(CA, &t, AL, X, DT, A, BM, CM, &o), INV, "out", "state_cache");
        t.data = s.x.t.data; /* out on x */
        gt_expect_err(RUN(CA, &t, AL, X, DT, A, BM, CM, &o), INV, "out", "x");
        t = *AL;
        t.data = s.cache.t.data; /* all_states inside the cache */
        gt_expect_err(RUN(CA, OU, &t, X, DT, A, BM, CM, &o), INV, "all_states", "state_cache");
        t = *OU;
        t.data = s.all.t.data; /* out inside all_states */
        gt_expect_err(RUN(CA, &t, AL, X, DT, A, BM, CM, &o), INV, "all_states", "out");
        /* the cache on Bm: both views inside one buffer */
        float *big = th_xmalloc(4096 * sizeof(float));
        for (int i = 0; i < 4096; i++) big[i] = 0.0f;
        mamba2_tensor_t bm2 = mamba2_tensor_make(big, MAMBA2_DTYPE_F32, 3, s.Bm.t.shape);
        const int64_t shc1[4] = {1, 4, 8, 16};
        mamba2_tensor_t c1 = mamba2_tensor_make(big + 32, MAMBA2_DTYPE_F32, 4, shc1);
        mamba2_ssd_step_options_t oo = o;
        int32_t ix[3] = {0, -1, -1};
        const int64_t shi[1] = {3};
        mamba2_tensor_t it = mamba2_tensor_make(ix, MAMBA2_DTYPE_I32, 1, shi);
        oo.state_indices = &it;
        gt_expect_err(RUN(&c1, OU, AL, X, DT, A, &bm2, CM, &oo), INV, "state_cache", "Bm");
        free(big);
    }
    /* nothing failed call wrote anything */
    {
        int bad = 0;
        for (int64_t i = 0; i < s.out.n; i++) bad |= !gt_unwritten(&s.out, i);
        for (int64_t i = 0; i < s.all.n; i++) bad |= !gt_unwritten(&s.all, i);
        double *cv = gt_values(&s.cache);
        bad |= memcmp(cv, cache0, (size_t)s.cache.n * sizeof(double)) != 0;
        free(cv);
        th_expect(!bad, "a rejected call wrote to out, all_states or state_cache");
        sio_check_memory(&s);
    }
    th_end();
#undef RUN
    free(cache0);
    sio_free(&s);
    mamba2_context_destroy(ctx);
    sdata_free(&sd);
}

/* ====================================================================== main === */

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-q") == 0) th_set_verbose(0);
    for (int i = 0; i < NCASES; i++) test_oracle(&cases[i]);
    for (int v = 0; v < 3; v++) {
        const mamba2_backend_t be = v == 2 ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU;
        const char *isa = v == 1 ? "scalar" : NULL;
        test_prefill_vs_steps(be, isa, 1);
        test_prefill_vs_steps(be, isa, 4);
        test_multi_vs_single(be, isa);
    }
    test_determinism();
    test_errors(MAMBA2_BACKEND_CPU);
    test_errors(MAMBA2_BACKEND_REF);
    return th_finish();
}
