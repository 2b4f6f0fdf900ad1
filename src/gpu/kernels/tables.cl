/*
 * tables.cl — the index tables of the SSD kernels, built on the device so that a device-mode
 * call neither builds them on the host nor uploads them (a CUDA graph can then capture it):
 * an int32/int64 index tensor as a clamped int64 table, the sequence table, the chunk table
 * and the table of states at positions (their layouts: ssd_chunked.cl). Every value read from
 * a caller's index tensor is clamped into range first, so that any content (the host checks
 * none in device mode with device indices) gives in-bounds tables: wrong numbers, never an
 * access out of range.
 */

/* ---- an index tensor as int64: dst[i] = clamp(src[i], lo, hi) -----------------------------
 * kind 0: src32 is read (int32), 1: src64 (int64); the other pointer is unused.
 * mono != 0 (cu_seqlens): one work-item, in order: dst[0] = lo, dst[i] = clamp(src[i],
 * dst[i-1], hi), dst[n-1] = hi: a valid cu_seqlens (lo .. hi non-decreasing) whatever src
 * holds.                                                                                   */
M2K_KERNEL void m2_idx_load_wi64(
    M2K_GLOBAL const m2_i32 *src32, M2K_GLOBAL const m2_i64 *src64, m2_i32 kind,
    m2_i64 n, m2_i32 mono, m2_i64 lo, m2_i64 hi, M2K_GLOBAL m2_i64 *dst) {
    const m2_i64 i = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (mono) {
        if (i != 0) return;
        m2_i64 prev = lo;
        for (m2_i64 k = 0; k < n; k++) {
            m2_i64 v = kind ? src64[k] : (m2_i64)src32[k];
            v = k == 0 ? lo : k == n - 1 ? hi : v < prev ? prev : v > hi ? hi : v;
            dst[k] = v;
            prev = v;
        }
        return;
    }
    if (i >= n) return;
    const m2_i64 v = kind ? src64[i] : (m2_i64)src32[i];
    dst[i] = v < lo ? lo : v > hi ? hi : v;
}

/* ---- the sequence table: st[2s], st[2s+1] = chunks [c0, c1) of sequence s -----------------
 * has_cu: sequence s is tokens [cu[s], cu[s+1]) of row 0 (cu non-decreasing, from
 * m2_idx_load_wi64), numbered in order by one work-item; else sequence s is row s,
 * K = ceil(L / Q) chunks each (one work-item per sequence).                                */
M2K_KERNEL void m2_ssd_seq_table_wi64(
    M2K_GLOBAL const m2_i64 *cu, m2_i32 has_cu, m2_i64 nseq, m2_i64 K, m2_i64 Q,
    M2K_GLOBAL m2_i64 *st) {
    const m2_i64 i = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (!has_cu) {
        if (i >= nseq) return;
        st[2 * i] = i * K;
        st[2 * i + 1] = (i + 1) * K;
        return;
    }
    if (i != 0) return;
    m2_i64 k = 0;
    for (m2_i64 s = 0; s < nseq; s++) {
        st[2 * s] = k;
        k += (cu[s + 1] - cu[s] + Q - 1) / Q;
        st[2 * s + 1] = k;
    }
}

/* ---- the chunk table: one work-item per chunk c < nc --------------------------------------
 * ct[5c..] = {b, t0, len, sb, sk}. Without cu: c = b*K + k, tokens [kQ, kQ + len) of row b,
 * len = min(Q, L - kQ) (L < 0: Q, the state-passing stage that has no L); staged: (sb, sk) =
 * (b, k), else (0, c). With cu: the chunks of the sequences in order (st), (0, c); a chunk
 * past the last sequence's (nc is then an upper bound) has len 0 and belongs to no
 * sequence, and every kernel skips it.                                                     */
M2K_KERNEL void m2_ssd_chunk_table_wi64(
    M2K_GLOBAL const m2_i64 *cu, m2_i32 has_cu, M2K_GLOBAL const m2_i64 *st, m2_i64 nseq,
    m2_i64 nc, m2_i64 K, m2_i64 Q, m2_i64 L, m2_i32 staged, M2K_GLOBAL m2_i64 *ct) {
    const m2_i64 c = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (c >= nc) return;
    m2_i64 b = 0, t0 = 0, len = 0, sb = 0, sk = c;
    if (!has_cu) {
        b = c / K;
        const m2_i64 k = c - b * K;
        t0 = k * Q;
        len = L < 0 || L - t0 > Q ? Q : L - t0;
        if (staged) sb = b, sk = k;
    } else if (nseq > 0 && c < st[2 * nseq - 1]) {
        m2_i64 lo = 0, hi = nseq - 1; /* the last sequence whose first chunk is <= c */
        while (lo < hi) {
            const m2_i64 mid = lo + (hi - lo + 1) / 2;
            if (st[2 * mid] <= c) lo = mid;
            else hi = mid - 1;
        }
        t0 = cu[lo] + (c - st[2 * lo]) * Q;
        len = cu[lo + 1] - t0 > Q ? Q : cu[lo + 1] - t0;
    }
    ct[5 * c] = b;
    ct[5 * c + 1] = t0;
    ct[5 * c + 2] = len;
    ct[5 * c + 3] = sb;
    ct[5 * c + 4] = sk;
}

/* ---- states at positions: pt[2i], pt[2i+1] = (chunk, token offset in it) ------------------
 * pos: flat token indices b*L + t (clamped to [0, B*L - 1] by m2_idx_load_wi64), increasing.
 * The chunk is the last real chunk (c < st[2 nseq - 1]) starting at or before pos[i], the
 * offset clamped into it; no real chunk (no tokens): chunk 0, offset 0 (then pos_state reads
 * nothing: npos > 0 needs tokens, checked on the host).                                    */
M2K_KERNEL void m2_ssd_pos_table_wi64(
    M2K_GLOBAL const m2_i64 *pos, m2_i64 npos, M2K_GLOBAL const m2_i64 *ct,
    M2K_GLOBAL const m2_i64 *st, m2_i64 nseq, m2_i64 L, M2K_GLOBAL m2_i64 *pt) {
    const m2_i64 i = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (i >= npos) return;
    const m2_i64 f = pos[i], nreal = nseq > 0 ? st[2 * nseq - 1] : 0;
    m2_i64 c = 0, off = 0;
    if (nreal > 0) {
        m2_i64 lo = 0, hi = nreal - 1;
        while (lo < hi) {
            const m2_i64 mid = lo + (hi - lo + 1) / 2;
            if (ct[5 * mid] * L + ct[5 * mid + 1] <= f) lo = mid;
            else hi = mid - 1;
        }
        c = lo;
        off = f - (ct[5 * c] * L + ct[5 * c + 1]);
        const m2_i64 len = ct[5 * c + 2];
        off = off < 0 ? 0 : off >= len ? len - 1 : off;
    }
    pt[2 * i] = c;
    pt[2 * i + 1] = off;
}
