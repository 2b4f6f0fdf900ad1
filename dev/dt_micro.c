/*
 * dev/dt_micro.c — the dt kernel alone (softplus in double, the cumulated log decay with its
 * segment restarts, the per-token scales; docs/cpu_ssd.md §3, §8): TSC cycles per (token,
 * head) for a block of 32 tokens. A development probe, not a test or a benchmark of the
 * library's API; it links the static library for the private kernel table.
 *
 *   cmake --build build --target mamba2c_static
 *   cc -O2 -Isrc -Iinclude dev/dt_micro.c build/libmamba2c.a -lm -lpthread -o /tmp/dt_micro
 *   /tmp/dt_micro [heads]                (default 16)
 *   AVX512=1 /tmp/dt_micro               (the AVX-512 set; needs a CPU with it)
 */
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

#include "cpu/kernels.h"

int main(int argc, char **argv) {
    const m2_cpu_kernels *K = getenv("AVX512") ? &m2_cpu_kernels_avx512 : &m2_cpu_kernels_avx2;
    enum { MAXH = 64, T = 32 };
    const int nh = argc > 1 ? atoi(argv[1]) : 16, reps = 20000;
    if (nh < 1 || nh > MAXH) return 1;
    static float raw[T * MAXH], bias[MAXH], A[MAXH], d[MAXH * T], E[MAXH * T], w[MAXH * T],
        gf[MAXH * T], rf[MAXH * T];
    static double c[MAXH];
    static int nr[MAXH];
    static int32_t ridx[MAXH * T];
    for (int i = 0; i < T * MAXH; i++) raw[i] = (float)((i * 7919) % 1000) / 250.0f - 5.0f;
    for (int j = 0; j < MAXH; j++) bias[j] = 0.1f, A[j] = -0.5f - 0.01f * (float)j;
    unsigned long long best = ~0ull;
    for (int r = 0; r < 5; r++) {
        const unsigned long long t0 = __rdtsc();
        for (int i = 0; i < reps; i++)
            K->dt_block(nh, T, T, raw, nh, bias, A, 1, 0.0, 1e30, i == 0, c, d, E, w, gf, nr,
                        ridx, rf);
        const unsigned long long t = __rdtsc() - t0;
        if (t < best) best = t;
    }
    printf("dt_block (%s), %d heads: %.1f TSC cycles per (token, head)\n", K->isa, nh,
           (double)best / reps / T / nh);
    return 0;
}
