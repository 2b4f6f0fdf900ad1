/*
 * tensor.c — tensor descriptor helpers (element strides, PyTorch order).
 */
#include <string.h>

#include "core/internal.h"

size_t mamba2_dtype_size(mamba2_dtype_t dtype) {
    switch (dtype) {
    case MAMBA2_DTYPE_F32: return 4;
    case MAMBA2_DTYPE_F64: return 8;
    case MAMBA2_DTYPE_BF16: return 2;
    case MAMBA2_DTYPE_F16: return 2;
    case MAMBA2_DTYPE_I32: return 4;
    case MAMBA2_DTYPE_I64: return 8;
    case MAMBA2_DTYPE_Q8_0: return 0; /* 34-byte blocks of 32 elements: no element size */
    }
    return 0;
}

mamba2_tensor_t mamba2_tensor_make_strided(void *data, mamba2_dtype_t dtype, int32_t rank,
                                           const int64_t *shape, const int64_t *stride) {
    mamba2_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = rank;
    /* An out-of-range rank is kept as given so that validation reports it. */
    if (rank > 0 && rank <= MAMBA2_MAX_RANK && shape) {
        for (int32_t i = 0; i < rank; i++) {
            t.shape[i] = shape[i];
            t.stride[i] = stride ? stride[i] : 0;
        }
    }
    return t;
}

mamba2_tensor_t mamba2_tensor_make(void *data, mamba2_dtype_t dtype, int32_t rank,
                                   const int64_t *shape) {
    mamba2_tensor_t t = mamba2_tensor_make_strided(data, dtype, rank, shape, NULL);
    if (rank > 0 && rank <= MAMBA2_MAX_RANK && shape) {
        int64_t s = 1;
        for (int32_t i = rank - 1; i >= 0; i--) {
            t.stride[i] = s;
            /* saturate on overflow: such a stride is then refused by every entry point */
            if (__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s)) s = INT64_MAX;
        }
    }
    return t;
}
