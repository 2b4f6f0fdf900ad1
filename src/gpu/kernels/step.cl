/*
 * step.cl — the decode steps (SPEC §6): conv1d_step and ssd_step against caches updated in
 * place, T >= 1 tokens per row, slot indices (negative: a padding row, nothing read or
 * written). Common subset of OpenCL C 1.2 and CUDA C (common.h is included before this
 * file); float32 arithmetic and storage (ssd_step's state_cache and all_states also bf16 /
 * f16); the math of src/ref/conv1d_ref.c
 * (m2_ref_conv1d_step) and src/ref/ssd_step_ref.c.
 *
 * Kernels:
 *   m2_conv1d_step_wi64  one item per (row, channel), 64 per group: the W-1 history inputs
 *                        in registers (read through all three cache strides, shift or
 *                        ring-buffer positions), the row's T tokens in order (2W flops each,
 *                        + SiLU), the cache updated (shifted at the end, or each token
 *                        written at its ring position)
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

/* out[B,T,C], x[B,T,C]; cache[S,C,Lc] (any strides c_s0, c_s1, c_s2; Lc >= W-1); weight[C,W];
 * bias[C]; seql[B] (circular mode: cache_seqlens) */
M2K_KERNEL void m2_conv1d_step_wi64(
    M2K_GLOBAL float *out, m2_i64 o_o, m2_i64 o_s0, m2_i64 o_s1,
    M2K_GLOBAL float *cache, m2_i64 c_o, m2_i64 c_s0, m2_i64 c_s1, m2_i64 c_s2, m2_i64 Lc,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1,
    M2K_GLOBAL const float *w, m2_i64 w_o, m2_i64 w_s0,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    M2K_GLOBAL const m2_i64 *idx, m2_i32 has_idx,
    M2K_GLOBAL const m2_i64 *seql, m2_i32 circular,
    m2_i64 B, m2_i64 T, m2_i64 C, m2_i32 W, m2_i32 silu) {
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (gid >= B * C) return;
    out += o_o; cache += c_o; x += x_o; w += w_o; bias += b_o;
    const m2_i64 c = gid % C, b = gid / C;
    const m2_i64 q = has_idx ? idx[b] : b;
    if (q < 0) return;
    M2K_GLOBAL float *cq = cache + q * c_s0 + c * c_s1;
    /* the history h_i (i = 0 .. W-2, oldest first) sits at cache position hp + i (mod Lc in
     * circular mode): Lc-W+1+i when shifting, (seqlen - W+1 + i) mod Lc in a ring buffer */
    const m2_i64 p0 = circular && Lc > 0 ? seql[b] % Lc : 0;
    const m2_i64 hp = circular ? p0 - (W - 1) + Lc : Lc - (W - 1);
    /* right-aligned window of constant size (registers whatever W is): V[7-i] = u_{t-i};
     * the history starts at V[9-W .. 7], and the weights sit where their inputs will be:
     * wa[m] = w_{m-8+W} (m >= 8-W, else 0) */
    float wa[CONV1D_STEP_MAXW], V[CONV1D_STEP_MAXW];
    for (int m = 0; m < CONV1D_STEP_MAXW; m++) {
        wa[m] = m >= CONV1D_STEP_MAXW - W ? w[c * w_s0 + (m - CONV1D_STEP_MAXW + W)] : 0.0f;
        V[m] = 0.0f;
        if (m >= CONV1D_STEP_MAXW + 1 - W) {
            m2_i64 pos = hp + (m - (CONV1D_STEP_MAXW + 1 - W));
            if (circular) pos %= Lc;
            V[m] = cq[pos * c_s2];
        }
    }
    const float bv = has_bias ? bias[c] : 0.0f;
    for (m2_i64 t = 0; t < T; t++) {
        for (int m = 0; m < CONV1D_STEP_MAXW - 1; m++) V[m] = V[m + 1];
        const float xt = x[b * x_s0 + t * x_s1 + c];
        V[CONV1D_STEP_MAXW - 1] = xt;
        float acc = bv;
        for (int m = 0; m < CONV1D_STEP_MAXW; m++) /* only the window: 0 * inf is NaN */
            if (m >= CONV1D_STEP_MAXW - W) acc += wa[m] * V[m];
        out[b * o_s0 + t * o_s1 + c] = silu ? m2k_silu(acc) : acc;
        /* ring buffer: token t at (seqlen + t) mod Lc, in token order (the history is read) */
        if (circular && Lc > 0) cq[((p0 + t % Lc) % Lc) * c_s2] = xt;
    }
    if (circular) return;
    /* shift: entry i <- entry i+T of [old slot, new tokens], in increasing i (in place: each
     * read is ahead of every write) */
    for (m2_i64 i = 0; i < Lc; i++) {
        const m2_i64 j = T + i;
        cq[i * c_s2] = j < Lc ? cq[j * c_s2] : x[b * x_s0 + (j - Lc) * x_s1 + c];
    }
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
    m2_i32 softplus, float lo, float hi, m2_i32 st_kind) {
    M2K_LOCAL_ARRAY(float, red, [128]);
    const m2_i64 npb = (P + 3) / 4, grp = M2K_GROUP_ID(0);
    if (grp >= B * H * npb) return; /* uniform over the work-group */
    const m2_i64 h = (grp / npb) % H, b = grp / (npb * H);
    const m2_i64 q = has_idx ? idx[b] : b;
    if (q < 0) return; /* a padding row: uniform too */
    out += o_o; x += x_o; dt += dt_o; A += A_o; Bm += B_o;
    Cm += C_o; Dp += D_o; z += z_o; dtb += dtb_o;
    const int ln = M2K_LOCAL_ID(0), pl = M2K_LOCAL_ID(1), lid = pl * 32 + ln;
    const m2_i64 p = (grp % npb) * 4 + pl, g = h / (H / G);
    const int valid = p < P;
    const float a_h = A[h], bias = has_dtb ? dtb[h] : 0.0f;
    const float Dv = (!valid || D_mode == 0) ? 0.0f : D_mode == 2 ? Dp[h * D_s0 + p] : Dp[h];
    /* state_cache and all_states: float32 (st_kind 0) or bf16 (1) / f16 (2) storage, element
     * offsets in their own type; a half state is loaded, updated in float32 and stored rounded
     * once per token (y uses the unrounded value) */
    M2K_GLOBAL m2_u16 *c16 = (M2K_GLOBAL m2_u16 *)cache, *as16 = (M2K_GLOBAL m2_u16 *)as;
    const m2_i64 se = c_o + q * c_s0 + h * c_s1 + (valid ? p : 0) * c_s2;
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
            const m2_i64 ae = as_o + b * as_s0 + t * as_s1 + h * as_s2 + p * as_s3;
            for (m2_i64 n = ln; n < N; n += 32) {
                const float old = st_kind == 0   ? cache[se + n]
                                  : st_kind == 1 ? m2k_bf16_to_f32(c16[se + n])
                                                 : m2k_f16_to_f32(c16[se + n]);
                const float s = a * old + dxp * Bt[n];
                if (st_kind == 0) {
                    cache[se + n] = s;
                    if (has_as) as[ae + n] = s;
                } else {
                    const m2_u16 hs = st_kind == 1 ? m2k_f32_to_bf16(s) : m2k_f32_to_f16(s);
                    c16[se + n] = hs;
                    if (has_as) as16[ae + n] = hs;
                }
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
