/*
 * conv1d_errors.c — test_conv1d's error units: invalid arguments of conv1d forward, backward
 * and step give the right status and a message naming the tensor, and leave the outputs
 * untouched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv1d_inst.h"

static void expect_err(mamba2_status_t st, mamba2_status_t want, const char *w1, const char *w2) {
    const char *msg = mamba2_last_error();
    th_expect(st == want, "status %s, expected %s (message: %s)", mamba2_status_string(st),
              mamba2_status_string(want), msg);
    if (w1) th_expect(th_has_word(msg, w1), "message \"%s\" does not name %s", msg, w1);
    if (w2) th_expect(th_has_word(msg, w2), "message \"%s\" does not name %s", msg, w2);
    th_note("[%s]", msg);
}

/* The outputs of an instance still hold exactly what they held before the call. */
static void expect_untouched(const cv_inst *in) {
    for (int id = OUT; id < NT; id++)
        if (in->g[id].present)
            th_expect(memcmp(in->g[id].alloc, in->g[id].snap, in->g[id].bytes + 2 * TH_GUARD) == 0,
                      "%s was written by a failed call", tname[id]);
}

void test_errors(void) {
    mamba2_context_t *cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    cv_case c = {"err", 2, 7, 13, 4, 1, 1, 1, 1, 1, .seed = 501};
    cv_data d;
    data_make(&d, &c);
    cv_inst in;
    inst_make(&in, &c, &d, MAMBA2_DTYPE_F32, 0);
    mamba2_status_t st;
    const mamba2_status_t INV = MAMBA2_STATUS_INVALID_ARGUMENT;
    mamba2_tensor_t t;

#define FWD(ctx_) mamba2_conv1d_forward(ctx_, T_(&in, OUT), T_(&in, FINAL), T_(&in, X), T_(&in, WT), &in.opts)
#define BWD(ctx_) mamba2_conv1d_backward(ctx_, &in.grads, T_(&in, DOUT), T_(&in, DFINAL), T_(&in, X), T_(&in, WT), &in.opts, NULL, 0)

    th_begin("errors: valid call succeeds");
    expect_err(FWD(cpu), MAMBA2_STATUS_OK, NULL, NULL);
    expect_err(BWD(cpu), MAMBA2_STATUS_OK, NULL, NULL);
    for (int id = OUT; id < NT; id++)
        if (in.g[id].present) gt_arm(&in.g[id], NULL);

    th_begin("errors: NULL x / weight / out / ctx");
    st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, NULL, T_(&in, WT), &in.opts);
    expect_err(st, INV, "x", NULL);
    st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, T_(&in, X), NULL, &in.opts);
    expect_err(st, INV, "weight", NULL);
    st = mamba2_conv1d_forward(cpu, NULL, NULL, T_(&in, X), T_(&in, WT), &in.opts);
    expect_err(st, INV, "out", NULL);
    st = mamba2_conv1d_forward(NULL, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &in.opts);
    expect_err(st, INV, "ctx", NULL);
    st = mamba2_conv1d_backward(cpu, NULL, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT), &in.opts, NULL, 0);
    expect_err(st, INV, "grads", NULL);
    expect_untouched(&in);

    th_begin("errors: W out of 1..8");
    {
        const mamba2_tensor_t w0 = in.g[WT].t;
        int64_t sh[2] = {13, 9};
        float *buf = (float *)calloc(13 * 9, sizeof(float));
        in.g[WT].t = mamba2_tensor_make(buf, MAMBA2_DTYPE_F32, 2, sh);
        expect_err(FWD(cpu), INV, "weight", "W");
        sh[1] = 0;
        in.g[WT].t = mamba2_tensor_make(buf, MAMBA2_DTYPE_F32, 2, sh);
        expect_err(FWD(cpu), INV, "weight", "W");
        in.g[WT].t = w0;
        free(buf);
    }
    expect_untouched(&in);

    th_begin("errors: wrong rank / shape");
    t = in.g[X].t;
    in.g[X].t.rank = 2;
    expect_err(FWD(cpu), INV, "x", NULL);
    in.g[X].t = t;
    t = in.g[WT].t;
    in.g[WT].t.shape[0] = 12;
    expect_err(FWD(cpu), INV, "weight", NULL);
    in.g[WT].t = t;
    t = in.g[BIAS].t;
    in.g[BIAS].t.shape[0] = 14;
    expect_err(FWD(cpu), INV, "bias", NULL);
    in.g[BIAS].t = t;
    t = in.g[INIT].t;
    in.g[INIT].t.shape[2] = 4;
    expect_err(FWD(cpu), INV, "initial_conv_state", NULL);
    in.g[INIT].t = t;
    t = in.g[FINAL].t;
    in.g[FINAL].t.shape[0] = 3;
    expect_err(FWD(cpu), INV, "final_conv_state", NULL);
    in.g[FINAL].t = t;
    t = in.g[OUT].t;
    in.g[OUT].t.shape[1] = 6;
    expect_err(FWD(cpu), INV, "out", NULL);
    in.g[OUT].t = t;
    t = in.g[DOUT].t;
    in.g[DOUT].t.shape[2] = 12;
    expect_err(BWD(cpu), INV, "dout", NULL);
    in.g[DOUT].t = t;
    t = in.g[DFINAL].t;
    in.g[DFINAL].t.rank = 2;
    expect_err(BWD(cpu), INV, "dfinal_conv_state", NULL);
    in.g[DFINAL].t = t;
    t = in.g[DW].t;
    in.g[DW].t.shape[1] = 3;
    expect_err(BWD(cpu), INV, "dweight", NULL);
    in.g[DW].t = t;
    t = in.g[DINIT].t;
    in.g[DINIT].t.shape[1] = 12;
    expect_err(BWD(cpu), INV, "dinitial_conv_state", NULL);
    in.g[DINIT].t = t;
    expect_untouched(&in);

    th_begin("errors: last dim not contiguous, negative stride");
    t = in.g[X].t;
    in.g[X].t.stride[2] = 2;
    expect_err(FWD(cpu), INV, "x", NULL);
    in.g[X].t = t;
    t = in.g[OUT].t;
    in.g[OUT].t.stride[2] = 2;
    expect_err(FWD(cpu), INV, "out", NULL);
    in.g[OUT].t = t;
    t = in.g[X].t;
    in.g[X].t.stride[1] = -13;
    expect_err(FWD(cpu), INV, "x", NULL);
    in.g[X].t = t;
    expect_untouched(&in);

    th_begin("errors: dtypes");
    {
        cv_inst i64;
        inst_make(&i64, &c, &d, MAMBA2_DTYPE_F64, 0);
        st = mamba2_conv1d_forward(cpu, T_(&i64, OUT), NULL, T_(&i64, X), T_(&i64, WT), &i64.opts);
        expect_err(st, MAMBA2_STATUS_UNSUPPORTED, "x", NULL);
        st = mamba2_conv1d_forward(ref, T_(&i64, OUT), NULL, T_(&i64, X), T_(&i64, WT), &i64.opts);
        expect_err(st, MAMBA2_STATUS_OK, NULL, NULL);
        /* f32 x with f64 weight */
        st = mamba2_conv1d_forward(ref, T_(&in, OUT), NULL, T_(&in, X), T_(&i64, WT), &in.opts);
        expect_err(st, INV, "weight", NULL);
        /* f32 x with f64 initial state */
        mamba2_conv1d_options_t o = in.opts;
        o.initial_conv_state = T_(&i64, INIT);
        st = mamba2_conv1d_forward(ref, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &o);
        expect_err(st, INV, "initial_conv_state", NULL);
        t = in.g[X].t;
        in.g[X].t.dtype = MAMBA2_DTYPE_I32;
        expect_err(FWD(cpu), INV, "x", NULL);
        in.g[X].t.dtype = MAMBA2_DTYPE_BF16;
        expect_err(FWD(cpu), MAMBA2_STATUS_UNSUPPORTED, "x", NULL);
        in.g[X].t = t;
        inst_free(&i64);
    }
    expect_untouched(&in);

    th_begin("errors: outputs overlapping inputs or each other");
    t = in.g[OUT].t;
    in.g[OUT].t.data = in.g[X].t.data;
    expect_err(FWD(cpu), INV, "out", "x");
    in.g[OUT].t = t;
    t = in.g[FINAL].t;
    in.g[FINAL].t.data = in.g[INIT].t.data;
    expect_err(FWD(cpu), INV, "final_conv_state", "initial_conv_state");
    in.g[FINAL].t = t;
    t = in.g[DX].t;
    in.g[DX].t.data = in.g[DOUT].t.data;
    expect_err(BWD(cpu), INV, "dx", "dout");
    in.g[DX].t = t;
    t = in.g[DB].t;
    in.g[DB].t.data = in.g[DW].t.data;
    expect_err(BWD(cpu), INV, "dbias", "dweight");
    in.g[DB].t = t;
    t = in.g[OUT].t;
    in.g[OUT].t.stride[1] = 1; /* rows overlapping each other */
    expect_err(FWD(cpu), INV, "out", NULL);
    in.g[OUT].t = t;
    expect_untouched(&in);

    th_begin("errors: options");
    {
        mamba2_conv1d_options_t o = in.opts;
        o.activation = (mamba2_activation_t)7;
        st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &o);
        expect_err(st, INV, "activation", NULL);
        o = in.opts;
        o.bias = NULL;
        st = mamba2_conv1d_backward(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT), &o, NULL, 0);
        expect_err(st, INV, "dbias", NULL);
        o = in.opts;
        o.initial_conv_state = NULL;
        st = mamba2_conv1d_backward(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT), &o, NULL, 0);
        expect_err(st, INV, "dinitial_conv_state", NULL);
        size_t need = 0;
        st = mamba2_conv1d_backward_workspace_size(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X),
                                                   T_(&in, WT), &in.opts, NULL);
        expect_err(st, INV, "workspace_size", NULL);
        st = mamba2_conv1d_backward_workspace_size(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X),
                                                   T_(&in, WT), &in.opts, &need);
        expect_err(st, MAMBA2_STATUS_OK, NULL, NULL);
        th_expect(need > 0, "the CPU backward with dweight needs a workspace");
        unsigned char small[16];
        st = mamba2_conv1d_backward(cpu, &in.grads, T_(&in, DOUT), NULL, T_(&in, X), T_(&in, WT),
                                    &in.opts, small, need > 1 ? need - 1 : 0);
        expect_err(st, MAMBA2_STATUS_WORKSPACE_TOO_SMALL, "workspace", NULL);
    }
    expect_untouched(&in);

    th_begin("errors: cu_seqlens");
    {
        int32_t cu[4] = {0, 3, 5, 7};
        int64_t sh[1] = {4};
        mamba2_tensor_t cut = mamba2_tensor_make(cu, MAMBA2_DTYPE_I32, 1, sh);
        mamba2_conv1d_options_t o = in.opts;
        o.cu_seqlens = &cut;
        o.initial_conv_state = NULL;
        /* B = 2 */
        st = mamba2_conv1d_forward(cpu, T_(&in, OUT), NULL, T_(&in, X), T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        /* B = 1 views of x / out */
        mamba2_tensor_t x1 = in.g[X].t, o1 = in.g[OUT].t;
        x1.shape[0] = 1;
        o1.shape[0] = 1;
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, MAMBA2_STATUS_OK, NULL, NULL);
        cu[3] = 6; /* does not end at L */
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", "L");
        cu[3] = 7;
        cu[2] = 2; /* decreasing */
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        cu[2] = 5;
        cu[0] = 1;
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        cu[0] = 0;
        cut.dtype = MAMBA2_DTYPE_F32;
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "cu_seqlens", NULL);
        cut.dtype = MAMBA2_DTYPE_I32;
        /* states must have nseq = 3 rows, not B */
        o.initial_conv_state = T_(&in, INIT); /* [2,13,3] */
        st = mamba2_conv1d_forward(cpu, &o1, NULL, &x1, T_(&in, WT), &o);
        expect_err(st, INV, "initial_conv_state", "nseq");
    }
    for (int id = OUT; id < NT; id++)
        if (in.g[id].present) gt_arm(&in.g[id], NULL);

    th_begin("errors: conv1d_step");
    {
        const int64_t B = 3, S = 4, C = 13, W = 4;
        float xb[3 * 13], ob[3 * 13], cb[4 * 13 * 3], wb[13 * 4];
        memset(xb, 0, sizeof xb);
        memset(cb, 0, sizeof cb);
        memset(wb, 0, sizeof wb);
        for (size_t i = 0; i < sizeof ob / sizeof ob[0]; i++) ob[i] = NAN;
        const int64_t shx[2] = {B, C}, shc[3] = {S, C, W - 1}, shw[2] = {C, W}, shi[1] = {B};
        mamba2_tensor_t xt = mamba2_tensor_make(xb, MAMBA2_DTYPE_F32, 2, shx);
        mamba2_tensor_t ot = mamba2_tensor_make(ob, MAMBA2_DTYPE_F32, 2, shx);
        mamba2_tensor_t ct = mamba2_tensor_make(cb, MAMBA2_DTYPE_F32, 3, shc);
        mamba2_tensor_t wt = mamba2_tensor_make(wb, MAMBA2_DTYPE_F32, 2, shw);
        int32_t ix[3] = {2, -1, 0};
        mamba2_tensor_t it = mamba2_tensor_make(ix, MAMBA2_DTYPE_I32, 1, shi);
        mamba2_conv1d_step_options_t so = mamba2_conv1d_step_options_default();
        so.state_indices = &it;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), MAMBA2_STATUS_OK, NULL, NULL);
        th_expect(isnan(ob[C]), "padding row 1 of out was written");
        ix[2] = 4; /* >= S */
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", "S");
        ix[2] = 2; /* duplicate */
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", NULL);
        ix[2] = 0;
        it.dtype = MAMBA2_DTYPE_F32;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", NULL);
        it.dtype = MAMBA2_DTYPE_I32;
        it.shape[0] = 2;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "state_indices", NULL);
        it.shape[0] = 3;
        /* identity slots need B <= S */
        mamba2_tensor_t c2 = ct;
        c2.shape[0] = 2;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, NULL), INV, "conv_cache", "B");
        c2 = ct;
        c2.shape[2] = 2;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, &so), INV, "conv_cache", NULL);
        expect_err(mamba2_conv1d_step(cpu, &ot, NULL, &xt, &wt, &so), INV, "conv_cache", NULL);
        /* out overlapping the cache or x; the cache overlapping x */
        mamba2_tensor_t o2 = ot;
        o2.data = cb;
        expect_err(mamba2_conv1d_step(cpu, &o2, &ct, &xt, &wt, &so), INV, "out", "conv_cache");
        o2.data = xb;
        expect_err(mamba2_conv1d_step(cpu, &o2, &ct, &xt, &wt, &so), INV, "out", "x");
        c2 = ct;
        c2.data = xb;
        c2.shape[0] = 1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, NULL), INV, "conv_cache", "B");
        ix[0] = 0; ix[1] = -1; ix[2] = -1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &c2, &xt, &wt, &so), INV, "conv_cache", "x");
        ix[0] = 2; ix[2] = 0;
        /* out of another rank than x */
        const int64_t sho[3] = {B, 1, C};
        o2 = mamba2_tensor_make(ob, MAMBA2_DTYPE_F32, 3, sho);
        expect_err(mamba2_conv1d_step(cpu, &o2, &ct, &xt, &wt, &so), INV, "out", NULL);
        /* x of rank 1, W = 9 */
        mamba2_tensor_t x1 = xt;
        x1.rank = 1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &x1, &wt, &so), INV, "x", NULL);
        float w9[13 * 9];
        const int64_t shw9[2] = {C, 9};
        mamba2_tensor_t w9t = mamba2_tensor_make(w9, MAMBA2_DTYPE_F32, 2, shw9);
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &w9t, &so), INV, "weight", "W");
        so.activation = (mamba2_activation_t)-1;
        expect_err(mamba2_conv1d_step(cpu, &ot, &ct, &xt, &wt, &so), INV, "activation", NULL);
    }
#undef FWD
#undef BWD
    th_end();
    inst_free(&in);
    data_free(&d);
    mamba2_context_destroy(cpu);
    mamba2_context_destroy(ref);
}
