/*
 * test_tc_tiles.c — a host emulation of the CUDA tensor-core SSD kernels' tile arithmetic
 * (src/cuda/ssd_tc.cuh over src/cuda/tc_tiles.h), since no GPU runs them in CI. For the
 * backward's kernels (ssd_tc_bwd.cuh, whose values the emulated device checks) only their
 * layout, wmma pointers, causal k ranges and the split-tf32 product's accuracy.
 *
 * The two kernels are mirrored step by step over an emulated shared-memory block laid out by
 * the macros of tc_tiles.h: the same cooperative loads (with tf32 or bf16 rounding, or none),
 * wmma::load_matrix_sync emulated by its documented element addressing (row_major (r, c) at
 * ptr[r * ldm + c], col_major at ptr[r + c * ldm]), 16 x 16 x k tile products for mma_sync,
 * the same warp / tile / k-step loops (the causal skip, the CB tiles left out), the same
 * staging and epilogue indexing. Checked:
 *  - every pointer handed to a wmma load or store is 32-byte aligned and every ldm a multiple
 *    of 16 bytes; each kernel's shared block is at most 48 KB; the shared regions that are
 *    live at the same time do not overlap;
 *  - coverage: CB tiles that are not computed are filled with NaN, so reading one poisons
 *    the result; every output element is written exactly once;
 *  - values: one chunk's states and outputs against a float64 evaluation of the same
 *    formulas, on random signed inputs (SPEC §8's distributions) at awkward sizes
 *    (len 1..64, P and N not multiples of 16, N above one k-tile): without rounding within
 *    TH_TOL_F32 (the tiling is exact), with tf32 rounding within TOL_TF32, bf16 within
 *    TH_TOL_BF16-like 1e-2 (the separate tensor-core mode of docs/gpu.md §3a).
 * What it cannot check: the hardware's fragment layouts and the MMA's own summation order.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/tc_tiles.h"

#define TOL_F32 1e-5  /* SPEC §8 float32: the tiling alone must not add error */
#define TOL_TF32 2e-3 /* the tensor-core tf32 mode (docs/gpu.md §3a) */
#define TOL_BF16 1e-2 /* SPEC §8 bf16 outputs */

static int failures = 0, checks = 0;
static void check(int ok, const char *what, int a, int b) {
    checks++;
    if (!ok) {
        if (failures < 20) printf("FAIL: %s (%d, %d)\n", what, a, b);
        failures++;
    }
}

/* ---- the emulated shared memory and element types ---------------------------------------- */
#define SEQ_SMEM_LIMIT 101376 /* the smallest opt-in dynamic shared block of sm_80+ (sm_86/89: 99 KB) */
static unsigned char sm[SEQ_SMEM_LIMIT];
static int mode; /* 0 tf32, 1 bf16, 2 no rounding (float storage, the tf32 layout) */
#define BFM (mode == 1)

static float f_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_f(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float round_tf32(float v) { /* cvt.rna.tf32.f32: nearest, ties away from zero */
    uint32_t u = bits_f(v);
    if ((u & 0x7F800000u) == 0x7F800000u) return v;
    u += 0x1000u;
    return f_bits(u & 0xFFFFE000u);
}
static uint16_t to_bf16(float v) { /* nearest even */
    uint32_t u = bits_f(v);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
/* element e of the MMA-typed array at byte offset off */
static void put_t(int off, int e, float v) {
    if (BFM) {
        uint16_t h = to_bf16(v);
        memcpy(sm + off + 2 * e, &h, 2);
    } else {
        float f = mode == 0 ? round_tf32(v) : v;
        memcpy(sm + off + 4 * e, &f, 4);
    }
}
static float get_t(int off, int e) {
    if (BFM) {
        uint16_t h;
        memcpy(&h, sm + off + 2 * e, 2);
        return f_bits((uint32_t)h << 16);
    }
    float f;
    memcpy(&f, sm + off + 4 * e, 4);
    return f;
}
static void put_f(int off, int e, float v) { memcpy(sm + off + 4 * e, &v, 4); }
static float get_f(int off, int e) { float f; memcpy(&f, sm + off + 4 * e, 4); return f; }

/* wmma: an m x k (A) or k x n (B) fragment from byte offset off, ldm elements; 'r' row-major */
static void wmma_load(float *frag, int rows, int cols, int off, int ldm, char layout, int esz) {
    check(off % 32 == 0, "wmma load pointer 32-byte aligned", off, ldm);
    check((ldm * esz) % 16 == 0, "wmma load ldm a multiple of 16 bytes", off, ldm);
    check(off >= 0 && off < SEQ_SMEM_LIMIT, "wmma load inside the block", off, ldm);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            frag[r * cols + c] = get_t(off, layout == 'r' ? r * ldm + c : r + c * ldm);
}
static void wmma_mma(float acc[256], const float *a, const float *b, int k) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float s = acc[r * 16 + c];
            for (int q = 0; q < k; q++) s += a[r * k + q] * b[q * 16 + c];
            acc[r * 16 + c] = s;
        }
}
static void wmma_store(int off, const float acc[256], int ldm) {
    check(off % 32 == 0, "wmma store pointer 32-byte aligned", off, ldm);
    check((ldm * 4) % 16 == 0, "wmma store ldm a multiple of 16 bytes", off, ldm);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) put_f(off, r * ldm + c, acc[r * 16 + c]);
}

/* ---- random inputs of one chunk ---------------------------------------------------------- */
static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static double nrand(void) {
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

typedef struct chunk {
    int len, P, N;
    float x[64][80], B[64][160], C[64][160], S[80][160], d[64], cs[64];
} chunk;

static void make_chunk(chunk *k, int len, int P, int N) {
    k->len = len, k->P = P, k->N = N;
    const double A = -(0.1 + 0.4 * urand());
    double acc = 0;
    for (int j = 0; j < 64; j++) {
        const double dt = j < len ? log1p(exp(0.01 + 0.1 * urand())) : 0.0;
        acc += dt * A;
        k->d[j] = (float)dt;
        k->cs[j] = (float)acc;
        for (int p = 0; p < 80; p++) k->x[j][p] = (float)nrand();
        for (int n = 0; n < 160; n++) k->B[j][n] = (float)(nrand() / 5), k->C[j][n] = (float)(nrand() / 5);
    }
    for (int p = 0; p < 80; p++)
        for (int n = 0; n < 160; n++) k->S[p][n] = (float)(nrand() / 5);
}

static double nerr(const double *got, const double *want, int n) {
    double e = 0, r = 0;
    for (int i = 0; i < n; i++) e += (got[i] - want[i]) * (got[i] - want[i]), r += want[i] * want[i];
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* ---- chunk_state, mirrored: the block tile z of a [P, N] state ---------------------------- */
static void emu_state(const chunk *k, long long z, double *out, int *written) {
    const int ld = M2TC_LD64(BFM), K = M2TC_K(BFM), esz = BFM ? 2 : 4;
    const int xs = 0, bs = M2TC_STATE_BS_OFF(BFM);
    check(M2TC_STATE_BYTES(BFM) <= M2TC_SMEM_MAX, "chunk_state shared block <= 48 KB", BFM, 0);
    check(bs >= 64 * ld * esz, "chunk_state Xw and Bs apart", bs, 0);
    long long p0, n0;
    m2tc_state_tile(z, k->N, &p0, &n0);
    float wj[64];
    for (int t = 0; t < 64; t++) wj[t] = t < k->len ? expf(k->cs[63] - k->cs[t]) * k->d[t] : 0.0f;
    for (int e = 0; e < 64 * 64; e++) {
        const int j = e >> 6, q = e & 63;
        const long long p = p0 + q, n = n0 + q;
        put_t(xs, j * ld + q, j < k->len && p < k->P ? wj[j] * k->x[j][p] : 0.0f);
        put_t(bs, j * ld + q, j < k->len && n < k->N ? k->B[j][n] : 0.0f);
    }
    static float acc[4][4][256];
    memset(acc, 0, sizeof acc);
    const int ks = m2tc_ksteps(k->len, K);
    for (int w = 0; w < M2TC_WARPS; w++)
        for (int s = 0; s < ks; s++) {
            const int j0 = s * K;
            float a[16 * 16], b[16 * 16];
            wmma_load(a, 16, K, xs + (j0 * ld + 16 * w) * esz, ld, 'c', esz);
            for (int t = 0; t < 4; t++) {
                wmma_load(b, K, 16, bs + (j0 * ld + 16 * t) * esz, ld, 'r', esz);
                wmma_mma(acc[w][t], a, b, K);
            }
        }
    for (int w = 0; w < 4; w++)
        for (int t = 0; t < 4; t++) wmma_store((16 * w * M2TC_FLD + 16 * t) * 4, acc[w][t], M2TC_FLD);
    for (int e = 0; e < 64 * 64; e++) {
        const int r = e >> 6, q = e & 63;
        const long long p = p0 + r, n = n0 + q;
        if (p < k->P && n < k->N) {
            out[p * k->N + n] = get_f(0, r * M2TC_FLD + q);
            written[p * k->N + n]++;
        }
    }
}

/* ---- chunk_scan, mirrored: the block of channels [p0, p0 + 64) ---------------------------- */
static void emu_scan(const chunk *k, long long p0, double *out, int *written) {
    const int ldk = M2TC_LDKT(BFM), ldw = M2TC_LD64(BFM), K = M2TC_K(BFM), esz = BFM ? 2 : 4;
    const int r1 = M2TC_SCAN_R1_OFF, wt = BFM ? M2TC_SCAN_R2_OFF : M2TC_SCAN_R1_OFF;
    const int ka = M2TC_SCAN_R3_OFF(BFM), kb = M2TC_SCAN_KT2_OFF(BFM), kc = M2TC_SCAN_KT3_OFF(BFM);
    const int xs = ka, y2s = M2TC_SCAN_R2_OFF, len = k->len;
    check(M2TC_SCAN_BYTES(BFM) <= M2TC_SMEM_MAX, "chunk_scan shared block <= 48 KB", BFM, 0);
    check(r1 >= 2 * 64 * 4, "cs/d before R1", r1, 0);
    check(kc + 64 * ldk * esz <= M2TC_SCAN_BYTES(BFM), "three k-tiles inside R3", kc, 0);
    check(xs + 64 * ldw * esz <= M2TC_SCAN_BYTES(BFM), "the X tile inside R3", xs, 0);
    check(y2s + 64 * M2TC_FLD * 4 <= M2TC_SCAN_BYTES(BFM), "Y2 staging inside the block", y2s, 0);
    /* live together: W (wt) and X (R3); for bf16 W in R2 must end before R3 */
    check(!BFM || wt + 64 * ldw * esz <= ka, "W (R2) and X (R3) apart", wt, ka);
    check(r1 + 64 * M2TC_FLD * 4 <= y2s, "Y1 (R1) and Y2 staging apart", r1, y2s);
    float cs[64], dd[64];
    for (int t = 0; t < 64; t++) cs[t] = t < len ? k->cs[t] : 0.0f, dd[t] = t < len ? k->d[t] : 0.0f;
    static float acc[4][4][256], acc2[4][4][256];
    memset(acc, 0, sizeof acc);
    memset(acc2, 0, sizeof acc2);
    for (int e = 0; e < 64 * M2TC_FLD; e++) put_f(r1, e, NAN); /* unwritten CB tiles poison */
    for (int n0 = 0; n0 < k->N; n0 += M2TC_KT) {
        for (int e = 0; e < 64 * M2TC_KT; e++) {
            const int r = e / M2TC_KT, q = e % M2TC_KT, n = n0 + q;
            const long long p = p0 + r;
            const int tok = r < len && n < k->N;
            put_t(ka, r * ldk + q, tok ? k->C[r][n] : 0.0f);
            put_t(kb, r * ldk + q, tok ? k->B[r][n] : 0.0f);
            put_t(kc, r * ldk + q, p < k->P && n < k->N ? k->S[p][n] : 0.0f);
        }
        for (int w = 0; w < 4; w++)
            for (int kk = 0; kk < M2TC_KT; kk += K) {
                float a[16 * 16], b[16 * 16];
                wmma_load(a, 16, K, ka + (16 * w * ldk + kk) * esz, ldk, 'r', esz);
                for (int t = 0; t < 4; t++) {
                    if (m2tc_cb_tile_needed(w, t)) {
                        wmma_load(b, K, 16, kb + (16 * t * ldk + kk) * esz, ldk, 'c', esz);
                        wmma_mma(acc[w][t], a, b, K);
                    }
                    wmma_load(b, K, 16, kc + (16 * t * ldk + kk) * esz, ldk, 'c', esz);
                    wmma_mma(acc2[w][t], a, b, K);
                }
            }
    }
    for (int w = 0; w < 4; w++)
        for (int t = 0; t < 4; t++)
            if (m2tc_cb_tile_needed(w, t))
                wmma_store(r1 + (16 * w * M2TC_FLD + 16 * t) * 4, acc[w][t], M2TC_FLD);
    /* W in place (tf32: same bytes, same element) and X: W reads all of R1 before X lands in R3 */
    for (int e = 0; e < 64 * 64; e++) {
        const int i = e >> 6, j = e & 63;
        float v = 0.0f;
        if (i < len && j <= i) v = get_f(r1, i * M2TC_FLD + j) * expf(cs[i] - cs[j]) * dd[j];
        if (mode == 2) put_f(wt, i * ldw + j, v); else put_t(wt, i * ldw + j, v);
    }
    for (int e = 0; e < 64 * 64; e++) {
        const int i = e >> 6, j = e & 63;
        const long long p = p0 + j;
        put_t(xs, i * ldw + j, i < len && p < k->P ? k->x[i][p] : 0.0f);
    }
    memset(acc, 0, sizeof acc);
    const int jlen = m2tc_ksteps(len, K) * K;
    for (int w = 0; w < 4; w++) {
        const int jc = m2tc_causal_end(w), kend = jc < jlen ? jc : jlen;
        for (int kk = 0; kk < kend; kk += K) {
            float a[16 * 16], b[16 * 16];
            wmma_load(a, 16, K, wt + (16 * w * ldw + kk) * esz, ldw, 'r', esz);
            for (int t = 0; t < 4; t++) {
                wmma_load(b, K, 16, xs + (kk * ldw + 16 * t) * esz, ldw, 'r', esz);
                wmma_mma(acc[w][t], a, b, K);
            }
        }
    }
    for (int w = 0; w < 4; w++)
        for (int t = 0; t < 4; t++) {
            wmma_store(r1 + (16 * w * M2TC_FLD + 16 * t) * 4, acc[w][t], M2TC_FLD);
            wmma_store(y2s + (16 * w * M2TC_FLD + 16 * t) * 4, acc2[w][t], M2TC_FLD);
        }
    for (int e = 0; e < 64 * 64; e++) {
        const int i = e >> 6, q = e & 63;
        const long long p = p0 + q;
        if (i < len && p < k->P) {
            out[i * k->P + p] = get_f(r1, i * M2TC_FLD + q) +
                                expf(cs[i]) * get_f(y2s, i * M2TC_FLD + q);
            written[i * k->P + p]++;
        }
    }
}

/* ---- scan_seq, mirrored: one sequence of nck chunks (k[0..nck-1]; the state passes from one
 * to the next; k[c].S is ignored but k[0].S is the entering state), channels [p0, p0 + 32) */
static void emu_seq(const chunk *k, int nck, long long p0, double *out, double *fin, int *written) {
    const int N = k[0].N, P = k[0].P;
    m2tc_seq_layout L;
    m2tc_seq_layout_of(BFM, N, &L);
    const int ldk = M2TC_LDKT(BFM), ldw = M2TC_LD64(BFM), ldx = M2TC_LDX(BFM), K = M2TC_K(BFM);
    const int esz = BFM ? 2 : 4, lds = L.lds, npad = L.npad;
    check(L.bytes <= SEQ_SMEM_LIMIT, "scan_seq dynamic block <= 99 KB", L.bytes, N);
    check(L.s % 32 == 0 && L.r1 % 32 == 0 && L.w % 32 == 0 && L.xs % 32 == 0 && L.xw % 32 == 0 &&
              L.ka % 32 == 0 && L.kb % 32 == 0 && L.kc % 32 == 0, "scan_seq regions 32-byte aligned", L.s, N);
    check(L.r1 >= L.s + M2TC_SEQ_PC * lds * 4, "S before R1", L.r1, N);
    check(!BFM || L.w + 64 * ldw * esz <= L.xs, "W (bf16) before X", L.w, L.xs);
    check(L.r1 + 64 * M2TC_YLD * 4 <= L.r1 + M2TC_F64TILE, "Y1 staging inside R1", L.r1, 0);
    check(L.y2 + 64 * M2TC_YLD * 4 <= L.ka, "Y2 staging over X and Xw only", L.y2, L.ka);
    float cs[64], dd[64], wl[64];
    for (int e = 0; e < M2TC_SEQ_PC * npad; e++) {
        const int r = e / npad, n = e % npad;
        const long long p = p0 + r;
        put_f(L.s, r * lds + n, p < P && n < N ? k[0].S[p][n] : 0.0f);
    }
    static float acc[4][4][256], acc2[4][2][256], sf[256];
    for (int c = 0; c < nck; c++) {
        const chunk *q = &k[c];
        const int len = q->len;
        for (int t = 0; t < 64; t++) {
            cs[t] = t < len ? q->cs[t] : 0.0f, dd[t] = t < len ? q->d[t] : 0.0f;
            wl[t] = t < len ? expf(q->cs[63] - q->cs[t]) * q->d[t] : 0.0f;
        }
        for (int e = 0; e < 64 * M2TC_SEQ_PC; e++) {
            const int j = e >> 5, qq = e & 31;
            const long long p = p0 + qq;
            const float xv = j < len && p < P ? q->x[j][p] : 0.0f;
            put_t(L.xs, j * ldx + qq, xv);
            put_t(L.xw, j * ldx + qq, wl[j] * xv);
        }
        const float decay = expf(q->cs[63]);
        const int jlen = m2tc_ksteps(len, K) * K;
        memset(acc, 0, sizeof acc);
        memset(acc2, 0, sizeof acc2);
        for (int e = 0; e < 64 * M2TC_FLD; e++) put_f(L.r1, e, NAN);
        for (int n0 = 0; n0 < npad; n0 += M2TC_KT) {
            for (int e = 0; e < 64 * M2TC_KT; e++) {
                const int r = e / M2TC_KT, qq = e % M2TC_KT, n = n0 + qq;
                const int tok = r < len && n < N;
                put_t(L.ka, r * ldk + qq, tok ? q->C[r][n] : 0.0f);
                put_t(L.kb, r * ldk + qq, tok ? q->B[r][n] : 0.0f);
                if (r < M2TC_SEQ_PC) put_t(L.kc, r * ldk + qq, get_f(L.s, r * lds + n0 + qq));
            }
            for (int w = 0; w < 4; w++) {
                for (int kk = 0; kk < M2TC_KT; kk += K) {
                    float a[256], b[256];
                    wmma_load(a, 16, K, L.ka + (16 * w * ldk + kk) * esz, ldk, 'r', esz);
                    for (int t = 0; t < 4; t++)
                        if (m2tc_cb_tile_needed(w, t)) {
                            wmma_load(b, K, 16, L.kb + (16 * t * ldk + kk) * esz, ldk, 'c', esz);
                            wmma_mma(acc[w][t], a, b, K);
                        }
                    for (int t = 0; t < 2; t++) {
                        wmma_load(b, K, 16, L.kc + (16 * t * ldk + kk) * esz, ldk, 'c', esz);
                        wmma_mma(acc2[w][t], a, b, K);
                    }
                }
                if (w < 2) {
                    const int so = L.s + (16 * w * lds + n0) * 4;
                    check(so % 32 == 0 && (lds * 4) % 16 == 0, "state tile load aligned", so, lds);
                    for (int r = 0; r < 16; r++)
                        for (int cc = 0; cc < 16; cc++) sf[r * 16 + cc] = get_f(so, r * lds + cc) * decay;
                    for (int kk = 0; kk < jlen; kk += K) {
                        float a[256], b[256];
                        wmma_load(a, 16, K, L.xw + (kk * ldx + 16 * w) * esz, ldx, 'c', esz);
                        wmma_load(b, K, 16, L.kb + (kk * ldk) * esz, ldk, 'r', esz);
                        wmma_mma(sf, a, b, K);
                    }
                    wmma_store(so, sf, lds);
                }
            }
        }
        for (int w = 0; w < 4; w++)
            for (int t = 0; t < 4; t++)
                if (m2tc_cb_tile_needed(w, t))
                    wmma_store(L.r1 + (16 * w * M2TC_FLD + 16 * t) * 4, acc[w][t], M2TC_FLD);
        for (int e = 0; e < 64 * 64; e++) {
            const int i = e >> 6, j = e & 63;
            float v = 0.0f;
            if (i < len && j <= i) v = get_f(L.r1, i * M2TC_FLD + j) * expf(cs[i] - cs[j]) * dd[j];
            put_t(L.w, i * ldw + j, v);
        }
        memset(acc, 0, sizeof acc);
        for (int w = 0; w < 4; w++) {
            const int jc = m2tc_causal_end(w), kend = jc < jlen ? jc : jlen;
            for (int kk = 0; kk < kend; kk += K) {
                float a[256], b[256];
                wmma_load(a, 16, K, L.w + (16 * w * ldw + kk) * esz, ldw, 'r', esz);
                for (int t = 0; t < 2; t++) {
                    wmma_load(b, K, 16, L.xs + (kk * ldx + 16 * t) * esz, ldx, 'r', esz);
                    wmma_mma(acc[w][t], a, b, K);
                }
            }
        }
        for (int w = 0; w < 4; w++)
            for (int t = 0; t < 2; t++) {
                wmma_store(L.r1 + (16 * w * M2TC_YLD + 16 * t) * 4, acc[w][t], M2TC_YLD);
                wmma_store(L.y2 + (16 * w * M2TC_YLD + 16 * t) * 4, acc2[w][t], M2TC_YLD);
            }
        for (int e = 0; e < 64 * M2TC_SEQ_PC; e++) {
            const int i = e >> 5, qq = e & 31;
            const long long p = p0 + qq;
            if (i < len && p < P) {
                const long long o = ((long long)c * 64 + i) * P + p;
                out[o] = get_f(L.r1, i * M2TC_YLD + qq) + expf(cs[i]) * get_f(L.y2, i * M2TC_YLD + qq);
                written[o]++;
            }
        }
    }
    for (int e = 0; e < M2TC_SEQ_PC * npad; e++) {
        const int r = e / npad, n = e % npad;
        const long long p = p0 + r;
        if (p < P && n < N) fin[p * N + n] = get_f(L.s, r * lds + n);
    }
}

/* float64 reference of a sequence of chunks: out [c*64 + i][p] and the final state */
static void ref_seq(const chunk *k, int nck, double *y, double *fin) {
    const int P = k[0].P, N = k[0].N;
    static double S[80][160];
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++) S[p][n] = k[0].S[p][n];
    for (int c = 0; c < nck; c++) {
        const chunk *q = &k[c];
        for (int i = 0; i < q->len; i++)
            for (int p = 0; p < P; p++) {
                double s1 = 0, s2 = 0;
                for (int j = 0; j <= i; j++) {
                    double cb = 0;
                    for (int n = 0; n < N; n++) cb += (double)q->C[i][n] * q->B[j][n];
                    s1 += cb * exp((double)q->cs[i] - q->cs[j]) * q->d[j] * q->x[j][p];
                }
                for (int n = 0; n < N; n++) s2 += (double)q->C[i][n] * S[p][n];
                y[((long long)c * 64 + i) * P + p] = s1 + exp((double)q->cs[i]) * s2;
            }
        for (int p = 0; p < P; p++)
            for (int n = 0; n < N; n++) {
                double d = 0;
                for (int j = 0; j < q->len; j++)
                    d += exp((double)q->cs[63] - q->cs[j]) * q->d[j] * q->x[j][p] * q->B[j][n];
                S[p][n] = exp((double)q->cs[63]) * S[p][n] + d;
            }
    }
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++) fin[p * N + n] = S[p][n];
}

/* float64 references of one chunk */
static void ref_chunk(const chunk *k, double *st, double *y) {
    const int len = k->len, P = k->P, N = k->N;
    for (int p = 0; p < P; p++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int j = 0; j < len; j++)
                s += exp((double)k->cs[63] - k->cs[j]) * k->d[j] * k->x[j][p] * k->B[j][n];
            st[p * N + n] = s;
        }
    for (int i = 0; i < len; i++)
        for (int p = 0; p < P; p++) {
            double s = 0, s2 = 0;
            for (int j = 0; j <= i; j++) {
                double cb = 0;
                for (int n = 0; n < N; n++) cb += (double)k->C[i][n] * k->B[j][n];
                s += cb * exp((double)k->cs[i] - k->cs[j]) * k->d[j] * k->x[j][p];
            }
            for (int n = 0; n < N; n++) s2 += (double)k->C[i][n] * k->S[p][n];
            y[i * P + p] = s + exp((double)k->cs[i]) * s2;
        }
}

/* ---- the backward's tiles (ssd_tc_bwd.cuh): layout, wmma pointers, causal k ranges ------ */
static void check_bwd(void) {
    for (int bf = 0; bf < 2; bf++) {
        const int ld = M2TC_LD64(bf), K = M2TC_K(bf), esz = bf ? 2 : 4;
        const int A = M2TC_BWD_A_OFF, B = M2TC_BWD_B_OFF;
        check(M2TC_BWD_BYTES <= M2TC_SMEM_MAX, "backward shared block <= 48 KB", bf, 0);
        check(A >= 3 * 64 * 4 && A % 128 == 0, "backward vectors before A, A aligned", A, bf);
        check(B - A >= 64 * ld * esz && B - A >= 64 * M2TC_FLD * 4, "A tile and staging fit", B, bf);
        check(M2TC_BWD_BYTES - B >= 64 * ld * esz && M2TC_BWD_BYTES - B >= 64 * M2TC_FLD * 4,
              "B tile and staging fit", B, bf);
        for (int w = 0; w < M2TC_WARPS; w++)
            for (int kk = 0; kk < 64; kk += K)
                for (int col = 0; col < 2; col++) { /* mma64: row- and column-major tiles */
                    const int ea = col ? kk * ld + 16 * w : 16 * w * ld + kk;
                    const int eb = col ? 16 * w * ld + kk : kk * ld + 16 * w; /* t = w */
                    check((A + ea * esz) % 32 == 0 && (B + eb * esz) % 32 == 0,
                          "backward wmma load 32-byte aligned", w, kk);
                    /* the last element a fragment reads stays in the 64 x ld tile */
                    const int last = col ? ea + (K - 1) * ld + 15 : ea + 15 * ld + K - 1;
                    check(last < 64 * ld && (col ? kk + K - 1 : 16 * w + 15) < 64,
                          "backward fragment inside its tile", w, kk);
                }
        for (int w = 0; w < M2TC_WARPS; w++)
            for (int t = 0; t < 4; t++)
                check((A + 4 * (16 * w * M2TC_FLD + 16 * t)) % 32 == 0,
                      "backward staging store aligned", w, t);
        /* causal ranges: every needed k inside, none past the chunk's k-steps */
        for (int m = 0; m < 2; m++)
            for (int len = 1; len <= 64; len++)
                for (int w = 0; w < M2TC_WARPS; w++) {
                    int kb, ke;
                    m2tc_bwd_krange(m, w, len, K, &kb, &ke);
                    check(kb % K == 0 && ke % K == 0 && kb >= 0 && ke <= 64, "krange steps", kb, ke);
                    check(ke <= m2tc_ksteps(len, K) * K, "krange ends at the chunk", len, ke);
                    for (int i = 16 * w; i < 16 * w + 16 && i < len; i++)
                        for (int k = 0; k < len; k++)
                            if (m ? k >= i : k <= i) check(kb <= k && k < ke, "krange covers", i, k);
                }
        for (int rem = 1; rem <= 80; rem++) {
            const int e = m2tc_bwd_kend(rem, K);
            check(e % K == 0 && e <= 64 && e >= (rem < 64 ? rem : 64), "kend", rem, e);
        }
    }
    /* split tf32 (mma64_3xtf32): 64-term dot products of SPEC §8-like inputs within TOL_F32 */
    double worst = 0;
    for (int r = 0; r < 200; r++) {
        double want = 0, mag = 0;
        float got = 0;
        for (int k = 0; k < 64; k++) {
            const float a = (float)nrand(), b = (float)(nrand() / 5);
            const float ah = round_tf32(a), al = round_tf32(a - ah);
            const float bh = round_tf32(b), bl = round_tf32(b - bh);
            got += al * bh, got += ah * bl, got += ah * bh;
            want += (double)a * b, mag += fabs((double)a * b);
        }
        const double e = fabs(got - want) / mag;
        worst = e > worst ? e : worst;
    }
    printf("backward tiles checked; split tf32 64-term dot: worst error %.2e of sum |a b|\n", worst);
    check(worst <= TOL_F32, "split tf32 keeps float32 accuracy", 0, 0);
}

int main(void) {
    static const int shapes[][3] = {{64, 64, 64}, {1, 1, 1}, {37, 17, 9}, {64, 80, 160},
                                    {50, 3, 5}, {63, 64, 128}, {16, 16, 16}, {17, 40, 33}};
    static const char *const mname[3] = {"tf32", "bf16", "f32 (no rounding)"};
    static const double tol[3] = {TOL_TF32, TOL_BF16, TOL_F32};
    static chunk k;
    double *st = malloc(80 * 160 * sizeof(double)), *stw = malloc(80 * 160 * sizeof(double));
    double *y = malloc(64 * 80 * sizeof(double)), *yw = malloc(64 * 80 * sizeof(double));
    int *wr = malloc(80 * 160 * sizeof(int));
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        make_chunk(&k, shapes[s][0], shapes[s][1], shapes[s][2]);
        ref_chunk(&k, stw, yw);
        for (mode = 0; mode < 3; mode++) {
            const int P = k.P, N = k.N;
            memset(wr, 0, 80 * 160 * sizeof(int));
            const long long nz = ((P + 63) / 64) * ((N + 63) / 64);
            for (long long z = 0; z < nz; z++) emu_state(&k, z, st, wr);
            for (int e = 0; e < P * N; e++) check(wr[e] == 1, "state element written once", e, wr[e]);
            const double es = nerr(st, stw, P * N);
            memset(wr, 0, 80 * 160 * sizeof(int));
            for (long long p0 = 0; p0 < P; p0 += 64) emu_scan(&k, p0, y, wr);
            for (int e = 0; e < k.len * P; e++) check(wr[e] == 1, "output element written once", e, wr[e]);
            const double ey = nerr(y, yw, k.len * P);
            printf("len %2d P %2d N %3d  %-17s  states %.2e  out %.2e  (tol %.0e)\n", k.len, P, N,
                   mname[mode], es, ey, tol[mode]);
            check(es <= tol[mode] && !isnan(es), "states within tolerance", s, mode);
            check(ey <= tol[mode] && !isnan(ey), "out within tolerance", s, mode);
        }
    }
    /* sequences of chunks through the on-chip scan (the state on chip between chunks) */
    static const int seqs[][4] = {{3, 64, 64, 64}, {2, 37, 17, 9}, {3, 50, 80, 160}, {1, 1, 1, 1},
                                  {2, 63, 33, 128}};
    static chunk ks[3];
    const int ymax = 3 * 64 * 80;
    double *ys = malloc(ymax * sizeof(double)), *ysw = malloc(ymax * sizeof(double));
    int *wy = malloc(ymax * sizeof(int));
    for (int s = 0; s < (int)(sizeof seqs / sizeof seqs[0]); s++) {
        const int nck = seqs[s][0], P = seqs[s][2], N = seqs[s][3];
        for (int c = 0; c < nck; c++) make_chunk(&ks[c], c == nck - 1 ? seqs[s][1] : 64, P, N);
        ref_seq(ks, nck, ysw, stw);
        for (mode = 0; mode < 3; mode++) {
            memset(wy, 0, ymax * sizeof(int));
            for (long long p0 = 0; p0 < P; p0 += M2TC_SEQ_PC) emu_seq(ks, nck, p0, ys, st, wy);
            int ny = 0;
            for (int c = 0; c < nck; c++)
                for (int i = 0; i < ks[c].len; i++)
                    for (int p = 0; p < P; p++) {
                        const int o = (c * 64 + i) * P + p;
                        check(wy[o] == 1, "seq output element written once", o, wy[o]);
                        ys[ny] = ys[o], ysw[ny] = ysw[o], ny++; /* compact (o >= ny) */
                    }
            const double ey = nerr(ys, ysw, ny), ef = nerr(st, stw, P * N);
            printf("seq %d chunks, last len %2d P %2d N %3d  %-17s  out %.2e  final %.2e\n", nck,
                   seqs[s][1], P, N, mname[mode], ey, ef);
            check(ey <= tol[mode] && !isnan(ey), "seq out within tolerance", s, mode);
            check(ef <= tol[mode] && !isnan(ef), "seq final within tolerance", s, mode);
            ref_seq(ks, nck, ysw, stw); /* the compaction overwrote the reference */
        }
    }
    free(ys), free(ysw), free(wy);
    free(st), free(stw), free(y), free(yw), free(wr);
    check_bwd();
    printf("%s: %d checks, %d failures\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}
