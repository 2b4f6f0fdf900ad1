/*
 * dev/prefetch_micro.c — how much a prefetch stream beside the SSD sweep costs it: the
 * forward sweep (data in L1, as dev/sweep_micro.c) with `per8` lines requested every 8 tokens
 * of every register tile from a 1 GiB buffer, in address order or as 256-byte rows 4 KiB apart
 * (one head's rows of a [B,L,H,P] tensor). Prints the sweep's GFLOP/s and the stream's GB/s
 * (docs/cpu_ssd.md §3). A development probe, not a test or a benchmark of the library's API.
 *
 *   cmake --build build --target mamba2c_static
 *   cc -O2 -Isrc dev/prefetch_micro.c build/libmamba2c.a -lm -lpthread -o /tmp/prefetch_micro
 *   /tmp/prefetch_micro PER8 [strided] [N]     (AVX512=1: the AVX-512 set; HUGE=1: 2 MiB pages)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cpu/kernels.h"
#include "micro.h"

int main(int argc, char **argv) {
    const m2_cpu_kernels *K = getenv("AVX512") ? &m2_cpu_kernels_avx512 : &m2_cpu_kernels_avx2;
    const int per8 = argc > 1 ? atoi(argv[1]) : 2, strided = argc > 2 && atoi(argv[2]) != 0;
    const int64_t T = 32, Np = argc > 3 ? atoi(argv[3]) : 128, Pp = 64;
    const size_t big = (size_t)1 << 30;
    char *mem = aligned_alloc(4096, big);
    if (!mem) return 1;
    if (getenv("HUGE")) madvise(mem, big, MADV_HUGEPAGE);
    memset(mem, 1, big);
    float *S0 = buf(8 * Np * Pp, 1e-3f, 7), *u = buf(T * Pp, 1e-3f, 5), *w = buf(T * Pp, 0.0f, 1);
    float *V = buf(T * Np, 1e-3f, 11), *W = buf(T * Np, 1e-3f, 13);
    int32_t ridx[1] = {0};
    float rf[1] = {1.0f};
    const int reps = 20000;
    const int64_t slots = (Np / K->tile_n) * (Pp / K->tile_p) * (T / 8);
    size_t off = 0;
    int64_t lines = 0;
    const double t0 = now();
    for (int i = 0; i < reps; i++) {
        m2_pf pf;
        m2_pf_init(&pf);
        const int64_t nl = per8 * slots; /* lines this sweep */
        if (!strided) {
            if (off + (size_t)nl * 64 > big) off = 0;
            m2_pf_add(&pf, mem + off, nl * 64, 1, nl * 64, M2_PF_READ);
            off += (size_t)nl * 64;
        } else {
            const int64_t rows = nl / 4;
            if (off + (size_t)rows * 4096 > big) off = 0;
            m2_pf_add(&pf, mem + off, 4096, rows, 256, M2_PF_READ);
            off += (size_t)rows * 4096;
        }
        pf.per8 = per8;
        lines += pf.left;
        K->sweep(T, Np, Pp, 0, ridx, rf, 0, u, V, W, NULL, S0 + (i % 8) * Np * Pp, NULL, w, NULL,
                 per8 ? &pf : NULL);
    }
    const double t = now() - t0;
    printf("per8 %d, %s: sweep %.1f GFLOP/s, stream %.2f GB/s\n", per8,
           strided ? "256-byte rows 4 KiB apart" : "address order",
           4.0 * (double)(T * Np * Pp) * reps / t * 1e-9, (double)lines * 64 / t * 1e-9);
    return 0;
}
