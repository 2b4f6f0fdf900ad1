/*
 * conv1d.cl — causal depthwise conv1d forward and backward (SPEC §4) for every GPU API,
 * written once in the common subset of OpenCL C 1.2 and CUDA C (the macro header is
 * included before this file). float32 storage and arithmetic; the math is the one of
 * src/ref/conv1d_ref.c, whose notation this file keeps:
 *   u_r   = x[b, t0+r, c] (0 <= r < len), init[s, c, W-1+r] or 0 (r < 0)
 *   pre_r = bias[c] + Σ_{k<W} weight[c,k] u_{r-W+1+k},  out_r = silu(pre_r) or pre_r
 *   final[s, c, i] = u_{len-W+1+i}
 * Positions below are absolute token indices of batch row b; sequence s covers [t0, t1).
 *
 * Kernels (1-D groups of 64 work-items, one task each; flops per output element):
 *   m2_conv1d_fwd_wi64          one item per (token, channel): 2W flops (+ SiLU)
 *   m2_conv1d_final_wi64        one item per (sequence, channel, i < W-1): a copy
 *   m2_conv1d_bwd_t64_wi64      one item per (channel, block of 64 tokens of a row): dx and
 *                               the block's partial sums of dweight/dbias, walking its
 *                               tokens with the inputs and g = dout·act'(pre) in registers
 *                               (2W + 2·8 + 2·8 flops per token, + SiLU')
 *   m2_conv1d_bwd_dinit_wi64    one item per (sequence, channel): dinitial_conv_state
 *   m2_conv1d_bwd_reduce_wi64   one item per (channel, k <= W): the partial sums over blocks
 *                               in block order (fixed by the problem: bitwise reproducible)
 * Tensors arrive as (pointer, element offset, outer strides), the last dimension contiguous;
 * an optional tensor also as a presence flag. cu_seqlens arrives as an int64 table.
 */

#define CONV1D_TB 64   /* tokens per backward block (partial-sum granularity) */
#define CONV1D_MAXW 8

/* The sequence holding token t of a packed row: the largest s with cu[s] <= t. */
M2K_FN m2_i64 cv_seq_of(M2K_GLOBAL const m2_i64 *cu, m2_i64 nseq, m2_i64 t) {
    m2_i64 lo = 0, hi = nseq;
    while (lo < hi) {
        const m2_i64 mid = lo + (hi - lo + 1) / 2;
        if (cu[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v))) */
M2K_FN float cv_silu_grad(float v) {
    const float sg = m2k_sigmoid(v);
    return sg * (1.0f + v * (1.0f - sg));
}

/* u at absolute position m of row b (sequence s = [t0, t1)), channel c; 0 past t1. x and
 * init are already offset. */
M2K_FN float cv_u(M2K_GLOBAL const float *x, m2_i64 xs0, m2_i64 xs1,
                  M2K_GLOBAL const float *init, m2_i64 is0, m2_i64 is1, int has_init, int W,
                  m2_i64 s, m2_i64 b, m2_i64 t0, m2_i64 t1, m2_i64 c, m2_i64 m) {
    if (m >= t1) return 0.0f;
    if (m >= t0) return x[b * xs0 + m * xs1 + c];
    if (!has_init) return 0.0f;
    return init[s * is0 + c * is1 + (W - 1 + (m - t0))];
}

/* Sequence s of token t of row b: [*t0, *t1). */
#define CV_SEQ(t)                                                                          \
    m2_i64 s = b, t0 = 0, t1 = L;                                                          \
    if (has_cu) {                                                                          \
        s = cv_seq_of(cu, nseq, (t));                                                      \
        t0 = cu[s];                                                                        \
        t1 = cu[s + 1];                                                                    \
    }

#define CV_U(m) cv_u(x, x_s0, x_s1, init, i_s0, i_s1, has_init, W, s, b, t0, t1, c, (m))

/* out[B,L,C] = act(bias + Σ_k w[c,k] u_{t-W+1+k}); x[B,L,C]; weight[C,W]; bias[C];
 * init[S,C,W-1]; cu[nseq+1] (has_cu; B == 1) */
M2K_KERNEL void m2_conv1d_fwd_wi64(
    M2K_GLOBAL float *out, m2_i64 o_o, m2_i64 o_s0, m2_i64 o_s1,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1,
    M2K_GLOBAL const float *w, m2_i64 w_o, m2_i64 w_s0,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    M2K_GLOBAL const float *init, m2_i64 i_o, m2_i64 i_s0, m2_i64 i_s1, m2_i32 has_init,
    M2K_GLOBAL const m2_i64 *cu, m2_i32 has_cu, m2_i64 nseq,
    m2_i64 B, m2_i64 L, m2_i64 C, m2_i32 W, m2_i32 silu) {
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (gid >= B * L * C) return;
    out += o_o; x += x_o; w += w_o; bias += b_o; init += i_o;
    const m2_i64 c = gid % C, tok = gid / C, b = tok / L, t = tok % L;
    CV_SEQ(t)
    float acc = has_bias ? bias[c] : 0.0f;
    for (int k = 0; k < W; k++) acc += w[c * w_s0 + k] * CV_U(t - W + 1 + k);
    out[b * o_s0 + t * o_s1 + c] = silu ? m2k_silu(acc) : acc;
}

/* final[S,C,W-1]: final[s,c,i] = u_{len-W+1+i} (W >= 2). */
M2K_KERNEL void m2_conv1d_final_wi64(
    M2K_GLOBAL float *fin, m2_i64 f_o, m2_i64 f_s0, m2_i64 f_s1,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1,
    M2K_GLOBAL const float *init, m2_i64 i_o, m2_i64 i_s0, m2_i64 i_s1, m2_i32 has_init,
    M2K_GLOBAL const m2_i64 *cu, m2_i32 has_cu, m2_i64 nseq, m2_i64 L, m2_i64 C, m2_i32 W) {
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (W < 2 || gid >= nseq * C * (W - 1)) return;
    fin += f_o; x += x_o; init += i_o;
    const m2_i64 i = gid % (W - 1), c = (gid / (W - 1)) % C, s = gid / ((W - 1) * C);
    m2_i64 b = s, t0 = 0, t1 = L;
    if (has_cu) {
        b = 0;
        t0 = cu[s];
        t1 = cu[s + 1];
    }
    fin[s * f_s0 + c * f_s1 + i] = CV_U(t1 - W + 1 + i);
}

/*
 * Backward over one block [tb, te) of row b for channel c, one sequence segment at a time.
 * The segment's positions r are streamed in order (from W-1 before its start to W-2 past its
 * end) through two right-aligned windows of constant size, so every index is a constant
 * (registers, whatever W <= 8 is):
 *   V[7-i] = u_{r-i},  Gr[7-i] = g_{r-i},  g_r = dout_r act'(pre_r) (0 outside the segment's
 *   part of the sequence), pre_r = bias + Σ_k w_k u_{r-W+1+k} = bias + Σ_m wa[m] V[m]
 * with the weights placed once: wa[m] = w_{m-8+W}, wq[m] = w_{7-m} (m >= 8-W, else 0).
 *   dx_j (j = r-W+1) = Σ_k g_{j+W-1-k} w_k = Σ_m Gr[m] wq[m]  (+ dfinal_{j-t1+W-1} at the end)
 *   dweight[k] += g_r u_{r-W+1+k} = g_r V[8-W+k],  dbias += g_r   (r in the segment)
 * part[blk, c, 0..W] (has_part): the block's dweight (k < W) and dbias (k = W) sums.
 */
M2K_KERNEL void m2_conv1d_bwd_t64_wi64(
    M2K_GLOBAL float *dx, m2_i64 dx_o, m2_i64 dx_s0, m2_i64 dx_s1, m2_i32 has_dx,
    M2K_GLOBAL float *part, m2_i64 p_o, m2_i32 has_part,
    M2K_GLOBAL const float *dout, m2_i64 d_o, m2_i64 d_s0, m2_i64 d_s1,
    M2K_GLOBAL const float *dfin, m2_i64 df_o, m2_i64 df_s0, m2_i64 df_s1, m2_i32 has_dfin,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1,
    M2K_GLOBAL const float *w, m2_i64 w_o, m2_i64 w_s0,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    M2K_GLOBAL const float *init, m2_i64 i_o, m2_i64 i_s0, m2_i64 i_s1, m2_i32 has_init,
    M2K_GLOBAL const m2_i64 *cu, m2_i32 has_cu, m2_i64 nseq,
    m2_i64 B, m2_i64 L, m2_i64 C, m2_i32 W, m2_i32 silu) {
    const m2_i64 nbt = (L + CONV1D_TB - 1) / CONV1D_TB;
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (gid >= B * nbt * C) return;
    dx += dx_o; part += p_o; dout += d_o; dfin += df_o; x += x_o; w += w_o; bias += b_o;
    init += i_o;
    const m2_i64 c = gid % C, blk = gid / C, b = blk / nbt;
    const m2_i64 tb = (blk % nbt) * CONV1D_TB;
    const m2_i64 te = tb + CONV1D_TB < L ? tb + CONV1D_TB : L;
    float wa[CONV1D_MAXW], wq[CONV1D_MAXW], dV[CONV1D_MAXW];
    for (int m = 0; m < CONV1D_MAXW; m++) {
        const int on = m >= CONV1D_MAXW - W;
        wa[m] = on ? w[c * w_s0 + (m - CONV1D_MAXW + W)] : 0.0f;
        wq[m] = on ? w[c * w_s0 + (CONV1D_MAXW - 1 - m)] : 0.0f;
        dV[m] = 0.0f;
    }
    const float bv = has_bias ? bias[c] : 0.0f;
    float dbacc = 0.0f;
    CV_SEQ(tb)
    for (m2_i64 j0 = tb; j0 < te;) {
        if (j0 >= t1) { /* the next packed sequence (empty ones skipped) */
            while (cu[s + 1] <= j0) s++;
            t0 = cu[s];
            t1 = cu[s + 1];
        }
        const m2_i64 j1 = te < t1 ? te : t1; /* the segment [j0, j1) */
        float V[CONV1D_MAXW], Gr[CONV1D_MAXW];
        for (int m = 0; m < CONV1D_MAXW; m++) V[m] = Gr[m] = 0.0f;
        for (m2_i64 r = j0 - W + 1; r <= j1 + W - 2; r++) {
            const float u = CV_U(r);
            for (int m = 0; m < CONV1D_MAXW - 1; m++) V[m] = V[m + 1];
            V[CONV1D_MAXW - 1] = u;
            float g = 0.0f;
            if (r >= j0 && r < t1) {
                float pre = bv;
                for (int m = 0; m < CONV1D_MAXW; m++) /* only the window: 0 * inf is NaN */
                    if (m >= CONV1D_MAXW - W) pre += wa[m] * V[m];
                const float d = dout[b * d_s0 + r * d_s1 + c];
                g = silu ? d * cv_silu_grad(pre) : d;
            }
            for (int m = 0; m < CONV1D_MAXW - 1; m++) Gr[m] = Gr[m + 1];
            Gr[CONV1D_MAXW - 1] = g;
            if (r >= j0 && r < j1) {
                dbacc += g;
                for (int m = 0; m < CONV1D_MAXW; m++) dV[m] += g * V[m];
            }
            const m2_i64 j = r - W + 1;
            if (has_dx && j >= j0 && j < j1) {
                float du = 0.0f;
                for (int m = 0; m < CONV1D_MAXW; m++)
                    if (m >= CONV1D_MAXW - W) du += Gr[m] * wq[m];
                const m2_i64 i_f = j - t1 + W - 1; /* dfinal entry of position j, if any */
                if (has_dfin && i_f >= 0) du += dfin[s * df_s0 + c * df_s1 + i_f];
                dx[b * dx_s0 + j * dx_s1 + c] = du;
            }
        }
        j0 = j1;
    }
    if (has_part) {
        M2K_GLOBAL float *pp = part + (blk * C + c) * (W + 1);
        for (int m = 0; m < CONV1D_MAXW; m++)
            if (m >= CONV1D_MAXW - W) pp[m - (CONV1D_MAXW - W)] = dV[m];
        pp[W] = dbacc;
    }
}

/* dinit[S,C,W-1]: du at the W-1 positions before sequence s, m = t0-W+1+i:
 *   du_m = Σ_k g_{m+W-1-k} w_k over positions in [t0, t1), + dfinal where m >= t1-W+1. */
M2K_KERNEL void m2_conv1d_bwd_dinit_wi64(
    M2K_GLOBAL float *dinit, m2_i64 di_o, m2_i64 di_s0, m2_i64 di_s1,
    M2K_GLOBAL const float *dout, m2_i64 d_o, m2_i64 d_s0, m2_i64 d_s1,
    M2K_GLOBAL const float *dfin, m2_i64 df_o, m2_i64 df_s0, m2_i64 df_s1, m2_i32 has_dfin,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1,
    M2K_GLOBAL const float *w, m2_i64 w_o, m2_i64 w_s0,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    M2K_GLOBAL const float *init, m2_i64 i_o, m2_i64 i_s0, m2_i64 i_s1,
    M2K_GLOBAL const m2_i64 *cu, m2_i32 has_cu, m2_i64 nseq,
    m2_i64 L, m2_i64 C, m2_i32 W, m2_i32 silu) {
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (W < 2 || gid >= nseq * C) return;
    dinit += di_o; dout += d_o; dfin += df_o; x += x_o; w += w_o; bias += b_o; init += i_o;
    const int has_init = 1;
    const m2_i64 c = gid % C, s = gid / C;
    m2_i64 b = s, t0 = 0, t1 = L;
    if (has_cu) {
        b = 0;
        t0 = cu[s];
        t1 = cu[s + 1];
    }
    const float bv = has_bias ? bias[c] : 0.0f;
    for (int i = 0; i < W - 1; i++) {
        const m2_i64 m = t0 - W + 1 + i;
        float du = 0.0f;
        for (int k = 0; k < W; k++) {
            const m2_i64 r = m + W - 1 - k;
            if (r < t0 || r >= t1) continue;
            float pre = bv;
            for (int q = 0; q < W; q++) pre += w[c * w_s0 + q] * CV_U(r - W + 1 + q);
            const float d = dout[b * d_s0 + r * d_s1 + c];
            du += (silu ? d * cv_silu_grad(pre) : d) * w[c * w_s0 + k];
        }
        const m2_i64 i_f = m - t1 + W - 1;
        if (has_dfin && i_f >= 0) du += dfin[s * df_s0 + c * df_s1 + i_f];
        dinit[s * di_s0 + c * di_s1 + i] = du;
    }
}

/* dweight[C,W] (has_dw), dbias[C] (has_db) = Σ over the nblk blocks of part, in block
 * order. */
M2K_KERNEL void m2_conv1d_bwd_reduce_wi64(
    M2K_GLOBAL float *dw, m2_i64 dw_o, m2_i64 dw_s0, m2_i32 has_dw,
    M2K_GLOBAL float *db, m2_i64 db_o, m2_i32 has_db,
    M2K_GLOBAL const float *part, m2_i64 p_o, m2_i64 nblk, m2_i64 C, m2_i32 W) {
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (gid >= C * (W + 1)) return;
    dw += dw_o; db += db_o; part += p_o;
    const m2_i64 c = gid / (W + 1);
    const int k = (int)(gid % (W + 1));
    float acc = 0.0f;
    for (m2_i64 blk = 0; blk < nblk; blk++) acc += part[blk * C * (W + 1) + gid];
    if (k < W) {
        if (has_dw) dw[c * dw_s0 + k] = acc;
    } else if (has_db) {
        db[c] = acc;
    }
}
