/*
 * cpuid.c — run-time choice of the CPU kernel set.
 *
 * The AVX2 kernels are compiled with -mavx2 -mfma (the SSD's also -mf16c, for float16
 * storage) in their own file; they are only called when the CPU (and the OS, via XSAVE
 * state) supports AVX2, FMA and F16C (every AVX2 CPU has it). The AVX-512 level (conv1d's
 * 16-lane kernels; the other ops keep their AVX2 kernels there) needs AVX-512 F, VL, BW and
 * DQ on top, and an OS that saves the opmask and ZMM registers (XCR0 bits 5-7).
 *
 * AArch64: the NEON set (ASIMD, with its float16 conversions) needs nothing beyond the base
 * architecture, which makes FP and ASIMD mandatory; the check still asks the OS (Linux:
 * getauxval(AT_HWCAP) HWCAP_FP and HWCAP_ASIMD; macOS: sysctlbyname("hw.optional.neon"))
 * so that a kernel or emulator that disables them gets the scalar set. The NEON kernels are
 * compiled only into AArch64 builds (CMakeLists.txt).
 *
 * Elsewhere the portable scalar kernels run. MAMBA2C_ISA=scalar (any architecture) or =avx2
 * (x86-64) in the environment caps the level.
 */
#include <stdlib.h>
#include <string.h>
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define M2_CPUID_X86 1
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#define M2_CPUID_ARM64_APPLE 1
#include <sys/sysctl.h>
#include <sys/types.h>
#elif defined(__aarch64__) && defined(__linux__)
#define M2_CPUID_ARM64_LINUX 1
#include <sys/auxv.h>
#endif

#include "core/internal.h"

#if defined(M2_CPUID_X86) && defined(M2_KSETS_X86)
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

#if !defined(__aarch64__) || !defined(M2_KSETS_NEON)
/* no NEON kernels in this build */
#elif defined(M2_CPUID_ARM64_LINUX)
/* Linux's AArch64 hwcap bits (asm/hwcap.h), should the libc headers lack the names */
#ifndef HWCAP_FP
#define HWCAP_FP (1ul << 0)
#endif
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
static m2_isa arm64_isa(void) {
    const unsigned long hw = getauxval(AT_HWCAP);
    return (hw & HWCAP_FP) && (hw & HWCAP_ASIMD) ? M2_ISA_NEON : M2_ISA_SCALAR;
}
#elif defined(M2_CPUID_ARM64_APPLE)
static m2_isa arm64_isa(void) {
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.neon", &v, &len, NULL, 0) != 0) return M2_ISA_NEON; /* base ISA */
    return v ? M2_ISA_NEON : M2_ISA_SCALAR;
}
#elif defined(__aarch64__)
static m2_isa arm64_isa(void) { return M2_ISA_NEON; } /* ASIMD is part of the base ISA */
#endif

/* A level is reported only where its kernels are linked in (M2_KSETS_*, CMakeLists.txt). */
static m2_isa cpu_isa(void) {
#if defined(M2_CPUID_X86) && defined(M2_KSETS_X86)
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c))
        return M2_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && os_saves_zmm())
        return M2_ISA_AVX512;
    return M2_ISA_AVX2;
#elif defined(__aarch64__) && defined(M2_KSETS_NEON)
    return arm64_isa();
#else
    return M2_ISA_SCALAR;
#endif
}

int m2_detect_amd(void) {
#if defined(M2_CPUID_X86)
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

int m2_isa_usable(m2_isa want, m2_isa have) {
    if (want == M2_ISA_SCALAR) return 1;
    if (want == M2_ISA_NEON || have == M2_ISA_NEON) return want == have;
    return want <= have; /* the x86 levels are ordered */
}
