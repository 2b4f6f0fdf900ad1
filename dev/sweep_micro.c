/*
 * dev/sweep_micro.c — the SSD sweep kernel alone, data in L1: GFLOP/s of each variant the CPU
 * backend uses (docs/cpu_ssd.md §2). A development probe, not a test or a benchmark of the
 * library's API (that is bench/mamba2c-bench); it links the static library for the private
 * kernel table.
 *
 *   cmake --build build --target mamba2c_static
 *   cc -O2 -Isrc dev/sweep_micro.c build/libmamba2c.a -lm -lpthread -o /tmp/sweep_micro
 *   /tmp/sweep_micro [heads] [P] [N]    (heads: distinct states cycled, default 1; P default 64,
 *                                        N default 128; env T: tokens per block, default 32)
 *   AVX512=1 /tmp/sweep_micro            (the AVX-512 set; needs a CPU with it)
 *
 * Compare with the single-thread FMA peak that `mamba2c-bench --threads 1` prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cpu/kernels.h"
#include "micro.h"

int main(int argc, char **argv) {
    const m2_cpu_kernels *K = getenv("AVX512") ? &m2_cpu_kernels_avx512 : &m2_cpu_kernels_avx2;
    const int nheads = argc > 1 ? atoi(argv[1]) : 1;
    const int64_t T = getenv("T") ? atoi(getenv("T")) : 32, P = argc > 2 ? atoi(argv[2]) : 64;
    const int64_t N = argc > 3 ? atoi(argv[3]) : 128;
    const int reps = 3000;
    /* the forward's state is [N][P] (p along the vectors), the backward's [P][N] (ssd_cpu.c):
     * per variant (a, b) = the sweep's (Np, Pp) arguments; V and W are packed in the forward,
     * rows [T][a] in the backward (M2_SWEEP_VROWS) */
    const int64_t big = (N > P ? N : P) * T;
    float *S0 = buf(8 * N * P, 1e-3f, 7), *u = buf(big, 1e-3f, 5), *r = buf(big, 1e-3f, 3);
    float *w = buf(big, 0.0f, 1), *V = buf(big, 1e-3f, 11), *W = buf(big, 1e-3f, 13);
    float *acc = buf(big, 0.0f, 1);
    int32_t ridx[1] = {0};
    float rf[1] = {1.0f};
    static const char *names[] = {"forward (update + w)", "backward pass A (update + w_pre)",
                                  "pass A with y (update + w + r_pre)",
                                  "pass B (rev, update + w + r_pre)", "update only (forward)",
                                  "update only (backward, rev)",
                                  "rev update + r_pre (pass B less w)", "rev update + r"};
    static const int fmas[] = {2, 2, 3, 3, 1, 1, 2, 2};
    for (int v = 0; v < 8; v++) {
        const int bwd = v != 0 && v != 4;
        const int64_t a = bwd ? P : N, b = bwd ? N : P;
        const int rows = bwd ? M2_SWEEP_VROWS : 0;
        double best = 1e9;
        for (int round = 0; round < 5; round++) {
            const double t0 = now();
            for (int i = 0; i < reps; i++) {
                float *S = S0 + (i % (nheads < 1 ? 1 : nheads > 8 ? 8 : nheads)) * N * P;
                switch (v) {
                case 0: K->sweep(T, a, b, 0, ridx, rf, 0, u, V, W, NULL, S, NULL, w, NULL, NULL); break;
                case 1:
                    K->sweep(T, a, b, 0, ridx, rf, rows | M2_SWEEP_W_PRE, u, V, W, NULL, S, NULL, w,
                             NULL, NULL);
                    break;
                case 2:
                    K->sweep(T, a, b, 0, ridx, rf, rows | M2_SWEEP_R_PRE, u, V, W, r, S, NULL, w, acc,
                             NULL);
                    break;
                case 3:
                    K->sweep(T, a, b, 0, ridx, rf, rows | M2_SWEEP_REV | M2_SWEEP_R_PRE, u, V, W, r,
                             S, NULL, w, acc, NULL);
                    break;
                case 4: K->sweep(T, a, b, 0, ridx, rf, 0, u, V, NULL, NULL, S, NULL, NULL, NULL, NULL); break;
                case 6: /* what the r row costs alone (docs/cpu_ssd.md §2) */
                    K->sweep(T, a, b, 0, ridx, rf, rows | M2_SWEEP_REV | M2_SWEEP_R_PRE, u, V, NULL,
                             r, S, NULL, NULL, acc, NULL);
                    break;
                case 7:
                    K->sweep(T, a, b, 0, ridx, rf, rows | M2_SWEEP_REV, u, V, NULL, r, S, NULL,
                             NULL, acc, NULL);
                    break;
                default:
                    K->sweep(T, a, b, 0, ridx, rf, rows | M2_SWEEP_REV, u, V, NULL, NULL, S, NULL,
                             NULL, NULL, NULL);
                }
            }
            const double t = now() - t0;
            if (t < best) best = t;
        }
        const double flops = 2.0 * fmas[v] * (double)(T * N * P) * reps;
        printf("%-36s %6.1f GFLOP/s\n", names[v], flops / best * 1e-9);
    }
    return 0;
}
