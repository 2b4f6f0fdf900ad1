/*
 * ssd_chunked_kernels_avx2.c — the staged SSD kernels for x86-64 with AVX2 and FMA (8 floats
 * per vector). Compiled with -mavx2 -mfma (see CMakeLists.txt) and called only when run-time
 * detection found both (ctx->isa == M2_ISA_AVX2). The kernel text is
 * ssd_chunked_kernels_impl.h.
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/ssd_chunked_kernels_impl.h"

const m2_ssd_chunk_kernels m2_ssd_chunk_kernels_avx2 = {
    "avx2+fma",
    chunk_dots__avx2,
    chunk_rank_update__avx2,
    chunk_weights__avx2,
    chunk_decay_add__avx2,
    chunk_epilogue__avx2,
};
