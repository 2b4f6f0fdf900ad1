// ssd_tc_bwd.cuh — CUDA-only tensor-core twins of the fused SSD backward's matmul kernels
// (the portable m2_ssd_bwd_{dbc,tok,dx}_16x16 of src/gpu/kernels/ssd_bwd.cl), included by
// kernels.cu after ssd_tc.cuh (its m2tc::ty and fragment types). Same arguments, same
// outputs and the same math as the portable kernel each replaces; the host (ssd_tc.c,
// m2cu_ssd_tc_bwd) picks the grid. Used where the context's tensor-core mode applies to the
// call (src/gpu/ssd_bwd.c; docs/gpu.md §3b).
//
// Every kernel: 128 threads (4 warps), 64 x 64 output tiles, warp w owning rows
// [16w, 16w + 16) and 4 column tiles of 16, k in 64-wide shared tiles loaded cooperatively
// (coalesced along the innermost global index) and rounded to tf32 (float32 / f16 storage) or
// bf16 (bf16 storage); float32 accumulate. A per-row weight of a product (a decay, d_j) is
// applied to the A tile before rounding. The layout (tc_tiles.h, "backward"): a 3 x 64 float
// vector region, then the A and B tiles, each M2TC_F64TILE bytes, later float staging tiles.
// Fixed-order sums only (the k loops, the MMA's own order, the heads of a group in order; no
// atomics): bitwise identical run to run.
#include "tc_tiles.h"

namespace m2tc {

template <int C> struct lay;
template <> struct lay<0> {
    typedef wmma::row_major L;
};
template <> struct lay<1> {
    typedef wmma::col_major L;
};

// acc[t] += A[16w.., kb..ke) B[kb..ke, 16t..) over the 64-wide tiles as and bs of row length
// M2TC_LD64(BF); CA / CB: 0 row-major, 1 column-major storage (A[r][k] at as[r * ld + k] or
// as[r + k * ld]; B[k][c] at bs[k * ld + c] or bs[k + c * ld]).
template <int BF, int CA, int CB>
__device__ __forceinline__ void mma64(frag_c<BF> *acc, const typename ty<BF>::T *as,
                                      const typename ty<BF>::T *bs, int w, int kb, int ke) {
    const int ld = M2TC_LD64(BF);
    for (int kk = kb; kk < ke; kk += M2TC_K(BF)) {
        frag_a<BF, typename lay<CA>::L> a;
        wmma::load_matrix_sync(a, as + (CA ? kk * ld + 16 * w : 16 * w * ld + kk), ld);
        for (int t = 0; t < 4; t++) {
            frag_b<BF, typename lay<CB>::L> bq;
            wmma::load_matrix_sync(bq, bs + (CB ? 16 * t * ld + kk : kk * ld + 16 * t), ld);
            wmma::mma_sync(acc[t], a, bq, acc[t]);
        }
    }
}

// mma64 in split tf32 ("3xTF32") on float tiles: each operand v = hi + lo with hi = tf32(v),
// lo = tf32(v - hi) (v - hi is exact), and acc += lo.hi + hi.lo + hi.hi (the small terms
// first): about 21 bits of each product kept, against tf32's 11, for 3 MMAs per step.
template <int CA, int CB>
__device__ __forceinline__ void mma64_3xtf32(frag_c<0> *acc, const float *as, const float *bs,
                                             int w, int kb, int ke) {
    const int ld = M2TC_LD64(0);
    for (int kk = kb; kk < ke; kk += M2TC_K(0)) {
        frag_a<0, typename lay<CA>::L> a, al;
        wmma::load_matrix_sync(a, as + (CA ? kk * ld + 16 * w : 16 * w * ld + kk), ld);
        for (int e = 0; e < a.num_elements; e++) {
            const float v = a.x[e], hi = wmma::__float_to_tf32(v);
            a.x[e] = hi;
            al.x[e] = wmma::__float_to_tf32(v - hi);
        }
        for (int t = 0; t < 4; t++) {
            frag_b<0, typename lay<CB>::L> bq, bl;
            wmma::load_matrix_sync(bq, bs + (CB ? 16 * t * ld + kk : kk * ld + 16 * t), ld);
            for (int e = 0; e < bq.num_elements; e++) {
                const float v = bq.x[e], hi = wmma::__float_to_tf32(v);
                bq.x[e] = hi;
                bl.x[e] = wmma::__float_to_tf32(v - hi);
            }
            wmma::mma_sync(acc[t], al, bq, acc[t]);
            wmma::mma_sync(acc[t], a, bl, acc[t]);
            wmma::mma_sync(acc[t], a, bq, acc[t]);
        }
    }
}

// the four accumulators to a float [64][M2TC_FLD] staging tile (rows 16w..)
template <int BF> __device__ __forceinline__ void stage64(float *o, frag_c<BF> *acc, int w) {
    for (int t = 0; t < 4; t++)
        wmma::store_matrix_sync(o + 16 * w * M2TC_FLD + 16 * t, acc[t], M2TC_FLD,
                                wmma::mem_row_major);
}

// ---- dC (mode 0) and dB (mode 1) of one (chunk, group, 64 state columns); grid
// (chunks, G, ceil(N/64)). One K loop: the intra-chunk tile (k = tokens; A = dCBg, rows
// (mode 0) or columns (mode 1) read as stored, the column-major fragment doing the transpose;
// k <= i resp. k >= i by m2tc_bwd_krange), then per head of the group and 64 channels
// A[i][p] = w_i V[i][p], B[p][n] = St[p][n] (w_i = e^(cs_i), resp. e^(cs_last-cs_i) d_i).
template <int BF>
__device__ __forceinline__ void bwd_dbc(
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N, m2_i32 mode,
    const float *dCB, m2_i64 dCB_o, const float *dto, m2_i64 dto_o, const float *dac,
    m2_i64 dac_o, const float *M, m2_i64 M_o, m2_i64 M_s0, m2_i64 M_s1, m2_i64 M_s2, m2_i32 M_ty,
    const float *V, m2_i64 V_o, m2_i64 V_s0, m2_i64 V_s1, m2_i64 V_s2, m2_i32 V_ty, const float *St,
    m2_i64 St_o, float *out, m2_i64 o_o, m2_i64 o_s0, m2_i64 o_s1, m2_i64 o_s2, m2_i32 out_ty) {
    typedef typename ty<BF>::T T;
    __shared__ __align__(128) unsigned char sm[M2TC_BWD_BYTES];
    float *wv = (float *)sm, *o = (float *)(sm + M2TC_BWD_A_OFF);
    T *as = (T *)(sm + M2TC_BWD_A_OFF), *bs = (T *)(sm + M2TC_BWD_B_OFF);
    const int tid = (int)threadIdx.x, w = tid >> 5, ld = M2TC_LD64(BF), K = M2TC_K(BF);
    const m2_i64 c = blockIdx.x, g = blockIdx.y, n0 = (m2_i64)blockIdx.z * M2TC_TILE;
    const m2_i64 hpg = H / G, b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 ocb = dCB_o + (c * G + g) * Q * Q;
    const m2_i64 mb = M_o + b * M_s0 + g * M_s2, vb = V_o + b * V_s0;
    const int live = 16 * w < len; // the warp's rows hold tokens
    frag_c<BF> acc[4];
    for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63;
        const m2_i64 n = n0 + q;
        as[r * ld + q] = ty<BF>::cvt(r < len && q < len ? dCB[ocb + r * Q + q] : 0.0f);
        bs[r * ld + q] =
            ty<BF>::cvt(r < len && n < N ? m2k_ld(M, mb + (t0 + r) * M_s1 + n, M_ty) : 0.0f);
    }
    __syncthreads();
    int kb, ke;
    m2tc_bwd_krange(mode, w, (int)len, K, &kb, &ke);
    if (live) {
        if (mode) mma64<BF, 1, 0>(acc, as, bs, w, kb, ke); // A[i][k] = dCBg[k][i]
        else mma64<BF, 0, 0>(acc, as, bs, w, kb, ke);      // A[i][k] = dCBg[i][k]
    }
    for (m2_i64 h = g * hpg; h < (g + 1) * hpg; h++) {
        const m2_i64 oc = dac_o + (h * nc + c) * Q, od = dto_o + (h * nc + c) * Q;
        const m2_i64 so = St_o + (c * H + h) * P * N;
        __syncthreads(); // the previous head's weights and tiles are consumed
        if (tid < M2TC_Q) {
            const m2_i64 i = tid;
            float v = 0.0f;
            if (i < len)
                v = mode ? ssd_decay(dac[oc + len - 1], dac[oc + i], i == len - 1) * dto[od + i]
                         : m2k_exp(dac[oc + i]);
            wv[tid] = v;
        }
        for (m2_i64 p0 = 0; p0 < P; p0 += M2TC_TILE) {
            __syncthreads();
            for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
                const int r = e >> 6, q = e & 63;
                const m2_i64 p = p0 + q, pr = p0 + r, n = n0 + q;
                as[r * ld + q] = ty<BF>::cvt(
                    r < len && p < P ? wv[r] * m2k_ld(V, vb + (t0 + r) * V_s1 + h * V_s2 + p, V_ty)
                                     : 0.0f);
                bs[r * ld + q] = ty<BF>::cvt(pr < P && n < N ? St[so + pr * N + n] : 0.0f);
            }
            __syncthreads();
            if (live) mma64<BF, 0, 0>(acc, as, bs, w, 0, m2tc_bwd_kend((int)(P - p0), K));
        }
    }
    __syncthreads();
    stage64<BF>(o, acc, w);
    __syncthreads();
    const m2_i64 ob = o_o + b * o_s0 + g * o_s2;
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63;
        const m2_i64 n = n0 + q;
        if (r < len && n < N) m2k_st(out, ob + (t0 + r) * o_s1 + n, o[r * M2TC_FLD + q], out_ty);
    }
}

// ---- u_i = C_i . (dy_i S0), gv_i = B_i . (x_i dS) and dec = S0 . dS of one (chunk, head);
// grid (chunks, H). In split tf32 for every storage (its inputs are float32 scratch): u and
// gv feed da_s, a sum with cancelling terms (dA, ddt_bias), where tf32's 2^-11 measured up
// to 1.8e-3 on the emulated device. Per product and 64 state columns: the 64 x 64 tile
// V St on the tensor cores (k = channels; float tiles, mma64_3xtf32), staged as float, then
// each row's dot with the C (Bm) tile in float32 by two threads (32 columns each, in column
// order, carried over the column tiles in order) and the two halves added. dec: each
// thread's elements of S0 . dS in its load order (the dS tiles of the second product visit
// every (p, n) once), then the 128 partials in order.
__device__ __forceinline__ void bwd_tok(
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    const float *S0, m2_i64 S0_o, const float *dS, m2_i64 dS_o,
    float *u, m2_i64 u_o, float *gv, m2_i64 g_o, float *dec, m2_i64 dec_o) {
    (void)nc;
    __shared__ __align__(128) unsigned char sm[M2TC_BWD_BYTES];
    float *red = (float *)sm, *o = (float *)(sm + M2TC_BWD_A_OFF);
    float *mt = (float *)(sm + M2TC_BWD_B_OFF);
    float *as = o, *bs = mt;
    const int tid = (int)threadIdx.x, w = tid >> 5, ld = M2TC_LD64(0), K = M2TC_K(0);
    const int ri = tid >> 1, half = tid & 1; // the row and the 32 columns this thread dots
    const m2_i64 c = blockIdx.x, h = blockIdx.y, g = h / (H / G);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 so = (c * H + h) * P * N;
    const int live = 16 * w < len;
    float dsum = 0.0f;
    for (int pr = 0; pr < 2; pr++) { // 0: u from dy, S0, Cm; 1: gv from x, dS, Bm
        const float *Vp = pr ? x : dy, *Sp = pr ? dS + dS_o : S0 + S0_o, *Mp = pr ? Bm : Cm;
        const m2_i64 vb = pr ? x_o + b * x_s0 + h * x_s2 : dy_o + b * dy_s0 + h * dy_s2;
        const m2_i64 vs = pr ? x_s1 : dy_s1, ms = pr ? B_s1 : C_s1;
        const m2_i32 vty = pr ? x_ty : 0, mty = pr ? Bm_ty : Cm_ty;
        const m2_i64 mb = pr ? B_o + b * B_s0 + g * B_s2 : C_o + b * C_s0 + g * C_s2;
        float part = 0.0f;
        for (m2_i64 n0 = 0; n0 < N; n0 += M2TC_TILE) {
            frag_c<0> acc[4];
            for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
            for (m2_i64 p0 = 0; p0 < P; p0 += M2TC_TILE) {
                __syncthreads(); // the previous tiles (and staging) are consumed
                for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
                    const int r = e >> 6, q = e & 63;
                    const m2_i64 p = p0 + q, prow = p0 + r, n = n0 + q;
                    as[r * ld + q] =
                        r < len && p < P ? m2k_ld(Vp, vb + (t0 + r) * vs + p, vty) : 0.0f;
                    float sv = 0.0f;
                    if (prow < P && n < N) {
                        sv = Sp[so + prow * N + n];
                        if (pr) dsum += S0[S0_o + so + prow * N + n] * sv;
                    }
                    bs[r * ld + q] = sv;
                }
                __syncthreads();
                if (live) mma64_3xtf32<0, 0>(acc, as, bs, w, 0, m2tc_bwd_kend((int)(P - p0), K));
            }
            __syncthreads();
            stage64<0>(o, acc, w);
            for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
                const int r = e >> 6, q = e & 63;
                const m2_i64 n = n0 + q;
                mt[r * M2TC_FLD + q] =
                    r < len && n < N ? m2k_ld(Mp, mb + (t0 + r) * ms + n, mty) : 0.0f;
            }
            __syncthreads();
            for (int q = 32 * half; q < 32 * half + 32; q++)
                part += mt[ri * M2TC_FLD + q] * o[ri * M2TC_FLD + q];
        }
        __syncthreads(); // the previous product's sums are read
        red[tid] = part;
        __syncthreads();
        if (tid < M2TC_Q && tid < Q) {
            float *dst = pr ? gv + g_o : u + u_o;
            dst[(c * H + h) * Q + tid] = red[2 * tid] + red[2 * tid + 1];
        }
    }
    __syncthreads();
    red[tid] = dsum;
    __syncthreads();
    if (tid == 0) {
        float tot = 0.0f;
        for (int k = 0; k < M2TC_THREADS; k++) tot += red[k];
        dec[dec_o + c * H + h] = tot;
    }
}

// ---- dx of one (chunk, head, 64 channels); grid (chunks, H, ceil(P/64)):
//   dx[j,p] = sum_{i>=j} (d_j CB[i,j] e^(cs_i-cs_j)) dy[i,p]
//           + sum_n (e^(cs_last-cs_j) d_j Bm[j,n]) dS[p,n] + D dy[j,p]
// k = tokens (A read as CB is stored, [i][j]: column-major; i >= j by m2tc_bwd_krange), then
// k = state columns in 64-wide tiles (B = dS as stored, [p][n]: column-major).
template <int BF>
__device__ __forceinline__ void bwd_dx(
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *CB, m2_i64 CB_o, const float *dto, m2_i64 dto_o, const float *dac,
    m2_i64 dac_o, const float *dS, m2_i64 dS_o,
    const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    float *dx, m2_i64 dx_o, m2_i64 dx_s0, m2_i64 dx_s1, m2_i64 dx_s2, m2_i32 dx_ty) {
    typedef typename ty<BF>::T T;
    __shared__ __align__(128) unsigned char sm[M2TC_BWD_BYTES];
    float *cs = (float *)sm, *dd = cs + 64, *el = cs + 128, *o = (float *)(sm + M2TC_BWD_A_OFF);
    T *as = (T *)(sm + M2TC_BWD_A_OFF), *bs = (T *)(sm + M2TC_BWD_B_OFF);
    const int tid = (int)threadIdx.x, w = tid >> 5, ld = M2TC_LD64(BF), K = M2TC_K(BF);
    const m2_i64 c = blockIdx.x, h = blockIdx.y, p0 = (m2_i64)blockIdx.z * M2TC_TILE;
    const m2_i64 g = h / (H / G), b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 oc = dac_o + (h * nc + c) * Q, od = dto_o + (h * nc + c) * Q;
    const m2_i64 ocb = CB_o + (c * G + g) * Q * Q, sb = dS_o + (c * H + h) * P * N;
    const m2_i64 yb = dy_o + b * dy_s0 + h * dy_s2, bb = B_o + b * B_s0 + g * B_s2;
    const int live = 16 * w < len;
    if (tid < M2TC_Q) {
        cs[tid] = tid < len ? dac[oc + tid] : 0.0f;
        dd[tid] = tid < len ? dto[od + tid] : 0.0f;
        const m2_i64 i = tid;
        el[tid] = i < len ? ssd_decay(dac[oc + len - 1], dac[oc + i], i == len - 1) * dto[od + i]
                          : 0.0f;
    }
    __syncthreads();
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63; // r = i, q = j: A[j][i] at as[q + r * ld]
        const m2_i64 p = p0 + q;
        float v = 0.0f;
        if (r < len && q <= r) v = dd[q] * CB[ocb + r * Q + q] * ssd_decay(cs[r], cs[q], r == q);
        as[r * ld + q] = ty<BF>::cvt(v);
        bs[r * ld + q] = ty<BF>::cvt(r < len && p < P ? dy[yb + (t0 + r) * dy_s1 + p] : 0.0f);
    }
    __syncthreads();
    frag_c<BF> acc[4];
    for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
    int kb, ke;
    m2tc_bwd_krange(1, w, (int)len, K, &kb, &ke);
    if (live) mma64<BF, 1, 0>(acc, as, bs, w, kb, ke);
    for (m2_i64 n0 = 0; n0 < N; n0 += M2TC_TILE) {
        __syncthreads();
        for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
            const int r = e >> 6, q = e & 63; // A[j = r][n = q]; B[n = q][p = r] at bs[q + r * ld]
            const m2_i64 n = n0 + q, pr = p0 + r;
            const float bv =
                r < len && n < N ? el[r] * m2k_ld(Bm, bb + (t0 + r) * B_s1 + n, Bm_ty) : 0.0f;
            as[r * ld + q] = ty<BF>::cvt(bv);
            bs[r * ld + q] = ty<BF>::cvt(pr < P && n < N ? dS[sb + pr * N + n] : 0.0f);
        }
        __syncthreads();
        if (live) mma64<BF, 0, 1>(acc, as, bs, w, 0, m2tc_bwd_kend((int)(N - n0), K));
    }
    __syncthreads();
    stage64<BF>(o, acc, w);
    __syncthreads();
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63;
        const m2_i64 p = p0 + q;
        if (r < len && p < P) {
            const m2_i64 t = t0 + r;
            const float dv = D_mode == 2 ? D[D_o + h * D_s0 + p] : D_mode == 1 ? D[D_o + h] : 0.0f;
            m2k_st(dx, dx_o + b * dx_s0 + t * dx_s1 + h * dx_s2 + p,
                   o[r * M2TC_FLD + q] + dv * dy[yb + t * dy_s1 + p], dx_ty);
        }
    }
}

// ---- chunk_state in split tf32 (the portable m2_ssd_chunk_state_16x16 in both modes): the
// 64 x 64 tile (p0, n0) of S[p, n] = sum_{j < len} w_j x[j, p] Bm[j, n], mode 0 w_j =
// e^(cs_last - cs_j) d_j (the backward's recomputed chunk states), mode 1 w_j = e^(cs_j) with
// dy for x and Cm for Bm (the chunk's own state gradient). Grid (chunks, H,
// ceil(P/64) * ceil(N/64)). Split, not plain tf32: these states reach dS, S0 and through them
// gv and u, the inputs of the cancelling sums behind dA and ddt_bias.
__device__ __forceinline__ void bwd_state(
    const m2_i64 *ct, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    float *S, m2_i64 S_o, m2_i64 S_s0, m2_i64 S_s1, m2_i64 S_s2, m2_i64 S_s3, m2_i32 mode) {
    __shared__ __align__(128) unsigned char sm[M2TC_BWD_BYTES];
    float *wv = (float *)sm, *as = (float *)(sm + M2TC_BWD_A_OFF);
    float *bs = (float *)(sm + M2TC_BWD_B_OFF), *o = as;
    const int tid = (int)threadIdx.x, w = tid >> 5, ld = M2TC_LD64(0), K = M2TC_K(0);
    const m2_i64 c = blockIdx.x, h = blockIdx.y, g = h / (H / G);
    long long p0, n0;
    m2tc_state_tile((long long)blockIdx.z, (long long)N, &p0, &n0);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    const m2_i64 xb = x_o + b * x_s0 + h * x_s2, bb = B_o + b * B_s0 + g * B_s2;
    if (tid < M2TC_Q) {
        const m2_i64 j = tid;
        float v = 0.0f;
        if (j < len)
            v = mode ? m2k_exp(dac[oc + j])
                     : ssd_decay(dac[oc + Q - 1], dac[oc + j], j == len - 1) * dto[od + j];
        wv[tid] = v;
    }
    __syncthreads();
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) { // A[p][j] at as[j * ld + p]
        const int r = e >> 6, q = e & 63;
        const m2_i64 p = p0 + q, n = n0 + q;
        as[r * ld + q] =
            r < len && p < P ? wv[r] * m2k_ld(x, xb + (t0 + r) * x_s1 + p, x_ty) : 0.0f;
        bs[r * ld + q] = r < len && n < N ? m2k_ld(Bm, bb + (t0 + r) * B_s1 + n, Bm_ty) : 0.0f;
    }
    __syncthreads();
    frag_c<0> acc[4];
    for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
    if (p0 + 16 * w < P) mma64_3xtf32<1, 0>(acc, as, bs, w, 0, m2tc_bwd_kend((int)len, K));
    __syncthreads();
    stage64<0>(o, acc, w);
    __syncthreads();
    const m2_i64 so = S_o + sb * S_s0 + sk * S_s1 + h * S_s2;
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63;
        const m2_i64 p = p0 + r, n = n0 + q;
        if (p < P && n < N) S[so + p * S_s3 + n] = o[r * M2TC_FLD + q];
    }
}

// acc (the stage64 layout) += A Bᵀ for two token-major operands a[r, k], b[r, k] (rows
// r < len, k < kdim; a_b / b_b the row-0 offsets, a_s / b_s the row strides) over k in
// 64-wide tiles, in split tf32: the shared body of bwd_bmm (C Bᵀ) and bwd_E (dy xᵀ).
__device__ __forceinline__ void gram64_3xtf32(frag_c<0> *acc, float *as, float *bs, int tid,
                                              int w, m2_i64 len, m2_i64 kdim, const float *a,
                                              m2_i64 a_b, m2_i64 a_s, m2_i32 a_ty,
                                              const float *b, m2_i64 b_b, m2_i64 b_s,
                                              m2_i32 b_ty) {
    const int ld = M2TC_LD64(0), K = M2TC_K(0);
    for (int t = 0; t < 4; t++) wmma::fill_fragment(acc[t], 0.0f);
    for (m2_i64 k0 = 0; k0 < kdim; k0 += M2TC_TILE) {
        __syncthreads();
        for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
            const int r = e >> 6, q = e & 63;
            const m2_i64 k = k0 + q;
            as[r * ld + q] = r < len && k < kdim ? m2k_ld(a, a_b + r * a_s + k, a_ty) : 0.0f;
            bs[r * ld + q] = r < len && k < kdim ? m2k_ld(b, b_b + r * b_s + k, b_ty) : 0.0f;
        }
        __syncthreads();
        if (16 * w < len)
            mma64_3xtf32<0, 1>(acc, as, bs, w, 0, m2tc_bwd_kend((int)(kdim - k0), K));
    }
}

// ---- CB = C Bm^T of one (chunk, group) in split tf32 (the portable m2_ssd_bmm_chunk_16x16,
// for the backward's recomputed forward: CB feeds dx and, through F and q, dA); grid
// (chunks, G). k = state columns in 64-wide tiles; B = Bm as stored, column-major.
__device__ __forceinline__ void bwd_bmm(
    const m2_i64 *ct, m2_i64 Q, m2_i64 N,
    const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    float *CB, m2_i64 CB_o, m2_i64 CB_s0, m2_i64 CB_s1, m2_i64 CB_s2, m2_i64 CB_s3) {
    __shared__ __align__(128) unsigned char sm[M2TC_BWD_BYTES];
    float *as = (float *)(sm + M2TC_BWD_A_OFF), *bs = (float *)(sm + M2TC_BWD_B_OFF), *o = as;
    const int tid = (int)threadIdx.x, w = tid >> 5;
    const m2_i64 c = blockIdx.x, g = blockIdx.y;
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 cb = C_o + b * C_s0 + g * C_s2, bb = B_o + b * B_s0 + g * B_s2;
    frag_c<0> acc[4];
    gram64_3xtf32(acc, as, bs, tid, w, len, N, Cm, cb + t0 * C_s1, C_s1, Cm_ty, Bm, bb + t0 * B_s1,
                  B_s1, Bm_ty);
    __syncthreads();
    stage64<0>(o, acc, w);
    __syncthreads();
    const m2_i64 ob = CB_o + sb * CB_s0 + sk * CB_s1 + g * CB_s2;
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int r = e >> 6, q = e & 63;
        if (r < Q && q < Q) CB[ob + r * CB_s3 + q] = o[r * M2TC_FLD + q];
    }
}

// ---- E[i, j] = e^(cs_i - cs_j) dy_i . x_j (j <= i < len, else 0) of one (chunk, head) in
// split tf32 (the portable m2_ssd_bwd_E_16x16; E feeds dCBg and, through F and q, dA);
// grid (chunks, H). k = channels in 64-wide tiles; B = x as stored, column-major.
__device__ __forceinline__ void bwd_E(
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 P, const float *dac, m2_i64 dac_o,
    const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty, float *E,
    m2_i64 E_o) {
    __shared__ __align__(128) unsigned char sm[M2TC_BWD_BYTES];
    float *cs = (float *)sm, *as = (float *)(sm + M2TC_BWD_A_OFF);
    float *bs = (float *)(sm + M2TC_BWD_B_OFF), *o = as;
    const int tid = (int)threadIdx.x, w = tid >> 5;
    const m2_i64 c = blockIdx.x, h = blockIdx.y;
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 oc = dac_o + (h * nc + c) * Q;
    const m2_i64 yb = dy_o + b * dy_s0 + h * dy_s2, xb = x_o + b * x_s0 + h * x_s2;
    if (tid < M2TC_Q) cs[tid] = tid < len ? dac[oc + tid] : 0.0f;
    frag_c<0> acc[4];
    gram64_3xtf32(acc, as, bs, tid, w, len, P, dy, yb + t0 * dy_s1, dy_s1, 0, x, xb + t0 * x_s1,
                  x_s1, x_ty);
    __syncthreads();
    stage64<0>(o, acc, w);
    __syncthreads();
    const m2_i64 eb = E_o + (c * H + h) * Q * Q;
    for (int e = tid; e < 64 * 64; e += M2TC_THREADS) {
        const int i = e >> 6, j = e & 63;
        float v = 0.0f;
        if (i < len && j <= i) v = ssd_decay(cs[i], cs[j], i == j) * o[i * M2TC_FLD + j];
        if (i < Q && j < Q) E[eb + i * Q + j] = v;
    }
}

} // namespace m2tc

// ---- the kernels: the portable kernels' parameter lists -----------------------------------
#define M2TC_DBC_PARAMS                                                                            \
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N, m2_i32 mode,    \
        const float *dCB, m2_i64 dCB_o, const float *dto, m2_i64 dto_o, const float *dac,          \
        m2_i64 dac_o, const float *M, m2_i64 M_o, m2_i64 M_s0, m2_i64 M_s1, m2_i64 M_s2,           \
        m2_i32 M_ty, const float *V, m2_i64 V_o, m2_i64 V_s0, m2_i64 V_s1, m2_i64 V_s2,            \
        m2_i32 V_ty, const float *St, m2_i64 St_o, float *out, m2_i64 o_o, m2_i64 o_s0,            \
        m2_i64 o_s1, m2_i64 o_s2, m2_i32 out_ty
#define M2TC_DBC_ARGS                                                                              \
    ct, nc, Q, H, G, P, N, mode, dCB, dCB_o, dto, dto_o, dac, dac_o, M, M_o, M_s0, M_s1, M_s2,     \
        M_ty, V, V_o, V_s0, V_s1, V_s2, V_ty, St, St_o, out, o_o, o_s0, o_s1, o_s2, out_ty
#define M2TC_TOK_PARAMS                                                                            \
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,                 \
        const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2, const float *x,    \
        m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty, const float *Bm,           \
        m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty, const float *Cm,          \
        m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty, const float *S0,          \
        m2_i64 S0_o, const float *dS, m2_i64 dS_o, float *u, m2_i64 u_o, float *gv, m2_i64 g_o,    \
        float *dec, m2_i64 dec_o
#define M2TC_TOK_ARGS                                                                              \
    ct, nc, Q, H, G, P, N, dy, dy_o, dy_s0, dy_s1, dy_s2, x, x_o, x_s0, x_s1, x_s2, x_ty, Bm,      \
        B_o, B_s0, B_s1, B_s2, Bm_ty, Cm, C_o, C_s0, C_s1, C_s2, Cm_ty, S0, S0_o, dS, dS_o, u,     \
        u_o, gv, g_o, dec, dec_o
#define M2TC_DX_PARAMS                                                                             \
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,                 \
        const float *CB, m2_i64 CB_o, const float *dto, m2_i64 dto_o, const float *dac,            \
        m2_i64 dac_o, const float *dS, m2_i64 dS_o, const float *dy, m2_i64 dy_o, m2_i64 dy_s0,    \
        m2_i64 dy_s1, m2_i64 dy_s2, const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1,         \
        m2_i64 B_s2, m2_i32 Bm_ty, const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,         \
        float *dx, m2_i64 dx_o, m2_i64 dx_s0, m2_i64 dx_s1, m2_i64 dx_s2, m2_i32 dx_ty
#define M2TC_DX_ARGS                                                                               \
    ct, nc, Q, H, G, P, N, CB, CB_o, dto, dto_o, dac, dac_o, dS, dS_o, dy, dy_o, dy_s0, dy_s1,     \
        dy_s2, Bm, B_o, B_s0, B_s1, B_s2, Bm_ty, D, D_o, D_s0, D_mode, dx, dx_o, dx_s0, dx_s1,     \
        dx_s2, dx_ty
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_bwd_dbc_tf32_tc128(M2TC_DBC_PARAMS) {
    m2tc::bwd_dbc<0>(M2TC_DBC_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_bwd_dbc_bf16_tc128(M2TC_DBC_PARAMS) {
    m2tc::bwd_dbc<1>(M2TC_DBC_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_bwd_tok_3xtf32_tc128(M2TC_TOK_PARAMS) {
    m2tc::bwd_tok(M2TC_TOK_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS) m2_ssd_chunk_state_3xtf32_tc128(
    const m2_i64 *ct, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    float *S, m2_i64 S_o, m2_i64 S_s0, m2_i64 S_s1, m2_i64 S_s2, m2_i64 S_s3, m2_i32 mode) {
    m2tc::bwd_state(ct, Q, H, G, P, N, x, x_o, x_s0, x_s1, x_s2, x_ty, Bm, B_o, B_s0, B_s1, B_s2,
                    Bm_ty, dto,
                    dto_o, dto_s0, dto_s1, dto_s2, dac, dac_o, dac_s0, dac_s1, dac_s2, S, S_o,
                    S_s0, S_s1, S_s2, S_s3, mode);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS) m2_ssd_bmm_chunk_3xtf32_tc128(
    const m2_i64 *ct, m2_i64 Q, m2_i64 N,
    const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    float *CB, m2_i64 CB_o, m2_i64 CB_s0, m2_i64 CB_s1, m2_i64 CB_s2, m2_i64 CB_s3) {
    m2tc::bwd_bmm(ct, Q, N, Cm, C_o, C_s0, C_s1, C_s2, Cm_ty, Bm, B_o, B_s0, B_s1, B_s2, Bm_ty,
                  CB, CB_o, CB_s0, CB_s1, CB_s2, CB_s3);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS) m2_ssd_bwd_E_3xtf32_tc128(
    const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 P, const float *dac, m2_i64 dac_o,
    const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty, float *E,
    m2_i64 E_o) {
    m2tc::bwd_E(ct, nc, Q, H, P, dac, dac_o, dy, dy_o, dy_s0, dy_s1, dy_s2, x, x_o, x_s0, x_s1,
                x_s2, x_ty, E, E_o);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_bwd_dx_tf32_tc128(M2TC_DX_PARAMS) {
    m2tc::bwd_dx<0>(M2TC_DX_ARGS);
}
extern "C" __global__ void __launch_bounds__(M2TC_THREADS)
    m2_ssd_bwd_dx_bf16_tc128(M2TC_DX_PARAMS) {
    m2tc::bwd_dx<1>(M2TC_DX_ARGS);
}
