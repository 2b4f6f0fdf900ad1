/*
 * rmsnorm.cl — gated RMSNorm forward and backward (SPEC §5) for every GPU API, in the common
 * subset of OpenCL C 1.2 and CUDA C (common.h is included before this file). float32
 * storage and arithmetic; the math of src/ref/rmsnorm_ref.c. Per row m, group g (channels
 * c in [g*S, (g+1)*S)):
 *   v_c = x_c * silu(z_c) (z given, gate first), else x_c;   r = 1/sqrt(Σ v_c²/S + eps)
 *   y_c = v_c r w_c (+ b_c);   out_c = y_c * silu(z_c) (z given, gate after), else y_c
 * gate: 0 none, 1 gate first (norm_before_gate == 0), 2 gate after.
 *
 * Kernels (flops per element in parentheses):
 *   m2_rmsnorm_fwd_wg128        one group of 128 work-items per (row, group): Σ v² per item
 *                               in channel order, a tree in local memory (fixed order, no
 *                               subgroups), then the outputs (~6, + 2 SiLU with z)
 *   m2_rmsnorm_bwd_wg128        same groups: dx, dz, and r into rbuf[M*G] (~14, + SiLU';
 *                               groups of <= RN_SMALL channels ~6 S more, see there)
 *   m2_rmsnorm_bwd_dw_r64_wi64  one item per (channel, block of 64 rows): partial sums of
 *                               dweight and dbias over the block's rows
 *   m2_rmsnorm_bwd_reduce_wi64  one item per channel: the partials in block order
 * Tensors arrive as (pointer, element offset, row stride); optional ones with a flag.
 * A group whose float Σ v² overflows is summed again, scaled (RN_RSTD), as the CPU backend
 * falls back to double: large finite inputs keep a finite result (SPEC §9).
 */

#define RMSNORM_RB 64 /* rows per dweight/dbias partial sum */

M2K_FN float rn_dsilu(float v) {
    const float sg = m2k_sigmoid(v);
    return sg * (1.0f + v * (1.0f - sg));
}

/* dst = Σ red[0..128) by a tree in a fixed order; every item gets it; red reusable after. */
#define RN_TREE128(dst)                                                                    \
    do {                                                                                   \
        for (int off_ = 64; off_ > 0; off_ /= 2) {                                         \
            M2K_BARRIER();                                                                 \
            if (lid < off_) red[lid] += red[lid + off_];                                   \
        }                                                                                  \
        M2K_BARRIER();                                                                     \
        (dst) = red[0];                                                                    \
        M2K_BARRIER();                                                                     \
    } while (0)

/* v_c of row m (gate first applies silu(z)) */
#define RN_V(c) (gate == 1 ? x[m * x_s + (c)] * m2k_silu(z[m * z_s + (c)]) : x[m * x_s + (c)])

/* 2^-100: a group whose float Σ v² overflowed (|v| beyond about 1.8e19; SPEC §9) is summed
 * again as Σ (v 2^-100)², which cannot overflow (|v 2^-100| < 2.7e8) and loses only terms
 * below 2^-26 against a sum above 3.4e38 (the CPU's double fallback, in float32). eps, under
 * 2^-200 of the mean square there, is dropped. Finite sums keep their bits. */
#define RN_SC 7.8886090522101181e-31f

/* r = 1 / sqrt(Σ v² / S + eps) of the work-group's (row, group), uniform over its items */
#define RN_RSTD(r)                                                                         \
    do {                                                                                   \
        float ss_ = 0.0f;                                                                  \
        for (m2_i64 k_ = lid; k_ < S; k_ += 128) {                                         \
            const float v_ = RN_V(c0 + k_);                                                \
            ss_ += v_ * v_;                                                                \
        }                                                                                  \
        red[lid] = ss_;                                                                    \
        RN_TREE128(ss_);                                                                   \
        if (ss_ > 3.402823466e38f) { /* +inf: uniform, so the barriers are too */          \
            ss_ = 0.0f;                                                                    \
            for (m2_i64 k_ = lid; k_ < S; k_ += 128) {                                     \
                const float v_ = RN_V(c0 + k_) * RN_SC;                                    \
                ss_ += v_ * v_;                                                            \
            }                                                                              \
            red[lid] = ss_;                                                                \
            RN_TREE128(ss_);                                                               \
            (r) = RN_SC * (1.0f / m2k_sqrt(ss_ / (float)S));                               \
        } else {                                                                           \
            (r) = 1.0f / m2k_sqrt(ss_ / (float)S + eps);                                   \
        }                                                                                  \
    } while (0)

/* Groups of at most RN_SMALL channels: dv = (u - xh c1) r, u = w dy, cancels there (for S = 1
 * it is u r (1 - xh²), and 1 - xh² = eps r² lies below float32's rounding of xh²); the form
 * with no cancelling terms, from 1 = mean(xh²) + eps r², as the CPU backend computes it:
 *   dv_k = r (eps r² u_k + Σ_{j != k} xh_j (xh_j u_k - xh_k u_j) / S)                    */
#define RN_SMALL 4
M2K_FN float rn_u(M2K_GLOBAL const float *dout, M2K_GLOBAL const float *z,
                  M2K_GLOBAL const float *w, m2_i64 m, m2_i64 d_s, m2_i64 z_s, m2_i64 c,
                  m2_i32 gate) {
    float dy = dout[m * d_s + c];
    if (gate == 2) dy *= m2k_silu(z[m * z_s + c]);
    return w[c] * dy;
}

/* out[M,D]; rstd[M,G] (has_rstd); x, z (gate != 0) [M,D]; weight[D]; bias[D] (has_bias) */
M2K_KERNEL void m2_rmsnorm_fwd_wg128(
    M2K_GLOBAL float *out, m2_i64 o_o, m2_i64 o_s,
    M2K_GLOBAL float *rstd, m2_i64 r_o, m2_i64 r_s, m2_i32 has_rstd,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s,
    M2K_GLOBAL const float *w, m2_i64 w_o,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    m2_i64 M, m2_i64 D, m2_i64 S, float eps, m2_i32 gate) {
    M2K_LOCAL_ARRAY(float, red, [128]);
    const m2_i64 G = D / S, grp = M2K_GROUP_ID(0);
    const int lid = M2K_LOCAL_ID(0);
    if (grp >= M * G) return; /* uniform over the work-group */
    out += o_o; rstd += r_o; x += x_o; z += z_o; w += w_o; bias += b_o;
    const m2_i64 m = grp / G, c0 = (grp % G) * S;
    float r;
    RN_RSTD(r);
    for (m2_i64 k = lid; k < S; k += 128) {
        const m2_i64 c = c0 + k;
        float y = RN_V(c) * r * w[c];
        if (has_bias) y += bias[c];
        if (gate == 2) y *= m2k_silu(z[m * z_s + c]);
        out[m * o_s + c] = y;
    }
    if (has_rstd && lid == 0) rstd[m * r_s + grp % G] = r;
}

/*
 * Backward of one (row, group):
 *   gate after:  dz = dout y silu'(z),  dy = dout silu(z);   else dy = dout
 *   xh = v r,  c1 = Σ xh w dy / S,  dv = (w dy - xh c1) r
 *   gate first:  dx = dv silu(z),  dz = dv x silu'(z);       else dx = dv
 * rstd_in[M,G] (has_rin; else recomputed); rbuf[M*G] (has_rbuf) receives r.
 */
M2K_KERNEL void m2_rmsnorm_bwd_wg128(
    M2K_GLOBAL float *dx, m2_i64 dx_o, m2_i64 dx_s, m2_i32 has_dx,
    M2K_GLOBAL float *dz, m2_i64 dz_o, m2_i64 dz_s, m2_i32 has_dz,
    M2K_GLOBAL float *rbuf, m2_i64 rb_o, m2_i32 has_rbuf,
    M2K_GLOBAL const float *dout, m2_i64 d_o, m2_i64 d_s,
    M2K_GLOBAL const float *rin, m2_i64 ri_o, m2_i64 ri_s, m2_i32 has_rin,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s,
    M2K_GLOBAL const float *w, m2_i64 w_o,
    M2K_GLOBAL const float *bias, m2_i64 b_o, m2_i32 has_bias,
    m2_i64 M, m2_i64 D, m2_i64 S, float eps, m2_i32 gate) {
    M2K_LOCAL_ARRAY(float, red, [128]);
    const m2_i64 G = D / S, grp = M2K_GROUP_ID(0);
    const int lid = M2K_LOCAL_ID(0);
    if (grp >= M * G) return;
    dx += dx_o; dz += dz_o; rbuf += rb_o; dout += d_o; rin += ri_o; x += x_o; z += z_o;
    w += w_o; bias += b_o;
    const m2_i64 m = grp / G, c0 = (grp % G) * S;
    float r;
    if (has_rin) {
        r = rin[m * ri_s + grp % G];
    } else {
        RN_RSTD(r);
    }
    float c1 = 0.0f;
    for (m2_i64 k = lid; k < S; k += 128) {
        const m2_i64 c = c0 + k;
        float dy = dout[m * d_s + c];
        if (gate == 2) dy *= m2k_silu(z[m * z_s + c]);
        c1 += RN_V(c) * r * w[c] * dy;
    }
    red[lid] = c1;
    RN_TREE128(c1);
    c1 /= (float)S;
    for (m2_i64 k = lid; k < S; k += 128) {
        const m2_i64 c = c0 + k;
        const float xv = x[m * x_s + c];
        const float zv = gate ? z[m * z_s + c] : 0.0f;
        const float v = gate == 1 ? xv * m2k_silu(zv) : xv;
        const float xh = v * r;
        const float d = dout[m * d_s + c];
        float dy = d;
        if (gate == 2) {
            float y = xh * w[c];
            if (has_bias) y += bias[c];
            if (has_dz) dz[m * dz_s + c] = d * y * rn_dsilu(zv);
            dy = d * m2k_silu(zv);
        }
        float dv;
        if (S <= RN_SMALL) {
            const float uk = w[c] * dy, er2 = eps * r * r;
            float t = 0.0f;
            for (m2_i64 j = c0; j < c0 + S; j++) {
                if (j == c) continue;
                const float xj = RN_V(j) * r;
                t += xj * (xj * uk - xh * rn_u(dout, z, w, m, d_s, z_s, j, gate));
            }
            dv = (er2 * uk + t / (float)S) * r;
        } else {
            dv = (w[c] * dy - xh * c1) * r;
        }
        float dxv = dv;
        if (gate == 1) {
            dxv = dv * m2k_silu(zv);
            if (has_dz) dz[m * dz_s + c] = dv * xv * rn_dsilu(zv);
        }
        if (has_dx) dx[m * dx_s + c] = dxv;
    }
    if (has_rbuf && lid == 0) rbuf[grp] = r;
}

/* part[blk, c, 0..1] = Σ_{m in block} (dy xh, dy) for channel c, r from rbuf[M*G]. */
M2K_KERNEL void m2_rmsnorm_bwd_dw_r64_wi64(
    M2K_GLOBAL float *part, m2_i64 p_o, M2K_GLOBAL const float *rbuf, m2_i64 rb_o,
    M2K_GLOBAL const float *dout, m2_i64 d_o, m2_i64 d_s,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s,
    m2_i64 M, m2_i64 D, m2_i64 S, m2_i32 gate) {
    const m2_i64 nblk = (M + RMSNORM_RB - 1) / RMSNORM_RB;
    const m2_i64 gid = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (gid >= nblk * D) return;
    part += p_o; rbuf += rb_o; dout += d_o; x += x_o; z += z_o;
    const m2_i64 c = gid % D, blk = gid / D, G = D / S, g = c / S;
    const m2_i64 m1 = blk * RMSNORM_RB + RMSNORM_RB < M ? blk * RMSNORM_RB + RMSNORM_RB : M;
    float aw = 0.0f, ab = 0.0f;
    for (m2_i64 m = blk * RMSNORM_RB; m < m1; m++) {
        float dy = dout[m * d_s + c];
        if (gate == 2) dy *= m2k_silu(z[m * z_s + c]);
        aw += dy * (RN_V(c) * rbuf[m * G + g]);
        ab += dy;
    }
    part[(blk * D + c) * 2] = aw;
    part[(blk * D + c) * 2 + 1] = ab;
}

/* dweight[D] (has_dw), dbias[D] (has_db) = Σ over nblk partials, in block order. */
M2K_KERNEL void m2_rmsnorm_bwd_reduce_wi64(
    M2K_GLOBAL float *dw, m2_i64 dw_o, m2_i32 has_dw,
    M2K_GLOBAL float *db, m2_i64 db_o, m2_i32 has_db,
    M2K_GLOBAL const float *part, m2_i64 p_o, m2_i64 nblk, m2_i64 D) {
    const m2_i64 c = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (c >= D) return;
    dw += dw_o; db += db_o; part += p_o;
    float aw = 0.0f, ab = 0.0f;
    for (m2_i64 blk = 0; blk < nblk; blk++) {
        aw += part[(blk * D + c) * 2];
        ab += part[(blk * D + c) * 2 + 1];
    }
    if (has_dw) dw[c] = aw;
    if (has_db) db[c] = ab;
}
