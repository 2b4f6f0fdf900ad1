/*
 * cpuid.c — run-time choice of the CPU kernel set.
 *
 * The AVX2 kernels are compiled with -mavx2 -mfma (the SSD's also -mf16c, for float16
 * storage) in their own file; they are only called when the CPU (and the OS, via XSAVE
 * state) supports AVX2, FMA and F16C (every AVX2 CPU has it). The AVX-512 level (conv1d's
 * 16-lane kernels; the other ops keep their AVX2 kernels there) needs AVX-512 F, VL, BW and
 * DQ on top, and an OS that saves the opmask and ZMM registers (XCR0 bits 5-7). Elsewhere the
 * portable scalar kernels run. MAMBA2C_ISA=scalar or =avx2 in the environment caps the level.
 */
#include <stdlib.h>
#include <string.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "core/internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
/* XCR0 has the SSE, AVX (YMM), opmask, ZMM0-15 upper and ZMM16-31 state bits: the OS saves
 * the AVX-512 registers across context switches. __builtin_cpu_supports("avx512f") checks the
 * same in libgcc and compiler-rt; checked here too so the rule does not rest on a runtime. */
static int os_saves_zmm(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned lo = 0, hi = 0;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0)); /* xgetbv(0) */
    return (lo & 0xe6u) == 0xe6u;
}
#endif

static m2_isa cpu_isa(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c))
        return M2_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && os_saves_zmm())
        return M2_ISA_AVX512;
    return M2_ISA_AVX2;
#else
    return M2_ISA_SCALAR;
#endif
}

int m2_detect_amd(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    char v[13];
    memcpy(v, &b, 4), memcpy(v + 4, &d, 4), memcpy(v + 8, &c, 4), v[12] = 0;
    return strcmp(v, "AuthenticAMD") == 0;
#else
    return 0;
#endif
}

m2_isa m2_detect_isa(void) {
    m2_isa isa = cpu_isa();
    const char *env = getenv("MAMBA2C_ISA");
    if (env && strcmp(env, "scalar") == 0) isa = M2_ISA_SCALAR;
    if (env && (strcmp(env, "avx2") == 0 || strcmp(env, "avx2+fma") == 0) && isa > M2_ISA_AVX2)
        isa = M2_ISA_AVX2;
    return isa;
}
