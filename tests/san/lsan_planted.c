/* lsan_planted.c — LeakSanitizer still sees our leaks with tests/san/lsan.supp active.
 * Runs one SSD forward on the OpenCL backend (PoCL compiles its kernels, and leaks inside
 * libpocl / libLLVM while it does: suppressed), then, with --plant, loses a block of its
 * own: NPLANT blocks of 4096 bytes. tests/san/lsan_check.sh runs it both ways and expects
 * exit 0 without --plant and, with it, a leak report naming plant_leak for most of them.
 * Not for all: LeakSanitizer scans memory conservatively, and after PoCL's compile a word
 * somewhere in its reachable memory can hold a planted block's address (in a cold-cache run
 * one block of 16 was seen reachable that way; a single planted block went unreported). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mamba2c.h"

enum { NPLANT = 16 };

/* noinline: the report must show this frame, not main's */
__attribute__((noinline)) static void plant_leak(void) {
    for (int i = 0; i < NPLANT; i++) {
        char *volatile p = malloc(4096);
        if (p) p[0] = 1;
        p = NULL;
    }
}

int main(int argc, char **argv) {
    const int plant = argc > 1 && strcmp(argv[1], "--plant") == 0;
    enum { B = 1, L = 5, H = 2, P = 3, N = 4, G = 1 };
    static float x[B * L * H * P], dt[B * L * H], A[H], Bm[B * L * G * N], Cm[B * L * G * N],
        out[B * L * H * P];
    for (int i = 0; i < B * L * H * P; i++) x[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < B * L * H; i++) dt[i] = 0.1f;
    for (int i = 0; i < H; i++) A[i] = -0.5f;
    for (int i = 0; i < B * L * G * N; i++) Bm[i] = Cm[i] = 0.1f * (float)(i % 3);
    int64_t sx[] = {B, L, H, P}, sdt[] = {B, L, H}, sh[] = {H}, sbc[] = {B, L, G, N};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 4, sx),
                    tdt = mamba2_tensor_make(dt, MAMBA2_DTYPE_F32, 3, sdt),
                    tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, sh),
                    tB = mamba2_tensor_make(Bm, MAMBA2_DTYPE_F32, 4, sbc),
                    tC = mamba2_tensor_make(Cm, MAMBA2_DTYPE_F32, 4, sbc),
                    tout = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 4, sx);
    mamba2_context_t *ctx = NULL;
    mamba2_status_t st = mamba2_context_create(&ctx, MAMBA2_BACKEND_OPENCL, 1);
    if (st == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
        printf("lsan_planted: no OpenCL device (%s)\n", mamba2_last_error());
        return 77;
    }
    if (st != MAMBA2_STATUS_OK) {
        printf("lsan_planted: context: %s\n", mamba2_last_error());
        return 1;
    }
    mamba2_ssd_options_t opt = mamba2_ssd_options_default();
    opt.chunk_size = 4;
    st = mamba2_ssd_forward(ctx, &tout, NULL, NULL, &tx, &tdt, &tA, &tB, &tC, &opt, NULL, 0);
    mamba2_context_destroy(ctx);
    if (st != MAMBA2_STATUS_OK) {
        printf("lsan_planted: ssd_forward: %s\n", mamba2_last_error());
        return 1;
    }
    if (plant) plant_leak();
    printf("lsan_planted: OpenCL SSD forward ran%s\n", plant ? "; 16 blocks of 4096 bytes lost" : "");
    return 0;
}
