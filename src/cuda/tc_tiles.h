/*
 * tc_tiles.h — the tile arithmetic and shared-memory layout of the tensor-core SSD forward
 * (src/cuda/ssd_tc.cuh), in plain C so that tests/gpu/test_tc_tiles.c can run the same index
 * math on the host (no GPU runs it in CI) and check coverage, the causal skip and every
 * pointer's alignment against wmma's rules (32-byte aligned tiles, ldm a multiple of 16 bytes).
 *
 * Both kernels run 128 threads (4 warps) per block over one chunk of M2TC_Q = 64 tokens (the
 * fused forward's own Q, src/gpu/ssd_host.h). Precisions: mode 0 tf32 (f32 storage in shared
 * memory, wmma m16n16k8), mode 1 bf16 (bf16 storage, m16n16k16); float32 accumulate always.
 *
 * chunk_state (grid: chunks, heads, ceil(P/64) * ceil(N/64)): S[p, n] = sum_j Xw[j, p] Bm[j, n],
 *   Xw[j, p] = exp(cs_last - cs_j) d_j x[j, p]; warp w owns rows p0 + [16w, 16w+16) and the 4
 *   column tiles n0 + [16t, 16t+16); k = tokens, ceil(len / K) steps.
 * chunk_scan (grid: chunks, heads, ceil(P/64)): per chunk and head
 *   CB = C Bm^T (64 x 64) and Y2 = C S^T (S: the state entering the chunk, [p][n]) in one
 *       loop over N in steps of M2TC_KT (C, Bm, S k-tiles loaded once each): warp w owns row
 *       tile w; of CB only column tiles 0..w (those above the diagonal are never read);
 *   W[i, j] = (j <= i < len) CB[i, j] exp(cs_i - cs_j) d_j, rounded to the MMA type;
 *   Y1 = W X: warp w owns row tile w, 4 channel tiles, k over tokens [0, 16(w+1)) only;
 *   y = Y1 + exp(cs_i) Y2 + D x, then out_x, the z gate and out (row-wise epilogue).
 */
#ifndef MAMBA2C_CUDA_TC_TILES_H
#define MAMBA2C_CUDA_TC_TILES_H

#ifdef __CUDACC__
#define M2TC_HD static __host__ __device__ __forceinline__
#else
#define M2TC_HD static inline
#endif

#define M2TC_Q 64       /* tokens per chunk (= the block's token tile) */
#define M2TC_TILE 64    /* channels (p) and state columns (n) per block */
#define M2TC_WARPS 4
#define M2TC_THREADS 128
#define M2TC_KT 16      /* the N step of the C / Bm / state tiles */
#define M2TC_FLD 68     /* row length (floats) of a float 64-wide staging tile: 64 + 4 */

/* per mode bf (0 tf32, 1 bf16), as macros so that they size static shared arrays: bytes of
 * one element in shared memory, the wmma k, and the row lengths (elements) of a 64-wide and a
 * M2TC_KT-wide tile (padded against bank conflicts) */
#define M2TC_ESIZE(bf) ((bf) ? 2 : 4)
#define M2TC_K(bf) ((bf) ? 16 : 8)
#define M2TC_LD64(bf) ((bf) ? 72 : 68)
#define M2TC_LDKT(bf) ((bf) ? 24 : 20)

/* k-steps of width k covering n (>= 0) */
M2TC_HD int m2tc_ksteps(int n, int k) { return (n + k - 1) / k; }
/* chunk_scan: the token columns of W that row tile w needs, [0, m2tc_causal_end(w)) */
M2TC_HD int m2tc_causal_end(int w) { return 16 * (w + 1); }
/* chunk_scan: CB tile (w, t) is computed iff t <= w */
M2TC_HD int m2tc_cb_tile_needed(int w, int t) { return t <= w; }

/* chunk_state: block tile z -> its first channel p0 and state column n0 */
M2TC_HD void m2tc_state_tile(long long z, long long N, long long *p0, long long *n0) {
    const long long ntn = (N + M2TC_TILE - 1) / M2TC_TILE;
    *p0 = (z / ntn) * M2TC_TILE;
    *n0 = (z % ntn) * M2TC_TILE;
}

/* ---- shared memory, byte offsets from a 128-byte aligned base ----------------------------
 * chunk_state: Xw [64 tokens][LD64], Bs [64 tokens][LD64]; the float output staging
 *   [64][M2TC_FLD] reuses the same bytes after the products.
 * chunk_scan: cs[64], d[64] floats; R1 float [64][M2TC_FLD] (CB, then W in place for tf32);
 *   R2 (bf16 only) W [64][LD64]; R3: the C, Bm and state k-tiles [64][LDKT] each, later
 *   the X tile [64][LD64]. The epilogue stages Y1 in R1 and Y2 from R2's start.           */
#define M2TC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define M2TC_F64TILE (64 * M2TC_FLD * 4) /* bytes of a float staging tile */
#define M2TC_T64(bf) (64 * M2TC_LD64(bf) * M2TC_ESIZE(bf))
#define M2TC_TKT(bf) (64 * M2TC_LDKT(bf) * M2TC_ESIZE(bf))
#define M2TC_STATE_BS_OFF(bf) M2TC_T64(bf)
#define M2TC_STATE_BYTES(bf) M2TC_MAX(2 * M2TC_T64(bf), M2TC_F64TILE)
#define M2TC_SCAN_R1_OFF (2 * 64 * 4)
#define M2TC_SCAN_R2_OFF (M2TC_SCAN_R1_OFF + M2TC_F64TILE)
#define M2TC_SCAN_R3_OFF(bf) (M2TC_SCAN_R2_OFF + ((bf) ? M2TC_T64(1) : 0))
#define M2TC_SCAN_KT2_OFF(bf) (M2TC_SCAN_R3_OFF(bf) + M2TC_TKT(bf))
#define M2TC_SCAN_KT3_OFF(bf) (M2TC_SCAN_R3_OFF(bf) + 2 * M2TC_TKT(bf))
#define M2TC_SCAN_R3_BYTES(bf) M2TC_MAX(3 * M2TC_TKT(bf), M2TC_T64(bf))
#define M2TC_SCAN_BYTES(bf)                                                                    \
    M2TC_MAX(M2TC_SCAN_R3_OFF(bf) + M2TC_SCAN_R3_BYTES(bf), M2TC_SCAN_R2_OFF + M2TC_F64TILE)
/* ---- scan_seq (grid: ceil(P/32), heads, sequences): the on-chip scan on the tensor cores.
 * One block walks a sequence's chunks in order holding its 32 x N slice of the state in
 * (dynamic) shared memory as float32; per chunk, one loop over N in steps of M2TC_KT computes
 * CB (tiles t <= w), Y2 = C S^T (2 channel tiles per warp) from a rounded copy of the state's
 * k-tile, and updates that k-tile of the state, S = e^(cs_last) S + (w . X)^T Bm (warps 0 and
 * 1, one 16 x 16 tile each, accumulating onto the decayed state); then W, Y1 = W X and the
 * epilogue as chunk_scan, on 32 channels. Byte layout (from a 128-byte aligned base):
 *   cs, d, w [64] floats | S [32][lds] float | R1 float [64][M2TC_FLD] (CB, W in place for
 *   tf32, later Y1 [64][M2TC_YLD]) | bf16: W [64][LD64] | X, Xw [64][LDX] | C, Bm k-tiles
 *   [64][LDKT] | state k-tile [32][LDKT]; Y2 [64][M2TC_YLD] float is staged over X and Xw. */
#define M2TC_SEQ_PC 32    /* channels per block */
#define M2TC_SEQ_NMAX 256 /* the largest N (the dynamic block is then ~81 KB) */
#define M2TC_YLD 36       /* row length (floats) of a 32-wide float staging tile */
#define M2TC_LDX(bf) ((bf) ? 40 : 36)
typedef struct m2tc_seq_layout {
    int npad, lds; /* N rounded up to 16; the state's row length (floats) */
    int s, r1, w, xs, xw, ka, kb, kc, y2, bytes;
} m2tc_seq_layout;
M2TC_HD void m2tc_seq_layout_of(int bf, int N, m2tc_seq_layout *L) {
    const int es = M2TC_ESIZE(bf), xsz = 64 * M2TC_LDX(bf) * es;
    L->npad = (N + 15) / 16 * 16;
    L->lds = L->npad + 4;
    L->s = 3 * 64 * 4;
    L->r1 = L->s + M2TC_SEQ_PC * L->lds * 4;
    L->w = bf ? L->r1 + M2TC_F64TILE : L->r1;
    L->xs = L->r1 + M2TC_F64TILE + (bf ? M2TC_T64(1) : 0);
    L->xw = L->xs + xsz;
    L->ka = L->xw + xsz;
    L->kb = L->ka + M2TC_TKT(bf);
    L->kc = L->kb + M2TC_TKT(bf);
    L->y2 = L->xs;
    L->bytes = L->kc + M2TC_SEQ_PC * M2TC_LDKT(bf) * es;
}

/* ---- the backward (ssd_tc_bwd.cuh): 128 threads, 64 x 64 output tiles (warp w: rows
 * [16w, 16w + 16), 4 column tiles), k in 64-wide tiles. Shared block: 3 x 64 floats (per-row
 * weights, or the 128 partial sums of a reduction) | A tile | B tile, each M2TC_F64TILE
 * bytes: a [64][LD64] tile of the MMA type (tf32 fills it, bf16 half of it), later a float
 * [64][M2TC_FLD] staging tile. */
#define M2TC_BWD_A_OFF (3 * 64 * 4)
#define M2TC_BWD_B_OFF (M2TC_BWD_A_OFF + M2TC_F64TILE)
#define M2TC_BWD_BYTES (M2TC_BWD_B_OFF + M2TC_F64TILE)
/* the k range [*kb, *ke) of row tile w in a causal token product over a chunk of len tokens
 * (k-steps of k): mode 0 rows i need k <= i (dC's dCBg), mode 1 k >= i (dB's dCBg^T, dx's
 * W^T); the tokens from len on are zero and left out */
M2TC_HD void m2tc_bwd_krange(int mode, int w, int len, int k, int *kb, int *ke) {
    const int klen = m2tc_ksteps(len, k) * k;
    *kb = mode ? 16 * w : 0;
    *ke = mode || klen < 16 * (w + 1) ? klen : 16 * (w + 1);
}
/* the k end of a 64-wide tile of which rem (> 0) columns are real */
M2TC_HD int m2tc_bwd_kend(int rem, int k) {
    const int e = m2tc_ksteps(rem, k) * k;
    return e < M2TC_TILE ? e : M2TC_TILE;
}

/* the largest static shared block either kernel may use */
#define M2TC_SMEM_MAX (48 * 1024)

#endif /* MAMBA2C_CUDA_TC_TILES_H */
