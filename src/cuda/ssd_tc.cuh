// ssd_tc.cuh — CUDA-only tensor-core twins of the fused SSD forward's matmul stages, included
// by kernels.cu after the portable kernel files (common.h is already in). Off by default: the
// host uses them only when the context was created with MAMBA2C_CUDA_TC=1 (src/cuda/ssd_tc.c);
// the portable float32 kernels of ssd_chunked.cl stay the tested default (docs/gpu.md §3a).
//
// Three kernels per precision, 128 threads (4 warps) per block, chunks of 64 tokens:
//   m2_ssd_chunk_state_{tf32,bf16}_tc128: the chunk states, B^T (w . X) per (chunk, head,
//     64 x 64 state tile);
//   m2_ssd_chunk_scan_{tf32,bf16}_tc128: per (chunk, head, 64 channels) CB = C Bm^T on chip
//     (no bmm_chunk launch, no CB in DRAM), W = mask(CB) . decay . d, Y1 = W X, Y2 = C S^T,
//     y = Y1 + exp(cs) Y2 + D x, then out_x / the z gate / out;
//   m2_ssd_scan_seq_{tf32,bf16}_tc128: the two above and state_passing in one launch, per
//     (32 channels, head, sequence), the state slice in dynamic shared memory.
// tf32: float32 storage rounded to tf32 (10-bit mantissa) when written to shared memory,
// wmma m16n16k8; bf16: rounded to bf16 (round to nearest even), wmma m16n16k16. Accumulation
// is float32 in both. Every sum has a fixed order (the k loops and the MMA's own order; no
// atomics): bitwise identical run to run. The tile arithmetic and the shared-memory layout
// are in tc_tiles.h (plain C, checked on the host by tests/gpu/test_tc_tiles.c).
#include <cuda_bf16.h>
#include <mma.h>

#include "tc_tiles.h"

namespace m2tc {
using namespace nvcuda;

template <int BF> struct ty;
template <> struct ty<0> {
    typedef float T;
    typedef wmma::precision::tf32 P;
    static __device__ __forceinline__ float cvt(float v) { return wmma::__float_to_tf32(v); }
};
template <> struct ty<1> {
    typedef __nv_bfloat16 T;
    typedef __nv_bfloat16 P;
    static __device__ __forceinline__ __nv_bfloat16 cvt(float v) { return __float2bfloat16_rn(v); }
};
template <int BF, typename L>
using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, M2TC_K(BF), typename ty<BF>::P, L>;
template <int BF, typename L>
using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, M2TC_K(BF), typename ty<BF>::P, L>;
template <int BF> using frag_c = wmma::fragment<wmma::accumulator, 16, 16, M2TC_K(BF), float>;

// ---- chunk_state: S[p, n] = sum_{j < len} w_j x[j, p] Bm[j, n], w_j = exp(cs_last - cs_j) d_j
// (the portable m2_ssd_chunk_state_16x16 in mode 0). Grid (chunks, H, ceil(P/64)*ceil(N/64)).
template <int BF>
__device__ __forceinline__ void chunk_state(
    const m2_i64 *ct, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    float *S, m2_i64 S_o, m2_i64 S_s0, m2_i64 S_s1, m2_i64 S_s2, m2_i64 S_s3) {
    typedef typename ty<BF>::T T;
    __shared__ __align__(128) unsigned char sm[M2TC_STATE_BYTES(BF)];
    __shared__ float wj[M2TC_Q];
    const int tid = (int)threadIdx.x, w = tid >> 5, ld = M2TC_LD64(BF);
    const m2_i64 c = blockIdx.x, h = blockIdx.y, g = h / (H / G);
    long long p0, n0;
    m2tc_state_tile((long long)blockIdx.z, (long long)N, &p0, &n0);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    if (tid < M2TC_Q)
        wj[tid] = tid < len ? m2k_exp(dac[oc + M2TC_Q - 1] - dac[oc + tid]) * dto[od + tid] : 0.0f;
    __syncthreads();
    T *xs = (T *)sm, *bs = (T *)(sm + M2TC_STATE_BS_OFF(BF));
    const m2_i64 xb = x_o + b * x_s0 + h * x_s2, bb = B_o + b * B_s0 + g * B_s2;
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int j = e >> 6, q = e & 63;
        const m2_i64 p = p0 + q, n = n0 + q;
        xs[j * ld + q] = ty<BF>::cvt(
            j < len && p < P ? wj[j] * m2k_ld(x, xb + (t0 + j) * x_s1 + p, x_ty) : 0.0f);
        bs[j * ld + q] =
            ty<BF>::cvt(j < len && n < N ? m2k_ld(Bm, bb + (t0 + j) * B_s1 + n, Bm_ty) : 0.0f);
    }
    __syncthreads();
    frag_c<BF> acc[4];
    for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
    const int ks = m2tc_ksteps((int)len, M2TC_K(BF));
    for (int k = 0; k < ks; k++) {
        const int j0 = k * M2TC_K(BF);
        frag_a<BF, wmma::col_major> a; // A[p][j] = Xw[j][p]
        wmma::load_matrix_sync(a, xs + j0 * ld + 16 * w, ld);
        for (int t = 0; t < 4; t++) {
            frag_b<BF, wmma::row_major> bq; // B[j][n]
            wmma::load_matrix_sync(bq, bs + j0 * ld + 16 * t, ld);
            wmma::mma_sync(acc[t], a, bq, acc[t]);
        }
    }
    __syncthreads(); // every warp is done with xs / bs: the staging tile reuses their bytes
    float *o = (float *)sm;
    for (int t = 0; t < 4; t++)
        wmma::store_matrix_sync(o + 16 * w * M2TC_FLD + 16 * t, acc[t], M2TC_FLD,
                                wmma::mem_row_major);
    __syncthreads();
    const m2_i64 sbase = S_o + sb * S_s0 + sk * S_s1 + h * S_s2;
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63;
        const m2_i64 p = p0 + r, n = n0 + q;
        if (p < P && n < N) S[sbase + p * S_s3 + n] = o[r * M2TC_FLD + q];
    }
}

// ---- chunk_scan with CB on chip (the portable bmm_chunk + chunk_scan; see tc_tiles.h).
// Grid (chunks, H, ceil(P/64)). D mode: 0 none, 1 [H], 2 [H,P].
template <int BF>
__device__ __forceinline__ void chunk_scan(
    const m2_i64 *ct, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    const float *S0, m2_i64 S0_o, m2_i64 S0_s0, m2_i64 S0_s1, m2_i64 S0_s2, m2_i64 S0_s3,
    const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2, m2_i32 z_ty, m2_i32 has_z,
    float *out, m2_i64 out_o, m2_i64 out_s0, m2_i64 out_s1, m2_i64 out_s2, m2_i32 out_ty,
    float *ox, m2_i64 ox_o, m2_i64 ox_s0, m2_i64 ox_s1, m2_i64 ox_s2, m2_i32 ox_ty, m2_i32 has_ox) {
    typedef typename ty<BF>::T T;
    __shared__ __align__(128) unsigned char sm[M2TC_SCAN_BYTES(BF)];
    const int tid = (int)threadIdx.x, w = tid >> 5;
    const int ldk = M2TC_LDKT(BF), ldw = M2TC_LD64(BF), K = M2TC_K(BF);
    float *cs = (float *)sm, *dd = cs + M2TC_Q;
    float *r1 = (float *)(sm + M2TC_SCAN_R1_OFF);
    T *wt = (T *)(sm + (BF ? M2TC_SCAN_R2_OFF : M2TC_SCAN_R1_OFF)); // tf32: W over CB in place
    T *ka = (T *)(sm + M2TC_SCAN_R3_OFF(BF)), *kb = (T *)(sm + M2TC_SCAN_KT2_OFF(BF));
    T *kc = (T *)(sm + M2TC_SCAN_KT3_OFF(BF)), *xs = ka;
    float *y2s = (float *)(sm + M2TC_SCAN_R2_OFF);
    const m2_i64 c = blockIdx.x, h = blockIdx.y, p0 = (m2_i64)blockIdx.z * M2TC_TILE;
    const m2_i64 g = h / (H / G);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    const m2_i64 xb = x_o + b * x_s0 + h * x_s2;
    const m2_i64 cbase = C_o + b * C_s0 + g * C_s2, bbase = B_o + b * B_s0 + g * B_s2;
    const m2_i64 sbase = S0_o + sb * S0_s0 + sk * S0_s1 + h * S0_s2;
    if (tid < M2TC_Q) {
        cs[tid] = tid < len ? dac[oc + tid] : 0.0f;
        dd[tid] = tid < len ? dto[od + tid] : 0.0f;
    }
    // CB (row tile w, column tiles 0..w) and Y2 = C S^T (row tile w, 4 channel tiles)
    frag_c<BF> acc[4], acc2[4];
    for (int t = 0; t < 4; t++)
        wmma::fill_fragment(acc[t], 0.0f), wmma::fill_fragment(acc2[t], 0.0f);
    for (m2_i64 n0 = 0; n0 < N; n0 += M2TC_KT) {
        __syncthreads(); // the previous k-tiles are consumed
        for (int e = tid; e < 64 * M2TC_KT; e += M2TC_THREADS) {
            const int r = e / M2TC_KT, q = e % M2TC_KT;
            const m2_i64 n = n0 + q, p = p0 + r;
            const int tok = r < len && n < N;
            ka[r * ldk + q] =
                ty<BF>::cvt(tok ? m2k_ld(Cm, cbase + (t0 + r) * C_s1 + n, Cm_ty) : 0.0f);
            kb[r * ldk + q] =
                ty<BF>::cvt(tok ? m2k_ld(Bm, bbase + (t0 + r) * B_s1 + n, Bm_ty) : 0.0f);
            kc[r * ldk + q] = ty<BF>::cvt(p < P && n < N ? S0[sbase + p * S0_s3 + n] : 0.0f);
        }
        __syncthreads();
        for (int kk = 0; kk < M2TC_KT; kk += K) {
            frag_a<BF, wmma::row_major> a; // C[i][n]
            wmma::load_matrix_sync(a, ka + 16 * w * ldk + kk, ldk);
            for (int t = 0; t < 4; t++) {
                frag_b<BF, wmma::col_major> bq; // B^T[n][j] = Bm[j][n]; S^T[n][p] = S[p][n]
                if (m2tc_cb_tile_needed(w, t)) {
                    wmma::load_matrix_sync(bq, kb + 16 * t * ldk + kk, ldk);
                    wmma::mma_sync(acc[t], a, bq, acc[t]);
                }
                wmma::load_matrix_sync(bq, kc + 16 * t * ldk + kk, ldk);
                wmma::mma_sync(acc2[t], a, bq, acc2[t]);
            }
        }
    }
    for (int t = 0; t < 4; t++)
        if (m2tc_cb_tile_needed(w, t))
            wmma::store_matrix_sync(r1 + 16 * w * M2TC_FLD + 16 * t, acc[t], M2TC_FLD,
                                    wmma::mem_row_major);
    __syncthreads(); // CB complete; the k-tiles are consumed
    // W[i, j] = (j <= i < len) CB[i, j] exp(cs_i - cs_j) d_j (as the portable chunk_scan), and X
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int i = e >> 6, j = e & 63;
        float v = 0.0f;
        if (i < len && j <= i) v = r1[i * M2TC_FLD + j] * m2k_exp(cs[i] - cs[j]) * dd[j];
        wt[i * ldw + j] = ty<BF>::cvt(v);
        const m2_i64 p = p0 + j;
        xs[i * ldw + j] =
            ty<BF>::cvt(i < len && p < P ? m2k_ld(x, xb + (t0 + i) * x_s1 + p, x_ty) : 0.0f);
    }
    __syncthreads();
    for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
    const int jlen = m2tc_ksteps((int)len, K) * K, jc = m2tc_causal_end(w);
    const int kend = jc < jlen ? jc : jlen;
    for (int kk = 0; kk < kend; kk += K) {
        frag_a<BF, wmma::row_major> a; // W[i][j]
        wmma::load_matrix_sync(a, wt + 16 * w * ldw + kk, ldw);
        for (int t = 0; t < 4; t++) {
            frag_b<BF, wmma::row_major> bq; // X[j][p]
            wmma::load_matrix_sync(bq, xs + kk * ldw + 16 * t, ldw);
            wmma::mma_sync(acc[t], a, bq, acc[t]);
        }
    }
    __syncthreads(); // W and X are consumed: Y1 goes to R1, Y2 from R2's start
    for (int t = 0; t < 4; t++) {
        wmma::store_matrix_sync(r1 + 16 * w * M2TC_FLD + 16 * t, acc[t], M2TC_FLD,
                                wmma::mem_row_major);
        wmma::store_matrix_sync(y2s + 16 * w * M2TC_FLD + 16 * t, acc2[t], M2TC_FLD,
                                wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int i = e >> 6, q = e & 63;
        const m2_i64 p = p0 + q;
        if (i < len && p < P) {
            const m2_i64 t = t0 + i;
            const float xi = m2k_ld(x, xb + t * x_s1 + p, x_ty);
            const float dv = D_mode == 2 ? D[D_o + h * D_s0 + p] : D_mode == 1 ? D[D_o + h] : 0.0f;
            float y = r1[i * M2TC_FLD + q] + m2k_exp(cs[i]) * y2s[i * M2TC_FLD + q] + dv * xi;
            if (has_ox) m2k_st(ox, ox_o + b * ox_s0 + t * ox_s1 + h * ox_s2 + p, y, ox_ty);
            if (has_z) y *= m2k_silu(m2k_ld(z, z_o + b * z_s0 + t * z_s1 + h * z_s2 + p, z_ty));
            m2k_st(out, out_o + b * out_s0 + t * out_s1 + h * out_s2 + p, y, out_ty);
        }
    }
}

// ---- the on-chip scan (tc_tiles.h, scan_seq): chunk_state + state_passing + chunk_scan in
// one launch, the state slice in dynamic shared memory. Grid (ceil(P/32), H, sequences).
template <int BF>
__device__ __forceinline__ void scan_seq(
    const m2_i64 *ct, const m2_i64 *st, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2, m2_i32 z_ty, m2_i32 has_z,
    const float *init, m2_i64 in_o, m2_i64 in_s0, m2_i64 in_s1, m2_i64 in_s2, m2_i32 has_init,
    float *out, m2_i64 out_o, m2_i64 out_s0, m2_i64 out_s1, m2_i64 out_s2, m2_i32 out_ty,
    float *ox, m2_i64 ox_o, m2_i64 ox_s0, m2_i64 ox_s1, m2_i64 ox_s2, m2_i32 ox_ty, m2_i32 has_ox,
    float *fin, m2_i64 fin_o, m2_i64 fin_s0, m2_i64 fin_s1, m2_i64 fin_s2, m2_i32 has_final) {
    typedef typename ty<BF>::T T;
    M2K_DYNAMIC_SHARED(unsigned char, smd);
    m2tc_seq_layout L;
    m2tc_seq_layout_of(BF, (int)N, &L);
    const int tid = (int)threadIdx.x, w = tid >> 5, lds = L.lds, npad = L.npad;
    const int ldk = M2TC_LDKT(BF), ldw = M2TC_LD64(BF), ldx = M2TC_LDX(BF), K = M2TC_K(BF);
    float *cs = (float *)smd, *dd = cs + 64, *wl = cs + 128;
    float *S = (float *)(smd + L.s), *r1 = (float *)(smd + L.r1), *y2s = (float *)(smd + L.y2);
    T *wt = (T *)(smd + L.w), *xs = (T *)(smd + L.xs), *xw = (T *)(smd + L.xw);
    T *ka = (T *)(smd + L.ka), *kb = (T *)(smd + L.kb), *kc = (T *)(smd + L.kc);
    // x, z through the fold of common.h: the sequences (z) may pass the grid limit
    const m2_i64 gx = (P + M2TC_SEQ_PC - 1) / M2TC_SEQ_PC;
    const m2_i64 p0 = M2K_GROUP_X(gx) * M2TC_SEQ_PC, h = blockIdx.y, s = M2K_GROUP_Z(gx);
    const m2_i64 g = h / (H / G);
    for (int e = tid; e < M2TC_SEQ_PC * npad; e += M2TC_THREADS) { // the entering state
        const int r = e / npad, n = e % npad;
        const m2_i64 p = p0 + r;
        S[r * lds + n] = has_init && p < P && n < N
                             ? init[in_o + s * in_s0 + h * in_s1 + p * in_s2 + n] : 0.0f;
    }
    for (m2_i64 c = st[2 * s]; c < st[2 * s + 1]; c++) {
        const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
        const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
        const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
        const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
        const m2_i64 xb = x_o + b * x_s0 + h * x_s2;
        const m2_i64 cbase = C_o + b * C_s0 + g * C_s2, bbase = B_o + b * B_s0 + g * B_s2;
        __syncthreads(); // the previous chunk's epilogue is done with the staging tiles
        if (tid < M2TC_Q) {
            cs[tid] = tid < len ? dac[oc + tid] : 0.0f;
            dd[tid] = tid < len ? dto[od + tid] : 0.0f;
            wl[tid] =
                tid < len ? m2k_exp(dac[oc + M2TC_Q - 1] - dac[oc + tid]) * dto[od + tid] : 0.0f;
        }
        __syncthreads();
        for (int e = tid; e < 64 * M2TC_SEQ_PC; e += M2TC_THREADS) {
            const int j = e >> 5, q = e & 31;
            const m2_i64 p = p0 + q;
            const float xv = j < len && p < P ? m2k_ld(x, xb + (t0 + j) * x_s1 + p, x_ty) : 0.0f;
            xs[j * ldx + q] = ty<BF>::cvt(xv);
            xw[j * ldx + q] = ty<BF>::cvt(wl[j] * xv);
        }
        const float decay = m2k_exp(dac[oc + M2TC_Q - 1]);
        const int jlen = m2tc_ksteps((int)len, K) * K;
        frag_c<BF> acc[4], acc2[2];
        for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
        for (int t = 0; t < 2; t++) wmma::fill_fragment(acc2[t], 0.0f);
        for (int n0 = 0; n0 < npad; n0 += M2TC_KT) {
            __syncthreads(); // the previous k-tiles are consumed (first: X and Xw are written)
            for (int e = tid; e < 64 * M2TC_KT; e += M2TC_THREADS) {
                const int r = e / M2TC_KT, q = e % M2TC_KT;
                const m2_i64 n = n0 + q;
                const int tok = r < len && n < N;
                ka[r * ldk + q] =
                    ty<BF>::cvt(tok ? m2k_ld(Cm, cbase + (t0 + r) * C_s1 + n, Cm_ty) : 0.0f);
                kb[r * ldk + q] =
                    ty<BF>::cvt(tok ? m2k_ld(Bm, bbase + (t0 + r) * B_s1 + n, Bm_ty) : 0.0f);
                if (r < M2TC_SEQ_PC) kc[r * ldk + q] = ty<BF>::cvt(S[r * lds + n0 + q]);
            }
            __syncthreads();
            for (int kk = 0; kk < M2TC_KT; kk += K) {
                frag_a<BF, wmma::row_major> a; // C[i][n]
                wmma::load_matrix_sync(a, ka + 16 * w * ldk + kk, ldk);
                frag_b<BF, wmma::col_major> bq; // Bm^T, S^T
                for (int t = 0; t < 4; t++)
                    if (m2tc_cb_tile_needed(w, t)) {
                        wmma::load_matrix_sync(bq, kb + 16 * t * ldk + kk, ldk);
                        wmma::mma_sync(acc[t], a, bq, acc[t]);
                    }
                for (int t = 0; t < 2; t++) {
                    wmma::load_matrix_sync(bq, kc + 16 * t * ldk + kk, ldk);
                    wmma::mma_sync(acc2[t], a, bq, acc2[t]);
                }
            }
            if (w < 2) { // the state's tile (channels 16w.., columns n0..): decay, then + Xw^T Bm
                frag_c<BF> sf;
                wmma::load_matrix_sync(sf, S + 16 * w * lds + n0, lds, wmma::mem_row_major);
                for (int i = 0; i < sf.num_elements; i++) sf.x[i] *= decay;
                for (int kk = 0; kk < jlen; kk += K) {
                    frag_a<BF, wmma::col_major> a2; // A[p][j] = Xw[j][p]
                    wmma::load_matrix_sync(a2, xw + kk * ldx + 16 * w, ldx);
                    frag_b<BF, wmma::row_major> b2; // Bm[j][n]
                    wmma::load_matrix_sync(b2, kb + kk * ldk, ldk);
                    wmma::mma_sync(sf, a2, b2, sf);
                }
                wmma::store_matrix_sync(S + 16 * w * lds + n0, sf, lds, wmma::mem_row_major);
            }
        }
        for (int t = 0; t < 4; t++)
            if (m2tc_cb_tile_needed(w, t))
                wmma::store_matrix_sync(r1 + 16 * w * M2TC_FLD + 16 * t, acc[t], M2TC_FLD,
                                        wmma::mem_row_major);
        __syncthreads();
        for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
            const int i = e >> 6, j = e & 63;
            float v = 0.0f;
            if (i < len && j <= i) v = r1[i * M2TC_FLD + j] * m2k_exp(cs[i] - cs[j]) * dd[j];
            wt[i * ldw + j] = ty<BF>::cvt(v);
        }
        __syncthreads();
        for (int t = 0; t < 2; t++) wmma::fill_fragment(acc[t], 0.0f);
        const int jc = m2tc_causal_end(w), kend = jc < jlen ? jc : jlen;
        for (int kk = 0; kk < kend; kk += K) {
            frag_a<BF, wmma::row_major> a; // W[i][j]
            wmma::load_matrix_sync(a, wt + 16 * w * ldw + kk, ldw);
            for (int t = 0; t < 2; t++) {
                frag_b<BF, wmma::row_major> bq; // X[j][p]
                wmma::load_matrix_sync(bq, xs + kk * ldx + 16 * t, ldx);
                wmma::mma_sync(acc[t], a, bq, acc[t]);
            }
        }
        __syncthreads(); // W, X and Xw are consumed: Y1 over R1, Y2 over X and Xw
        for (int t = 0; t < 2; t++) {
            wmma::store_matrix_sync(r1 + 16 * w * M2TC_YLD + 16 * t, acc[t], M2TC_YLD,
                                    wmma::mem_row_major);
            wmma::store_matrix_sync(y2s + 16 * w * M2TC_YLD + 16 * t, acc2[t], M2TC_YLD,
                                    wmma::mem_row_major);
        }
        __syncthreads();
        for (int e = tid; e < 64 * M2TC_SEQ_PC; e += M2TC_THREADS) {
            const int i = e >> 5, q = e & 31;
            const m2_i64 p = p0 + q;
            if (i < len && p < P) {
                const m2_i64 t = t0 + i;
                const float xi = m2k_ld(x, xb + t * x_s1 + p, x_ty);
                const float dv = D_mode == 2   ? D[D_o + h * D_s0 + p]
                                 : D_mode == 1 ? D[D_o + h]
                                               : 0.0f;
                float y = r1[i * M2TC_YLD + q] + m2k_exp(cs[i]) * y2s[i * M2TC_YLD + q] + dv * xi;
                if (has_ox) m2k_st(ox, ox_o + b * ox_s0 + t * ox_s1 + h * ox_s2 + p, y, ox_ty);
                if (has_z) y *= m2k_silu(m2k_ld(z, z_o + b * z_s0 + t * z_s1 + h * z_s2 + p, z_ty));
                m2k_st(out, out_o + b * out_s0 + t * out_s1 + h * out_s2 + p, y, out_ty);
            }
        }
    }
    __syncthreads();
    if (has_final)
        for (int e = tid; e < M2TC_SEQ_PC * npad; e += M2TC_THREADS) {
            const int r = e / npad, n = e % npad;
            const m2_i64 p = p0 + r;
            if (p < P && n < N)
                fin[fin_o + s * fin_s0 + h * fin_s1 + p * fin_s2 + n] = S[r * lds + n];
        }
}
} // namespace m2tc

#define M2TC_STATE_PARAMS                                                                          \
    const m2_i64 *ct, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N, const float *x, m2_i64 x_o,          \
        m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty, const float *Bm, m2_i64 B_o,           \
        m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty, const float *dto, m2_i64 dto_o,       \
        m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2, const float *dac, m2_i64 dac_o,               \
        m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2, float *S, m2_i64 S_o, m2_i64 S_s0,            \
        m2_i64 S_s1, m2_i64 S_s2, m2_i64 S_s3
#define M2TC_STATE_ARGS                                                                            \
    ct, H, G, P, N, x, x_o, x_s0, x_s1, x_s2, x_ty, Bm, B_o, B_s0, B_s1, B_s2, Bm_ty, dto, dto_o,  \
        dto_s0, dto_s1, dto_s2, dac, dac_o, dac_s0, dac_s1, dac_s2, S, S_o, S_s0, S_s1, S_s2,      \
        S_s3
#define M2TC_SCAN_PARAMS                                                                           \
    const m2_i64 *ct, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N, const float *x, m2_i64 x_o,          \
        m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty, const float *dto, m2_i64 dto_o,        \
        m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2, const float *dac, m2_i64 dac_o,               \
        m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2, const float *Bm, m2_i64 B_o, m2_i64 B_s0,     \
        m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty, const float *Cm, m2_i64 C_o, m2_i64 C_s0,          \
        m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty, const float *S0, m2_i64 S0_o, m2_i64 S0_s0,        \
        m2_i64 S0_s1, m2_i64 S0_s2, m2_i64 S0_s3, const float *D, m2_i64 D_o, m2_i64 D_s0,         \
        m2_i32 D_mode, const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2,          \
        m2_i32 z_ty, m2_i32 has_z, float *out, m2_i64 out_o, m2_i64 out_s0, m2_i64 out_s1,         \
        m2_i64 out_s2, m2_i32 out_ty, float *ox, m2_i64 ox_o, m2_i64 ox_s0, m2_i64 ox_s1,          \
        m2_i64 ox_s2, m2_i32 ox_ty, m2_i32 has_ox
#define M2TC_SCAN_ARGS                                                                             \
    ct, H, G, P, N, x, x_o, x_s0, x_s1, x_s2, x_ty, dto, dto_o, dto_s0, dto_s1, dto_s2, dac,       \
        dac_o, dac_s0, dac_s1, dac_s2, Bm, B_o, B_s0, B_s1, B_s2, Bm_ty, Cm, C_o, C_s0, C_s1,      \
        C_s2, Cm_ty, S0, S0_o, S0_s0, S0_s1, S0_s2, S0_s3, D, D_o, D_s0, D_mode, z, z_o, z_s0,     \
        z_s1, z_s2, z_ty, has_z, out, out_o, out_s0, out_s1, out_s2, out_ty, ox, ox_o, ox_s0,      \
        ox_s1, ox_s2, ox_ty, has_ox
#define M2TC_SEQ_PARAMS                                                                            \
    const m2_i64 *ct, const m2_i64 *st, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N, const float *x,    \
        m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty, const float *dto,          \
        m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2, const float *dac,               \
        m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2, const float *Bm, m2_i64 B_o,    \
        m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty, const float *Cm, m2_i64 C_o,          \
        m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty, const float *D, m2_i64 D_o,           \
        m2_i64 D_s0, m2_i32 D_mode, const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1,          \
        m2_i64 z_s2, m2_i32 z_ty, m2_i32 has_z, const float *init, m2_i64 in_o, m2_i64 in_s0,      \
        m2_i64 in_s1, m2_i64 in_s2, m2_i32 has_init, float *out, m2_i64 out_o, m2_i64 out_s0,      \
        m2_i64 out_s1, m2_i64 out_s2, m2_i32 out_ty, float *ox, m2_i64 ox_o, m2_i64 ox_s0,         \
        m2_i64 ox_s1, m2_i64 ox_s2, m2_i32 ox_ty, m2_i32 has_ox, float *fin, m2_i64 fin_o,         \
        m2_i64 fin_s0, m2_i64 fin_s1, m2_i64 fin_s2, m2_i32 has_final
#define M2TC_SEQ_ARGS                                                                              \
    ct, st, H, G, P, N, x, x_o, x_s0, x_s1, x_s2, x_ty, dto, dto_o, dto_s0, dto_s1, dto_s2, dac,   \
        dac_o, dac_s0, dac_s1, dac_s2, Bm, B_o, B_s0, B_s1, B_s2, Bm_ty, Cm, C_o, C_s0, C_s1,      \
        C_s2, Cm_ty, D, D_o, D_s0, D_mode, z, z_o, z_s0, z_s1, z_s2, z_ty, has_z, init, in_o,      \
        in_s0, in_s1, in_s2, has_init, out, out_o, out_s0, out_s1, out_s2, out_ty, ox, ox_o,       \
        ox_s0, ox_s1, ox_s2, ox_ty, has_ox, fin, fin_o, fin_s0, fin_s1, fin_s2, has_final
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_scan_seq_tf32_tc128(M2TC_SEQ_PARAMS) {
    m2tc::scan_seq<0>(M2TC_SEQ_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_scan_seq_bf16_tc128(M2TC_SEQ_PARAMS) {
    m2tc::scan_seq<1>(M2TC_SEQ_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_chunk_state_tf32_tc128(M2TC_STATE_PARAMS) {
    m2tc::chunk_state<0>(M2TC_STATE_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_chunk_state_bf16_tc128(M2TC_STATE_PARAMS) {
    m2tc::chunk_state<1>(M2TC_STATE_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_chunk_scan_tf32_tc128(M2TC_SCAN_PARAMS) {
    m2tc::chunk_scan<0>(M2TC_SCAN_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_chunk_scan_bf16_tc128(M2TC_SCAN_PARAMS) {
    m2tc::chunk_scan<1>(M2TC_SCAN_ARGS);
}
