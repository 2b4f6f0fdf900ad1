/*
 * peak_avx2.c — the FMA loop that measures this machine's AVX2 peak (compiled with
 * -mavx2 -mfma only; peak.c calls it only after checking the CPU has both).
 *
 * 12 independent accumulator chains of 8-wide FMAs: an FMA unit has a latency of 4-5 cycles
 * and there are two of them per core, so at least 8-10 chains must be in flight to keep both
 * busy; 12 leaves margin and, with the two constants, fits in the 16 ymm registers without
 * spills. acc = acc * m + c with 0 < m < 1 stays bounded (it tends to c / (1 - m)), so no
 * denormal or overflow slows the loop down. Each iteration is 12 x 8 x 2 = 192 flops.
 */
#include <immintrin.h>

#include "bench.h"

float bench_fma_loop_avx2(int64_t iters, float seed) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-3f);
    __m256 a0 = _mm256_set1_ps(seed), a1 = _mm256_set1_ps(seed + 0.01f);
    __m256 a2 = _mm256_set1_ps(seed + 0.02f), a3 = _mm256_set1_ps(seed + 0.03f);
    __m256 a4 = _mm256_set1_ps(seed + 0.04f), a5 = _mm256_set1_ps(seed + 0.05f);
    __m256 a6 = _mm256_set1_ps(seed + 0.06f), a7 = _mm256_set1_ps(seed + 0.07f);
    __m256 a8 = _mm256_set1_ps(seed + 0.08f), a9 = _mm256_set1_ps(seed + 0.09f);
    __m256 a10 = _mm256_set1_ps(seed + 0.10f), a11 = _mm256_set1_ps(seed + 0.11f);
    for (int64_t i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c);
        a11 = _mm256_fmadd_ps(a11, m, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
