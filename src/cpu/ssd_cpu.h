/*
 * ssd_cpu.h — the CPU backend of the fused SSD scan (SPEC §1–2): what its files share.
 * Planning, threading, segment bookkeeping and the fixed-order reductions live in
 *   ssd_cpu_common.c    the kernel-set choice, state layouts, prefetch rows, workspace layouts
 *   ssd_cpu_span.c      the sequence split: spans of a long sequence run as parallel tasks
 *   ssd_cpu_fwd.c       forward: plan, the pass over a token range, tasks, entry points
 *   ssd_cpu_bwd.c       backward: plan, span tasks, entry points, the per-head sums
 *   ssd_cpu_bwd_pass.c  backward: passes A and B of one head set over a token range
 * The arithmetic on states lives in the per-ISA kernel sets (kernels.h, ssd_kernels_impl.h),
 * picked from ctx->isa at every call. docs/cpu_ssd.md explains the design with measurements.
 *
 * The recurrence (plain, not the chunked form: SPEC §1 lets Q only block the work) with the
 * state rescaled inside segments: Ŝ_t = S_t / E_t, E_t = exp(c_t), c_t = Σ log a_s over the
 * segment's tokens after its first (c = 0 at its first token). Then
 *     Ŝ_t = Ŝ_{t-1} + (d_t / E_t) x_t ⊗ B_t      and      y_t = E_t (Ŝ_t · C_t):
 * one FMA per state element for the update and one per output, no decay multiply. A segment
 * starts at the sequence's first token and wherever c would fall below M2_SEG_LOG_MIN (e^-60);
 * there the carried state is multiplied once by f = E_{t-1} a_t (in double: it may underflow
 * to 0, which is the right answer) and c restarts at 0. So 1/E_t <= e^60 stays far from float
 * overflow and E_t >= e^-60 from underflow, even for dt·|A| in the hundreds. Segment starts
 * depend only on the token sequence (the kernels' dt_block finds them), never on the
 * blocking or the thread count, and the sweep applies the factor at the token itself, so the
 * arithmetic of every token is fixed by the problem. The kernel `sweep` runs one state over
 * a block of T tokens in a register tile (kernels.h: M2_TILE_VECS vectors x M2_TILE_COLS
 * columns): the forward's states are [N][P] (p along the vectors), the backward's [P][N].
 *
 * Spans (ssd_cpu_span.c): with few (sequence, head) pairs (< M2_CPU_PAR_WIDTH), each long
 * sequence is cut into K spans that run in parallel from zero states; a short sequential pass
 * carries the true states over the span boundaries and the spans run again from them
 * (forward); the backward does the same for the gradients flowing into the span ends. K
 * depends on the problem only. (A span is unrelated to the chunk size Q.)
 *
 * Workspace (64-byte aligned inside the caller's buffer; nothing is allocated): a global
 * region, then one region per thread, each a list of buffers (FWD_GLOBAL, FWD_THREAD,
 * BWD_GLOBAL, BWD_THREAD below) laid out with checked arithmetic (m2_ssdc_fwd_plan,
 * bwd_plan_make in ssd_cpu_bwd.c: a size that does not fit is refused with OUT_OF_MEMORY,
 * never wrapped) and bound to typed pointers per task (fwd_bind, bwd_bind). The *_workspace
 * queries report the plan's total.
 *
 * Determinism: every value is produced by one task, and every sum over tasks runs in an
 * order fixed by the problem alone:
 *   - dA, dD, ddt_bias: per (span, head) double slots, added in span order at the end.
 *   - dBm, dCm (a group is shared by H/G heads): a task adds its heads' rows in head order;
 *     when a group spans two tasks, the later task waits (yielding) for the earlier one's
 *     progress counter before adding its rows for a block, so every row is
 *     c_h0 + c_h1 + ... in head order for any thread count. The earlier task has the lower
 *     index and the pool hands out tasks in index order, so it is already running.
 *   - span boundaries and head-set splits change no arithmetic of a head (spans are fixed by
 *     the problem; sets only group heads).
 * No float atomics anywhere.
 */
#ifndef MAMBA2C_CPU_SSD_CPU_H
#define MAMBA2C_CPU_SSD_CPU_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "core/internal.h"
#include "cpu/cpu.h"
#include "cpu/kernels.h"

/* ---- small helpers ------------------------------------------------------------------ */

/* Row (i0, i1, i2) of a 4-dim view: [B,L,H,P] at (b,t,h), [B,L,G,N] at (b,t,g),
 * [S,H,P,N] at (s,h,p); for [B,L,H] it is the element (b,t,h). */
static inline float *row3(const m2_view *v, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)v->p + i0 * v->s[0] + i1 * v->s[1] + i2 * v->s[2];
}
static inline float at1(const m2_view *v, int64_t i) { return ((const float *)v->p)[i * v->s[0]]; }
static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static inline unsigned char *m2_ssdc_align64(void *p) {
    return (unsigned char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* ---- activations in their storage dtype ------------------------------------------------
 * x, dt, Bm, Cm, z, out and the activation gradients are F32, BF16 or F16 (pr->act_dtype);
 * the kernels compute in float. A row is read through act_in (the row itself for F32, else
 * converted into tmp) and written through act_out + act_flush (into tmp, then rounded into
 * the tensor; nothing to do for F32). Rows are converted where they are used, so they are in
 * cache, and a half tensor moves half the bytes. tmp: one of the per-thread rows `cv`
 * (ACT_ROWS rows of max(Pp, Np) floats; the dt block has its own rows, `cvd`). */
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
static inline const float *act_in_heads(const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                                        const m2_view *v, int64_t b, int64_t t, int64_t h0,
                                        int64_t nh, int64_t P, float *tmp, int64_t *ld) {
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
static inline float *act_out_heads(const m2_ssd_problem *pr, const m2_view *v, int64_t b,
                                   int64_t t, int64_t h0, int64_t P, float *tmp, int64_t *ld) {
    *ld = act_f32(pr) ? v->s[2] : P;
    return act_f32(pr) ? row3(v, b, t, h0) : tmp;
}
static inline void act_flush_heads(const m2_ssd_problem *pr, const m2_cpu_kernels *K,
                                   const m2_view *v, int64_t b, int64_t t, int64_t h0,
                                   int64_t nh, int64_t P, const float *tmp) {
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

/* ---- shared helpers (ssd_cpu_common.c) ------------------------------------------------ */

/* The kernel sets of the forward and of the backward (their rules: ssd_cpu_common.c). */
const m2_cpu_kernels *m2_ssdc_fwd_kernels(const mamba2_context_t *ctx, const m2_ssd_problem *pr);
const m2_cpu_kernels *m2_ssdc_bwd_kernels(const mamba2_context_t *ctx, const m2_ssd_problem *pr);
/* UNSUPPORTED unless F32/BF16/F16 activations with F32 parameters. */
mamba2_status_t m2_ssdc_check_dtype(const m2_ssd_problem *pr);
/* D row of head h as P floats: [H,P] is read in place, [H] is broadcast into buf; NULL
 * without D. */
const float *m2_ssdc_head_D(const m2_ssd_problem *pr, int64_t h, float *buf);
/* The backward's transposed state layout [Pp][Np] (n contiguous, zero padded, tile-major with
 * tiles tb wide): state row (s,h) of a [S,H,P,N] view in (zeros when st->p is NULL), and
 * e * S out. */
void m2_ssdc_state_in_t(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                        int64_t Pp, int64_t Np, int64_t tb, float *S);
void m2_ssdc_state_out_t(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                         int64_t Np, int64_t tb, const float *S, float e);
/* A problem without tokens (L = 0: every sequence empty) needs no scan and no workspace
 * (the scan's state buffers grow with P N, which such a call must not pay for): each row
 * (s,h) of the [S,H,P,N] state output dst becomes the same row of src (zeros when src->p is
 * NULL), as the scan over zero tokens leaves it (final = initial_state, dinitial_state =
 * dfinal_state). Rows run as tasks over (s,h) on the context's pool. */
void m2_ssdc_empty_states(mamba2_context_t *ctx, const m2_ssd_problem *pr, const m2_view *dst,
                          const m2_view *src);
/* Rows (b, u + t, g), t < Tb, of a [B,L,G,N] activation as rows [T][Np] (zeros past N). */
void m2_ssdc_rows_act(const m2_ssd_problem *pr, const m2_cpu_kernels *K, float *dst,
                      const m2_view *v, int64_t b, int64_t u, int64_t g, int64_t Tb, int64_t N,
                      int64_t Np, float *tmp);
/* Request the rows of nt tokens x nh heads (or groups) of a view from row (b, u, h0), len
 * elements each, into the prefetch plan pf (ssd_cpu_common.c says how). */
void m2_ssdc_pf_add_rows(m2_pf *pf, const m2_ssd_problem *pr, const m2_view *v, int64_t b,
                         int64_t u, int64_t h0, int64_t nt, int64_t nh, int64_t len, int how);

/* ---- workspace layouts ---------------------------------------------------------------
 * A region is a list X(type, name, factors...) of buffers of Π factors elements each, every
 * one at a 64-byte boundary. WS_OFF / WS_PTR expand a list into a struct of offsets / of
 * typed pointers; WS_TAKE, inside a layout function with a `ws_acc acc` and a layout `lay`,
 * places a buffer (checked: acc.ok = 0 when a size does not fit in size_t). */
typedef struct ws_acc {
    size_t off;
    int ok;
} ws_acc;
/* Reserve Π f[0..n) elements of `size` bytes at the next 64-byte boundary; the offset. */
size_t m2_ssdc_ws_take(ws_acc *a, size_t size, const size_t *f, size_t n);
/* *r = a + b * c with the check; 0 on overflow */
int m2_ssdc_size_fma(size_t a, size_t b, size_t c, size_t *r);
#define WS_OFF(ty, nm, ...) size_t nm;
#define WS_PTR(ty, nm, ...) ty *nm;
#define WS_TAKE(ty, nm, ...)                                                                    \
    lay->nm = m2_ssdc_ws_take(&acc, sizeof(ty), (const size_t[]){__VA_ARGS__},                   \
                              sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t));
/* A workspace size that does not fit: OUT_OF_MEMORY, with the problem's sizes. */
mamba2_status_t m2_ssdc_too_big(const m2_ssd_problem *pr, const char *what);

/* ---- spans: the sequence split (ssd_cpu_span.c) -------------------------------------- */

/* Span k of sequence s (K spans): tokens [ta, tb) of batch row b, the sequence [t0, t1);
 * c: its global index (spans numbered sequence after sequence). */
typedef struct span_ref {
    int64_t s, k, K, b, ta, tb, t0, t1, c;
} span_ref;
/* Which spans of every sequence a pass runs: all of them; of a split sequence the first
 * K - 1 (an unsplit sequence: itself); of a split sequence the last K - 1 (unsplit: none). */
enum { SPANS_ALL = 0, SPANS_FIRST = 1, SPANS_LAST = 3 };
int64_t m2_span_count(const m2_ssd_problem *pr, int64_t len); /* K of a sequence of len tokens */
int64_t m2_span_first(const m2_ssd_problem *pr, int64_t si);  /* global index of its span 0 */
int64_t m2_span_total(const m2_ssd_problem *pr);              /* spans in all */
int64_t m2_span_longest(const m2_ssd_problem *pr);            /* tokens of the longest span */
/* The i-th item of a pass (mode SPANS_*): 0 past the last one. */
int m2_span_item(const m2_ssd_problem *pr, int mode, int64_t i, span_ref *r);
int64_t m2_span_items(const m2_ssd_problem *pr, int mode);
/* A [nspan, H, P, N] state buffer of the workspace as a view. */
m2_view m2_span_view(void *p, const m2_ssd_problem *pr);
/* S_start[k+1] = exp(dec_k) S_start[k] + S_local[k] for k = 1 .. K-2 of the sequence whose
 * spans start at global index c0, head h (S_start[1] is span 0's end state, in place). */
void m2_span_carry(const m2_ssd_problem *pr, const m2_view *cs, const m2_view *cl,
                   const double *cdec, int64_t c0, int64_t K, int64_t h);

/* ---- forward (ssd_cpu_fwd.c) ----------------------------------------------------------- */

/* The forward's workspace: global (the split sequences' span states), per thread (a head
 * set's states and block buffers). Sizes in the plan's terms: nst = (split ? nspan * H : 0)
 * state slots of PN = P * N floats; hs heads per set, ng groups it spans, T tokens a block,
 * Pp, Np the padded state sides, RW = max(Pp, Np). */
#define FWD_GLOBAL(X)                                                                           \
    X(float, cs, nst, PN)  /* span start states [nspan][H][P][N]                    */         \
    X(float, cl, nst, PN)  /* span local end states (from zero)                     */         \
    X(double, cdec, nst)   /* span log decays Σ d A, per (span, head)               */
#define FWD_THREAD(X)                                                                           \
    X(float, S, hs, Np, Pp) /* carried states Ŝ, [hs][Np][Pp]                        */        \
    X(float, u, T, Pp)      /* (d_t/E_t) x_t of the head swept, [T][Pp]              */        \
    X(float, y, hs, T, Pp)  /* Ŝ_t·C_t, [hs][T][Pp]                                   */        \
    X(float, B, ng, T, Np)  /* B rows per group, packed [ng][Np/4][T][4]              */        \
    X(float, C, ng, T, Np)  /* C rows per group, likewise                             */        \
    X(float, d, hs, T)      /* processed dt per head and token                        */        \
    X(float, E, hs, T)      /* segment scale E_t                                      */        \
    X(float, w, hs, T)      /* d_t / E_t                                              */        \
    X(float, D, hs, Pp)     /* D[h] broadcast over P                                  */        \
    X(int32_t, ri, hs, T)   /* segment restarts per head: token indices...            */        \
    X(float, rf, hs, T)     /* ... and their factors                                  */        \
    X(double, c, hs)        /* running log scale per head                             */        \
    X(double, dec, hs)      /* Σ d A per head (span passes)                           */        \
    X(int, nr, hs)          /* restarts in the block per head                         */        \
    X(float, e_last, hs)    /* E of the last token done                               */        \
    X(float, cv, ACT_ROWS, RW) /* activation rows converted from half storage         */        \
    X(float, cvd, T, hs)    /* the dt block converted from half storage               */        \
    X(float, hr, half, T + 3, hs, P) /* half: the block's x rows of the set, a token's   \
                                        z, out, out_x rows                            */

typedef struct fwd_layout {
    FWD_GLOBAL(WS_OFF)
    FWD_THREAD(WS_OFF)
    size_t glob, per_thread; /* bytes of the global region and of each thread's */
} fwd_layout;
typedef struct fwd_ws {
    FWD_GLOBAL(WS_PTR)
    FWD_THREAD(WS_PTR)
} fwd_ws;

typedef struct fwd_plan {
    int64_t T, Pp, Np;
    int64_t hs, nsets, ngmax; /* heads per task, tasks per span, groups a task spans */
    int64_t nspan;            /* spans in all (nseq when no sequence is split) */
    int split, nthr;
    int pf_how; /* the far prefetches' hint: M2_PF_L2, or M2_PF_NTA on AMD cores (ctx->amd) */
    fwd_layout lay;
    size_t total; /* workspace bytes (+ 64 of slack for the alignment) */
} fwd_plan;

typedef struct fwd_job {
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *k;
    unsigned char *base; /* the workspace, 64-byte aligned */
    fwd_plan pl;
    int outputs; /* 0: only the span states (the backward's use) */
} fwd_job;

/* The plan of a forward (OUT_OF_MEMORY with a message when its workspace does not fit). */
mamba2_status_t m2_ssdc_fwd_plan(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                 fwd_plan *pl);
/* Heads per task for `items` spans on nthr threads, per_head bytes of buffers per head. */
int64_t m2_ssdc_head_set(const m2_ssd_problem *pr, int64_t items, int nthr, size_t per_head);
/* The forward's passes (one when no sequence is split). */
void m2_ssdc_fwd_run(mamba2_context_t *ctx, fwd_job *J);
/* The typed pointers of the global region and of thread `thread`'s region. */
static inline fwd_ws fwd_bind(const fwd_layout *l, unsigned char *base, int thread) {
    fwd_ws w;
    unsigned char *t = base + l->glob + (size_t)thread * l->per_thread;
#define WS_BIND_G(ty, nm, ...) w.nm = (ty *)(base + l->nm);
#define WS_BIND_T(ty, nm, ...) w.nm = (ty *)(t + l->nm);
    FWD_GLOBAL(WS_BIND_G)
    FWD_THREAD(WS_BIND_T)
    return w;
}

/* ---- backward (ssd_cpu_bwd.c, ssd_cpu_bwd_pass.c) ---------------------------------------- */

/* per task: progress of pass A (tokens done from the start) and of pass B (from the end),
 * each on its own cache line */
typedef struct bwd_progress {
    _Atomic int64_t a;
    char pad_a[64 - sizeof(int64_t)];
    _Atomic int64_t b;
    char pad_b[64 - sizeof(int64_t)];
} bwd_progress;

/* The backward's workspace: the forward's global region first (its span passes run inside
 * the backward's workspace), then BWD_GLOBAL; per thread the larger of the forward's region
 * and BWD_THREAD. Sizes: nsh = nspan * H slots, nstb = (split ? nsh : 0) state slots, nD
 * values of D per head, sdk = 1 when the decay gradient is wanted, nblk blocks and nsnap
 * snapshots of the longest span, M blocks between snapshots. */
#define BWD_GLOBAL(X)                                                                           \
    X(double, pA, nsh)              /* per (span, head) sums, added in span order    */         \
    X(double, pbias, nsh)                                                                       \
    X(double, pD, nsh, nD)                                                                      \
    X(bwd_progress, prog, nspan, nsets)                                                         \
    X(float, ge, nstb, PN)          /* gradient into each span's end state           */         \
    X(float, gl, nstb, PN)          /* a span's local gradient into its start state  */         \
    X(float, gbc, gcopy, 2, Bt, L, G, N) /* half: dBm, dCm partial sums ([2][B][L][G][N]) */
#define BWD_THREAD(X)                                                                           \
    X(float, S, hs, Np, Pp)   /* Ŝ in pass A, Ĝ in pass B, [hs][Pp][Np]               */        \
    X(float, u, hs, T, Pp)    /* x̂ = w x, [hs][T][Pp]                                  */        \
    X(float, r, hs, T, Pp)    /* E dy                                                 */        \
    X(float, w, hs, T, Pp)    /* ŷ (pass A) or Ĝ B (pass B): the sweep's acc rows      */        \
    X(float, dy, hs, T, Pp)   /* dy = dout silu(z)                                    */        \
    X(float, sg, hs, T, Pp)   /* dout silu'(z), pass A                                */        \
    X(float, acc, hs, T, Np)  /* per head dCm (pass A) or dBm (pass B) rows            */        \
    X(float, B, ng, T, Np)    /* B, C rows per group, [ng][T][Np]                     */        \
    X(float, C, ng, T, Np)                                                                      \
    X(float, d, hs, T)                                                                          \
    X(float, E, hs, T)                                                                          \
    X(float, wt, hs, T)                                                                         \
    X(float, gf, hs, T)       /* ∂d/∂dt_raw                                            */        \
    X(int32_t, ri, hs, T)                                                                       \
    X(float, rf, hs, T)                                                                         \
    X(double, c, hs)          /* per head: running log scale, ...                     */        \
    X(double, lam, hs)        /* λ, ...                                               */        \
    X(double, accA, hs)       /* Σ d λ (dA), ...                                       */        \
    X(double, accB, hs)       /* Σ ∂L/∂dt (ddt_bias), ...                              */        \
    X(double, ctmp, hs)       /* the log scale of a block start, ...                  */        \
    X(int, nr, hs)            /* restarts in the block, ...                           */        \
    X(float, e_last, hs)      /* E of the last token                                  */        \
    X(double, cb, nblk, hs)   /* log scale at each block start                        */        \
    X(double, s1, sdk, hs, Lmax) /* a_t dy·(S_{t-1} C) per token and head (pass A)     */        \
    X(float, snap, nsnap, hs, Np, Pp) /* λ restart snapshots of Ŝ                       */        \
    X(float, dD, hs, Pp)      /* dD partial sums of a block                           */        \
    X(float, Dh, hs, Pp)      /* D[h] broadcast over P                                */        \
    X(float, cbv, ng, T)      /* B_t·C_t per group                                    */        \
    X(unsigned char, strong, sdk, nblk, hs) /* strong decay per (block, head)          */        \
    X(float, rcs, sdk, M, hs, Np, Pp) /* recomputed states before an interval's blocks  */        \
    X(float, stmp, sdk, hs, Np, Pp)   /* the running state of that recompute            */        \
    X(float, lamb, hs, T)     /* λ of a directly contracted block                     */        \
    X(float, cv, ACT_ROWS, RW) /* activation rows converted from half storage          */        \
    X(float, cvd, T, hs)      /* the dt block converted from half storage             */        \
    X(float, hr, half, hs, P) /* half: a token's x rows of the set                    */

typedef struct bwd_layout {
    FWD_GLOBAL(WS_OFF)
    BWD_GLOBAL(WS_OFF)
    BWD_THREAD(WS_OFF)
    size_t glob, per_thread;
} bwd_layout;
typedef struct bwd_ws {
    FWD_GLOBAL(WS_PTR)
    BWD_GLOBAL(WS_PTR)
    BWD_THREAD(WS_PTR)
} bwd_ws;

typedef struct bwd_plan {
    int64_t T, Pp, Np, hs, nsets, ngmax;
    int64_t Lmax, nblk, snap_every, nsnap, nD; /* Lmax: longest span */
    int64_t nspan;
    int nthr, split;
    int want_decay, want_dc, want_acc, want_y, want_db, want_gb, need_a_rows, need_a_sweep, need_b;
    fwd_plan fp; /* the forward's span passes, run inside the backward's workspace */
    bwd_layout lay;
    size_t total;
} bwd_plan;

typedef struct bwd_job {
    const m2_ssd_problem *pr;
    const m2_cpu_kernels *k;
    unsigned char *base;
    bwd_plan pl;
} bwd_job;

static inline bwd_ws bwd_bind(const bwd_layout *l, unsigned char *base, int thread) {
    bwd_ws w;
    unsigned char *t = base + l->glob + (size_t)thread * l->per_thread;
    FWD_GLOBAL(WS_BIND_G)
    BWD_GLOBAL(WS_BIND_G)
    BWD_THREAD(WS_BIND_T)
    return w;
}
#undef WS_BIND_G
#undef WS_BIND_T

/* The backward of head set `set` over tokens [t0, t1) of batch row b, span ci (global
 * index): from the state row `in` of vin (the state before t0) and the gradient row `dfi` of
 * vdf flowing into the state after t1 - 1 (zeros when absent); dL/d(state before t0) to row
 * `dii` of vdi when given. Per-head sums go to the span's slots. (ssd_cpu_bwd_pass.c) */
void m2_ssdc_bwd_range(const bwd_job *J, const bwd_ws *w, int64_t b, int64_t t0, int64_t t1,
                       int64_t set, int64_t ci, const m2_view *vin, int64_t in,
                       const m2_view *vdf, int64_t dfi, const m2_view *vdi, int64_t dii);
/* Span *r (one of spans 1 .. K-1 of a split sequence), head set `set`: the reverse
 * recurrence alone (no outputs) from a zero gradient (the last span: from dfinal), the
 * span's local gradient into its start state to w->gl. (ssd_cpu_bwd_pass.c) */
void m2_ssdc_bwd_local(const bwd_job *J, const bwd_ws *w, const span_ref *r, int64_t set);

#endif /* MAMBA2C_CPU_SSD_CPU_H */
