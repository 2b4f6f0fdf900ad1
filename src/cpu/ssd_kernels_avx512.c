/*
 * ssd_kernels_avx512.c — the SSD kernels for x86-64 with AVX-512 F/VL/BW/DQ (16 float lanes:
 * the sweep's register tile is 2 vectors of p x 4 columns n = 32 x 4 floats).
 *
 * Compiled with -mavx512f -mavx512vl -mavx512bw -mavx512dq -mavx2 -mfma -mf16c only (see
 * CMakeLists.txt); ssd_cpu*.c call it only when run-time detection found them with OS
 * support for the ZMM state (ctx->isa == M2_ISA_AVX512), and only for problems whose P fills
 * the wider tile (kernels_for in ssd_cpu_common.c). The kernel text is ssd_kernels_impl.h, the
 * same as the AVX2 set's, over the AVX-512 mappings of simd.h and ssd_fast_simd.h.
 */
#define M2_SIMD_AVX512 1
#define M2_KSUFFIX __avx512
#include "cpu/ssd_kernels_impl.h"

const m2_cpu_kernels m2_cpu_kernels_avx512 = M2_SSD_KERNELS("avx512");
