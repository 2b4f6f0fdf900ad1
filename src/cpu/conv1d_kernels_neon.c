/*
 * conv1d_kernels_neon.c — the conv1d kernels for AArch64 with Advanced SIMD (NEON, 4
 * channels per vector). Compiled into AArch64 builds only (CMakeLists.txt) and called when
 * ctx->isa == M2_ISA_NEON. The kernel text is conv1d_kernels_impl.h, as for the x86 sets:
 * each lane does the same float operations; channels n mod 4 run the scalar tail.
 */
#define M2_SIMD_NEON 1
#define M2_KSUFFIX __neon
#include "cpu/conv1d_kernels_impl.h"

const m2_conv1d_kernels m2_conv1d_kernels_neon = {
    "neon",
    conv1d_fwd__neon,
    conv1d_bwd__neon,
    conv1d_step__neon,
    conv1d_pack_w__neon,
    conv1d_stream_fence__neon,
};
