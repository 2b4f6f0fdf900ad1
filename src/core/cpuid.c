/*
 * cpuid.c — run-time choice of the CPU kernel set.
 *
 * The AVX2 kernels are compiled with -mavx2 -mfma (the SSD's also -mf16c, for float16
 * storage) in their own file; they are only called when the CPU (and the OS, via XSAVE
 * state) supports AVX2, FMA and F16C (every AVX2 CPU has it). Elsewhere the portable
 * scalar kernels run. MAMBA2C_ISA=scalar in the environment forces the scalar path.
 */
#include <stdlib.h>
#include <string.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "core/internal.h"

m2_isa m2_detect_isa(void) {
    const char *env = getenv("MAMBA2C_ISA");
    if (env && strcmp(env, "scalar") == 0) return M2_ISA_SCALAR;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return M2_ISA_AVX2;
#endif
    return M2_ISA_SCALAR;
}
