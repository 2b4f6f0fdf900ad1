/*
 * test_ssd_half.c — the fused SSD op with bfloat16 / float16 activation storage.
 *
 * For each backend (ref, cpu) and each half dtype (bf16, f16): the activations x, dt, Bm, Cm,
 * z, dout are drawn as SPEC §8 says (signed) and ROUNDED to the storage dtype; A, D, dt_bias,
 * initial_state and dfinal_state are f32 (the parameter dtype for half activations). The
 * oracle is the reference backend on float64 tensors holding exactly those rounded values.
 * Checked on every case:
 *  - forward out and final_state, and every backward gradient (dx, ddt, dA, dBm, dCm, dD, dz,
 *    ddt_bias, dinitial_state), normalised error <= TOL_HALF_OUT / TOL_HALF_GRAD (SPEC §8);
 *    no NaN/Inf where the oracle is finite;
 *  - guard bytes before and after every tensor, the gaps of strided output views, inputs
 *    unchanged byte for byte, outputs pre-filled with NaN (0xFF..: a NaN in every float dtype);
 *  - the half outputs are bitwise identical with 1, 2 and 3 threads (and the f32 ones too).
 * Shapes: L not a multiple of Q, P and N not multiples of 8, G < H and G == H, L = 1, varlen
 * cu_seqlens (int32 and int64, a zero-length sequence), strided views (every activation a
 * column slice of a wider row, as Mamba-2's in_proj split gives them), every option alone,
 * all together, and none.
 * f16 overflow: inputs for which |out| exceeds 65504 give ±inf in those elements of out (IEEE
 * rounding of a too-large value), finite values elsewhere, and status OK: the op does not
 * check or clamp the range of its half outputs.
 *
 * Usage: test_ssd_half [--backend ref|cpu|all|opencl|cuda] [-q] [name-substring]
 * (cpu runs the CPU backend with its default kernel set, the forced "avx2" one where the default
 * is "avx512", and the forced portable "scalar" one; opencl the OpenCL backend, run only when
 * asked: exit code 77 when no OpenCL device exists, and its three contexts stand in for the
 * thread counts, so the bitwise checks are run to run; cuda likewise for the CUDA backend)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "harness.h"
#include "ssd_case_macros.h"

/* SPEC §8 for bf16/f16 storage, against the float64 reference on the rounded inputs.
 * What to expect: rounding a result once costs u/sqrt(3) in normalised error, u = 2^-9
 * (bf16: 1.1e-3) or 2^-12 (f16: 1.4e-4); the reference (double arithmetic) shows exactly
 * that. A float32 backend adds its float32 error (~1e-6), and one that also rounds
 * intermediates to half would add a few u more. These are the contract, not measurements. */
#define TOL_HALF_OUT 1e-2
#define TOL_HALF_GRAD 2e-2

/* .layout != TH_LAYOUT_CONTIG here means: every activation (and activation gradient) is a
 * column slice of a wider row (row stride = row length + 3 elements) */
#define WIDE .layout = TH_LAYOUT_XBC

static th_ssd_case cases[] = {
    {"no_options", SH(2, 40, 4, 8, 8, 16, 2)},
    {"L_not_multiple_of_Q", SH(2, 50, 4, 8, 16, 16, 2), .final = 1},
    {"P5_N7_G1_H3", SH(2, 37, 3, 5, 7, 8, 1), .D_mode = 1, STATES},
    {"P17_N9_G3_H6_all", SH(2, 29, 6, 17, 9, 8, 3), .D_mode = 2, ALL_OPTS},
    {"G_eq_H_P3_N5", SH(1, 33, 4, 3, 5, 16, 4), .D_mode = 1, .z = 1, STATES},
    {"L1_plain", SH(1, 1, 2, 3, 5, 4, 1)},
    {"L1_all", SH(2, 1, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS},
    {"opt_D_per_head", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 1},
    {"opt_D_per_channel", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 2},
    {"opt_z", SH(2, 33, 4, 8, 8, 16, 2), .z = 1},
    {"opt_dt_bias", SH(2, 33, 4, 8, 8, 16, 2), .dt_bias = 1},
    {"opt_dt_softplus", SH(2, 33, 4, 8, 8, 16, 2), .softplus = 1},
    {"opt_dt_limit", SH(2, 33, 4, 8, 8, 16, 2), .limit = 1, .lo = 0.02, .hi = 0.08},
    {"opt_initial_state", SH(2, 33, 4, 8, 8, 16, 2), .init = 1},
    {"opt_final_dfinal", SH(2, 33, 4, 8, 8, 16, 2), .final = 1, .dfinal = 1},
    {"all_options_DH", SH(2, 77, 4, 8, 16, 32, 2), .D_mode = 1, ALL_OPTS},
    {"all_options_invsp_bias", SH(2, 40, 4, 8, 8, 8, 1), .D_mode = 2, ALL_BUT_LIMIT, .limit = 1,
     .lo = 0.001, .hi = 0.05, .dt_mode = TH_DT_INVSP},
    {"varlen_4seq_i32_all", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 4, .seqlen = {13, 1, 20, 7},
     .D_mode = 1, ALL_OPTS},
    {"varlen_3seq_i64_zero_len", SH(1, 0, 6, 3, 5, 16, 3), .nseq = 3, .seqlen = {9, 0, 12},
     .cu64 = 1, STATES},
    {"wide_views_all", SH(2, 40, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS, WIDE},
    {"wide_views_varlen", SH(1, 0, 6, 3, 5, 8, 2), .nseq = 3, .seqlen = {7, 1, 12}, .D_mode = 1,
     ALL_OPTS, WIDE},
    {"wide_views_L1", SH(2, 1, 2, 5, 3, 4, 1), .z = 1, STATES, WIDE},
    {"partial_grads", SH(2, 33, 4, 8, 8, 16, 2), .D_mode = 2, ALL_OPTS,
     .grad_mask = GBIT(TH_DX) | GBIT(TH_DA) | GBIT(TH_DCM) | GBIT(TH_DZ) | GBIT(TH_DINIT)},
    {"mamba2_dims_P64_N64_all", SH(1, 200, 4, 64, 64, 64, 1), .D_mode = 1, ALL_OPTS},
    {"wide_P65_N9_G2_all", SH(2, 37, 4, 65, 9, 16, 2), .D_mode = 2, ALL_OPTS}, /* AVX-512 tails */
    {"long_L700_Q64", SH(1, 700, 2, 16, 32, 64, 1), .D_mode = 1, .z = 1, .softplus = 1,
     .dt_bias = 1, STATES},
    /* the CPU backend's chunk-parallel split of a long sequence (few heads) */
    {"chunked_L6200_H3_G1_all", SH(1, 6200, 3, 8, 8, 64, 1), .D_mode = 1, ALL_OPTS},
    /* groups of 3 heads over head sets of other sizes (1, 2, 3 threads): dBm/dCm summed in
     * cache, or across tasks and rounded by the task with the group's last head */
    {"groups_across_sets_H9_G3", SH(2, 60, 9, 16, 64, 32, 3), .D_mode = 2, ALL_OPTS},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const char *dname(mamba2_dtype_t d) {
    return d == MAMBA2_DTYPE_BF16 ? "bf16" : d == MAMBA2_DTYPE_F16 ? "f16" : "f32";
}

/* ---- values ------------------------------------------------------------------------------ */

static int is_act(int id) {
    switch (id) {
    case TH_X: case TH_DT: case TH_BM: case TH_CM: case TH_Z: case TH_DOUT: case TH_OUT:
    case TH_DX: case TH_DDT: case TH_DBM: case TH_DCM: case TH_DZ:
        return 1;
    default:
        return 0;
    }
}

static double round_to(mamba2_dtype_t d, double v) {
    float f = (float)v;
    if (d == MAMBA2_DTYPE_BF16) return m2_bf16_to_f32(m2_f32_to_bf16(f));
    if (d == MAMBA2_DTYPE_F16) return m2_f16_to_f32(m2_f32_to_f16(f));
    return f;
}

static int wanted(const th_ssd_case *c, const th_ssd_data *d, int id, int64_t *shape) {
    int rank = th_ssd_shape(c, d, id, shape);
    if (!rank) return 0;
    if (id >= TH_DX && c->grad_mask && !((c->grad_mask >> (id - TH_DX)) & 1u)) return 0;
    return rank;
}

/* ---- guarded tensors of any float dtype ---------------------------------------------------- */

typedef struct gt {
    int present, is_output;
    mamba2_tensor_t t;
    unsigned char *alloc; /* TH_GUARD + bytes + TH_GUARD */
    size_t bytes;
    unsigned char *mask;  /* outputs: 1 on bytes of view elements */
    unsigned char *snap;  /* inputs: the whole allocation after filling */
} gt;

typedef struct inst {
    gt v[TH_NT];
    mamba2_ssd_options_t opts;
    mamba2_ssd_grads_t grads;
} inst;

static size_t esz(mamba2_dtype_t d) { return mamba2_dtype_size(d); }

/* element offset of logical (row-major) index i */
static int64_t off_of(const mamba2_tensor_t *t, int64_t i) {
    int64_t off = 0;
    for (int k = t->rank - 1; k >= 0; k--) {
        off += (i % t->shape[k]) * t->stride[k];
        i /= t->shape[k];
    }
    return off;
}

static double get_elem(const mamba2_tensor_t *t, int64_t off) {
    switch (t->dtype) {
    case MAMBA2_DTYPE_F32: return ((const float *)t->data)[off];
    case MAMBA2_DTYPE_F64: return ((const double *)t->data)[off];
    case MAMBA2_DTYPE_BF16: return m2_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case MAMBA2_DTYPE_F16: return m2_f16_to_f32(((const uint16_t *)t->data)[off]);
    case MAMBA2_DTYPE_I32: return ((const int32_t *)t->data)[off];
    case MAMBA2_DTYPE_I64: return (double)((const int64_t *)t->data)[off];
    case MAMBA2_DTYPE_Q8_0: break; /* a weight format: no SSD tensor holds it */
    }
    return NAN;
}

static void set_elem(const mamba2_tensor_t *t, int64_t off, double v) {
    switch (t->dtype) {
    case MAMBA2_DTYPE_F32: ((float *)t->data)[off] = (float)v; break;
    case MAMBA2_DTYPE_F64: ((double *)t->data)[off] = v; break;
    case MAMBA2_DTYPE_BF16: ((uint16_t *)t->data)[off] = m2_f32_to_bf16((float)v); break;
    case MAMBA2_DTYPE_F16: ((uint16_t *)t->data)[off] = m2_f32_to_f16((float)v); break;
    case MAMBA2_DTYPE_I32: ((int32_t *)t->data)[off] = (int32_t)v; break;
    case MAMBA2_DTYPE_I64: ((int64_t *)t->data)[off] = (int64_t)v; break;
    case MAMBA2_DTYPE_Q8_0: break; /* a weight format: no SSD tensor holds it */
    }
}

/* A tensor in its own guarded buffer; rank >= 3 with wide != 0: dim 1 rows padded by 3
 * elements (a column slice of a wider row). */
static void gt_make(gt *g, mamba2_dtype_t dt, int rank, const int64_t *shape, int wide,
                    int is_output, const double *vals) {
    memset(g, 0, sizeof *g);
    int64_t stride[MAMBA2_MAX_RANK], s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        stride[k] = s;
        if (wide && rank >= 3 && k == 1) stride[k] = s = s + 3; /* row of dims 2.. plus pad */
        s *= shape[k] > 0 ? shape[k] : 1;
    }
    int64_t n = th_numel(rank, shape), span = 0;
    g->present = 1;
    g->is_output = is_output;
    g->t = mamba2_tensor_make_strided(NULL, dt, rank, shape, stride);
    span = th_tensor_span(&g->t);
    g->bytes = (size_t)(span + (wide ? 3 : 0)) * esz(dt);
    size_t total = g->bytes + 2 * TH_GUARD;
    g->alloc = th_xmalloc(total);
    g->snap = th_xmalloc(total);
    g->mask = calloc(total, 1);
    memset(g->alloc, TH_PAT_GUARD, total);
    g->t.data = g->alloc + TH_GUARD;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = off_of(&g->t, i);
        memset(g->mask + TH_GUARD + (size_t)off * esz(dt), 1, esz(dt));
        if (is_output) memset(g->alloc + TH_GUARD + (size_t)off * esz(dt), TH_PAT_UNSET, esz(dt));
        else set_elem(&g->t, off, vals[i]);
    }
    memcpy(g->snap, g->alloc, total);
}

static void gt_free(gt *g) {
    free(g->alloc);
    free(g->mask);
    free(g->snap);
    memset(g, 0, sizeof *g);
}

/* guards, gaps of outputs, inputs unchanged; 1 if intact */
static int gt_check(const gt *g, const char *name, char *msg, size_t n) {
    size_t total = g->bytes + 2 * TH_GUARD;
    for (size_t k = 0; k < total; k++) {
        int bad = g->is_output ? (!g->mask[k] && g->alloc[k] != TH_PAT_GUARD)
                               : g->alloc[k] != g->snap[k];
        if (bad) {
            long long rel = (long long)k - TH_GUARD;
            snprintf(msg, n, "%s: byte %lld (%s) changed", name, rel,
                     rel < 0 ? "head guard" : (size_t)rel >= g->bytes ? "tail guard"
                     : g->is_output ? "gap of the view" : "input data");
            return 0;
        }
    }
    return 1;
}

static double *gt_read(const gt *g, int64_t *n) {
    *n = th_numel(g->t.rank, g->t.shape);
    double *v = th_xmalloc((size_t)(*n ? *n : 1) * sizeof(double));
    for (int64_t i = 0; i < *n; i++) v[i] = get_elem(&g->t, off_of(&g->t, i));
    return v;
}

#define TV(in, id) ((in)->v[id].present ? &(in)->v[id].t : NULL)

/* The half (or f32) instance: activations in `act`, parameters and states f32. */
static void inst_make(inst *in, const th_ssd_case *c, const th_ssd_data *d, mamba2_dtype_t act) {
    memset(in, 0, sizeof *in);
    int wide = c->layout != TH_LAYOUT_CONTIG;
    for (int id = 0; id < TH_NT; id++) {
        int64_t shape[MAMBA2_MAX_RANK];
        int rank = wanted(c, d, id, shape);
        if (!rank) continue;
        if (id == TH_CU) {
            double cu[TH_MAX_SEQ + 1];
            for (int s = 0; s <= c->nseq; s++) cu[s] = (double)d->cu[s];
            gt_make(&in->v[id], c->cu64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32, rank, shape, 0, 0, cu);
            continue;
        }
        mamba2_dtype_t dt = is_act(id) ? act : MAMBA2_DTYPE_F32;
        gt_make(&in->v[id], dt, rank, shape, wide && is_act(id), id >= TH_OUT, d->v[id]);
    }
    const mamba2_tensor_t *t[TH_NT];
    for (int id = 0; id < TH_NT; id++) t[id] = TV(in, id);
    th_ssd_wire(c, t, &in->opts, &in->grads);
}

static void inst_free(inst *in) {
    for (int id = 0; id < TH_NT; id++)
        if (in->v[id].present) gt_free(&in->v[id]);
}

static int inst_check(const inst *in, char *msg, size_t n) {
    for (int id = 0; id < TH_NT; id++)
        if (in->v[id].present && !gt_check(&in->v[id], th_tname[id], msg, n)) return 0;
    return 1;
}

/* ws_mode 1: workspace of exactly the queried size (plus a guard checked after the call) */
static mamba2_status_t inst_call(mamba2_context_t *ctx, inst *in, int backward, int ws_mode,
                                 char *msg, size_t n) {
    size_t need = 0;
    mamba2_status_t st;
    if (ws_mode) {
        st = backward ? mamba2_ssd_backward_workspace_size(
                            ctx, &in->grads, TV(in, TH_DOUT), TV(in, TH_DFINAL), TV(in, TH_X),
                            TV(in, TH_DT), TV(in, TH_A), TV(in, TH_BM), TV(in, TH_CM), NULL,
                            &in->opts, &need)
                      : mamba2_ssd_forward_workspace_size(ctx, TV(in, TH_OUT), NULL, TV(in, TH_FINAL),
                                                          TV(in, TH_X), TV(in, TH_DT), TV(in, TH_A),
                                                          TV(in, TH_BM), TV(in, TH_CM), &in->opts,
                                                          &need);
        if (st != MAMBA2_STATUS_OK) {
            snprintf(msg, n, "%s_workspace_size: %s: %s", backward ? "backward" : "forward",
                     mamba2_status_string(st), mamba2_last_error());
            return st;
        }
    }
    unsigned char *ws = ws_mode ? th_xmalloc(need + TH_GUARD) : NULL;
    if (ws) memset(ws, TH_PAT_GUARD, need + TH_GUARD);
    st = backward ? mamba2_ssd_backward(ctx, &in->grads, TV(in, TH_DOUT), TV(in, TH_DFINAL),
                                        TV(in, TH_X), TV(in, TH_DT), TV(in, TH_A), TV(in, TH_BM),
                                        TV(in, TH_CM), NULL, &in->opts, ws, need)
                  : mamba2_ssd_forward(ctx, TV(in, TH_OUT), NULL, TV(in, TH_FINAL), TV(in, TH_X),
                                       TV(in, TH_DT), TV(in, TH_A), TV(in, TH_BM), TV(in, TH_CM),
                                       &in->opts, ws, need);
    if (st != MAMBA2_STATUS_OK) {
        snprintf(msg, n, "%s: %s: %s", backward ? "backward" : "forward", mamba2_status_string(st),
                 mamba2_last_error());
    } else if (!inst_check(in, msg, n)) {
        st = MAMBA2_STATUS_INTERNAL_ERROR;
    } else if (ws) {
        for (size_t k = 0; k < TH_GUARD; k++)
            if (ws[need + k] != TH_PAT_GUARD) {
                snprintf(msg, n, "workspace of %zu bytes written past its end", need);
                st = MAMBA2_STATUS_INTERNAL_ERROR;
                break;
            }
    }
    free(ws);
    return st;
}

static int outputs_equal(const inst *a, const inst *b, char *msg, size_t n) {
    for (int id = TH_OUT; id < TH_NT; id++) {
        if (!a->v[id].present) continue;
        if (memcmp(a->v[id].alloc, b->v[id].alloc, a->v[id].bytes + 2 * TH_GUARD)) {
            snprintf(msg, n, "%s differs", th_tname[id]);
            return 0;
        }
    }
    return 1;
}

/* ---- worst errors per (backend, dtype, tensor), for the summary ----------------------------- */

static double worst[6][2][TH_NT]; /* -1: nothing measured */

/* ---- one case on one backend and dtype --------------------------------------------------- */

static void run_case(th_ssd_case *c, int bi, mamba2_context_t *ctx1, mamba2_context_t *ctx2,
                     mamba2_context_t *ctx3,
                     mamba2_context_t *ref_ctx, int di, mamba2_dtype_t act, const char *blabel) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    /* round the activations (and dout) to the storage dtype: the oracle sees the same values */
    for (int id = 0; id < TH_OUT; id++) {
        int64_t shape[MAMBA2_MAX_RANK];
        int rank = th_ssd_shape(c, &d, id, shape);
        if (!rank || !is_act(id) || !d.v[id]) continue;
        int64_t n = th_numel(rank, shape);
        for (int64_t i = 0; i < n; i++) d.v[id][i] = round_to(act, d.v[id][i]);
    }
    th_begin("%-26s %-10s %-4s [%lld,%lld,%lld,%lld,%lld,%lld,%lld]", c->name, blabel, dname(act),
             (long long)d.B, (long long)d.L, (long long)d.H, (long long)d.P, (long long)d.N,
             (long long)c->Q, (long long)d.G);
    th_ssd_io ref;
    th_ssd_io_make(&ref, c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    mamba2_status_t st = th_ssd_io_forward(ref_ctx, &ref, 1);
    if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(ref_ctx, &ref, 1);
    inst a, b;
    inst_make(&a, c, &d, act);
    inst_make(&b, c, &d, act);
    char msg[512];
    if (st != MAMBA2_STATUS_OK) {
        th_fail("the f64 oracle failed: %s: %s", mamba2_status_string(st), mamba2_last_error());
    } else if (inst_call(ctx2, &a, 0, 1, msg, sizeof msg) != MAMBA2_STATUS_OK ||
               inst_call(ctx2, &a, 1, 0, msg, sizeof msg) != MAMBA2_STATUS_OK) {
        th_fail("%s", msg);
    } else {
        for (int id = TH_OUT; id < TH_NT; id++) {
            if (!a.v[id].present) continue;
            int64_t n, m;
            double *got = gt_read(&a.v[id], &n);
            double *want = th_xmalloc((size_t)(n ? n : 1) * sizeof(double));
            m = th_ssd_io_read(&ref, id, want);
            if (m != n) th_fail("%s: oracle has %lld elements, got %lld", th_tname[id], (long long)m, (long long)n);
            if (!th_all_finite(got, n) && th_all_finite(want, n)) th_fail("%s has NaN/Inf", th_tname[id]);
            double e = th_nerr(got, want, n);
            th_metric(th_tname[id], e, id >= TH_DX ? TOL_HALF_GRAD : TOL_HALF_OUT);
            if (!(e <= worst[bi][di][id]) && !isnan(worst[bi][di][id])) worst[bi][di][id] = e;
            free(got);
            free(want);
        }
        /* 1 thread, the workspace the other way round: bitwise the same */
        if (inst_call(ctx1, &b, 0, 0, msg, sizeof msg) != MAMBA2_STATUS_OK ||
            inst_call(ctx1, &b, 1, 1, msg, sizeof msg) != MAMBA2_STATUS_OK)
            th_fail("1 thread: %s", msg);
        else if (!outputs_equal(&a, &b, msg, sizeof msg))
            th_fail("2 threads vs 1 thread: %s", msg);
        /* and 3 threads (other head sets, chunk tasks); reduced, a GPU backend's third
         * context would only repeat the run-to-run check above */
        if (!(th_reduced() && bi >= 4)) {
            if (inst_call(ctx3, &b, 0, 1, msg, sizeof msg) != MAMBA2_STATUS_OK ||
                inst_call(ctx3, &b, 1, 0, msg, sizeof msg) != MAMBA2_STATUS_OK)
                th_fail("3 threads: %s", msg);
            else if (!outputs_equal(&a, &b, msg, sizeof msg))
                th_fail("3 threads vs 2 threads: %s", msg);
        }
    }
    inst_free(&a);
    inst_free(&b);
    th_ssd_io_free(&ref);
    th_ssd_data_free(&d);
    th_end();
}

/* f16 overflow: out beyond the f16 range becomes ±inf, the call succeeds, the rest is right */
static void run_overflow(mamba2_context_t *ctx, mamba2_context_t *ref_ctx, const char *blabel) {
    th_ssd_case c = {"f16_overflow", SH(1, 24, 2, 8, 8, 8, 1), .D_mode = 1, STATES};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    int64_t nx = d.B * d.L * d.H * d.P;
    /* every 3rd element of x large: D x ~ 4 * 2e4 = 8e4 > 65504 */
    for (int64_t i = 0; i < nx; i++)
        d.v[TH_X][i] = round_to(MAMBA2_DTYPE_F16, i % 3 ? d.v[TH_X][i] : (i % 2 ? 20000.0 : -20000.0));
    for (int64_t h = 0; h < d.H; h++) d.v[TH_D][h] = 4.0;
    for (int id = 0; id < TH_OUT; id++) {
        int64_t shape[MAMBA2_MAX_RANK];
        int rank = th_ssd_shape(&c, &d, id, shape);
        if (rank && is_act(id) && d.v[id])
            for (int64_t i = 0; i < th_numel(rank, shape); i++)
                d.v[id][i] = round_to(MAMBA2_DTYPE_F16, d.v[id][i]);
    }
    th_begin("%-26s %-10s f16  out beyond 65504 -> inf", c.name, blabel);
    th_ssd_io ref;
    th_ssd_io_make(&ref, &c, &d, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    inst a;
    inst_make(&a, &c, &d, MAMBA2_DTYPE_F16);
    char msg[512];
    if (th_ssd_io_forward(ref_ctx, &ref, 0) != MAMBA2_STATUS_OK) {
        th_fail("oracle: %s", mamba2_last_error());
    } else if (inst_call(ctx, &a, 0, 1, msg, sizeof msg) != MAMBA2_STATUS_OK) {
        th_fail("%s", msg);
    } else {
        int64_t n;
        double *got = gt_read(&a.v[TH_OUT], &n);
        double *want = th_xmalloc((size_t)n * sizeof(double));
        th_ssd_io_read(&ref, TH_OUT, want);
        int64_t ninf = 0, bad = 0;
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            double w = fabs(want[i]);
            if (w >= 65520.0 * 1.001) { /* rounds to inf whatever the float32 error */
                ninf++;
                if (!(isinf(got[i]) && (got[i] > 0) == (want[i] > 0)) && bad++ < 3)
                    th_fail("out[%lld]: oracle %g, got %g (expected %sinf)", (long long)i,
                            want[i], got[i], want[i] < 0 ? "-" : "+");
            } else if (w <= 65504.0 * 0.999) {
                if (!isfinite(got[i]) && bad++ < 3)
                    th_fail("out[%lld]: oracle %g, got %g", (long long)i, want[i], got[i]);
                num += (got[i] - want[i]) * (got[i] - want[i]);
                den += want[i] * want[i];
            }
        }
        th_expect(ninf > 0, "no element of the oracle overflows: the case is wrong");
        th_note("%lld of %lld elements inf", (long long)ninf, (long long)n);
        th_metric("out_finite", den > 0 ? sqrt(num / den) : sqrt(num), TOL_HALF_OUT);
        free(got);
        free(want);
        if (ref.v[TH_FINAL].present) {
            double *gf = gt_read(&a.v[TH_FINAL], &n);
            double *wf = th_xmalloc((size_t)n * sizeof(double));
            th_ssd_io_read(&ref, TH_FINAL, wf);
            th_metric("final_state", th_nerr(gf, wf, n), TOL_HALF_OUT);
            free(gf);
            free(wf);
        }
    }
    inst_free(&a);
    th_ssd_io_free(&ref);
    th_ssd_data_free(&d);
    th_end();
}

/* The dtype rules with half activations (validation happens before any backend code, so one
 * backend shows them): activations share x's dtype, parameters and states are f32. Each wrong
 * call must fail with a message naming the tensor and leave every output untouched. */
static int outputs_untouched(const inst *in) {
    for (int id = TH_OUT; id < TH_NT; id++)
        if (in->v[id].present && memcmp(in->v[id].alloc, in->v[id].snap, in->v[id].bytes + 2 * TH_GUARD))
            return 0;
    return 1;
}

static void run_dtype_rules(mamba2_context_t *ctx, const char *blabel) {
    th_ssd_case c = {"dtype_rules", SH(1, 6, 2, 4, 4, 4, 1), .D_mode = 1, ALL_OPTS};
    th_ssd_data d;
    th_ssd_data_make(&d, &c);
    th_begin("%-26s %-10s      every tensor's dtype with bf16/f16 activations", c.name, blabel);
    static const struct {
        int id, backward;
        mamba2_dtype_t act, wrong;
    } bad[] = {
        {TH_A, 0, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_BF16},      {TH_D, 0, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F16},
        {TH_DTB, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F64},     {TH_INIT, 0, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F16},
        {TH_FINAL, 0, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_BF16},  {TH_DFINAL, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F16},
        {TH_DT, 0, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F16},      {TH_BM, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_BF16},
        {TH_CM, 0, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F32},       {TH_Z, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F32},
        {TH_OUT, 0, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F32},     {TH_DOUT, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F32},
        {TH_DX, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F32},      {TH_DDT, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_BF16},
        {TH_DBM, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F32},     {TH_DCM, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F32},
        {TH_DZ, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F16},      {TH_DA, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F16},
        {TH_DD, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_BF16},     {TH_DDTB, 1, MAMBA2_DTYPE_F16, MAMBA2_DTYPE_F16},
        {TH_DINIT, 1, MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_BF16},
    };
    char msg[512];
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        inst in;
        inst_make(&in, &c, &d, bad[k].act);
        in.v[bad[k].id].t.dtype = bad[k].wrong;
        for (int q = 0; q < 2; q++) { /* the call, then the workspace query */
            mamba2_status_t st = inst_call(ctx, &in, bad[k].backward, q, msg, sizeof msg);
            const char *e = mamba2_last_error();
            th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && th_has_word(e, th_tname[bad[k].id]) &&
                          strstr(e, "dtype") != NULL,
                      "%s %s with %s activations: got %s \"%s\"", th_tname[bad[k].id],
                      dname(bad[k].wrong), dname(bad[k].act), mamba2_status_string(st), e);
            th_expect(outputs_untouched(&in), "%s: a failing call wrote an output", th_tname[bad[k].id]);
        }
        inst_free(&in);
    }
    th_ssd_data_free(&d);
    th_end();
}

int main(int argc, char **argv) {
    const char *filter = NULL, *which = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) which = argv[++i];
        else filter = argv[i];
    }
    if (strcmp(which, "ref") && strcmp(which, "cpu") && strcmp(which, "all") &&
        strcmp(which, "opencl") && strcmp(which, "cuda")) {
        printf("usage: test_ssd_half [--backend ref|cpu|all|opencl|cuda] [-q] [name-substring]\n");
        return 2;
    }
    const int gpu = !strcmp(which, "opencl") || !strcmp(which, "cuda");
    if (gpu) { /* skip (77) only when there is no such device */
        mamba2_context_t *cl = NULL;
        if (mamba2_context_create(&cl, strcmp(which, "cuda") ? MAMBA2_BACKEND_OPENCL : MAMBA2_BACKEND_CUDA,
                                  1) == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
            printf("SKIP: %s\n", mamba2_last_error());
            return 77;
        }
        mamba2_context_destroy(cl);
    }
    /* the CPU backend runs with its default kernel set, the AVX2 one forced where the default
     * is wider (AVX-512), and the portable scalar one */
    static const char *blabel[6] = {"ref", "cpu", "cpu-avx2", "cpu-scalar", "opencl", "cuda"};
    static const char *bname[6] = {"ref", "cpu", "cpu", "cpu", "opencl", "cuda"};
    static const char *bisa[6] = {NULL, NULL, "avx2", "scalar", NULL, NULL};
    static const mamba2_backend_t bk[6] = {MAMBA2_BACKEND_REF, MAMBA2_BACKEND_CPU, MAMBA2_BACKEND_CPU,
                                           MAMBA2_BACKEND_CPU, MAMBA2_BACKEND_OPENCL,
                                           MAMBA2_BACKEND_CUDA};
    static const mamba2_dtype_t dts[2] = {MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F16};
    for (int bi = 0; bi < 6; bi++)
        for (int di = 0; di < 2; di++)
            for (int id = 0; id < TH_NT; id++) worst[bi][di][id] = -1.0;
    mamba2_context_t *probe = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    const int wide = strcmp(mamba2_context_get_isa(probe), "avx512") == 0;
    mamba2_context_destroy(probe);
    const int default_scalar = th_cpu_default_isa_is("scalar");
    mamba2_context_t *ref_ctx = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    for (int bi = 0; bi < 6; bi++) {
        if (strcmp(which, "all") ? strcmp(which, bname[bi]) != 0 : bi >= 4) continue;
        if (bi == 2 && !wide) continue; /* the AVX2 set is the default there */
        if (bi == 3 && default_scalar) continue; /* the default run ("cpu") is scalar */
        mamba2_context_t *c1 = th_ctx(bk[bi], 1, bisa[bi]), *c2 = th_ctx(bk[bi], 2, bisa[bi]);
        mamba2_context_t *c3 = th_ctx(bk[bi], 3, bisa[bi]);
        printf("backend %s (kernel set %s): %d cases x bf16, f16 vs reference f64 on the rounded "
               "inputs\n", blabel[bi], mamba2_context_get_isa(c2), NCASES);
        for (int di = 0; di < 2; di++)
            for (int ci = 0; ci < NCASES; ci++) {
                if (filter && !strstr(cases[ci].name, filter)) continue;
                /* reduced (the emulated CUDA device): the GPU backends skip the case made for
                 * the CPU backend's chunk-parallel split; long_L700_Q64 keeps a long sequence */
                if (th_reduced() && bi >= 4 && !filter && !strncmp(cases[ci].name, "chunked_", 8))
                    continue;
                run_case(&cases[ci], bi, c1, c2, c3, ref_ctx, di, dts[di], blabel[bi]);
            }
        if (!filter || strstr("f16_overflow", filter)) run_overflow(c2, ref_ctx, blabel[bi]);
        if (!filter || strstr("dtype_rules", filter)) run_dtype_rules(c2, blabel[bi]);
        for (int di = 0; di < 2; di++) {
            printf("worst %s %s:", blabel[bi], dname(dts[di]));
            for (int id = TH_OUT; id < TH_NT; id++)
                if (worst[bi][di][id] >= 0 || isnan(worst[bi][di][id]))
                    printf(" %s=%.2e", th_tname[id], worst[bi][di][id]);
                else
                    printf(" %s=-", th_tname[id]);
            printf("\n");
        }
        mamba2_context_destroy(c1);
        mamba2_context_destroy(c2);
        mamba2_context_destroy(c3);
    }
    mamba2_context_destroy(ref_ctx);
    return th_finish();
}
