/*
 * dev/micro.h — helpers of the dev/ kernel probes: a monotonic clock and 64-byte-aligned
 * float buffers filled with a small repeating pattern (scale * (i % mod)).
 */
#ifndef MAMBA2C_DEV_MICRO_H
#define MAMBA2C_DEV_MICRO_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline float *buf(int64_t n, float scale, int mod) {
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    if (!p) exit(1);
    for (int64_t i = 0; i < n; i++) p[i] = scale * (float)(i % mod);
    return p;
}

#endif /* MAMBA2C_DEV_MICRO_H */
