/*
 * ssd_bwd.c — host logic of the fused SSD backward on a GPU backend (SPEC §2): recompute the
 * forward's chunk stages into device scratch (ssd_chunked.cl), then the backward kernels of
 * ssd_bwd.cl in dependency order. Every gradient SPEC §2 lists, any subset requested; the
 * saved out_x is not needed (y is recomputed when z needs it). A backend may pass tensor-core
 * twins (m2g_ssd_backward_with; the CUDA backend's src/cuda/ssd_tc.c with MAMBA2C_CUDA_TC=1):
 * then dx and dB / dC (tf32, or bf16 MMA for bf16 storage), E, the per-token sums, and
 * bmm_chunk and chunk_state (both modes) of the recomputed forward (split tf32) run on the
 * twins with the same arguments.
 *
 * The driver binds the call's tensors (bwd_bind), carves its scratch (bwd_scratch_plan), then
 * reads as the list of launches: the forward again (bwd_forward), then the gradients
 * (bwd_grads).
 */
#include <math.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/ssd_host.h"
#include "gpu_launch/ssd_bwd.h"
#include "gpu_launch/ssd_chunked.h"

#define F4 sizeof(float)

/* the backward's own device scratch (float32 pieces of one block; the recomputed forward's
 * dt_out, dA_cumsum, CB, chunk states and states at chunk starts are in ssd_dev) */
typedef struct bwd_scratch {
    m2g_t y;          /* [B,L,H,P] y before the gate (z given only), for dz            */
    m2g_t dy;         /* [B,L,H,P] the gradient of y (after the gate)                  */
    m2g_t E, dCB;     /* [nc,H,Q,Q] dy x^T-like products; [nc,G,Q,Q] dCB               */
    m2g_t r, q, u, g; /* [nc,H,Q] per-token sums of the dt gradient                    */
    m2g_t dec;        /* [nc,H] the decay term                                         */
    m2g_t pA, pb, pD; /* [nc,H], [nc,H], [nc,H,P] per-chunk partial dA, ddt_bias, dD   */
} bwd_scratch;

/* the call's tensors: inputs in s, the gradient of the output, and the gradients */
typedef struct bwd_io {
    m2g_t dout, dfin, dx, ddt, dA, dBm, dCm, dD, dz, db, dinit;
    int dD_mode;
} bwd_io;

static mamba2_status_t no_positions(const m2g_dev *d) {
    return m2_error(MAMBA2_STATUS_UNSUPPORTED, "%s backend: the SSD backward with state positions "
                    "is not implemented on the GPU", d->api);
}

mamba2_status_t m2g_ssd_backward_workspace(const mamba2_context_t *ctx,
                                           const m2_ssd_problem *pr, size_t *bytes) {
    *bytes = 0; /* device scratch: see m2g_ssd_forward_workspace */
    if (pr->npos) return no_positions((const m2g_dev *)ctx->gpu);
    return MAMBA2_STATUS_OK;
}

/* The dt clamp's derivative is 0 where the float d lies outside [lo, hi] compared in double
 * (CPU and REF); for a float d, d < lo <=> d < f32_up(lo) and d > hi <=> d > f32_down(hi), so
 * the kernel compares in float with these (dt = 0.4f is above dt_limit hi = 0.4). */
static float f32_up(double v) {
    float f = (float)v;
    if ((double)f < v) f = nextafterf(f, INFINITY);
    return f;
}
static float f32_down(double v) {
    float f = (float)v;
    if ((double)f > v) f = nextafterf(f, -INFINITY);
    return f;
}

/* scratch pieces, in elements, padded to 64 */
enum { W_DTO, W_DAC, W_CB, W_ST, W_S0, W_Y, W_DY, W_E, W_DCB, W_R, W_Q, W_U, W_G, W_DEC, W_PA,
       W_PB, W_PD, W_N };

/* one block of scratch for s's stages and w's pieces */
static mamba2_status_t bwd_scratch_plan(m2g_call *c, const m2_ssd_problem *pr, ssd_dev *s,
                                        bwd_scratch *w) {
    const int64_t B = pr->B, L = pr->L, H = s->H, G = s->G, P = s->P, N = s->N, Q = s->Q;
    const int64_t nc = s->nc;
    size_t n[W_N], off[W_N], total = 0, bytes;
    const int64_t f[W_N][4] = {
        [W_DTO] = {H, nc, Q, 1}, [W_DAC] = {H, nc, Q, 1},   [W_CB] = {nc, G, Q, Q},
        [W_ST] = {nc, H, P, N},  [W_S0] = {nc, H, P, N},    [W_Y] = {B, L, H, pr->z.p ? P : 0},
        [W_DY] = {B, L, H, P},   [W_E] = {nc, H, Q, Q},     [W_DCB] = {nc, G, Q, Q},
        [W_R] = {nc, H, Q, 1},   [W_Q] = {nc, H, Q, 1},     [W_U] = {nc, H, Q, 1},
        [W_G] = {nc, H, Q, 1},   [W_DEC] = {nc, H, 1, 1},   [W_PA] = {nc, H, 1, 1},
        [W_PB] = {nc, H, 1, 1},  [W_PD] = {nc, H, P, 1}};
    for (int i = 0; i < W_N; i++) {
        off[i] = total;
        size_t padded;
        if (!m2_size_prod(&n[i], 4, f[i]) || !m2_size_add(n[i], 63, &padded) ||
            !m2_size_add(total, padded & ~(size_t)63, &total))
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: SSD scratch too large",
                            c->dev->api);
    }
    if (!m2_size_mul(total, F4, &bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: SSD scratch too large",
                        c->dev->api);
    m2g_mem m = 0;
    int64_t base = 0;
    M2_TRY(m2g_call_tmp(c, bytes, &m, &base, F4));
    m2g_t p[W_N];
    for (int i = 0; i < W_N; i++)
        p[i] = (m2g_t){.mem = m, .off = base + (int64_t)off[i], .present = 1};
    s->dto = (m2g_t){.mem = m, .off = p[W_DTO].off, .s = {0, nc * Q, Q, 1}, .present = 1};
    s->dac = s->dto;
    s->dac.off = p[W_DAC].off;
    s->CB = (m2g_t){.mem = m, .off = p[W_CB].off, .s = {0, G * Q * Q, Q * Q, Q, 1}, .present = 1};
    s->states =
        (m2g_t){.mem = m, .off = p[W_ST].off, .s = {0, H * P * N, P * N, N, 1}, .present = 1};
    s->start = s->states;
    s->start.off = p[W_S0].off;
    *w = (bwd_scratch){.E = p[W_E], .dCB = p[W_DCB], .r = p[W_R], .q = p[W_Q], .u = p[W_U],
                       .g = p[W_G], .dec = p[W_DEC], .pA = p[W_PA], .pb = p[W_PB], .pD = p[W_PD]};
    w->dy = (m2g_t){.mem = m, .off = p[W_DY].off, .s = {L * H * P, H * P, P, 1}, .present = 1};
    w->y = w->dy;
    w->y.off = p[W_Y].off;
    return MAMBA2_STATUS_OK;
}

/* s from pr, the chunk tables, the scratch, and every tensor of the call bound */
static mamba2_status_t bwd_bind(m2g_call *c, const m2_ssd_problem *pr, ssd_dev *s,
                                bwd_scratch *w, bwd_io *io) {
    const int64_t B = pr->B, L = pr->L, H = pr->H, G = pr->G, P = pr->P, N = pr->N;
    const int64_t S = pr->nseq, BLHP[4] = {B, L, H, P}, BLGN[4] = {B, L, G, N};
    const int64_t SHPN[4] = {S, H, P, N}, HP[2] = {H, P};
    const mamba2_dtype_t at = pr->act_dtype;
    const int Dr = pr->D_per_channel ? 2 : 1;
    *s = (ssd_dev){.nseq = S, .Q = M2G_FUSED_Q, .H = H, .G = G, .P = P, .N = N,
                   .softplus = pr->dt_softplus, .lo = (float)pr->dt_lo, .hi = (float)pr->dt_hi,
                   .lo_up = f32_up(pr->dt_lo), .hi_dn = f32_down(pr->dt_hi),
                   .D_mode = !pr->D.p ? 0 : Dr, .twin = s->twin};
    M2_TRY(m2g_fused_tables(c, pr, s->Q, &s->nc, &s->ct, &s->stab));
    M2_TRY(bwd_scratch_plan(c, pr, s, w));
    M2_TRY(m2g_call_in_native(c, &pr->x, 4, BLHP, at, &s->x));
    M2_TRY(m2g_call_in_native(c, &pr->dt, 3, BLHP, at, &s->dt));
    M2_TRY(m2g_call_in(c, &pr->A, 1, (int64_t[]){H}, F4, &s->A));
    M2_TRY(m2g_call_in_native(c, &pr->Bm, 4, BLGN, at, &s->Bm));
    M2_TRY(m2g_call_in_native(c, &pr->Cm, 4, BLGN, at, &s->Cm));
    M2_TRY(m2g_call_in(c, &pr->D, Dr, HP, F4, &s->D));
    M2_TRY(m2g_call_in_native(c, &pr->z, 4, BLHP, at, &s->z));
    M2_TRY(m2g_call_in(c, &pr->dt_bias, 1, (int64_t[]){H}, F4, &s->bias));
    M2_TRY(m2g_call_in(c, &pr->init, 4, SHPN, F4, &s->init));
    M2_TRY(m2g_call_in_native(c, &pr->dout, 4, BLHP, at, &io->dout));
    M2_TRY(m2g_call_in(c, &pr->dfinal, 4, SHPN, F4, &io->dfin));
    M2_TRY(m2g_call_out_native(c, &pr->dx, 4, BLHP, at, &io->dx));
    M2_TRY(m2g_call_out_native(c, &pr->ddt, 3, BLHP, at, &io->ddt));
    M2_TRY(m2g_call_out(c, &pr->dA, 1, (int64_t[]){H}, F4, &io->dA));
    M2_TRY(m2g_call_out_native(c, &pr->dBm, 4, BLGN, at, &io->dBm));
    M2_TRY(m2g_call_out_native(c, &pr->dCm, 4, BLGN, at, &io->dCm));
    M2_TRY(m2g_call_out(c, &pr->dD, Dr, HP, F4, &io->dD));
    M2_TRY(m2g_call_out_native(c, &pr->dz, 4, BLHP, at, &io->dz));
    M2_TRY(m2g_call_out(c, &pr->ddt_bias, 1, (int64_t[]){H}, F4, &io->db));
    M2_TRY(m2g_call_out(c, &pr->dinit, 4, SHPN, F4, &io->dinit));
    io->dD_mode = !io->dD.present ? 0 : Dr;
    return MAMBA2_STATUS_OK;
}

/* the forward's stages again: dt_out, dA_cumsum, CB, chunk states, states at chunk starts,
 * and y before the gate where z is given (for dz) */
static mamba2_status_t bwd_forward(m2g_dev *d, ssd_dev *s, const bwd_scratch *w) {
    s->final = (m2g_t){.mem = d->dummy};
    M2_TRY(m2g_run_cumsum(d, s));
    M2_TRY(m2g_run_bmm(d, s));
    M2_TRY(m2g_run_state(d, s));
    /* without chunks (no tokens) the chunk-start states are never read: the passing kernel's
     * grid is the state (P*N*H per sequence), not the tokens */
    if (s->nc > 0) M2_TRY(m2g_run_passing(d, s));
    if (!s->z.present) return MAMBA2_STATUS_OK;
    ssd_dev s2 = *s;
    s2.z = s2.outx = (m2g_t){.mem = d->dummy};
    s2.out = w->y;
    return m2g_run_scan(d, &s2);
}

/* the gradients, in dependency order (each 16x16 kernel on its twin where s->twin has one) */
static mamba2_status_t bwd_grads(m2g_dev *d, const m2_ssd_problem *pr, const ssd_dev *s,
                                 const bwd_scratch *w, const bwd_io *io, int bf16) {
    const int64_t B = pr->B, L = pr->L, H = s->H, G = s->G, P = s->P, N = s->N, Q = s->Q;
    const int64_t nc = s->nc, nq = m2g_cdiv(Q, 16);
    size_t g[3];
    int id;
    M2_TRY(M2G_LAUNCH(d, m2_ssd_bwd_gate_wi64, M2G_GRID64(B * L * H * P), .B = B, .L = L, .H = H,
                      .P = P, .dout = io->dout, .dout_ty = io->dout.ty, .z = s->z,
                      .z_ty = s->z.ty, .has_z = s->z.present,
                      .y = s->z.present ? w->y : w->dy, .dy = w->dy, .dz = io->dz,
                      .dz_ty = io->dz.ty, .has_dz = io->dz.present));
    /* the chunks' own state-gradient contributions: chunk_state mode 1 */
    memcpy(g, M2G_GRID(m2g_cdiv(P, 16) * m2g_cdiv(N, 16), H, nc), sizeof g);
    id = m2g_pick(s, M2G_K_m2_ssd_chunk_state_16x16, bf16, g);
    M2_TRY(M2G_LAUNCH_AS(d, id, m2_ssd_chunk_state_16x16, g, 0, .ct = s->ct, .Q = Q, .H = H,
                         .G = G, .P = P, .N = N, .x = w->dy, .Bm = s->Cm, .Bm_ty = s->Cm.ty,
                         .dto = s->dto, .dac = s->dac, .S = s->states, .mode = 1));
    if (nc > 0 || io->dinit.present) /* states -> dS (in place), dinit */
        M2_TRY(M2G_LAUNCH(d, m2_ssd_bwd_state_passing_wi64,
                          M2G_GRID(m2g_cdiv(P * N, 64), H, s->nseq), .st = s->stab, .nc = nc,
                          .Q = Q, .H = H, .P = P, .N = N, .ct = s->ct, .dac = s->dac,
                          .GdS = s->states, .dfin = io->dfin, .has_dfin = io->dfin.present,
                          .dinit = io->dinit, .has_dinit = io->dinit.present));
    if (io->dx.present) {
        memcpy(g, M2G_GRID(nq * m2g_cdiv(P, 16), H, nc), sizeof g);
        id = m2g_pick(s, M2G_K_m2_ssd_bwd_dx_16x16, bf16, g);
        M2_TRY(M2G_LAUNCH_AS(d, id, m2_ssd_bwd_dx_16x16, g, 0, .ct = s->ct, .nc = nc, .Q = Q,
                             .H = H, .G = G, .P = P, .N = N, .CB = s->CB, .dto = s->dto,
                             .dac = s->dac, .dS = s->states, .dy = w->dy, .Bm = s->Bm,
                             .Bm_ty = s->Bm.ty, .D = s->D, .D_mode = s->D_mode, .dx = io->dx,
                             .dx_ty = io->dx.ty));
    }
    memcpy(g, M2G_GRID(nq * nq, H, nc), sizeof g);
    id = m2g_pick(s, M2G_K_m2_ssd_bwd_E_16x16, bf16, g);
    M2_TRY(M2G_LAUNCH_AS(d, id, m2_ssd_bwd_E_16x16, g, 0, .ct = s->ct, .nc = nc, .Q = Q, .H = H,
                         .P = P, .dac = s->dac, .dy = w->dy, .x = s->x, .x_ty = s->x.ty,
                         .E = w->E));
    M2_TRY(M2G_LAUNCH(d, m2_ssd_bwd_dcb_wi64, M2G_GRID64(nc * G * Q * Q), .nc = nc, .Q = Q, .H = H,
                      .G = G, .E = w->E, .dto = s->dto, .dCB = w->dCB));
    M2_TRY(M2G_LAUNCH(d, m2_ssd_bwd_rq_wi64, M2G_GRID64(nc * H * Q), .nc = nc, .Q = Q, .H = H,
                      .G = G, .CB = s->CB, .E = w->E, .dto = s->dto, .r = w->r, .q = w->q));
    for (int mode = 0; mode < 2; mode++) { /* dCm (mode 0), dBm (mode 1) */
        const m2g_t *out = mode ? &io->dBm : &io->dCm;
        if (!out->present) continue;
        memcpy(g, M2G_GRID(nq * m2g_cdiv(N, 16), G, nc), sizeof g);
        id = m2g_pick(s, M2G_K_m2_ssd_bwd_dbc_16x16, bf16, g);
        M2_TRY(M2G_LAUNCH_AS(d, id, m2_ssd_bwd_dbc_16x16, g, 0, .ct = s->ct, .nc = nc, .Q = Q,
                             .H = H, .G = G, .P = P, .N = N, .mode = mode, .dCB = w->dCB,
                             .dto = s->dto, .dac = s->dac, .M = mode ? s->Cm : s->Bm,
                             .M_ty = mode ? s->Cm.ty : s->Bm.ty, .V = mode ? s->x : w->dy,
                             .V_ty = mode ? s->x.ty : w->dy.ty,
                             .St = mode ? s->states : s->start, .out = *out,
                             .out_ty = out->ty));
    }
    memcpy(g, M2G_GRID(nq, H, nc), sizeof g); /* u, g, the decay term */
    id = m2g_pick(s, M2G_K_m2_ssd_bwd_tok_16x16, bf16, g);
    M2_TRY(M2G_LAUNCH_AS(d, id, m2_ssd_bwd_tok_16x16, g, 0, .ct = s->ct, .nc = nc, .Q = Q,
                         .H = H, .G = G, .P = P, .N = N, .dy = w->dy, .x = s->x,
                         .x_ty = s->x.ty, .Bm = s->Bm, .Bm_ty = s->Bm.ty, .Cm = s->Cm,
                         .Cm_ty = s->Cm.ty, .S0 = s->start, .dS = s->states, .u = w->u,
                         .gv = w->g, .dec = w->dec));
    return MAMBA2_STATUS_OK;
}

/* ddt, and dA, ddt_bias, dD from the chunks' partial sums in chunk order */
static mamba2_status_t bwd_params(m2g_dev *d, const ssd_dev *s, const bwd_scratch *w,
                                  const bwd_io *io) {
    const int64_t nc = s->nc, H = s->H, P = s->P;
    M2_TRY(M2G_LAUNCH(d, m2_ssd_bwd_dt_wi64, M2G_GRID64(nc * H), .ct = s->ct, .nc = nc, .Q = s->Q,
                      .H = H, .dto = s->dto, .dac = s->dac, .r = w->r, .q = w->q, .u = w->u,
                      .gv = w->g, .dec = w->dec, .A = s->A, .dt = s->dt, .dt_ty = s->dt.ty,
                      .bias = s->bias, .has_bias = s->bias.present, .softplus = s->softplus,
                      .lo_up = s->lo_up, .hi_dn = s->hi_dn, .ddt = io->ddt,
                      .ddt_ty = io->ddt.ty, .has_ddt = io->ddt.present,
                      .pA = w->pA, .pb = w->pb));
    if (io->dD_mode)
        M2_TRY(M2G_LAUNCH(d, m2_ssd_bwd_dD_wi64, M2G_GRID64(nc * H * P), .ct = s->ct, .nc = nc,
                          .H = H, .P = P, .dy = w->dy, .x = s->x, .x_ty = s->x.ty,
                          .pD = w->pD));
    if (!io->dA.present && !io->db.present && !io->dD_mode) return MAMBA2_STATUS_OK;
    return M2G_LAUNCH(d, m2_ssd_bwd_params_wi64, M2G_GRID64(H * P), .nc = nc, .H = H, .P = P,
                      .pA = w->pA, .pb = w->pb, .pD = w->pD, .dA = io->dA,
                      .has_dA = io->dA.present, .db = io->db, .has_db = io->db.present,
                      .dD = io->dD, .dD_mode = io->dD_mode);
}

mamba2_status_t m2g_ssd_backward_with(mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                      m2g_twin_fn twin) {
    m2g_dev *d = m2g_of(ctx);
    if (pr->npos) return no_positions(d);
    M2_TRY(m2g_need_f32(d->api, MAMBA2_DTYPE_F32, pr->par_dtype)); /* half acts: native */
    m2g_call c;
    ssd_dev s = {.twin = twin};
    bwd_scratch w;
    bwd_io io;
    m2g_call_begin(&c, d);
    mamba2_status_t st = bwd_bind(&c, pr, &s, &w, &io);
    if (!st) st = bwd_forward(d, &s, &w);
    if (!st) st = bwd_grads(d, pr, &s, &w, &io, pr->act_dtype == MAMBA2_DTYPE_BF16);
    if (!st) st = bwd_params(d, &s, &w, &io);
    return m2g_call_end(&c, st);
}

mamba2_status_t m2g_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    (void)ws;
    return m2g_ssd_backward_with(ctx, pr, NULL);
}
