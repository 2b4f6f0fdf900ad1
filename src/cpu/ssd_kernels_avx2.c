/*
 * ssd_kernels_avx2.c — the SSD kernels for x86-64 with AVX2 and FMA (8 float lanes).
 *
 * This is the only file of the CPU backend compiled with -mavx2 -mfma (see CMakeLists.txt);
 * ssd_cpu.c calls it only when run-time CPU detection found both (ctx->isa == M2_ISA_AVX2),
 * so the rest of the library stays runnable on any x86-64. The kernel text itself is
 * ssd_kernels_impl.h, written against the m2v_* layer of simd.h.
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/ssd_kernels_impl.h"

const m2_cpu_kernels m2_cpu_kernels_avx2 = {
    .isa = "avx2+fma",
    .tile_p = 2 * M2V_LEN,
    .tile_n = 4,
    .sweep = sweep__avx2,
    .sweep_direct = sweep_direct__avx2,
    .dt_block = dt_block__avx2,
    .scale = scale__avx2,
    .fwd_out = fwd_out__avx2,
    .bwd_prep = bwd_prep__avx2,
    .bwd_a_out = bwd_a_out__avx2,
    .bwd_b_out = bwd_b_out__avx2,
    .load_row = load_row__avx2,
    .store_row = store_row__avx2,
    .dot = dot__avx2,
    .axpy = axpy__avx2,
    .head_sum = head_sum__avx2,
};
