/*
 * test_ssd_oracle.c — validates the reference FORWARD by a different algorithm.
 *
 * The test carries its own float64 implementation of the CHUNKED SSD algorithm of SPEC §1 (the
 * "duality" form: CB = Cm·Bm per chunk, decays exp(cs_i - cs_j), chunk states, state passing
 * across chunks, y_off = exp(cs_i) Cm_i·S_start), including dt processing (bias, softplus, clamp),
 * D ([H] and [H,P]), the z gate, initial/final states and varlen. The reference backend (float64
 * storage) must agree with it to TH_TOL_ORACLE for several shapes, reference chunk sizes and
 * oracle chunk sizes — the result may not depend on Q beyond rounding.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g
#define STATES .init = 1, .final = 1

static th_ssd_case cases[] = {
    {"plain", SH(2, 64, 4, 16, 16, 16, 1), .final = 1},
    {"P3_N5_G3_all_DHP", SH(2, 50, 6, 3, 5, 8, 3), .D_mode = 2, .z = 1, .dt_bias = 1, .softplus = 1,
     .limit = 1, .lo = 0.02, .hi = 0.08, STATES},
    {"varlen5_zero_and_len1", SH(1, 0, 4, 4, 8, 4, 2), .nseq = 5, .seqlen = {7, 1, 20, 0, 12},
     .D_mode = 1, .z = 1, .dt_bias = 1, STATES},
    {"long_L300", SH(1, 300, 2, 8, 16, 256, 2), .D_mode = 1, STATES},
    {"L1", SH(2, 1, 2, 3, 2, 4, 1), .D_mode = 1, .z = 1, STATES},
    {"softplus_above_20", SH(1, 30, 2, 4, 4, 8, 1), .softplus = 1, STATES, .dt_mode = TH_DT_LARGE},
    {"mamba2_dims", SH(1, 160, 4, 64, 32, 64, 2), .D_mode = 2, .z = 1, .dt_bias = 1, .softplus = 1,
     .final = 1, .dt_mode = TH_DT_INVSP},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))
static const int64_t oracle_Q[] = {1, 5, 16, 64};
static const int64_t ref_Q_extra[] = {1, 7};

static double silu(double v) { return v / (1.0 + exp(-v)); }

/* Chunked SSD forward (SPEC §1) in float64 with chunk size Qo. out[B,L,H,P], fin[S,H,P,N]. */
static void oracle_forward(const th_ssd_case *c, const th_ssd_data *d, int64_t Qo, double *out,
                           double *fin) {
    int64_t L = d->L, H = d->H, P = d->P, N = d->N, G = d->G, hpg = H / G;
    double *dd = th_xmalloc((size_t)Qo * sizeof(double));
    double *cs = th_xmalloc((size_t)Qo * sizeof(double));
    double *CB = th_xmalloc((size_t)(Qo * Qo) * sizeof(double));
    double *S0 = th_xmalloc((size_t)(P * N) * sizeof(double));
    double *cst = th_xmalloc((size_t)(P * N) * sizeof(double));
    const double *x = d->v[TH_X], *Bm = d->v[TH_BM], *Cm = d->v[TH_CM], *A = d->v[TH_A];
    for (int64_t s = 0; s < d->S; s++) {
        int64_t b = c->nseq ? 0 : s, t0 = c->nseq ? d->cu[s] : 0, t1 = c->nseq ? d->cu[s + 1] : L;
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / hpg;
            for (int64_t k = 0; k < P * N; k++)
                S0[k] = c->init ? d->v[TH_INIT][(s * H + h) * P * N + k] : 0.0;
            for (int64_t c0 = t0; c0 < t1; c0 += Qo) {
                int64_t n = t1 - c0 < Qo ? t1 - c0 : Qo;
                /* dt processing and the in-chunk cumulative sum of a_t = d_t * A */
                double acc = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    dd[i] = th_ssd_dt_processed(c, d, (b * L + c0 + i) * H + h, NULL);
                    acc += dd[i] * A[h];
                    cs[i] = acc;
                }
                /* CB[i,j] = Cm_i · Bm_j */
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < n; j++) {
                        double v = 0.0;
                        for (int64_t q = 0; q < N; q++)
                            v += Cm[((b * L + c0 + i) * G + g) * N + q] * Bm[((b * L + c0 + j) * G + g) * N + q];
                        CB[i * Qo + j] = v;
                    }
                for (int64_t i = 0; i < n; i++) {
                    int64_t t = c0 + i;
                    const double *Ci = Cm + ((b * L + t) * G + g) * N;
                    for (int64_t p = 0; p < P; p++) {
                        /* y_diag = sum_{j<=i} CB[i,j] exp(cs_i - cs_j) d_j x_j */
                        double yd = 0.0;
                        for (int64_t j = 0; j <= i; j++)
                            yd += CB[i * Qo + j] * exp(cs[i] - cs[j]) * dd[j] *
                                  x[((b * L + c0 + j) * H + h) * P + p];
                        /* y_off = exp(cs_i) Cm_i · S_start */
                        double yo = 0.0;
                        for (int64_t q = 0; q < N; q++) yo += Ci[q] * S0[p * N + q];
                        double y = yd + exp(cs[i]) * yo;
                        int64_t xi = ((b * L + t) * H + h) * P + p;
                        if (c->D_mode == 1) y += d->v[TH_D][h] * x[xi];
                        if (c->D_mode == 2) y += d->v[TH_D][h * P + p] * x[xi];
                        if (c->z) y *= silu(d->v[TH_Z][xi]);
                        out[xi] = y;
                    }
                }
                /* chunk_state = sum_j exp(cs_last - cs_j) d_j x_j ⊗ Bm_j;
                 * S_start(next) = exp(cs_last) S_start + chunk_state */
                for (int64_t p = 0; p < P; p++)
                    for (int64_t q = 0; q < N; q++) {
                        double v = 0.0;
                        for (int64_t j = 0; j < n; j++)
                            v += exp(cs[n - 1] - cs[j]) * dd[j] * x[((b * L + c0 + j) * H + h) * P + p] *
                                 Bm[((b * L + c0 + j) * G + g) * N + q];
                        cst[p * N + q] = v;
                    }
                for (int64_t k = 0; k < P * N; k++) S0[k] = exp(cs[n - 1]) * S0[k] + cst[k];
            }
            for (int64_t k = 0; k < P * N; k++) fin[(s * H + h) * P * N + k] = S0[k];
        }
    }
    free(dd);
    free(cs);
    free(CB);
    free(S0);
    free(cst);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 2, NULL);
    for (int ci = 0; ci < NCASES; ci++) {
        th_ssd_case c = cases[ci];
        th_ssd_data d;
        th_ssd_data_make(&d, &c);
        int64_t nout = d.B * d.L * d.H * d.P, nfin = d.S * d.H * d.P * d.N;
        int nq = (int)(sizeof oracle_Q / sizeof oracle_Q[0]);
        double *o_out[4], *o_fin[4];
        for (int k = 0; k < nq; k++) {
            o_out[k] = th_xmalloc((size_t)(nout + 1) * sizeof(double));
            o_fin[k] = th_xmalloc((size_t)(nfin + 1) * sizeof(double));
            oracle_forward(&c, &d, oracle_Q[k], o_out[k], o_fin[k]);
        }
        double *r_out = th_xmalloc((size_t)(nout + 1) * sizeof(double));
        double *r_fin = th_xmalloc((size_t)(nfin + 1) * sizeof(double));
        int64_t refQ[3] = {c.Q, ref_Q_extra[0], ref_Q_extra[1]};
        for (int rq = 0; rq < 3; rq++) {
            th_ssd_case cq = c;
            cq.Q = refQ[rq];
            cq.final = 1;
            th_begin("%-24s [%lld,%lld,%lld,%lld,%lld,Q=%lld,%lld] vs Qo={1,5,16,64}", c.name, (long long)d.B,
                     (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N,
                     (long long)cq.Q, (long long)d.G);
            th_ssd_io io;
            th_ssd_io_make(&io, &cq, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
            mamba2_status_t st = th_ssd_io_forward(ref, &io, rq % 2);
            if (st != MAMBA2_STATUS_OK) {
                th_fail("reference forward returned %s: %s", mamba2_status_string(st), mamba2_last_error());
            } else {
                char msg[256];
                th_expect(th_ssd_io_check_memory(&io, msg, sizeof msg), "%s", msg);
                th_ssd_io_read(&io, TH_OUT, r_out);
                th_ssd_io_read(&io, TH_FINAL, r_fin);
                /* worst over the oracle chunk sizes */
                double eo = 0.0, ef = 0.0;
                for (int k = 0; k < nq; k++) {
                    double a = th_nerr(r_out, o_out[k], nout), b = th_nerr(r_fin, o_fin[k], nfin);
                    if (a != a || (eo == eo && a > eo)) eo = a; /* NaN sticks */
                    if (b != b || (ef == ef && b > ef)) ef = b;
                }
                th_metric("out", eo, TH_TOL_ORACLE);
                th_metric("final", ef, TH_TOL_ORACLE);
            }
            th_ssd_io_free(&io);
            th_end();
        }
        for (int k = 0; k < nq; k++) {
            free(o_out[k]);
            free(o_fin[k]);
        }
        free(r_out);
        free(r_fin);
        th_ssd_data_free(&d);
    }
    mamba2_context_destroy(ref);
    return th_finish();
}
