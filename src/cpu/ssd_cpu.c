/*
 * ssd_cpu.c — the CPU backend of the SSD scan (SPEC §1–2): planning, threading, segment
 * bookkeeping and the fixed-order reductions. The arithmetic on states lives in the per-ISA
 * kernel sets (kernels.h, ssd_kernels_impl.h), picked from ctx->isa at every call.
 * docs/cpu_ssd.md explains the design with measurements.
 *
 * The recurrence (plain, not the chunked form: SPEC §1 lets Q only block the work) with the
 * state rescaled inside segments: Ŝ_t = S_t / E_t, E_t = Π of the segment's decays, so a
 * token is one FMA per state element for the update (Ŝ += (d_t/E_t) x_t ⊗ B_t) and one per
 * output (y_t = E_t Ŝ_t·C_t); a segment restarts (one multiply of the state) before the
 * scale leaves [e^-60, 1]. The kernel `sweep` runs one state over a block of T tokens with a
 * register tile of 2 vectors x 4 columns (16 x 4 with AVX2, 32 x 4 with AVX-512): the
 * forward's states are [N][P] (p along the vectors), the backward's [P][N].
 *
 * Forward: a task is a set of consecutive heads of one sequence (or chunk, below), walking
 * the blocks: per block it processes dt for all its heads at once (dt_block), scales
 * d_t x_t / E_t per head and packs B, C once per group, token-major so that each token's rows
 * of all the set's heads are read together (rows of one head are H*P floats apart: a new
 * 4 KiB page per token, whose page walk is then paid once per set, not per head), then runs
 * one sweep per head — while they run, the set's z rows of this block and x, B, C rows of
 * the next are requested into L2 in address order (fwd_prefetch_plan) — and the epilogue
 * (E y + D x, the silu gate) token by token, out streamed with non-temporal stores. Sets are
 * chosen from the thread count; they never change a result.
 *
 * Backward, per set of heads, two passes and no checkpoints of the whole sequence:
 *   A (forward): Ŝ with Ŝ_tᵀ(E_t dy_t) = dCm rows (and Ŝ_{t-1}·C_t when dz needs y);
 *     dz, dD, a_t dy_t·(S_{t-1}C_t) per token, the segment scale at each block start,
 *     snapshots of Ŝ every BWD_SNAP_TOKENS tokens.
 *   B (reverse): Ĝ_t = Ĝ_{t+1} + (E_t dy_t) ⊗ C_t, with Ĝ_{t+1}·B_t and Ĝ_tᵀ x̂_t = dBm rows;
 *     dx; the decay gradient λ_t = ∂L/∂log a_t = a_t Σ G_t∘S_{t-1} as the suffix sum
 *     λ_t = λ_{t+1} + a_t dy_t·(S_{t-1}C_t) − a_{t+1} d_t x_t·(G_{t+1}B_t), restarted from its
 *     definition at every snapshot, and taken directly (sweep_direct, the block's states
 *     recomputed from the snapshots) in blocks where a decay is strong (d·A < -1), where the
 *     telescoping form cancels. Then ddt, dA, ddt_bias, dinitial_state.
 *   5 FMAs per state element per token (2 + 3; 6 when y is formed) against the forward's 2.
 *   States are never rebuilt by running the recurrence backwards (SPEC §2).
 *
 * Few (sequence, head) pairs (< M2_CPU_PAR_WIDTH) and long sequences: each sequence is cut
 * into K chunks that run in parallel from zero states, a short sequential pass carries the
 * true states over the chunk boundaries, and the chunks run again from them (forward); the
 * backward does the same for the gradients flowing into the chunk ends. K depends on the
 * problem only.
 *
 * Workspace (64-byte aligned inside the caller's buffer; sizes from fwd_make_plan /
 * bwd_make_plan, which the *_workspace queries report exactly; nothing is allocated):
 *   forward   global { chunk start / local end states and log decays (split sequences) }
 *             nthreads x { the set's states, block buffers }
 *   backward  global { the forward's, per-(chunk, head) double slots for dA, ddt_bias, dD,
 *                      progress counters, chunk end gradients }
 *             nthreads x { states, block buffers, per-token Σ terms and block scales of
 *                          the longest chunk, snapshots, strong-decay recompute buffers }
 *   e.g. [B,L,H,P,N] = [4,2048,16,64,128], 2 threads: 1.5 MB forward, 13 MB backward;
 *   [1,1048576,8,64,64]: 1.5 MB forward, 108 MB backward.
 *
 * Determinism: every value is produced by one task, and every sum over tasks runs in an
 * order fixed by the problem alone:
 *   - dA, dD, ddt_bias: per (chunk, head) double slots, added in chunk order at the end.
 *   - dBm, dCm (a group is shared by H/G heads): a task adds its heads' rows in head order;
 *     when a group spans two tasks, the later task waits (yielding) for the earlier one's
 *     progress counter before adding its rows for a block, so every row is
 *     c_h0 + c_h1 + ... in head order for any thread count. The earlier task has the lower
 *     index and the pool hands out tasks in index order, so it is already running.
 *   - chunk boundaries and head-set splits change no arithmetic of a head (chunks are fixed
 *     by the problem; sets only group heads).
 * No float atomics anywhere.
 */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "core/half.h"
#include "core/internal.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"

/* Forward token block: per head of a set, d_t x_t / E_t and y_t of a block are packed
 * (FWD_BLOCK * P floats each) and B, C per group (FWD_BLOCK * N each). 32 measured best on
 * the dev VM (64: 5-10% slower, more L2 traffic per set); results do not depend on it. */
#define FWD_BLOCK 32
/* ---- small helpers ------------------------------------------------------------------ */

/* The kernel set of a call: the context's ISA, except that the AVX-512 set (a 32 x 4 register
 * tile: P padded to a multiple of 32) runs only where P fills that tile well enough to beat
 * the AVX2 set's 16 x 4 one. On Intel cores: P >= 64, or P = 32 with N >= 64 (measured on
 * an Emerald Rapids VM, docs/cpu_ssd.md §10: P = 16 is 10-45% slower with AVX-512, P = 32
 * with N = 32 ~10-25% slower, P = 32 with N = 64 and every P = 64 case but the smallest
 * faster). On AMD cores (ctx->amd; Zen 5, full-width 512-bit units) from P = 16: P = 32 is
 * 30 % faster than with AVX2 at every N, P = 16 0-10 %; P = 8 is 75 % slower. The choice
 * depends on the problem and the CPU only, never on the thread count, so results stay
 * bitwise identical across thread counts. */
static const m2_cpu_kernels *kernels_for(const mamba2_context_t *ctx, const m2_ssd_problem *pr) {
    if (ctx->isa == M2_ISA_AVX512 &&
        (pr->P >= 64 || (pr->P % 32 == 0 && pr->N >= 64) || (ctx->amd && pr->P >= 16)))
        return &m2_cpu_kernels_avx512;
    return ctx->isa != M2_ISA_SCALAR ? &m2_cpu_kernels_avx2 : &m2_cpu_kernels_scalar;
}

/* The backward's kernel set. Its states are transposed ([P][N], n along the vectors: see
 * bwd_range), so there the AVX-512 tile pads N, not P, to a multiple of 32: the forward's
 * rule with P and N swapped, except that on AMD cores it starts at N = 32 (Zen 5: N = 32 is
 * 7-11 % faster than with AVX2 at P = 16 and 32; N = 16 within ±5 %, N = 8 55 % slower). */
static const m2_cpu_kernels *bwd_kernels_for(const mamba2_context_t *ctx,
                                             const m2_ssd_problem *pr) {
    if (ctx->isa == M2_ISA_AVX512 &&
        (pr->N >= 64 || (pr->N % 32 == 0 && pr->P >= 64) || (ctx->amd && pr->N >= 32)))
        return &m2_cpu_kernels_avx512;
    return ctx->isa != M2_ISA_SCALAR ? &m2_cpu_kernels_avx2 : &m2_cpu_kernels_scalar;
}

/* Reserve `bytes` at the next 64-byte boundary of a layout; returns the offset. */
static size_t carve(size_t *off, size_t bytes) {
    const size_t o = (*off + 63) & ~(size_t)63;
    *off = o + bytes;
    return o;
}

static unsigned char *align64(void *p) {
    return (unsigned char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Row (i0, i1, i2) of a 4-dim view: [B,L,H,P] at (b,t,h), [B,L,G,N] at (b,t,g),
 * [S,H,P,N] at (s,h,p); for [B,L,H] it is the element (b,t,h). */
static inline float *row3(const m2_view *v, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)v->p + i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2];
}
static inline float at1(const m2_view *v, int64_t i) { return ((const float *)v->p)[i * v->s[0]]; }

/* ---- activations in their storage dtype ------------------------------------------------
 * x, dt, Bm, Cm, z, out and the activation gradients are F32, BF16 or F16 (pr->act_dtype);
 * the kernels compute in float. A row is read through act_in (the row itself for F32, else
 * converted into tmp) and written through act_out + act_flush (into tmp, then rounded into
 * the tensor; nothing to do for F32). Rows are converted where they are used, so they are in
 * cache, and a half tensor moves half the bytes. tmp: one of the per-thread rows `cv`
 * (ACT_ROWS rows of max(Pp, Np) floats, then the dt block). */
#define ACT_ROWS 5
static inline int act_f32(const m2_ssd_problem *pr) { return pr->act_dtype == MAMBA2_DTYPE_F32; }
static inline int64_t act_size(const m2_ssd_problem *pr) { return act_f32(pr) ? 4 : 2; }
static inline char *arow(const m2_ssd_problem *pr, const m2_view *v, int64_t i0, int64_t i1,
                         int64_t i2) {
    return (char *)v->p + (i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2]) * act_size(pr);
}
static inline const float *act_in(const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                                  const m2_view *v, int64_t i0, int64_t i1, int64_t i2,
                                  int64_t n, float *tmp) {
    if (act_f32(pr)) return row3(v, i0, i1, i2);
    K->load_row(n, (int)pr->act_dtype, arow(pr, v, i0, i1, i2), tmp);
    return tmp;
}
static inline float *act_out(const m2_ssd_problem *pr, const m2_view *v, int64_t i0,
                             int64_t i1, int64_t i2, float *tmp) {
    return act_f32(pr) ? row3(v, i0, i1, i2) : tmp;
}
/* (rows written are fresh outputs: their whole aligned lines go out with non-temporal stores,
 * as float32 rows do; the caller fences before its task ends) */
static inline void act_flush(const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                             const m2_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t n,
                             const float *tmp) {
    if (!act_f32(pr)) K->store_row(n, (int)pr->act_dtype, tmp, arow(pr, v, i0, i1, i2), 1);
}
/* A token's rows of heads [h0, h0 + nh) of a [B,L,H,P] activation at once (a set's rows are
 * adjacent): act_in_heads gives them as floats, row j at + j * *ld (the tensor's own rows for
 * F32; else converted into tmp, P apart); act_out_heads + act_flush_heads write them. */
static const float *act_in_heads(const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                                 const m2_view *v, int64_t b, int64_t t, int64_t h0, int64_t nh,
                                 int64_t P, float *tmp, int64_t *ld) {
    if (act_f32(pr)) {
        *ld = v->s[2];
        return row3(v, b, t, h0);
    }
    *ld = P;
    if (v->s[2] == P)
        K->load_row(nh * P, (int)pr->act_dtype, arow(pr, v, b, t, h0), tmp);
    else
        for (int64_t j = 0; j < nh; j++)
            K->load_row(P, (int)pr->act_dtype, arow(pr, v, b, t, h0 + j), tmp + j * P);
    return tmp;
}
static float *act_out_heads(const m2_ssd_problem *pr, const m2_view *v, int64_t b, int64_t t,
                            int64_t h0, int64_t P, float *tmp, int64_t *ld) {
    *ld = act_f32(pr) ? v->s[2] : P;
    return act_f32(pr) ? row3(v, b, t, h0) : tmp;
}
static void act_flush_heads(const m2_ssd_problem *pr, const m2_cpu_kernels *K, const m2_view *v,
                            int64_t b, int64_t t, int64_t h0, int64_t nh, int64_t P,
                            const float *tmp) {
    if (act_f32(pr)) return;
    if (v->s[2] == P)
        K->store_row(nh * P, (int)pr->act_dtype, tmp, arow(pr, v, b, t, h0), 1);
    else
        for (int64_t j = 0; j < nh; j++)
            act_flush(pr, K, v, b, t, h0 + j, P, tmp + j * P);
}

/* dt of heads [h0, h0 + nh) for tokens [u, u + Tb) as dt_block reads it: rows ACT_DT_LD(nh)
 * apart (in place for F32, converted into tmp else) */
#define ACT_DT_LD(nh) (act_f32(pr) ? pr->dt.s[1] : (nh))
static inline const float *act_dt(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b,
                                  int64_t u, int64_t h0, int64_t nh, int64_t Tb, float *tmp) {
    if (act_f32(pr)) return row3(&pr->dt, b, u, h0);
    for (int64_t i = 0; i < Tb; i++)
        K->load_row(nh, (int)pr->act_dtype, arow(pr, &pr->dt, b, u + i, h0), tmp + i * nh);
    return tmp;
}
/* one value of a [B,L,H] activation output */
static inline void act_store1(const m2_ssd_problem *pr, const m2_view *v, int64_t i0,
                              int64_t i1, int64_t i2, float x) {
    if (act_f32(pr))
        *row3(v, i0, i1, i2) = x;
    else if (pr->act_dtype == MAMBA2_DTYPE_BF16)
        *(uint16_t *)arow(pr, v, i0, i1, i2) = m2_f32_to_bf16(x);
    else
        *(uint16_t *)arow(pr, v, i0, i1, i2) = m2_f32_to_f16(x);
}

/* D row of head h as P floats: [H,P] is read in place, [H] is broadcast into buf. */
static const float *head_D(const m2_ssd_problem *pr, int64_t h, float *buf) {
    if (!pr->D.p) return NULL;
    if (pr->D_per_channel) return (const float *)pr->D.p + h * pr->D.s[0];
    const float v = at1(&pr->D, h);
    for (int64_t p = 0; p < pr->P; p++) buf[p] = v;
    return buf;
}

static mamba2_status_t check_dtype(const m2_ssd_problem *pr) {
    const int act = pr->act_dtype == MAMBA2_DTYPE_F32 || pr->act_dtype == MAMBA2_DTYPE_BF16 ||
                    pr->act_dtype == MAMBA2_DTYPE_F16;
    if (!act || pr->par_dtype != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the cpu backend supports f32, bf16 or f16 activations with f32 "
                        "parameters and states (got %s/%s)",
                        m2_dtype_name(pr->act_dtype), m2_dtype_name(pr->par_dtype));
    return MAMBA2_STATUS_OK;
}

/* ---- rescaled segments (shared by forward and backward) ----------------------------- */

/* Inside a segment of tokens the state is carried as Ŝ_t = S_t / E_t with
 * E_t = exp(c_t), c_t = Σ log a_s over the segment's tokens after its first (c = 0 at the
 * first token). Then
 *     Ŝ_t = Ŝ_{t-1} + (d_t / E_t) x_t ⊗ B_t      and      y_t = E_t (Ŝ_t · C_t):
 * one FMA per state element for the update and one for the output, no decay multiply.
 * A segment starts at the sequence's first token and wherever c would fall below
 * SEG_LOG_MIN; there the carried state is multiplied once by f = E_{t-1} a_t (the previous
 * segment's scale times the new token's decay, computed in double: it may underflow to 0,
 * which is the right answer) and c restarts at 0. So 1/E_t <= e^60 stays far from float
 * overflow and E_t >= e^-60 from underflow, even for dt·|A| in the hundreds (then every
 * token is its own segment). Segment starts depend only on the token sequence (the kernels'
 * dt_block finds them, M2_SEG_LOG_MIN), never on the blocking or the thread count, and the
 * sweep applies the factor at the token itself, so the arithmetic of every token is fixed by
 * the problem. */

/* Rows of T tokens (n floats each) into the sweep's packed [Np/4][T][4] layout (the
 * forward's B and C: a constant stride in the sweep's token loop), columns n >= N zero. */
static void pack_row(float *dst, const float *r, int64_t t, int64_t T, int64_t n, int64_t Np) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) memcpy(dst + j * T + 4 * t, r + j, 4 * sizeof(float));
    if (j < n) {
        float tmp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        memcpy(tmp, r + j, (size_t)(n - j) * sizeof(float));
        memcpy(dst + j * T + 4 * t, tmp, sizeof tmp);
        j += 4;
    }
    for (; j < Np; j += 4) memset(dst + j * T + 4 * t, 0, 4 * sizeof(float));
}

/* Rows (b, u + t, g), t < T, of a [B,L,G,N] activation, packed (tmp: one row, for half). */
static void pack_act(const m2_ssd_problem *pr, const m2_cpu_kernels *K, float *dst,
                     const m2_view *v, int64_t b, int64_t u, int64_t g, int64_t T, int64_t n,
                     int64_t Np, float *tmp) {
    int64_t t = 0;
    if (act_f32(pr) && n == Np) /* four tokens at a time: each column group's 64 bytes in one go */
        for (; t + 4 <= T; t += 4) {
            const float *r0 = row3(v, b, u + t, g), *r1 = row3(v, b, u + t + 1, g);
            const float *r2 = row3(v, b, u + t + 2, g), *r3 = row3(v, b, u + t + 3, g);
            for (int64_t j = 0; j < n; j += 4) {
                float *d = dst + j * T + 4 * t;
                memcpy(d, r0 + j, 4 * sizeof(float));
                memcpy(d + 4, r1 + j, 4 * sizeof(float));
                memcpy(d + 8, r2 + j, 4 * sizeof(float));
                memcpy(d + 12, r3 + j, 4 * sizeof(float));
            }
        }
    for (; t < T; t++) pack_row(dst, act_in(pr, K, v, b, u + t, g, n, tmp), t, T, n, Np);
}

/* dst(c, r) = f * src(r, c) for r < R, c < C; a side is rows ld floats apart, or with tb a
 * tile-major sweep state with rows of ld floats (tile_off). 4 x 4 blocks through SSE
 * registers where x86-64 has them and the tiles hold whole blocks (the state transposes of
 * every forward call: scalar, they were ~10 % of a short sequence's forward), element by
 * element at the edges. The same products either way. */
static void transpose_scaled(const float *src, int64_t ld_s, int64_t tb_s, int64_t R, int64_t C,
                             float *dst, int64_t ld_d, int64_t tb_d, float f) {
#define SRC_AT(r, c) (tb_s ? m2_tile_off(r, c, ld_s, tb_s) : (r) * ld_s + (c))
#define DST_AT(c, r) (tb_d ? m2_tile_off(c, r, ld_d, tb_d) : (c) * ld_d + (r))
    int64_t r0 = 0;
#if defined(__SSE2__)
    const __m128 vf = _mm_set1_ps(f);
    if (tb_s % 4 == 0 && tb_d % 4 == 0)
        for (; r0 + 4 <= R; r0 += 4) {
            int64_t c = 0;
            for (; c + 4 <= C; c += 4) {
                __m128 a = _mm_loadu_ps(src + SRC_AT(r0, c)), b = _mm_loadu_ps(src + SRC_AT(r0 + 1, c)),
                       e = _mm_loadu_ps(src + SRC_AT(r0 + 2, c)), d = _mm_loadu_ps(src + SRC_AT(r0 + 3, c));
                _MM_TRANSPOSE4_PS(a, b, e, d);
                _mm_storeu_ps(dst + DST_AT(c, r0), _mm_mul_ps(vf, a));
                _mm_storeu_ps(dst + DST_AT(c + 1, r0), _mm_mul_ps(vf, b));
                _mm_storeu_ps(dst + DST_AT(c + 2, r0), _mm_mul_ps(vf, e));
                _mm_storeu_ps(dst + DST_AT(c + 3, r0), _mm_mul_ps(vf, d));
            }
            for (; c < C; c++)
                for (int64_t q = 0; q < 4; q++) dst[DST_AT(c, r0 + q)] = f * src[SRC_AT(r0 + q, c)];
        }
#endif
    for (; r0 < R; r0++)
        for (int64_t c = 0; c < C; c++) dst[DST_AT(c, r0)] = f * src[SRC_AT(r0, c)];
#undef SRC_AT
#undef DST_AT
}

/* State [S,H,P,N] row (s,h) -> the forward sweep's [Np][Pp] layout, tile-major with tiles tb
 * wide (zeros when absent or padded). */
static void state_in(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N, int64_t Pp,
                     int64_t Np, int64_t tb, float *S) {
    memset(S, 0, (size_t)(Pp * Np) * sizeof(float));
    if (!st->p) return;
    transpose_scaled(row3(st, s, h, 0), st->s[2], 0, P, N, S, Pp, tb, 1.0f); /* 1 * x is exactly x */
}

/* dst[s,h] = e * S (true state from the carried one), back in [P][N]. */
static void state_out(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                      int64_t Pp, int64_t tb, const float *S, float e) {
    transpose_scaled(S, Pp, tb, N, P, row3(st, s, h, 0), st->s[2], 0, e);
}

/* The backward's transposed layout [Pp][Np] (n contiguous, zero padded, tile-major with
 * tiles tb wide): state row (s,h) of a [S,H,P,N] view in, and e * S out. */
static void state_in_t(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                       int64_t Pp, int64_t Np, int64_t tb, float *S) {
    memset(S, 0, (size_t)(Pp * Np) * sizeof(float));
    if (!st->p) return;
    for (int64_t p = 0; p < P; p++) {
        const float *r = row3(st, s, h, p);
        for (int64_t n = 0; n < N; n += tb)
            memcpy(S + m2_tile_off(p, n, Np, tb), r + n, (size_t)(N - n < tb ? N - n : tb) * sizeof(float));
    }
}
static void state_out_t(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                        int64_t Np, int64_t tb, const float *S, float e) {
    for (int64_t p = 0; p < P; p++) {
        float *r = row3(st, s, h, p);
        for (int64_t n0 = 0; n0 < N; n0 += tb) {
            const float *q = S + m2_tile_off(p, n0, Np, tb);
            for (int64_t n = n0; n < N && n < n0 + tb; n++) r[n] = e * q[n - n0];
        }
    }
}

/* Rows (b, u + t, g), t < Tb, of a [B,L,G,N] activation as rows [T][Np] (zeros past N). */
static void rows_act(const m2_ssd_problem *pr, const m2_cpu_kernels *K, float *dst,
                     const m2_view *v, int64_t b, int64_t u, int64_t g, int64_t Tb, int64_t N,
                     int64_t Np, float *tmp) {
    for (int64_t t = 0; t < Tb; t++) {
        memcpy(dst + t * Np, act_in(pr, K, v, b, u + t, g, N, tmp), (size_t)N * sizeof(float));
        if (Np > N) memset(dst + t * Np + N, 0, (size_t)(Np - N) * sizeof(float));
    }
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* ---- chunks: the sequence split for few (sequence, head) pairs ----------------------- */

/*
 * With fewer (sequence, head) pairs than M2_CPU_PAR_WIDTH, a long sequence is cut into K
 * chunks of ceil(len / K) tokens, K = ceil(PAR_WIDTH / (nseq H)) (at most len / CHUNK_MIN;
 * K < 3 gains nothing and is not used). The chunks run in parallel from zero states, a
 * short sequential pass carries the true states across the chunk boundaries,
 * S_start[k+1] = (Π_{t in chunk k} a_t) S_start[k] + S_local[k], and the chunks run again
 * from their true start states. This changes the arithmetic against one sequential pass
 * (the carried state is a sum in another order), so K depends on the problem only — never
 * on the thread count — and every thread count gives the same bits.
 */
#ifndef M2_CPU_PAR_WIDTH
#define M2_CPU_PAR_WIDTH 32
#endif
#ifndef M2_CPU_CHUNK_MIN
#define M2_CPU_CHUNK_MIN 2048
#endif

static int64_t seq_nchunks(const m2_ssd_problem *pr, int64_t len) {
    const int64_t pairs = pr->nseq * pr->H;
    if (pairs <= 0 || pairs >= M2_CPU_PAR_WIDTH) return 1;
    int64_t k = (M2_CPU_PAR_WIDTH + pairs - 1) / pairs;
    if (k > len / M2_CPU_CHUNK_MIN) k = len / M2_CPU_CHUNK_MIN;
    return k < 3 ? 1 : k;
}

/* Chunk k of sequence s (K chunks): tokens [*ta, *tb); returns the global chunk index
 * (chunks numbered sequence after sequence). */
typedef struct chunk_ref {
    int64_t s, k, K, b, ta, tb, t0, t1, c; /* c: global index */
} chunk_ref;

/* Only problems with few (sequence, head) pairs split sequences (seq_nchunks); for all
 * others every sequence is one chunk, and the chunk bookkeeping below is O(1) per item
 * instead of a walk over the sequences (quadratic in the count of packed sequences). */
static int may_split(const m2_ssd_problem *pr) { return pr->nseq * pr->H < M2_CPU_PAR_WIDTH; }

/* Global index of sequence si's first chunk. */
static int64_t seq_first_chunk(const m2_ssd_problem *pr, int64_t si) {
    if (!may_split(pr)) return si;
    int64_t c0 = 0;
    for (int64_t s = 0; s < si; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        c0 += seq_nchunks(pr, t1 - t0);
    }
    return c0;
}

static int64_t total_chunks(const m2_ssd_problem *pr) {
    if (!may_split(pr)) return pr->nseq;
    int64_t n = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        n += seq_nchunks(pr, t1 - t0);
    }
    return n;
}

/* The i-th item of a phase: items per sequence are chunks [k_lo(K), k_hi(K)) where
 * mode 0 = every chunk, 1 = the chunks a first pass runs (all of an unsplit sequence;
 * 0 .. K-2 of a split one), 3 = the second full pass (1 .. K-1 of a split sequence). */
static int chunk_item(const m2_ssd_problem *pr, int mode, int64_t i, chunk_ref *r) {
    if (!may_split(pr)) { /* item i is sequence i, whole (mode 3 has no items) */
        if (mode == 3 || i < 0 || i >= pr->nseq) return 0;
        m2_ssd_seq(pr, i, &r->b, &r->t0, &r->t1);
        r->s = i;
        r->k = 0;
        r->K = 1;
        r->ta = r->t0;
        r->tb = r->t1;
        r->c = i;
        return 1;
    }
    int64_t c = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        const int64_t K = seq_nchunks(pr, t1 - t0);
        const int64_t lo = mode == 3 ? 1 : 0;
        const int64_t hi = mode == 0 ? K : mode == 1 ? (K == 1 ? 1 : K - 1) : (K == 1 ? 1 : K);
        if (i < hi - lo) {
            const int64_t k = lo + i, Lc = (t1 - t0 + K - 1) / K;
            r->s = s;
            r->k = k;
            r->K = K;
            r->b = b;
            r->t0 = t0;
            r->t1 = t1;
            r->ta = t0 + k * Lc < t1 ? t0 + k * Lc : t1;
            r->tb = t0 + (k + 1) * Lc < t1 ? t0 + (k + 1) * Lc : t1;
            r->c = c + k;
            return 1;
        }
        i -= hi > lo ? hi - lo : 0;
        c += K;
    }
    return 0;
}

static int64_t chunk_items(const m2_ssd_problem *pr, int mode) {
    if (!may_split(pr)) return mode == 3 ? 0 : pr->nseq;
    int64_t n = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        const int64_t K = seq_nchunks(pr, t1 - t0);
        n += mode == 0 ? K : mode == 1 ? (K == 1 ? 1 : K - 1) : (K == 1 ? 0 : K - 1);
    }
    return n;
}

/* A [nch, H, P, N] state buffer in the workspace as a view. */
static m2_view chunk_view(void *p, const m2_ssd_problem *pr) {
    m2_view v;
    v.p = p;
    v.s[0] = pr->H * pr->P * pr->N;
    v.s[1] = pr->P * pr->N;
    v.s[2] = pr->N;
    v.s[3] = 1;
    return v;
}

/* S_start[k+1] = exp(dec_k) S_start[k] + S_local[k] for k = 1 .. K-2 of sequence s, head h
 * (S_start[1] is chunk 0's end state, already in place). */
static void chunk_carry(const m2_ssd_problem *pr, const m2_view *cs, const m2_view *cl,
                        const double *cdec, int64_t c0, int64_t K, int64_t h) {
    const int64_t P = pr->P, N = pr->N;
    for (int64_t k = 1; k + 1 < K; k++) {
        const float a = (float)exp(cdec[(c0 + k) * pr->H + h]);
        for (int64_t p = 0; p < P; p++) {
            const float *src = row3(cs, c0 + k, h, p), *loc = row3(cl, c0 + k, h, p);
            float *dst = row3(cs, c0 + k + 1, h, p);
            for (int64_t n = 0; n < N; n++) dst[n] = a * src[n] + loc[n];
        }
    }
}

/* ---- forward ------------------------------------------------------------------------ */

/* Per-thread bytes the head set of a forward task may occupy (its states and block
 * buffers), so that they stay in L2 next to the streamed rows. */
#ifndef M2_CPU_HSET_BUDGET
#define M2_CPU_HSET_BUDGET (1536u << 10)
#endif

typedef struct fwd_plan {
    int64_t T, Pp, Np;
    int64_t hs, nsets, ngmax; /* heads per task, tasks per chunk, groups a task spans */
    int64_t nch;              /* chunks in all (nseq when no sequence is split) */
    int chunked, nthr;
    size_t o_cs, o_cl, o_cdec, glob;                                       /* global     */
    size_t o_S, o_u, o_y, o_B, o_C, o_d, o_E, o_w, o_D, o_ri, o_rf, o_c; /* per thread */
    size_t o_cv; /* activation rows converted from half storage (ACT_ROWS + the dt block) */
    size_t o_hr; /* half storage: the block's x rows of the set, a token's z, out, out_x rows */
    size_t per_thread, total;
    int pf_how; /* the far prefetches' hint: M2_PF_L2, or M2_PF_NTA on AMD cores (ctx->amd) */
} fwd_plan;

/* Heads per task. A task runs a set of consecutive heads of one sequence (or chunk) through
 * the blocks together: it reads each token's rows of x, z, out for all its heads at once
 * (rows of one head are H*P floats apart, a new 4 KiB page per token: one page walk per
 * token per tensor is paid per task, not per head), and packs B and C once per group. So
 * sets are large: the fewest sets whose makespan on nthr threads, ceil(tasks / nthr) rounds
 * of hs heads (`items` sequences or chunks of equal length, ceil(H / hs) sets each), is the
 * smallest; then halved until a set's buffers fit M2_CPU_HSET_BUDGET. The split never
 * changes a result: every head's arithmetic is the same in any set. */
static int64_t fwd_head_set(const m2_ssd_problem *pr, int64_t items, int nthr, int64_t per_head) {
    const int64_t H = pr->H, W = nthr > 0 ? nthr : 1, it = items > 0 ? items : 1;
    const int64_t cap = (int64_t)M2_CPU_HSET_BUDGET / (per_head > 0 ? per_head : 1);
    int64_t best = H, best_cost = -1;
    for (int64_t ns = 1; ns <= H; ns++) {
        const int64_t hs = (H + ns - 1) / ns, sets = (H + hs - 1) / hs;
        const int64_t cost = (it * sets + W - 1) / W * hs;
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            best = hs;
        }
    }
    int64_t hs = best;
    while (hs > 1 && hs > cap) hs = (hs + 1) / 2;
    return hs > 0 ? hs : 1;
}

static void fwd_make_plan(const mamba2_context_t *ctx, const m2_ssd_problem *pr, fwd_plan *pl) {
    const m2_cpu_kernels *K = kernels_for(ctx, pr);
    const size_t T = FWD_BLOCK, f = sizeof(float);
    pl->T = FWD_BLOCK;
    pl->pf_how = ctx->amd ? M2_PF_NTA : M2_PF_L2;
    pl->Pp = round_up(pr->P > 0 ? pr->P : 1, K->tile_p);
    pl->Np = round_up(pr->N > 0 ? pr->N : 1, K->tile_n);
    const size_t Pp = (size_t)pl->Pp, Np = (size_t)pl->Np;
    pl->nthr = m2_cpu_plan_threads(ctx);
    pl->nch = total_chunks(pr);
    pl->chunked = pl->nch > pr->nseq;
    pl->hs = fwd_head_set(pr, pl->nch, pl->nthr, (int64_t)((Np * Pp + 2 * T * Pp + 2 * T * Np) * f));
    pl->nsets = (pr->H + pl->hs - 1) / pl->hs;
    const int64_t hpg = pr->H / pr->G;
    pl->ngmax = (pl->hs + hpg - 1) / hpg + 1;
    if (pl->ngmax > pr->G) pl->ngmax = pr->G;
    const size_t hs = (size_t)pl->hs, ng = (size_t)pl->ngmax;
    const size_t nst = pl->chunked ? (size_t)(pl->nch * pr->H) : 0;
    size_t off = 0;
    pl->o_cs = carve(&off, nst * (size_t)(pr->P * pr->N) * f); /* chunk start states     */
    pl->o_cl = carve(&off, nst * (size_t)(pr->P * pr->N) * f); /* chunk local end states */
    pl->o_cdec = carve(&off, nst * sizeof(double));             /* chunk log decays       */
    pl->glob = m2_round64(off);
    off = 0;
    pl->o_S = carve(&off, hs * Np * Pp * f); /* carried states Ŝ, [hs][Np][Pp]       */
    pl->o_u = carve(&off, T * Pp * f);       /* (d_t/E_t) x_t of the head swept, [T][Pp] */
    pl->o_y = carve(&off, hs * T * Pp * f);  /* Ŝ_t·C_t, [hs][T][Pp]                  */
    pl->o_B = carve(&off, ng * T * Np * f);  /* B rows per group, [ng][Np/4][T][4]   */
    pl->o_C = carve(&off, ng * T * Np * f);  /* C rows per group                     */
    pl->o_d = carve(&off, hs * T * f);
    pl->o_E = carve(&off, hs * T * f);
    pl->o_w = carve(&off, hs * T * f);
    pl->o_D = carve(&off, hs * Pp * f);      /* D[h] broadcast over P                 */
    pl->o_ri = carve(&off, hs * T * sizeof(int32_t)); /* segment restarts per head   */
    pl->o_rf = carve(&off, hs * T * f);
    pl->o_c = carve(&off, hs * (2 * sizeof(double) + sizeof(int) + f));
    pl->o_cv = carve(&off, (ACT_ROWS * (size_t)(Pp > Np ? Pp : Np) + T * hs) * f);
    /* half storage: the block's x rows of the set (converted once for x̂ and the epilogue),
     * a token's z, out, out_x rows */
    pl->o_hr = carve(&off, pr->act_dtype != MAMBA2_DTYPE_F32 ? (T + 3) * hs * (size_t)pr->P * f : 0);
    pl->per_thread = m2_round64(off);
    pl->total = pl->glob + pl->per_thread * (size_t)pl->nthr + 64; /* + slack for alignment */
}

/* Request into L2 the rows of nt tokens x nh heads (or groups) of a [B,L,H,P] view from row
 * (b, u, h0), len elements each: as one range per token when the heads are the inner (smaller)
 * stride, else one range per head (a head-major view: its tokens adjacent); a layout whose
 * ranges would be more than twice the rows themselves (heads and tokens both far apart) is
 * not requested at all. */
static void pf_add_rows(m2_pf *pf, const m2_ssd_problem *pr, const m2_view *v, int64_t b,
                        int64_t u, int64_t h0, int64_t nt, int64_t nh, int64_t len, int how) {
    if (!v->p || nt <= 0 || nh <= 0) return;
    const int64_t es = act_size(pr), ldt = v->s[1], ldh = v->s[2], rows = nt * nh * len;
    const char *p = arow(pr, v, b, u, h0);
    if (ldh <= ldt) {
        const int64_t span = (nh - 1) * ldh + len;
        if (span * nt <= 2 * rows) m2_pf_add(pf, p, ldt * es, nt, span * es, how);
    } else {
        const int64_t span = (nt - 1) * ldt + len;
        if (span * nh <= 2 * rows) m2_pf_add(pf, p, ldh * es, nh, span * es, how);
    }
}

/* Rows requested (`how`: into L2 with prefetcht1, or prefetchnta on AMD cores) while the sweeps
 * of a block [u, u + Tb) run (one plan for the set's heads h0 .. h0 + nh - 1, walked sweep
 * after sweep): with outputs the set's z rows of this block (the epilogue reads them after the
 * sweeps); then its x rows of the next block [v, v + Tn) and the B (and, with outputs, C) rows
 * of its groups g0 .. g0 + ng - 1. A token's rows of a set are one span (heads adjacent: a set
 * of all H heads makes the block of a tensor one contiguous range; head-major views: one range
 * per head, pf_add_rows), so the requests walk each tensor in address order: a page is entered
 * once per block, not once per head. (Per-head rows 4 KiB apart, requested into L1, thrash a
 * few L1 sets and cost a page walk per row; measured, they slowed the sweep more than they
 * saved.) out is written with non-temporal stores and not requested. */
static void fwd_prefetch_plan(const m2_ssd_problem *pr, int64_t b, int64_t u, int64_t Tb,
                              int64_t v, int64_t Tn, int64_t h0, int64_t nh, int64_t g0,
                              int64_t ng, int outputs, int how, m2_pf *pf) {
    const int64_t P = pr->P, N = pr->N;
    m2_pf_init(pf);
    if (outputs) pf_add_rows(pf, pr, &pr->z, b, u, h0, Tb, nh, P, how);
    if (Tn <= 0) return;
    pf_add_rows(pf, pr, &pr->x, b, v, h0, Tn, nh, P, how);
    pf_add_rows(pf, pr, &pr->Bm, b, v, g0, Tn, ng, N, how);
    if (outputs) pf_add_rows(pf, pr, &pr->Cm, b, v, g0, Tn, ng, N, how);
}

/* Rows requested (hint `how`, as fwd_prefetch_plan) while the backward sweeps of a block
 * [u, u + Tb) run (pass A, or pass B walking the blocks the other way; one plan for the set's
 * heads h0 .. h0 + nh - 1, walked sweep after sweep, as in the forward): `extra` first (a
 * contiguous range: pass B's λ restart snapshots of the next block), the row `wr` the pass
 * writes after the sweeps (dz in pass A, dx in pass B) for this block unless its rows are
 * whole cache lines (then streamed with non-temporal stores, no read for ownership), then for
 * the block [v, v + Tn) it visits next the x, dout, z rows (and rd's: out_x, read by pass A
 * with dz) of the set and the B and C rows of its groups g0 .. g0 + ng - 1. A token's rows of
 * a set are one span, so each tensor is requested in address order. */
static void bwd_prefetch_plan(const m2_ssd_problem *pr, const m2_view *wr, const m2_view *rd,
                              int64_t b, int64_t u, int64_t Tb, int64_t v, int64_t Tn, int64_t h0,
                              int64_t nh, int64_t g0, int64_t ng, const float *extra,
                              int64_t extra_bytes, int64_t slots, int how, m2_pf *pf) {
    const int64_t P = pr->P, N = pr->N;
    m2_pf_init(pf);
    m2_pf_add(pf, extra, extra_bytes, 1, extra_bytes, how);
    if (wr && (P * act_size(pr)) % 64 != 0) pf_add_rows(pf, pr, wr, b, u, h0, Tb, nh, P, how);
    if (Tn > 0) {
        pf_add_rows(pf, pr, &pr->x, b, v, h0, Tn, nh, P, how);
        pf_add_rows(pf, pr, &pr->dout, b, v, h0, Tn, nh, P, how);
        pf_add_rows(pf, pr, &pr->z, b, v, h0, Tn, nh, P, how);
        if (rd) pf_add_rows(pf, pr, rd, b, v, h0, Tn, nh, P, how);
        pf_add_rows(pf, pr, &pr->Bm, b, v, g0, Tn, ng, N, how);
        pf_add_rows(pf, pr, &pr->Cm, b, v, g0, Tn, ng, N, how);
    }
    pf->per8 = (pf->left + slots - 1) / slots;
}

/* x̂ rows of a block: ub[j][i][:] = w[j*T + i] x(b, u + i, h0 + j) for tokens i < Tb and heads j
 * < nh, one call per token for the set (the backward's recompute). Half storage: token i's rows
 * converted into hr + i * hst (nh * P floats; hst = 0 reuses one staging row set). */
static void scale_rows(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b, int64_t u,
                       int64_t Tb, int64_t h0, int64_t nh, int64_t T, int64_t Pp, const float *w,
                       float *hr, int64_t hst, float *ub) {
    for (int64_t i = 0; i < Tb; i++) {
        int64_t ldx;
        const float *xr = act_in_heads(pr, K, &pr->x, b, u + i, h0, nh, pr->P, hr + i * hst, &ldx);
        K->scale(nh, pr->P, w + i, T, xr, ldx, ub + i * Pp, T * Pp);
    }
}

/* The forward's x̂ rows of head j (of the set from h0) over a block:
 * ub[i][:] = w[i] x(b, u + i, h0 + j) for tokens i < Tb, rows Pp apart. x from the tensor (float32) or from hr, the block's rows
 * of the set converted (half storage: token i's nh * P floats at hr + i * nh * P). */
static void scale_head(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b, int64_t u,
                       int64_t Tb, int64_t h0, int64_t nh, int64_t j, const float *w,
                       const float *hr, int64_t Pp, float *ub) {
    if (act_f32(pr))
        K->scale(Tb, pr->P, w, 1, row3(&pr->x, b, u, h0 + j), pr->x.s[1], ub, Pp);
    else
        K->scale(Tb, pr->P, w, 1, hr + j * pr->P, nh * pr->P, ub, Pp);
}

/* One forward pass of heads [h0, h0 + nh) of sequence row b over tokens [ta, tb), from the
 * state row `in` of view vin (zeros when vin->p is NULL), the end state to row `out` of vout
 * (when vout->p). With outputs: out, and the requested position states. Else only the state
 * (and, when ldec, Σ d_t A per head). The pass starts a segment at ta, as a sequence does. */
static void fwd_range(const fwd_plan *pl, const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                      unsigned char *ws, int64_t b, int64_t ta, int64_t tb, int64_t h0,
                      int64_t nh, const m2_view *vin, int64_t in, const m2_view *vout,
                      int64_t out, int outputs, double *ldec) {
    const int64_t H = pr->H, P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t hpg = H / pr->G, g0 = h0 / hpg, ng = (h0 + nh - 1) / hpg - g0 + 1;
    float *S = (float *)(ws + pl->o_S), *ub = (float *)(ws + pl->o_u);
    float *y = (float *)(ws + pl->o_y);
    float *Bp = (float *)(ws + pl->o_B), *Cp = (float *)(ws + pl->o_C);
    float *d = (float *)(ws + pl->o_d), *E = (float *)(ws + pl->o_E);
    float *w = (float *)(ws + pl->o_w), *Db = (float *)(ws + pl->o_D);
    int32_t *ridx = (int32_t *)(ws + pl->o_ri);
    const int64_t RW = Pp > Np ? Pp : Np; /* converted activation rows (half storage) */
    float *cv = (float *)(ws + pl->o_cv), *cvd = cv + ACT_ROWS * RW;
    float *hr = (float *)(ws + pl->o_hr);
    float *rf = (float *)(ws + pl->o_rf);
    double *c = (double *)(ws + pl->o_c), *dec = c + nh;
    int *nr = (int *)(dec + nh);
    float *e_last = (float *)(nr + nh);
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np;
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;

    /* requested states (mamba2_ssd_forward_states): a block ends at each such token */
    const int64_t flat0 = b * pr->L;
    int64_t next = outputs && pr->npos ? m2_ssd_pos_lower_bound(pr, flat0 + ta) : pr->npos;

    for (int64_t j = 0; j < nh; j++) {
        state_in(vin, in, h0 + j, P, N, Pp, Np, K->tile_p, S + j * SN);
        c[j] = dec[j] = 0.0;
        e_last[j] = 1.0f;
        if (pr->D.p && !pr->D_per_channel) head_D(pr, h0 + j, Db + j * Pp);
    }
    memset(ub, 0, (size_t)TP * sizeof(float)); /* the padding columns stay zero */
    const int64_t slots_per_sweep = (Np / K->tile_n) * (Pp / K->tile_p);
    for (int64_t u = ta, Tb; u < tb; u += Tb) {
        Tb = tb - u < T ? tb - u : T;
        const int64_t tp = next < pr->npos ? m2_ssd_pos(pr, next) - flat0 : -1;
        if (tp >= u && tp < u + Tb) Tb = tp - u + 1;
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, u == ta, c, d, E, w, NULL, nr, ridx, rf);
        if (ldec)
            for (int64_t j = 0; j < nh; j++)
                for (int64_t i = 0; i < Tb; i++) dec[j] += (double)d[j * T + i] * (double)Ah[j];
        /* half storage: the block's x rows of the set converted once (for x̂ and the
         * epilogue), token after token (a token's rows of the set are adjacent) */
        if (!act_f32(pr))
            for (int64_t i = 0; i < Tb; i++) {
                int64_t ldx;
                act_in_heads(pr, K, &pr->x, b, u + i, h0, nh, P, hr + i * nh * P, &ldx);
            }
        /* token-major packing: each token's rows for all groups at once */
        for (int64_t k = 0; k < ng; k++) {
            pack_act(pr, K, Bp + k * TN, &pr->Bm, b, u, g0 + k, Tb, N, Np, cv);
            if (outputs)
                pack_act(pr, K, Cp + k * TN, &pr->Cm, b, u, g0 + k, Tb, N, Np, cv);
        }
        const int64_t v = u + Tb, Tn = tb - v < T ? tb - v : T;
        m2_pf pf;
        fwd_prefetch_plan(pr, b, u, Tb, v, Tn, h0, nh, g0, ng, outputs, pl->pf_how, &pf);
        const int64_t slots = nh * slots_per_sweep * ((Tb + 7) / 8);
        pf.per8 = (pf.left + slots - 1) / slots;
        for (int64_t j = 0; j < nh; j++) {
            const int64_t k = (h0 + j) / hpg - g0;
            /* the w rows accumulate: zeroed right before the sweep, into L1 */
            if (outputs) memset(y + j * TP, 0, (size_t)(Tb * Pp) * sizeof(float));
            /* the head's x̂ rows right before its sweep, into one buffer: in L1 for the sweep
             * (all heads' rows first left them in L2: forward 1-3 % slower) */
            scale_head(pr, K, b, u, Tb, h0, nh, j, w + j * T, hr, Pp, ub);
            K->sweep(Tb, Np, Pp, nr[j], ridx + j * T, rf + j * T, 0, ub, Bp + k * TN,
                     outputs ? Cp + k * TN : NULL, NULL, S + j * SN, NULL,
                     outputs ? y + j * TP : NULL, NULL, &pf);
        }
        /* the epilogue token by token: a token's rows of the set are adjacent in x, z, out */
        if (outputs) {
            const float *D0 = !pr->D.p             ? NULL
                              : pr->D_per_channel ? (const float *)pr->D.p + h0 * pr->D.s[0]
                                                  : Db;
            const int64_t ldD = pr->D_per_channel ? pr->D.s[0] : Pp, hP = nh * P;
            float *hz = hr + T * hP; /* past the block's converted x rows */
            for (int64_t i = 0; i < Tb; i++) {
                const int64_t t = u + i;
                int64_t ldx = P, ldz = 0, ldo, ldox = 0;
                /* x: half storage converted it for x̂ already */
                const float *xr = act_f32(pr) ? act_in_heads(pr, K, &pr->x, b, t, h0, nh, P, NULL, &ldx)
                                              : hr + i * hP;
                const float *zr = pr->z.p ? act_in_heads(pr, K, &pr->z, b, t, h0, nh, P, hz, &ldz) : NULL;
                float *orr = act_out_heads(pr, &pr->out, b, t, h0, P, hz + hP, &ldo);
                float *oxr = pr->out_x.p ? act_out_heads(pr, &pr->out_x, b, t, h0, P, hz + 2 * hP, &ldox) : NULL;
                /* f32: streamed into the tensor; half: into the staging rows */
                K->fwd_out(nh, P, E + i, T, y + i * Pp, TP, xr, ldx, D0, ldD, zr, ldz, orr, ldo, oxr,
                           ldox, act_f32(pr));
                act_flush_heads(pr, K, &pr->out, b, t, h0, nh, P, orr);
                if (oxr) act_flush_heads(pr, K, &pr->out_x, b, t, h0, nh, P, oxr);
            }
        }
        for (int64_t j = 0; j < nh; j++) e_last[j] = E[j * T + Tb - 1];
        if (tp == u + Tb - 1) { /* the states after token tp */
            for (int64_t j = 0; j < nh; j++)
                state_out(&pr->pos_states, next, h0 + j, P, N, Pp, K->tile_p, S + j * SN, e_last[j]);
            next++;
        }
    }
    /* out and out_x went out with non-temporal stores (fwd_out, store_row): order them before
     * the task ends */
    if (outputs) atomic_thread_fence(memory_order_seq_cst);
    if (vout->p)
        for (int64_t j = 0; j < nh; j++) state_out(vout, out, h0 + j, P, N, Pp, K->tile_p, S + j * SN, e_last[j]);
    if (ldec)
        for (int64_t j = 0; j < nh; j++) ldec[j] = dec[j];
}

typedef struct fwd_job {
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *k;
    unsigned char *base;
    fwd_plan pl;
    int outputs; /* 0: only the chunk states (the backward's use) */
} fwd_job;

/* Pass 1: whole sequences that are not split; of a split one, chunk 0 from the initial
 * state (its end state is chunk 1's start) and chunks 1 .. K-2 from zero (their local end
 * states and log decays). */
static void fwd_task_p1(void *arg, int64_t task, int thread) {
    const fwd_job *J = (const fwd_job *)arg;
    const fwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    chunk_ref r;
    if (!chunk_item(pr, 1, task / pl->nsets, &r)) return;
    const int64_t h0 = (task % pl->nsets) * pl->hs, nh = h0 + pl->hs < pr->H ? pl->hs : pr->H - h0;
    unsigned char *ws = J->base + pl->glob + (size_t)thread * pl->per_thread;
    const m2_view cs = chunk_view(J->base + pl->o_cs, pr), cl = chunk_view(J->base + pl->o_cl, pr);
    double *cdec = (double *)(J->base + pl->o_cdec);
    const m2_view none = {NULL, {0, 0, 0, 0}};
    if (r.K == 1) {
        if (J->outputs) /* the backward needs nothing from unsplit sequences here */
            fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &pr->init, r.s, &pr->final,
                      r.s, 1, NULL);
    } else if (r.k == 0)
        fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &pr->init, r.s, &cs, r.c + 1,
                  J->outputs, NULL);
    else
        fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &none, 0, &cl, r.c, 0,
                  cdec + r.c * pr->H + h0);
}

/* Pass 2: the true chunk start states, per (sequence, head); nothing for unsplit ones. */
static void fwd_task_p2(void *arg, int64_t task, int thread) {
    (void)thread;
    const fwd_job *J = (const fwd_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const int64_t si = task / pr->H, h = task % pr->H;
    const int64_t c0 = seq_first_chunk(pr, si);
    int64_t b, t0, t1;
    m2_ssd_seq(pr, si, &b, &t0, &t1);
    const int64_t K = seq_nchunks(pr, t1 - t0);
    if (K < 2) return;
    const m2_view cs = chunk_view(J->base + J->pl.o_cs, pr);
    const m2_view cl = chunk_view(J->base + J->pl.o_cl, pr);
    chunk_carry(pr, &cs, &cl, (const double *)(J->base + J->pl.o_cdec), c0, K, h);
}

/* Pass 3: chunks 1 .. K-1 of the split sequences from their true start states. */
static void fwd_task_p3(void *arg, int64_t task, int thread) {
    const fwd_job *J = (const fwd_job *)arg;
    const fwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    chunk_ref r;
    if (!chunk_item(pr, 3, task / pl->nsets, &r)) return;
    const int64_t h0 = (task % pl->nsets) * pl->hs, nh = h0 + pl->hs < pr->H ? pl->hs : pr->H - h0;
    unsigned char *ws = J->base + pl->glob + (size_t)thread * pl->per_thread;
    const m2_view cs = chunk_view(J->base + pl->o_cs, pr);
    const m2_view none = {NULL, {0, 0, 0, 0}};
    fwd_range(pl, pr, J->k, ws, r.b, r.ta, r.tb, h0, nh, &cs, r.c,
              r.k == r.K - 1 && J->outputs ? &pr->final : &none, r.s, J->outputs, NULL);
}

/* The three passes (one when no sequence is split). */
static void fwd_run(mamba2_context_t *ctx, fwd_job *J) {
    const m2_ssd_problem *pr = J->pr;
    m2_cpu_run_tasks(ctx, chunk_items(pr, 1) * J->pl.nsets, fwd_task_p1, J);
    if (!J->pl.chunked) return;
    m2_cpu_run_tasks(ctx, pr->nseq * pr->H, fwd_task_p2, J);
    if (J->outputs) m2_cpu_run_tasks(ctx, chunk_items(pr, 3) * J->pl.nsets, fwd_task_p3, J);
}

mamba2_status_t m2_cpu_ssd_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_ssd_problem *pr, size_t *bytes) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    fwd_plan pl;
    fwd_make_plan(ctx, pr, &pl);
    *bytes = pl.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    fwd_job J;
    J.pr = pr;
    J.k = kernels_for(ctx, pr);
    J.outputs = 1;
    fwd_make_plan(ctx, pr, &J.pl);
    if (!ws) return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "cpu ssd forward: no workspace");
    J.base = align64(ws);
    fwd_run(ctx, &J);
    return MAMBA2_STATUS_OK;
}

/* ---- backward ----------------------------------------------------------------------- */

/*
 * The rescaled backward (per head; see the file comment for the plan). With Ĝ_t = E_t G_t
 * inside a segment, the reverse recurrence G_t = dy_t ⊗ C_t + a_{t+1} G_{t+1} becomes
 *     Ĝ_t = Ĝ_{t+1} + (E_t dy_t) ⊗ C_t               (one FMA, the forward's sweep reversed)
 * with the forward's restart factors applied after a segment's first token, and
 *     dBm_t += Ĝ_tᵀ x̂_t (x̂_t = d_t x_t / E_t),   d_t G_t B_t = w_t (Ĝ_t B_t),
 *     dCm_t += Ŝ_tᵀ (E_t dy_t),                   y_t = E_t (Ŝ_t C_t).
 * The decay needs no per-element work: λ_t = ∂L/∂log a_t = a_t Σ G_t ∘ S_{t-1} obeys
 *     λ_t = λ_{t+1} + dy_t·y_t − d_t x_t·(G_t B_t)
 * (y_t = S_t C_t without the D term), so ∂L/∂d_t = x_t·(G_t B_t) + A λ_t and ∂L/∂A = Σ d_t λ_t.
 * The terms dy·y and x·(G B) cancel (they share the token's own contribution), so the
 * suffix sum is restarted from its definition, λ_{e+1} = Σ Ĝ_{e+1} ∘ Ŝ_e, every 64 tokens
 * (every fourth block): pass A's sweep writes its end state a second time into a snapshot (no extra pass;
 * non-temporal stores), pass B prefetches it one block ahead and contracts it with Ĝ.
 * Measured on [4,2048,16,64,128,128,4] with every option (demo): dA 1.4e-6 with a restart
 * every 32 tokens, 2.2e-6 every 64, 6.9e-6 every 128, 1.4e-5 every 256, 1.8e-5 every 2048
 * (SPEC §8: 1e-5); every 64 halves the snapshot traffic for a 3-6% faster backward.
 * Pass A (forward over the sequence): Ŝ with dCm, dz, dD, Σ dy·y per token, the segment
 *   scale at each block start, the snapshots. The output y (the sweep's r contraction,
 *   M2_SWEEP_R_PRE) only when dz needs it; else dy·y = C·(Ŝᵀ r) comes from the dC
 *   contraction (the sweep's w rows), taken from the state before the update
 *   (M2_SWEEP_W_PRE, then dCm = that + (r·u) B) so that the cancelling own-token term is
 *   never formed.
 * Pass B (reverse): Ĝ with Ĝ B (dx, ddt; r contraction, before the update) and dBm (w rows);
 *   dA, ddt_bias, dinitial_state.
 * Both sweeps are the forward's kernel on transposed states ([Pp][Np], n along the vectors,
 * so dC and dB are the vertical w contractions) with x̂ and E dy read as rows
 * (M2_SWEEP_VROWS): 2-3 FMAs per state element per token each.
 */
/* Backward token block: 16, half the forward's. A backward sweep keeps more rows per token in
 * L1 than the forward's (pass B: x̂, E dy, B, C, dBm, Ĝ·B, the r partial sums: ~80 KB at
 * T = 32, N = 128 against 48 KB of L1); at 16 they fit, for twice the state traffic per token.
 * Measured (2 threads, AVX-512, every option): [4,2048,16,64,128] 80.7 -> 78.4 ms,
 * [1,4096,32,64,64] 55.3 -> 51.4, [1,8192,24,64,128] 122.8 -> 112.3; 8 is slower again. */
#define BWD_BLOCK 16
/* λ restarts: a snapshot every BWD_SNAP_TOKENS tokens (every fourth block), as long as the
 * snapshots of the longest chunk fit in BWD_SNAP_BYTES per thread (at least BWD_SNAP_MIN of
 * them); beyond that the interval grows with the chunk length. */
#define BWD_SNAP_TOKENS 64
#define BWD_SNAP_BYTES ((size_t)64 << 20)
#define BWD_SNAP_MIN 256
/* A token whose log decay d·A is below this makes its (block, head) take the direct
 * contraction of the decay gradient in pass B (sweep_direct, the block's states recomputed
 * from its snapshot): with strong decays λ is tiny against the cancelling terms. */
#define BWD_STRONG_LOG (-1.0)

typedef struct bwd_plan {
    int64_t T, Pp, Np, hs, nsets, ngmax;
    int64_t Lmax, nblk, snap_every, nsnap, nD; /* Lmax: longest chunk */
    int64_t nch;
    int nthr, chunked;
    int want_decay, want_dc, want_acc, want_y, want_db, want_gb, need_a_rows, need_a_sweep, need_b;
    fwd_plan fp; /* the forward's chunk passes, run inside the backward's workspace */
    /* global region (offsets from the aligned base; the forward's chunk buffers first) */
    size_t o_pA, o_pbias, o_pD, o_prog, o_ge, o_gl, o_gbc, glob;
    /* per-thread region */
    size_t o_S, o_u, o_r, o_w, o_dy, o_sg, o_acc, o_B, o_C, o_d, o_E, o_wt, o_gf, o_ri, o_rf;
    size_t o_small, o_cb, o_s1, o_snap, o_dD, o_Dh, o_cbv, o_strong, o_rcs, o_stmp, o_lamb, o_cv;
    size_t o_hr; /* half storage: a token's x rows of the set, converted (bwd_recompute) */
    size_t per_thread, total;
} bwd_plan;

/* per task: progress of pass A (tokens done from the start) and of pass B (from the end),
 * each on its own cache line */
typedef struct bwd_progress {
    _Atomic int64_t a;
    char pad_a[64 - sizeof(int64_t)];
    _Atomic int64_t b;
    char pad_b[64 - sizeof(int64_t)];
} bwd_progress;

static void bwd_make_plan(const mamba2_context_t *ctx, const m2_ssd_problem *pr, bwd_plan *pl) {
    const m2_cpu_kernels *K = bwd_kernels_for(ctx, pr);
    const int64_t H = pr->H;
    const size_t f = sizeof(float), dbl = sizeof(double);
    pl->T = BWD_BLOCK;
    /* transposed states [Pp][Np]: n along the register tile's vectors, p its columns */
    pl->Pp = round_up(pr->P > 0 ? pr->P : 1, K->tile_n);
    pl->Np = round_up(pr->N > 0 ? pr->N : 1, K->tile_p);
    const size_t T = (size_t)pl->T, Pp = (size_t)pl->Pp, Np = (size_t)pl->Np;
    pl->nthr = m2_cpu_plan_threads(ctx);
    fwd_make_plan(ctx, pr, &pl->fp);
    pl->nch = pl->fp.nch;
    pl->chunked = pl->fp.chunked;
    pl->Lmax = 0;
    for (int64_t i = 0; i < pl->nch; i++) {
        chunk_ref r;
        if (chunk_item(pr, 0, i, &r) && r.tb - r.ta > pl->Lmax) pl->Lmax = r.tb - r.ta;
    }
    pl->nblk = (pl->Lmax + pl->T - 1) / pl->T;
    pl->nD = pr->D_per_channel ? pr->P : 1;

    pl->want_decay = pr->ddt.p || pr->dA.p || pr->ddt_bias.p;
    pl->want_dc = pr->dCm.p != NULL;
    /* y_t in pass A only for dz; the decay's dy·y term comes from the dC contraction
     * (C_t·(S_tᵀ dy_t)), which pass A makes anyway when dCm is wanted */
    pl->want_y = pr->dz.p && pr->z.p && !pr->out_x.p; /* else dz reads the forward's out_x */
    pl->want_acc = pl->want_dc || pl->want_decay;
    pl->want_db = pr->dBm.p != NULL;
    pl->want_gb = pr->dx.p || pl->want_decay;
    pl->need_a_sweep = pl->want_dc || pl->want_y || pl->want_decay;
    pl->need_a_rows = pl->need_a_sweep || pr->dD.p;
    pl->need_b = pl->want_gb || pl->want_db || pr->dinit.p;

    pl->hs = fwd_head_set(pr, pl->nch, pl->nthr, (int64_t)((Np * Pp + 4 * T * Pp + T * Np + 2 * T * Np) * f));
    pl->nsets = (H + pl->hs - 1) / pl->hs;
    {
        int64_t smax = (int64_t)(BWD_SNAP_BYTES / ((size_t)pl->hs * Np * Pp * f));
        if (smax < BWD_SNAP_MIN) smax = BWD_SNAP_MIN;
        pl->snap_every = BWD_SNAP_TOKENS / pl->T;
        if (pl->nblk > pl->snap_every * smax) pl->snap_every = (pl->nblk + smax - 1) / smax;
    }
    pl->nsnap = pl->want_decay ? (pl->nblk + pl->snap_every - 1) / pl->snap_every : 0;
    const int64_t hpg = H / pr->G;
    pl->ngmax = (pl->hs + hpg - 1) / hpg + 1;
    if (pl->ngmax > pr->G) pl->ngmax = pr->G;
    const size_t hs = (size_t)pl->hs, ng = (size_t)pl->ngmax, nsh = (size_t)(pl->nch * H);

    size_t off = pl->fp.glob; /* chunk start states, local states, log decays */
    pl->o_pA = carve(&off, nsh * dbl);  /* per (chunk, head) sums, added in chunk order */
    pl->o_pbias = carve(&off, nsh * dbl);
    pl->o_pD = carve(&off, nsh * (size_t)pl->nD * dbl);
    pl->o_prog = carve(&off, (size_t)(pl->nch * pl->nsets) * sizeof(bwd_progress));
    const size_t nst = pl->chunked ? nsh * (size_t)(pr->P * pr->N) * f : 0;
    pl->o_ge = carve(&off, nst); /* gradient into each chunk's end state */
    pl->o_gl = carve(&off, nst); /* a chunk's local gradient into its start state */
    /* half storage: a group's dBm, dCm rows are summed over its heads in float32 and rounded
     * once, by the task that holds the group's last head (put_group_rows); where a group
     * spans head sets, the partial sums wait in float32 rows of the workspace (grad_row) */
    const int gcopy = pr->act_dtype != MAMBA2_DTYPE_F32 && pl->hs % hpg != 0;
    const size_t ngb = gcopy && (pr->dBm.p || pr->dCm.p)
                           ? 2 * (size_t)(pr->B * pr->L * pr->G * pr->N) : 0;
    pl->o_gbc = carve(&off, ngb * f);
    pl->glob = m2_round64(off);

    off = 0;
    pl->o_S = carve(&off, hs * Np * Pp * f);   /* Ŝ in pass A, Ĝ in pass B, [hs][Pp][Np]   */
    pl->o_u = carve(&off, hs * T * Pp * f);    /* x̂ = w x, [hs][T][Pp]                      */
    pl->o_r = carve(&off, hs * T * Pp * f);    /* E dy                                       */
    pl->o_w = carve(&off, hs * T * Pp * f);    /* ŷ (pass A) or Ĝ B (pass B): sweep acc rows */
    pl->o_dy = carve(&off, hs * T * Pp * f);   /* dy = dout silu(z)                          */
    pl->o_sg = carve(&off, hs * T * Pp * f);   /* dout silu'(z), pass A                     */
    pl->o_acc = carve(&off, hs * T * Np * f);  /* per head dCm (pass A) or dBm (pass B) rows:
                                                  the sweep's w rows, [hs][T][Np]             */
    pl->o_B = carve(&off, ng * T * Np * f);    /* B, C rows per group, [ng][T][Np]          */
    pl->o_C = carve(&off, ng * T * Np * f);
    pl->o_d = carve(&off, hs * T * f);
    pl->o_E = carve(&off, hs * T * f);
    pl->o_wt = carve(&off, hs * T * f);
    pl->o_gf = carve(&off, hs * T * f);
    pl->o_ri = carve(&off, hs * T * sizeof(int32_t));
    pl->o_rf = carve(&off, hs * T * f);
    pl->o_small = carve(&off, hs * (5 * dbl + sizeof(int) + f)); /* c, λ, dA, dbias, tmp c, nr, E_last */
    pl->o_cb = carve(&off, (size_t)pl->nblk * hs * dbl);          /* c at each block start */
    pl->o_s1 = carve(&off, pl->want_decay ? hs * (size_t)pl->Lmax * dbl : 0); /* Σ dy·y */
    pl->o_snap = carve(&off, (size_t)pl->nsnap * hs * Np * Pp * f);
    pl->o_dD = carve(&off, hs * Pp * f);
    pl->o_Dh = carve(&off, hs * Pp * f);
    pl->o_cbv = carve(&off, ng * T * f);        /* B_t·C_t per group                     */
    /* strong decay (see bwd_task): a flag per (block, head), the recomputed states before
     * the blocks of one snapshot interval, the running state of that recompute, λ of a
     * directly contracted block */
    const size_t sdk = pl->want_decay ? 1 : 0;
    pl->o_strong = carve(&off, sdk * (size_t)pl->nblk * hs);
    pl->o_rcs = carve(&off, sdk * (size_t)pl->snap_every * hs * Np * Pp * f);
    pl->o_stmp = carve(&off, sdk * hs * Np * Pp * f);
    pl->o_lamb = carve(&off, hs * T * f);
    pl->o_cv = carve(&off, (ACT_ROWS * (size_t)(Pp > Np ? Pp : Np) + T * hs) * f);
    pl->o_hr = carve(&off, pr->act_dtype != MAMBA2_DTYPE_F32 ? hs * (size_t)pr->P * f : 0);
    pl->per_thread = m2_round64(off);
    if (pl->fp.per_thread > pl->per_thread) pl->per_thread = pl->fp.per_thread;
    pl->fp.glob = pl->glob; /* the forward passes use the same per-thread regions */
    pl->fp.per_thread = pl->per_thread;
    pl->total = pl->glob + pl->per_thread * (size_t)pl->nthr + 64;
}

typedef struct bwd_job {
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *k;
    unsigned char *base;
    bwd_plan pl;
} bwd_job;

/* The backward's per-token rows of a block, heads [h0, h0 + nh) over tokens [u, u + Tb):
 * x̂ = w x into ub, dy = dout silu(z) into dyb, E dy into rb, dout silu'(z) into gzb (when
 * given; dz = (y + D x) gz); rows [j][T][Pp]. dD += dy x into dDb + j * Pp (when given).
 * cv: three staging rows of RW floats (half storage). */
static void prep_rows(const m2_ssd_problem *pr, const m2_cpu_kernels *K, int64_t b, int64_t u,
                      int64_t Tb, int64_t h0, int64_t nh, int64_t T, int64_t Pp, const float *wt,
                      const float *E, float *cv, int64_t RW, float *ub, float *dyb, float *rb,
                      float *gzb, float *dDb) {
    const int64_t P = pr->P, TP = T * Pp;
    for (int64_t i = 0; i < Tb; i++)
        for (int64_t j = 0; j < nh; j++) {
            const int64_t h = h0 + j, o = j * TP + i * Pp;
            K->bwd_prep(P, wt[j * T + i], E[j * T + i], act_in(pr, K, &pr->x, b, u + i, h, P, cv),
                        act_in(pr, K, &pr->dout, b, u + i, h, P, cv + RW),
                        pr->z.p ? act_in(pr, K, &pr->z, b, u + i, h, P, cv + 2 * RW) : NULL,
                        ub + o, dyb + o, rb + o, gzb ? gzb + o : NULL, dDb ? dDb + j * Pp : NULL);
        }
}

/* Where row (b, t, g) of dBm (which 0) or dCm (1) is summed over the group's heads when the
 * group spans tasks: the tensor itself for F32; for half storage a float32 row in the
 * workspace ([B*L*G][N] each), rounded into the tensor once by the task that adds the
 * group's last head (put_group_rows), so that the sum over heads is rounded once. */
static float *grad_row(const bwd_job *J, const m2_view *v, int which, int64_t b, int64_t t,
                       int64_t g) {
    const m2_ssd_problem *pr = J->pr;
    if (act_f32(pr)) return row3(v, b, t, g);
    const int64_t rows = pr->B * pr->L * pr->G;
    return (float *)(J->base + J->pl.o_gbc) + ((which * rows + (b * pr->L + t) * pr->G + g) * pr->N);
}

/* Rows [u, u + Tb) of dBm (which 0) or dCm (1), from the task's per-head rows acc (head j at
 * acc + j*TN, token i at + i*Np): per group, the sum over its heads in head order. The heads
 * of a group that starts in this task are summed in cache and written once — streamed into
 * the tensor (its lines are not read first; bf16/f16: rounded once, through tmp, N floats)
 * when the whole group is here; a group that started in the previous task is added to head
 * by head (after the caller's wait_progress), and with half storage rounded into the tensor
 * by the task that holds its last head. Either way the sums and their order are those of
 * adding head after head, so the split between tasks, and with it the thread count, changes
 * no bit. */
static void put_group_rows(const bwd_job *J, const m2_cpu_kernels *K, const m2_view *v,
                           int which, int64_t b, int64_t u, int64_t Tb, int64_t h0, int64_t nh,
                           int64_t hpg, const float *acc, int64_t TN, int64_t Np, float *tmp) {
    const m2_ssd_problem *pr = J->pr;
    for (int64_t j = 0; j < nh;) {
        const int64_t g = (h0 + j) / hpg, je = (g + 1) * hpg - h0 < nh ? (g + 1) * hpg - h0 : nh;
        /* the task holds the group's first head: its heads are a prefix of the group, summed
         * in cache; streamed only when no other task adds to the rows afterwards */
        const int first = (h0 + j) % hpg == 0, last = (h0 + je) % hpg == 0;
        const int whole = first && last, half = !act_f32(pr);
        for (int64_t i = 0; i < Tb; i++) {
            if (half && whole) { /* summed here in float32, rounded once, streamed */
                K->head_sum(pr->N, hpg, acc + j * TN + i * Np, TN, tmp, 0);
                K->store_row(pr->N, (int)pr->act_dtype, tmp, arow(pr, v, b, u + i, g), 1);
                continue;
            }
            float *dst = grad_row(J, v, which, b, u + i, g);
            if (first)
                K->head_sum(pr->N, je - j, acc + j * TN + i * Np, TN, dst, whole);
            else /* the group's earlier heads are in the row: add ours one by one */
                for (int64_t q = j; q < je; q++)
                    K->axpy(pr->N, 1.0f, acc + q * TN + i * Np, dst); /* exactly dst + v */
            if (half && last) /* the group's sum is complete: rounded once */
                K->store_row(pr->N, (int)pr->act_dtype, dst, arow(pr, v, b, u + i, g), 1);
        }
        j = je;
    }
}

static void wait_progress(_Atomic int64_t *p, int64_t need) {
    while (atomic_load_explicit(p, memory_order_acquire) < need) sched_yield();
}

/* The states before blocks k0..k1 of one head set (into rcs, [k - k0][j][Pp][Np]), rerun
 * from the state before block k0 (snapshot s0, or row `in` of vin when NULL) with the
 * forward's update: bitwise the states pass A had. Uses the block buffers of pass B. */
static void bwd_recompute(const bwd_job *J, int64_t b, const m2_view *vin, int64_t in,
                          int64_t t0, int64_t t1,
                          int64_t h0, int64_t nh, int64_t g0, int64_t ng, int64_t k0, int64_t k1,
                          const double *cb, const float *s0, float *st, float *rcs,
                          unsigned char *ws) {
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    const int64_t P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np, hpg = pr->H / pr->G;
    float *ub = (float *)(ws + pl->o_u), *Bp = (float *)(ws + pl->o_B);
    float *d = (float *)(ws + pl->o_d), *E = (float *)(ws + pl->o_E);
    float *wt = (float *)(ws + pl->o_wt), *rf = (float *)(ws + pl->o_rf);
    int32_t *ridx = (int32_t *)(ws + pl->o_ri);
    const int64_t RW = Pp > Np ? Pp : Np; /* converted activation rows (half storage) */
    float *cv = (float *)(ws + pl->o_cv), *cvd = cv + ACT_ROWS * RW;
    double *ctmp = (double *)(ws + pl->o_small) + 4 * nh;
    int *nr = (int *)(ctmp + nh);
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;
    if (s0)
        memcpy(st, s0, (size_t)(nh * SN) * sizeof(float));
    else
        for (int64_t j = 0; j < nh; j++) state_in_t(vin, in, h0 + j, P, N, Pp, Np, K->tile_p, st + j * SN);
    for (int64_t k = k0; k <= k1; k++) {
        const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
        memcpy(rcs + (k - k0) * nh * SN, st, (size_t)(nh * SN) * sizeof(float));
        if (k == k1) break;
        for (int64_t j = 0; j < nh; j++) ctmp[j] = cb[k * nh + j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, ctmp, d, E, wt, NULL, nr, ridx, rf);
        scale_rows(pr, K, b, u, Tb, h0, nh, T, Pp, wt, (float *)(ws + pl->o_hr), 0, ub);
        for (int64_t q = 0; q < ng; q++)
            rows_act(pr, K, Bp + q * TN, &pr->Bm, b, u, g0 + q, Tb, N, Np, cv);
        for (int64_t j = 0; j < nh; j++)
            K->sweep(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T, M2_SWEEP_VROWS,
                     Bp + ((h0 + j) / hpg - g0) * TN, ub + j * TP, NULL, NULL, st + j * SN, NULL,
                     NULL, NULL, NULL);
    }
}

/* The backward of heads [h0, h0 + nh) (head set `set`) over tokens [t0, t1) of batch row b,
 * chunk c: from the state row `in` of vin (the state before t0) and the gradient row `dfi` of
 * vdf flowing into the state after t1 - 1 (zeros when absent); dL/d(state before t0) to row
 * `dii` of vdi when given. Per-head sums go to the chunk's slots. */
static void bwd_range(const bwd_job *J, unsigned char *ws, int64_t b, int64_t t0, int64_t t1,
                      int64_t set, int64_t ci, const m2_view *vin, int64_t in,
                      const m2_view *vdf, int64_t dfi, const m2_view *vdi, int64_t dii) {
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    const int64_t H = pr->H, P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t h0 = set * pl->hs;
    const int64_t nh = h0 + pl->hs < H ? pl->hs : H - h0;
    const int64_t hpg = H / pr->G, g0 = h0 / hpg, ng = (h0 + nh - 1) / hpg - g0 + 1;
    float *S = (float *)(ws + pl->o_S), *ub = (float *)(ws + pl->o_u);
    float *rb = (float *)(ws + pl->o_r), *wb = (float *)(ws + pl->o_w);
    float *dyb = (float *)(ws + pl->o_dy), *acc = (float *)(ws + pl->o_acc);
    float *gzb = (float *)(ws + pl->o_sg); /* dout silu'(z) rows (pass A) */
    float *Bp = (float *)(ws + pl->o_B), *Cp = (float *)(ws + pl->o_C);
    float *d = (float *)(ws + pl->o_d), *E = (float *)(ws + pl->o_E);
    float *wt = (float *)(ws + pl->o_wt), *gf = (float *)(ws + pl->o_gf);
    int32_t *ridx = (int32_t *)(ws + pl->o_ri);
    const int64_t RW = Pp > Np ? Pp : Np; /* converted activation rows (half storage) */
    float *cv = (float *)(ws + pl->o_cv), *cvd = cv + ACT_ROWS * RW;
    float *rf = (float *)(ws + pl->o_rf);
    double *c = (double *)(ws + pl->o_small), *lam = c + nh, *accA = lam + nh;
    double *accB = accA + nh, *ctmp = accB + nh;
    int *nr = (int *)(ctmp + nh);
    float *e_last = (float *)(nr + nh);
    double *cb = (double *)(ws + pl->o_cb), *s1 = (double *)(ws + pl->o_s1);
    float *snap = (float *)(ws + pl->o_snap), *dDacc = (float *)(ws + pl->o_dD);
    float *cbv = (float *)(ws + pl->o_cbv);
    unsigned char *strong = ws + pl->o_strong;
    float *rcs = (float *)(ws + pl->o_rcs), *stmp = (float *)(ws + pl->o_stmp);
    float *lamb = (float *)(ws + pl->o_lamb);
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np;
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;
    const int64_t nb = (t1 - t0 + T - 1) / T, M = pl->snap_every;
    const int64_t per_sweep = (Pp / K->tile_n) * (Np / K->tile_p); /* prefetch slots per token/8 */
    /* the previous task of this chunk shares our first head's group: its dBm/dCm
     * contributions for a token must be in place before ours are added (head order) */
    bwd_progress *prog = (bwd_progress *)(J->base + pl->o_prog) + ci * pl->nsets;
    bwd_progress *pred = (h0 % hpg != 0) ? &prog[set - 1] : NULL;
    double *pD = (double *)(J->base + pl->o_pD) + (ci * H + h0) * pl->nD;
    for (int64_t j = 0; j < nh * pl->nD; j++) pD[j] = 0.0;

    /* D rows: [H,P] in place, [H] broadcast into Dbc */
    float *Dbc = (float *)(ws + pl->o_Dh);
    for (int64_t j = 0; j < nh; j++)
        if (pr->D.p && !pr->D_per_channel) head_D(pr, h0 + j, Dbc + j * Pp);
#define DROW(j)                                                                                 \
    (!pr->D.p ? NULL                                                                            \
              : pr->D_per_channel ? (const float *)pr->D.p + (h0 + (j)) * pr->D.s[0] : Dbc + (j) * Pp)

    /* ---- pass A ---- */
    for (int64_t j = 0; j < nh; j++) {
        state_in_t(vin, in, h0 + j, P, N, Pp, Np, K->tile_p, S + j * SN);
        c[j] = 0.0;
        e_last[j] = 1.0f;
    }
    memset(ub, 0, (size_t)(nh * TP) * sizeof(float));
    memset(rb, 0, (size_t)(nh * TP) * sizeof(float));
    memset(dDacc, 0, (size_t)(nh * Pp) * sizeof(float));
    for (int64_t k = 0; k < nb; k++) {
        const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
        for (int64_t j = 0; j < nh; j++) cb[k * nh + j] = c[j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, c, d, E, wt, NULL, nr, ridx, rf);
        for (int64_t j = 0; j < nh; j++) e_last[j] = E[j * T + Tb - 1];
        if (pl->want_decay)
            for (int64_t j = 0; j < nh; j++) {
                unsigned char st = 0;
                for (int64_t i = 0; i < Tb; i++) st |= (double)d[j * T + i] * Ah[j] < BWD_STRONG_LOG;
                strong[k * nh + j] = st;
            }
        if (!pl->need_a_rows) continue;
        prep_rows(pr, K, b, u, Tb, h0, nh, T, Pp, wt, E, cv, RW, ub, dyb, rb,
                  pr->dz.p && pr->z.p ? gzb : NULL, pr->dD.p ? dDacc : NULL);
        if (pl->need_a_sweep) {
            for (int64_t q = 0; q < ng; q++) {
                rows_act(pr, K, Bp + q * TN, &pr->Bm, b, u, g0 + q, Tb, N, Np, cv);
                if (pl->want_y)
                    rows_act(pr, K, Cp + q * TN, &pr->Cm, b, u, g0 + q, Tb, N, Np, cv);
                if (pl->want_y || pl->want_decay)
                    for (int64_t i = 0; i < Tb; i++)
                        cbv[q * T + i] =
                            (float)K->dot(N, act_in(pr, K, &pr->Bm, b, u + i, g0 + q, N, cv),
                                          act_in(pr, K, &pr->Cm, b, u + i, g0 + q, N, cv + RW));
            }
            const int64_t v = u + Tb, Tn = t1 - v < T ? t1 - v : T;
            /* the λ restart snapshots (pass B) are the sweep's second copy of its end state */
            float *snapk = pl->want_decay && ((k + 1) % M == 0 || k == nb - 1)
                               ? snap + (k / M) * nh * SN : NULL;
            m2_pf pf;
            bwd_prefetch_plan(pr, pr->z.p ? &pr->dz : NULL, pr->dz.p && pr->z.p ? &pr->out_x : NULL,
                              b, u, Tb, v, Tn, h0, nh, g0, ng, NULL, 0,
                              nh * per_sweep * ((Tb + 7) / 8), pl->fp.pf_how, &pf);
            /* transposed: the update Ŝᵀ += B ⊗ x̂; the w rows Ŝᵀ r (dCm: from the state after
             * the update when y is formed, before it otherwise), the acc rows ŷ = Ŝ_{t-1} C */
            for (int64_t j = 0; j < nh; j++) {
                const int64_t q = (h0 + j) / hpg - g0;
                /* the w rows (dCm) accumulate: zeroed right before the sweep, into L1 */
                if (pl->want_acc) memset(acc + j * TN, 0, (size_t)(Tb * Np) * sizeof(float));
                K->sweep(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T,
                         M2_SWEEP_VROWS | (pl->want_y ? M2_SWEEP_R_PRE : M2_SWEEP_W_PRE),
                         Bp + q * TN, ub + j * TP, pl->want_acc ? rb + j * TP : NULL,
                         pl->want_y ? Cp + q * TN : NULL,
                         S + j * SN, snapk ? snapk + j * SN : NULL,
                         pl->want_acc ? acc + j * TN : NULL, pl->want_y ? wb + j * TP : NULL, &pf);
            }
        }
        for (int64_t i = 0; i < Tb; i++)
            for (int64_t j = 0; j < nh; j++) {
                const int64_t h = h0 + j, t = u + i;
                const float *Dr = DROW(j);
                const int64_t jt = j * TP + i * Pp;
                float *dzr = pr->dz.p && pr->z.p ? act_out(pr, &pr->dz, b, t, h, cv + 3 * RW) : NULL;
                const float *vx =
                    dzr && pr->out_x.p ? act_in(pr, K, &pr->out_x, b, t, h, P, cv + 4 * RW) : NULL;
                /* x only for y + D x formed here (no out_x) */
                const float *xr = dzr && !vx && Dr ? act_in(pr, K, &pr->x, b, t, h, P, cv) : NULL;
                const float sdy = K->bwd_a_out(
                    P, E[j * T + i], pl->want_y ? cbv[(h / hpg - g0) * T + i] : 0.0f,
                    pl->want_y ? wb + jt : NULL, vx, ub + jt, rb + jt, xr, xr ? Dr : NULL,
                    gzb + jt, dzr,
                    act_f32(pr)); /* stream into the tensor, not into a bf16/f16 staging row */
                if (dzr) act_flush(pr, K, &pr->dz, b, t, h, P, dzr);
                if (pl->want_decay && pl->want_y) {
                    s1[(t - t0) * nh + j] = (double)sdy;
                } else if (pl->want_acc) {
                    /* without y, the sweep's w row (in acc) is Ŝ_{t-1}ᵀ r (M2_SWEEP_W_PRE):
                     * a_t dy·(S_{t-1} C) = C·acc, and the dCm row Ŝ_tᵀ r = acc + (r·u) B */
                    float *ar = acc + j * TN + i * Np;
                    if (pl->want_decay)
                        s1[(t - t0) * nh + j] =
                            K->dot(N, act_in(pr, K, &pr->Cm, b, t, h / hpg, N, cv), ar);
                    if (pl->want_dc) {
                        const float ru = (float)K->dot(P, rb + jt, ub + jt);
                        const float *Br = act_in(pr, K, &pr->Bm, b, t, h / hpg, N, cv + RW);
                        K->axpy(N, ru, Br, ar);
                    }
                }
            }
        if (pl->want_dc) {
            if (pred) wait_progress(&pred->a, u + Tb - t0);
            put_group_rows(J, K, &pr->dCm, 1, b, u, Tb, h0, nh, hpg, acc, TN, Np, cv);
        }
        atomic_store_explicit(&prog[set].a, u + Tb - t0, memory_order_release);
        if (pr->dD.p) {
            for (int64_t j = 0; j < nh; j++) {
                if (pl->nD == 1) {
                    double sd = 0.0;
                    for (int64_t p = 0; p < P; p++) sd += (double)dDacc[j * Pp + p];
                    pD[j] += sd;
                } else {
                    for (int64_t p = 0; p < P; p++) pD[j * pl->nD + p] += (double)dDacc[j * Pp + p];
                }
            }
            memset(dDacc, 0, (size_t)(nh * Pp) * sizeof(float));
        }
    }
    atomic_store_explicit(&prog[set].a, t1 - t0, memory_order_release);

    /* ---- pass B ---- */
    for (int64_t j = 0; j < nh; j++) {
        float *G = S + j * SN;
        state_in_t(vdf, dfi, h0 + j, P, N, Pp, Np, K->tile_p, G);
        for (int64_t e = 0; e < SN; e++) G[e] *= e_last[j]; /* into the last segment's scale */
        lam[j] = accA[j] = accB[j] = 0.0;
    }
    if (pl->need_b)
        for (int64_t k = nb - 1; k >= 0; k--) {
            const int64_t u = t0 + k * T, Tb = t1 - u < T ? t1 - u : T;
            if (pl->want_decay && ((k + 1) % M == 0 || k == nb - 1))
                for (int64_t j = 0; j < nh; j++) /* λ_{e+1} = Σ Ĝ_{e+1} ∘ Ŝ_e */
                    lam[j] = K->dot(SN, S + j * SN, snap + (k / M) * nh * SN + j * SN);
            const int64_t k0 = k / M * M;
            if (pl->want_decay && (k == nb - 1 || (k + 1) % M == 0)) {
                /* entering a snapshot interval from its end: if any of its blocks needs the
                 * direct contraction, recompute the states before each of its blocks */
                unsigned char any = 0;
                for (int64_t e = k0 * nh; e < (k + 1) * nh; e++) any |= strong[e];
                if (any)
                    bwd_recompute(J, b, vin, in, t0, t1, h0, nh, g0, ng, k0, k, cb,
                                  k0 == 0 ? NULL : snap + (k0 / M - 1) * nh * SN, stmp, rcs, ws);
            }
            for (int64_t j = 0; j < nh; j++) ctmp[j] = cb[k * nh + j];
            K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                        pr->dt_lo, pr->dt_hi, k == 0, ctmp, d, E, wt, gf, nr, ridx, rf);
            prep_rows(pr, K, b, u, Tb, h0, nh, T, Pp, wt, E, cv, RW, ub, dyb, rb, NULL, NULL);
            for (int64_t q = 0; q < ng; q++) {
                rows_act(pr, K, Cp + q * TN, &pr->Cm, b, u, g0 + q, Tb, N, Np, cv);
                if (pl->want_gb || pl->want_decay) {
                    rows_act(pr, K, Bp + q * TN, &pr->Bm, b, u, g0 + q, Tb, N, Np, cv);
                    for (int64_t i = 0; i < Tb; i++)
                        cbv[q * T + i] =
                            (float)K->dot(N, act_in(pr, K, &pr->Bm, b, u + i, g0 + q, N, cv),
                                          act_in(pr, K, &pr->Cm, b, u + i, g0 + q, N, cv + RW));
                }
            }
            const int64_t v = u - T, Tn = k > 0 ? T : 0; /* the block visited next */
            /* the λ snapshot of the interval visited next (read at its first block), a
             * share of it per block of this interval, so that no block carries the whole
             * (nh states) on top of its own rows */
            const float *snext = NULL;
            int64_t sbytes = 0;
            if (pl->want_decay && k0 > 0) { /* in 64-byte lines of 16 floats */
                const int64_t kend = k0 + M < nb ? k0 + M : nb, cnt = kend - k0;
                const int64_t vis = kend - 1 - k, lines = nh * SN / 16;
                const int64_t l0 = lines * vis / cnt, l1 = lines * (vis + 1) / cnt;
                snext = snap + (k0 / M - 1) * nh * SN + l0 * 16;
                sbytes = (l1 - l0) * 64;
            }
            m2_pf pf;
            bwd_prefetch_plan(pr, &pr->dx, NULL, b, u, Tb, v, Tn, h0, nh, g0, ng, snext, sbytes,
                              nh * per_sweep * ((Tb + 7) / 8), pl->fp.pf_how, &pf);
            /* the block's Σ dy·y terms (pass A wrote them, one double per token and head, a
             * whole sequence ago): requested now, read after the sweeps */
            if (pl->want_decay && pl->want_gb)
                for (int64_t e = 0; e < Tb * nh; e += 8) m2_pf_line(s1 + (u - t0) * nh + e);
            /* transposed: the update Ĝᵀ += C ⊗ (E dy); the w rows Ĝᵀ x̂ (dBm, after the
             * update), the acc rows Ĝ_{t+1} B (before it) */
            for (int64_t j = 0; j < nh; j++) {
                const int64_t q = (h0 + j) / hpg - g0;
                /* the w rows (dBm) accumulate: zeroed right before the sweep, into L1 */
                if (pl->want_db) memset(acc + j * TN, 0, (size_t)(Tb * Np) * sizeof(float));
                if (pl->want_decay && strong[k * nh + j])
                    K->sweep_direct(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T,
                                    rcs + ((k - k0) * nh + j) * SN, Bp + q * TN, ub + j * TP,
                                    Cp + q * TN, rb + j * TP, pl->want_db ? ub + j * TP : NULL,
                                    pl->want_gb ? Bp + q * TN : NULL, S + j * SN,
                                    pl->want_db ? acc + j * TN : NULL,
                                    pl->want_gb ? wb + j * TP : NULL, lamb + j * T);
                else
                    K->sweep(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T,
                             M2_SWEEP_REV | M2_SWEEP_R_PRE | M2_SWEEP_VROWS, Cp + q * TN,
                             rb + j * TP, pl->want_db ? ub + j * TP : NULL,
                             pl->want_gb ? Bp + q * TN : NULL,
                             S + j * SN, NULL, pl->want_db ? acc + j * TN : NULL,
                             pl->want_gb ? wb + j * TP : NULL, &pf);
            }
            if (pl->want_gb)
                for (int64_t i = Tb - 1; i >= 0; i--)
                    for (int64_t j = 0; j < nh; j++) {
                        const int64_t h = h0 + j, t = u + i, jt = j * T + i;
                        const float *Dr = DROW(j);
                        const int64_t jp = j * TP + i * Pp;
                        float xg[2];
                        float *dxr = pr->dx.p ? act_out(pr, &pr->dx, b, t, h, cv + RW) : NULL;
                        K->bwd_b_out(P, wt[jt], cbv[(h / hpg - g0) * T + i], wb + jp, rb + jp, ub + jp,
                                     act_in(pr, K, &pr->x, b, t, h, P, cv), Dr, dyb + jp, dxr, xg,
                                     act_f32(pr));
                        if (dxr) act_flush(pr, K, &pr->dx, b, t, h, P, dxr);
                        if (pl->want_decay) {
                            /* λ_t = λ_{t+1} + a_t dy·(S_{t-1} C) − a_{t+1} d x·(G_{t+1} B),
                             * ∂L/∂d_t = x·(G_t B) + A λ_t */
                            if (strong[k * nh + j]) /* contracted directly */
                                lam[j] = (double)lamb[j * T + i];
                            else
                                lam[j] += s1[(t - t0) * nh + j] - (double)xg[1];
                            const double dd = (double)xg[0] / (double)E[jt] + (double)Ah[j] * lam[j];
                            const double draw = dd * (double)gf[jt];
                            if (pr->ddt.p) act_store1(pr, &pr->ddt, b, t, h, (float)draw);
                            accA[j] += (double)d[jt] * lam[j];
                            accB[j] += draw;
                        }
                    }
            if (pl->want_db) {
                if (pred) wait_progress(&pred->b, t1 - u);
                put_group_rows(J, K, &pr->dBm, 0, b, u, Tb, h0, nh, hpg, acc, TN, Np, cv);
            }
            atomic_store_explicit(&prog[set].b, t1 - u, memory_order_release);
        }
    atomic_store_explicit(&prog[set].b, t1 - t0, memory_order_release);
    /* dz and dx went out with non-temporal stores: order them before the task ends */
    atomic_thread_fence(memory_order_seq_cst);
    for (int64_t j = 0; j < nh; j++) {
        if (vdi && vdi->p) state_out_t(vdi, dii, h0 + j, P, N, Np, K->tile_p, S + j * SN, 1.0f);
        ((double *)(J->base + pl->o_pA))[ci * H + h0 + j] = accA[j];
        ((double *)(J->base + pl->o_pbias))[ci * H + h0 + j] = accB[j];
    }
#undef DROW
}

/* B1: chunks 1 .. K-1 of a split sequence run the reverse recurrence alone (no outputs)
 * from a zero gradient (the last chunk: from dfinal, which makes it exact), giving their
 * local gradients into their start states. */
static void bwd_task_b1(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    const m2_cpu_kernels *K = J->k;
    chunk_ref r;
    if (!chunk_item(pr, 3, task / pl->nsets, &r)) return;
    const int64_t H = pr->H, P = pr->P, N = pr->N, T = pl->T, Pp = pl->Pp, Np = pl->Np;
    const int64_t h0 = (task % pl->nsets) * pl->hs, nh = h0 + pl->hs < H ? pl->hs : H - h0;
    const int64_t hpg = H / pr->G, g0 = h0 / hpg, ng = (h0 + nh - 1) / hpg - g0 + 1;
    const int64_t SN = Np * Pp, TP = T * Pp, TN = T * Np, b = r.b;
    unsigned char *ws = J->base + pl->glob + (size_t)thread * pl->per_thread;
    float *G = (float *)(ws + pl->o_S), *ub = (float *)(ws + pl->o_u);
    float *rb = (float *)(ws + pl->o_r), *dyb = (float *)(ws + pl->o_dy);
    float *Cp = (float *)(ws + pl->o_C);
    float *d = (float *)(ws + pl->o_d), *E = (float *)(ws + pl->o_E);
    float *wt = (float *)(ws + pl->o_wt), *rf = (float *)(ws + pl->o_rf);
    int32_t *ridx = (int32_t *)(ws + pl->o_ri);
    const int64_t RW = Pp > Np ? Pp : Np; /* converted activation rows (half storage) */
    float *cv = (float *)(ws + pl->o_cv), *cvd = cv + ACT_ROWS * RW;
    double *c = (double *)(ws + pl->o_small), *ctmp = c + 4 * nh;
    int *nr = (int *)(ctmp + nh);
    double *cb = (double *)(ws + pl->o_cb);
    const float *Ah = (const float *)pr->A.p + h0;
    const float *dtb = pr->dt_bias.p ? (const float *)pr->dt_bias.p + h0 : NULL;
    const int64_t nb = (r.tb - r.ta + T - 1) / T;
    /* the segment scales at every block start (forward over the dt), E at the end */
    for (int64_t j = 0; j < nh; j++) c[j] = 0.0;
    for (int64_t k = 0; k < nb; k++) {
        const int64_t u = r.ta + k * T, Tb = r.tb - u < T ? r.tb - u : T;
        for (int64_t j = 0; j < nh; j++) cb[k * nh + j] = c[j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, c, d, E, wt, NULL, nr, ridx, rf);
    }
    const int last = r.k == r.K - 1;
    for (int64_t j = 0; j < nh; j++) {
        const m2_view none = {NULL, {0, 0, 0, 0}};
        state_in_t(last ? &pr->dfinal : &none, r.s, h0 + j, P, N, Pp, Np, K->tile_p, G + j * SN);
        const float e = E[j * T + (r.tb - r.ta - 1) % T]; /* the last token's scale */
        for (int64_t i = 0; i < SN; i++) G[j * SN + i] *= e;
    }
    memset(ub, 0, (size_t)(nh * TP) * sizeof(float));
    memset(rb, 0, (size_t)(nh * TP) * sizeof(float));
    for (int64_t k = nb - 1; k >= 0; k--) {
        const int64_t u = r.ta + k * T, Tb = r.tb - u < T ? r.tb - u : T;
        for (int64_t j = 0; j < nh; j++) ctmp[j] = cb[k * nh + j];
        K->dt_block(nh, Tb, T, act_dt(pr, K, b, u, h0, nh, Tb, cvd), ACT_DT_LD(nh), dtb, Ah, pr->dt_softplus,
                    pr->dt_lo, pr->dt_hi, k == 0, ctmp, d, E, wt, NULL, nr, ridx, rf);
        prep_rows(pr, K, b, u, Tb, h0, nh, T, Pp, wt, E, cv, RW, ub, dyb, rb, NULL, NULL);
        for (int64_t q = 0; q < ng; q++)
            rows_act(pr, K, Cp + q * TN, &pr->Cm, b, u, g0 + q, Tb, N, Np, cv);
        for (int64_t j = 0; j < nh; j++)
            K->sweep(Tb, Pp, Np, nr[j], ridx + j * T, rf + j * T, M2_SWEEP_REV | M2_SWEEP_VROWS,
                     Cp + ((h0 + j) / hpg - g0) * TN, rb + j * TP, NULL, NULL, G + j * SN, NULL,
                     NULL, NULL, NULL);
    }
    const m2_view gl = chunk_view(J->base + pl->o_gl, pr);
    for (int64_t j = 0; j < nh; j++) state_out_t(&gl, r.c, h0 + j, P, N, Np, K->tile_p, G + j * SN, 1.0f);
}

/* B2: per (sequence, head), the gradients into the chunk end states, last chunk first:
 * ge[K-2] = gl[K-1]; ge[k-1] = gl[k] + (Π_{t in chunk k} a_t) ge[k]. */
static void bwd_task_b2(void *arg, int64_t task, int thread) {
    (void)thread;
    const bwd_job *J = (const bwd_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const int64_t si = task / pr->H, h = task % pr->H, P = pr->P, N = pr->N;
    const int64_t c0 = seq_first_chunk(pr, si);
    int64_t b, t0, t1;
    m2_ssd_seq(pr, si, &b, &t0, &t1);
    const int64_t K = seq_nchunks(pr, t1 - t0);
    if (K < 2) return;
    const m2_view ge = chunk_view(J->base + J->pl.o_ge, pr);
    const m2_view gl = chunk_view(J->base + J->pl.o_gl, pr);
    const double *cdec = (const double *)(J->base + J->pl.fp.o_cdec);
    for (int64_t p = 0; p < P; p++)
        memcpy(row3(&ge, c0 + K - 2, h, p), row3(&gl, c0 + K - 1, h, p), (size_t)N * sizeof(float));
    for (int64_t k = K - 2; k >= 1; k--) {
        const float a = (float)exp(cdec[(c0 + k) * pr->H + h]);
        for (int64_t p = 0; p < P; p++) {
            const float *loc = row3(&gl, c0 + k, h, p), *src = row3(&ge, c0 + k, h, p);
            float *dst = row3(&ge, c0 + k - 1, h, p);
            for (int64_t n = 0; n < N; n++) dst[n] = loc[n] + a * src[n];
        }
    }
}

/* B3: the backward of every chunk from its true start state and end gradient. */
static void bwd_task_b3(void *arg, int64_t task, int thread) {
    const bwd_job *J = (const bwd_job *)arg;
    const bwd_plan *pl = &J->pl;
    const m2_ssd_problem *pr = J->pr;
    chunk_ref r;
    if (!chunk_item(pr, 0, task / pl->nsets, &r)) return;
    unsigned char *ws = J->base + pl->glob + (size_t)thread * pl->per_thread;
    const m2_view cs = chunk_view(J->base + pl->fp.o_cs, pr);
    const m2_view ge = chunk_view(J->base + pl->o_ge, pr);
    const int first = r.k == 0, last = r.k == r.K - 1;
    bwd_range(J, ws, r.b, r.ta, r.tb, task % pl->nsets, r.c, first ? &pr->init : &cs,
              first ? r.s : r.c, last ? &pr->dfinal : &ge, last ? r.s : r.c,
              first ? &pr->dinit : NULL, r.s);
}

mamba2_status_t m2_cpu_ssd_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_ssd_problem *pr, size_t *bytes) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    bwd_plan pl;
    bwd_make_plan(ctx, pr, &pl);
    *bytes = pl.total;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cpu_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws) {
    mamba2_status_t st = check_dtype(pr);
    if (st != MAMBA2_STATUS_OK) return st;
    bwd_job J;
    J.pr = pr;
    J.k = bwd_kernels_for(ctx, pr);
    bwd_make_plan(ctx, pr, &J.pl);
    if (!ws) return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "cpu ssd backward: no workspace");
    J.base = align64(ws);
    const int64_t H = pr->H, nch = J.pl.nch;
    bwd_progress *prog = (bwd_progress *)(J.base + J.pl.o_prog);
    for (int64_t i = 0; i < nch * J.pl.nsets; i++) {
        atomic_init(&prog[i].a, 0);
        atomic_init(&prog[i].b, 0);
    }
    if (J.pl.chunked) { /* chunk start states, then chunk end gradients (see above) */
        fwd_job F;
        F.pr = pr;
        F.k = kernels_for(ctx, pr); /* the forward's set, as its plan F.pl */
        F.base = J.base;
        F.pl = J.pl.fp;
        F.outputs = 0;
        fwd_run(ctx, &F);
        m2_cpu_run_tasks(ctx, chunk_items(pr, 3) * J.pl.nsets, bwd_task_b1, &J);
        m2_cpu_run_tasks(ctx, pr->nseq * H, bwd_task_b2, &J);
    }
    m2_cpu_run_tasks(ctx, nch * J.pl.nsets, bwd_task_b3, &J);

    /* per-head parameters: sum the (chunk, head) slots in chunk order (sequence by sequence) */
    const double *pA = (const double *)(J.base + J.pl.o_pA);
    const double *pbias = (const double *)(J.base + J.pl.o_pbias);
    const double *pD = (const double *)(J.base + J.pl.o_pD);
    for (int64_t h = 0; h < H; h++) {
        if (pr->dA.p) {
            double acc = 0.0;
            for (int64_t c = 0; c < nch; c++) acc += pA[c * H + h];
            ((float *)pr->dA.p)[h * pr->dA.s[0]] = (float)acc;
        }
        if (pr->ddt_bias.p) {
            double acc = 0.0;
            for (int64_t c = 0; c < nch; c++) acc += pbias[c * H + h];
            ((float *)pr->ddt_bias.p)[h * pr->ddt_bias.s[0]] = (float)acc;
        }
        if (pr->dD.p) {
            for (int64_t j = 0; j < J.pl.nD; j++) {
                double acc = 0.0;
                for (int64_t c = 0; c < nch; c++) acc += pD[(c * H + h) * J.pl.nD + j];
                ((float *)pr->dD.p)[h * pr->dD.s[0] + (J.pl.nD > 1 ? j * pr->dD.s[1] : 0)] =
                    (float)acc;
            }
        }
    }
    return MAMBA2_STATUS_OK;
}
