/*
 * linear_cpu.c — the CPU backend of the decode linear layer (mamba2_linear_forward): output
 * row blocks, threads, bias and accumulation. The dot products live in the per-ISA kernel
 * sets (linear_kernels.h), picked from ctx->isa at every call.
 *
 * One task per ROWS output rows (a fixed count, never derived from the thread count); the
 * pool hands tasks out dynamically. A task walks its rows in tiles: with M == 1 four weight
 * rows at a time, rows j, j + 16, j + 32 and j + 48 of a whole task (the 4x1s tile, for
 * j = 0 .. 15): four long streams of 16 rows, which one core reads from memory faster than one
 * stream or four short ones (docs/decode.md, "Four streams"; a partial last task takes 4x1 /
 * 1x1), otherwise two weight rows against two rows of x (2x2, then 2x1 for an odd last row),
 * so each group of two x rows re-reads the tile's weight rows from L1.
 * Q8_0 weights take one weight row per tile (1x1, 1x2): four or two rows side by side are
 * four or two short streams (a 1024-wide row is 17 cache lines), which the hardware
 * prefetchers follow worse than the task's rows read in address order (measured ~1.5x from
 * memory, docs/decode.md).
 * Every out[m,o] is one kernel chain whatever the tile (linear_kernels.h), so results are
 * bitwise identical for every thread count, every M and every position of a row.
 * With quantize_x (Q8_0 weights) x is first rounded to Q8_0 blocks here, once per call in
 * the calling thread (q8x_quantize_row: plain C, the same bits on every kernel set), and the
 * same task split runs the integer-activation tiles (linear_q8x_impl.h, one weight row at a
 * time) on that copy.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(M2_KSETS_NEON) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "core/internal.h"
#include "core/linear.h"
#include "cpu/cpu.h"
#include "cpu/linear_kernels.h"

/* Output rows per task: 64 rows of a 1024-wide f32 weight are 256 KiB, a long sequential read
 * per task while a 1024-output layer still gives 16 tasks to share between threads. */
#define ROWS 64

static const m2_linear_kernels *kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86)
    if (ctx->isa == M2_ISA_AVX512) return &m2_linear_kernels_avx512;
    return ctx->isa == M2_ISA_AVX2 ? &m2_linear_kernels_avx2 : &m2_linear_kernels_scalar;
#elif defined(M2_KSETS_NEON)
    return ctx->isa == M2_ISA_NEON ? &m2_linear_kernels_neon : &m2_linear_kernels_scalar;
#else
    (void)ctx;
    return &m2_linear_kernels_scalar;
#endif
}

typedef struct lin_arg {
    const m2_linear_problem *pr;
    const m2_lin_tile_fn *tile; /* the format's row of the table */
} lin_arg;

/* out[m, o .. o+nr) from res (res[mi * 4 + r] for row m = m0 + mi) */
static void store(const m2_linear_problem *pr, int64_t o, int nr, int64_t m0, int mb,
                  const float *res) {
    const float *bias = (const float *)pr->bias.p;
    for (int mi = 0; mi < mb; mi++) {
        float *dst = (float *)pr->out.p + (m0 + mi) * pr->out.s[0] + o;
        for (int r = 0; r < nr; r++) {
            float v = res[mi * 4 + r];
            if (bias) v += bias[o + r];
            dst[r] = pr->accumulate ? dst[r] + v : v;
        }
    }
}

/* M == 1 in whole tasks: the 4x1s tile on rows o, o + SPREAD, o + 2 SPREAD, o + 3 SPREAD */
#define SPREAD (ROWS / 4)
static void store_spread(const m2_linear_problem *pr, int64_t o, const float *res) {
    for (int r = 0; r < 4; r++) store(pr, o + r * SPREAD, 1, 0, 1, res + r);
}

static void lin_task(void *arg_, int64_t task, int thread) {
    (void)thread;
    const lin_arg *a = arg_;
    const m2_linear_problem *pr = a->pr;
    const int64_t o1 = (task + 1) * ROWS < pr->O ? (task + 1) * ROWS : pr->O;
    const unsigned char *w = (const unsigned char *)pr->w.p;
    const int64_t wrb = pr->w_row_bytes, xs = pr->x.s[0], I = pr->I;
    const float *x = (const float *)pr->x.p;
    float res[8];
    int64_t o = task * ROWS;
    /* Q8_0: one weight row per tile, so the task's rows stream in address order (its rows
     * are short: 17 cache lines at I = 1024; docs/decode.md) */
    const int one_row = pr->w_dtype == MAMBA2_DTYPE_Q8_0;
    if (pr->M == 1) {
        if (!one_row && o1 - o == ROWS) {
            for (int j = 0; j < SPREAD; j++) {
                a->tile[M2_LIN_4x1S](I, w + (o + j) * wrb, wrb * SPREAD, x, xs, res);
                store_spread(pr, o + j, res);
            }
            return;
        }
        for (; o + 4 <= o1 && !one_row; o += 4) {
            a->tile[M2_LIN_4x1](I, w + o * wrb, wrb, x, xs, res);
            store(pr, o, 4, 0, 1, res);
        }
        for (; o < o1; o++) {
            a->tile[M2_LIN_1x1](I, w + o * wrb, wrb, x, xs, res);
            store(pr, o, 1, 0, 1, res);
        }
        return;
    }
    for (; o < o1; o += one_row ? 1 : 2) {
        const int nr = o + 2 <= o1 && !one_row ? 2 : 1;
        const unsigned char *wo = w + o * wrb;
        int64_t m = 0;
        for (; m + 2 <= pr->M; m += 2) {
            a->tile[nr == 2 ? M2_LIN_2x2 : M2_LIN_1x2](I, wo, wrb, x + m * xs, xs, res);
            store(pr, o, nr, m, 2, res);
        }
        if (m < pr->M) {
            a->tile[nr == 2 ? M2_LIN_2x1 : M2_LIN_1x1](I, wo, wrb, x + m * xs, xs, res);
            store(pr, o, nr, m, 1, res);
        }
    }
}

/* ---- integer activations (quantize_x) ------------------------------------------------- */

static const m2_linear_q8x_kernels *q8x_kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86)
    /* the avx512 level implies the OS saves the zmm state; VNNI is one more cpuid bit */
    if (ctx->isa == M2_ISA_AVX512 && __builtin_cpu_supports("avx512vnni"))
        return &m2_linear_q8x_avx512vnni;
    return ctx->isa == M2_ISA_AVX2 || ctx->isa == M2_ISA_AVX512 ? &m2_linear_q8x_avx2
                                                                : &m2_linear_q8x_scalar;
#elif defined(M2_KSETS_NEON)
    if (ctx->isa != M2_ISA_NEON) return &m2_linear_q8x_scalar;
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) return &m2_linear_q8x_neondot;
#endif
    return &m2_linear_q8x_neon;
#else
    (void)ctx;
    return &m2_linear_q8x_scalar;
#endif
}

/* Row x[0 .. I) as Q8_0 blocks into dst (the layout of linear_kernels.h): per block
 * dx = amax / 127 and qx_j = x_j / dx rounded to nearest even (x / 1 when dx == 0: all x_j
 * are zero then, or too small to matter), clamped to ±127 (x_j / dx <= 127 (1 + 2^-23)
 * anyway). amax is the largest |x_j| taken on the bits, so a NaN or inf anywhere in the
 * block is seen (a float max would drop a NaN): then dx = NaN and qx = 0. Rounding:
 * adding and subtracting 1.5 · 2^23 rounds |v| < 2^22 to an integer in the default
 * rounding mode, with no libm call and the same bits on every target. */
static void q8x_quantize_row(int64_t I, const float *x, unsigned char *dst) {
    const int64_t nb = I / 32;
    int8_t *q = (int8_t *)dst;
    float *d = (float *)(void *)(dst + nb * 32);
    for (int64_t b = 0; b < nb; b++, x += 32, q += 32) {
        uint32_t amax = 0;
        for (int j = 0; j < 32; j++) {
            uint32_t u;
            memcpy(&u, &x[j], sizeof u);
            u &= 0x7FFFFFFFu;
            amax = u > amax ? u : amax;
        }
        if (amax >= 0x7F800000u) {
            d[b] = NAN;
            memset(q, 0, 32);
            continue;
        }
        float a;
        memcpy(&a, &amax, sizeof a);
        const float db = a / 127.0f, div = db != 0.0f ? db : 1.0f;
        d[b] = db;
        for (int j = 0; j < 32; j++) {
            float v = x[j] / div;
            v = (v + 12582912.0f) - 12582912.0f;
            v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
            q[j] = (int8_t)(int)v;
        }
    }
}

typedef struct q8x_arg {
    const m2_linear_problem *pr;
    const m2_lin_q8x_tile_fn *tile;
    const unsigned char *xq; /* M rows of xqs bytes */
    int64_t xqs;
} q8x_arg;

/* lin_task's split over the quantized x; the q8x tiles take one weight row at a time (its
 * rows then stream in address order: linear_q8x_impl.h), and four, two, one rows of x */
static void q8x_task(void *arg_, int64_t task, int thread) {
    (void)thread;
    const q8x_arg *a = arg_;
    const m2_linear_problem *pr = a->pr;
    const int64_t o1 = (task + 1) * ROWS < pr->O ? (task + 1) * ROWS : pr->O;
    const unsigned char *w = (const unsigned char *)pr->w.p;
    const int64_t wrb = pr->w_row_bytes, xqs = a->xqs, I = pr->I;
    float res[16];
    for (int64_t o = task * ROWS; o < o1; o++) {
        const unsigned char *wo = w + o * wrb;
        int64_t m = 0;
        for (; m + 4 <= pr->M; m += 4) {
            a->tile[M2_Q8X_1x4](I, wo, wrb, a->xq + m * xqs, xqs, res);
            store(pr, o, 1, m, 4, res);
        }
        for (; m + 2 <= pr->M; m += 2) {
            a->tile[M2_Q8X_1x2](I, wo, wrb, a->xq + m * xqs, xqs, res);
            store(pr, o, 1, m, 2, res);
        }
        if (m < pr->M) {
            a->tile[M2_Q8X_1x1](I, wo, wrb, a->xq + m * xqs, xqs, res);
            store(pr, o, 1, m, 1, res);
        }
    }
}

/* x's quantized copy: on this thread's stack up to Q8X_STACK bytes, else one heap block */
#define Q8X_STACK 16384

static mamba2_status_t q8x_forward(mamba2_context_t *ctx, const m2_linear_problem *pr) {
    _Alignas(64) unsigned char stack_buf[Q8X_STACK];
    const int64_t xqs = m2_lin_q8x_row_bytes(pr->I);
    size_t need;
    if (!m2_size_mul((size_t)pr->M, (size_t)xqs, &need) || need > (size_t)INT64_MAX)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "quantize_x: x [%lld,%lld] rounded to Q8_0 exceeds the address space",
                        (long long)pr->M, (long long)pr->I);
    unsigned char *heap = NULL, *xq = stack_buf;
    if (need > sizeof stack_buf) {
        heap = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!heap)
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                            "quantize_x: no memory for x rounded to Q8_0 (%zu bytes)", need);
        xq = heap;
    }
    const float *x = (const float *)pr->x.p;
    for (int64_t m = 0; m < pr->M; m++) q8x_quantize_row(pr->I, x + m * pr->x.s[0], xq + m * xqs);
    q8x_arg a = {pr, q8x_kernels_for(ctx)->tile, xq, xqs};
    m2_cpu_run_tasks(ctx, (pr->O + ROWS - 1) / ROWS, q8x_task, &a);
    free(heap);
    return MAMBA2_STATUS_OK;
}

/* ---- bf16 weights, bf16-exact x (AVX512-BF16) ------------------------------------------ */

/* The vdpbf16ps tiles where the context runs the avx512 set and the CPU has avx512_bf16 (the
 * avx512 level implies the OS saves the zmm state), unless MAMBA2C_LINEAR_BF16DOT=0 is in the
 * environment (read once: to measure one kernel against the other); else NULL. */
static const m2_linear_bf16x_kernels *bf16x_kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86)
    static int enabled = -1; /* a benign race: every thread computes the same value */
    if (enabled < 0) {
        const char *e = getenv("MAMBA2C_LINEAR_BF16DOT");
        enabled = (e && strcmp(e, "0") == 0) ? 0 : 1;
    }
    if (enabled && ctx->isa == M2_ISA_AVX512 && __builtin_cpu_supports("avx512bf16"))
        return &m2_linear_bf16x_avx512bf16;
#else
    (void)ctx;
#endif
    return NULL;
}

/* 1 when every element of x[0 .. I) is a bf16 value (its low 16 bits zero) */
static int row_is_bf16(const float *x, int64_t I) {
    uint32_t low = 0;
    for (int64_t i = 0; i < I; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        low |= u & 0xFFFFu;
    }
    return low == 0;
}

typedef struct bd_arg {
    const m2_linear_problem *pr;
    const m2_lin_tile_fn *wide;         /* the bf16 row of the widening table             */
    const m2_lin_bf16x_tile_fn *dot;    /* the vdpbf16ps tiles                            */
    const uint16_t *xb;                 /* the nd bf16-exact rows of x, packed, xbs apart */
    int64_t xbs, nd, nw;
    const int64_t *dot_rows, *wide_rows; /* their row numbers in x, ascending             */
} bd_arg;

/* store() for rows rows[0 .. mb) of out */
static void store_rows(const m2_linear_problem *pr, int64_t o, int nr, const int64_t *rows,
                       int mb, const float *res) {
    for (int mi = 0; mi < mb; mi++) store(pr, o, nr, rows[mi], 1, res + mi * 4);
}

/* lin_task's split; each row of x takes its kind's tiles (a row's results are one chain of
 * that kind whatever the tile), the rows of a kind paired in order */
static void bd_task(void *arg_, int64_t task, int thread) {
    (void)thread;
    const bd_arg *a = arg_;
    const m2_linear_problem *pr = a->pr;
    const int64_t o1 = (task + 1) * ROWS < pr->O ? (task + 1) * ROWS : pr->O;
    const unsigned char *w = (const unsigned char *)pr->w.p;
    const int64_t wrb = pr->w_row_bytes, xs = pr->x.s[0], I = pr->I, xbs = a->xbs;
    const float *x = (const float *)pr->x.p;
    float res[8];
    int64_t o = task * ROWS;
    if (pr->M == 1) { /* one bf16-exact row: four streams as in lin_task, else one weight row
                         at a time (one sequential stream: measured 10-25% faster than the 4x1
                         tile's four interleaved short rows, docs/decode.md) */
        if (o1 - o == ROWS) {
            for (int j = 0; j < SPREAD; j++) {
                a->dot[M2_LIN_4x1S](I, w + (o + j) * wrb, wrb * SPREAD, a->xb, xbs, res);
                store_spread(pr, o + j, res);
            }
            return;
        }
        for (; o < o1; o++) {
            a->dot[M2_LIN_1x1](I, w + o * wrb, wrb, a->xb, xbs, res);
            store(pr, o, 1, 0, 1, res);
        }
        return;
    }
    for (; o < o1; o += 2) {
        const int nr = o + 2 <= o1 ? 2 : 1;
        const unsigned char *wo = w + o * wrb;
        int64_t j = 0;
        for (; j + 2 <= a->nd; j += 2) {
            a->dot[nr == 2 ? M2_LIN_2x2 : M2_LIN_1x2](I, wo, wrb, a->xb + j * xbs, xbs, res);
            store_rows(pr, o, nr, a->dot_rows + j, 2, res);
        }
        if (j < a->nd) {
            a->dot[nr == 2 ? M2_LIN_2x1 : M2_LIN_1x1](I, wo, wrb, a->xb + j * xbs, xbs, res);
            store_rows(pr, o, nr, a->dot_rows + j, 1, res);
        }
        const int64_t *wr = a->wide_rows;
        for (j = 0; j + 2 <= a->nw; j += 2) {
            a->wide[nr == 2 ? M2_LIN_2x2 : M2_LIN_1x2](I, wo, wrb, x + wr[j] * xs,
                                                       (wr[j + 1] - wr[j]) * xs, res);
            store_rows(pr, o, nr, wr + j, 2, res);
        }
        if (j < a->nw) {
            a->wide[nr == 2 ? M2_LIN_2x1 : M2_LIN_1x1](I, wo, wrb, x + wr[j] * xs, xs, res);
            store_rows(pr, o, nr, wr + j, 1, res);
        }
    }
}

#define BD_STACK 16384

/* The bf16-weight product with the vdpbf16ps tiles for the bf16-exact rows of x (the others
 * widen as before). Returns OK having done nothing in *done = 0 when no row is bf16-exact. */
static mamba2_status_t bf16x_forward(mamba2_context_t *ctx, const m2_linear_problem *pr,
                                     const m2_linear_bf16x_kernels *kern, int *done) {
    _Alignas(64) unsigned char stack_buf[BD_STACK];
    const int64_t M = pr->M, I = pr->I, xbs = (I + 31) & ~(int64_t)31;
    const float *x = (const float *)pr->x.p;
    *done = 0;
    if (M == 1 && !row_is_bf16(x, I)) return MAMBA2_STATUS_OK;
    size_t need, rows_b;
    if (!m2_size_mul((size_t)M, (size_t)xbs * 2 + 2 * sizeof(int64_t), &need) ||
        need > (size_t)INT64_MAX - 64)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                        "bf16 x: x [%lld,%lld] as bf16 exceeds the address space", (long long)M,
                        (long long)I);
    rows_b = (size_t)M * 2 * sizeof(int64_t);
    unsigned char *heap = NULL, *buf = stack_buf;
    if (need > sizeof stack_buf) {
        heap = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!heap)
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                            "bf16 x: no memory for x as bf16 (%zu bytes)", need);
        buf = heap;
    }
    int64_t *dot_rows = (int64_t *)(void *)buf, *wide_rows = dot_rows + M;
    uint16_t *xb = (uint16_t *)(void *)(buf + rows_b);
    int64_t nd = 0, nw = 0;
    for (int64_t m = 0; m < M; m++) {
        const float *xm = x + m * pr->x.s[0];
        if (M > 1 && !row_is_bf16(xm, I)) {
            wide_rows[nw++] = m;
            continue;
        }
        uint16_t *d = xb + nd * xbs;
        for (int64_t i = 0; i < I; i++) {
            uint32_t u;
            memcpy(&u, &xm[i], sizeof u);
            d[i] = (uint16_t)(u >> 16);
        }
        dot_rows[nd++] = m;
    }
    if (nd > 0) {
        bd_arg a = {pr, kernels_for(ctx)->tile[M2_LIN_BF16], kern->tile, xb, xbs, nd, nw,
                    dot_rows, wide_rows};
        m2_cpu_run_tasks(ctx, (pr->O + ROWS - 1) / ROWS, bd_task, &a);
        *done = 1;
    }
    free(heap);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_linear_forward(mamba2_context_t *ctx, const m2_linear_problem *pr) {
    if (pr->quantize_x) return q8x_forward(ctx, pr);
    const int fmt = pr->w_dtype == MAMBA2_DTYPE_Q8_0   ? M2_LIN_Q8_0
                    : pr->w_dtype == MAMBA2_DTYPE_BF16 ? M2_LIN_BF16
                                                       : M2_LIN_F32;
    const m2_linear_bf16x_kernels *bk = fmt == M2_LIN_BF16 ? bf16x_kernels_for(ctx) : NULL;
    if (bk) {
        int done;
        const mamba2_status_t st = bf16x_forward(ctx, pr, bk, &done);
        if (st != MAMBA2_STATUS_OK || done) return st;
    }
    lin_arg a = {pr, kernels_for(ctx)->tile[fmt]};
    m2_cpu_run_tasks(ctx, (pr->O + ROWS - 1) / ROWS, lin_task, &a);
    return MAMBA2_STATUS_OK;
}
