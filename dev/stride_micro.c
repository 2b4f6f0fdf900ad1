/*
 * dev/stride_micro.c — how fast a core streams rows that cover only part of each token row
 * (docs/cpu_ssd_history.md, 2026-12-01 (Zen 5 host)): a set of heads that splits the H heads
 * reads `piece` bytes of every `row` bytes of x, z, ... (16 of 32 heads of P = 64 floats: 4 KiB
 * of every 8 KiB). Sums a 1 GiB buffer read in that pattern and prints the useful GB/s;
 * `threads` 2 gives each thread every other piece, as two threads with one head set each do.
 * Optional software prefetch `ahead` lines ahead in the pattern's own order. A development
 * probe, not a test or a benchmark of the library's API.
 *
 *   cc -O2 -mavx2 -fopenmp dev/stride_micro.c -o /tmp/stride_micro
 *   /tmp/stride_micro PIECE ROW [threads] [ahead]
 *       e.g. 8192 8192 (whole rows), 4096 8192 (half rows), 4096 8192 2 (two threads, each
 *       its half of every row), 524288 1048576 2 (two threads, near-contiguous each)
 */
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "micro.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PIECE ROW [threads] [ahead]\n", argv[0]);
        return 1;
    }
    const size_t total = (size_t)1 << 30, piece = (size_t)atol(argv[1]), row = (size_t)atol(argv[2]);
    const int threads = argc > 3 ? atoi(argv[3]) : 1;
    const size_t ahead = argc > 4 ? (size_t)atol(argv[4]) : 0;
    if (piece < 64 || piece % 64 || row < piece * (size_t)threads || threads < 1 || threads > 2)
        return 1;
    char *a = aligned_alloc(4096, total);
    if (!a) return 1;
    memset(a, 1, total);
    double best = 1e30;
    float sink = 0.0f;
    for (int r = 0; r < 5; r++) {
        const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
#ifdef _OPENMP
            const size_t me = (size_t)omp_get_thread_num();
#else
            const size_t me = 0;
#endif
            __m256 s = _mm256_setzero_ps();
            for (size_t off = me * piece; off + piece <= total; off += row)
                for (size_t i = 0; i < piece; i += 64) {
                    if (ahead) { /* the line `ahead` lines on in this pattern */
                        const size_t k = i / 64 + ahead, per = piece / 64;
                        const size_t q = off + (k / per) * row + (k % per) * 64;
                        if (q < total) __builtin_prefetch(a + q, 0, 3);
                    }
                    s = _mm256_add_ps(s, _mm256_load_ps((const float *)(a + off + i)));
                }
            float l[8];
            _mm256_storeu_ps(l, s);
            sink += l[0];
        }
        const double t = now() - t0;
        if (t < best) best = t;
    }
    const double useful = (double)(total / row) * (double)piece * (double)threads;
    printf("piece %zu of row %zu, %d thread(s), ahead %zu: %.1f GB/s useful (%g)\n", piece, row,
           threads, ahead, useful / best * 1e-9, (double)sink);
    free(a);
    return 0;
}
