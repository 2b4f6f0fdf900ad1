/*
 * ssd_ops.c — host logic of the SSD ops on a GPU backend (any m2g_dev): the five staged
 * stages of SPEC §3, each one launch of its kernel in src/gpu/kernels/ssd_chunked.cl, and
 * the fused forward as the same five launches chained on the device with the intermediates
 * (dt_out, dA_cumsum, CB, chunk states, states at chunk starts) in device scratch.
 *
 * Chunk and sequence tables (see ssd_chunked.cl) are built on the device (tables.cl): for the
 * staged ops chunk c = b*K + k covers tokens [kQ, kQ + len) of row b; for the fused forward the
 * chunks of each sequence (a batch row, or a cu_seqlens segment) are numbered one after the
 * other, so a chunk never straddles a sequence boundary, and the staged intermediates are
 * laid out as one row of nc chunks.
 */
#include <stdlib.h>
#include <string.h>

#include "core/ssd_chunked.h"
#include "gpu/gpu.h"
#include "gpu/ssd_host.h"
#include "gpu_launch/ssd_chunked.h"
#include "gpu_launch/tables.h"

/* Every staged kernel here is float32: the backend declares act_dtypes = F32 only, and the
 * staged tensors are F32 by the core's rule (par_dtype). */
mamba2_status_t m2g_need_f32(const char *api, mamba2_dtype_t at, mamba2_dtype_t pt) {
    if (at != MAMBA2_DTYPE_F32 || pt != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "%s backend: the SSD kernels take float32 only",
                        api);
    return MAMBA2_STATUS_OK;
}

/* *r = a * b for a, b >= 0; 0 when it does not fit an int64 */
static int i64_mul(int64_t a, int64_t b, int64_t *r) {
    size_t n;
    if (!m2_size_prod(&n, 2, (int64_t[]){a, b}) || n > (size_t)INT64_MAX) return 0;
    *r = (int64_t)n;
    return 1;
}

/* The tables of nseq sequences (of K chunks each, or by cu: an int64 table on the device,
 * m2g_call_index) and nc chunks, built on the device (tables.cl): *stab (NULL: not needed)
 * and *ct. L < 0: chunks of Q tokens (state_passing has no L). */
static mamba2_status_t build_tables(m2g_call *c, m2g_mem cu, int64_t nseq, int64_t nc,
                                    int64_t K, int64_t Q, int64_t L, int staged, m2g_mem *ct,
                                    m2g_mem *stab) {
    m2g_dev *d = c->dev;
    const int has_cu = cu != d->dummy;
    size_t n5, n2;
    if (!m2_size_prod(&n5, 2, (int64_t[]){nc, 5 * (int64_t)sizeof(int64_t)}) ||
        !m2_size_prod(&n2, 2, (int64_t[]){nseq, 2 * (int64_t)sizeof(int64_t)}))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "too many chunks");
    m2g_mem st = 0;
    M2_TRY(m2g_call_buf(c, n2, &st));
    M2_TRY(m2g_call_buf(c, n5, ct));
    M2_TRY(M2G_LAUNCH(d, m2_ssd_seq_table_wi64, M2G_GRID(has_cu ? 1 : m2g_groups(nseq, 64), 1, 1),
                      .cu = cu, .has_cu = has_cu, .nseq = nseq, .K = K, .Q = Q, .st = st));
    M2_TRY(M2G_LAUNCH(d, m2_ssd_chunk_table_wi64, M2G_GRID64(nc), .cu = cu, .has_cu = has_cu,
                      .st = st, .nseq = nseq, .nc = nc, .K = K, .Q = Q, .L = L,
                      .staged = staged, .ct = *ct));
    if (stab) *stab = st;
    return MAMBA2_STATUS_OK;
}

/* The regular chunk table of a staged call: B*K chunks, B sequences. */
static mamba2_status_t staged_tables(m2g_call *c, const m2_ssd_chunk_problem *pr, m2g_mem *ct,
                                     m2g_mem *stab) {
    int64_t nc;
    if (!i64_mul(pr->B, pr->K, &nc))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "too many chunks");
    return build_tables(c, c->dev->dummy, pr->B, nc, pr->K, pr->Q, pr->L ? pr->L : -1, 1, ct,
                        stab);
}

/* ---- one launch per stage, on device tensors ------------------------------------------- */

mamba2_status_t m2g_run_cumsum(m2g_dev *d, const ssd_dev *s) {
    return M2G_LAUNCH(d, m2_ssd_chunk_cumsum_wi64, M2G_GRID(m2g_cdiv(s->nc * s->H, 64), 1, 1),
                      .ct = s->ct, .nc = s->nc, .H = s->H, .Q = s->Q, .dt = s->dt, .A = s->A,
                      .bias = s->bias, .has_bias = s->bias.present, .softplus = s->softplus,
                      .lo = s->lo, .hi = s->hi, .dto = s->dto, .dac = s->dac,
                      .dt_ty = s->dt.ty);
}

mamba2_status_t m2g_run_bmm(m2g_dev *d, const ssd_dev *s) {
    const int64_t nt = m2g_cdiv(s->Q, 16);
    size_t g[3] = {(size_t)(nt * nt), (size_t)s->G, (size_t)s->nc};
    const int id = m2g_pick(s, M2G_K_m2_ssd_bmm_chunk_16x16, 0, g);
    return M2G_LAUNCH_AS(d, id, m2_ssd_bmm_chunk_16x16, g, 0, .ct = s->ct, .Q = s->Q, .N = s->N,
                         .Cm = s->Cm, .Cm_ty = s->Cm.ty, .Bm = s->Bm, .Bm_ty = s->Bm.ty,
                         .CB = s->CB);
}

mamba2_status_t m2g_run_state(m2g_dev *d, const ssd_dev *s) {
    size_t g[3] = {(size_t)(m2g_cdiv(s->P, 16) * m2g_cdiv(s->N, 16)), (size_t)s->H,
                   (size_t)s->nc};
    const int id = m2g_pick(s, M2G_K_m2_ssd_chunk_state_16x16, 0, g);
    return M2G_LAUNCH_AS(d, id, m2_ssd_chunk_state_16x16, g, 0, .ct = s->ct, .Q = s->Q,
                         .H = s->H, .G = s->G, .P = s->P, .N = s->N, .x = s->x, .x_ty = s->x.ty,
                         .Bm = s->Bm, .Bm_ty = s->Bm.ty, .dto = s->dto, .dac = s->dac,
                         .S = s->states, .mode = 0);
}

mamba2_status_t m2g_run_passing(m2g_dev *d, const ssd_dev *s) {
    return M2G_LAUNCH(d, m2_ssd_state_passing_wi64,
                      M2G_GRID(m2g_cdiv(s->P * s->N, 64), s->H, s->nseq), .ct = s->ct,
                      .st = s->stab, .Q = s->Q, .P = s->P, .N = s->N, .S = s->states,
                      .dac = s->dac, .init = s->init, .has_init = s->init.present,
                      .S0 = s->start, .fin = s->final, .has_final = s->final.present);
}

mamba2_status_t m2g_run_scan(m2g_dev *d, const ssd_dev *s) {
    return M2G_LAUNCH(d, m2_ssd_chunk_scan_16x16,
                      M2G_GRID(m2g_cdiv(s->Q, 16) * m2g_cdiv(s->P, 16), s->H, s->nc),
                      .ct = s->ct, .Q = s->Q, .H = s->H, .G = s->G, .P = s->P, .N = s->N,
                      .CB = s->CB, .x = s->x, .x_ty = s->x.ty, .dto = s->dto, .dac = s->dac,
                      .Cm = s->Cm, .Cm_ty = s->Cm.ty, .S0 = s->start, .D = s->D,
                      .D_mode = s->D_mode, .z = s->z, .z_ty = s->z.ty, .has_z = s->z.present,
                      .out = s->out, .out_ty = s->out.ty, .ox = s->outx, .ox_ty = s->outx.ty,
                      .has_ox = s->outx.present);
}

/* ---- the staged ops ------------------------------------------------------------------------ */

#define F4 sizeof(float)

static void staged_common(const m2_ssd_chunk_problem *pr, ssd_dev *s) {
    memset(s, 0, sizeof *s);
    s->nc = pr->B * pr->K;
    s->nseq = pr->B;
    s->Q = pr->Q;
    s->H = pr->H;
    s->G = pr->G ? pr->G : 1;
    s->P = pr->P;
    s->N = pr->N;
}

mamba2_status_t m2g_ssd_chunk_cumsum(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_need_f32(d->api, pr->act_dtype, pr->par_dtype));
    ssd_dev s;
    staged_common(pr, &s);
    s.softplus = pr->dt_softplus;
    s.lo = (float)pr->dt_lo;
    s.hi = (float)pr->dt_hi;
    const int64_t B = pr->B, L = pr->L, H = pr->H, K = pr->K, Q = pr->Q;
    m2g_call c;
    m2g_call_begin(&c, d);
    mamba2_status_t st = staged_tables(&c, pr, &s.ct, NULL);
    if (!st) st = m2g_call_in(&c, &pr->dt, 3, (int64_t[]){B, L, H}, F4, &s.dt);
    if (!st) st = m2g_call_in(&c, &pr->A, 1, (int64_t[]){H}, F4, &s.A);
    if (!st) st = m2g_call_in(&c, &pr->dt_bias, 1, (int64_t[]){H}, F4, &s.bias);
    if (!st) st = m2g_call_out(&c, &pr->dt_out, 4, (int64_t[]){B, H, K, Q}, F4, &s.dto);
    if (!st) st = m2g_call_out(&c, &pr->dA_cumsum, 4, (int64_t[]){B, H, K, Q}, F4, &s.dac);
    if (!st) st = m2g_run_cumsum(d, &s);
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_ssd_bmm_chunk(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_need_f32(d->api, pr->act_dtype, pr->par_dtype));
    ssd_dev s;
    staged_common(pr, &s);
    const int64_t B = pr->B, L = pr->L, G = pr->G, N = pr->N, K = pr->K, Q = pr->Q;
    m2g_call c;
    m2g_call_begin(&c, d);
    mamba2_status_t st = staged_tables(&c, pr, &s.ct, NULL);
    if (!st) st = m2g_call_in(&c, &pr->Cm, 4, (int64_t[]){B, L, G, N}, F4, &s.Cm);
    if (!st) st = m2g_call_in(&c, &pr->Bm, 4, (int64_t[]){B, L, G, N}, F4, &s.Bm);
    if (!st) st = m2g_call_out(&c, &pr->CB, 5, (int64_t[]){B, K, G, Q, Q}, F4, &s.CB);
    if (!st) st = m2g_run_bmm(d, &s);
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_ssd_chunk_state(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_need_f32(d->api, pr->act_dtype, pr->par_dtype));
    ssd_dev s;
    staged_common(pr, &s);
    const int64_t B = pr->B, L = pr->L, H = pr->H, G = pr->G, P = pr->P, N = pr->N, K = pr->K,
                  Q = pr->Q;
    m2g_call c;
    m2g_call_begin(&c, d);
    mamba2_status_t st = staged_tables(&c, pr, &s.ct, NULL);
    if (!st) st = m2g_call_in(&c, &pr->x, 4, (int64_t[]){B, L, H, P}, F4, &s.x);
    if (!st) st = m2g_call_in(&c, &pr->Bm, 4, (int64_t[]){B, L, G, N}, F4, &s.Bm);
    if (!st) st = m2g_call_in(&c, &pr->dt_out, 4, (int64_t[]){B, H, K, Q}, F4, &s.dto);
    if (!st) st = m2g_call_in(&c, &pr->dA_cumsum, 4, (int64_t[]){B, H, K, Q}, F4, &s.dac);
    if (!st) st = m2g_call_out(&c, &pr->states, 5, (int64_t[]){B, K, H, P, N}, F4, &s.states);
    if (!st) st = m2g_run_state(d, &s);
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_ssd_state_passing(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_need_f32(d->api, pr->par_dtype, pr->par_dtype));
    ssd_dev s;
    staged_common(pr, &s);
    const int64_t B = pr->B, H = pr->H, P = pr->P, N = pr->N, K = pr->K, Q = pr->Q;
    m2g_call c;
    m2g_call_begin(&c, d);
    mamba2_status_t st = staged_tables(&c, pr, &s.ct, &s.stab);
    if (!st) st = m2g_call_in(&c, &pr->states, 5, (int64_t[]){B, K, H, P, N}, F4, &s.states);
    if (!st) st = m2g_call_in(&c, &pr->dA_cumsum, 4, (int64_t[]){B, H, K, Q}, F4, &s.dac);
    if (!st) st = m2g_call_in(&c, &pr->init, 4, (int64_t[]){B, H, P, N}, F4, &s.init);
    if (!st)
        st = m2g_call_out(&c, &pr->states_start, 5, (int64_t[]){B, K, H, P, N}, F4, &s.start);
    if (!st) st = m2g_call_out(&c, &pr->final, 4, (int64_t[]){B, H, P, N}, F4, &s.final);
    if (!st) st = m2g_run_passing(d, &s);
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_ssd_chunk_scan(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_need_f32(d->api, pr->act_dtype, pr->par_dtype));
    ssd_dev s;
    staged_common(pr, &s);
    const int64_t B = pr->B, L = pr->L, H = pr->H, G = pr->G, P = pr->P, N = pr->N, K = pr->K,
                  Q = pr->Q;
    s.D_mode = !pr->D.p ? 0 : pr->D_per_channel ? 2 : 1;
    m2g_call c;
    m2g_call_begin(&c, d);
    mamba2_status_t st = staged_tables(&c, pr, &s.ct, NULL);
    if (!st) st = m2g_call_in(&c, &pr->CB, 5, (int64_t[]){B, K, G, Q, Q}, F4, &s.CB);
    if (!st) st = m2g_call_in(&c, &pr->x, 4, (int64_t[]){B, L, H, P}, F4, &s.x);
    if (!st) st = m2g_call_in(&c, &pr->dt_out, 4, (int64_t[]){B, H, K, Q}, F4, &s.dto);
    if (!st) st = m2g_call_in(&c, &pr->dA_cumsum, 4, (int64_t[]){B, H, K, Q}, F4, &s.dac);
    if (!st) st = m2g_call_in(&c, &pr->Cm, 4, (int64_t[]){B, L, G, N}, F4, &s.Cm);
    if (!st)
        st = m2g_call_in(&c, &pr->states_start, 5, (int64_t[]){B, K, H, P, N}, F4, &s.start);
    if (!st)
        st = m2g_call_in(&c, &pr->D, pr->D_per_channel ? 2 : 1, (int64_t[]){H, P}, F4, &s.D);
    if (!st) st = m2g_call_in(&c, &pr->z, 4, (int64_t[]){B, L, H, P}, F4, &s.z);
    if (!st) st = m2g_call_out(&c, &pr->out, 4, (int64_t[]){B, L, H, P}, F4, &s.out);
    m2_view none = {0};
    if (!st) st = m2g_call_out(&c, &none, 4, (int64_t[]){B, L, H, P}, F4, &s.outx);
    if (!st) st = m2g_run_scan(d, &s);
    return m2g_call_end(&c, st);
}

/* ---- the fused forward ---------------------------------------------------------------------- */


/* Device scratch lives in the call (host mode) or the context's arena (device mode), so the
 * core's host workspace is not used. */
mamba2_status_t m2g_ssd_forward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                          size_t *bytes) {
    (void)ctx;
    (void)pr;
    *bytes = 0;
    return MAMBA2_STATUS_OK;
}

/* Chunks of every sequence in order: ct[5c..] = {b, t0, len, 0, c}; st[2s..] = [c0, c1).
 * With device cu_seqlens the chunk count is not known on the host: nc is then its upper
 * bound ceil(L/Q) + nseq, the chunks past the real ones of length 0 (tables.cl). */
mamba2_status_t m2g_fused_tables(m2g_call *c, const m2_ssd_problem *pr, int64_t Q,
                                 int64_t *nc_out, m2g_mem *ct, m2g_mem *stab) {
    const int64_t K = m2g_cdiv(pr->L, Q);
    int64_t nc = 0;
    m2g_mem cu = c->dev->dummy;
    if (!pr->cu_seqlens) {
        if (!i64_mul(pr->B, K, &nc))
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "too many chunks");
    } else if (c->dev->device_memory && c->dev->device_indices) {
        nc = K + pr->nseq;
    } else {
        for (int64_t s = 0; s < pr->nseq; s++) {
            int64_t b, t0, t1;
            m2_ssd_seq(pr, s, &b, &t0, &t1);
            nc += m2g_cdiv(t1 - t0, Q);
        }
    }
    *nc_out = nc;
    if (pr->cu_seqlens)
        M2_TRY(m2g_call_index(c, pr->cu_seqlens, pr->cu_dtype, pr->nseq + 1, 1, 0, pr->L, &cu));
    return build_tables(c, cu, pr->nseq, nc, K, Q, pr->L, 0, ct, stab);
}

/* The scan with the states on chip (m2_ssd_scan_seq_16x16) replaces chunk_state,
 * state_passing and chunk_scan when its 16 x N state slice fits (N <= 128, ~19 KB of local
 * memory) and no states at positions are asked for (they need the states at chunk starts).
 * MAMBA2C_GPU_SSD_FWD=staged forces the three-launch form (the tests run both; on the CUDA
 * tensor cores it forces their two-kernel form over their on-chip scan). The rule is
 * not tuned: no GPU measurement exists yet (docs/gpu.md §4). */
int m2g_ssd_staged_forced(void) {
    const char *e = getenv("MAMBA2C_GPU_SSD_FWD");
    return e && !strcmp(e, "staged");
}
static int use_scan_seq(const m2g_dev *d, const m2_ssd_problem *pr) {
    if (m2g_ssd_staged_forced()) return 0;
    return pr->N <= 128 && pr->npos == 0 && d->local_mem >= 32 * 1024;
}

static mamba2_status_t run_scan_seq(m2g_dev *d, const ssd_dev *s) {
    return M2G_LAUNCH(d, m2_ssd_scan_seq_16x16, M2G_GRID(m2g_cdiv(s->P, 16), s->H, s->nseq),
                      .ct = s->ct, .st = s->stab, .Q = s->Q, .H = s->H, .G = s->G, .P = s->P,
                      .N = s->N, .CB = s->CB, .x = s->x, .x_ty = s->x.ty, .dto = s->dto,
                      .dac = s->dac, .Bm = s->Bm, .Bm_ty = s->Bm.ty, .Cm = s->Cm,
                      .Cm_ty = s->Cm.ty, .D = s->D, .D_mode = s->D_mode, .z = s->z,
                      .z_ty = s->z.ty, .has_z = s->z.present, .init = s->init,
                      .has_init = s->init.present, .out = s->out, .out_ty = s->out.ty,
                      .ox = s->outx, .ox_ty = s->outx.ty, .has_ox = s->outx.present,
                      .fin = s->final, .has_final = s->final.present);
}

/* mamba2_ssd_forward_states: the state after each chosen token, from the states at chunk
 * starts. Positions are flat token indices b*L + t, increasing, as are the chunks (by row,
 * then token): m2_ssd_pos_table_wi64 finds each one's chunk by bisection. */
static mamba2_status_t pos_table(m2g_call *c, const m2_ssd_problem *pr, const ssd_dev *s,
                                 m2g_mem *ptab) {
    size_t bytes;
    int64_t ntok;
    if (!m2_size_prod(&bytes, 2, (int64_t[]){pr->npos, 2 * (int64_t)sizeof(int64_t)}) ||
        !i64_mul(pr->B, pr->L, &ntok))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "too many state positions");
    m2g_mem pos = 0;
    M2_TRY(m2g_call_index(c, pr->positions, pr->pos_dtype, pr->npos, 0, 0, ntok - 1, &pos));
    M2_TRY(m2g_call_buf(c, bytes, ptab));
    return M2G_LAUNCH(c->dev, m2_ssd_pos_table_wi64, M2G_GRID64(pr->npos), .pos = pos,
                      .npos = pr->npos, .ct = s->ct, .st = s->stab, .nseq = s->nseq, .L = pr->L,
                      .pt = *ptab);
}

mamba2_status_t m2g_ssd_pos_states(m2g_call *c, const m2_ssd_problem *pr, const ssd_dev *s) {
    m2g_mem ptab = 0;
    m2g_t ps;
    M2_TRY(pos_table(c, pr, s, &ptab));
    M2_TRY(m2g_call_out(c, &pr->pos_states, 4, (int64_t[]){pr->npos, s->H, s->P, s->N},
                        sizeof(float), &ps));
    return M2G_LAUNCH(c->dev, m2_ssd_pos_state_16x16,
                      M2G_GRID(m2g_cdiv(s->P, 16) * m2g_cdiv(s->N, 16), s->H, pr->npos),
                      .ct = s->ct, .pt = ptab, .Q = s->Q, .H = s->H, .G = s->G, .P = s->P,
                      .N = s->N, .x = s->x, .x_ty = s->x.ty, .Bm = s->Bm, .Bm_ty = s->Bm.ty,
                      .dto = s->dto, .dac = s->dac, .S0 = s->start, .ps = ps);
}

/* scratch, one block: dt_out, dA_cumsum [1,H,nc,Q]; CB [1,nc,G,Q,Q] (with_cb); states and
 * states_start [1,nc,H,P,N] (float32 each) */
static mamba2_status_t fwd_scratch(m2g_call *c, int with_cb, ssd_dev *s) {
    const int64_t nc = s->nc, H = s->H, G = s->G, P = s->P, N = s->N, Q = s->Q;
    size_t n_dt = 0, n_cb = 0, n_st = 0, total = 0;
    if (!m2_size_prod(&n_dt, 3, (int64_t[]){H, nc, Q}) ||
        !m2_size_prod(&n_cb, 4, (int64_t[]){with_cb ? nc : 0, G, Q, Q}) ||
        !m2_size_prod(&n_st, 4, (int64_t[]){nc, H, P, N}) || !m2_size_add(n_dt, n_dt, &total) ||
        !m2_size_add(total, n_cb, &total) || !m2_size_add(total, n_st, &total) ||
        !m2_size_add(total, n_st, &total) || !m2_size_mul(total, F4, &total))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: SSD scratch too large",
                        c->dev->api);
    m2g_mem w = 0;
    int64_t base = 0;
    M2_TRY(m2g_call_tmp(c, total, &w, &base, F4));
    s->dto = (m2g_t){.mem = w, .off = base, .s = {0, nc * Q, Q, 1}, .present = 1};
    s->dac = s->dto;
    s->dac.off = base + (int64_t)n_dt;
    s->CB = (m2g_t){.mem = w, .off = base + 2 * (int64_t)n_dt, .s = {0, G * Q * Q, Q * Q, Q, 1},
                    .present = 1};
    s->states = (m2g_t){.mem = w, .off = s->CB.off + (int64_t)n_cb,
                        .s = {0, H * P * N, P * N, N, 1}, .present = 1};
    s->start = s->states;
    s->start.off = s->states.off + (int64_t)n_st;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_ssd_fwd_bind(m2g_call *c, const m2_ssd_problem *pr, int with_cb,
                                 ssd_dev *s) {
    const int64_t B = pr->B, L = pr->L, H = pr->H, G = pr->G, P = pr->P, N = pr->N;
    const int64_t S = pr->nseq, BLHP[4] = {B, L, H, P}, BLGN[4] = {B, L, G, N};
    const mamba2_dtype_t at = pr->act_dtype;
    memset(s, 0, sizeof *s);
    *s = (ssd_dev){.nseq = S, .Q = M2G_FUSED_Q, .H = H, .G = G, .P = P, .N = N,
                   .softplus = pr->dt_softplus, .lo = (float)pr->dt_lo, .hi = (float)pr->dt_hi,
                   .D_mode = !pr->D.p ? 0 : pr->D_per_channel ? 2 : 1};
    M2_TRY(m2g_fused_tables(c, pr, s->Q, &s->nc, &s->ct, &s->stab));
    M2_TRY(fwd_scratch(c, with_cb, s));
    M2_TRY(m2g_call_in_native(c, &pr->x, 4, BLHP, at, &s->x));
    M2_TRY(m2g_call_in_native(c, &pr->dt, 3, BLHP, at, &s->dt));
    M2_TRY(m2g_call_in(c, &pr->A, 1, (int64_t[]){H}, F4, &s->A));
    M2_TRY(m2g_call_in_native(c, &pr->Bm, 4, BLGN, at, &s->Bm));
    M2_TRY(m2g_call_in_native(c, &pr->Cm, 4, BLGN, at, &s->Cm));
    M2_TRY(m2g_call_in(c, &pr->D, pr->D_per_channel ? 2 : 1, (int64_t[]){H, P}, F4, &s->D));
    M2_TRY(m2g_call_in_native(c, &pr->z, 4, BLHP, at, &s->z));
    M2_TRY(m2g_call_in(c, &pr->dt_bias, 1, (int64_t[]){H}, F4, &s->bias));
    M2_TRY(m2g_call_in(c, &pr->init, 4, (int64_t[]){S, H, P, N}, F4, &s->init));
    M2_TRY(m2g_call_out_native(c, &pr->out, 4, BLHP, at, &s->out));
    M2_TRY(m2g_call_out_native(c, &pr->out_x, 4, BLHP, at, &s->outx));
    return m2g_call_out(c, &pr->final, 4, (int64_t[]){S, H, P, N}, F4, &s->final);
}

mamba2_status_t m2g_ssd_fwd_empty(m2g_dev *d, const ssd_dev *s) {
    return s->final.present ? m2g_run_passing(d, s) : MAMBA2_STATUS_OK;
}

/* The portable fused forward: chunk_cumsum, bmm_chunk, then the on-chip scan or chunk_state,
 * state_passing, chunk_scan (and the states at positions). */
mamba2_status_t m2g_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    (void)ws;
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_need_f32(d->api, MAMBA2_DTYPE_F32, pr->par_dtype)); /* half acts: native */
    m2g_call c;
    ssd_dev s;
    m2g_call_begin(&c, d);
    mamba2_status_t st = m2g_ssd_fwd_bind(&c, pr, 1, &s);
    if (!st && s.nc == 0) return m2g_call_end(&c, m2g_ssd_fwd_empty(d, &s));
    if (!st) st = m2g_run_cumsum(d, &s);
    if (!st) st = m2g_run_bmm(d, &s);
    if (!st && use_scan_seq(d, pr)) return m2g_call_end(&c, run_scan_seq(d, &s));
    if (!st) st = m2g_run_state(d, &s);
    if (!st) st = m2g_run_passing(d, &s);
    if (!st) st = m2g_run_scan(d, &s);
    if (!st && pr->npos) st = m2g_ssd_pos_states(&c, pr, &s);
    return m2g_call_end(&c, st);
}
