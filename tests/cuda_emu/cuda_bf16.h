// cuda_bf16.h (host emulation) — the part of CUDA's bfloat16 header the kernels use: the
// storage type and the float conversions (round to nearest even, NaN kept quiet), as on the
// device. Found before the toolkit's header because tests/cuda_emu is first on the include path.
#ifndef M2EMU_CUDA_BF16_H
#define M2EMU_CUDA_BF16_H

#include "cuda_shim.h"

struct __nv_bfloat16 {
    unsigned short x;
};

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    unsigned int u = __float_as_uint(f);
    __nv_bfloat16 r;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        r.x = (unsigned short)((u >> 16) | 0x0040u);
        return r;
    }
    u += 0x7FFFu + ((u >> 16) & 1u);
    r.x = (unsigned short)(u >> 16);
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    return __uint_as_float((unsigned int)h.x << 16);
}

#endif // M2EMU_CUDA_BF16_H
