/*
 * block_step_api.c — the decode step of a whole Mamba-2 block (mamba2_block_step,
 * include/mamba2c_block.h): argument checks, the workspace plan, and the composition.
 *
 * The block step is the existing ops run back to back on one context: the block RMSNorm,
 * in_proj, conv1d_step, ssd_step, the gated RMSNorm and out_proj, through the backend's own
 * entries (m2_backend_ops), so the CPU backend runs its kernel sets and the reference its
 * float64-accumulating loops, and the result is bitwise that of the ops called one by one.
 * What it adds is the plumbing: the sizes read off the tensors, the intermediates as views of
 * one workspace (the in_proj output split into z, xBC and dt as mamba_ssm lays it out), the
 * residual add, and checks that cover the composition as a whole.
 *
 * Every check happens before anything is written: first the sizes and the tensors the
 * caller passes (with messages in the block's own terms), then each op's own checks on the
 * views it will get (a failure there is reported with the op's name in front), then overlap
 * between the in/out tensors and everything else, and the padding rows of the two index
 * tensors. The workspace query runs the same plan with the workspace placed at an address
 * no process can map (2^62), so the same checks see intermediates that overlap nothing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv1d.h"
#include "core/half.h"
#include "core/internal.h"
#include "core/linear.h"
#include "core/rmsnorm.h"
#include "core/ssd_step.h"

/* The workspace base the query plans with: above every user address of x86-64 and AArch64
 * (at most 2^57 bytes with 5-level paging / 52-bit VA), and far enough below 2^63 that any
 * workspace size that passes the checked arithmetic stays a valid int64 byte address. */
#define QUERY_BASE ((uintptr_t)1 << 62)

typedef struct blk_plan {
    int64_t M, Dm, Di, C, W, H, P, N, G, Din;
    int add_residual, padding;
    int rbf, rnorm;        /* round_bf16, round_norm_input (read when struct_size covers them) */
    float *u, *zx, *xbc, *g, *rr; /* the op outputs rounded in bf16 mode; rr: bf16(residual) */
    size_t off_sub, bytes; /* the norms' scratch, and the whole workspace (unpadded)        */
    unsigned char *ws;
    float *y;              /* the SSD output (zeroed first when a row is padding)           */
    m2_rmsnorm_problem norm, gnorm;
    m2_linear_problem in_proj, out_proj;
    m2_conv1d_problem conv;
    m2_ssd_step_problem ssd;
} blk_plan;

static mamba2_tensor_t view2(void *p, int64_t a, int64_t b, int64_t sa) {
    const int64_t sh[2] = {a, b}, st[2] = {sa, 1};
    return mamba2_tensor_make_strided(p, MAMBA2_DTYPE_F32, 2, sh, st);
}
static mamba2_tensor_t view3(void *p, int64_t a, int64_t b, int64_t c, int64_t sa) {
    const int64_t sh[3] = {a, b, c}, st[3] = {sa, c, 1};
    return mamba2_tensor_make_strided(p, MAMBA2_DTYPE_F32, 3, sh, st);
}

/* A failed op check, reported with the stage it belongs to in front. */
static mamba2_status_t staged(mamba2_status_t st, const char *stage) {
    if (st == MAMBA2_STATUS_OK) return st;
    char msg[900];
    snprintf(msg, sizeof msg, "%s", mamba2_last_error());
    return m2_error(st, "mamba2_block_step, %s: %s", stage, msg);
}

/* *off = the next 64-byte boundary at or after *end; *end = *off + n floats. */
static int place(size_t *end, size_t *off, size_t nfloats) {
    size_t a, b;
    if (!m2_size_add(*end, M2_WS_ALIGN - 1, &a)) return 0;
    *off = a / M2_WS_ALIGN * M2_WS_ALIGN;
    if (!m2_size_mul(nfloats, sizeof(float), &b) || !m2_size_add(*off, b, end)) return 0;
    return 1;
}

static int64_t numel(const mamba2_tensor_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->shape[i];
    return n;
}

/* Byte range of a tensor (any dtype but Q8_0), or of a Q8_0 weight [O,I] as linear_api.c
 * reads it; strides already checked non-negative. */
static void bytes_of(const mamba2_tensor_t *t, int64_t *lo, int64_t *hi) {
    *lo = (int64_t)(intptr_t)t->data;
    if (t->dtype == MAMBA2_DTYPE_Q8_0) {
        const int64_t O = t->shape[0], I = t->shape[1], rs = O > 1 ? t->stride[0] : 0;
        *hi = *lo + ((O - 1) * (rs / M2_Q8_0_BLOCK) + I / M2_Q8_0_BLOCK) * M2_Q8_0_BYTES;
        return;
    }
    int64_t ext = 0;
    for (int i = 0; i < t->rank; i++) ext += (t->shape[i] - 1) * t->stride[i];
    *hi = *lo + (ext + 1) * (int64_t)mamba2_dtype_size(t->dtype);
}

static mamba2_status_t need(const mamba2_tensor_t *t, const char *name) {
    return t ? MAMBA2_STATUS_OK
             : m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "mamba2_block_step: %s is NULL (required)",
                        name);
}

static mamba2_status_t shape_error(const char *name, const mamba2_tensor_t *t, const char *want) {
    char got[128];
    m2_fmt_dims(got, sizeof got, t->rank, t->shape);
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "mamba2_block_step: %s has shape %s; expected %s",
                    name, got, want);
}

/* The sizes, from hidden, state_cache, conv_weight and the projections. */
static mamba2_status_t sizes(blk_plan *p, const mamba2_tensor_t *hidden,
                             const mamba2_tensor_t *state_cache,
                             const mamba2_block_step_weights_t *w) {
    char want[160];
    if (hidden->dtype != MAMBA2_DTYPE_F32)
        return m2_error(hidden->dtype == MAMBA2_DTYPE_BF16 || hidden->dtype == MAMBA2_DTYPE_F16 ||
                                hidden->dtype == MAMBA2_DTYPE_F64
                            ? MAMBA2_STATUS_UNSUPPORTED
                            : MAMBA2_STATUS_INVALID_ARGUMENT,
                        "mamba2_block_step: hidden has dtype %s; the block step takes f32 "
                        "activations only (call the ops one by one for other dtypes)",
                        m2_dtype_name(hidden->dtype));
    if (hidden->rank != 2 || hidden->shape[0] < 0 || hidden->shape[1] < 1 ||
        hidden->shape[0] > MAX_DIM || hidden->shape[1] > MAX_DIM)
        return shape_error("hidden", hidden, "[M,d_model] with d_model >= 1");
    p->M = hidden->shape[0];
    p->Dm = hidden->shape[1];
    if (state_cache->rank != 4)
        return shape_error("state_cache", state_cache, "[S,H,P,N] (rank 4)");
    for (int i = 1; i < 4; i++)
        if (state_cache->shape[i] < 1 || state_cache->shape[i] > MAX_DIM)
            return shape_error("state_cache", state_cache, "[S,H,P,N] with H, P, N >= 1");
    p->H = state_cache->shape[1];
    p->P = state_cache->shape[2];
    p->N = state_cache->shape[3];
    M2_TRY(m2_check_ssd_sizes("mamba2_block_step: state_cache", p->H, p->P, p->N));
    p->Di = p->H * p->P;
    const mamba2_tensor_t *cw = w->conv_weight;
    if (cw->rank != 2 || cw->shape[0] <= p->Di || cw->shape[0] > MAX_DIM ||
        (cw->shape[0] - p->Di) % (2 * p->N) != 0) {
        snprintf(want, sizeof want,
                 "[C,W] with C = d_inner + 2*G*N, G >= 1 (d_inner = H*P = %lld, N = %lld from "
                 "state_cache)",
                 (long long)p->Di, (long long)p->N);
        return shape_error("conv_weight", cw, want);
    }
    p->C = cw->shape[0];
    p->W = cw->shape[1];
    p->G = (p->C - p->Di) / (2 * p->N);
    if (p->H % p->G != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "mamba2_block_step: conv_weight has C=%lld channels, so G=%lld groups "
                        "((C - H*P) / 2N); H=%lld (state_cache) must be a multiple of G",
                        (long long)p->C, (long long)p->G, (long long)p->H);
    p->Din = 2 * p->Di + 2 * p->G * p->N + p->H;
    const mamba2_tensor_t *ip = w->in_proj_weight, *op = w->out_proj_weight;
    if (ip->rank != 2 || ip->shape[0] != p->Din || ip->shape[1] != p->Dm) {
        snprintf(want, sizeof want,
                 "[d_in_proj,d_model] = [%lld,%lld] (2*d_inner + 2*G*N + H with d_inner=%lld, "
                 "G=%lld, N=%lld, H=%lld)",
                 (long long)p->Din, (long long)p->Dm, (long long)p->Di, (long long)p->G,
                 (long long)p->N, (long long)p->H);
        return shape_error("in_proj_weight", ip, want);
    }
    if (op->rank != 2 || op->shape[0] != p->Dm || op->shape[1] != p->Di) {
        snprintf(want, sizeof want, "[d_model,d_inner] = [%lld,%lld]", (long long)p->Dm,
                 (long long)p->Di);
        return shape_error("out_proj_weight", op, want);
    }
    return MAMBA2_STATUS_OK;
}

/* Every check, and the workspace plan for intermediates based at ws. */
static mamba2_status_t plan(mamba2_context_t *ctx, blk_plan *p, unsigned char *ws,
                            const mamba2_tensor_t *hidden, const mamba2_tensor_t *residual,
                            const mamba2_tensor_t *conv_cache, const mamba2_tensor_t *state_cache,
                            const mamba2_block_step_weights_t *w,
                            const mamba2_block_step_options_t *o) {
    memset(p, 0, sizeof *p);
    const m2_backend_ops *ops = ctx->ops;
    if (ctx->gpu || !ops->linear_forward || !ops->rmsnorm_forward || !ops->conv1d_step ||
        !ops->ssd_step)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the %s backend does not implement mamba2_block_step (it runs on the cpu "
                        "and ref backends)",
                        ops->name);
    if (!w) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "mamba2_block_step: weights is NULL");
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_BLOCK_STEP_WEIGHTS, "weights", w->struct_size));
    M2_TRY(m2_check_struct_size(MAMBA2_STRUCT_BLOCK_STEP_OPTIONS, "opts", o->struct_size));
    M2_TRY(need(hidden, "hidden"));
    M2_TRY(need(residual, "residual"));
    M2_TRY(need(conv_cache, "conv_cache"));
    M2_TRY(need(state_cache, "state_cache"));
    M2_TRY(need(w->norm_weight, "weights->norm_weight"));
    M2_TRY(need(w->in_proj_weight, "weights->in_proj_weight"));
    M2_TRY(need(w->conv_weight, "weights->conv_weight"));
    M2_TRY(need(w->A, "weights->A"));
    M2_TRY(need(w->gnorm_weight, "weights->gnorm_weight"));
    M2_TRY(need(w->out_proj_weight, "weights->out_proj_weight"));
    M2_TRY(sizes(p, hidden, state_cache, w));
    const int64_t M = p->M, Dm = p->Dm, Di = p->Di, C = p->C, H = p->H, P = p->P, N = p->N,
                  G = p->G, Din = p->Din;
    {
        const int64_t sh[2] = {M, Dm};
        int64_t n;
        M2_TRY(staged(m2_check_tensor("residual", residual, 2, sh, "[M,d_model] (hidden's shape)",
                                      MAMBA2_DTYPE_F32, "the dtype of hidden", 1, &n),
                      "residual"));
    }
    p->add_residual = o->add_residual != 0;
    {
        const size_t rb_end = offsetof(mamba2_block_step_options_t, round_bf16) + sizeof(int32_t);
        const size_t rn_end = offsetof(mamba2_block_step_options_t, round_norm_input) +
                              sizeof(int32_t);
        p->rbf = o->struct_size >= rb_end && o->round_bf16 != 0;
        p->rnorm = p->rbf && o->struct_size >= rn_end && o->round_norm_input != 0;
    }

    /* the workspace: u, zxbcdt, xBC, y, g, [bf16(residual)], then the norms' scratch */
    size_t end = 0, off_u, off_zx, off_xbc, off_y, off_g, off_r = 0;
    size_t nu, nzx, nxbc, ny;
    const int64_t fu[2] = {M, Dm}, fzx[2] = {M, Din}, fxbc[2] = {M, C}, fy[2] = {M, Di};
    if (!m2_size_prod(&nu, 2, fu) || !m2_size_prod(&nzx, 2, fzx) ||
        !m2_size_prod(&nxbc, 2, fxbc) || !m2_size_prod(&ny, 2, fy) || !place(&end, &off_u, nu) ||
        !place(&end, &off_zx, nzx) || !place(&end, &off_xbc, nxbc) || !place(&end, &off_y, ny) ||
        !place(&end, &off_g, ny) || (p->rnorm && !place(&end, &off_r, nu)) ||
        !place(&end, &p->off_sub, 0))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "mamba2_block_step: the workspace this call needs exceeds the address "
                        "space");
    p->ws = ws;
    float *u = (float *)(ws + off_u), *zx = (float *)(ws + off_zx), *xbc = (float *)(ws + off_xbc);
    float *y = (float *)(ws + off_y), *g = (float *)(ws + off_g);
    p->y = y;
    p->u = u, p->zx = zx, p->xbc = xbc, p->g = g;
    p->rr = p->rnorm ? (float *)(ws + off_r) : NULL;
    const mamba2_tensor_t trr = view2(p->rr, M, Dm, Dm);
    const mamba2_tensor_t tu = view2(u, M, Dm, Dm), tz = view2(zx, M, Di, Din),
                          txin = view2(zx + Di, M, C, Din), tdt = view2(zx + Di + C, M, H, Din),
                          tzx = view2(zx, M, Din, Din), txbc = view2(xbc, M, C, C),
                          tx = view3(xbc, M, H, P, C), tB = view3(xbc + Di, M, G, N, C),
                          tC = view3(xbc + Di + G * N, M, G, N, C), ty = view3(y, M, H, P, Di),
                          ty2 = view2(y, M, Di, Di), tg = view2(g, M, Di, Di);

    /* each op's own checks on the views it will get */
    size_t b1 = 0, b2 = 0;
    mamba2_rmsnorm_gated_options_t no = mamba2_rmsnorm_gated_options_default();
    no.eps = o->norm_eps;
    M2_TRY(staged(m2_rmsnorm_forward_prepare(ctx, &tu, p->rnorm ? &trr : residual, NULL,
                                             w->norm_weight, &no, &p->norm, &b1),
                  "the block RMSNorm (residual, norm_weight)"));
    mamba2_linear_options_t lo = mamba2_linear_options_default();
    lo.bias = w->in_proj_bias;
    M2_TRY(staged(m2_linear_prepare(ctx, &tzx, &tu, w->in_proj_weight, &lo, &p->in_proj),
                  "in_proj (in_proj_weight, in_proj_bias)"));
    const mamba2_tensor_t *cidx = o->conv_state_indices ? o->conv_state_indices
                                                        : o->state_indices;
    mamba2_conv1d_step_options_t co = mamba2_conv1d_step_options_default();
    co.bias = w->conv_bias;
    co.state_indices = cidx;
    co.activation = MAMBA2_ACTIVATION_SILU;
    M2_TRY(staged(m2_conv1d_step_prepare(ctx, &txbc, conv_cache, &txin, w->conv_weight, &co,
                                         &p->conv),
                  "conv1d_step (conv_cache, conv_weight, conv_bias, conv_state_indices)"));
    mamba2_ssd_step_options_t so = mamba2_ssd_step_options_default();
    so.D = w->D;
    so.dt_bias = w->dt_bias;
    so.state_indices = o->state_indices;
    so.dt_softplus = o->dt_softplus;
    so.dt_limit_lo = o->dt_limit_lo;
    so.dt_limit_hi = o->dt_limit_hi;
    M2_TRY(staged(m2_ssd_step_prepare(ctx, state_cache, &ty, &tx, &tdt, w->A, &tB, &tC, &so,
                                      &p->ssd),
                  "ssd_step (state_cache, A, D, dt_bias, state_indices, dt_limit)"));
    mamba2_rmsnorm_gated_options_t go = mamba2_rmsnorm_gated_options_default();
    go.eps = o->gnorm_eps;
    go.group_size = o->gnorm_group_size;
    go.norm_before_gate = o->norm_before_gate;
    M2_TRY(staged(m2_rmsnorm_forward_prepare(ctx, &tg, &ty2, &tz, w->gnorm_weight, &go, &p->gnorm,
                                             &b2),
                  "the gated RMSNorm (gnorm_weight, gnorm_eps, gnorm_group_size)"));
    lo.bias = w->out_proj_bias;
    M2_TRY(staged(m2_linear_prepare(ctx, hidden, &tg, w->out_proj_weight, &lo, &p->out_proj),
                  "out_proj (hidden, out_proj_weight, out_proj_bias)"));
    if (!m2_size_add(p->off_sub, b1 > b2 ? b1 : b2, &p->bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "mamba2_block_step: the workspace exceeds the address space");

    /* the in/out tensors overlap nothing: each other, a weight, an index tensor */
    const mamba2_tensor_t *io[4] = {hidden, residual, conv_cache, state_cache};
    const char *io_name[4] = {"hidden", "residual", "conv_cache", "state_cache"};
    const mamba2_tensor_t *in[13] = {w->norm_weight, w->in_proj_weight, w->in_proj_bias,
                                     w->conv_weight, w->conv_bias,     w->A,
                                     w->D,           w->dt_bias,       w->gnorm_weight,
                                     w->out_proj_weight, w->out_proj_bias, o->state_indices,
                                     o->conv_state_indices};
    const char *in_name[13] = {"norm_weight", "in_proj_weight", "in_proj_bias", "conv_weight",
                               "conv_bias", "A", "D", "dt_bias", "gnorm_weight",
                               "out_proj_weight", "out_proj_bias", "state_indices",
                               "conv_state_indices"};
    for (int i = 0; i < 4; i++) {
        if (numel(io[i]) == 0) continue;
        for (int j = 0; j < i; j++)
            if (numel(io[j]) > 0 && m2_may_overlap(io[i], io[j]))
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "mamba2_block_step: %s overlaps %s in memory", io_name[i],
                                io_name[j]);
        for (int j = 0; j < 13; j++) {
            if (!in[j] || numel(in[j]) == 0) continue;
            int ov;
            if (in[j]->dtype == MAMBA2_DTYPE_Q8_0) { /* no element size: compare byte ranges */
                int64_t alo, ahi, blo, bhi;
                bytes_of(io[i], &alo, &ahi);
                bytes_of(in[j], &blo, &bhi);
                ov = !(ahi <= blo || bhi <= alo);
            } else {
                ov = m2_may_overlap(io[i], in[j]);
            }
            if (ov)
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "mamba2_block_step: %s (in/out) overlaps input %s in memory",
                                io_name[i], in_name[j]);
        }
    }

    /* padding rows: the two index tensors agree on them */
    for (int64_t m = 0; m < M; m++) {
        const int64_t s = o->state_indices ? m2_index_at(o->state_indices, m) : m;
        const int64_t c = cidx ? m2_index_at(cidx, m) : m;
        if ((s < 0) != (c < 0))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "mamba2_block_step: row %lld is a padding row in one index tensor "
                            "only (state slot %lld, conv slot %lld); both must mark it negative",
                            (long long)m, (long long)s, (long long)c);
        p->padding |= s < 0;
    }
    return MAMBA2_STATUS_OK;
}

/* The residual add: residual = hidden (+ residual). A float32 sum, correctly rounded on
 * every backend, so the reference needs nothing wider. */
static void residual_add(const blk_plan *p, const mamba2_tensor_t *hidden,
                         const mamba2_tensor_t *residual) {
    for (int64_t m = 0; m < p->M; m++) {
        const float *h = (const float *)hidden->data + m * hidden->stride[0];
        float *r = (float *)residual->data + m * residual->stride[0];
        if (p->add_residual)
            for (int64_t c = 0; c < p->Dm; c++) r[c] = h[c] + r[c];
        else
            memcpy(r, h, (size_t)p->Dm * sizeof(float));
    }
}

/* bf16 mode: rows x cols floats, rows `stride` apart, rounded to bf16 in place (to nearest
 * even, as torch's .to(torch.bfloat16)); dst may differ from src (then dst is contiguous) */
static void round_rows(float *dst, const float *src, int64_t rows, int64_t cols, int64_t stride) {
    for (int64_t m = 0; m < rows; m++) {
        const float *s = src + m * stride;
        float *d = dst == src ? dst + m * stride : dst + m * cols;
        for (int64_t c = 0; c < cols; c++) d[c] = m2_bf16_to_f32(m2_f32_to_bf16(s[c]));
    }
}

/* The options with every field the caller's struct_size does not cover at its default
 * (today every field is ABI v1, so this is a copy). */
static const mamba2_block_step_options_t *opts_or_default(const mamba2_block_step_options_t *o,
                                                         mamba2_block_step_options_t *d) {
    *d = mamba2_block_step_options_default();
    return o ? o : d;
}

mamba2_block_step_options_t mamba2_block_step_options_default(void) {
    mamba2_block_step_options_t o;
    memset(&o, 0, sizeof o);
    o.struct_size = (uint32_t)sizeof o;
    o.add_residual = 1;
    o.norm_eps = 1e-5;
    o.gnorm_eps = 1e-5;
    o.dt_softplus = 1;
    o.dt_limit_hi = 1.0 / 0.0;
    return o;
}

mamba2_block_step_weights_t mamba2_block_step_weights_default(void) {
    mamba2_block_step_weights_t w;
    memset(&w, 0, sizeof w);
    w.struct_size = (uint32_t)sizeof w;
    return w;
}

mamba2_status_t mamba2_block_step_workspace_size(
    mamba2_context_t *ctx, const mamba2_tensor_t *hidden, const mamba2_tensor_t *residual,
    const mamba2_tensor_t *conv_cache, const mamba2_tensor_t *state_cache,
    const mamba2_block_step_weights_t *weights, const mamba2_block_step_options_t *opts,
    size_t *workspace_size) {
    m2_clear_error();
    if (!workspace_size) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "workspace_size is NULL");
    *workspace_size = 0;
    mamba2_block_step_options_t d;
    const mamba2_block_step_options_t *o = opts_or_default(opts, &d);
    M2_TRY(m2_ctx_enter(ctx));
    blk_plan p;
    mamba2_status_t st = plan(ctx, &p, (unsigned char *)QUERY_BASE, hidden, residual, conv_cache,
                              state_cache, weights, o);
    if (st == MAMBA2_STATUS_OK) st = m2_workspace_padded(p.bytes, workspace_size);
    m2_ctx_leave(ctx);
    return st;
}

static mamba2_status_t run_locked(mamba2_context_t *ctx, const mamba2_tensor_t *hidden,
                                  const mamba2_tensor_t *residual,
                                  const mamba2_tensor_t *conv_cache,
                                  const mamba2_tensor_t *state_cache,
                                  const mamba2_block_step_weights_t *w,
                                  const mamba2_block_step_options_t *o, void *workspace,
                                  size_t workspace_size) {
    /* the plan's offsets do not depend on the base: with the caller's workspace, plan once
     * over it; without one, plan at QUERY_BASE for the size, allocate, and plan again over
     * the allocation (the checks pass again: only the base moved) */
    const uintptr_t al = M2_WS_ALIGN - 1;
    unsigned char *base = workspace ? (unsigned char *)(((uintptr_t)workspace + al) & ~al)
                                    : (unsigned char *)QUERY_BASE;
    blk_plan p;
    M2_TRY(plan(ctx, &p, base, hidden, residual, conv_cache, state_cache, w, o));
    if (p.M == 0) return MAMBA2_STATUS_OK;
    size_t padded = 0;
    M2_TRY(m2_workspace_padded(p.bytes, &padded));
    void *ws, *owned;
    M2_TRY(m2_workspace_acquire(padded, workspace, workspace_size, &ws, &owned));
    mamba2_status_t st = MAMBA2_STATUS_OK;
    if (owned) st = plan(ctx, &p, (unsigned char *)ws, hidden, residual, conv_cache, state_cache,
                         w, o);
    if (st == MAMBA2_STATUS_OK) {
        const m2_backend_ops *ops = ctx->ops;
        void *sub = p.ws + p.off_sub;
        const int64_t M = p.M, Dm = p.Dm, Di = p.Di;
        const int r = p.rbf; /* bf16 mode: each op's output rounded right after it */
        residual_add(&p, hidden, residual);
        if (p.rnorm) round_rows(p.rr, (const float *)residual->data, M, Dm, residual->stride[0]);
        st = ops->rmsnorm_forward(ctx, &p.norm, sub);
        if (st == MAMBA2_STATUS_OK && r) round_rows(p.u, p.u, M, Dm, Dm);
        if (st == MAMBA2_STATUS_OK) st = ops->linear_forward(ctx, &p.in_proj);
        if (st == MAMBA2_STATUS_OK && r) round_rows(p.zx, p.zx, M, p.Din, p.Din);
        if (st == MAMBA2_STATUS_OK) st = ops->conv1d_step(ctx, &p.conv);
        if (st == MAMBA2_STATUS_OK && r) round_rows(p.xbc, p.xbc, M, p.C, p.C);
        if (st == MAMBA2_STATUS_OK && p.padding)
            memset(p.y, 0, (size_t)(M * Di) * sizeof(float)); /* rows ssd_step skips */
        if (st == MAMBA2_STATUS_OK) st = ops->ssd_step(ctx, &p.ssd);
        if (st == MAMBA2_STATUS_OK && r) round_rows(p.y, p.y, M, Di, Di);
        if (st == MAMBA2_STATUS_OK) st = ops->rmsnorm_forward(ctx, &p.gnorm, sub);
        if (st == MAMBA2_STATUS_OK && r) round_rows(p.g, p.g, M, Di, Di);
        if (st == MAMBA2_STATUS_OK) st = ops->linear_forward(ctx, &p.out_proj);
        if (st == MAMBA2_STATUS_OK && r)
            round_rows((float *)hidden->data, (const float *)hidden->data, M, Dm,
                       hidden->stride[0]);
    }
    free(owned);
    return st;
}

mamba2_status_t mamba2_block_step(mamba2_context_t *ctx, const mamba2_tensor_t *hidden,
                                  const mamba2_tensor_t *residual,
                                  const mamba2_tensor_t *conv_cache,
                                  const mamba2_tensor_t *state_cache,
                                  const mamba2_block_step_weights_t *weights,
                                  const mamba2_block_step_options_t *opts, void *workspace,
                                  size_t workspace_size) {
    m2_clear_error();
    mamba2_block_step_options_t d;
    const mamba2_block_step_options_t *o = opts_or_default(opts, &d);
    M2_TRY(m2_ctx_enter(ctx));
    mamba2_status_t st = run_locked(ctx, hidden, residual, conv_cache, state_cache, weights, o,
                                    workspace, workspace_size);
    m2_ctx_leave(ctx);
    return st;
}
