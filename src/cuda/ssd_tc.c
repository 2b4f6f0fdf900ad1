/*
 * ssd_tc.c — the host side of the CUDA tensor-core forward (kernels: ssd_tc.cuh). Where the
 * context's mode picks it (MAMBA2C_CUDA_TC, cuda.c), the fused forward (src/gpu/ssd_ops.c)
 * runs chunk_cumsum portable, then either the tensor-core on-chip scan (M2G_TC_SEQ: one launch
 * for everything else) or, for N > M2TC_SEQ_NMAX / states at positions, the chunk states
 * (M2G_TC_STATE), the portable state_passing and the chunk scan with CB computed on chip
 * (M2G_TC_SCAN). bf16 MMA for bf16 activations, tf32 otherwise (f32 and f16 storage); float32
 * accumulate. The fused Q is the kernels' tile (64 tokens). Also the launches of the fused
 * backward's tensor-core twins (ssd_tc_bwd.cuh; m2cu_ssd_tc_bwd).
 */
#include "cuda/tc.h"
#include "cuda/tc_tiles.h"
#include "gpu/ssd_host.h"

const char *const m2cu_tc_names[M2CU_TC_NUM] = {
#define M2G_TC_KERNEL(name) #name,
#include "cuda/tc_list.h"
#undef M2G_TC_KERNEL
};

static const size_t L128[3] = {M2TC_THREADS, 1, 1};
_Static_assert(M2TC_SEQ_PC == M2G_TC_SEQ_PC, "gpu.h's copy of the on-chip scan's block width");

int m2cu_tc_seq_nmax(void) { return M2TC_SEQ_NMAX; }
int m2cu_tc_seq_max_smem(void) {
    m2tc_seq_layout a, b;
    m2tc_seq_layout_of(0, M2TC_SEQ_NMAX, &a);
    m2tc_seq_layout_of(1, M2TC_SEQ_NMAX, &b);
    return a.bytes > b.bytes ? a.bytes : b.bytes;
}

/* the on-chip scan: groups (ceil(P/32), H, sequences), the layout's dynamic shared block */
static mamba2_status_t run_seq(m2g_dev *d, const ssd_dev *s, int bf16) {
    if (s->N > M2TC_SEQ_NMAX)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: the tc scan takes N <= %d",
                        M2TC_SEQ_NMAX);
    m2tc_seq_layout lay;
    m2tc_seq_layout_of(bf16, (int)s->N, &lay);
    m2g_args a = {0};
    m2g_arg_mem(&a, s->ct);
    m2g_arg_mem(&a, s->stab);
    m2g_arg_i64(&a, s->H), m2g_arg_i64(&a, s->G), m2g_arg_i64(&a, s->P), m2g_arg_i64(&a, s->N);
    m2g_arg_t(&a, &s->x, 3);
    m2g_arg_t(&a, &s->dto, 3);
    m2g_arg_t(&a, &s->dac, 3);
    m2g_arg_t(&a, &s->Bm, 3);
    m2g_arg_t(&a, &s->Cm, 3);
    m2g_arg_t(&a, &s->D, 1);
    m2g_arg_i32(&a, s->D_mode);
    m2g_arg_t(&a, &s->z, 3);
    m2g_arg_i32(&a, s->z.present);
    m2g_arg_t(&a, &s->init, 3);
    m2g_arg_i32(&a, s->init.present);
    m2g_arg_t(&a, &s->out, 3);
    m2g_arg_t(&a, &s->outx, 3);
    m2g_arg_i32(&a, s->outx.present);
    m2g_arg_t(&a, &s->final, 3);
    m2g_arg_i32(&a, s->final.present);
    const size_t g[3] = {(size_t)m2g_cdiv(s->P, M2TC_SEQ_PC), (size_t)s->H, (size_t)s->nseq};
    const int k = bf16 ? M2CU_TC_m2_ssd_scan_seq_bf16_tc128 : M2CU_TC_m2_ssd_scan_seq_tf32_tc128;
    return m2cu_launch_smem(d, M2CU_TC_ID(k), g, L128, (size_t)lay.bytes, a.n, a.a);
}

mamba2_status_t m2cu_ssd_tc(m2g_dev *d, const ssd_dev *s, int stage, int bf16) {
    if (s->Q != M2TC_Q)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                        "CUDA: the tensor-core forward needs chunks of %d tokens (got %lld)",
                        M2TC_Q, (long long)s->Q);
    if (stage == M2G_TC_SEQ) return run_seq(d, s, bf16);
    m2g_args a = {0};
    m2g_arg_mem(&a, s->ct);
    m2g_arg_i64(&a, s->H);
    m2g_arg_i64(&a, s->G);
    m2g_arg_i64(&a, s->P);
    m2g_arg_i64(&a, s->N);
    m2g_arg_t(&a, &s->x, 3);
    const int64_t ptiles = m2g_cdiv(s->P, M2TC_TILE), ntiles = m2g_cdiv(s->N, M2TC_TILE);
    if (stage == M2G_TC_STATE) {
        m2g_arg_t(&a, &s->Bm, 3);
        m2g_arg_t(&a, &s->dto, 3);
        m2g_arg_t(&a, &s->dac, 3);
        m2g_arg_t(&a, &s->states, 4);
        const size_t g[3] = {(size_t)s->nc, (size_t)s->H, (size_t)(ptiles * ntiles)};
        const int k = bf16 ? M2CU_TC_m2_ssd_chunk_state_bf16_tc128
                           : M2CU_TC_m2_ssd_chunk_state_tf32_tc128;
        return d->launch(d, M2CU_TC_ID(k), g, L128, 0, a.n, a.a);
    }
    m2g_arg_t(&a, &s->dto, 3);
    m2g_arg_t(&a, &s->dac, 3);
    m2g_arg_t(&a, &s->Bm, 3);
    m2g_arg_t(&a, &s->Cm, 3);
    m2g_arg_t(&a, &s->start, 4);
    m2g_arg_t(&a, &s->D, 1);
    m2g_arg_i32(&a, s->D_mode);
    m2g_arg_t(&a, &s->z, 3);
    m2g_arg_i32(&a, s->z.present);
    m2g_arg_t(&a, &s->out, 3);
    m2g_arg_t(&a, &s->outx, 3);
    m2g_arg_i32(&a, s->outx.present);
    const size_t g[3] = {(size_t)s->nc, (size_t)s->H, (size_t)ptiles};
    const int k =
        bf16 ? M2CU_TC_m2_ssd_chunk_scan_bf16_tc128 : M2CU_TC_m2_ssd_chunk_scan_tf32_tc128;
    return d->launch(d, M2CU_TC_ID(k), g, L128, 0, a.n, a.a);
}

/* the backward: the tensor-core twin of portable kernel `kernel` on its argument list (checked
 * against the portable kernel's signature), 128 threads per block; grids (chunks, G,
 * ceil(N/64)) for dbc, (chunks, H) for tok, (chunks, H, ceil(P/64)) for dx, (chunks, H,
 * ceil(P/64) ceil(N/64)) for chunk_state (both modes), (chunks, G) for bmm_chunk, (chunks,
 * H) for E */
mamba2_status_t m2cu_ssd_tc_bwd(m2g_dev *d, int kernel, const ssd_dev *s, int bf16,
                                const m2g_args *a) {
    if (s->Q != M2TC_Q)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                        "CUDA: the tensor-core backward needs chunks of %d tokens (got %lld)",
                        M2TC_Q, (long long)s->Q);
    M2_TRY(m2g_check_args(kernel, a));
    const size_t nc = (size_t)s->nc;
    int k;
    size_t g[3] = {nc, (size_t)s->H, 1};
    if (kernel == M2G_K_m2_ssd_bwd_dbc_16x16) {
        k = bf16 ? M2CU_TC_m2_ssd_bwd_dbc_bf16_tc128 : M2CU_TC_m2_ssd_bwd_dbc_tf32_tc128;
        g[1] = (size_t)s->G;
        g[2] = (size_t)m2g_cdiv(s->N, M2TC_TILE);
    } else if (kernel == M2G_K_m2_ssd_bwd_tok_16x16) {
        k = M2CU_TC_m2_ssd_bwd_tok_3xtf32_tc128; /* split tf32 for every storage */
    } else if (kernel == M2G_K_m2_ssd_chunk_state_16x16) {
        k = M2CU_TC_m2_ssd_chunk_state_3xtf32_tc128; /* split tf32 for every storage */
        g[2] = (size_t)(m2g_cdiv(s->P, M2TC_TILE) * m2g_cdiv(s->N, M2TC_TILE));
    } else if (kernel == M2G_K_m2_ssd_bmm_chunk_16x16) {
        k = M2CU_TC_m2_ssd_bmm_chunk_3xtf32_tc128;
        g[1] = (size_t)s->G;
    } else if (kernel == M2G_K_m2_ssd_bwd_E_16x16) {
        k = M2CU_TC_m2_ssd_bwd_E_3xtf32_tc128;
    } else if (kernel == M2G_K_m2_ssd_bwd_dx_16x16) {
        k = bf16 ? M2CU_TC_m2_ssd_bwd_dx_bf16_tc128 : M2CU_TC_m2_ssd_bwd_dx_tf32_tc128;
        g[2] = (size_t)m2g_cdiv(s->P, M2TC_TILE);
    } else {
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: no tensor-core twin of kernel %d",
                        kernel);
    }
    return d->launch(d, M2CU_TC_ID(k), g, L128, 0, a->n, a->a);
}
