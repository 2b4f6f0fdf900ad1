/* hello.c — the README's C example, built with the library so the README cannot go stale. */
#include <stdio.h>
#include <stdlib.h>

#include "mamba2c.h"

int main(void) {
    enum { B = 1, L = 64, H = 4, P = 16, N = 8, G = 1 };
    float *x = calloc(B * L * H * P, 4), *dt = calloc(B * L * H, 4), *A = calloc(H, 4),
          *Bm = calloc(B * L * G * N, 4), *Cm = calloc(B * L * G * N, 4), *out = calloc(B * L * H * P, 4);
    for (int i = 0; i < B * L * H * P; i++) x[i] = (float)((i % 7) - 3);
    for (int i = 0; i < B * L * H; i++) dt[i] = 0.05f;
    for (int i = 0; i < H; i++) A[i] = -0.5f;
    for (int i = 0; i < B * L * G * N; i++) Bm[i] = Cm[i] = 0.1f * (float)((i % 5) - 2);
    /* --- README example starts here --- */
    int64_t sx[] = {B, L, H, P}, sdt[] = {B, L, H}, sh[] = {H}, sbc[] = {B, L, G, N};
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 4, sx),
                    tdt = mamba2_tensor_make(dt, MAMBA2_DTYPE_F32, 3, sdt),
                    tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, sh),
                    tB = mamba2_tensor_make(Bm, MAMBA2_DTYPE_F32, 4, sbc),
                    tC = mamba2_tensor_make(Cm, MAMBA2_DTYPE_F32, 4, sbc),
                    tout = mamba2_tensor_make(out, MAMBA2_DTYPE_F32, 4, sx);
    mamba2_context_t *ctx;
    mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, 0);      /* 0 = one thread per core */
    mamba2_ssd_options_t opt = mamba2_ssd_options_default(); /* D, z, dt_bias, states... */
    opt.chunk_size = 128;
    opt.dt_softplus = 1;
    mamba2_status_t st = mamba2_ssd_forward(ctx, &tout, NULL, NULL, &tx, &tdt, &tA, &tB, &tC, &opt, NULL, 0);
    if (st != MAMBA2_STATUS_OK) fprintf(stderr, "%s: %s\n", mamba2_status_string(st), mamba2_last_error());
    mamba2_context_destroy(ctx);
    /* --- README example ends here --- */
    printf("out[0..3] = %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    free(x), free(dt), free(A), free(Bm), free(Cm), free(out);
    return st == MAMBA2_STATUS_OK ? 0 : 1;
}
