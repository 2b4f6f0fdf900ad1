/*
 * bench.h — the machine ceilings mamba2c-bench measures itself, once per run, so that every
 * figure it prints is a fraction of this machine's own limits measured at the same time:
 *   peak.c / peak_avx2.c / peak_avx512.c  the FMA peak (GFLOP/s) over n threads
 *   stream.c              STREAM triad bandwidth (GB/s) over n threads, arrays >> L3
 * Private to bench/; the library is used only through include/mamba2c.h.
 */
#ifndef MAMBA2C_BENCH_H
#define MAMBA2C_BENCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct bench_peak {
    double gflops;   /* best of the trials, all threads together            */
    const char *isa; /* "avx512-fma" (12 chains of 16-wide FMA), "avx2-fma" (12 of 8-wide)
                        or "scalar"                                           */
    int chains;      /* independent accumulator chains per thread            */
} bench_peak;

/* FMA peak over nthreads pthreads (each runs the same dependent-chain-free FMA loop), with
 * the loop of the instruction set `isa` names (a context ISA name: "avx512", "avx2",
 * "scalar"), falling back to a narrower one the CPU or build lacks. */
bench_peak bench_fma_peak(int nthreads, const char *isa);

/* The AVX2 loop of peak_avx2.c: iters x 12 independent 256-bit FMAs; returns a checksum
 * (so the loop is not optimised away). Call only when the CPU has AVX2 and FMA. */
float bench_fma_loop_avx2(int64_t iters, float seed);
#define BENCH_AVX2_CHAINS 12

/* The AVX-512 loop of peak_avx512.c: iters x 12 independent 512-bit FMAs. Call only when
 * the CPU has AVX-512 F. */
float bench_fma_loop_avx512(int64_t iters, float seed);
#define BENCH_AVX512_CHAINS 12

typedef struct bench_stream {
    double best_gbps;    /* STREAM convention: the best trial, bytes = 3 x array bytes */
    double median_gbps;  /* the median of the trials, for the noisy-machine view      */
    size_t array_bytes;  /* bytes of each of the three arrays                        */
    size_t l3_bytes;     /* the last-level cache size the array size was derived from */
} bench_stream;

/* STREAM triad a[i] = b[i] + s*c[i] over nthreads pthreads, each on its own slice (first
 * touched by that thread). array_bytes == 0: 4 x L3 per array (at least 64 MiB, at most
 * 1/16 of physical memory). Returns best_gbps == 0 on allocation failure. */
bench_stream bench_stream_triad(int nthreads, size_t array_bytes, int trials);

/* Read-only stream: each thread sums its slice of one array (same sizes and threads as the
 * triad); bytes = 1 x array bytes. The ceiling of a kernel that only reads. */
bench_stream bench_stream_read(int nthreads, size_t array_bytes, int trials);

/* The size in bytes the run would use per STREAM array (see above), and the L3 size. */
size_t bench_stream_default_bytes(size_t *l3_bytes);

double bench_now(void); /* monotonic seconds */

#endif /* MAMBA2C_BENCH_H */
