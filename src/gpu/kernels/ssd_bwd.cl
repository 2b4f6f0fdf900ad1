/*
 * ssd_bwd.cl — the fused SSD backward (SPEC §2) in chunked form, after the forward's stages
 * (ssd_chunked.cl) have been recomputed into device scratch. Common subset of OpenCL C and
 * CUDA C (common.h); float32.
 *
 * Per chunk c (tokens i, j < len of row b from t0), head h of group g, with d = dt_out,
 * cs = dA_cumsum, cs_last = cs[len-1], S0 = the state entering the chunk, dS = the gradient of
 * the state leaving it, dy = dout * silu(z):
 *   dx_j  = d_j sum_{i>=j} CB[i,j] e^(cs_i-cs_j) dy_i + e^(cs_last-cs_j) d_j dS B_j + D dy_j
 *   E[i,j] = e^(cs_i-cs_j) dy_i . x_j (j <= i);  dCBg[i,j] = sum_{h in g} E d_j
 *   dC_i  = sum_j dCBg[i,j] B_j + sum_{h in g} e^(cs_i) dy_i S0
 *   dB_j  = sum_i dCBg[i,j] C_i + sum_{h in g} e^(cs_last-cs_j) d_j x_j dS
 *   q_j = sum_i CB E, u_i = C_i . (dy_i S0), g_j = B_j . (x_j dS)
 *   the gradient of a_s = d_s A, da_s = sum_{i>=s} dcs_i, summed in the form that has no
 *   cancelling terms (the reverse cumsum of dcs would subtract equal diagonal terms):
 *   da_s = F_s + sum_{i>=s} e^(cs_i) u_i + sum_{j<s} e^(cs_last-cs_j) d_j g_j
 *          + e^(cs_last) S0 . dS,   F_s = sum_{i>=s>j} CB[i,j] E[i,j] d_j
 *   dd_s = q_s + e^(cs_last-cs_s) g_s + A da_s; ddt = dd * d'(raw)
 * Every e^(ci-cj) with j <= i is ssd_decay (ssd_chunked.cl): the full decay where both sums
 * are -inf. d'(raw) is 0 outside [lo, hi], compared as CPU/REF compare the float d with the
 * double limits: lo_up = the least float >= lo, hi_dn = the greatest float <= hi (host side).
 * Sums over heads (dB, dC) run over the heads of a group in order inside one work-item;
 * per-head parameter gradients are per-chunk partials summed over chunks in chunk order by
 * the last kernel: no atomics, bitwise reproducible.
 *
 * Dense scratch layouts (element offsets from the buffer's offset argument):
 *   dto, dac [H][nc][Q]; CB, dCBg [nc][G][Q][Q]; E [nc][H][Q][Q]; S0, dS [nc][H][P][N];
 *   F (r), q, u, gv [nc][H][Q]; dec, pA, pb [nc][H]; pD [nc][H][P]; dy [B,L,H,P] strided like x.
 */

#define M2K_CT(c) M2K_GLOBAL const m2_i64 *ctc = ct + 5 * (c)
#define M2K_SSD_BWD_QMAX 64 /* largest chunk m2_ssd_bwd_dt_wi64 takes */

/* ---- gate: dy = dout silu(z), dz = dout y silu'(z) (or dy = dout); one work-item per element */
M2K_KERNEL void m2_ssd_bwd_gate_wi64(
    m2_i64 B, m2_i64 L, m2_i64 H, m2_i64 P,
    M2K_GLOBAL const float *dout, m2_i64 go_o, m2_i64 go_s0, m2_i64 go_s1, m2_i64 go_s2,
    m2_i32 dout_ty,
    M2K_GLOBAL const float *z, m2_i64 z_o, m2_i64 z_s0, m2_i64 z_s1, m2_i64 z_s2, m2_i32 z_ty,
    m2_i32 has_z,
    M2K_GLOBAL const float *y, m2_i64 y_o, m2_i64 y_s0, m2_i64 y_s1, m2_i64 y_s2,
    M2K_GLOBAL float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    M2K_GLOBAL float *dz, m2_i64 dz_o, m2_i64 dz_s0, m2_i64 dz_s1, m2_i64 dz_s2, m2_i32 dz_ty,
    m2_i32 has_dz) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= B * L * H * P) return;
    const m2_i64 p = e % P, h = (e / P) % H, t = (e / (P * H)) % L, b = e / (P * H * L);
    const float go = m2k_ld(dout, go_o + b * go_s0 + t * go_s1 + h * go_s2 + p, dout_ty);
    float v = go;
    if (has_z) {
        const float zv = m2k_ld(z, z_o + b * z_s0 + t * z_s1 + h * z_s2 + p, z_ty);
        const float sg = m2k_sigmoid(zv);
        v = go * m2k_silu(zv);
        if (has_dz) {
            const float yv = y[y_o + b * y_s0 + t * y_s1 + h * y_s2 + p];
            m2k_st(dz, dz_o + b * dz_s0 + t * dz_s1 + h * dz_s2 + p,
                   go * yv * (sg * (1.0f + zv * (1.0f - sg))), dz_ty);
        }
    }
    dy[dy_o + b * dy_s0 + t * dy_s1 + h * dy_s2 + p] = v;
}

/* ---- backward state passing: dS[c] = gradient of the state leaving chunk c; the chunk's own
 * contribution G[c] (chunk_state mode 1) is read and overwritten in place by dS[c].
 * groups (ceil(P*N/64), H, sequences).                                                         */
M2K_KERNEL void m2_ssd_bwd_state_passing_wi64(
    M2K_GLOBAL const m2_i64 *st, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 P, m2_i64 N,
    M2K_GLOBAL const m2_i64 *ct, M2K_GLOBAL const float *dac, m2_i64 dac_o,
    M2K_GLOBAL float *GdS, m2_i64 g_o,
    M2K_GLOBAL const float *dfin, m2_i64 df_o, m2_i64 df_s0, m2_i64 df_s1, m2_i64 df_s2,
    m2_i32 has_dfin,
    M2K_GLOBAL float *dinit, m2_i64 di_o, m2_i64 di_s0, m2_i64 di_s1, m2_i64 di_s2,
    m2_i32 has_dinit) {
    const m2_i64 gx = (P * N + 63) / 64, e = M2K_GROUP_X(gx) * 64 + M2K_LOCAL_ID(0);
    if (e >= P * N) return;
    const m2_i64 p = e / N, n = e % N, h = M2K_GROUP_ID(1), s = M2K_GROUP_Z(gx);
    float v = has_dfin ? dfin[df_o + s * df_s0 + h * df_s1 + p * df_s2 + n] : 0.0f;
    for (m2_i64 c = st[2 * s + 1] - 1; c >= st[2 * s]; c--) {
        const m2_i64 len = ct[5 * c + 2];
        const m2_i64 o = g_o + ((c * H + h) * P + p) * N + n;
        const float gc = GdS[o];
        GdS[o] = v;
        v = m2k_exp(dac[dac_o + (h * nc + c) * Q + len - 1]) * v + gc;
    }
    if (has_dinit) dinit[di_o + s * di_s0 + h * di_s1 + p * di_s2 + n] = v;
}

/* ---- dx: groups (ceil(Q/16) * ceil(P/16), H, chunks), 16x16: a (token j) x (channel p) tile */
M2K_KERNEL void m2_ssd_bwd_dx_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *CB, m2_i64 CB_o, M2K_GLOBAL const float *dto, m2_i64 dto_o,
    M2K_GLOBAL const float *dac, m2_i64 dac_o, M2K_GLOBAL const float *dS, m2_i64 dS_o,
    M2K_GLOBAL const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    M2K_GLOBAL const float *D, m2_i64 D_o, m2_i64 D_s0, m2_i32 D_mode,
    M2K_GLOBAL float *dx, m2_i64 dx_o, m2_i64 dx_s0, m2_i64 dx_s1, m2_i64 dx_s2, m2_i32 dx_ty) {
    M2K_LOCAL_ARRAY(float, ws, [16][17]);
    M2K_LOCAL_ARRAY(float, vs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 ntp = (P + 15) / 16, gx = (Q + 15) / 16 * ntp, tile = M2K_GROUP_X(gx);
    const m2_i64 j0 = (tile / ntp) * 16, p0 = (tile % ntp) * 16;
    const m2_i64 h = M2K_GROUP_ID(1), c = M2K_GROUP_Z(gx), g = h / (H / G);
    M2K_CT(c);
    const m2_i64 b = ctc[0], t0 = ctc[1], len = ctc[2];
    const m2_i64 oc = dac_o + (h * nc + c) * Q, od = dto_o + (h * nc + c) * Q;
    const m2_i64 ocb = CB_o + (c * G + g) * Q * Q;
    const m2_i64 j = j0 + ly, p = p0 + lx;
    const float cs_j = j < len ? dac[oc + j] : 0.0f;
    float acc = 0.0f;
    for (m2_i64 i0 = (j0 / 16) * 16; i0 < len; i0 += 16) {
        const m2_i64 iw = i0 + lx, iy = i0 + ly;
        float w = 0.0f; /* ws[j][i] = CB[i,j] e^(cs_i - cs_j) */
        if (j < len && iw < len && iw >= j)
            w = CB[ocb + iw * Q + j] * ssd_decay(dac[oc + iw], cs_j, iw == j);
        ws[ly][lx] = w;
        vs[ly][lx] =
            (iy < len && p < P) ? dy[dy_o + b * dy_s0 + (t0 + iy) * dy_s1 + h * dy_s2 + p] : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc += ws[ly][k] * vs[k][lx];
        M2K_BARRIER();
    }
    float acc2 = 0.0f; /* B_j . dS[p,:] */
    const m2_i64 sb = dS_o + (c * H + h) * P * N;
    for (m2_i64 n0 = 0; n0 < N; n0 += 16) {
        ws[ly][lx] = (j < len && n0 + lx < N)
                         ? m2k_ld(Bm, B_o + b * B_s0 + (t0 + j) * B_s1 + g * B_s2 + n0 + lx, Bm_ty)
                         : 0.0f;
        vs[ly][lx] = (p0 + ly < P && n0 + lx < N) ? dS[sb + (p0 + ly) * N + n0 + lx] : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc2 += ws[ly][k] * vs[lx][k];
        M2K_BARRIER();
    }
    if (j < len && p < P) {
        const float d = dto[od + j], cs_last = dac[oc + len - 1];
        const float dyj = dy[dy_o + b * dy_s0 + (t0 + j) * dy_s1 + h * dy_s2 + p];
        const float dv = D_mode == 2 ? D[D_o + h * D_s0 + p] : D_mode == 1 ? D[D_o + h] : 0.0f;
        m2k_st(dx, dx_o + b * dx_s0 + (t0 + j) * dx_s1 + h * dx_s2 + p,
               d * acc + ssd_decay(cs_last, cs_j, j == len - 1) * d * acc2 + dv * dyj, dx_ty);
    }
}

/* ---- E[i,j] = e^(cs_i - cs_j) dy_i . x_j for j <= i < len, else 0.
 * groups (ceil(Q/16)^2, H, chunks), 16x16: a tile of E, P in steps of 16.                   */
M2K_KERNEL void m2_ssd_bwd_E_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 P,
    M2K_GLOBAL const float *dac, m2_i64 dac_o,
    M2K_GLOBAL const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL float *E, m2_i64 E_o) {
    M2K_LOCAL_ARRAY(float, as, [16][17]);
    M2K_LOCAL_ARRAY(float, bs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 nt = (Q + 15) / 16, tile = M2K_GROUP_X(nt * nt);
    const m2_i64 i0 = (tile / nt) * 16, j0 = (tile % nt) * 16;
    const m2_i64 h = M2K_GROUP_ID(1), c = M2K_GROUP_Z(nt * nt);
    M2K_CT(c);
    const m2_i64 b = ctc[0], t0 = ctc[1], len = ctc[2];
    float acc = 0.0f;
    if (j0 <= i0 + 15 && i0 < len) { /* uniform over the group */
        for (m2_i64 p0 = 0; p0 < P; p0 += 16) {
            const m2_i64 p = p0 + lx;
            as[ly][lx] = (i0 + ly < len && p < P)
                             ? dy[dy_o + b * dy_s0 + (t0 + i0 + ly) * dy_s1 + h * dy_s2 + p]
                             : 0.0f;
            bs[ly][lx] =
                (j0 + ly < len && p < P)
                    ? m2k_ld(x, x_o + b * x_s0 + (t0 + j0 + ly) * x_s1 + h * x_s2 + p, x_ty)
                    : 0.0f;
            M2K_BARRIER();
            for (int k = 0; k < 16; k++) acc += as[ly][k] * bs[lx][k];
            M2K_BARRIER();
        }
    }
    const m2_i64 i = i0 + ly, j = j0 + lx;
    if (i < Q && j < Q) {
        const m2_i64 oc = dac_o + (h * nc + c) * Q;
        float v = 0.0f;
        if (i < len && j <= i) v = ssd_decay(dac[oc + i], dac[oc + j], i == j) * acc;
        E[E_o + ((c * H + h) * Q + i) * Q + j] = v;
    }
}

/* ---- per (chunk, group): dCBg[i,j] = sum_{h in g} E[h,i,j] d_{h,j}; per (chunk, head): F, q.
 * One work-item per (chunk, group, i, j) / per (chunk, head, i).                              */
M2K_KERNEL void m2_ssd_bwd_dcb_wi64(
    m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, M2K_GLOBAL const float *E, m2_i64 E_o,
    M2K_GLOBAL const float *dto, m2_i64 dto_o, M2K_GLOBAL float *dCB, m2_i64 dCB_o) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= nc * G * Q * Q) return;
    const m2_i64 j = e % Q, i = (e / Q) % Q, g = (e / (Q * Q)) % G, c = e / (Q * Q * G);
    const m2_i64 hpg = H / G;
    float acc = 0.0f;
    for (m2_i64 h = g * hpg; h < (g + 1) * hpg; h++)
        acc += E[E_o + ((c * H + h) * Q + i) * Q + j] * dto[dto_o + (h * nc + c) * Q + j];
    dCB[dCB_o + e] = acc;
}

M2K_KERNEL void m2_ssd_bwd_rq_wi64(
    m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, M2K_GLOBAL const float *CB, m2_i64 CB_o,
    M2K_GLOBAL const float *E, m2_i64 E_o, M2K_GLOBAL const float *dto, m2_i64 dto_o,
    M2K_GLOBAL float *r, m2_i64 r_o, M2K_GLOBAL float *q, m2_i64 q_o) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= nc * H * Q) return;
    const m2_i64 s = e % Q, h = (e / Q) % H, c = e / (Q * H), g = h / (H / G);
    const m2_i64 oe = E_o + (c * H + h) * Q * Q, ocb = CB_o + (c * G + g) * Q * Q;
    const m2_i64 od = dto_o + (h * nc + c) * Q;
    float fs = 0.0f, qs = 0.0f; /* F_s: the pairs (i >= s > j) that step s separates */
    for (m2_i64 i = s; i < Q; i++)
        for (m2_i64 j = 0; j < s; j++) fs += CB[ocb + i * Q + j] * E[oe + i * Q + j] * dto[od + j];
    for (m2_i64 k = 0; k < Q; k++) qs += CB[ocb + k * Q + s] * E[oe + k * Q + s];
    r[r_o + e] = fs;
    q[q_o + e] = qs;
}

/* ---- dC (mode 0) and dB (mode 1): groups (ceil(Q/16) * ceil(N/16), G, chunks), 16x16: a
 * (token) x (state) tile of dCm / dBm, the heads of the group summed in order.
 *   dC_i = sum_j dCBg[i,j] B_j + sum_h e^(cs_i) dy_i S0_h
 *   dB_j = sum_i dCBg[i,j] C_i + sum_h e^(cs_last-cs_j) d_j x_j dS_h                          */
M2K_KERNEL void m2_ssd_bwd_dbc_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    m2_i32 mode, M2K_GLOBAL const float *dCB, m2_i64 dCB_o,
    M2K_GLOBAL const float *dto, m2_i64 dto_o, M2K_GLOBAL const float *dac, m2_i64 dac_o,
    M2K_GLOBAL const float *M, m2_i64 M_o, /* mode 0: Bm, mode 1: Cm (strided like them) */
    m2_i64 M_s0, m2_i64 M_s1, m2_i64 M_s2, m2_i32 M_ty,
    M2K_GLOBAL const float *V, m2_i64 V_o, /* mode 0: dy, mode 1: x */
    m2_i64 V_s0, m2_i64 V_s1, m2_i64 V_s2, m2_i32 V_ty,
    M2K_GLOBAL const float *St, m2_i64 St_o, /* mode 0: S0, mode 1: dS */
    M2K_GLOBAL float *out, m2_i64 o_o, m2_i64 o_s0, m2_i64 o_s1, m2_i64 o_s2, m2_i32 out_ty) {
    M2K_LOCAL_ARRAY(float, as, [16][17]);
    M2K_LOCAL_ARRAY(float, bs, [16][17]);
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1);
    const m2_i64 ntn = (N + 15) / 16, gx = (Q + 15) / 16 * ntn, tile = M2K_GROUP_X(gx);
    const m2_i64 i0 = (tile / ntn) * 16, n0 = (tile % ntn) * 16;
    const m2_i64 g = M2K_GROUP_ID(1), c = M2K_GROUP_Z(gx), hpg = H / G;
    M2K_CT(c);
    const m2_i64 b = ctc[0], t0 = ctc[1], len = ctc[2];
    const m2_i64 ocb = dCB_o + (c * G + g) * Q * Q;
    const m2_i64 i = i0 + ly, n = n0 + lx;
    float acc = 0.0f;
    /* the intra-chunk part: dCBg (mode 0: rows i, k <= i; mode 1: columns i, k >= i) */
    const m2_i64 kb = mode ? (i0 / 16) * 16 : 0, ke = mode ? len : (i0 + 16 < len ? i0 + 16 : len);
    for (m2_i64 k0 = kb; k0 < ke; k0 += 16) {
        const m2_i64 kw = k0 + lx, km = k0 + ly;
        float w = 0.0f;
        if (i < len && kw < len) w = mode ? dCB[ocb + kw * Q + i] : dCB[ocb + i * Q + kw];
        as[ly][lx] = w;
        bs[ly][lx] = (km < len && n < N)
                         ? m2k_ld(M, M_o + b * M_s0 + (t0 + km) * M_s1 + g * M_s2 + n, M_ty)
                         : 0.0f;
        M2K_BARRIER();
        for (int k = 0; k < 16; k++) acc += as[ly][k] * bs[k][lx];
        M2K_BARRIER();
    }
    /* the state part, head by head */
    for (m2_i64 h = g * hpg; h < (g + 1) * hpg; h++) {
        const m2_i64 oc = dac_o + (h * nc + c) * Q, od = dto_o + (h * nc + c) * Q;
        float wi = 0.0f;
        if (i < len)
            wi = mode ? ssd_decay(dac[oc + len - 1], dac[oc + i], i == len - 1) * dto[od + i]
                       : m2k_exp(dac[oc + i]);
        const m2_i64 so = St_o + (c * H + h) * P * N;
        float part = 0.0f;
        for (m2_i64 p0 = 0; p0 < P; p0 += 16) {
            as[ly][lx] =
                (i < len && p0 + lx < P)
                    ? m2k_ld(V, V_o + b * V_s0 + (t0 + i) * V_s1 + h * V_s2 + p0 + lx, V_ty)
                    : 0.0f;
            bs[ly][lx] = (p0 + ly < P && n < N) ? St[so + (p0 + ly) * N + n] : 0.0f;
            M2K_BARRIER();
            for (int k = 0; k < 16; k++) part += as[ly][k] * bs[k][lx];
            M2K_BARRIER();
        }
        acc += wi * part;
    }
    if (i < len && n < N) m2k_st(out, o_o + b * o_s0 + (t0 + i) * o_s1 + g * o_s2 + n, acc, out_ty);
}

/* ---- per (chunk, head, token): u_i = C_i . (dy_i S0), gv_i = B_i . (x_i dS); the tile of
 * i0 = 0 also the decay term dec = S0 . dS. Groups (ceil(Q/16), H, chunks) of 16x16: tokens
 * i0..i0+15 by 16 state columns, (dy S0) and (x dS) as (16 x P)(P x 16) tile products through
 * local memory (the loads coalesced along p and n), each item keeping the columns n = lx
 * (mod 16) of its token's sums; then the 16 partials of a token are added in column order.
 * (A work-item per token with a serial P.N loop read dy and x H.P floats apart across a warp.) */
M2K_KERNEL void m2_ssd_bwd_tok_16x16(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H, m2_i64 G, m2_i64 P, m2_i64 N,
    M2K_GLOBAL const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL const float *Bm, m2_i64 B_o, m2_i64 B_s0, m2_i64 B_s1, m2_i64 B_s2, m2_i32 Bm_ty,
    M2K_GLOBAL const float *Cm, m2_i64 C_o, m2_i64 C_s0, m2_i64 C_s1, m2_i64 C_s2, m2_i32 Cm_ty,
    M2K_GLOBAL const float *S0, m2_i64 S0_o, M2K_GLOBAL const float *dS, m2_i64 dS_o,
    M2K_GLOBAL float *u, m2_i64 u_o, M2K_GLOBAL float *gv, m2_i64 g_o, M2K_GLOBAL float *dec,
    m2_i64 dec_o) {
    M2K_LOCAL_ARRAY(float, ys, [16][17]); /* dy[i][p] */
    M2K_LOCAL_ARRAY(float, xs, [16][17]); /* m2k_ld(x, i, x_ty)[p]  */
    M2K_LOCAL_ARRAY(float, ss, [16][17]); /* S0[p][n] */
    M2K_LOCAL_ARRAY(float, ds, [16][17]); /* dS[p][n] */
    const int lx = M2K_LOCAL_ID(0), ly = M2K_LOCAL_ID(1), lid = ly * 16 + lx;
    const m2_i64 gx = (Q + 15) / 16, i0 = M2K_GROUP_X(gx) * 16, h = M2K_GROUP_ID(1);
    const m2_i64 c = M2K_GROUP_Z(gx);
    const m2_i64 g = h / (H / G);
    M2K_CT(c);
    const m2_i64 b = ctc[0], t0 = ctc[1], len = ctc[2];
    const m2_i64 so = (c * H + h) * P * N, i = i0 + ly, t = t0 + i;
    const int live = i < len;
    float pu = 0.0f, pg = 0.0f; /* item (i, lx): the columns n = lx (mod 16) of u_i, g_i */
    for (m2_i64 n0 = 0; n0 < N; n0 += 16) {
        const m2_i64 n = n0 + lx;
        float a1 = 0.0f, a2 = 0.0f; /* (dy S0)[i][n], (x dS)[i][n] */
        for (m2_i64 p0 = 0; p0 < P; p0 += 16) {
            const m2_i64 p = p0 + lx, pr = p0 + ly;
            ys[ly][lx] = live && p < P ? dy[dy_o + b * dy_s0 + t * dy_s1 + h * dy_s2 + p] : 0.0f;
            xs[ly][lx] =
                live && p < P ? m2k_ld(x, x_o + b * x_s0 + t * x_s1 + h * x_s2 + p, x_ty) : 0.0f;
            ss[ly][lx] = pr < P && n < N ? S0[S0_o + so + pr * N + n] : 0.0f;
            ds[ly][lx] = pr < P && n < N ? dS[dS_o + so + pr * N + n] : 0.0f;
            M2K_BARRIER();
            for (int k = 0; k < 16; k++) {
                a1 += ys[ly][k] * ss[k][lx];
                a2 += xs[ly][k] * ds[k][lx];
            }
            M2K_BARRIER();
        }
        if (live && n < N) {
            pu += m2k_ld(Cm, C_o + b * C_s0 + t * C_s1 + g * C_s2 + n, Cm_ty) * a1;
            pg += m2k_ld(Bm, B_o + b * B_s0 + t * B_s1 + g * B_s2 + n, Bm_ty) * a2;
        }
    }
    ys[ly][lx] = pu; /* the 16 partial sums of each token, added in column order */
    xs[ly][lx] = pg;
    M2K_BARRIER();
    if (lx == 0 && i < Q) {
        float us = 0.0f, gs = 0.0f;
        for (int k = 0; k < 16; k++) {
            us += ys[ly][k];
            gs += xs[ly][k];
        }
        u[u_o + (c * H + h) * Q + i] = us;
        gv[g_o + (c * H + h) * Q + i] = gs;
    }
    if (i0 == 0) { /* the decay term S0 . dS of (c, h): strided partials, then in item order */
        M2K_BARRIER();
        float dsum = 0.0f;
        for (m2_i64 k = lid; k < P * N; k += 256) dsum += S0[S0_o + so + k] * dS[dS_o + so + k];
        ss[ly][lx] = dsum;
        M2K_BARRIER();
        if (lid == 0) {
            float tot = 0.0f;
            for (int r = 0; r < 16; r++)
                for (int k = 0; k < 16; k++) tot += ss[r][k];
            dec[dec_o + c * H + h] = tot;
        }
    }
}

/* ---- per (chunk, head): da -> dd -> ddt through clamp and softplus (chunks of at most
 * M2K_SSD_BWD_QMAX tokens: the fused ops use 64);
 * partial dA and ddt_bias of the chunk; partial dD per channel. One work-item per (c, h) /
 * per (c, h, p).                                                                               */
M2K_KERNEL void
m2_ssd_bwd_dt_wi64(M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 Q, m2_i64 H,
                   M2K_GLOBAL const float *dto, m2_i64 dto_o, M2K_GLOBAL const float *dac,
                   m2_i64 dac_o, M2K_GLOBAL const float *r, m2_i64 r_o, M2K_GLOBAL const float *q,
                   m2_i64 q_o, M2K_GLOBAL const float *u, m2_i64 u_o, M2K_GLOBAL const float *gv,
                   m2_i64 g_o, M2K_GLOBAL const float *dec, m2_i64 dec_o, M2K_GLOBAL const float *A,
                   m2_i64 A_o, M2K_GLOBAL const float *dt, m2_i64 dt_o, m2_i64 dt_s0, m2_i64 dt_s1,
                   m2_i32 dt_ty, M2K_GLOBAL const float *bias, m2_i64 bias_o, m2_i32 has_bias,
                   m2_i32 softplus, float lo_up, float hi_dn, M2K_GLOBAL float *ddt, m2_i64 ddt_o,
                   m2_i64 ddt_s0, m2_i64 ddt_s1, m2_i32 ddt_ty, m2_i32 has_ddt,
                   M2K_GLOBAL float *pA, m2_i64 pA_o, M2K_GLOBAL float *pb, m2_i64 pb_o) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= nc * H) return;
    const m2_i64 h = e % H, c = e / H;
    M2K_CT(c);
    const m2_i64 b = ctc[0], t0 = ctc[1], len = ctc[2];
    const m2_i64 oc = dac_o + (h * nc + c) * Q, od = dto_o + (h * nc + c) * Q;
    const m2_i64 ov = (c * H + h) * Q;
    const float a = A[A_o + h], bv = has_bias ? bias[bias_o + h] : 0.0f;
    /* a chunk of length 0 (past the real ones: device cu_seqlens) has no tokens: pA, pb = 0 */
    const float cs_last = len > 0 ? dac[oc + len - 1] : 0.0f;
    const float edec = m2k_exp(cs_last) * dec[dec_o + c * H + h];
    float suf[M2K_SSD_BWD_QMAX]; /* suf[s] = sum_{i>=s} e^(cs_i) u_i */
    float acc = 0.0f;
    for (m2_i64 s = len - 1; s >= 0; s--) {
        acc += m2k_exp(dac[oc + s]) * u[u_o + ov + s];
        suf[s] = acc;
    }
    float pre = 0.0f, sA = 0.0f, sb = 0.0f; /* pre = sum_{j<s} e^(cs_last-cs_j) d_j g_j */
    for (m2_i64 s = 0; s < len; s++) {
        const float d = dto[od + s], el = ssd_decay(cs_last, dac[oc + s], s == len - 1),
                    gs = gv[g_o + ov + s];
        const float da = r[r_o + ov + s] + suf[s] + pre + edec;
        const float dd = q[q_o + ov + s] + el * gs + a * da;
        sA += d * da;
        pre += el * d * gs;
        /* d = clamp(softplus(raw + bias), lo, hi): the derivative w.r.t. raw */
        const float v = m2k_ld(dt, dt_o + b * dt_s0 + (t0 + s) * dt_s1 + h, dt_ty) + bv;
        float dv = 1.0f, pv = v;
        if (softplus && v <= 20.0f) {
            pv = m2k_softplus(v);
            dv = m2k_sigmoid(v);
        }
        if (pv < lo_up || pv > hi_dn) dv = 0.0f; /* pv < lo, pv > hi in double */
        const float draw = dd * dv;
        sb += draw;
        if (has_ddt) m2k_st(ddt, ddt_o + b * ddt_s0 + (t0 + s) * ddt_s1 + h, draw, ddt_ty);
    }
    pA[pA_o + e] = sA;
    pb[pb_o + e] = sb;
}

M2K_KERNEL void m2_ssd_bwd_dD_wi64(
    M2K_GLOBAL const m2_i64 *ct, m2_i64 nc, m2_i64 H, m2_i64 P,
    M2K_GLOBAL const float *dy, m2_i64 dy_o, m2_i64 dy_s0, m2_i64 dy_s1, m2_i64 dy_s2,
    M2K_GLOBAL const float *x, m2_i64 x_o, m2_i64 x_s0, m2_i64 x_s1, m2_i64 x_s2, m2_i32 x_ty,
    M2K_GLOBAL float *pD, m2_i64 pD_o) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= nc * H * P) return;
    const m2_i64 p = e % P, h = (e / P) % H, c = e / (P * H);
    M2K_CT(c);
    const m2_i64 b = ctc[0], t0 = ctc[1], len = ctc[2];
    float acc = 0.0f;
    for (m2_i64 i = 0; i < len; i++)
        acc += dy[dy_o + b * dy_s0 + (t0 + i) * dy_s1 + h * dy_s2 + p] *
               m2k_ld(x, x_o + b * x_s0 + (t0 + i) * x_s1 + h * x_s2 + p, x_ty);
    pD[pD_o + e] = acc;
}

/* ---- per-head parameter gradients: the chunk partials summed in chunk order. One work-item
 * per (h, p) (p = 0 also writes dA and ddt_bias); D per head sums its channels in order.     */
M2K_KERNEL void m2_ssd_bwd_params_wi64(
    m2_i64 nc, m2_i64 H, m2_i64 P, M2K_GLOBAL const float *pA, m2_i64 pA_o,
    M2K_GLOBAL const float *pb, m2_i64 pb_o, M2K_GLOBAL const float *pD, m2_i64 pD_o,
    M2K_GLOBAL float *dA, m2_i64 dA_o, m2_i32 has_dA, M2K_GLOBAL float *db, m2_i64 db_o,
    m2_i32 has_db, M2K_GLOBAL float *dD, m2_i64 dD_o, m2_i64 dD_s0, m2_i32 dD_mode) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= H * P) return;
    const m2_i64 p = e % P, h = e / P;
    if (p == 0) {
        float sa = 0.0f, sb = 0.0f;
        for (m2_i64 c = 0; c < nc; c++) {
            sa += pA[pA_o + c * H + h];
            sb += pb[pb_o + c * H + h];
        }
        if (has_dA) dA[dA_o + h] = sa;
        if (has_db) db[db_o + h] = sb;
        if (dD_mode == 1) {
            float sd = 0.0f;
            for (m2_i64 k = 0; k < P; k++) {
                float s1 = 0.0f;
                for (m2_i64 c = 0; c < nc; c++) s1 += pD[pD_o + (c * H + h) * P + k];
                sd += s1;
            }
            dD[dD_o + h] = sd;
        }
    }
    if (dD_mode == 2) {
        float s1 = 0.0f;
        for (m2_i64 c = 0; c < nc; c++) s1 += pD[pD_o + (c * H + h) * P + p];
        dD[dD_o + h * dD_s0 + p] = s1;
    }
}
