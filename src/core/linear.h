/*
 * linear.h — the decode linear layer (mamba2_linear_forward) as the core hands it to a
 * backend.
 *
 * linear_api.c validates every argument and fills an m2_linear_problem; the backends
 * (src/ref/linear_ref.c, src/cpu/linear_cpu.c) may assume what is written here: shapes agree,
 * x's and out's last dimensions are contiguous, out overlaps no input, dtypes are supported,
 * and for Q8_0 weights I is a multiple of 32.
 */
#ifndef MAMBA2C_LINEAR_H
#define MAMBA2C_LINEAR_H

#include "core/internal.h"

/* GGUF's Q8_0: blocks of 32 weights, each an f16 scale then 32 int8 (34 bytes) */
#define M2_Q8_0_BLOCK 32
#define M2_Q8_0_BYTES 34

struct m2_linear_problem {
    int64_t M, O, I;          /* rows of x, outputs, inputs                                 */
    mamba2_dtype_t act_dtype; /* x, out, bias: F32 (F64 on the reference)                   */
    mamba2_dtype_t w_dtype;   /* F32, BF16 or Q8_0                                          */
    int accumulate;           /* out += ... instead of out = ...                            */
    int quantize_x;           /* Q8_0 weights only: x rounded to Q8_0, integer products     */
    int64_t w_row_bytes;      /* bytes from weight row o to row o + 1 (every w_dtype)       */

    /* inputs        shape    strides used                                                   */
    m2_view x;    /* [M,I]    element (m,i) at s[0]*m + i                                    */
    m2_view w;    /* [O,I]    row o at byte w_row_bytes*o; f32/bf16 elements contiguous      */
    m2_view bias; /* [O]      optional, contiguous                                           */
    /* output */
    m2_view out;  /* [M,O]    element (m,o) at s[0]*m + o                                    */
};

/* linear_api.c: mamba2_linear_forward's checks (opts not NULL), for an entry point already
 * holding ctx (mamba2_block_step). */
mamba2_status_t m2_linear_prepare(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                  const mamba2_tensor_t *x, const mamba2_tensor_t *weight,
                                  const mamba2_linear_options_t *opts, m2_linear_problem *pr);

#endif /* MAMBA2C_LINEAR_H */
