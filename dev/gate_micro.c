/*
 * dev/gate_micro.c — the forward's epilogue kernel alone (`fwd_out`: y = E ŷ + D x, out = y
 * silu(z), non-temporal stores optional; docs/cpu_ssd_history.md, 2026-12-01 (Zen 5 host)):
 * nanoseconds and cycles per output vector for one block of T tokens of a set of heads, as
 * fwd_range calls it (one call per token for the set). A development probe, not a test or a
 * benchmark of the library's API; it links the static library for the private kernel table.
 *
 *   cmake --build build --target mamba2c_static
 *   cc -O2 -Isrc -Iinclude dev/gate_micro.c build/libmamba2c.a -lm -lpthread -o /tmp/gate_micro
 *   /tmp/gate_micro [stream] [GHz]   (stream: 1 = non-temporal stores of out; GHz: the clock
 *                                     that converts to cycles, default 3.9)
 *   AVX512=1 /tmp/gate_micro         (the AVX-512 set); env NH (heads, default 16), TT
 *                                     (tokens, default 32); P is 64
 */
#include <stdio.h>
#include <stdlib.h>

#include "cpu/kernels.h"
#include "micro.h"

int main(int argc, char **argv) {
    const int avx512 = getenv("AVX512") != NULL;
    const m2_cpu_kernels *K = avx512 ? &m2_cpu_kernels_avx512 : &m2_cpu_kernels_avx2;
    const int64_t nh = getenv("NH") ? atoi(getenv("NH")) : 16, P = 64;
    const int64_t T = getenv("TT") ? atoi(getenv("TT")) : 32, TP = T * P;
    const int stream = argc > 1 ? atoi(argv[1]) : 0;
    const double ghz = argc > 2 ? atof(argv[2]) : 3.9;
    if (nh < 1 || T < 1) return 1;
    float *y = buf(nh * TP, 0.001f, 37), *x = buf(T * nh * P, 0.01f, 13);
    float *z = buf(T * nh * P, 0.03f, 101), *D = buf(nh * P, 0.1f, 7);
    float *E = buf(nh * T, 0.5f, 3), *out = buf(T * nh * P, 0.0f, 1);
    for (int64_t i = 0; i < T * nh * P; i++) z[i] -= 1.5f; /* signed gate inputs */
    double best = 1e30;
    for (int rep = 0; rep < 50; rep++) {
        const double t0 = now();
        for (int it = 0; it < 100; it++)
            for (int64_t i = 0; i < T; i++) /* y rows [head][token][P], as fwd_range's buffer */
                K->fwd_out(nh, P, E + i, T, y + i * P, TP, x + i * nh * P, P, D, P,
                           z + i * nh * P, P, out + i * nh * P, P, NULL, 0, stream);
        const double t = now() - t0;
        if (t < best) best = t;
    }
    const double nvec = 100.0 * (double)(T * nh * P) / (avx512 ? 16 : 8);
    printf("fwd_out (%s, %lld heads, %lld tokens, stream %d): %.2f ns per vector, %.2f cycles "
           "at %.1f GHz (%.3f)\n",
           avx512 ? "avx512" : "avx2", (long long)nh, (long long)T, stream, best / nvec * 1e9,
           best / nvec * ghz * 1e9, ghz, out[7]);
    return 0;
}
