/*
 * ksets.h — which per-ISA CPU kernel sets this build links in, as M2_KSETS_X86 (scalar, AVX2,
 * AVX-512), M2_KSETS_NEON (scalar, NEON) or M2_KSETS_NONE (scalar only).
 *
 * CMakeLists.txt defines one of them for the library's sources from the target architecture
 * (the per-ISA files it compiles); code built outside CMake against the private headers (the
 * dev/ probes) gets the one matching the compiler's target. Detection (core/cpuid.c) reports
 * only a level whose kernels are linked in; the dispatchers name only tables that exist.
 */
#ifndef MAMBA2C_CORE_KSETS_H
#define MAMBA2C_CORE_KSETS_H

#if !defined(M2_KSETS_X86) && !defined(M2_KSETS_NEON) && !defined(M2_KSETS_NONE)
#if defined(__x86_64__) || defined(_M_X64)
#define M2_KSETS_X86 1
#elif defined(__aarch64__) || defined(_M_ARM64)
#define M2_KSETS_NEON 1
#else
#define M2_KSETS_NONE 1
#endif
#endif

#endif /* MAMBA2C_CORE_KSETS_H */
