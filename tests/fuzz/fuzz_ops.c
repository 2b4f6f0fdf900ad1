/*
 * fuzz_ops.c — the non-SSD ops of the fuzz harness (gated RMSNorm forward/backward with
 * their workspace queries, causal conv1d forward/backward/step), the context op (a short
 * sequence of context and utility calls with hostile arguments), and the op table.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "fuzz.h"

#define T(i) m2f_t(c, (i))
#define NULL_OPTS() (c->gflag[M2F_G_OPTS_NULL])

/* ---- gated RMSNorm ---------------------------------------------------------------------- */
/* dim: 0 M, 1 D, 2 group_size */
enum { R_X = 0, R_Z, R_W, R_BIAS, R_OUT, R_RSTD };
enum { R_DOUT = 4, R_RSTD_IN = 5, R_DX, R_DZ, R_DW, R_DB };

static void rms_dims(m2f_case *c) {
    c->dim[0] = c->d[0] % 40;
    c->dim[1] = c->d[1] < 240 ? 1 + c->d[1] % 70 : 256;
    c->dim[2] = m2f_divisor_of(c->dim[1], c->d[2]);
}

static void rms_build_common(m2f_case *c) {
    const int64_t M = c->dim[0], D = c->dim[1], gs = c->dim[2] > 0 ? c->dim[2] : 1;
    m2f_add(c, "x", M2F_IN, c->adt, 2, M2F_SHAPE(M, D));
    c->s[m2f_add(c, "z", M2F_IN, c->adt, 2, M2F_SHAPE(M, D))].present = (c->f[0] & 1) != 0;
    m2f_add(c, "weight", M2F_IN, c->pdt, 1, M2F_SHAPE(D));
    c->s[m2f_add(c, "bias", M2F_IN, c->pdt, 1, M2F_SHAPE(D))].present = (c->f[0] & 2) != 0;
    (void)gs;
}

static int64_t rms_groups(m2f_case *c) {
    const int64_t D = c->dim[1], gs = c->dim[2];
    return gs > 0 && D % gs == 0 ? D / gs : 1;
}

static void rms_fwd_build(m2f_case *c) {
    rms_build_common(c);
    m2f_add(c, "out", M2F_OUT, c->adt, 2, M2F_SHAPE(c->dim[0], c->dim[1]));
    c->s[m2f_add(c, "rstd", M2F_OUT, c->pdt, 2, M2F_SHAPE(c->dim[0], rms_groups(c)))].present =
        (c->f[0] & 4) != 0;
}

static mamba2_rmsnorm_gated_options_t rms_opts(m2f_case *c) {
    static const double eps[4] = {1e-5, 1e-6, 0.1, 1.0};
    mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
    o.eps = m2f_opt_d(c, M2F_O_EPS, eps[(c->f[0] >> 4) & 3]);
    o.group_size = m2f_opt_i(c, M2F_O_GROUP, (c->f[0] & 0x40) ? 0 : c->dim[2]);
    o.norm_before_gate = (int32_t)m2f_opt_i(c, M2F_O_NBG, (c->f[0] & 8) != 0);
    return o;
}

static mamba2_status_t rms_fwd_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                    size_t wsz) {
    mamba2_rmsnorm_gated_options_t o = rms_opts(c);
    const mamba2_rmsnorm_gated_options_t *op = NULL_OPTS() ? NULL : &o;
    if (op) M2F_SET_SIZE(c, o);
    if (q) return mamba2_rmsnorm_gated_forward_workspace_size(ctx, T(R_OUT), T(R_RSTD), T(R_X), T(R_Z),
                                                              T(R_W), T(R_BIAS), op, q);
    return mamba2_rmsnorm_gated_forward(ctx, T(R_OUT), T(R_RSTD), T(R_X), T(R_Z), T(R_W), T(R_BIAS),
                                        op, ws, wsz);
}

static void rms_bwd_build(m2f_case *c) {
    const int64_t M = c->dim[0], D = c->dim[1];
    rms_build_common(c);
    m2f_add(c, "dout", M2F_IN, c->adt, 2, M2F_SHAPE(M, D));
    /* a given rstd is used as is: tame values in (0, 1] */
    int r = m2f_add(c, "rstd", M2F_IN, c->pdt, 2, M2F_SHAPE(M, rms_groups(c)));
    c->s[r].present = (c->f[1] & 0x10) != 0;
    c->s[r].vclass = M2F_V_NONNEG;
    const uint8_t g = c->f[1];
    m2f_grad_slot(c, m2f_add(c, "dx", M2F_OUT, c->adt, 2, M2F_SHAPE(M, D)), g & 1);
    m2f_grad_slot(c, m2f_add(c, "dz", M2F_OUT, c->adt, 2, M2F_SHAPE(M, D)), (g & 2) && c->s[R_Z].present);
    m2f_grad_slot(c, m2f_add(c, "dweight", M2F_OUT, c->pdt, 1, M2F_SHAPE(D)), g & 4);
    m2f_grad_slot(c, m2f_add(c, "dbias", M2F_OUT, c->pdt, 1, M2F_SHAPE(D)), (g & 8) && c->s[R_BIAS].present);
}

static mamba2_status_t rms_bwd_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                    size_t wsz) {
    mamba2_rmsnorm_gated_options_t o = rms_opts(c);
    const mamba2_rmsnorm_gated_options_t *op = NULL_OPTS() ? NULL : &o;
    if (op) M2F_SET_SIZE(c, o);
    mamba2_rmsnorm_gated_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = T(R_DX);
    g.dz = T(R_DZ);
    g.dweight = T(R_DW);
    g.dbias = T(R_DB);
    const mamba2_rmsnorm_gated_grads_t *gp = c->gflag[M2F_G_GRADS_NULL] ? NULL : &g;
    if (gp) M2F_SET_SIZE(c, g);
    if (q) return mamba2_rmsnorm_gated_backward_workspace_size(ctx, gp, T(R_DOUT), T(R_X), T(R_Z), T(R_W),
                                                               T(R_BIAS), T(R_RSTD_IN), op, q);
    return mamba2_rmsnorm_gated_backward(ctx, gp, T(R_DOUT), T(R_X), T(R_Z), T(R_W), T(R_BIAS),
                                         T(R_RSTD_IN), op, ws, wsz);
}

/* ---- causal conv1d ---------------------------------------------------------------------- */
/* dim: 0 B, 1 L, 2 C, 3 W, 4 nseq, 5 extra cache slots (step), 6 T (step) */
enum { C_X = 0, C_W, C_BIAS, C_INIT, C_CU, C_OUT, C_FIN };
enum { C_DOUT = 5, C_DFIN = 6, C_DX, C_DW, C_DB, C_DINIT };

static void conv_dims(m2f_case *c) {
    const uint8_t *d = c->d;
    c->dim[0] = (c->f[0] & 8) ? 1 : 1 + d[0] % 3;
    c->dim[1] = d[1] < 230 ? d[1] % 70 : 70 + (int64_t)(d[1] - 230) * 10;
    c->dim[2] = d[2] < 240 ? 1 + d[2] % 40 : 64 + (d[2] - 240) * 3;
    c->dim[3] = 1 + d[3] % 8;
    c->dim[4] = 1 + d[4] % 5;
    c->dim[5] = d[5] % 4;
    c->dim[6] = d[6] % 5;
}

static void conv_build_common(m2f_case *c) {
    const int64_t B = c->dim[0], L = c->dim[1], C = c->dim[2], W = c->dim[3], nseq = c->dim[4];
    const int varlen = (c->f[0] & 8) != 0;
    const int64_t S = varlen ? nseq : B;
    m2f_add(c, "x", M2F_IN, c->adt, 3, M2F_SHAPE(B, L, C));
    m2f_add(c, "weight", M2F_IN, c->pdt, 2, M2F_SHAPE(C, W));
    m2f_opt_slot(c, m2f_add(c, "bias", M2F_IN, c->pdt, 1, M2F_SHAPE(C)), c->f[0] & 1);
    m2f_opt_slot(c, m2f_add(c, "initial_conv_state", M2F_IN, c->adt, 3, M2F_SHAPE(S, C, m2f_sadd(W, -1))),
                 c->f[0] & 2);
    m2f_add(c, "cu_seqlens", M2F_IDX, c->idt, 1, M2F_SHAPE(m2f_sadd(nseq, 1)));
    m2f_opt_slot(c, C_CU, varlen);
    m2f_fill_cu(c, C_CU, nseq, L);
}

static mamba2_conv1d_options_t conv_opts(m2f_case *c) {
    mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
    o.bias = T(C_BIAS);
    o.initial_conv_state = T(C_INIT);
    o.cu_seqlens = T(C_CU);
    o.activation = (mamba2_activation_t)m2f_opt_i(c, M2F_O_ACT, (c->f[0] & 0x10) ? 1 : 0);
    return o;
}

static void conv_fwd_build(m2f_case *c) {
    conv_build_common(c);
    const int64_t S = (c->f[0] & 8) ? c->dim[4] : c->dim[0];
    m2f_add(c, "out", M2F_OUT, c->adt, 3, M2F_SHAPE(c->dim[0], c->dim[1], c->dim[2]));
    c->s[m2f_add(c, "final_conv_state", M2F_OUT, c->adt, 3, M2F_SHAPE(S, c->dim[2], m2f_sadd(c->dim[3], -1)))]
        .present = (c->f[0] & 4) != 0;
}

static mamba2_status_t conv_fwd_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                     size_t wsz) {
    mamba2_conv1d_options_t o = conv_opts(c);
    if (!NULL_OPTS()) M2F_SET_SIZE(c, o);
    return mamba2_conv1d_forward(ctx, T(C_OUT), T(C_FIN), T(C_X), T(C_W), NULL_OPTS() ? NULL : &o);
}

static void conv_bwd_build(m2f_case *c) {
    conv_build_common(c);
    const int64_t B = c->dim[0], L = c->dim[1], C = c->dim[2], W = c->dim[3];
    const int64_t S = (c->f[0] & 8) ? c->dim[4] : B;
    m2f_add(c, "dout", M2F_IN, c->adt, 3, M2F_SHAPE(B, L, C));
    c->s[m2f_add(c, "dfinal_conv_state", M2F_IN, c->adt, 3, M2F_SHAPE(S, C, m2f_sadd(W, -1)))].present =
        (c->f[1] & 0x10) != 0;
    const uint8_t g = c->f[1];
    m2f_grad_slot(c, m2f_add(c, "dx", M2F_OUT, c->adt, 3, M2F_SHAPE(B, L, C)), g & 1);
    m2f_grad_slot(c, m2f_add(c, "dweight", M2F_OUT, c->pdt, 2, M2F_SHAPE(C, W)), g & 2);
    m2f_grad_slot(c, m2f_add(c, "dbias", M2F_OUT, c->pdt, 1, M2F_SHAPE(C)), (g & 4) && c->s[C_BIAS].present);
    m2f_grad_slot(c, m2f_add(c, "dinitial_conv_state", M2F_OUT, c->adt, 3, M2F_SHAPE(S, C, m2f_sadd(W, -1))),
                  (g & 8) && c->s[C_INIT].present);
}

static mamba2_status_t conv_bwd_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                     size_t wsz) {
    mamba2_conv1d_options_t o = conv_opts(c);
    const mamba2_conv1d_options_t *op = NULL_OPTS() ? NULL : &o;
    if (op) M2F_SET_SIZE(c, o);
    mamba2_conv1d_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = T(C_DX);
    g.dweight = T(C_DW);
    g.dbias = T(C_DB);
    g.dinitial_conv_state = T(C_DINIT);
    const mamba2_conv1d_grads_t *gp = c->gflag[M2F_G_GRADS_NULL] ? NULL : &g;
    if (gp) M2F_SET_SIZE(c, g);
    if (q) return mamba2_conv1d_backward_workspace_size(ctx, gp, T(C_DOUT), T(C_DFIN), T(C_X), T(C_W), op, q);
    return mamba2_conv1d_backward(ctx, gp, T(C_DOUT), T(C_DFIN), T(C_X), T(C_W), op, ws, wsz);
}

/* conv1d_step: conv_cache [S,C,Lc] (Lc = W-1 .. W+2) in/out, x [B,C] or [B,T,C], optional
 * cache_seqlens [B] (ring-buffer mode) with small non-negative values */
enum { CS_CACHE = 0, CS_X, CS_W, CS_BIAS, CS_IX, CS_OUT, CS_SEQL };

static void conv_step_build(m2f_case *c) {
    const int64_t B = c->dim[0], C = c->dim[2], W = c->dim[3], S = m2f_sadd(B, c->dim[5]), Tn = c->dim[6];
    const int multi = (c->f[0] & 0x20) != 0;
    const int64_t Lc = m2f_sadd(W, -1 + (c->f[1] & 3));
    m2f_add(c, "conv_cache", M2F_INOUT, c->adt, 3, M2F_SHAPE(S, C, Lc));
    if (multi) m2f_add(c, "x", M2F_IN, c->adt, 3, M2F_SHAPE(B, Tn, C));
    else m2f_add(c, "x", M2F_IN, c->adt, 2, M2F_SHAPE(B, C));
    m2f_add(c, "weight", M2F_IN, c->pdt, 2, M2F_SHAPE(C, W));
    m2f_opt_slot(c, m2f_add(c, "bias", M2F_IN, c->pdt, 1, M2F_SHAPE(C)), c->f[0] & 1);
    m2f_add(c, "state_indices", M2F_IDX, c->idt, 1, M2F_SHAPE(B));
    m2f_opt_slot(c, CS_IX, c->f[0] & 2);
    m2f_fill_slots(c, CS_IX, B, S, c->f[0] & 0x40);
    if (multi) m2f_add(c, "out", M2F_OUT, c->adt, 3, M2F_SHAPE(B, Tn, C));
    else m2f_add(c, "out", M2F_OUT, c->adt, 2, M2F_SHAPE(B, C));
    const int sl = m2f_add(c, "cache_seqlens", M2F_IDX, c->idt, 1, M2F_SHAPE(B));
    m2f_opt_slot(c, sl, c->f[1] & 4);
    const int64_t span = Lc >= 0 && Lc < (1 << 20) ? 3 * Lc + 1 : 1 << 20;
    c->s[sl].nidx = B > 0 && B < M2F_MAX_IDX ? B : (B > 0 ? M2F_MAX_IDX : 0);
    for (int64_t k = 0; k < c->s[sl].nidx; k++) c->s[sl].idx[k] = ((int64_t)c->d[7] + 5 * k) % span;
}

static mamba2_status_t conv_step_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                      size_t wsz) {
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = T(CS_BIAS);
    o.state_indices = T(CS_IX);
    o.cache_seqlens = T(CS_SEQL);
    o.activation = (mamba2_activation_t)m2f_opt_i(c, M2F_O_ACT, (c->f[0] & 0x10) ? 1 : 0);
    if (!NULL_OPTS()) M2F_SET_SIZE_V1(c, o, activation); /* cache_seqlens came after v1 */
    return mamba2_conv1d_step(ctx, T(CS_OUT), T(CS_CACHE), T(CS_X), T(CS_W), NULL_OPTS() ? NULL : &o);
}

static void conv_step_untouched(m2f_case *c, uint8_t **mask) {
    const int outs[1] = {CS_OUT};
    m2f_step_untouched(c, mask, CS_CACHE, CS_IX, c->dim[0], outs, 1);
}

/* ---- context and utility calls ----------------------------------------------------------- */

static void expect_err(m2f_case *c, mamba2_status_t st, const char *what) {
#ifdef MAMBA2C_ABI_VERSION
    if ((unsigned)st > MAMBA2_STATUS_BUSY) m2f_fail(c, "%s returned unknown status %d", what, (int)st);
#else
    if ((unsigned)st > 6) m2f_fail(c, "%s returned unknown status %d", what, (int)st);
#endif
    if (st != MAMBA2_STATUS_OK && mamba2_last_error()[0] == 0)
        m2f_fail(c, "%s failed (%d) with an empty mamba2_last_error()", what, (int)st);
}

#ifdef MAMBA2C_ABI_VERSION
/* BUSY (ABI v1): a second host thread runs calls on the context while this one calls it
 * too; every call must return OK or BUSY (a refused call leaves its output untouched and
 * says why), none may hang or crash. */
typedef struct busy_job {
    mamba2_context_t *ctx;
    int calls;
    float x[64 * 32], w[32], out[64 * 32];
} busy_job;

static mamba2_status_t busy_call(mamba2_context_t *ctx, float *x, float *w, float *out) {
    const int64_t sx[2] = {64, 32}, sw[1] = {32};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 2, sx);
    mamba2_tensor_t tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 1, sw);
    mamba2_tensor_t to = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 2, sx);
    return mamba2_rmsnorm_gated_forward(ctx, &to, NULL, &tx, NULL, &tw, NULL, NULL, NULL, 0);
}

static void *busy_thread(void *arg) {
    busy_job *j = (busy_job *)arg;
    for (int i = 0; i < j->calls; i++) {
        mamba2_status_t st = busy_call(j->ctx, j->x, j->w, j->out);
        if (st != MAMBA2_STATUS_OK && st != MAMBA2_STATUS_BUSY) return (void *)1;
    }
    return NULL;
}

static void busy_ops(m2f_case *c, mamba2_context_t *ctx, uint8_t v) {
    static busy_job j;
    static float x[64 * 32], w[32], out[64 * 32], canary[64 * 32];
    for (int i = 0; i < 64 * 32; i++) j.x[i] = x[i] = (float)(i % 7) * 0.25f;
    for (int i = 0; i < 32; i++) j.w[i] = w[i] = 1.0f;
    j.ctx = ctx;
    j.calls = 1 + v % 16;
    pthread_t th;
    if (pthread_create(&th, NULL, busy_thread, &j) != 0) return;
    for (int k = 0; k < 1 + (v >> 4); k++) {
        mamba2_status_t st;
        switch ((v + k) % 3) {
        case 0: st = mamba2_context_force_isa(ctx, "auto"); break;
        case 1: st = mamba2_context_set_num_threads(ctx, mamba2_context_get_num_threads(ctx)); break;
        default:
            for (int i = 0; i < 64 * 32; i++) out[i] = canary[i] = NAN;
            st = busy_call(ctx, x, w, out);
            if (st == MAMBA2_STATUS_BUSY && memcmp(out, canary, sizeof out) != 0)
                m2f_fail(c, "a BUSY call wrote its output");
            break;
        }
        if (st != MAMBA2_STATUS_OK && st != MAMBA2_STATUS_BUSY)
            m2f_fail(c, "a call racing another thread's on one context returned %d", (int)st);
        if (st == MAMBA2_STATUS_BUSY && !mamba2_last_error()[0]) m2f_fail(c, "BUSY without a message");
    }
    void *r = NULL;
    pthread_join(th, &r);
    if (r) m2f_fail(c, "the other thread's call returned neither OK nor BUSY");
}
#endif

void m2f_context_ops(m2f_case *c) {
    static const int32_t threads[8] = {1, 2, 3, -1, 0, 1025, INT32_MIN, INT32_MAX};
    /* CPU, reference, CUDA (not built into the fuzz build: BACKEND_UNAVAILABLE) and invalid
     * ids; OpenCL (3) only through the device-mode entry points below, with hostile handles */
    static const int32_t backends[8] = {0, 1, 2, 4, -1, 0, 1, INT32_MAX};
    static const char *const isas[10] = {"auto", "scalar", "avx2", "avx2+fma", "avx512", NULL, "",
                                         "AVX2", "avx2 ", "neon"};
    mamba2_context_t *ctx = NULL;
    for (int k = 0; k < 12; k++) {
        const uint8_t b = c->d[k], v = c->f[k % 4] ^ (uint8_t)(k * 37);
        mamba2_status_t st;
        switch (b % 8) {
        case 0: {
            if (ctx) break;
            mamba2_context_t *made = (mamba2_context_t *)&made; /* must become NULL on failure */
            st = mamba2_context_create(&made, (mamba2_backend_t)backends[v & 7], threads[(v >> 3) & 7]);
            expect_err(c, st, "context_create");
            if (st == MAMBA2_STATUS_OK && !made) m2f_fail(c, "context_create succeeded with NULL");
            if (st != MAMBA2_STATUS_OK && made) m2f_fail(c, "context_create failed but set *ctx");
            ctx = made;
            if (!(v & 0x40)) {
                st = mamba2_context_create(NULL, MAMBA2_BACKEND_CPU, 1);
                if (st == MAMBA2_STATUS_OK) m2f_fail(c, "context_create(NULL) succeeded");
                expect_err(c, st, "context_create(NULL)");
            }
            break;
        }
        case 1: {
            int32_t before = mamba2_context_get_num_threads(ctx);
            st = mamba2_context_set_num_threads((v & 0x80) ? NULL : ctx, threads[v & 7]);
            expect_err(c, st, "set_num_threads");
            if (st != MAMBA2_STATUS_OK && mamba2_context_get_num_threads(ctx) != before)
                m2f_fail(c, "a refused set_num_threads changed the thread count");
            if (st == MAMBA2_STATUS_OK && (v & 0x80)) m2f_fail(c, "set_num_threads(NULL) succeeded");
            break;
        }
        case 2: {
            mamba2_context_t *t = (v & 1) ? NULL : ctx;
            int32_t n = mamba2_context_get_num_threads(t);
            if (t && (n < 1 || n > 1024)) m2f_fail(c, "get_num_threads returned %d", (int)n);
            (void)mamba2_context_get_backend(t);
            const char *s = mamba2_context_get_isa(t);
            if (!s) m2f_fail(c, "get_isa returned NULL");
            break;
        }
        case 3:
            st = mamba2_context_force_isa((v & 0x80) ? NULL : ctx, isas[v % 10]);
            expect_err(c, st, "force_isa");
            if (st == MAMBA2_STATUS_OK && (!ctx || (v & 0x80) || !isas[v % 10]))
                m2f_fail(c, "force_isa succeeded without a context or an isa");
            break;
        case 4: {
            const char *s = mamba2_status_string((mamba2_status_t)((int8_t)v));
            if (!s || !s[0]) m2f_fail(c, "status_string(%d) is empty", (int)(int8_t)v);
            if (!mamba2_version_string()[0]) m2f_fail(c, "empty version string");
            size_t e = mamba2_dtype_size((mamba2_dtype_t)((int8_t)v));
            if (e != 0 && e != 2 && e != 4 && e != 8) m2f_fail(c, "dtype_size %zu", e);
            break;
        }
        case 5: {
            static const int32_t ranks[8] = {0, 1, 6, 7, -1, 100, INT32_MIN, 3};
            int64_t shape[MAMBA2_MAX_RANK] = {2, 3, 4, 5, 6, 7}, stride[MAMBA2_MAX_RANK] = {1, 1, 1, 1, 1, 1};
            int32_t r = ranks[v & 7];
            if (v & 64) shape[1] = INT64_MAX; /* contiguous strides that overflow int64 */
            mamba2_tensor_t t = (v & 8) ? mamba2_tensor_make(NULL, MAMBA2_DTYPE_F32, r, (v & 16) ? NULL : shape)
                                        : mamba2_tensor_make_strided(NULL, MAMBA2_DTYPE_F32, r,
                                                                     (v & 16) ? NULL : shape,
                                                                     (v & 32) ? NULL : stride);
            if (t.rank != r) m2f_fail(c, "tensor_make changed the rank %d to %d", (int)r, (int)t.rank);
            break;
        }
        case 6:
            mamba2_context_destroy(ctx);
            ctx = NULL;
            mamba2_context_destroy(NULL);
            break;
        case 7:
            if (!mamba2_last_error()) m2f_fail(c, "last_error returned NULL");
#ifdef MAMBA2C_ABI_VERSION
            if (mamba2_abi_version() != MAMBA2C_ABI_VERSION) m2f_fail(c, "abi_version mismatch");
            if (mamba2_struct_size((mamba2_struct_id_t)(int8_t)v) > 4096)
                m2f_fail(c, "struct_size(%d) is implausible", (int)(int8_t)v);
            if (ctx) busy_ops(c, ctx, v);
            {
                /* OpenCL device mode with no OpenCL objects, and buffer registration on a
                 * context that is not an OpenCL one: refused, nothing created */
                mamba2_context_t *oc = (mamba2_context_t *)&oc;
                st = mamba2_context_create_opencl((v & 1) ? NULL : &oc, NULL, NULL, NULL);
                expect_err(c, st, "context_create_opencl");
                if (st == MAMBA2_STATUS_OK) m2f_fail(c, "create_opencl(NULL handles) succeeded");
                if (!(v & 1) && oc) m2f_fail(c, "a failed create_opencl set *ctx");
                void *base = &base;
                st = mamba2_opencl_register_buffer((v & 2) ? NULL : ctx, (v & 4) ? NULL : &base,
                                                   (size_t)1 << (v & 63), (v & 8) ? NULL : &base);
                expect_err(c, st, "opencl_register_buffer");
                if (st == MAMBA2_STATUS_OK) m2f_fail(c, "register_buffer on a non-OpenCL context succeeded");
                st = mamba2_opencl_unregister_buffer((v & 2) ? NULL : ctx, (v & 4) ? NULL : &base);
                expect_err(c, st, "opencl_unregister_buffer");
                if (st == MAMBA2_STATUS_OK) m2f_fail(c, "unregister_buffer on a non-OpenCL context succeeded");
            }
#endif
            break;
        }
    }
    mamba2_context_destroy(ctx);
}

/* ---- the op table ------------------------------------------------------------------------ */
static const m2f_op op_rms_fwd = {"rmsnorm_gated_forward", rms_dims, rms_fwd_build, rms_fwd_call, NULL, 1};
static const m2f_op op_rms_bwd = {"rmsnorm_gated_backward", rms_dims, rms_bwd_build, rms_bwd_call, NULL, 1};
static const m2f_op op_conv_fwd = {"conv1d_forward", conv_dims, conv_fwd_build, conv_fwd_call, NULL, 0};
static const m2f_op op_conv_bwd = {"conv1d_backward", conv_dims, conv_bwd_build, conv_bwd_call, NULL, 1};
static const m2f_op op_conv_step = {"conv1d_step", conv_dims, conv_step_build, conv_step_call,
                                    conv_step_untouched, 0};
static const m2f_op op_context = {"context", NULL, NULL, NULL, NULL, 0};

const m2f_op *const m2f_ops[M2F_NOPS] = {
    &m2f_op_ssd_fwd, &m2f_op_ssd_fwd_states, &m2f_op_ssd_bwd, &op_rms_fwd,   &op_rms_bwd,
    &op_conv_fwd,    &op_conv_bwd,           &op_conv_step,   &m2f_op_ssd_step, &m2f_op_cumsum,
    &m2f_op_bmm,     &m2f_op_cstate,         &m2f_op_passing, &m2f_op_cscan, &op_context,
};
