/*
 * test_empty.c — empty tensors with NULL data, which validation accepts (a tensor with no
 * elements needs no memory): every op on the reference and each CPU kernel set succeeds and
 * does no pointer arithmetic on the NULLs (the sanitizer build catches NULL + offset). The
 * fused SSD without tokens also needs no workspace sized by its state and passes the states
 * through bitwise. A huge batch of rows without tokens (B = 2^40, L = 0) costs O(1) on every op
 * and backend (fuzz finding B: the reference conv1d looped over the 2^40 empty rows).
 */
#include <math.h>
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

/* The fused SSD with no tokens needs no workspace sized by the state (an L = 0 backward
 * with P = 11, N = 2^31 asked ~730 GB, the fuzz finding
 * regressions/ssd_backward-ssd_plan-L0-N2e31-workspace), and its states pass through
 * exactly: final = initial_state, dinitial_state = dfinal_state (zeros without them), dA,
 * dD, ddt_bias = 0; every backend gives the same bits. */
#define EMPTY_WS_MAX 4096 /* the core's alignment padding, nothing sized by H, P or N */
static void ssd_empty_big_state(mamba2_context_t *ctx) {
    const int64_t P = 11, N = (int64_t)1 << 31;
    float A[1] = {-1};
    mamba2_tensor_t x = tn(NULL, 4, 1, 0, 1, P), dt = tn(NULL, 3, 1, 0, 1, 0), tA = tn(A, 1, 1, 0, 0, 0),
                    Bm = tn(NULL, 4, 1, 0, 1, N), Cm = tn(NULL, 4, 1, 0, 1, N), out = tn(NULL, 4, 1, 0, 1, P);
    size_t ws = 12345;
    CHECK("ssd_forward query L=0 N=2^31",
          mamba2_ssd_forward_workspace_size(ctx, &out, NULL, NULL, &x, &dt, &tA, &Bm, &Cm, NULL, &ws));
    th_expect(ws <= EMPTY_WS_MAX, "ssd_forward L=0 N=2^31 asks %zu bytes of workspace", ws);
    CHECK("ssd_forward L=0 N=2^31", mamba2_ssd_forward(ctx, &out, NULL, NULL, &x, &dt, &tA, &Bm, &Cm, NULL, NULL, 0));
    mamba2_tensor_t dx = out;
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = &dx;
    ws = 12345;
    CHECK("ssd_backward query L=0 N=2^31",
          mamba2_ssd_backward_workspace_size(ctx, &g, &out, NULL, &x, &dt, &tA, &Bm, &Cm, NULL, NULL, &ws));
    th_expect(ws <= EMPTY_WS_MAX, "ssd_backward L=0 N=2^31 asks %zu bytes of workspace", ws);
    CHECK("ssd_backward L=0 N=2^31",
          mamba2_ssd_backward(ctx, &g, &out, NULL, &x, &dt, &tA, &Bm, &Cm, NULL, NULL, NULL, 0));
}

/* values of the pass-through check: 3 sequences (varlen, all empty) or B = 3, H = 3, P = 5, N = 7 */
enum { ES = 3, EH = 3, EP = 5, EN = 7, ESZ = ES * EH * EP * EN };
/* states: 0 none, 1 initial_state and dfinal_state, 2 initial_state only (dinit: zeros) */
static void ssd_empty_passthrough(mamba2_context_t *ctx, int varlen, int states, int per_ch) {
    const int with_states = states != 0, with_df = states == 1;
    static float init[ESZ], dfin[ESZ], fin[ESZ], dinit[ESZ];
    float A[EH] = {-1, -0.5f, -2}, D[EH * EP], dtb[EH], dA[EH], dD[EH * EP], ddtb[EH];
    th_rng r;
    th_rng_seed(&r, 77);
    for (int i = 0; i < ESZ; i++) {
        init[i] = (float)th_rng_normal(&r);
        dfin[i] = (float)th_rng_normal(&r);
        fin[i] = dinit[i] = 12345.0f;
    }
    for (int i = 0; i < EH * EP; i++) D[i] = dD[i] = 9.0f;
    for (int i = 0; i < EH; i++) dtb[i] = dA[i] = ddtb[i] = 9.0f;
    const int64_t B = varlen ? 1 : ES;
    mamba2_tensor_t x = tn(NULL, 4, B, 0, EH, EP), dt = tn(NULL, 3, B, 0, EH, 0), tA = tn(A, 1, EH, 0, 0, 0),
                    Bm = tn(NULL, 4, B, 0, 1, EN), Cm = tn(NULL, 4, B, 0, 1, EN), out = tn(NULL, 4, B, 0, EH, EP),
                    z = out, ti = tn(init, 4, ES, EH, EP, EN), tdf = tn(dfin, 4, ES, EH, EP, EN),
                    tf = tn(fin, 4, ES, EH, EP, EN), tdi = tn(dinit, 4, ES, EH, EP, EN),
                    tD = per_ch ? tn(D, 2, EH, EP, 0, 0) : tn(D, 1, EH, 0, 0, 0),
                    tdD = per_ch ? tn(dD, 2, EH, EP, 0, 0) : tn(dD, 1, EH, 0, 0, 0),
                    tb = tn(dtb, 1, EH, 0, 0, 0), tdA = tn(dA, 1, EH, 0, 0, 0), tdb = tn(ddtb, 1, EH, 0, 0, 0);
    int32_t cu[ES + 1] = {0, 0, 0, 0};
    const int64_t ncu = ES + 1;
    mamba2_tensor_t tcu = mamba2_tensor_make(cu, MAMBA2_DTYPE_I32, 1, &ncu);
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.D = &tD;
    o.z = &z;
    o.dt_bias = &tb;
    o.dt_softplus = 1;
    o.initial_state = with_states ? &ti : NULL;
    o.cu_seqlens = varlen ? &tcu : NULL;
    size_t ws = 12345;
    CHECK("ssd_forward query L=0",
          mamba2_ssd_forward_workspace_size(ctx, &out, NULL, &tf, &x, &dt, &tA, &Bm, &Cm, &o, &ws));
    th_expect(ws <= EMPTY_WS_MAX, "ssd_forward L=0 asks %zu bytes", ws);
    CHECK("ssd_forward L=0", mamba2_ssd_forward(ctx, &out, NULL, &tf, &x, &dt, &tA, &Bm, &Cm, &o, NULL, 0));
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    mamba2_tensor_t dx = out, ddt = dt, dBm = Bm, dCm = Cm, dz = out;
    g.dx = &dx;
    g.ddt = &ddt;
    g.dA = &tdA;
    g.dBm = &dBm;
    g.dCm = &dCm;
    g.dD = &tdD;
    g.dz = &dz;
    g.ddt_bias = &tdb;
    g.dinitial_state = with_states ? &tdi : NULL;
    ws = 12345;
    CHECK("ssd_backward query L=0", mamba2_ssd_backward_workspace_size(ctx, &g, &out, with_df ? &tdf : NULL,
                                                                  &x, &dt, &tA, &Bm, &Cm, NULL, &o, &ws));
    th_expect(ws <= EMPTY_WS_MAX, "ssd_backward L=0 asks %zu bytes", ws);
    CHECK("ssd_backward L=0", mamba2_ssd_backward(ctx, &g, &out, with_df ? &tdf : NULL, &x, &dt, &tA, &Bm,
                                                   &Cm, NULL, &o, NULL, 0));
    int bad = 0;
    for (int i = 0; i < ESZ; i++) {
        const float wf = with_states ? init[i] : 0.0f;
        if (memcmp(&fin[i], &wf, 4) != 0) bad++;
        const float wd = with_df ? dfin[i] : 0.0f;
        if (with_states && memcmp(&dinit[i], &wd, 4) != 0) bad++;
    }
    th_expect(bad == 0, "L=0: %d state elements are not passed through bitwise", bad);
    for (int i = 0; i < EH; i++)
        th_expect(dA[i] == 0 && ddtb[i] == 0, "L=0: dA[%d] = %g, ddt_bias[%d] = %g", i, dA[i], i, ddtb[i]);
    for (int i = 0; i < (per_ch ? EH * EP : EH); i++) th_expect(dD[i] == 0, "L=0: dD[%d] = %g", i, dD[i]);
    if (per_ch) return;
    for (int i = EH; i < EH * EP; i++) th_expect(dD[i] == 9.0f, "L=0: dD[%d] written past [H]", i);
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

/* B = 2^40 rows, L = 0 tokens, no per-row state to write: every op returns at once (a loop
 * over the rows would not end), and the parameter gradients come out +0. */
#define HUGE_B ((int64_t)1 << 40)
static mamba2_tensor_t tb(void *p, int r, const int64_t *s) {
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, r, s);
}
static int all_pos0(const float *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i] != 0.0f || signbit(v[i])) return 0;
    return 1;
}
static void huge_batch_cases(mamba2_context_t *ctx) {
    const int64_t Bh = HUGE_B, Q = 256;
    float w[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dw[8], db[2];
    const int64_t sx[3] = {Bh, 0, 2}, sw[2] = {2, 4}, sw1[2] = {2, 1}, sst[3] = {Bh, 2, 0},
                  sc[1] = {2};
    mamba2_tensor_t x = tb(NULL, 3, sx), out = x, wt = tb(w, 2, sw), wt1 = tb(w, 2, sw1),
                    fs0 = tb(NULL, 3, sst);
    CHECK("conv1d_forward B=2^40 L=0", mamba2_conv1d_forward(ctx, &out, NULL, &x, &wt, NULL));
    CHECK("conv1d_forward B=2^40 L=0 W=1 (empty final)",
          mamba2_conv1d_forward(ctx, &out, &fs0, &x, &wt1, NULL));
    for (int i = 0; i < 8; i++) dw[i] = 7.0f;
    db[0] = db[1] = 7.0f;
    mamba2_tensor_t dx = x, tdw = tb(dw, 2, sw), tdb = tb(db, 1, sc);
    mamba2_conv1d_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = &dx;
    g.dweight = &tdw;
    g.dbias = &tdb;
    mamba2_conv1d_options_t co = mamba2_conv1d_options_default();
    float bias[2] = {0.5f, -0.5f};
    mamba2_tensor_t tbias = tb(bias, 1, sc);
    co.bias = &tbias;
    CHECK("conv1d_backward B=2^40 L=0", mamba2_conv1d_backward(ctx, &g, &out, NULL, &x, &wt, &co, NULL, 0));
    th_expect(all_pos0(dw, 8) && all_pos0(db, 2), "conv1d_backward B=2^40 L=0: dweight/dbias not +0");
    mamba2_tensor_t cache = tb(NULL, 3, sst);
    CHECK("conv1d_step B=2^40 T=0", mamba2_conv1d_step(ctx, &out, &cache, &x, &wt1, NULL));

    /* SSD: H = 2, P = 3, G = 1, N = 4 */
    float A[2] = {-1, -0.5f}, D[2] = {1, 2}, bias2[2] = {0.1f, 0.2f}, dA[2], dD[2], ddb[2];
    const int64_t s4x[4] = {Bh, 0, 2, 3}, s3dt[3] = {Bh, 0, 2}, s4b[4] = {Bh, 0, 1, 4}, sh[1] = {2};
    mamba2_tensor_t sxx = tb(NULL, 4, s4x), sdt = tb(NULL, 3, s3dt), sBm = tb(NULL, 4, s4b),
                    tA = tb(A, 1, sh), tD = tb(D, 1, sh), tbi = tb(bias2, 1, sh), so = sxx;
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.D = &tD;
    o.dt_bias = &tbi;
    CHECK("ssd_forward B=2^40 L=0",
          mamba2_ssd_forward(ctx, &so, NULL, NULL, &sxx, &sdt, &tA, &sBm, &sBm, &o, NULL, 0));
    for (int i = 0; i < 2; i++) dA[i] = dD[i] = ddb[i] = 7.0f;
    mamba2_tensor_t tdA = tb(dA, 1, sh), tdD = tb(dD, 1, sh), tddb = tb(ddb, 1, sh), sdx = sxx;
    mamba2_ssd_grads_t sg;
    memset(&sg, 0, sizeof sg);
    sg.dx = &sdx;
    sg.dA = &tdA;
    sg.dD = &tdD;
    sg.ddt_bias = &tddb;
    size_t wsz = 0;
    CHECK("ssd_backward_workspace_size B=2^40 L=0",
          mamba2_ssd_backward_workspace_size(ctx, &sg, &so, NULL, &sxx, &sdt, &tA, &sBm, &sBm, NULL, &o, &wsz));
    th_expect(wsz <= 4096, "ssd_backward B=2^40 L=0 asks %zu bytes of workspace", wsz);
    CHECK("ssd_backward B=2^40 L=0",
          mamba2_ssd_backward(ctx, &sg, &so, NULL, &sxx, &sdt, &tA, &sBm, &sBm, NULL, &o, NULL, 0));
    th_expect(all_pos0(dA, 2) && all_pos0(dD, 2) && all_pos0(ddb, 2),
              "ssd_backward B=2^40 L=0: dA/dD/ddt_bias not +0");

    /* the staged pipeline with K = 0 chunks */
    const int64_t sdo[4] = {Bh, 2, 0, Q}, scb[5] = {Bh, 0, 1, Q, Q}, sstt[5] = {Bh, 0, 2, 3, 4};
    mamba2_tensor_t dto = tb(NULL, 4, sdo), dac = dto, CB = tb(NULL, 5, scb), st = tb(NULL, 5, sstt),
                    st2 = st;
    CHECK("ssd_chunk_cumsum B=2^40 L=0", mamba2_ssd_chunk_cumsum(ctx, &dto, &dac, &sdt, &tA, NULL));
    CHECK("ssd_bmm_chunk B=2^40 L=0", mamba2_ssd_bmm_chunk(ctx, &CB, &sBm, &sBm, NULL));
    CHECK("ssd_chunk_state B=2^40 L=0", mamba2_ssd_chunk_state(ctx, &st, &sxx, &sBm, &dto, &dac, NULL));
    CHECK("ssd_state_passing B=2^40 K=0 (no final_state)",
          mamba2_ssd_state_passing(ctx, &st2, NULL, &st, &dac, NULL));
    CHECK("ssd_chunk_scan B=2^40 L=0",
          mamba2_ssd_chunk_scan(ctx, &so, &CB, &sxx, &dto, &dac, &sBm, &st2, NULL));
}

/* Every case on one context; nm names the backend (and kernel set) in the unit names. */
static void all_cases(mamba2_context_t *ctx, const char *nm) {
    th_begin("empty_conv1d/%s", nm);
    conv_cases(ctx);
    th_end();
    th_begin("empty_ssd/%s", nm);
    ssd_cases(ctx);
    th_end();
    th_begin("empty_ssd_big_state/%s", nm);
    ssd_empty_big_state(ctx);
    th_end();
    for (int m = 0; m < 12; m++) {
        static const char *const sn[3] = {"", " init+dfinal", " init only"};
        th_begin("empty_ssd_passthrough/%s %s%s%s", nm, m & 1 ? "varlen" : "batch", sn[m / 4],
                 m & 2 ? " D[H,P]" : "");
        ssd_empty_passthrough(ctx, m & 1, m / 4, (m & 2) != 0);
        th_end();
    }
    th_begin("empty_rmsnorm/%s", nm);
    rms_cases(ctx);
    th_end();
    th_begin("empty_huge_batch/%s", nm);
    huge_batch_cases(ctx);
    th_end();
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
        all_cases(ctx, k == 0 ? "ref" : isa[k]);
        mamba2_context_destroy(ctx);
    }
    /* the OpenCL backend (host mode), where a device is found */
    mamba2_context_t *cl = NULL;
    if (mamba2_context_create(&cl, MAMBA2_BACKEND_OPENCL, 2) == MAMBA2_STATUS_OK) {
        all_cases(cl, "opencl");
        mamba2_context_destroy(cl);
    }
    return th_finish();
}
