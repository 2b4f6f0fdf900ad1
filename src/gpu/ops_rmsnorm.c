/*
 * ops_rmsnorm.c — host logic of the gated RMSNorm (SPEC §5) on a GPU backend (any m2g_dev):
 * problem struct -> device tensors -> the launches of src/gpu/kernels/rmsnorm.cl.
 *
 * Forward: one work-group of 128 per (row, group). Backward: the same groups write dx, dz
 * and each group's r into device scratch; dweight and dbias are then summed per block of 64
 * rows and the blocks reduced in block order (a split fixed by the problem: bitwise the same
 * run to run).
 */
#include "core/rmsnorm.h"
#include "gpu/ops_common.h"
#include "gpu_launch/rmsnorm.h"

#define F4 sizeof(float)
#define RMSNORM_RB 64 /* = RMSNORM_RB in rmsnorm.cl */

static int32_t rn_gate(const m2_rmsnorm_problem *pr) {
    return pr->z.p ? (pr->norm_before_gate ? 2 : 1) : 0;
}

mamba2_status_t m2g_rmsnorm_forward_workspace(const mamba2_context_t *ctx,
                                              const m2_rmsnorm_problem *pr, size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0; /* device scratch is the context's (gpu.h) */
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_rmsnorm_backward_workspace(const mamba2_context_t *ctx,
                                               const m2_rmsnorm_problem *pr, size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_rmsnorm_forward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                    void *ws) {
    (void)ws;
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_ops_f32(d, "gated RMSNorm", pr->act_dtype, pr->par_dtype));
    const int64_t M = pr->M, D = pr->D, G = pr->G;
    m2g_call c;
    m2g_call_begin(&c, d);
    m2g_t x, z, w, bias, out, rstd;
    mamba2_status_t st = m2g_call_in(&c, &pr->x, 2, (int64_t[]){M, D}, F4, &x);
    if (!st) st = m2g_call_in(&c, &pr->z, 2, (int64_t[]){M, D}, F4, &z);
    if (!st) st = m2g_call_in(&c, &pr->weight, 1, (int64_t[]){D}, F4, &w);
    if (!st) st = m2g_call_in(&c, &pr->bias, 1, (int64_t[]){D}, F4, &bias);
    if (!st) st = m2g_call_out(&c, &pr->out, 2, (int64_t[]){M, D}, F4, &out);
    if (!st) st = m2g_call_out(&c, &pr->rstd, 2, (int64_t[]){M, G}, F4, &rstd);
    if (!st)
        st = M2G_LAUNCH(d, m2_rmsnorm_fwd_wg128, M2G_GRID(M * G, 1, 1), .out = out, .rstd = rstd,
                        .has_rstd = rstd.present, .x = x, .z = z, .w = w, .bias = bias,
                        .has_bias = bias.present, .M = M, .D = D, .S = pr->S,
                        .eps = (float)pr->eps, .gate = rn_gate(pr));
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_rmsnorm_backward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                     void *ws) {
    (void)ws;
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_ops_f32(d, "gated RMSNorm", pr->act_dtype, pr->par_dtype));
    const int64_t M = pr->M, D = pr->D, G = pr->G, nblk = m2g_cdiv(M, RMSNORM_RB);
    const int want_sums = pr->dweight.p || pr->dbias.p;
    m2g_call c;
    m2g_call_begin(&c, d);
    m2g_t x, z, w, bias, dout, rin, dx, dz, dw, db, rbuf = {0}, part = {0};
    mamba2_status_t st = m2g_call_in(&c, &pr->x, 2, (int64_t[]){M, D}, F4, &x);
    if (!st) st = m2g_call_in(&c, &pr->z, 2, (int64_t[]){M, D}, F4, &z);
    if (!st) st = m2g_call_in(&c, &pr->weight, 1, (int64_t[]){D}, F4, &w);
    if (!st) st = m2g_call_in(&c, &pr->bias, 1, (int64_t[]){D}, F4, &bias);
    if (!st) st = m2g_call_in(&c, &pr->dout, 2, (int64_t[]){M, D}, F4, &dout);
    if (!st) st = m2g_call_in(&c, &pr->rstd_in, 2, (int64_t[]){M, G}, F4, &rin);
    if (!st) st = m2g_call_out(&c, &pr->dx, 2, (int64_t[]){M, D}, F4, &dx);
    if (!st) st = m2g_call_out(&c, &pr->dz, 2, (int64_t[]){M, D}, F4, &dz);
    if (!st) st = m2g_call_out(&c, &pr->dweight, 1, (int64_t[]){D}, F4, &dw);
    if (!st) st = m2g_call_out(&c, &pr->dbias, 1, (int64_t[]){D}, F4, &db);
    rbuf.mem = part.mem = d->dummy;
    if (!st && want_sums && M > 0) {
        /* one scratch request: r[M*G], then the partials [nblk, D, 2] */
        size_t n1 = 0, n2 = 0, n = 0;
        if (!m2_size_prod(&n1, 2, (int64_t[]){M, G}) ||
            !m2_size_prod(&n2, 3, (int64_t[]){nblk, D, 2}) ||
            !m2_size_add(n1, n2, &n) || !m2_size_mul(n, F4, &n))
            st = m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: RMSNorm scratch too large",
                          d->api);
        if (!st) st = m2g_call_tmp(&c, n, &rbuf.mem, &rbuf.off, F4);
        part.mem = rbuf.mem;
        part.off = rbuf.off + (int64_t)n1;
        rbuf.present = part.present = 1;
    }
    if (!st && (dx.present || dz.present || rbuf.present))
        st = M2G_LAUNCH(d, m2_rmsnorm_bwd_wg128, M2G_GRID(M * G, 1, 1), .dx = dx,
                        .has_dx = dx.present, .dz = dz, .has_dz = dz.present, .rbuf = rbuf,
                        .has_rbuf = rbuf.present, .dout = dout, .rin = rin,
                        .has_rin = rin.present, .x = x, .z = z, .w = w, .bias = bias,
                        .has_bias = bias.present, .M = M, .D = D, .S = pr->S,
                        .eps = (float)pr->eps, .gate = rn_gate(pr));
    if (!st && part.present) /* dweight, dbias partial sums per block of 64 rows */
        st = M2G_LAUNCH(d, m2_rmsnorm_bwd_dw_r64_wi64, M2G_GRID64(nblk * D), .part = part,
                        .rbuf = rbuf, .dout = dout, .x = x, .z = z, .M = M, .D = D, .S = pr->S,
                        .gate = rn_gate(pr));
    if (!st && want_sums) /* the blocks reduced in block order */
        st = M2G_LAUNCH(d, m2_rmsnorm_bwd_reduce_wi64, M2G_GRID64(D), .dw = dw,
                        .has_dw = dw.present, .db = db, .has_db = db.present, .part = part,
                        .nblk = part.present ? nblk : 0, .D = D);
    return m2g_call_end(&c, st);
}
