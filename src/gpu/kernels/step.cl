/*
 * step.cl — the decode steps (SPEC §6): conv1d_step and ssd_step against caches updated in
 * place, T >= 1 tokens per row, slot indices (negative: padding row, nothing read or
 * written). Common subset of OpenCL C 1.2 and CUDA C (the macro header is included before
 * this file); float32 storage and arithmetic; the math of src/ref/conv1d_ref.c
 * (m2_ref_conv1d_step) and src/ref/ssd_step_ref.c.
 *
 * Launches (1-D):
 *   conv1d_step_f32  one item per (row, channel): the W-1 cached inputs in registers, the
 *                    row's T tokens in order, the cache written back at the end
 *   ssd_step_f32     one work-group of SSD_STEP_LN x SSD_STEP_PB items per (row, head,
 *                    block of SSD_STEP_PB head channels p); item (ln, pl) owns the state
 *                    elements (p, n) with n ≡ ln (mod SSD_STEP_LN) and updates them in the
 *                    cache token after token; y_p = Σ_n S[p,n] C[n] is each item's
 *                    channel-order partial, then a tree over the SSD_STEP_LN lanes in local
 *                    memory (fixed order: reproducible)
 * Index tensors (state_indices) arrive as int32 or int64 (is64), as the caller gave them.
 */

#define CONV1D_STEP_MAXW 8
#define SSD_STEP_LN 32
#define SSD_STEP_PB 4

M2G_FN m2g_i64 st_index(M2G_GLOBAL const int *p, int is64, m2g_i64 i) {
    return is64 ? ((M2G_GLOBAL const m2g_i64 *)p)[i] : (m2g_i64)p[i];
}
M2G_FN float st_silu(float v) { return v / (1.0f + M2G_EXP(-v)); }

/* out[B,T,C], x[B,T,C] (strides s0, s1); cache[S,C,W-1]; weight[C,W]; bias[C] or NULL;
 * idx[B] or NULL (row b -> slot b). */
M2G_KERNEL conv1d_step_f32(M2G_GLOBAL float *out, m2g_i64 os0, m2g_i64 os1,
                           M2G_GLOBAL float *cache, m2g_i64 cs0, m2g_i64 cs1,
                           M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                           M2G_GLOBAL const float *w, m2g_i64 ws0,
                           M2G_GLOBAL const float *bias, M2G_GLOBAL const int *idx, int idx64,
                           m2g_i64 B, m2g_i64 T, m2g_i64 C, int W, int silu) {
    const m2g_i64 gid = M2G_GID();
    if (gid >= B * C) return;
    const m2g_i64 c = gid % C, b = gid / C;
    const m2g_i64 q = idx ? st_index(idx, idx64, b) : b;
    if (q < 0) return;
    float wv[CONV1D_STEP_MAXW], R[CONV1D_STEP_MAXW];
    for (int k = 0; k < CONV1D_STEP_MAXW; k++) {
        wv[k] = k < W ? w[c * ws0 + k] : 0.0f;
        R[k] = k < W - 1 ? cache[q * cs0 + c * cs1 + k] : 0.0f;
    }
    const float bv = bias ? bias[c] : 0.0f;
    for (m2g_i64 t = 0; t < T; t++) {
        const float xv = x[b * xs0 + t * xs1 + c];
        /* the window is R[0 .. W-2] then x_t */
        float acc = bv;
        for (int k = 0; k < CONV1D_STEP_MAXW - 1; k++)
            if (k < W - 1) acc += wv[k] * R[k];
        for (int k = 0; k < CONV1D_STEP_MAXW; k++)
            if (k == W - 1) acc += wv[k] * xv;
        out[b * os0 + t * os1 + c] = silu ? st_silu(acc) : acc;
        for (int k = 0; k < CONV1D_STEP_MAXW - 1; k++)
            if (k < W - 2) R[k] = R[k + 1];
        for (int k = 0; k < CONV1D_STEP_MAXW - 1; k++)
            if (k == W - 2) R[k] = xv;
    }
    for (int k = 0; k < CONV1D_STEP_MAXW - 1; k++)
        if (k < W - 1) cache[q * cs0 + c * cs1 + k] = R[k];
}

/*
 * Per row b (slot q), head h (group g = h / (H/G)), for t = 0 .. T-1:
 *   d = clamp(softplus(dt + dt_bias), lo, hi)   (softplus only if asked; v > 20 -> v)
 *   S = exp(d A[h]) S + d x ⊗ Bm;   y = S · Cm + D x;   out = y silu(z) (y without z)
 *   all_states[b,t,h] = S (when given)
 * Strides: x, z, out [B,T,H,P] (s0, s1, s2); dt [B,T,H] (s0, s1); Bm, Cm [B,T,G,N]
 * (s0, s1, s2); cache [S,H,P,N] (s0, s1, s2); all_states [B,T,H,P,N] (s0..s3); D [H,P]
 * row stride Ds (Dpc = 1) or D[H] (Dpc = 0).
 */
M2G_KERNEL ssd_step_f32(M2G_GLOBAL float *cache, m2g_i64 cs0, m2g_i64 cs1, m2g_i64 cs2,
                        M2G_GLOBAL float *out, m2g_i64 os0, m2g_i64 os1, m2g_i64 os2,
                        M2G_GLOBAL float *as, m2g_i64 as0, m2g_i64 as1, m2g_i64 as2,
                        m2g_i64 as3, M2G_GLOBAL const float *x, m2g_i64 xs0, m2g_i64 xs1,
                        m2g_i64 xs2, M2G_GLOBAL const float *dt, m2g_i64 dts0, m2g_i64 dts1,
                        M2G_GLOBAL const float *A, M2G_GLOBAL const float *Bm, m2g_i64 bs0,
                        m2g_i64 bs1, m2g_i64 bs2, M2G_GLOBAL const float *Cm, m2g_i64 ccs0,
                        m2g_i64 ccs1, m2g_i64 ccs2, M2G_GLOBAL const float *Dp, m2g_i64 Ds,
                        int Dpc, M2G_GLOBAL const float *z, m2g_i64 zs0, m2g_i64 zs1,
                        m2g_i64 zs2, M2G_GLOBAL const float *dt_bias,
                        M2G_GLOBAL const int *idx, int idx64, m2g_i64 B, m2g_i64 T, m2g_i64 H,
                        m2g_i64 P, m2g_i64 N, m2g_i64 G, int softplus, float lo, float hi) {
    M2G_LOCAL float red[SSD_STEP_LN * SSD_STEP_PB];
    const m2g_i64 npb = (P + SSD_STEP_PB - 1) / SSD_STEP_PB, grp = M2G_GRP();
    if (grp >= B * H * npb) return; /* uniform over the work-group */
    const m2g_i64 h = (grp / npb) % H, b = grp / (npb * H);
    const m2g_i64 q = idx ? st_index(idx, idx64, b) : b;
    if (q < 0) return; /* padding row: uniform too */
    const int lid = M2G_LID(), ln = lid % SSD_STEP_LN, pl = lid / SSD_STEP_LN;
    const m2g_i64 p = (grp % npb) * SSD_STEP_PB + pl, g = h / (H / G);
    const int valid = p < P;
    const float a_h = A[h], bias = dt_bias ? dt_bias[h] : 0.0f;
    const float Dv = (!Dp || !valid) ? 0.0f : Dpc ? Dp[h * Ds + p] : Dp[h];
    M2G_GLOBAL float *st = cache + q * cs0 + h * cs1 + (valid ? p : 0) * cs2;
    for (m2g_i64 t = 0; t < T; t++) {
        float d = dt[b * dts0 + t * dts1 + h] + bias;
        if (softplus && d <= 20.0f) d = M2G_LOG1P(M2G_EXP(d));
        if (d < lo) d = lo;
        if (d > hi) d = hi;
        const float a = M2G_EXP(d * a_h);
        float part = 0.0f, xp = 0.0f;
        if (valid) {
            xp = x[b * xs0 + t * xs1 + h * xs2 + p];
            const float dx = d * xp;
            M2G_GLOBAL const float *Bt = Bm + b * bs0 + t * bs1 + g * bs2;
            M2G_GLOBAL const float *Ct = Cm + b * ccs0 + t * ccs1 + g * ccs2;
            for (m2g_i64 n = ln; n < N; n += SSD_STEP_LN) {
                const float s = a * st[n] + dx * Bt[n];
                st[n] = s;
                if (as) as[b * as0 + t * as1 + h * as2 + p * as3 + n] = s;
                part += s * Ct[n];
            }
        }
        red[lid] = part;
        for (int off = SSD_STEP_LN / 2; off > 0; off /= 2) {
            M2G_BARRIER();
            if (ln < off) red[lid] += red[lid + off];
        }
        M2G_BARRIER();
        if (ln == 0 && valid) {
            float y = red[lid] + Dv * xp;
            if (z) y *= st_silu(z[b * zs0 + t * zs1 + h * zs2 + p]);
            out[b * os0 + t * os1 + h * os2 + p] = y;
        }
        M2G_BARRIER(); /* red is rewritten by the next token */
    }
}
