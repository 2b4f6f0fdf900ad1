/*
 * test_core_limits.c — sizes at and past the core's limits: the SSD state size H*P*N and head count
 * (INVALID_ARGUMENT in O(1), before any planner; the shapes a fuzzer found crashing or hanging
 * the planners), and decode caches with huge slot counts (no memory in proportion to S;
 * duplicate slots found on every path of the check).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "harness.h"

static mamba2_tensor_t tn(void *p, int r, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t s[4] = {a, b, c, d};
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, r, s);
}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A dummy buffer for descriptors that validation must reject before reading them. */
static float dummy[64];

/* x[B,L,H,P], Bm/Cm[B,L,1,N]: every SSD entry point rejects it with INVALID_ARGUMENT whose
 * message has `word`, quickly. */
static void ssd_reject(mamba2_context_t *ctx, const char *be, int64_t Bn, int64_t L, int64_t H,
                       int64_t P, int64_t N, const char *word) {
    th_begin("ssd_limit_[%lld,%lld,%lld,%lld,N=%lld]/%s", (long long)Bn, (long long)L, (long long)H,
             (long long)P, (long long)N, be);
    mamba2_tensor_t x = tn(dummy, 4, Bn, L, H, P), dt = tn(dummy, 3, Bn, L, H, 0),
                    A = tn(dummy, 1, H, 0, 0, 0), Bm = tn(dummy, 4, Bn, L, 1, N),
                    out = tn(dummy + 32, 4, Bn, L, H, P), dx = out;
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = &dx;
    size_t ws = 7;
    mamba2_status_t st[8];
    const double t0 = now();
    st[0] = mamba2_ssd_forward_workspace_size(ctx, &out, NULL, NULL, &x, &dt, &A, &Bm, &Bm, &o, &ws);
    st[1] = mamba2_ssd_forward(ctx, &out, NULL, NULL, &x, &dt, &A, &Bm, &Bm, &o, NULL, 0);
    st[2] = mamba2_ssd_backward_workspace_size(ctx, &g, &x, NULL, &x, &dt, &A, &Bm, &Bm, NULL, &o, &ws);
    st[3] = mamba2_ssd_backward(ctx, &g, &x, NULL, &x, &dt, &A, &Bm, &Bm, NULL, &o, NULL, 0);
    /* the decode step with L as its T */
    mamba2_tensor_t cache = tn(dummy, 4, Bn, H, P, N);
    st[4] = mamba2_ssd_step(ctx, &cache, &out, NULL, &x, &dt, &A, &Bm, &Bm, NULL);
    /* staged: chunk_state and chunk_scan see H, P and N */
    const int64_t s5[5] = {Bn, 1, H, P, N}, s4[4] = {Bn, H, 1, 256};
    mamba2_tensor_t states = mamba2_tensor_make(dummy, MAMBA2_DTYPE_F32, 5, s5),
                    cs = mamba2_tensor_make(dummy, MAMBA2_DTYPE_F32, 4, s4);
    mamba2_ssd_chunked_options_t co = mamba2_ssd_chunked_options_default();
    st[5] = mamba2_ssd_chunk_state(ctx, &states, &x, &Bm, &cs, &cs, &co);
    st[6] = mamba2_ssd_state_passing(ctx, &states, NULL, &states, &cs, &co);
    st[7] = mamba2_ssd_chunk_cumsum(ctx, &cs, &cs, &dt, &A, &co);
    const double dtime = now() - t0;
    static const char *nm[8] = {"forward_workspace_size", "forward", "backward_workspace_size",
                                "backward", "ssd_step", "chunk_state", "state_passing",
                                "chunk_cumsum"};
    const int n = H > ((int64_t)1 << 20) ? 8 : 7; /* chunk_cumsum sees only H */
    for (int i = 0; i < n; i++)
        th_expect(st[i] == MAMBA2_STATUS_INVALID_ARGUMENT, "%s returned %s: %s", nm[i],
                  mamba2_status_string(st[i]), mamba2_last_error());
    mamba2_ssd_forward(ctx, &out, NULL, NULL, &x, &dt, &A, &Bm, &Bm, &o, NULL, 0);
    th_expect(th_has_word(mamba2_last_error(), word), "message \"%s\" lacks \"%s\"",
              mamba2_last_error(), word);
    th_expect(dtime < 1.0, "the %d calls took %.3f s", n, dtime);
    th_end();
}

/* A cache of S = 2^40 slots (only the slots indexed are touched) and B rows: the step runs
 * (no allocation in proportion to S); a duplicate slot at rows dup_a < dup_b is reported
 * naming dup_b. */
static void big_cache(mamba2_context_t *ctx, const char *be, int64_t Brows, int64_t dup_a, int64_t dup_b) {
    const int64_t S = (int64_t)1 << 40;
    th_begin("state_indices_S2^40_B%lld%s/%s", (long long)Brows, dup_b >= 0 ? "_dup" : "", be);
    int64_t *ix = th_xmalloc((size_t)Brows * 8);
    /* spread over the slot range, reversed, some padding rows */
    for (int64_t b = 0; b < Brows; b++) ix[b] = b % 7 == 3 ? -1 : (Brows - 1 - b) * 3;
    if (dup_b >= 0) ix[dup_a] = ix[dup_b] = 13; /* not a multiple of 3 */
    const int64_t nslots = 3 * Brows;
    /* the cache: 2^40 floats of address space reserved, only the indexed pages ever touched.
     * Not under emulation (the reduced mode of a cross-built run): qemu-user tracks the pages
     * of such a mapping itself and is killed for memory; the check is the same C there. */
    if (th_reduced()) {
        th_note("skipped in the reduced (emulated) run: a 4 TiB mapping");
        free(ix);
        th_end();
        return;
    }
    float *cc = mmap(NULL, (size_t)S * 4, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (cc == MAP_FAILED) {
        th_note("skipped: cannot reserve 4 TiB of address space");
        free(ix);
        th_end();
        return;
    }
    float *x = th_xmalloc((size_t)Brows * 4),
          *y = th_xmalloc((size_t)Brows * 4), w[2] = {0.5f, 2.0f};
    for (int64_t i = 0; i < nslots; i++) cc[i] = 1.0f;
    for (int64_t b = 0; b < Brows; b++) x[b] = (float)b, y[b] = -7.0f;
    mamba2_tensor_t tix = mamba2_tensor_make(ix, MAMBA2_DTYPE_I64, 1, &Brows),
                    cache = tn(cc, 3, S, 1, 1, 0), tx = tn(x, 2, Brows, 1, 0, 0),
                    ty = tn(y, 2, Brows, 1, 0, 0), tw = tn(w, 2, 1, 2, 0, 0);
    mamba2_conv1d_step_options_t so = mamba2_conv1d_step_options_default();
    so.state_indices = &tix;
    mamba2_status_t st = mamba2_conv1d_step(ctx, &ty, &cache, &tx, &tw, &so);
    if (dup_b < 0) {
        if (th_expect(st == MAMBA2_STATUS_OK, "conv1d_step: %s: %s", mamba2_status_string(st),
                      mamba2_last_error())) {
            int ok = 1;
            for (int64_t b = 0; b < Brows; b++)
                ok &= ix[b] < 0 ? y[b] == -7.0f : (y[b] == 0.5f + 2.0f * (float)b && cc[ix[b]] == (float)b);
            th_expect(ok, "conv1d_step wrote wrong values");
        }
    } else {
        char want[64];
        snprintf(want, sizeof want, "state_indices[%lld] is 13", (long long)dup_b);
        th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), want),
                  "conv1d_step: %s: \"%s\"; expected \"%s\"", mamba2_status_string(st),
                  mamba2_last_error(), want);
    }
    /* the SSD step on the same slots, H = P = N = 1 */
    float A[1] = {-1};
    mamba2_tensor_t sc = tn(cc, 4, S, 1, 1, 1), sx = tn(x, 3, Brows, 1, 1, 0),
                    sy = tn(y, 3, Brows, 1, 1, 0), sdt = tn(x, 2, Brows, 1, 0, 0), sA = tn(A, 1, 1, 0, 0, 0);
    mamba2_ssd_step_options_t ss = mamba2_ssd_step_options_default();
    ss.state_indices = &tix;
    st = mamba2_ssd_step(ctx, &sc, &sy, NULL, &sx, &sdt, &sA, &sx, &sx, &ss);
    th_expect(dup_b < 0 ? st == MAMBA2_STATUS_OK : st == MAMBA2_STATUS_INVALID_ARGUMENT,
              "ssd_step: %s: %s", mamba2_status_string(st), mamba2_last_error());
    munmap(cc, (size_t)S * 4);
    free(ix), free(x), free(y);
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    const int64_t T31 = (int64_t)1 << 31, T32 = (int64_t)1 << 32, T40 = (int64_t)1 << 40;
    for (int be = 0; be < 2; be++) {
        mamba2_context_t *ctx = th_ctx(be ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU, 2, NULL);
        const char *nm = be ? "ref" : "cpu";
        ssd_reject(ctx, nm, 1, 1, 1, T31, T31, "state");   /* the backward planner's SIGFPE */
        ssd_reject(ctx, nm, 1, 1, 1, T40, T40, "state");
        ssd_reject(ctx, nm, 1, 1, 1, T32, (int64_t)1 << 30, "state");
        ssd_reject(ctx, nm, 1, 256, 1, T32, T32, "state"); /* signed overflow P * N */
        ssd_reject(ctx, nm, 1, 1, (int64_t)1 << 24, 1, 1, "heads"); /* planning time */
        ssd_reject(ctx, nm, 1, 0, T40, 1, 1, "heads");
        ssd_reject(ctx, nm, 1, 1, 1 << 16, 1 << 10, 1 << 11, "state"); /* 2^37 > 2^36 */
        big_cache(ctx, nm, 1, -1, -1);
        big_cache(ctx, nm, 600, -1, -1);    /* the stack sort */
        big_cache(ctx, nm, 5000, -1, -1);   /* the heap sort */
        big_cache(ctx, nm, 600, 100, 450);
        big_cache(ctx, nm, 5000, 4000, 4500);
        big_cache(ctx, nm, 5000, 10, 4999);
        mamba2_context_destroy(ctx);
    }
    return th_finish();
}
