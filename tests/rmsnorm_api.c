/*
 * rmsnorm_api.c — test_rmsnorm's api_* units: invalid arguments of the gated RMSNorm give the
 * right status, a message naming the tensor, and no output touched.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rmsnorm_inst.h"

/* ------------------------------------------------------------- invalid arguments --- */

typedef struct api_env {
    float x[6 * 20], z[6 * 20], w[20], b[20], out[6 * 20], rstd[6 * 4], dout[6 * 20];
    float dx[6 * 20], dz[6 * 20], dw[20], db[20];
    double xd[6 * 20], wd[20], outd[6 * 20];
    mamba2_tensor_t tx, tz, tw, tb, tout, trstd, tdout, tdx, tdz, tdw, tdb;
} api_env;

static void api_env_init(api_env *e) {
    const int64_t md[2] = {6, 20}, d1[1] = {20}, mg[2] = {6, 4};
    for (int i = 0; i < 120; i++) e->x[i] = e->z[i] = e->dout[i] = (float)((i % 7) - 3) * 0.5f;
    for (int i = 0; i < 20; i++) e->w[i] = e->b[i] = 1.0f;
    memset(e->out, 0x5A, sizeof e->out);
    memset(e->dx, 0x5A, sizeof e->dx);
    memset(e->dw, 0x5A, sizeof e->dw);
    e->tx = mamba2_tensor_make(e->x, MAMBA2_DTYPE_F32, 2, md);
    e->tz = mamba2_tensor_make(e->z, MAMBA2_DTYPE_F32, 2, md);
    e->tw = mamba2_tensor_make(e->w, MAMBA2_DTYPE_F32, 1, d1);
    e->tb = mamba2_tensor_make(e->b, MAMBA2_DTYPE_F32, 1, d1);
    e->tout = mamba2_tensor_make(e->out, MAMBA2_DTYPE_F32, 2, md);
    e->trstd = mamba2_tensor_make(e->rstd, MAMBA2_DTYPE_F32, 2, mg);
    e->tdout = mamba2_tensor_make(e->dout, MAMBA2_DTYPE_F32, 2, md);
    e->tdx = mamba2_tensor_make(e->dx, MAMBA2_DTYPE_F32, 2, md);
    e->tdz = mamba2_tensor_make(e->dz, MAMBA2_DTYPE_F32, 2, md);
    e->tdw = mamba2_tensor_make(e->dw, MAMBA2_DTYPE_F32, 1, d1);
    e->tdb = mamba2_tensor_make(e->db, MAMBA2_DTYPE_F32, 1, d1);
}

/* The call failed with `want`, its message names every word in `words` (space-separated),
 * and out/dx/dw are untouched. */
static void api_expect(const char *unit, mamba2_status_t st, mamba2_status_t want, const char *words,
                       const api_env *e) {
    th_begin("api_%s", unit);
    const char *msg = mamba2_last_error();
    th_expect(st == want, "status %s, expected %s (%s)", mamba2_status_string(st), mamba2_status_string(want), msg);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", words);
    for (char *w = strtok(buf, " "); w; w = strtok(NULL, " "))
        th_expect(th_has_word(msg, w) || strstr(msg, w) != NULL, "message \"%s\" lacks \"%s\"", msg, w);
    unsigned char pat[sizeof e->out];
    memset(pat, 0x5A, sizeof pat);
    th_expect(!memcmp(e->out, pat, sizeof e->out) && !memcmp(e->dx, pat, sizeof e->dx) &&
                  !memcmp(e->dw, pat, sizeof e->dw),
              "an output was written by a failing call");
    th_note("msg=\"%s\"", msg);
    th_end();
}

void test_api(mamba2_context_t *cpu, mamba2_context_t *ref) {
    api_env E, *e = &E;
    api_env_init(e);
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.group_size = 5;
    mamba2_rmsnorm_gated_grads_t g = {0, &e->tdx, &e->tdz, &e->tdw, &e->tdb};
    mamba2_status_t st;
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT;

#define FWD(ctx_, out_, rstd_, x_, z_, w_, b_, o_) \
    mamba2_rmsnorm_gated_forward(ctx_, out_, rstd_, x_, z_, w_, b_, o_, NULL, 0)
#define BWD(ctx_, g_, dout_, x_, z_, w_, b_, r_, o_) \
    mamba2_rmsnorm_gated_backward(ctx_, g_, dout_, x_, z_, w_, b_, r_, o_, NULL, 0)

    /* sanity: the valid call succeeds on both backends (then re-arm the outputs) */
    th_begin("api_valid_call");
    th_expect(FWD(cpu, &e->tout, &e->trstd, &e->tx, &e->tz, &e->tw, &e->tb, &o) == MAMBA2_STATUS_OK, "cpu forward: %s", mamba2_last_error());
    th_expect(BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, &e->trstd, &o) == MAMBA2_STATUS_OK, "cpu backward: %s", mamba2_last_error());
    th_expect(FWD(ref, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, NULL) == MAMBA2_STATUS_OK, "ref forward: %s", mamba2_last_error());
    th_end();
    api_env_init(e);

    st = FWD(NULL, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &o);
    api_expect("ctx_null", st, INV, "ctx", e);
    st = FWD(cpu, &e->tout, NULL, NULL, NULL, &e->tw, NULL, &o);
    api_expect("x_null", st, INV, "x NULL", e);
    st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, NULL, NULL, &o);
    api_expect("weight_null", st, INV, "weight NULL", e);
    st = FWD(cpu, NULL, NULL, &e->tx, NULL, &e->tw, NULL, &o);
    api_expect("out_null", st, INV, "out NULL", e);
    st = BWD(cpu, &g, NULL, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o);
    api_expect("dout_null", st, INV, "dout NULL", e);
    st = BWD(cpu, NULL, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o);
    api_expect("grads_null", st, INV, "grads NULL", e);
    {
        size_t *null_size = NULL;
        st = mamba2_rmsnorm_gated_forward_workspace_size(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &o, null_size);
        api_expect("workspace_size_null", st, INV, "workspace_size", e);
    }

    /* ranks and shapes: expected vs actual */
    {
        mamba2_tensor_t t = e->tx;
        t.rank = 3;
        t.shape[2] = 1;
        t.stride[2] = 1;
        st = FWD(cpu, &e->tout, NULL, &t, NULL, &e->tw, NULL, &o);
        api_expect("x_rank", st, INV, "x rank", e);
    }
    {
        const int64_t sh[2] = {6, 21};
        float big[6 * 21];
        mamba2_tensor_t t = mamba2_tensor_make(big, MAMBA2_DTYPE_F32, 2, sh);
        st = FWD(cpu, &e->tout, NULL, &e->tx, &t, &e->tw, NULL, &o);
        api_expect("z_shape", st, INV, "z [6,21] [6,20]", e);
    }
    {
        mamba2_tensor_t t = e->tw;
        t.shape[0] = 19;
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &t, NULL, &o);
        api_expect("weight_shape", st, INV, "weight [19] [20]", e);
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, &t, &o);
        api_expect("bias_shape", st, INV, "bias [19] [20]", e);
        st = BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, &e->tout, &o);
        api_expect("rstd_in_shape", st, INV, "rstd [6,20] [6,4]", e);
    }
    {
        mamba2_tensor_t t = e->trstd;
        t.shape[1] = 5;
        st = FWD(cpu, &e->tout, &t, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("rstd_shape", st, INV, "rstd [6,5] [6,4]", e);
    }
    {
        mamba2_tensor_t t = e->tdout;
        t.shape[0] = 5;
        st = BWD(cpu, &g, &t, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o);
        api_expect("dout_shape", st, INV, "dout [5,20] [6,20]", e);
    }

    /* options */
    {
        mamba2_rmsnorm_gated_options_t b = o;
        b.group_size = 6;
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &b);
        api_expect("group_size_not_dividing", st, INV, "group_size 6 D=20", e);
        b.group_size = -4;
        st = BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &b);
        api_expect("group_size_negative", st, INV, "group_size", e);
        b = o;
        b.eps = -1e-6;
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &b);
        api_expect("eps_negative", st, INV, "eps", e);
        b.eps = NAN;
        st = FWD(ref, &e->tout, NULL, &e->tx, NULL, &e->tw, NULL, &b);
        api_expect("eps_nan", st, INV, "eps", e);
        b.eps = INFINITY;
        st = BWD(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &b);
        api_expect("eps_inf", st, INV, "eps", e);
    }

    /* strides */
    {
        const int64_t sh[2] = {6, 10}, sd[2] = {20, 2};
        mamba2_tensor_t t = mamba2_tensor_make_strided(e->x, MAMBA2_DTYPE_F32, 2, sh, sd);
        mamba2_tensor_t ot = mamba2_tensor_make_strided(e->out, MAMBA2_DTYPE_F32, 2, sh, sd);
        mamba2_tensor_t wt = e->tw;
        wt.shape[0] = 10;
        st = FWD(cpu, &ot, NULL, &t, NULL, &wt, NULL, NULL);
        api_expect("x_last_dim_not_contiguous", st, INV, "x contiguous", e);
        mamba2_tensor_t w2 = e->tw;
        w2.stride[0] = 2;
        w2.shape[0] = 10;
        mamba2_tensor_t xs = e->tx;
        xs.shape[1] = 10;
        mamba2_tensor_t os = e->tout;
        os.shape[1] = 10;
        st = FWD(cpu, &os, NULL, &xs, NULL, &w2, NULL, NULL);
        api_expect("weight_not_contiguous", st, INV, "weight contiguous", e);
        mamba2_tensor_t o2 = e->tout;
        o2.stride[0] = 10; /* rows of 20 overlapping each other */
        st = FWD(cpu, &o2, NULL, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("out_self_overlap", st, INV, "out overlap", e);
    }

    /* overlaps */
    {
        mamba2_tensor_t alias = e->tout;
        alias.data = e->x;
        st = FWD(cpu, &alias, NULL, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("out_overlaps_x", st, INV, "out x overlaps", e);
        alias = e->tout;
        alias.data = e->z;
        st = FWD(ref, &alias, NULL, &e->tx, &e->tz, &e->tw, NULL, &o);
        api_expect("out_overlaps_z", st, INV, "out z overlaps", e);
        mamba2_tensor_t dxa = e->tdx;
        dxa.data = e->dout + 1;
        mamba2_rmsnorm_gated_grads_t g2 = {0, &dxa, NULL, NULL, NULL};
        st = BWD(cpu, &g2, &e->tdout, &e->tx, NULL, &e->tw, NULL, NULL, &o);
        api_expect("dx_overlaps_dout", st, INV, "dx dout overlaps", e);
        mamba2_tensor_t dza = e->tdz;
        dza.data = e->dx;
        mamba2_rmsnorm_gated_grads_t g3 = {0, &e->tdx, &dza, NULL, NULL};
        st = BWD(cpu, &g3, &e->tdout, &e->tx, &e->tz, &e->tw, NULL, NULL, &o);
        api_expect("dz_overlaps_dx", st, INV, "dz dx overlaps", e);
        mamba2_tensor_t ra = e->trstd;
        ra.data = e->w;
        st = FWD(cpu, &e->tout, &ra, &e->tx, NULL, &e->tw, NULL, &o);
        api_expect("rstd_overlaps_weight", st, INV, "rstd weight overlaps", e);
    }

    /* gradients without their input */
    {
        mamba2_rmsnorm_gated_grads_t g2 = {0, &e->tdx, &e->tdz, NULL, NULL};
        st = BWD(cpu, &g2, &e->tdout, &e->tx, NULL, &e->tw, NULL, NULL, &o);
        api_expect("dz_without_z", st, INV, "dz z", e);
        mamba2_rmsnorm_gated_grads_t g3 = {0, &e->tdx, NULL, &e->tdw, &e->tdb};
        st = BWD(ref, &g3, &e->tdout, &e->tx, NULL, &e->tw, NULL, NULL, &o);
        api_expect("dbias_without_bias", st, INV, "dbias bias", e);
    }

    /* dtypes */
    {
        const int64_t md[2] = {6, 20}, d1[1] = {20};
        mamba2_tensor_t xd = mamba2_tensor_make(e->xd, MAMBA2_DTYPE_F64, 2, md);
        mamba2_tensor_t wd = mamba2_tensor_make(e->wd, MAMBA2_DTYPE_F64, 1, d1);
        mamba2_tensor_t od = mamba2_tensor_make(e->outd, MAMBA2_DTYPE_F64, 2, md);
        st = FWD(cpu, &od, NULL, &xd, NULL, &wd, NULL, &o);
        api_expect("f64_on_cpu", st, MAMBA2_STATUS_UNSUPPORTED, "f64 cpu", e);
        mamba2_tensor_t xb = e->tx;
        xb.dtype = MAMBA2_DTYPE_BF16;
        st = FWD(ref, &e->tout, NULL, &xb, NULL, &e->tw, NULL, &o);
        api_expect("bf16_on_ref", st, MAMBA2_STATUS_UNSUPPORTED, "bf16 ref", e);
        mamba2_tensor_t xi = e->tx;
        xi.dtype = MAMBA2_DTYPE_I32;
        st = FWD(ref, &e->tout, NULL, &xi, NULL, &e->tw, NULL, &o);
        api_expect("i32_x", st, INV, "x i32", e);
        st = FWD(cpu, &e->tout, NULL, &e->tx, NULL, &wd, NULL, &o);
        api_expect("weight_f64_with_f32_x", st, INV, "weight f64 f32", e);
        st = FWD(ref, &e->tout, NULL, &xd, NULL, &wd, NULL, &o);
        api_expect("out_f32_with_f64_x", st, INV, "out f32 f64", e);
    }

    /* workspace too small */
    {
        size_t need = 0;
        st = mamba2_rmsnorm_gated_backward_workspace_size(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o, &need);
        th_begin("api_workspace_query");
        th_expect(st == MAMBA2_STATUS_OK && need > 0, "backward workspace query: %s, %zu bytes", mamba2_status_string(st), need);
        th_end();
        unsigned char small[64];
        st = mamba2_rmsnorm_gated_backward(cpu, &g, &e->tdout, &e->tx, &e->tz, &e->tw, &e->tb, NULL, &o, small,
                                           need ? need - 1 : 0);
        api_expect("workspace_too_small", st, MAMBA2_STATUS_WORKSPACE_TOO_SMALL, "workspace", e);
    }
#undef FWD
#undef BWD
}
