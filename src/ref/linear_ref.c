/*
 * linear_ref.c — the float64 reference of the decode linear layer (mamba2_linear_forward):
 * one loop nest, single thread, every value in double.
 *
 *   w[o,i]   = weight element (f32, bf16 widened exactly; q8_0: d * q with d the block's f16
 *              scale, exact in double)
 *   y[m,o]   = Σ_i x[m,i] w[o,i] + bias[o]
 *   out[m,o] = y[m,o]                (accumulate == 0)
 *            = out[m,o] + y[m,o]     (accumulate != 0)
 * The result is rounded once to the storage dtype of out.
 */
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "core/linear.h"
#include "ref/ref.h"
#include "ref/ref_common.h"

/* weight element (o, i) as double */
static double w_at(const m2_linear_problem *pr, int64_t o, int64_t i) {
    const unsigned char *row = (const unsigned char *)pr->w.p + o * pr->w_row_bytes;
    switch (pr->w_dtype) {
    case MAMBA2_DTYPE_BF16: return (double)m2_bf16_to_f32(((const uint16_t *)row)[i]);
    case MAMBA2_DTYPE_Q8_0: {
        const unsigned char *blk = row + (i / M2_Q8_0_BLOCK) * M2_Q8_0_BYTES;
        uint16_t d;
        memcpy(&d, blk, sizeof d);
        const int8_t q = (int8_t)blk[2 + i % M2_Q8_0_BLOCK];
        return (double)m2_f16_to_f32(d) * (double)q;
    }
    default: return (double)((const float *)row)[i];
    }
}

mamba2_status_t m2_ref_linear_forward(mamba2_context_t *ctx, const m2_linear_problem *pr) {
    (void)ctx;
    const mamba2_dtype_t adt = pr->act_dtype;
    for (int64_t m = 0; m < pr->M; m++)     /* x[M,I], out[M,O] */
        for (int64_t o = 0; o < pr->O; o++) { /* weight[O,I], bias[O] */
            double y = 0.0;
            for (int64_t i = 0; i < pr->I; i++)
                y += m2r_load(pr->x.p, adt, m * pr->x.s[0] + i) * w_at(pr, o, i);
            if (pr->bias.p) y += m2r_load(pr->bias.p, adt, o);
            const int64_t k = m * pr->out.s[0] + o;
            if (pr->accumulate) y += m2r_load(pr->out.p, adt, k);
            m2r_store(pr->out.p, adt, k, y);
        }
    return MAMBA2_STATUS_OK;
}
