/*
 * ssd_tc.c — the CUDA backend's fused SSD entries: the tensor-core forward (kernels:
 * ssd_tc.cuh) and the backward's tensor-core twins (ssd_tc_bwd.cuh), or the portable drivers
 * of src/gpu/ where the context's mode (MAMBA2C_CUDA_TC, cuda.c) or the shape says so.
 * The forward runs chunk_cumsum portable, then either the tensor-core on-chip scan (one
 * launch for everything else) or, for N > M2TC_SEQ_NMAX / states at positions, the chunk
 * states, the portable state_passing and the chunk scan with CB computed on chip. bf16 MMA
 * for bf16 activations, tf32 otherwise (f32 and f16 storage); float32 accumulate. The fused
 * Q is the kernels' tile (64 tokens). The backward is the portable driver (ssd_bwd.c) with
 * bwd_twin substituting the twins.
 */
#include "cuda/tc.h"
#include "cuda/tc_tiles.h"
#include "gpu/ssd_host.h"
#include "gpu_launch/ssd_tc.h"

_Static_assert(M2TC_Q == M2G_FUSED_Q, "the tensor-core tile is the fused ops' chunk");

/* the tensor-core forward for this call: always with MAMBA2C_CUDA_TC=1; in the automatic mode
 * only its on-chip scan, where that has the blocks to fill the device (docs/gpu.md §3a: on an
 * H200 it was 1.4-1.5x the portable walk with 512 blocks, 0.9x with 32 and 128) */
static int use_tc(const m2cu_tc_cfg *cfg, const m2_ssd_problem *pr) {
    if (!cfg->forward) return 0;
    if (!cfg->min_blocks) return 1;
    return pr->npos == 0 && pr->N <= cfg->seq_nmax && !m2g_ssd_staged_forced() &&
           pr->nseq * pr->H * m2g_cdiv(pr->P, M2TC_SEQ_PC) >= cfg->min_blocks;
}

/* the on-chip scan: groups (ceil(P/32), H, sequences), the layout's dynamic shared block */
static mamba2_status_t run_seq(m2g_dev *d, const ssd_dev *s, int bf16) {
    m2tc_seq_layout lay;
    m2tc_seq_layout_of(bf16, (int)s->N, &lay);
    const int id = bf16 ? M2G_K_m2_ssd_scan_seq_bf16_tc128 : M2G_K_m2_ssd_scan_seq_tf32_tc128;
    return M2G_LAUNCH_AS(d, id, m2_ssd_scan_seq_tf32_tc128,
                         M2G_GRID(m2g_cdiv(s->P, M2TC_SEQ_PC), s->H, s->nseq), (size_t)lay.bytes,
                         .ct = s->ct, .st = s->stab, .H = s->H, .G = s->G, .P = s->P, .N = s->N,
                         .x = s->x, .x_ty = s->x.ty, .dto = s->dto, .dac = s->dac,
                         .Bm = s->Bm, .Bm_ty = s->Bm.ty, .Cm = s->Cm, .Cm_ty = s->Cm.ty,
                         .D = s->D, .D_mode = s->D_mode, .z = s->z, .z_ty = s->z.ty,
                         .has_z = s->z.present, .init = s->init, .has_init = s->init.present,
                         .out = s->out, .out_ty = s->out.ty, .ox = s->outx,
                         .ox_ty = s->outx.ty, .has_ox = s->outx.present, .fin = s->final,
                         .has_final = s->final.present);
}

/* the chunk states: groups (chunks, H, P tiles x N tiles) */
static mamba2_status_t run_state(m2g_dev *d, const ssd_dev *s, int bf16) {
    const int64_t nt = m2g_cdiv(s->P, M2TC_TILE) * m2g_cdiv(s->N, M2TC_TILE);
    const int id = bf16 ? M2G_K_m2_ssd_chunk_state_bf16_tc128 : M2G_K_m2_ssd_chunk_state_tf32_tc128;
    return M2G_LAUNCH_AS(d, id, m2_ssd_chunk_state_tf32_tc128, M2G_GRID(s->nc, s->H, nt), 0,
                         .ct = s->ct, .H = s->H, .G = s->G, .P = s->P, .N = s->N, .x = s->x,
                         .x_ty = s->x.ty, .Bm = s->Bm, .Bm_ty = s->Bm.ty, .dto = s->dto,
                         .dac = s->dac, .S = s->states);
}

/* the chunk scan with CB on chip: groups (chunks, H, P tiles) */
static mamba2_status_t run_scan(m2g_dev *d, const ssd_dev *s, int bf16) {
    const int id = bf16 ? M2G_K_m2_ssd_chunk_scan_bf16_tc128 : M2G_K_m2_ssd_chunk_scan_tf32_tc128;
    return M2G_LAUNCH_AS(d, id, m2_ssd_chunk_scan_tf32_tc128,
                         M2G_GRID(s->nc, s->H, m2g_cdiv(s->P, M2TC_TILE)), 0, .ct = s->ct,
                         .H = s->H, .G = s->G, .P = s->P, .N = s->N, .x = s->x,
                         .x_ty = s->x.ty, .dto = s->dto, .dac = s->dac, .Bm = s->Bm,
                         .Bm_ty = s->Bm.ty, .Cm = s->Cm, .Cm_ty = s->Cm.ty, .S0 = s->start,
                         .D = s->D, .D_mode = s->D_mode, .z = s->z, .z_ty = s->z.ty,
                         .has_z = s->z.present, .out = s->out, .out_ty = s->out.ty,
                         .ox = s->outx, .ox_ty = s->outx.ty, .has_ox = s->outx.present);
}

mamba2_status_t m2cu_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    m2g_dev *d = m2g_of(ctx);
    const m2cu_tc_cfg cfg = m2cu_tc_config(d);
    if (!use_tc(&cfg, pr)) return m2g_ssd_forward(ctx, pr, ws);
    M2_TRY(m2g_need_f32(d->api, MAMBA2_DTYPE_F32, pr->par_dtype)); /* half acts: native */
    const int bf16 = pr->act_dtype == MAMBA2_DTYPE_BF16;
    m2g_call c;
    ssd_dev s;
    m2g_call_begin(&c, d);
    mamba2_status_t st = m2g_ssd_fwd_bind(&c, pr, 0, &s); /* CB stays on chip */
    if (!st && s.nc == 0) return m2g_call_end(&c, m2g_ssd_fwd_empty(d, &s));
    if (!st) st = m2g_run_cumsum(d, &s);
    if (!st && pr->npos == 0 && pr->N <= cfg.seq_nmax && !m2g_ssd_staged_forced())
        return m2g_call_end(&c, run_seq(d, &s, bf16)); /* states on chip too */
    if (!st) st = run_state(d, &s, bf16);
    if (!st) st = m2g_run_passing(d, &s);
    if (!st) st = run_scan(d, &s, bf16);
    if (!st && pr->npos) st = m2g_ssd_pos_states(&c, pr, &s);
    return m2g_call_end(&c, st);
}

/* the backward's twin of portable kernel `id` (same parameter list: test_kernel_sigs), 128
 * threads per block; grids (chunks, G, ceil(N/64)) for dbc, (chunks, H) for tok, (chunks, H,
 * ceil(P/64)) for dx, (chunks, H, ceil(P/64) ceil(N/64)) for chunk_state (both modes),
 * (chunks, G) for bmm_chunk, (chunks, H) for E; -1 for a kernel without a twin */
static int bwd_twin(int id, const ssd_dev *s, int bf16, size_t g[3]) {
    g[0] = (size_t)s->nc, g[1] = (size_t)s->H, g[2] = 1;
    switch (id) {
    case M2G_K_m2_ssd_bwd_dbc_16x16:
        g[1] = (size_t)s->G, g[2] = (size_t)m2g_cdiv(s->N, M2TC_TILE);
        return bf16 ? M2G_K_m2_ssd_bwd_dbc_bf16_tc128 : M2G_K_m2_ssd_bwd_dbc_tf32_tc128;
    case M2G_K_m2_ssd_bwd_tok_16x16: return M2G_K_m2_ssd_bwd_tok_3xtf32_tc128; /* every storage */
    case M2G_K_m2_ssd_chunk_state_16x16:
        g[2] = (size_t)(m2g_cdiv(s->P, M2TC_TILE) * m2g_cdiv(s->N, M2TC_TILE));
        return M2G_K_m2_ssd_chunk_state_3xtf32_tc128; /* split tf32 for every storage */
    case M2G_K_m2_ssd_bmm_chunk_16x16:
        g[1] = (size_t)s->G;
        return M2G_K_m2_ssd_bmm_chunk_3xtf32_tc128;
    case M2G_K_m2_ssd_bwd_E_16x16: return M2G_K_m2_ssd_bwd_E_3xtf32_tc128;
    case M2G_K_m2_ssd_bwd_dx_16x16:
        g[2] = (size_t)m2g_cdiv(s->P, M2TC_TILE);
        return bf16 ? M2G_K_m2_ssd_bwd_dx_bf16_tc128 : M2G_K_m2_ssd_bwd_dx_tf32_tc128;
    default: return -1;
    }
}

mamba2_status_t m2cu_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    (void)ws;
    const m2cu_tc_cfg cfg = m2cu_tc_config(m2g_of(ctx));
    return m2g_ssd_backward_with(ctx, pr, cfg.backward ? bwd_twin : NULL);
}
