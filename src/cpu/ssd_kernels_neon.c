/*
 * ssd_kernels_neon.c — the SSD kernels for AArch64 with Advanced SIMD (NEON, 4 float lanes:
 * the sweep's register tile is 2 vectors of p x 4 columns n = 8 x 4 floats).
 *
 * Compiled into AArch64 builds only (CMakeLists.txt; ASIMD is part of the base ISA, so no
 * flags); ssd_cpu.c reaches it through the name m2_cpu_kernels_avx2 there (kernels.h) when
 * ctx->isa == M2_ISA_NEON. The kernel text is ssd_kernels_impl.h, the same as the x86 sets',
 * over the NEON mappings of simd.h and ssd_fast_simd.h.
 */
#define M2_SIMD_NEON 1
#define M2_KSUFFIX __neon
#include "cpu/ssd_kernels_impl.h"

const m2_cpu_kernels m2_cpu_kernels_neon = {
    .isa = "neon",
    .tile_p = 2 * M2V_LEN,
    .tile_n = 4,
    .sweep = sweep__neon,
    .sweep_direct = sweep_direct__neon,
    .dt_block = dt_block__neon,
    .scale = scale__neon,
    .fwd_out = fwd_out__neon,
    .bwd_prep = bwd_prep__neon,
    .bwd_a_out = bwd_a_out__neon,
    .bwd_b_out = bwd_b_out__neon,
    .load_row = load_row__neon,
    .store_row = store_row__neon,
    .dot = dot__neon,
    .axpy = axpy__neon,
    .head_sum = head_sum__neon,
};
