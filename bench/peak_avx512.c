/*
 * peak_avx512.c — the FMA loop that measures this machine's AVX-512 peak (compiled with
 * -mavx512f only; peak.c calls it only after checking the CPU has AVX-512 F).
 *
 * The same loop as peak_avx2.c with 16-wide (zmm) FMAs: 12 independent accumulator chains
 * cover two FMA units of 4-cycle latency with margin (8 would do), and fit, with the two
 * constants, in the 32 zmm registers without spills. On a core with one 512-bit FMA port
 * (the port-0/1 pair fused, port 5 absent) this peak equals the AVX2 one; with two ports it
 * is twice it. Each iteration is 12 x 16 x 2 = 384 flops.
 */
#include <immintrin.h>

#include "bench.h"

float bench_fma_loop_avx512(int64_t iters, float seed) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-3f);
    __m512 a0 = _mm512_set1_ps(seed), a1 = _mm512_set1_ps(seed + 0.01f);
    __m512 a2 = _mm512_set1_ps(seed + 0.02f), a3 = _mm512_set1_ps(seed + 0.03f);
    __m512 a4 = _mm512_set1_ps(seed + 0.04f), a5 = _mm512_set1_ps(seed + 0.05f);
    __m512 a6 = _mm512_set1_ps(seed + 0.06f), a7 = _mm512_set1_ps(seed + 0.07f);
    __m512 a8 = _mm512_set1_ps(seed + 0.08f), a9 = _mm512_set1_ps(seed + 0.09f);
    __m512 a10 = _mm512_set1_ps(seed + 0.10f), a11 = _mm512_set1_ps(seed + 0.11f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm512_fmadd_ps(a0, m, c);
        a1 = _mm512_fmadd_ps(a1, m, c);
        a2 = _mm512_fmadd_ps(a2, m, c);
        a3 = _mm512_fmadd_ps(a3, m, c);
        a4 = _mm512_fmadd_ps(a4, m, c);
        a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c);
        a7 = _mm512_fmadd_ps(a7, m, c);
        a8 = _mm512_fmadd_ps(a8, m, c);
        a9 = _mm512_fmadd_ps(a9, m, c);
        a10 = _mm512_fmadd_ps(a10, m, c);
        a11 = _mm512_fmadd_ps(a11, m, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    float out[16];
    _mm512_storeu_ps(out, s);
    float r = 0;
    for (int k = 0; k < 16; k++) r += out[k];
    return r;
}
