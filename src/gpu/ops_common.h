/*
 * ops_common.h — small host helpers shared by the GPU op code of conv1d, gated RMSNorm and
 * the decode steps (src/gpu/ops_*.c), on top of gpu.h's call buffers:
 *   m2g_ops_f32        the float32-only rule of these kernels, as a readable status
 *   m2g_ops_inout      a tensor read and written in place (decode caches; outputs whose
 *                      padding rows must stay untouched): in host mode its span is copied in
 *                      as well as back, so elements the kernels skip keep their values
 */
#ifndef MAMBA2C_GPU_OPS_COMMON_H
#define MAMBA2C_GPU_OPS_COMMON_H

#include "gpu/gpu.h"

static inline mamba2_status_t m2g_ops_f32(const m2g_dev *d, const char *op, mamba2_dtype_t at,
                                          mamba2_dtype_t pt) {
    if (at != MAMBA2_DTYPE_F32 || pt != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "%s backend: the %s kernels take float32 only",
                        d->api, op);
    return MAMBA2_STATUS_OK;
}

static inline mamba2_status_t m2g_ops_inout(m2g_call *c, const m2_view *v, int rank,
                                            const int64_t *dims, size_t esize, m2g_t *t) {
    M2_TRY(m2g_call_out(c, v, rank, dims, esize, t));
    if (!v->p || c->dev->device_memory) return MAMBA2_STATUS_OK;
    size_t last = 0, span, bytes, e;
    for (int i = 0; i < rank; i++)
        if (dims[i] == 0) return MAMBA2_STATUS_OK;
    for (int i = 0; i < rank; i++)
        if (!m2_size_mul((size_t)(dims[i] - 1), (size_t)t->s[i], &e) ||
            !m2_size_add(last, e, &last))
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: tensor too large",
                            c->dev->api);
    if (!m2_size_add(last, 1, &span) || !m2_size_mul(span, esize, &bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: tensor too large", c->dev->api);
    return c->dev->write(c->dev, t->mem, 0, v->p, bytes);
}

#endif /* MAMBA2C_GPU_OPS_COMMON_H */
