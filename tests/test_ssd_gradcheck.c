/*
 * test_ssd_gradcheck.c — validates the REFERENCE backward (the oracle every other backend's
 * gradients are compared with) by float64 central finite differences of the reference forward.
 *
 * Scalar loss: f = sum(dout * out) + sum(dfinal_state * final_state), so df/d(input) is exactly
 * what ssd_backward returns for that dout and dfinal_state. Every element of every input is
 * probed on these tiny shapes; probes whose processed dt lies within FD_EDGE of a dt_limit edge
 * are skipped (the clamp is not differentiable there), and elements clipped by the clamp must have
 * an exactly-zero ddt. A separate unit checks that the clamp gradient is pass-through ON the
 * edges (lo <= d <= hi inclusive, SPEC §2) on the reference and on the CPU backend.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g
#define STATES .init = 1, .final = 1, .dfinal = 1
#ifndef FD_STEP
#define FD_STEP 1e-5  /* relative step (see TH_TOL_FD)                                        */
#endif
#define FD_EDGE 1e-4  /* skip probes whose processed dt is this close to a clamp edge          */
#define FD_MAX_PROBES 400 /* per tensor; larger tensors are sampled                            */

static th_ssd_case cases[] = {
    /* all options, G < H, D[H], softplus, dt_limit clipping both ends */
    {"fd_all_DH_G2", SH(2, 7, 4, 3, 5, 3, 2), .D_mode = 1, .z = 1, .dt_bias = 1, .softplus = 1,
     .limit = 1, .lo = 0.02, .hi = 0.08, STATES},
    /* all options, D[H,P], no softplus: d = dt + bias clipped to (0.03, 0.09) */
    {"fd_all_DHP_G3_nosoftplus", SH(1, 9, 6, 2, 3, 4, 3), .D_mode = 2, .z = 1, .dt_bias = 1,
     .limit = 1, .lo = 0.03, .hi = 0.09, STATES},
    /* varlen (int64) with a length-1 sequence, all options, D[H,P] */
    {"fd_varlen3_i64_all_DHP", SH(1, 0, 2, 3, 4, 2, 1), .nseq = 3, .seqlen = {4, 1, 3}, .cu64 = 1,
     .D_mode = 2, .z = 1, .dt_bias = 1, .softplus = 1, .limit = 1, .lo = 0.02, .hi = 0.08, STATES},
    /* varlen (int32), default clamp (0, inf): dt + bias < 0 is clipped to 0 */
    {"fd_varlen2_i32_default_clamp", SH(1, 0, 4, 2, 3, 3, 2), .nseq = 2, .seqlen = {1, 6},
     .D_mode = 1, .z = 1, .dt_bias = 1, STATES},
    /* no options, G == H */
    {"fd_plain_G_eq_H", SH(2, 5, 2, 2, 3, 2, 2)},
    /* L = 1, everything on, softplus with mamba_ssm's dt_bias init */
    {"fd_L1_all_invsp", SH(1, 1, 3, 2, 2, 1, 1), .D_mode = 1, .z = 1, .dt_bias = 1, .softplus = 1,
     .limit = 1, .lo = 0.001, .hi = 0.05, STATES, .dt_mode = TH_DT_INVSP},
    /* more steps than one chunk, several chunks, G < H, D[H,P], clamp with finite hi */
    {"fd_multichunk_G2_H4", SH(1, 12, 4, 2, 2, 5, 2), .D_mode = 2, .z = 1, .dt_bias = 1,
     .softplus = 1, .limit = 1, .lo = 0.015, .hi = 0.07, STATES},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static mamba2_context_t *g_ref;

static double loss_of(th_ssd_io *io, const th_ssd_data *d, double *out, double *fin) {
    mamba2_status_t st = th_ssd_io_forward(g_ref, io, 0);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("forward returned %s: %s", mamba2_status_string(st), mamba2_last_error());
        return NAN;
    }
    double f = 0.0;
    int64_t n = th_ssd_io_read(io, TH_OUT, out);
    for (int64_t i = 0; i < n; i++) f += d->v[TH_DOUT][i] * out[i];
    if (d->v[TH_DFINAL]) {
        n = th_ssd_io_read(io, TH_FINAL, fin);
        for (int64_t i = 0; i < n; i++) f += d->v[TH_DFINAL][i] * fin[i];
    }
    return f;
}

/* Is any processed dt that `id[i]` feeds within FD_EDGE of a clamp edge? */
static int near_edge(const th_ssd_case *c, const th_ssd_data *d, int id, int64_t i) {
    double lo = c->limit ? c->lo : 0.0, hi = c->limit ? c->hi : INFINITY;
    int64_t ndt = d->B * d->L * d->H;
    for (int64_t k = 0; k < ndt; k++) {
        if (id == TH_DT && k != i) continue;
        if (id == TH_DTB && k % d->H != i) continue;
        if (id != TH_DT && id != TH_DTB) return 0;
        double pre;
        th_ssd_dt_processed(c, d, k, &pre);
        if (fabs(pre - lo) < FD_EDGE || fabs(pre - hi) < FD_EDGE) return 1;
    }
    return 0;
}

static void run_case(th_ssd_case *c0) {
    th_ssd_case cc = *c0;
    if (cc.dfinal) cc.final = 1; /* the loss needs final_state */
    th_ssd_data d;
    th_ssd_data_make(&d, &cc);
    th_begin("%-30s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]%s", cc.name, (long long)d.B,
             (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N, (long long)cc.Q,
             (long long)d.G, cc.nseq ? " varlen" : "");
    th_ssd_io io;
    th_ssd_io_make(&io, &cc, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    mamba2_status_t st = th_ssd_io_forward(g_ref, &io, 1);
    if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(g_ref, &io, 1);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("reference returned %s: %s", mamba2_status_string(st), mamba2_last_error());
        th_ssd_io_free(&io);
        th_ssd_data_free(&d);
        th_end();
        return;
    }
    char msg[256];
    th_expect(th_ssd_io_check_memory(&io, msg, sizeof msg), "%s", msg);

    int64_t nout = d.B * d.L * d.H * d.P, nfin = d.S * d.H * d.P * d.N;
    double *out = th_xmalloc((size_t)(nout + 1) * sizeof(double));
    double *fin = th_xmalloc((size_t)(nfin + 1) * sizeof(double));
    th_rng rng;
    th_rng_seed(&rng, 12345);
    int skipped = 0, probes = 0;
    double lo = cc.limit ? cc.lo : 0.0, hi = cc.limit ? cc.hi : INFINITY;

    for (int gid = TH_DX; gid <= TH_DINIT; gid++) {
        int id = th_grad_of(gid);
        if (!io.v[gid].present) continue;
        int64_t n = th_numel(io.v[id].t.rank, io.v[id].t.shape);
        double *an = th_xmalloc((size_t)(n + 1) * sizeof(double));
        th_ssd_io_read(&io, gid, an);
        if (!th_all_finite(an, n)) th_fail("%s has NaN/Inf", th_tname[gid]);
        if (gid == TH_DDT) { /* clipped elements: exactly zero gradient */
            for (int64_t k = 0; k < n; k++) {
                double pre;
                th_ssd_dt_processed(&cc, &d, k, &pre);
                if ((pre < lo - FD_EDGE || pre > hi + FD_EDGE) && an[k] != 0.0) {
                    th_fail("ddt[%lld] = %g but its processed dt %g is clipped to [%g,%g]",
                            (long long)k, an[k], pre, lo, hi);
                    break;
                }
            }
        }
        int64_t m = n <= FD_MAX_PROBES ? n : FD_MAX_PROBES;
        double *fd = th_xmalloc((size_t)(m + 1) * sizeof(double));
        double *ag = th_xmalloc((size_t)(m + 1) * sizeof(double));
        int64_t used = 0;
        for (int64_t k = 0; k < m; k++) {
            int64_t i = n <= FD_MAX_PROBES ? k : (int64_t)(th_rng_next(&rng) % (uint64_t)n);
            if (near_edge(&cc, &d, id, i)) {
                skipped++;
                continue;
            }
            double v0 = d.v[id][i];
            double h = FD_STEP * (fabs(v0) > 1.0 ? fabs(v0) : 1.0);
            double vp = v0 + h, vm = v0 - h;
            th_ssd_io_poke(&io, id, i, vp);
            double fp = loss_of(&io, &d, out, fin);
            th_ssd_io_poke(&io, id, i, vm);
            double fm = loss_of(&io, &d, out, fin);
            th_ssd_io_poke(&io, id, i, v0);
            fd[used] = (fp - fm) / (vp - vm);
            ag[used] = an[i];
            used++;
            probes++;
        }
        char label[48];
        snprintf(label, sizeof label, "%s(%lld)", th_tname[gid], (long long)used);
        if (used) th_metric(label, th_nerr(ag, fd, used), TH_TOL_FD);
        free(fd);
        free(ag);
        free(an);
    }
    if (th_verbose()) printf("    %s: %d probes, %d skipped at clamp edges\n", cc.name, probes, skipped);
    free(out);
    free(fin);
    th_ssd_io_free(&io);
    th_ssd_data_free(&d);
    th_end();
}

/* The clamp gradient is pass-through on the edges themselves: with every processed dt inside
 * [lo, hi] and some exactly equal to lo or hi, ddt (and everything else) must be what the
 * unclamped problem gives. Exactly representable edges, no bias/softplus, so d == dt exactly. */
static void clamp_edges(mamba2_backend_t be, const char *isa, const char *label) {
    th_ssd_case c = {"clamp_edges_inclusive", SH(1, 8, 2, 3, 4, 4, 1), .D_mode = 1, .limit = 1,
                     .lo = 0.03125, .hi = 0.0625, STATES};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    for (int64_t i = 0; i < d.L * d.H; i++) {
        double v = d.v[TH_DT][i];
        d.v[TH_DT][i] = v < c.lo ? c.lo + 0.001 : (v > c.hi ? c.hi - 0.001 : v);
        d.v[TH_DT][i] = (double)(float)d.v[TH_DT][i];
    }
    d.v[TH_DT][1] = c.lo;
    d.v[TH_DT][4] = c.hi;
    d.v[TH_DT][9] = c.hi;
    d.v[TH_DT][14] = c.lo;
    th_ssd_case u = c;
    u.limit = 0; /* default (0, inf): nothing clipped */
    mamba2_dtype_t dt = be == MAMBA2_BACKEND_REF ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    mamba2_context_t *ctx = th_ctx(be, 2, isa);
    th_begin("%-30s %s", c.name, label);
    th_ssd_io a, b;
    th_ssd_io_make(&a, &c, &d, dt, TH_LAYOUT_CONTIG);
    th_ssd_io_make(&b, &u, &d, dt, TH_LAYOUT_CONTIG);
    mamba2_status_t st = th_ssd_io_forward(ctx, &a, 1);
    if (!st) st = th_ssd_io_backward(ctx, &a, 1);
    if (!st) st = th_ssd_io_forward(ctx, &b, 1);
    if (!st) st = th_ssd_io_backward(ctx, &b, 1);
    if (st) {
        th_fail("returned %s: %s", mamba2_status_string(st), mamba2_last_error());
    } else {
        for (int id = TH_OUT; id < TH_NT; id++) {
            if (!a.v[id].present) continue;
            int64_t n = th_numel(a.v[id].t.rank, a.v[id].t.shape);
            double *x = th_xmalloc((size_t)(n + 1) * sizeof(double));
            double *y = th_xmalloc((size_t)(n + 1) * sizeof(double));
            th_ssd_io_read(&a, id, x);
            th_ssd_io_read(&b, id, y);
            th_metric(th_tname[id], th_nerr(x, y, n), TH_TOL_EXACT);
            free(x);
            free(y);
        }
    }
    th_ssd_io_free(&a);
    th_ssd_io_free(&b);
    th_ssd_data_free(&d);
    mamba2_context_destroy(ctx);
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    g_ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    for (int i = 0; i < NCASES; i++) run_case(&cases[i]);
    clamp_edges(MAMBA2_BACKEND_REF, NULL, "ref-f64");
    clamp_edges(MAMBA2_BACKEND_CPU, NULL, "cpu");
    clamp_edges(MAMBA2_BACKEND_CPU, "scalar", "cpu[scalar]");
    mamba2_context_destroy(g_ref);
    return th_finish();
}
