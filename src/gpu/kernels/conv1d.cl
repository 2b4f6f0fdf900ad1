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
 * Launches (all 1-D; every work-item checks its own bounds, so any local size works):
 *   conv1d_fwd_f32          one item per (token, channel)              flops 2W (+4 SiLU)
 *   conv1d_final_f32        one item per (sequence, channel, i < W-1)  copies
 *   conv1d_bwd_f32          one item per (channel, block of CONV1D_TB tokens of a row):
 *                           dx and the block's partial sums of dweight/dbias, walking its
 *                           tokens with the inputs and g = dout·act'(pre) in registers
 *   conv1d_bwd_dinit_f32    one item per (sequence, channel): dinitial_conv_state
 *   conv1d_bwd_reduce_f32   one item per (channel, k <= W): the partial sums over blocks in
 *                           block order (fixed by the problem, so bitwise reproducible)
 * Index tensors (cu_seqlens) arrive as int32 or int64 (is64), as the caller gave them.
 */

#define CONV1D_TB 64   /* tokens per backward block (partial-sum granularity) */
#define CONV1D_MAXW 8

/* Element i of an int32 (is64 == 0) or int64 index array. */
M2G_FN m2g_i64 cv_index(M2G_GLOBAL const int *p, int is64, m2g_i64 i) {
    return is64 ? ((M2G_GLOBAL const m2g_i64 *)p)[i] : (m2g_i64)p[i];
}

/* The sequence holding token t of a packed row: the largest s with cu[s] <= t. */
M2G_FN m2g_i64 cv_seq_of(M2G_GLOBAL const int *cu, int is64, m2g_i64 nseq, m2g_i64 t) {
    m2g_i64 lo = 0, hi = nseq;
    while (lo < hi) {
        const m2g_i64 mid = lo + (hi - lo + 1) / 2;
        if (cv_index(cu, is64, mid) <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

M2G_FN float cv_silu(float v) { return v / (1.0f + M2G_EXP(-v)); }
/* silu'(v) = sigmoid(v) (1 + v (1 - sigmoid(v))) */
M2G_FN float cv_silu_grad(float v) {
    const float sg = 1.0f / (1.0f + M2G_EXP(-v));
    return sg * (1.0f + v * (1.0f - sg));
}

/* u at absolute position m of row b (sequence s = [t0, t1)), channel c; 0 past t1. */
M2G_FN float cv_u(M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                  M2G_GLOBAL const float *init, m2g_i64 is0, m2g_i64 is1, int W, m2g_i64 s,
                  m2g_i64 b, m2g_i64 t0, m2g_i64 t1, m2g_i64 c, m2g_i64 m) {
    if (m >= t1) return 0.0f;
    if (m >= t0) return x[b * xs0 + m * xs1 + c];
    if (!init) return 0.0f;
    return init[s * is0 + c * is1 + (W - 1 + (m - t0))];
}

/* out[B,L,C]; x[B,L,C]; weight[C,W]; bias[C] or NULL; init[S,C,W-1] or NULL;
 * cu[nseq+1] or NULL (then B rows, sequence = row). */
M2G_KERNEL conv1d_fwd_f32(M2G_GLOBAL float *out, m2g_i64 os0, m2g_i64 os1,
                          M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                          M2G_GLOBAL const float *w, m2g_i64 ws0, M2G_GLOBAL const float *bias,
                          M2G_GLOBAL const float *init, m2g_i64 is0, m2g_i64 is1,
                          M2G_GLOBAL const int *cu, int cu64, m2g_i64 nseq, m2g_i64 B,
                          m2g_i64 L, m2g_i64 C, int W, int silu) {
    const m2g_i64 gid = M2G_GID();
    if (gid >= B * L * C) return;
    const m2g_i64 c = gid % C, tok = gid / C, b = tok / L, t = tok % L;
    m2g_i64 s = b, t0 = 0, t1 = L;
    if (cu) {
        s = cv_seq_of(cu, cu64, nseq, t);
        t0 = cv_index(cu, cu64, s);
        t1 = cv_index(cu, cu64, s + 1);
    }
    float acc = bias ? bias[c] : 0.0f;
    for (int k = 0; k < W; k++)
        acc += w[c * ws0 + k] *
               cv_u(x, xs0, xs1, init, is0, is1, W, s, b, t0, t1, c, t - W + 1 + k);
    out[b * os0 + t * os1 + c] = silu ? cv_silu(acc) : acc;
}

/* final[S,C,W-1]: final[s,c,i] = u_{len-W+1+i}. */
M2G_KERNEL conv1d_final_f32(M2G_GLOBAL float *fin, m2g_i64 fs0, m2g_i64 fs1,
                            M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                            M2G_GLOBAL const float *init, m2g_i64 is0, m2g_i64 is1,
                            M2G_GLOBAL const int *cu, int cu64, m2g_i64 nseq, m2g_i64 L,
                            m2g_i64 C, int W) {
    const m2g_i64 gid = M2G_GID();
    if (W < 2 || gid >= nseq * C * (W - 1)) return;
    const m2g_i64 i = gid % (W - 1), c = (gid / (W - 1)) % C, s = gid / ((W - 1) * C);
    m2g_i64 b = s, t0 = 0, t1 = L;
    if (cu) {
        b = 0;
        t0 = cv_index(cu, cu64, s);
        t1 = cv_index(cu, cu64, s + 1);
    }
    fin[s * fs0 + c * fs1 + i] =
        cv_u(x, xs0, xs1, init, is0, is1, W, s, b, t0, t1, c, t1 - W + 1 + i);
}

/* g at position r (t0 <= r < t1) from the inputs U[i0 .. i0+W-1] = u_{r-W+1 .. r}. */
#define CV_G_AT(dst, r, i0)                                                                \
    do {                                                                                   \
        float pre_ = bv;                                                                   \
        for (int k_ = 0; k_ < CONV1D_MAXW; k_++)                                           \
            if (k_ < W) pre_ += wv[k_] * U[(i0) + k_];                                     \
        const float d_ = dout[b * ds0 + (r) * ds1 + c];                                    \
        (dst) = silu ? d_ * cv_silu_grad(pre_) : d_;                                       \
    } while (0)

/*
 * Backward over one block [tb, te) of row b for channel c. With the window
 *   U[i] = u_{j-W+1+i}  (i <= 2W-2)   and   G[i] = g_{j+i}  (i < W, 0 at or past t1)
 * at position j:   dx_j = Σ_{k<W} g_{j+W-1-k} w_k (+ dfinal_{j-t1+W-1} near the end)
 *                  dweight[k] += g_j u_{j-W+1+k},  dbias += g_j
 * part[blk, c, 0..W]: the block's dweight (k < W) and dbias (k = W) sums.
 */
M2G_KERNEL conv1d_bwd_f32(M2G_GLOBAL float *dx, m2g_i64 dxs0, m2g_i64 dxs1,
                          M2G_GLOBAL float *part, M2G_GLOBAL const float *dout, m2g_i64 ds0,
                          m2g_i64 ds1, M2G_GLOBAL const float *dfin, m2g_i64 dfs0,
                          m2g_i64 dfs1, M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                          M2G_GLOBAL const float *w, m2g_i64 ws0, M2G_GLOBAL const float *bias,
                          M2G_GLOBAL const float *init, m2g_i64 is0, m2g_i64 is1,
                          M2G_GLOBAL const int *cu, int cu64, m2g_i64 nseq, m2g_i64 B,
                          m2g_i64 L, m2g_i64 C, int W, int silu) {
    const m2g_i64 nbt = (L + CONV1D_TB - 1) / CONV1D_TB;
    const m2g_i64 gid = M2G_GID();
    if (gid >= B * nbt * C) return;
    const m2g_i64 c = gid % C, blk = gid / C, b = blk / nbt;
    const m2g_i64 tb = (blk % nbt) * CONV1D_TB;
    const m2g_i64 te = tb + CONV1D_TB < L ? tb + CONV1D_TB : L;
    float wv[CONV1D_MAXW], U[2 * CONV1D_MAXW - 1], G[CONV1D_MAXW];
    for (int k = 0; k < CONV1D_MAXW; k++) wv[k] = k < W ? w[c * ws0 + k] : 0.0f;
    const float bv = bias ? bias[c] : 0.0f;
    float dwacc[CONV1D_MAXW], dbacc = 0.0f;
    for (int k = 0; k < CONV1D_MAXW; k++) dwacc[k] = 0.0f;

    m2g_i64 s = b, t0 = 0, t1 = L;
    if (cu) {
        s = cv_seq_of(cu, cu64, nseq, tb);
        t0 = cv_index(cu, cu64, s);
        t1 = cv_index(cu, cu64, s + 1);
    }
    int fresh = 1;
    for (m2g_i64 j = tb; j < te; j++) {
        if (j >= t1) { /* next packed sequence (empty ones skipped) */
            while (cv_index(cu, cu64, s + 1) <= j) s++;
            t0 = cv_index(cu, cu64, s);
            t1 = cv_index(cu, cu64, s + 1);
            fresh = 1;
        }
        if (fresh) { /* fill the windows at j */
            for (int i = 0; i < 2 * CONV1D_MAXW - 1; i++)
                U[i] = i < 2 * W - 1
                           ? cv_u(x, xs0, xs1, init, is0, is1, W, s, b, t0, t1, c, j - W + 1 + i)
                           : 0.0f;
            for (int i = 0; i < CONV1D_MAXW; i++) {
                G[i] = 0.0f;
                if (i < W && j + i < t1) CV_G_AT(G[i], j + i, i);
            }
            fresh = 0;
        }
        /* outputs at j */
        const float gj = G[0];
        dbacc += gj;
        for (int k = 0; k < CONV1D_MAXW; k++)
            if (k < W) dwacc[k] += gj * U[k];
        if (dx) {
            float du = 0.0f;
            for (int k = 0; k < CONV1D_MAXW; k++)
                if (k < W) du += G[W - 1 - k] * wv[k];
            const m2g_i64 i_f = j - t1 + W - 1; /* dfinal entry of position j, if any */
            if (dfin && i_f >= 0) du += dfin[s * dfs0 + c * dfs1 + i_f];
            dx[b * dxs0 + j * dxs1 + c] = du;
        }
        /* advance to j+1: U gains u_{j+W}, G gains g_{j+W} */
        if (j + 1 < te && j + 1 < t1) {
            const float un = cv_u(x, xs0, xs1, init, is0, is1, W, s, b, t0, t1, c, j + W);
            for (int i = 0; i < 2 * CONV1D_MAXW - 2; i++)
                if (i < 2 * W - 2) U[i] = U[i + 1];
            for (int i = 0; i < 2 * CONV1D_MAXW - 1; i++)
                if (i == 2 * W - 2) U[i] = un;
            for (int i = 0; i < CONV1D_MAXW - 1; i++) G[i] = G[i + 1];
            float gn = 0.0f;
            if (j + W < t1) CV_G_AT(gn, j + W, W - 1);
            for (int i = 0; i < CONV1D_MAXW; i++)
                if (i == W - 1) G[i] = gn;
        }
    }
    if (part) {
        M2G_GLOBAL float *pp = part + (blk * C + c) * (W + 1);
        for (int k = 0; k < CONV1D_MAXW; k++)
            if (k < W) pp[k] = dwacc[k];
        pp[W] = dbacc;
    }
}

/* dinit[S,C,W-1]: du at the W-1 positions before sequence s, m = t0-W+1+i:
 *   du_m = Σ_k g_{m+W-1-k} w_k over positions in [t0, t1), + dfinal where m >= t1-W+1. */
M2G_KERNEL conv1d_bwd_dinit_f32(M2G_GLOBAL float *dinit, m2g_i64 dis0, m2g_i64 dis1,
                                M2G_GLOBAL const float *dout, m2g_i64 ds0, m2g_i64 ds1,
                                M2G_GLOBAL const float *dfin, m2g_i64 dfs0, m2g_i64 dfs1,
                                M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                                M2G_GLOBAL const float *w, m2g_i64 ws0,
                                M2G_GLOBAL const float *bias, M2G_GLOBAL const float *init,
                                m2g_i64 is0, m2g_i64 is1, M2G_GLOBAL const int *cu, int cu64,
                                m2g_i64 nseq, m2g_i64 L, m2g_i64 C, int W, int silu) {
    const m2g_i64 gid = M2G_GID();
    if (W < 2 || gid >= nseq * C) return;
    const m2g_i64 c = gid % C, s = gid / C;
    m2g_i64 b = s, t0 = 0, t1 = L;
    if (cu) {
        b = 0;
        t0 = cv_index(cu, cu64, s);
        t1 = cv_index(cu, cu64, s + 1);
    }
    const float bv = bias ? bias[c] : 0.0f;
    for (int i = 0; i < W - 1; i++) {
        const m2g_i64 m = t0 - W + 1 + i;
        float du = 0.0f;
        for (int k = 0; k < W; k++) {
            const m2g_i64 r = m + W - 1 - k;
            if (r < t0 || r >= t1) continue;
            float pre = bv;
            for (int q = 0; q < W; q++)
                pre += w[c * ws0 + q] *
                       cv_u(x, xs0, xs1, init, is0, is1, W, s, b, t0, t1, c, r - W + 1 + q);
            const float d = dout[b * ds0 + r * ds1 + c];
            du += (silu ? d * cv_silu_grad(pre) : d) * w[c * ws0 + k];
        }
        const m2g_i64 i_f = m - t1 + W - 1;
        if (dfin && i_f >= 0) du += dfin[s * dfs0 + c * dfs1 + i_f];
        dinit[s * dis0 + c * dis1 + i] = du;
    }
}

/* dweight[C,W] (or NULL), dbias[C] (or NULL) = Σ over the nblk blocks, in block order. */
M2G_KERNEL conv1d_bwd_reduce_f32(M2G_GLOBAL float *dw, m2g_i64 dws0, M2G_GLOBAL float *db,
                                 M2G_GLOBAL const float *part, m2g_i64 nblk, m2g_i64 C, int W) {
    const m2g_i64 gid = M2G_GID();
    if (gid >= C * (W + 1)) return;
    const m2g_i64 c = gid / (W + 1);
    const int k = (int)(gid % (W + 1));
    float acc = 0.0f;
    for (m2g_i64 blk = 0; blk < nblk; blk++) acc += part[blk * C * (W + 1) + gid];
    if (k < W) {
        if (dw) dw[c * dws0 + k] = acc;
    } else if (db) {
        db[c] = acc;
    }
}
