/*
 * ssd_bwd.c — host logic of the fused SSD backward on a GPU backend (SPEC §2): recompute the
 * forward's chunk stages into device scratch (ssd_chunked.cl), then the backward kernels of
 * ssd_bwd.cl in dependency order. Every gradient SPEC §2 lists, any subset requested; the
 * saved out_x is not needed (y is recomputed when z needs it). On a CUDA context made with
 * MAMBA2C_CUDA_TC=1 (m2g_dev.ssd_tc_bwd), dx and dB / dC (tf32, or bf16 MMA
 * for bf16 storage), E, the per-token sums, and bmm_chunk and chunk_state (both modes) of the
 * recomputed forward (split tf32) run on their tensor-core twins (src/cuda/ssd_tc_bwd.cuh)
 * with the same arguments.
 */
#include <math.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/ssd_host.h"

static const size_t L16x16[3] = {16, 16, 1}, L64[3] = {64, 1, 1};
#define F4 sizeof(float)

/* scratch pieces, in elements */
enum { W_DTO, W_DAC, W_CB, W_ST, W_S0, W_Y, W_DY, W_E, W_DCB, W_R, W_Q, W_U, W_G, W_DEC, W_PA,
       W_PB, W_PD, W_N };

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

/* a 16x16 kernel of ssd_bwd.cl, or its tensor-core twin on the same arguments */
static mamba2_status_t launch16(m2g_dev *d, int tc, int bf16, const ssd_dev *s, int id,
                                const size_t g[3], const m2g_args *a) {
    return tc ? d->ssd_tc_bwd(d, id, s, bf16, a) : m2g_launch(d, id, g, L16x16, a);
}

static void g64(size_t g[3], int64_t n) {
    g[0] = (size_t)m2g_cdiv(n, 64);
    g[1] = g[2] = 1;
}

mamba2_status_t m2g_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    (void)ws;
    m2g_dev *d = m2g_of(ctx);
    if (pr->npos) return no_positions(d);
    M2_TRY(m2g_need_f32(d->api, MAMBA2_DTYPE_F32, pr->par_dtype)); /* half acts: converted */
    const int64_t B = pr->B, L = pr->L, H = pr->H, G = pr->G, P = pr->P, N = pr->N;
    const int64_t Q = M2G_FUSED_Q, S = pr->nseq, BLHP[4] = {B, L, H, P};
    ssd_dev s;
    memset(&s, 0, sizeof s);
    s.nseq = S;
    s.Q = Q;
    s.H = H;
    s.G = G;
    s.P = P;
    s.N = N;
    s.softplus = pr->dt_softplus;
    s.lo = (float)pr->dt_lo;
    s.hi = (float)pr->dt_hi;
    s.lo_up = f32_up(pr->dt_lo);
    s.hi_dn = f32_down(pr->dt_hi);
    s.D_mode = !pr->D.p ? 0 : pr->D_per_channel ? 2 : 1;
    m2g_call c;
    m2g_call_begin(&c, d);
    mamba2_status_t st = m2g_fused_tables(&c, pr, Q, &s.nc, &s.ct, &s.stab);
    const int64_t nc = s.nc;
    const int tc = d->ssd_tc_bwd != NULL; /* MAMBA2C_CUDA_TC=1 */
    const int bf16 = pr->act_dtype == MAMBA2_DTYPE_BF16;
    s.tc_split = tc;

    /* the scratch block: piece sizes in elements, then offsets */
    size_t n[W_N], off[W_N], total = 0;
    const int64_t f[W_N][4] = {
        [W_DTO] = {H, nc, Q, 1}, [W_DAC] = {H, nc, Q, 1},   [W_CB] = {nc, G, Q, Q},
        [W_ST] = {nc, H, P, N},  [W_S0] = {nc, H, P, N},    [W_Y] = {B, L, H, pr->z.p ? P : 0},
        [W_DY] = {B, L, H, P},   [W_E] = {nc, H, Q, Q},     [W_DCB] = {nc, G, Q, Q},
        [W_R] = {nc, H, Q, 1},   [W_Q] = {nc, H, Q, 1},     [W_U] = {nc, H, Q, 1},
        [W_G] = {nc, H, Q, 1},   [W_DEC] = {nc, H, 1, 1},   [W_PA] = {nc, H, 1, 1},
        [W_PB] = {nc, H, 1, 1},  [W_PD] = {nc, H, P, 1}};
    for (int i = 0; !st && i < W_N; i++) {
        off[i] = total;
        size_t padded;
        if (!m2_size_prod(&n[i], 4, f[i]) || !m2_size_add(n[i], 63, &padded) ||
            !m2_size_add(total, padded & ~(size_t)63, &total))
            st = m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: SSD scratch too large", d->api);
    }
    size_t bytes = 0;
    if (!st && !m2_size_mul(total, F4, &bytes))
        st = m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: SSD scratch too large", d->api);
    m2g_mem w = 0;
    int64_t base = 0;
    if (!st) st = m2g_call_tmp(&c, bytes, &w, &base, F4);
#define WO(i) (base + (int64_t)off[i])
    m2g_t dy = {0}, y = {0};
    if (!st) {
        s.dto = (m2g_t){.mem = w, .off = WO(W_DTO), .s = {0, nc * Q, Q, 1}, .present = 1};
        s.dac = (m2g_t){.mem = w, .off = WO(W_DAC), .s = {0, nc * Q, Q, 1}, .present = 1};
        s.CB = (m2g_t){.mem = w, .off = WO(W_CB), .s = {0, G * Q * Q, Q * Q, Q, 1}, .present = 1};
        s.states = (m2g_t){.mem = w, .off = WO(W_ST), .s = {0, H * P * N, P * N, N, 1}, .present = 1};
        s.start = s.states;
        s.start.off = WO(W_S0);
        dy = (m2g_t){.mem = w, .off = WO(W_DY), .s = {L * H * P, H * P, P, 1}, .present = 1};
        y = dy;
        y.off = WO(W_Y);
    }
    /* inputs and outputs */
    m2g_t dout, dfin, dx, ddt, dA, dBm, dCm, dD, dz, db, dinit;
    if (!st) st = m2g_call_in_act(&c, &pr->x, 4, BLHP, pr->act_dtype, &s.x);
    if (!st) st = m2g_call_in_act(&c, &pr->dt, 3, BLHP, pr->act_dtype, &s.dt);
    if (!st) st = m2g_call_in(&c, &pr->A, 1, (int64_t[]){H}, F4, &s.A);
    if (!st) st = m2g_call_in_act(&c, &pr->Bm, 4, (int64_t[]){B, L, G, N}, pr->act_dtype, &s.Bm);
    if (!st) st = m2g_call_in_act(&c, &pr->Cm, 4, (int64_t[]){B, L, G, N}, pr->act_dtype, &s.Cm);
    if (!st) st = m2g_call_in(&c, &pr->D, pr->D_per_channel ? 2 : 1, (int64_t[]){H, P}, F4, &s.D);
    if (!st) st = m2g_call_in_act(&c, &pr->z, 4, BLHP, pr->act_dtype, &s.z);
    if (!st) st = m2g_call_in(&c, &pr->dt_bias, 1, (int64_t[]){H}, F4, &s.bias);
    if (!st) st = m2g_call_in(&c, &pr->init, 4, (int64_t[]){S, H, P, N}, F4, &s.init);
    if (!st) st = m2g_call_in_act(&c, &pr->dout, 4, BLHP, pr->act_dtype, &dout);
    if (!st) st = m2g_call_in(&c, &pr->dfinal, 4, (int64_t[]){S, H, P, N}, F4, &dfin);
    if (!st) st = m2g_call_out_act(&c, &pr->dx, 4, BLHP, pr->act_dtype, &dx);
    if (!st) st = m2g_call_out_act(&c, &pr->ddt, 3, BLHP, pr->act_dtype, &ddt);
    if (!st) st = m2g_call_out(&c, &pr->dA, 1, (int64_t[]){H}, F4, &dA);
    if (!st) st = m2g_call_out_act(&c, &pr->dBm, 4, (int64_t[]){B, L, G, N}, pr->act_dtype, &dBm);
    if (!st) st = m2g_call_out_act(&c, &pr->dCm, 4, (int64_t[]){B, L, G, N}, pr->act_dtype, &dCm);
    if (!st)
        st = m2g_call_out(&c, &pr->dD, pr->D_per_channel ? 2 : 1, (int64_t[]){H, P}, F4, &dD);
    if (!st) st = m2g_call_out_act(&c, &pr->dz, 4, BLHP, pr->act_dtype, &dz);
    if (!st) st = m2g_call_out(&c, &pr->ddt_bias, 1, (int64_t[]){H}, F4, &db);
    if (!st) st = m2g_call_out(&c, &pr->dinit, 4, (int64_t[]){S, H, P, N}, F4, &dinit);

    /* the forward's stages again: dt_out, dA_cumsum, CB, chunk states, states at chunk starts */
    const m2g_t no_final = {.mem = d->dummy};
    s.final = no_final;
    if (!st) st = m2g_run_cumsum(d, &s);
    if (!st) st = m2g_run_bmm(d, &s);
    if (!st) st = m2g_run_state(d, &s);
    /* without chunks (no tokens) the chunk-start states are never read: the passing kernel's
     * grid is the state (P*N*H per sequence), not the tokens */
    if (!st && nc > 0) st = m2g_run_passing(d, &s);
    if (!st && pr->z.p) { /* y before the gate, for dz */
        ssd_dev s2 = s;
        s2.z = (m2g_t){.mem = d->dummy};
        s2.out = y;
        s2.outx = (m2g_t){.mem = d->dummy};
        st = m2g_run_scan(d, &s2);
    }
    size_t g[3];
    m2g_args a;
    if (!st) { /* dy, dz */
        a.n = 0;
        m2g_arg_i64(&a, B), m2g_arg_i64(&a, L), m2g_arg_i64(&a, H), m2g_arg_i64(&a, P);
        m2g_arg_t(&a, &dout, 3);
        m2g_arg_t(&a, &s.z, 3);
        m2g_arg_i32(&a, s.z.present);
        m2g_arg_t(&a, pr->z.p ? &y : &dy, 3);
        m2g_arg_t(&a, &dy, 3);
        m2g_arg_t(&a, &dz, 3);
        m2g_arg_i32(&a, dz.present);
        g64(g, B * L * H * P);
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_gate_wi64, g, L64, &a);
    }
    if (!st) { /* the chunks' own state-gradient contributions: chunk_state mode 1 */
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, G), m2g_arg_i64(&a, P),
            m2g_arg_i64(&a, N);
        m2g_arg_t(&a, &dy, 3);
        m2g_arg_t(&a, &s.Cm, 3);
        m2g_arg_t(&a, &s.dto, 3);
        m2g_arg_t(&a, &s.dac, 3);
        m2g_arg_t(&a, &s.states, 4);
        m2g_arg_i32(&a, 1);
        const size_t gg[3] = {(size_t)(m2g_cdiv(P, 16) * m2g_cdiv(N, 16)), (size_t)H, (size_t)nc};
        st = launch16(d, tc, bf16, &s, M2G_K_m2_ssd_chunk_state_16x16, gg, &a);
    }
    if (!st && (nc > 0 || dinit.present)) { /* backward state passing: states -> dS, dinit */
        a.n = 0;
        m2g_arg_mem(&a, s.stab);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, P),
            m2g_arg_i64(&a, N);
        m2g_arg_mem(&a, s.ct);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DAC));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_ST));
        m2g_arg_t(&a, &dfin, 3);
        m2g_arg_i32(&a, dfin.present);
        m2g_arg_t(&a, &dinit, 3);
        m2g_arg_i32(&a, dinit.present);
        const size_t gg[3] = {(size_t)m2g_cdiv(P * N, 64), (size_t)H, (size_t)S};
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_state_passing_wi64, gg, L64, &a);
    }
    if (!st && dx.present) {
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, G),
            m2g_arg_i64(&a, P), m2g_arg_i64(&a, N);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_CB));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DTO));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DAC));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_ST));
        m2g_arg_t(&a, &dy, 3);
        m2g_arg_t(&a, &s.Bm, 3);
        m2g_arg_t(&a, &s.D, 1);
        m2g_arg_i32(&a, s.D_mode);
        m2g_arg_t(&a, &dx, 3);
        const size_t gg[3] = {(size_t)(m2g_cdiv(Q, 16) * m2g_cdiv(P, 16)), (size_t)H, (size_t)nc};
        st = launch16(d, tc, bf16, &s, M2G_K_m2_ssd_bwd_dx_16x16, gg, &a);
    }
    if (!st) { /* E */
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, P);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DAC));
        m2g_arg_t(&a, &dy, 3);
        m2g_arg_t(&a, &s.x, 3);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_E));
        const int64_t nt = m2g_cdiv(Q, 16);
        const size_t gg[3] = {(size_t)(nt * nt), (size_t)H, (size_t)nc};
        st = launch16(d, tc, bf16, &s, M2G_K_m2_ssd_bwd_E_16x16, gg, &a);
    }
    if (!st) { /* dCBg */
        a.n = 0;
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, G);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_E));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DTO));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DCB));
        g64(g, nc * G * Q * Q);
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_dcb_wi64, g, L64, &a);
    }
    if (!st) { /* r, q */
        a.n = 0;
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, G);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_CB));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_E));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DTO));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_R));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_Q));
        g64(g, nc * H * Q);
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_rq_wi64, g, L64, &a);
    }
    /* dCm (mode 0), dBm (mode 1) */
    for (int mode = 0; mode < 2 && !st; mode++) {
        const m2g_t *out = mode ? &dBm : &dCm;
        if (!out->present) continue;
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, G),
            m2g_arg_i64(&a, P), m2g_arg_i64(&a, N);
        m2g_arg_i32(&a, mode);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DCB));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DTO));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DAC));
        m2g_arg_t(&a, mode ? &s.Cm : &s.Bm, 3);
        m2g_arg_t(&a, mode ? &s.x : &dy, 3);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, mode ? WO(W_ST) : WO(W_S0));
        m2g_arg_t(&a, out, 3);
        const size_t gg[3] = {(size_t)(m2g_cdiv(Q, 16) * m2g_cdiv(N, 16)), (size_t)G, (size_t)nc};
        st = launch16(d, tc, bf16, &s, M2G_K_m2_ssd_bwd_dbc_16x16, gg, &a);
    }
    if (!st) { /* u, g, the decay term */
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H), m2g_arg_i64(&a, G),
            m2g_arg_i64(&a, P), m2g_arg_i64(&a, N);
        m2g_arg_t(&a, &dy, 3);
        m2g_arg_t(&a, &s.x, 3);
        m2g_arg_t(&a, &s.Bm, 3);
        m2g_arg_t(&a, &s.Cm, 3);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_S0));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_ST));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_U));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_G));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DEC));
        const size_t gt[3] = {(size_t)m2g_cdiv(Q, 16), (size_t)H, (size_t)nc};
        st = launch16(d, tc, bf16, &s, M2G_K_m2_ssd_bwd_tok_16x16, gt, &a);
    }
    if (!st) { /* ddt and the chunks' partial dA, ddt_bias */
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, Q), m2g_arg_i64(&a, H);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DTO));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DAC));
        static const int v[4] = {W_R, W_Q, W_U, W_G};
        for (int k = 0; k < 4; k++) m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(v[k]));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_DEC));
        m2g_arg_t(&a, &s.A, 0);
        m2g_arg_t(&a, &s.dt, 2);
        m2g_arg_t(&a, &s.bias, 0);
        m2g_arg_i32(&a, s.bias.present);
        m2g_arg_i32(&a, s.softplus);
        m2g_arg_f32(&a, s.lo_up);
        m2g_arg_f32(&a, s.hi_dn);
        m2g_arg_t(&a, &ddt, 2);
        m2g_arg_i32(&a, ddt.present);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_PA));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_PB));
        g64(g, nc * H);
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_dt_wi64, g, L64, &a);
    }
    const int dD_mode = !dD.present ? 0 : pr->D_per_channel ? 2 : 1;
    if (!st && dD_mode) {
        a.n = 0;
        m2g_arg_mem(&a, s.ct);
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, H), m2g_arg_i64(&a, P);
        m2g_arg_t(&a, &dy, 3);
        m2g_arg_t(&a, &s.x, 3);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_PD));
        g64(g, nc * H * P);
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_dD_wi64, g, L64, &a);
    }
    if (!st && (dA.present || db.present || dD_mode)) {
        a.n = 0;
        m2g_arg_i64(&a, nc), m2g_arg_i64(&a, H), m2g_arg_i64(&a, P);
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_PA));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_PB));
        m2g_arg_mem(&a, w), m2g_arg_i64(&a, WO(W_PD));
        m2g_arg_t(&a, &dA, 0);
        m2g_arg_i32(&a, dA.present);
        m2g_arg_t(&a, &db, 0);
        m2g_arg_i32(&a, db.present);
        m2g_arg_t(&a, &dD, 1);
        m2g_arg_i32(&a, dD_mode);
        g64(g, H * P);
        st = m2g_launch(d, M2G_K_m2_ssd_bwd_params_wi64, g, L64, &a);
    }
    return m2g_call_end(&c, st);
}
