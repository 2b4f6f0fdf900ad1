/*
 * ssd_kernels_avx512.c — the SSD kernels for x86-64 with AVX-512 F/VL/BW/DQ (16 float lanes:
 * the sweep's register tile is 2 vectors of p x 4 columns n = 32 x 4 floats).
 *
 * Compiled with -mavx512f -mavx512vl -mavx512bw -mavx512dq -mavx2 -mfma -mf16c only (see
 * CMakeLists.txt); ssd_cpu.c calls it only when run-time detection found them with OS
 * support for the ZMM state (ctx->isa == M2_ISA_AVX512), and only for problems whose P fills
 * the wider tile (kernels_for in ssd_cpu.c). The kernel text is ssd_kernels_impl.h, the
 * same as the AVX2 set's, over the AVX-512 mappings of simd.h and ssd_fast_simd.h.
 */
#define M2_SIMD_AVX512 1
#define M2_KSUFFIX __avx512
#include "cpu/ssd_kernels_impl.h"

const m2_cpu_kernels m2_cpu_kernels_avx512 = {
    .isa = "avx512",
    .tile_p = 2 * M2V_LEN,
    .tile_n = 4,
    .sweep = sweep__avx512,
    .sweep_direct = sweep_direct__avx512,
    .dt_block = dt_block__avx512,
    .scale = scale__avx512,
    .fwd_out = fwd_out__avx512,
    .bwd_prep = bwd_prep__avx512,
    .bwd_a_out = bwd_a_out__avx512,
    .bwd_b_out = bwd_b_out__avx512,
    .load_row = load_row__avx512,
    .store_row = store_row__avx512,
    .dot = dot__avx512,
    .axpy = axpy__avx512,
    .head_sum = head_sum__avx512,
};
