/*
 * ssd_chunked.cl — the SSD chunk pipeline of SPEC §3 as five kernels: the staged ops
 * (mamba2_ssd_chunk_cumsum ... mamba2_ssd_chunk_scan) launch one each, the fused forward
 * chains all five with the intermediates in device scratch. Written in the common subset
 * of OpenCL C and CUDA C (common.h); float32 storage and arithmetic.
 *
 * Chunks are described by a table rather than by k*Q, so that the same kernels serve the
 * padded batch layout and cu_seqlens varlen: chunk c is ct[5c .. 5c+4] =
 *   { b: batch row of its tokens, t0: first token, len: tokens (1..Q),
 *     sb, sk: its (batch, chunk) coordinates in the staged tensors [B,H,K,Q] / [B,K,...] }.
 * A sequence (state_passing) is st[2s], st[2s+1]: its chunks [c0, c1) in order.
 * Inside a chunk i, j index tokens (0..len-1), and slots len..Q-1 of dt_out / dA_cumsum are
 * padding (d = 0, cumsum flat), exactly like the reference (src/ref/ssd_chunked_ref.c).
 *
 * Tensors arrive as (pointer, element offset, outer element strides); the last dimension is
 * contiguous. Sums run in a fixed order per output element (no atomics): results are
 * bitwise reproducible run to run.
 */

/* The decay exp(ci - cj) from token j to token i >= j of a chunk (diag: i == j). Where both
 * cumulative sums are -inf (A = -inf, or d A overflowed to -inf) the difference is NaN; the
 * recurrence (src/ref: S_t = exp(d_t A) S_{t-1} + d_t x_t B_t, and the CPU's segment
 * restarts) gives the full decay there: 0 for j < i, 1 (a token's own input, undecayed) for
 * i == j. Finite and NaN sums keep exp's bits. Used by ssd_bwd.cl too (one translation unit
 * under CUDA, one program under OpenCL). */
M2K_FN float ssd_decay(float ci, float cj, int diag) {
    if (ci == cj && ci < 0.0f && ci * 0.5f == ci) return diag ? 1.0f : 0.0f; /* both -inf */
    return m2k_exp(ci - cj);
}

/* ---- chunk_cumsum: one work-item per (chunk, head), 64 per group --------------------------
 * d_i = clamp(softplus(dt + bias), lo, hi), cs_i = sum_{j<=i} d_j A[h]; O(Q) serial adds.   */
M2K_KERNEL void m2_ssd_chunk_cumsum_wi64(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 H, m2_i64 Q,
    M2K_GLOBAL const float *dt, m2_i64 dt_o, m2_i64 dt_s0, m2_i64 dt_s1, m2_i32 dt_ty,
    M2K_GLOBAL const float *A, m2_i64 A_o,
    M2K_GLOBAL const float *bias, m2_i64 bias_o, m2_i32 has_bias,
    m2_i32 softplus, float lo, float hi,
    M2K_GLOBAL float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    M2K_GLOBAL float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2) {
    const m2_i64 task = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (task >= nc * H) return;
    const m2_i64 c = task / H, h = task % H;
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const float a = A[A_o + h];
    const float bv = has_bias ? bias[bias_o + h] : 0.0f;
    const m2_i64 o1 = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 o2 = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    float cs = 0.0f;
    for (m2_i64 i = 0; i < Q; i++) {
        float d = 0.0f;
        if (i < len) {
            d = m2k_ld(dt, dt_o + b * dt_s0 + (t0 + i) * dt_s1 + h, dt_ty);
            if (has_bias) d += bv;
            if (softplus) d = m2k_softplus(d);
            if (d < lo) d = lo;
            if (d > hi) d = hi;
        }
        if (i < len) cs += d * a; /* the padding stays flat (0 * -inf would be NaN) */
        dto[o1 + i] = d;
        dac[o2 + i] = cs;
    }
}

/* ---- bmm_chunk: CB[i,j] = sum_n Cm[t0+i,g,n] Bm[t0+j,g,n] (zero outside len) -----------
 * groups (ceil(Q/16)^2, G, chunks), 16x16 work-items: a 16x16 tile of CB, N in steps of 16
 * through local memory.                                                                      */
M2K_KERNEL void m2_ssd_bmm_chunk_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 Q, m2_i64 N,
    M2K_GLOBAL const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    M2K_GLOBAL float *CB, m2_i64 CB_o, m2_i64 CB_s0, m2_i64 CB_s1, m2_i64 CB_s2, m2_i64 CB_s3) {
    M2K_LOCAL_ARRAY(float, cs, [16][17]);
    M2K_LOCAL_ARRAY(float, bs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 nt = (Q + 15) / 16, tile = M2K_GROUP_X(nt * nt);
    const m2_i64 i0 = (tile / nt) * 16, j0 = (tile % nt) * 16;
    const m2_i64 g = M2K_GROUP_ID(1), c = M2K_GROUP_Z(nt * nt);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 cb = C_o + b * C_s0 + g * C_s2, bb = B_o + b * B_s0 + g * B_s2;
    float acc = 0.0f;
    for (m2_i64 n0 = 0; n0 < N; n0 += 16) {
        const m2_i64 n = n0 + lx;
        cs[ly][lx] =
            (i0 + ly < len && n < N) ? m2k_ld(Cm, cb + (t0 + i0 + ly) * C_s1 + n, Cm_ty) : 0.0f;
        bs[ly][lx] =
            (j0 + ly < len && n < N) ? m2k_ld(Bm, bb + (t0 + j0 + ly) * B_s1 + n, Bm_ty) : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc += cs[ly][k] * bs[lx][k];
        M2K_BARRIER();
    }
    const m2_i64 i = i0 + ly, j = j0 + lx;
    if (i < Q && j < Q) CB[CB_o + sb * CB_s0 + sk * CB_s1 + g * CB_s2 + i * CB_s3 + j] = acc;
}

/* ---- chunk_state: states[p,n] = sum_{j<len} w_j x[j,p] Bm[j,n] with w_j = exp(cs_last - cs_j)
 * d_j (mode 0). Mode 1 is the backward's use: w_j = exp(cs_j), with dy for x and Cm for Bm,
 * giving the chunk's gradient contribution to the state entering it.
 * groups (ceil(P/16) * ceil(N/16), H, chunks), 16x16 work-items: a 16x16 tile of the state,
 * the chunk's tokens in steps of 16 through local memory.                                    */
M2K_KERNEL void m2_ssd_chunk_state_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    M2K_GLOBAL const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    M2K_GLOBAL const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    M2K_GLOBAL float *S, m2_i64 S_o, m2_i64 S_s0, m2_i64 S_s1, m2_i64 S_s2, m2_i64 S_s3,
    m2_i32 mode) {
    M2K_LOCAL_ARRAY(float, xs, [16][17]);
    M2K_LOCAL_ARRAY(float, bs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 ntn = (N + 15) / 16, gx = (P + 15) / 16 * ntn, tile = M2K_GROUP_X(gx);
    const m2_i64 p0 = (tile / ntn) * 16, n0 = (tile % ntn) * 16;
    const m2_i64 h = M2K_GROUP_ID(1), c = M2K_GROUP_Z(gx), g = h / (H / G);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    const float cs_last = dac[oc + Q - 1];
    const m2_i64 xb = x_o + b * x_s0 + h * x_s2, bb = B_o + b * B_s0 + g * B_s2;
    float acc = 0.0f;
    for (m2_i64 j0 = 0; j0 < len; j0 += 16) {
        const m2_i64 j = j0 + ly;
        float w = 0.0f;
        if (j < len)
            w = mode ? m2k_exp(dac[oc + j])
                     : ssd_decay(cs_last, dac[oc + j], j == len - 1) * dto[od + j];
        xs[ly][lx] =
            (j < len && p0 + lx < P) ? w * m2k_ld(x, xb + (t0 + j) * x_s1 + p0 + lx, x_ty) : 0.0f;
        bs[ly][lx] =
            (j < len && n0 + lx < N) ? m2k_ld(Bm, bb + (t0 + j) * B_s1 + n0 + lx, Bm_ty) : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc += xs[k][ly] * bs[k][lx];
        M2K_BARRIER();
    }
    const m2_i64 p = p0 + ly, n = n0 + lx;
    if (p < P && n < N) S[S_o + sb * S_s0 + sk * S_s1 + h * S_s2 + p * S_s3 + n] = acc;
}

/* ---- state_passing: S_start[c0] = init (or 0); S_start[c+1] = exp(cs_last[c]) S_start[c] +
 * states[c]; final = the state after the sequence's last chunk. One work-item per (p, n):
 * groups (ceil(P*N/64), H, sequences); the only serial loop of the pipeline (over chunks). */
M2K_KERNEL void m2_ssd_state_passing_wi64(
    M2K_GLOBAL const m2_i64 *ct, M2K_GLOBAL const m2_i64 *st, m2_i64 Q, m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *S, m2_i64 S_o, m2_i64 S_s0, m2_i64 S_s1, m2_i64 S_s2, m2_i64 S_s3,
    M2K_GLOBAL const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    M2K_GLOBAL const float *init, m2_i64 in_o, m2_i64 in_s0, m2_i64 in_s1, m2_i64 in_s2,
    m2_i32 has_init,
    M2K_GLOBAL float *S0, m2_i64 S0_o, m2_i64 S0_s0, m2_i64 S0_s1, m2_i64 S0_s2, m2_i64 S0_s3,
    M2K_GLOBAL float *fin, m2_i64 fin_o, m2_i64 fin_s0, m2_i64 fin_s1, m2_i64 fin_s2,
    m2_i32 has_final) {
    const m2_i64 gx = (P * N + 63) / 64, e = M2K_GROUP_X(gx) * 64 + M2K_LOCAL_ID(0);
    if (e >= P * N) return;
    const m2_i64 p = e / N, n = e % N, h = M2K_GROUP_ID(1), s = M2K_GROUP_Z(gx);
    float v = has_init ? init[in_o + s * in_s0 + h * in_s1 + p * in_s2 + n] : 0.0f;
    for (m2_i64 c = st[2 * s]; c < st[2 * s + 1]; c++) {
        const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
        S0[S0_o + sb * S0_s0 + sk * S0_s1 + h * S0_s2 + p * S0_s3 + n] = v;
        const float decay = m2k_exp(dac[dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2 + Q - 1]);
        v = decay * v + S[S_o + sb * S_s0 + sk * S_s1 + h * S_s2 + p * S_s3 + n];
    }
    if (has_final) fin[fin_o + s * fin_s0 + h * fin_s1 + p * fin_s2 + n] = v;
}

/* ---- chunk_scan: y_i = sum_{j<=i} CB[i,j] exp(cs_i - cs_j) d_j x_j + exp(cs_i) Cm_i . S_start
 * + D x_i; out = y * silu(z). groups (ceil(Q/16) * ceil(P/16), H, chunks), 16x16 work-items:
 * a 16 (tokens) x 16 (channels) tile of out; the masked W tile and x tile, then the Cm tile
 * and the state tile, through local memory. D mode: 0 none, 1 [H], 2 [H,P].                 */
M2K_KERNEL void m2_ssd_chunk_scan_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *CB, m2_i64 CB_o, m2_i64 CB_s0, m2_i64 CB_s1, m2_i64 CB_s2,
    m2_i64 CB_s3,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    M2K_GLOBAL const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    M2K_GLOBAL const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    M2K_GLOBAL const float *S0, m2_i64 S0_o, m2_i64 S0_s0, m2_i64 S0_s1, m2_i64 S0_s2,
    m2_i64 S0_s3,
    M2K_GLOBAL const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2, m2_i32 z_ty,
    m2_i32 has_z,
    M2K_GLOBAL float *out, m2_i64 out_o, m2_i64 out_s0, m2_i64 out_s1, m2_i64 out_s2, m2_i32 out_ty,
    M2K_GLOBAL float *ox, m2_i64 ox_o, m2_i64 ox_s0, m2_i64 ox_s1, m2_i64 ox_s2, m2_i32 ox_ty,
    m2_i32 has_ox) {
    M2K_LOCAL_ARRAY(float, ws, [16][17]);
    M2K_LOCAL_ARRAY(float, xs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 ntp = (P + 15) / 16, gx = (Q + 15) / 16 * ntp, tile = M2K_GROUP_X(gx);
    const m2_i64 i0 = (tile / ntp) * 16, p0 = (tile % ntp) * 16;
    const m2_i64 h = M2K_GROUP_ID(1), c = M2K_GROUP_Z(gx), g = h / (H / G);
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
    const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    const m2_i64 ocb = CB_o + sb * CB_s0 + sk * CB_s1 + g * CB_s2;
    const m2_i64 xb = x_o + b * x_s0 + h * x_s2;
    const m2_i64 i = i0 + ly, p = p0 + lx;
    const float cs_i = i < len ? dac[oc + i] : 0.0f;
    /* the chunk's own tokens: W (Q x Q, lower triangle) times x */
    float acc = 0.0f;
    const m2_i64 jend = i0 + 16 < len ? i0 + 16 : len;
    for (m2_i64 j0 = 0; j0 < jend; j0 += 16) {
        const m2_i64 jw = j0 + lx, jx = j0 + ly;
        float w = 0.0f;
        if (i < len && jw <= i)
            w = CB[ocb + i * CB_s3 + jw] * ssd_decay(cs_i, dac[oc + jw], jw == i) * dto[od + jw];
        ws[ly][lx] = w;
        xs[ly][lx] = (jx < len && p < P) ? m2k_ld(x, xb + (t0 + jx) * x_s1 + p, x_ty) : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc += ws[ly][k] * xs[k][lx];
        M2K_BARRIER();
    }
    /* the state entering the chunk: Cm (Q x N) times S_start^T (N x P) */
    float acc2 = 0.0f;
    const m2_i64 cb = C_o + b * C_s0 + g * C_s2;
    const m2_i64 sbase = S0_o + sb * S0_s0 + sk * S0_s1 + h * S0_s2;
    for (m2_i64 n0 = 0; n0 < N; n0 += 16) {
        ws[ly][lx] =
            (i < len && n0 + lx < N) ? m2k_ld(Cm, cb + (t0 + i) * C_s1 + n0 + lx, Cm_ty) : 0.0f;
        xs[ly][lx] = (p0 + ly < P && n0 + lx < N) ? S0[sbase + (p0 + ly) * S0_s3 + n0 + lx] : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc2 += ws[ly][k] * xs[lx][k];
        M2K_BARRIER();
    }
    if (i < len && p < P) {
        const m2_i64 t = t0 + i;
        const float xi = m2k_ld(x, xb + t * x_s1 + p, x_ty);
        const float dv = D_mode == 2 ? D[D_o + h * D_s0 + p] : D_mode == 1 ? D[D_o + h] : 0.0f;
        float y = acc + m2k_exp(cs_i) * acc2 + dv * xi;
        if (has_ox) m2k_st(ox, ox_o + b * ox_s0 + t * ox_s1 + h * ox_s2 + p, y, ox_ty);
        if (has_z) y *= m2k_silu(m2k_ld(z, z_o + b * z_s0 + t * z_s1 + h * z_s2 + p, z_ty));
        m2k_st(out, out_o + b * out_s0 + t * out_s1 + h * out_s2 + p, y, out_ty);
    }
}

/* ---- states after chosen tokens (mamba2_ssd_forward_states): position k is token m of chunk
 * c (pt[2k], pt[2k+1]); S = exp(cs_m) S_start[c] + sum_{j<=m} exp(cs_m - cs_j) d_j x_j Bm_j.
 * groups (ceil(P/16) * ceil(N/16), H, positions), 16x16 work-items, as chunk_state.           */
M2K_KERNEL void m2_ssd_pos_state_16x16(
    M2K_GLOBAL const m2_i64 *ct, M2K_GLOBAL const m2_i64 *pt, m2_i64 Q, m2_i64 H, m2_i64 G,
    m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    M2K_GLOBAL const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    M2K_GLOBAL const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    M2K_GLOBAL const float *S0, m2_i64 S0_o, m2_i64 S0_s0, m2_i64 S0_s1, m2_i64 S0_s2,
    m2_i64 S0_s3,
    M2K_GLOBAL float *ps, m2_i64 ps_o, m2_i64 ps_s0, m2_i64 ps_s1, m2_i64 ps_s2) {
    M2K_LOCAL_ARRAY(float, xs, [16][17]);
    M2K_LOCAL_ARRAY(float, bs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 ntn = (N + 15) / 16, gx = (P + 15) / 16 * ntn, tile = M2K_GROUP_X(gx);
    const m2_i64 p0 = (tile / ntn) * 16, n0 = (tile % ntn) * 16;
    const m2_i64 h = M2K_GROUP_ID(1), k = M2K_GROUP_Z(gx), g = h / (H / G);
    const m2_i64 c = pt[2 * k], m = pt[2 * k + 1];
    const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], sb = ct[5 * c + 3], sk = ct[5 * c + 4];
    const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
    const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
    const float cs_m = dac[oc + m];
    const m2_i64 xb = x_o + b * x_s0 + h * x_s2, bb = B_o + b * B_s0 + g * B_s2;
    float acc = 0.0f;
    for (m2_i64 j0 = 0; j0 <= m; j0 += 16) {
        const m2_i64 j = j0 + ly;
        float w = 0.0f;
        if (j <= m) w = ssd_decay(cs_m, dac[oc + j], j == m) * dto[od + j];
        xs[ly][lx] =
            (j <= m && p0 + lx < P) ? w * m2k_ld(x, xb + (t0 + j) * x_s1 + p0 + lx, x_ty) : 0.0f;
        bs[ly][lx] =
            (j <= m && n0 + lx < N) ? m2k_ld(Bm, bb + (t0 + j) * B_s1 + n0 + lx, Bm_ty) : 0.0f;
        M2K_BARRIER();
        for (int q = 0; q < 16; q++) acc += xs[q][ly] * bs[q][lx];
        M2K_BARRIER();
    }
    const m2_i64 p = p0 + ly, n = n0 + lx;
    if (p < P && n < N) {
        const float s0 = S0[S0_o + sb * S0_s0 + sk * S0_s1 + h * S0_s2 + p * S0_s3 + n];
        ps[ps_o + k * ps_s0 + h * ps_s1 + p * ps_s2 + n] = m2k_exp(cs_m) * s0 + acc;
    }
}

/* ---- the fused forward's scan with the states on chip: one work-group per (16 channels p,
 * head, sequence) walks the sequence's chunks in order, holding its 16 x N slice of the
 * state in local memory, so the chunk states and the states at chunk starts never go to
 * DRAM (chunk_state + state_passing + chunk_scan in one launch). Per chunk: the outputs,
 * 16 tokens at a time (the W tile times x, plus Cm times the entering state), then the state
 * update S = exp(cs_last) S + sum_j exp(cs_last - cs_j) d_j x_j Bm_j (each work-item owns
 * N/16 elements of its channel). N <= M2K_SCAN_NMAX; groups (ceil(P/16), H, sequences).     */
#define M2K_SCAN_NMAX 128
M2K_KERNEL void m2_ssd_scan_seq_16x16(
    M2K_GLOBAL const m2_i64 *ct, M2K_GLOBAL const m2_i64 *st, m2_i64 Q, m2_i64 H, m2_i64 G,
    m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *CB, m2_i64 CB_o, m2_i64 CB_s0, m2_i64 CB_s1, m2_i64 CB_s2,
    m2_i64 CB_s3,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL const float *dto, m2_i64 dto_o, m2_i64 dto_s0, m2_i64 dto_s1, m2_i64 dto_s2,
    M2K_GLOBAL const float *dac, m2_i64 dac_o, m2_i64 dac_s0, m2_i64 dac_s1, m2_i64 dac_s2,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    M2K_GLOBAL const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    M2K_GLOBAL const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2, m2_i32 z_ty,
    m2_i32 has_z,
    M2K_GLOBAL const float *init, m2_i64 in_o, m2_i64 in_s0, m2_i64 in_s1, m2_i64 in_s2,
    m2_i32 has_init,
    M2K_GLOBAL float *out, m2_i64 out_o, m2_i64 out_s0, m2_i64 out_s1, m2_i64 out_s2, m2_i32 out_ty,
    M2K_GLOBAL float *ox, m2_i64 ox_o, m2_i64 ox_s0, m2_i64 ox_s1, m2_i64 ox_s2, m2_i32 ox_ty,
    m2_i32 has_ox,
    M2K_GLOBAL float *fin, m2_i64 fin_o, m2_i64 fin_s0, m2_i64 fin_s1, m2_i64 fin_s2,
    m2_i32 has_final) {
    M2K_LOCAL_ARRAY(float, S, [16][M2K_SCAN_NMAX + 1]);
    M2K_LOCAL_ARRAY(float, bs, [16][M2K_SCAN_NMAX + 1]);
    M2K_LOCAL_ARRAY(float, ws, [16][17]);
    M2K_LOCAL_ARRAY(float, xs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 gx = (P + 15) / 16, p0 = M2K_GROUP_X(gx) * 16, h = M2K_GROUP_ID(1);
    const m2_i64 s = M2K_GROUP_Z(gx);
    const m2_i64 g = h / (H / G), p = p0 + lx;
    /* the entering state: S[p - p0][n] */
    for (m2_i64 n = ly; n < N; n += 16)
        S[lx][n] = (has_init && p < P) ? init[in_o + s * in_s0 + h * in_s1 + p * in_s2 + n] : 0.0f;
    M2K_BARRIER();
    const float dv = p >= P        ? 0.0f
                     : D_mode == 2 ? D[D_o + h * D_s0 + p]
                     : D_mode == 1 ? D[D_o + h]
                                   : 0.0f;
    for (m2_i64 c = st[2 * s]; c < st[2 * s + 1]; c++) {
        const m2_i64 b = ct[5 * c], t0 = ct[5 * c + 1], len = ct[5 * c + 2];
        const m2_i64 sb = ct[5 * c + 3], sk = ct[5 * c + 4];
        const m2_i64 od = dto_o + sb * dto_s0 + h * dto_s1 + sk * dto_s2;
        const m2_i64 oc = dac_o + sb * dac_s0 + h * dac_s1 + sk * dac_s2;
        const m2_i64 ocb = CB_o + sb * CB_s0 + sk * CB_s1 + g * CB_s2;
        const m2_i64 xb = x_o + b * x_s0 + h * x_s2;
        const m2_i64 cbase = C_o + b * C_s0 + g * C_s2, bbase = B_o + b * B_s0 + g * B_s2;
        /* outputs, 16 tokens at a time */
        for (m2_i64 i0 = 0; i0 < len; i0 += 16) {
            const m2_i64 i = i0 + ly;
            const float cs_i = i < len ? dac[oc + i] : 0.0f;
            float acc = 0.0f;
            const m2_i64 jend = i0 + 16 < len ? i0 + 16 : len;
            for (m2_i64 j0 = 0; j0 < jend; j0 += 16) {
                const m2_i64 jw = j0 + lx, jx = j0 + ly;
                float w = 0.0f;
                if (i < len && jw <= i)
                    w = CB[ocb + i * CB_s3 + jw] * ssd_decay(cs_i, dac[oc + jw], jw == i) *
                        dto[od + jw];
                ws[ly][lx] = w;
                xs[ly][lx] =
                    (jx < len && p < P) ? m2k_ld(x, xb + (t0 + jx) * x_s1 + p, x_ty) : 0.0f;
                M2K_BARRIER();
                for (int k = 0; k < 16; k++) acc += ws[ly][k] * xs[k][lx];
                M2K_BARRIER();
            }
            float acc2 = 0.0f;
            for (m2_i64 n0 = 0; n0 < N; n0 += 16) {
                ws[ly][lx] = (i < len && n0 + lx < N)
                                 ? m2k_ld(Cm, cbase + (t0 + i) * C_s1 + n0 + lx, Cm_ty)
                                 : 0.0f;
                M2K_BARRIER();
                const int kn = N - n0 < 16 ? (int)(N - n0) : 16;
                for (int k = 0; k < kn; k++) acc2 += ws[ly][k] * S[lx][n0 + k];
                M2K_BARRIER();
            }
            if (i < len && p < P) {
                const m2_i64 t = t0 + i;
                const float xi = m2k_ld(x, xb + t * x_s1 + p, x_ty);
                float y = acc + m2k_exp(cs_i) * acc2 + dv * xi;
                if (has_ox) m2k_st(ox, ox_o + b * ox_s0 + t * ox_s1 + h * ox_s2 + p, y, ox_ty);
                if (has_z) y *= m2k_silu(m2k_ld(z, z_o + b * z_s0 + t * z_s1 + h * z_s2 + p, z_ty));
                m2k_st(out, out_o + b * out_s0 + t * out_s1 + h * out_s2 + p, y, out_ty);
            }
        }
        /* the state leaving the chunk: work-item (lx, ly) owns S[lx][ly + 16m] */
        const float cs_last = dac[oc + Q - 1];
        float acc[M2K_SCAN_NMAX / 16];
        for (int m = 0; m < M2K_SCAN_NMAX / 16; m++) acc[m] = 0.0f;
        for (m2_i64 j0 = 0; j0 < len; j0 += 16) {
            const m2_i64 j = j0 + ly;
            float w = 0.0f;
            if (j < len) w = ssd_decay(cs_last, dac[oc + j], j == len - 1) * dto[od + j];
            xs[ly][lx] = (j < len && p < P) ? w * m2k_ld(x, xb + (t0 + j) * x_s1 + p, x_ty) : 0.0f;
            for (m2_i64 n = lx; n < N; n += 16)
                bs[ly][n] = j < len ? m2k_ld(Bm, bbase + (t0 + j) * B_s1 + n, Bm_ty) : 0.0f;
            M2K_BARRIER();
            for (int m = 0; m < M2K_SCAN_NMAX / 16; m++) {
                const m2_i64 n = ly + 16 * m;
                if (n < N)
                    for (int k = 0; k < 16; k++) acc[m] += xs[k][lx] * bs[k][n];
            }
            M2K_BARRIER();
        }
        const float decay = m2k_exp(cs_last);
        for (int m = 0; m < M2K_SCAN_NMAX / 16; m++) {
            const m2_i64 n = ly + 16 * m;
            if (n < N) S[lx][n] = decay * S[lx][n] + acc[m];
        }
        M2K_BARRIER();
    }
    if (has_final && p < P)
        for (m2_i64 n = ly; n < N; n += 16)
            fin[fin_o + s * fin_s0 + h * fin_s1 + p * fin_s2 + n] = S[lx][n];
}
