/*
 * cpuid.c — run-time choice of the CPU kernel set.
 *
 * The AVX2 kernels are compiled with -mavx2 -mfma in their own file; they are only called
 * when the CPU (and the OS, via XSAVE state) supports AVX2 and FMA. Elsewhere the portable
 * scalar kernels run. MAMBA2C_ISA=scalar in the environment forces the scalar path.
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

m2_isa m2_detect_isa(void) {
    const char *env = getenv("MAMBA2C_ISA");
    if (env && strcmp(env, "scalar") == 0) return M2_ISA_SCALAR;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return M2_ISA_AVX2;
#endif
    return M2_ISA_SCALAR;
}
