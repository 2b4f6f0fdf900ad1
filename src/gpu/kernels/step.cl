/*
 * step.cl — the decode steps (SPEC §6): conv1d_step and ssd_step against caches updated in
 * place, T >= 1 tokens per row, slot indices (negative: a padding row, nothing read or
 * written). Common subset of OpenCL C 1.2 and CUDA C (common.h is included before this
 * file); float32 storage and arithmetic; the math of src/ref/conv1d_ref.c
 * (m2_ref_conv1d_step) and src/ref/ssd_step_ref.c.
 *
 * Kernels:
 *   m2_conv1d_step_wi64  one item per (row, channel), 64 per group: the W-1 cached inputs in
 *                        registers, the row's T tokens in order (2W flops each, + SiLU),
 *                        the cache written back at the end
 *   m2_ssd_step_32x4     one group of 32 x 4 items per (row, head, block of 4 head channels
 *                        p); item (ln, pl) owns the state elements (p, n), n ≡ ln (mod 32),
 *                        and updates them in the cache token after token (4 flops per state
 *                        element and token: decay, outer product, y); y_p = Σ_n S[p,n] C[n]
 *                        is each item's channel-order partial, then a tree over the 32 lanes
 *                        in local memory (fixed order: reproducible)
 * Tensors arrive as (pointer, element offset, outer strides); optional ones with a flag.
 * state_indices arrives as an int64 table (has_idx; else row b uses slot b).
 */

#define CONV1D_STEP_MAXW 8

/* out[B,T,C], x[B,T,C]; cache[S,C,W-1]; weight[C,W]; bias[C] */
M2K_KERNEL void m2_conv1d_step_wi64(
    M2K_GLOBAL float *out, m2_i64 o_o, m2_i64 o_s0, m2_i64 o_s1,
    M2K_GLOBAL float *cache, m2_i64 c_o, m2_i64 c_s0, m2_i64 c_s1,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1,
    M2K_GLOBAL const float *w, m2_i64 w_o, m2_i64 w_s0,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    M2K_GLOBAL const m2_i64 *idx, m2_i32 has_idx,
    m2_i64 B, m2_i64 T, m2_i64 C, m2_i32 W, m2_i32 silu) {
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (gid >= B * C) return;
    out += o_o; cache += c_o; x += x_o; w += w_o; bias += b_o;
    const m2_i64 c = gid % C, b = gid / C;
    const m2_i64 q = has_idx ? idx[b] : b;
    if (q < 0) return;
    M2K_GLOBAL float *cq = cache + q * c_s0 + c * c_s1;
    /* right-aligned window of constant size (registers whatever W is): V[7-i] = u_{t-i};
     * the cache holds the W-1 inputs before token 0, so it starts at V[9-W .. 7], and the
     * weights sit where their inputs will be: wa[m] = w_{m-8+W} (m >= 8-W, else 0) */
    float wa[CONV1D_STEP_MAXW], V[CONV1D_STEP_MAXW];
    for (int m = 0; m < CONV1D_STEP_MAXW; m++) {
        wa[m] = m >= CONV1D_STEP_MAXW - W ? w[c * w_s0 + (m - CONV1D_STEP_MAXW + W)] : 0.0f;
        V[m] = m >= CONV1D_STEP_MAXW + 1 - W ? cq[m - (CONV1D_STEP_MAXW + 1 - W)] : 0.0f;
    }
    const float bv = has_bias ? bias[c] : 0.0f;
    for (m2_i64 t = 0; t < T; t++) {
        for (int m = 0; m < CONV1D_STEP_MAXW - 1; m++) V[m] = V[m + 1];
        V[CONV1D_STEP_MAXW - 1] = x[b * x_s0 + t * x_s1 + c];
        float acc = bv;
        for (int m = 0; m < CONV1D_STEP_MAXW; m++) /* only the window: 0 * inf is NaN */
            if (m >= CONV1D_STEP_MAXW - W) acc += wa[m] * V[m];
        out[b * o_s0 + t * o_s1 + c] = silu ? m2k_silu(acc) : acc;
    }
    /* the last W-1 inputs, oldest first */
    for (int m = 0; m < CONV1D_STEP_MAXW; m++)
        if (m >= CONV1D_STEP_MAXW + 1 - W) cq[m - (CONV1D_STEP_MAXW + 1 - W)] = V[m];
}

/*
 * Per row b (slot q), head h (group g = h / (H/G)), for t = 0 .. T-1:
 *   d = clamp(softplus(dt + dt_bias), lo, hi)   (softplus only if asked)
 *   S = exp(d A[h]) S + d x ⊗ Bm;   y = S · Cm + D x;   out = y silu(z) (y without z)
 *   all_states[b,t,h] = S (has_as)
 * Shapes: x, z, out [B,T,H,P]; dt [B,T,H]; Bm, Cm [B,T,G,N]; cache [S,H,P,N];
 * all_states [B,T,H,P,N]; D [H,P] (D_mode 2) or [H] (D_mode 1) or absent (0).
 * Groups: B * H * ceil(P/4) in dimension 0, local size {32, 4, 1}.
 */
M2K_KERNEL void m2_ssd_step_32x4(
    M2K_GLOBAL float *cache, m2_i64 c_o, m2_i64 c_s0, m2_i64 c_s1, m2_i64 c_s2,
    M2K_GLOBAL float *out, m2_i64 o_o, m2_i64 o_s0, m2_i64 o_s1, m2_i64 o_s2,
    M2K_GLOBAL float *as, m2_i64 as_o, m2_i64 as_s0, m2_i64 as_s1, m2_i64 as_s2,
    m2_i64 as_s3, m2_i32 has_as,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2,
    M2K_GLOBAL const float *dt, m2_i64 dt_o, m2_i64 dt_s0, m2_i64 dt_s1,
    M2K_GLOBAL const float *A, m2_i64 A_o,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2,
    M2K_GLOBAL const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2,
    M2K_GLOBAL const float *Dp, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2,
    m2_i32 has_z,
    M2K_GLOBAL const float *dtb, m2_i64 dtb_o, m2_i32 has_dtb,
    M2K_GLOBAL const m2_i64 *idx, m2_i32 has_idx,
    m2_i64 B, m2_i64 T, m2_i64 H, m2_i64 P, m2_i64 N, m2_i64 G,
    m2_i32 softplus, float lo, float hi) {
    M2K_LOCAL_ARRAY(float, red, [128]);
    const m2_i64 npb = (P + 3) / 4, grp = M2K_GROUP_ID(0);
    if (grp >= B * H * npb) return; /* uniform over the work-group */
    const m2_i64 h = (grp / npb) % H, b = grp / (npb * H);
    const m2_i64 q = has_idx ? idx[b] : b;
    if (q < 0) return; /* a padding row: uniform too */
    cache += c_o; out += o_o; as += as_o; x += x_o; dt += dt_o; A += A_o; Bm += B_o;
    Cm += C_o; Dp += D_o; z += z_o; dtb += dtb_o;
    const int ln = M2K_LOCAL_ID(0), pl = M2K_LOCAL_ID(1), lid = pl * 32 + ln;
    const m2_i64 p = (grp % npb) * 4 + pl, g = h / (H / G);
    const int valid = p < P;
    const float a_h = A[h], bias = has_dtb ? dtb[h] : 0.0f;
    const float Dv = (!valid || D_mode == 0) ? 0.0f : D_mode == 2 ? Dp[h * D_s0 + p] : Dp[h];
    M2K_GLOBAL float *st = cache + q * c_s0 + h * c_s1 + (valid ? p : 0) * c_s2;
    for (m2_i64 t = 0; t < T; t++) {
        float d = dt[b * dt_s0 + t * dt_s1 + h] + bias;
        if (softplus) d = m2k_softplus(d);
        if (d < lo) d = lo;
        if (d > hi) d = hi;
        const float a = m2k_exp(d * a_h);
        float part = 0.0f, xp = 0.0f;
        if (valid) {
            xp = x[b * x_s0 + t * x_s1 + h * x_s2 + p];
            const float dxp = d * xp;
            M2K_GLOBAL const float *Bt = Bm + b * B_s0 + t * B_s1 + g * B_s2;
            M2K_GLOBAL const float *Ct = Cm + b * C_s0 + t * C_s1 + g * C_s2;
            for (m2_i64 n = ln; n < N; n += 32) {
                const float s = a * st[n] + dxp * Bt[n];
                st[n] = s;
                if (has_as) as[b * as_s0 + t * as_s1 + h * as_s2 + p * as_s3 + n] = s;
                part += s * Ct[n];
            }
        }
        red[lid] = part;
        for (int off = 16; off > 0; off /= 2) {
            M2K_BARRIER();
            if (ln < off) red[lid] += red[lid + off];
        }
        M2K_BARRIER();
        if (ln == 0 && valid) {
            float y = red[lid] + Dv * xp;
            if (has_z) y *= m2k_silu(z[b * z_s0 + t * z_s1 + h * z_s2 + p]);
            out[b * o_s0 + t * o_s1 + h * o_s2 + p] = y;
        }
        M2K_BARRIER(); /* red is rewritten by the next token */
    }
}
