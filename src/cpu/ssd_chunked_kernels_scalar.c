/*
 * ssd_chunked_kernels_scalar.c — the staged SSD kernels in portable C (one float per
 * "vector"): the fallback for CPUs without AVX2+FMA, and what
 * mamba2_context_force_isa(ctx, "scalar") selects. Same kernel text
 * (ssd_chunked_kernels_impl.h) as the AVX2 set.
 */
#define M2_SIMD_SCALAR 1
#define M2_KSUFFIX __scalar
#include "cpu/ssd_chunked_kernels_impl.h"

const m2_ssd_chunk_kernels m2_ssd_chunk_kernels_scalar = {
    "scalar",
    chunk_dots__scalar,
    chunk_rank_update__scalar,
    chunk_weights__scalar,
    chunk_decay_add__scalar,
    chunk_epilogue__scalar,
};
