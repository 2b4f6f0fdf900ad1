/*
 * linear_cpu.c — the CPU backend of the decode linear layer (mamba2_linear_forward): output
 * row blocks, threads, bias and accumulation. The dot products live in the per-ISA kernel
 * sets (linear_kernels.h), picked from ctx->isa at every call.
 *
 * One task per ROWS output rows (a fixed count, never derived from the thread count); the
 * pool hands tasks out dynamically. A task walks its rows in tiles: with M == 1 four weight
 * rows at a time (4x1), otherwise two weight rows against two rows of x (2x2, then 2x1 for
 * an odd last row), so each group of two x rows re-reads the tile's weight rows from L1.
 * Every out[m,o] is one kernel chain whatever the tile (linear_kernels.h), so results are
 * bitwise identical for every thread count, every M and every position of a row.
 */
#include <stdint.h>

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
    if (pr->M == 1) {
        for (; o + 4 <= o1; o += 4) {
            a->tile[M2_LIN_4x1](I, w + o * wrb, wrb, x, xs, res);
            store(pr, o, 4, 0, 1, res);
        }
        for (; o < o1; o++) {
            a->tile[M2_LIN_1x1](I, w + o * wrb, wrb, x, xs, res);
            store(pr, o, 1, 0, 1, res);
        }
        return;
    }
    for (; o < o1; o += 2) {
        const int nr = o + 2 <= o1 ? 2 : 1;
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

mamba2_status_t m2_cpu_linear_forward(mamba2_context_t *ctx, const m2_linear_problem *pr) {
    const int fmt = pr->w_dtype == MAMBA2_DTYPE_Q8_0   ? M2_LIN_Q8_0
                    : pr->w_dtype == MAMBA2_DTYPE_BF16 ? M2_LIN_BF16
                                                       : M2_LIN_F32;
    lin_arg a = {pr, kernels_for(ctx)->tile[fmt]};
    m2_cpu_run_tasks(ctx, (pr->O + ROWS - 1) / ROWS, lin_task, &a);
    return MAMBA2_STATUS_OK;
}
