/*
 * ssd_kernels_avx2.c — the SSD kernels for x86-64 with AVX2 and FMA (8 float lanes).
 *
 * This is the only file of the CPU backend compiled with -mavx2 -mfma (see CMakeLists.txt);
 * ssd_cpu*.c call it only when run-time CPU detection found both (ctx->isa == M2_ISA_AVX2),
 * so the rest of the library stays runnable on any x86-64. The kernel text itself is
 * ssd_kernels_impl.h, written against the m2v_* layer of simd.h.
 */
#define M2_SIMD_AVX2 1
#define M2_KSUFFIX __avx2
#include "cpu/ssd_kernels_impl.h"

const m2_cpu_kernels m2_cpu_kernels_avx2 = M2_SSD_KERNELS("avx2+fma");
