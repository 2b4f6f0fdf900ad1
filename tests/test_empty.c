/*
 * test_empty.c — empty tensors with NULL data, which validation accepts (a tensor with no
 * elements needs no memory): every op on the reference and each CPU kernel set succeeds and
 * does no pointer arithmetic on the NULLs (the sanitizer build catches NULL + offset).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static mamba2_tensor_t tn(void *p, int r, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t s[4] = {a, b, c, d};
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, r, s);
}
static mamba2_tensor_t t5(void *p, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e) {
    const int64_t s[5] = {a, b, c, d, e};
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, 5, s);
}

#define CHECK(what, call)                                                                  \
    do {                                                                                   \
        mamba2_status_t st_ = (call);                                                      \
        th_expect(st_ == MAMBA2_STATUS_OK, "%s: %s: %s", what, mamba2_status_string(st_),   \
                  mamba2_last_error());                                                    \
    } while (0)

static void conv_cases(mamba2_context_t *ctx) {
    float w[4] = {1, 2, 3, 4}, fin[3] = {9, 9, 9}, bias[1] = {0.5f};
    int32_t cu[2] = {0, 0}, cu3[4] = {0, 0, 0, 0};
    mamba2_tensor_t x = tn(NULL, 3, 1, 0, 1, 0), out = tn(NULL, 3, 1, 0, 1, 0),
                    wt = tn(w, 2, 1, 4, 0, 0), fs = tn(fin, 3, 1, 1, 3, 0), b = tn(bias, 1, 1, 0, 0, 0);
    int64_t n2 = 2, n4 = 4;
    mamba2_tensor_t tcu = mamba2_tensor_make(cu, MAMBA2_DTYPE_I32, 1, &n2),
                    tcu3 = mamba2_tensor_make(cu3, MAMBA2_DTYPE_I32, 1, &n4);
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.bias = &b;
    CHECK("conv1d_forward L=0", mamba2_conv1d_forward(ctx, &out, &fs, &x, &wt, &o));
    o.cu_seqlens = &tcu;
    CHECK("conv1d_forward L=0 varlen", mamba2_conv1d_forward(ctx, &out, &fs, &x, &wt, &o));
    float fin3[9];
    mamba2_tensor_t fs3 = tn(fin3, 3, 3, 1, 3, 0);
    o.cu_seqlens = &tcu3;
    CHECK("conv1d_forward L=0 varlen nseq=3", mamba2_conv1d_forward(ctx, &out, &fs3, &x, &wt, &o));
    o.cu_seqlens = NULL;
    /* backward with L = 0 */
    float dw[4], db[1];
    mamba2_tensor_t dx = tn(NULL, 3, 1, 0, 1, 0), tdw = tn(dw, 2, 1, 4, 0, 0), tdb = tn(db, 1, 1, 0, 0, 0);
    mamba2_conv1d_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = &dx;
    g.dweight = &tdw;
    g.dbias = &tdb;
    CHECK("conv1d_backward L=0", mamba2_conv1d_backward(ctx, &g, &out, NULL, &x, &wt, &o, NULL, 0));
    o.cu_seqlens = &tcu;
    CHECK("conv1d_backward L=0 varlen", mamba2_conv1d_backward(ctx, &g, &out, NULL, &x, &wt, &o, NULL, 0));
    /* W = 1: the conv states [S,C,0] are empty (NULL data) */
    float w1[2] = {2, 3}, xs[4] = {1, 2, 3, 4}, ys[4];
    mamba2_tensor_t wt1 = tn(w1, 2, 2, 1, 0, 0), cache = tn(NULL, 3, 2, 2, 0, 0),
                    sx = tn(xs, 2, 2, 2, 0, 0), sy = tn(ys, 2, 2, 2, 0, 0);
    mamba2_conv1d_step_options_t so = mamba2_conv1d_step_options_default();
    CHECK("conv1d_step W=1 (empty cache)", mamba2_conv1d_step(ctx, &sy, &cache, &sx, &wt1, &so));
    th_expect(ys[0] == 2 && ys[1] == 6 && ys[2] == 6 && ys[3] == 12, "conv1d_step W=1 gives %g %g %g %g",
              ys[0], ys[1], ys[2], ys[3]);
    /* an empty cache of zero slots with every row padding */
    int32_t pad[2] = {-1, -1};
    mamba2_tensor_t tpad = mamba2_tensor_make(pad, MAMBA2_DTYPE_I32, 1, &n2),
                    cache0 = tn(NULL, 3, 0, 2, 0, 0);
    so.state_indices = &tpad;
    CHECK("conv1d_step S=0 all padding", mamba2_conv1d_step(ctx, &sy, &cache0, &sx, &wt1, &so));
    /* T = 0 tokens */
    mamba2_tensor_t sx0 = tn(NULL, 3, 2, 0, 2, 0), sy0 = tn(NULL, 3, 2, 0, 2, 0);
    so.state_indices = NULL;
    float cw[4] = {1, 1, 1, 1}, cc[2 * 2 * 3];
    memset(cc, 0, sizeof cc);
    mamba2_tensor_t cwt = tn(cw, 2, 2, 2, 0, 0), ccache = tn(cc, 3, 2, 2, 1, 0);
    CHECK("conv1d_step T=0", mamba2_conv1d_step(ctx, &sy0, &ccache, &sx0, &cwt, &so));
    /* the forward and backward with W = 1 and empty conv states */
    mamba2_tensor_t x1 = tn(xs, 3, 1, 2, 2, 0), o1 = tn(ys, 3, 1, 2, 2, 0), e1 = tn(NULL, 3, 1, 2, 0, 0);
    mamba2_conv1d_options_t o2 = mamba2_conv1d_options_default();
    o2.initial_conv_state = &e1;
    float fe[1];
    mamba2_tensor_t fe1 = tn(fe, 3, 1, 2, 0, 0);
    fe1.data = NULL;
    CHECK("conv1d_forward W=1 empty states", mamba2_conv1d_forward(ctx, &o1, &fe1, &x1, &wt1, &o2));
    float dx1[4], dw1[2];
    mamba2_tensor_t tdx1 = tn(dx1, 3, 1, 2, 2, 0), tdw1 = tn(dw1, 2, 2, 1, 0, 0);
    mamba2_conv1d_grads_t g1;
    memset(&g1, 0, sizeof g1);
    g1.dx = &tdx1;
    g1.dweight = &tdw1;
    mamba2_tensor_t de = e1; /* [1,2,0], NULL data */
    g1.dinitial_conv_state = &de;
    CHECK("conv1d_backward W=1", mamba2_conv1d_backward(ctx, &g1, &o1, &fe1, &x1, &wt1, &o2, NULL, 0));
}

static void ssd_cases(mamba2_context_t *ctx) {
    float A[2] = {-1, -0.5f}, fin[2 * 2 * 3], init[2 * 2 * 3];
    memset(init, 0, sizeof init);
    mamba2_tensor_t x = tn(NULL, 4, 1, 0, 2, 2), dt = tn(NULL, 3, 1, 0, 2, 0), tA = tn(A, 1, 2, 0, 0, 0),
                    Bm = tn(NULL, 4, 1, 0, 1, 3), Cm = tn(NULL, 4, 1, 0, 1, 3),
                    out = tn(NULL, 4, 1, 0, 2, 2), fs = tn(fin, 4, 1, 2, 2, 3), is = tn(init, 4, 1, 2, 2, 3);
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.initial_state = &is;
    CHECK("ssd_forward L=0", mamba2_ssd_forward(ctx, &out, NULL, &fs, &x, &dt, &tA, &Bm, &Cm, &o, NULL, 0));
    int32_t cu[2] = {0, 0};
    int64_t n2 = 2;
    mamba2_tensor_t tcu = mamba2_tensor_make(cu, MAMBA2_DTYPE_I32, 1, &n2);
    o.cu_seqlens = &tcu;
    CHECK("ssd_forward L=0 varlen", mamba2_ssd_forward(ctx, &out, NULL, &fs, &x, &dt, &tA, &Bm, &Cm, &o, NULL, 0));
    float dA[2], di[12];
    mamba2_tensor_t tdA = tn(dA, 1, 2, 0, 0, 0), tdi = tn(di, 4, 1, 2, 2, 3), dx = tn(NULL, 4, 1, 0, 2, 2);
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = &dx;
    g.dA = &tdA;
    g.dinitial_state = &tdi;
    CHECK("ssd_backward L=0 varlen", mamba2_ssd_backward(ctx, &g, &out, &fs, &x, &dt, &tA, &Bm, &Cm, NULL, &o, NULL, 0));
    o.cu_seqlens = NULL;
    CHECK("ssd_backward L=0", mamba2_ssd_backward(ctx, &g, &out, &fs, &x, &dt, &tA, &Bm, &Cm, NULL, &o, NULL, 0));
    /* the staged stages with L = 0 (K = 0) */
    mamba2_tensor_t dto = tn(NULL, 4, 1, 2, 0, 8), cs = tn(NULL, 4, 1, 2, 0, 8),
                    CB = t5(NULL, 1, 0, 1, 8, 8), st = t5(NULL, 1, 0, 2, 2, 3), ss = t5(NULL, 1, 0, 2, 2, 3);
    mamba2_ssd_chunked_options_t co = mamba2_ssd_chunked_options_default();
    co.chunk_size = 8;
    CHECK("chunk_cumsum L=0", mamba2_ssd_chunk_cumsum(ctx, &dto, &cs, &dt, &tA, &co));
    CHECK("bmm_chunk L=0", mamba2_ssd_bmm_chunk(ctx, &CB, &Bm, &Cm, &co));
    CHECK("chunk_state L=0", mamba2_ssd_chunk_state(ctx, &st, &x, &Bm, &dto, &cs, &co));
    CHECK("state_passing L=0", mamba2_ssd_state_passing(ctx, &ss, &fs, &st, &cs, &co));
    CHECK("chunk_scan L=0", mamba2_ssd_chunk_scan(ctx, &out, &CB, &x, &dto, &cs, &Cm, &ss, &co));
    /* the decode step with T = 0, and with an empty cache of all-padding rows */
    float cache[12];
    memset(cache, 0, sizeof cache);
    mamba2_tensor_t tc = tn(cache, 4, 1, 2, 2, 3);
    mamba2_ssd_step_options_t so = mamba2_ssd_step_options_default();
    CHECK("ssd_step T=0", mamba2_ssd_step(ctx, &tc, &out, NULL, &x, &dt, &tA, &Bm, &Cm, &so));
    float sx[4] = {1, 1, 1, 1}, sdt[2] = {1, 1}, sb[3] = {1, 1, 1}, sy[4];
    mamba2_tensor_t tsx = tn(sx, 3, 1, 2, 2, 0), tsdt = tn(sdt, 2, 1, 2, 0, 0), tsb = tn(sb, 3, 1, 1, 3, 0),
                    tsy = tn(sy, 3, 1, 2, 2, 0), tc0 = tn(NULL, 4, 0, 2, 2, 3);
    int32_t pad[1] = {-1};
    int64_t n1 = 1;
    mamba2_tensor_t tpad = mamba2_tensor_make(pad, MAMBA2_DTYPE_I32, 1, &n1);
    so.state_indices = &tpad;
    CHECK("ssd_step S=0 all padding", mamba2_ssd_step(ctx, &tc0, &tsy, NULL, &tsx, &tsdt, &tA, &tsb, &tsb, &so));
}

static void rms_cases(mamba2_context_t *ctx) {
    float w[4] = {1, 1, 1, 1}, dw[4], db[4];
    mamba2_tensor_t x = tn(NULL, 2, 0, 4, 0, 0), out = tn(NULL, 2, 0, 4, 0, 0), r = tn(NULL, 2, 0, 2, 0, 0),
                    tw = tn(w, 1, 4, 0, 0, 0), tdw = tn(dw, 1, 4, 0, 0, 0), tdb = tn(db, 1, 4, 0, 0, 0);
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.group_size = 2;
    CHECK("rmsnorm_forward M=0", mamba2_rmsnorm_gated_forward(ctx, &out, &r, &x, &x, &tw, &tw, &o, NULL, 0));
    mamba2_rmsnorm_gated_grads_t g;
    memset(&g, 0, sizeof g);
    mamba2_tensor_t dx = x;
    g.dx = &dx;
    g.dweight = &tdw;
    g.dbias = &tdb;
    CHECK("rmsnorm_backward M=0", mamba2_rmsnorm_gated_backward(ctx, &g, &out, &x, &x, &tw, &tw, &r, &o, NULL, 0));
    th_expect(dw[0] == 0 && db[3] == 0, "dweight/dbias over no rows are not 0");
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    static const char *isa[4] = {NULL, "avx512", "avx2", "scalar"};
    for (int k = 0; k < 4; k++) {
        mamba2_context_t *ctx = NULL;
        if (mamba2_context_create(&ctx, k == 0 ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU, 2)) return 1;
        if (k > 0 && mamba2_context_force_isa(ctx, isa[k]) != MAMBA2_STATUS_OK) {
            mamba2_context_destroy(ctx);
            continue;
        }
        const char *nm = k == 0 ? "ref" : isa[k];
        th_begin("empty_conv1d/%s", nm);
        conv_cases(ctx);
        th_end();
        th_begin("empty_ssd/%s", nm);
        ssd_cases(ctx);
        th_end();
        th_begin("empty_rmsnorm/%s", nm);
        rms_cases(ctx);
        th_end();
        mamba2_context_destroy(ctx);
    }
    return th_finish();
}
