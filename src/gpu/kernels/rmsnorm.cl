/*
 * rmsnorm.cl — gated RMSNorm forward and backward (SPEC §5) for every GPU API, in the common
 * subset of OpenCL C 1.2 and CUDA C (the macro header is included before this file).
 * float32 storage and arithmetic; the math of src/ref/rmsnorm_ref.c. Per row m, group g
 * (channels c in [g*S, (g+1)*S)):
 *   v_c = x_c * silu(z_c) (z given, gate first), else x_c;   r = 1/sqrt(Σ v_c²/S + eps)
 *   y_c = v_c r w_c (+ b_c);   out_c = y_c * silu(z_c) (z given, gate after), else y_c
 *
 * Launches (1-D):
 *   rmsnorm_fwd_f32        one work-group per (row, group), local size a power of two
 *                          <= RMSNORM_LS; Σ v² per item in channel order, then a tree in
 *                          local memory (fixed order: reproducible, no subgroups)
 *   rmsnorm_bwd_f32        same groups: dx, dz, and r into rbuf[M*G] for the next kernel
 *   rmsnorm_bwd_dw_f32     one item per (channel, block of RMSNORM_RB rows): partial sums
 *                          of dweight and dbias over the block's rows
 *   rmsnorm_bwd_reduce_f32 one item per channel: the partials in block order
 * gate: 0 none, 1 gate first (norm_before_gate == 0), 2 gate after.
 */

#define RMSNORM_LS 128 /* largest local size of the row kernels */
#define RMSNORM_RB 64  /* rows per dweight/dbias partial sum */

M2G_FN float rn_sigmoid(float v) { return 1.0f / (1.0f + M2G_EXP(-v)); }
M2G_FN float rn_silu(float v) { return v / (1.0f + M2G_EXP(-v)); }
M2G_FN float rn_dsilu(float v) {
    const float sg = rn_sigmoid(v);
    return sg * (1.0f + v * (1.0f - sg));
}

/* Sum of red[0 .. n) (n = the local size, a power of two) by a tree; all items get it. */
M2G_FN float rn_tree(M2G_LOCAL float *red, int lid, int n) {
    for (int off = n / 2; off > 0; off /= 2) {
        M2G_BARRIER();
        if (lid < off) red[lid] += red[lid + off];
    }
    M2G_BARRIER();
    const float r = red[0];
    M2G_BARRIER(); /* red may be reused by the caller */
    return r;
}

/* out[M,D] (row stride os); rstd[M,G] or NULL; x, z (NULL) [M,D]; weight, bias (NULL) [D]. */
M2G_KERNEL rmsnorm_fwd_f32(M2G_GLOBAL float *out, m2g_i64 os, M2G_GLOBAL float *rstd,
                           m2g_i64 rs, M2G_GLOBAL const float *x, m2g_i64 xs,
                           M2G_GLOBAL const float *z, m2g_i64 zs, M2G_GLOBAL const float *w,
                           M2G_GLOBAL const float *bias, m2g_i64 M, m2g_i64 D, m2g_i64 S,
                           float eps, int gate) {
    M2G_LOCAL float red[RMSNORM_LS];
    const m2g_i64 G = D / S, grp = M2G_GRP();
    const int lid = M2G_LID(), ls = M2G_LSIZE();
    if (grp >= M * G) return; /* uniform over the work-group */
    const m2g_i64 m = grp / G, c0 = (grp % G) * S;
    float ss = 0.0f;
    for (m2g_i64 k = lid; k < S; k += ls) {
        float v = x[m * xs + c0 + k];
        if (gate == 1) v *= rn_silu(z[m * zs + c0 + k]);
        ss += v * v;
    }
    red[lid] = ss;
    const float r = 1.0f / M2G_SQRT(rn_tree(red, lid, ls) / (float)S + eps);
    for (m2g_i64 k = lid; k < S; k += ls) {
        const m2g_i64 c = c0 + k;
        float v = x[m * xs + c];
        if (gate == 1) v *= rn_silu(z[m * zs + c]);
        float y = v * r * w[c];
        if (bias) y += bias[c];
        if (gate == 2) y *= rn_silu(z[m * zs + c]);
        out[m * os + c] = y;
    }
    if (rstd && lid == 0) rstd[m * rs + grp % G] = r;
}

/*
 * Backward of one (row, group):
 *   gate after:  dz = dout y silu'(z),  dy = dout silu(z);   else dy = dout
 *   xh = v r,  c1 = Σ xh w dy / S,  dv = (w dy - xh c1) r
 *   gate first:  dx = dv silu(z),  dz = dv x silu'(z);       else dx = dv
 * rstd_in[M,G] (or NULL: recomputed); rbuf[M*G] (or NULL) receives r.
 */
M2G_KERNEL rmsnorm_bwd_f32(M2G_GLOBAL float *dx, m2g_i64 dxs, M2G_GLOBAL float *dz,
                           m2g_i64 dzs, M2G_GLOBAL float *rbuf, M2G_GLOBAL const float *dout,
                           m2g_i64 ds, M2G_GLOBAL const float *rstd_in, m2g_i64 rs,
                           M2G_GLOBAL const float *x, m2g_i64 xs, M2G_GLOBAL const float *z,
                           m2g_i64 zs, M2G_GLOBAL const float *w, M2G_GLOBAL const float *bias,
                           m2g_i64 M, m2g_i64 D, m2g_i64 S, float eps, int gate) {
    M2G_LOCAL float red[RMSNORM_LS];
    const m2g_i64 G = D / S, grp = M2G_GRP();
    const int lid = M2G_LID(), ls = M2G_LSIZE();
    if (grp >= M * G) return;
    const m2g_i64 m = grp / G, c0 = (grp % G) * S;
    float r;
    if (rstd_in) {
        r = rstd_in[m * rs + grp % G];
    } else {
        float ss = 0.0f;
        for (m2g_i64 k = lid; k < S; k += ls) {
            float v = x[m * xs + c0 + k];
            if (gate == 1) v *= rn_silu(z[m * zs + c0 + k]);
            ss += v * v;
        }
        red[lid] = ss;
        r = 1.0f / M2G_SQRT(rn_tree(red, lid, ls) / (float)S + eps);
    }
    float c1p = 0.0f;
    for (m2g_i64 k = lid; k < S; k += ls) {
        const m2g_i64 c = c0 + k;
        float v = x[m * xs + c];
        if (gate == 1) v *= rn_silu(z[m * zs + c]);
        float dy = dout[m * ds + c];
        if (gate == 2) dy *= rn_silu(z[m * zs + c]);
        c1p += v * r * w[c] * dy;
    }
    red[lid] = c1p;
    const float c1 = rn_tree(red, lid, ls) / (float)S;
    for (m2g_i64 k = lid; k < S; k += ls) {
        const m2g_i64 c = c0 + k;
        const float xv = x[m * xs + c];
        const float zv = gate ? z[m * zs + c] : 0.0f;
        const float v = gate == 1 ? xv * rn_silu(zv) : xv;
        const float xh = v * r;
        const float d = dout[m * ds + c];
        float dy = d;
        if (gate == 2) {
            float y = xh * w[c];
            if (bias) y += bias[c];
            if (dz) dz[m * dzs + c] = d * y * rn_dsilu(zv);
            dy = d * rn_silu(zv);
        }
        const float dv = (w[c] * dy - xh * c1) * r;
        float dxv = dv;
        if (gate == 1) {
            dxv = dv * rn_silu(zv);
            if (dz) dz[m * dzs + c] = dv * xv * rn_dsilu(zv);
        }
        if (dx) dx[m * dxs + c] = dxv;
    }
    if (rbuf && lid == 0) rbuf[grp] = r;
}

/* part[blk, c, 0..1] = Σ_{m in block} (dy xh, dy) for channel c, r from rbuf[M*G]. */
M2G_KERNEL rmsnorm_bwd_dw_f32(M2G_GLOBAL float *part, M2G_GLOBAL const float *rbuf,
                              M2G_GLOBAL const float *dout, m2g_i64 ds,
                              M2G_GLOBAL const float *x, m2g_i64 xs, M2G_GLOBAL const float *z,
                              m2g_i64 zs, m2g_i64 M, m2g_i64 D, m2g_i64 S, int gate) {
    const m2g_i64 nblk = (M + RMSNORM_RB - 1) / RMSNORM_RB;
    const m2g_i64 gid = M2G_GID();
    if (gid >= nblk * D) return;
    const m2g_i64 c = gid % D, blk = gid / D, G = D / S, g = c / S;
    const m2g_i64 m1 = blk * RMSNORM_RB + RMSNORM_RB < M ? blk * RMSNORM_RB + RMSNORM_RB : M;
    float aw = 0.0f, ab = 0.0f;
    for (m2g_i64 m = blk * RMSNORM_RB; m < m1; m++) {
        float v = x[m * xs + c];
        if (gate == 1) v *= rn_silu(z[m * zs + c]);
        float dy = dout[m * ds + c];
        if (gate == 2) dy *= rn_silu(z[m * zs + c]);
        aw += dy * (v * rbuf[m * G + g]);
        ab += dy;
    }
    part[(blk * D + c) * 2] = aw;
    part[(blk * D + c) * 2 + 1] = ab;
}

/* dweight[D], dbias[D] (each or NULL) = Σ over nblk partials, in block order. */
M2G_KERNEL rmsnorm_bwd_reduce_f32(M2G_GLOBAL float *dw, M2G_GLOBAL float *db,
                                  M2G_GLOBAL const float *part, m2g_i64 nblk, m2g_i64 D) {
    const m2g_i64 c = M2G_GID();
    if (c >= D) return;
    float aw = 0.0f, ab = 0.0f;
    for (m2g_i64 blk = 0; blk < nblk; blk++) {
        aw += part[(blk * D + c) * 2];
        ab += part[(blk * D + c) * 2 + 1];
    }
    if (dw) dw[c] = aw;
    if (db) db[c] = ab;
}
