/*
 * ssd_chunked_kernels_neon.c — the staged SSD kernels for AArch64 with Advanced SIMD (NEON, 4
 * floats per vector). Compiled into AArch64 builds only (CMakeLists.txt) and called when
 * ctx->isa == M2_ISA_NEON. The kernel text is ssd_chunked_kernels_impl.h.
 */
#define M2_SIMD_NEON 1
#define M2_KSUFFIX __neon
#include "cpu/ssd_chunked_kernels_impl.h"

const m2_ssd_chunk_kernels m2_ssd_chunk_kernels_neon = {
    "neon",
    chunk_dots__neon,
    chunk_rank_update__neon,
    chunk_weights__neon,
    chunk_decay_add__neon,
    chunk_epilogue__neon,
};
