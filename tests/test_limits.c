/*
 * test_limits.c — the CPU backend's SSD planners at sizes far beyond memory.
 *
 * A workspace query or a call for such a problem must return — OK with an exact size, or an
 * error with a message (OUT_OF_MEMORY when the workspace does not fit in size_t; the core may
 * refuse a size first with INVALID_ARGUMENT) — never trap (the snapshot-count division by a
 * wrapped product was a SIGFPE), overflow a signed product, report a wrapped size, or plan for
 * minutes (the head-set search and the span walk were linear in H and B). Tensors carry non-NULL
 * dummy data pointers, far apart so that no two overlap, which nothing may dereference: every
 * call here must be refused, or answered, before it touches data (a call gets a 64-byte
 * workspace, so it is refused once the query is done).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { X, DT, A, BM, CM, OUT, DOUT, DX, DA, DBM, NT };

typedef struct prob {
    const char *name;
    int64_t B, L, H, P, N, G;
} prob;

static _Alignas(64) unsigned char tiny_ws[64];

/* Tensor i of the problem at a dummy address of its own (i + 1) * 2^46: beyond every tensor's
 * extent here, never dereferenced. */
static void make(const prob *p, mamba2_tensor_t *t) {
    const int64_t shx[4] = {p->B, p->L, p->H, p->P}, shdt[3] = {p->B, p->L, p->H};
    const int64_t shh[1] = {p->H}, shbc[4] = {p->B, p->L, p->G, p->N};
    const int64_t *sh[NT] = {shx, shdt, shh, shbc, shbc, shx, shx, shx, shh, shbc};
    const int rk[NT] = {4, 3, 1, 4, 4, 4, 4, 4, 1, 4};
    for (int i = 0; i < NT; i++)
        t[i] = mamba2_tensor_make((void *)(uintptr_t)((uint64_t)(i + 1) << 46), MAMBA2_DTYPE_F32,
                                  rk[i], sh[i]);
}

/* st must be OK or a refusal with a message; `want_refused`: it must be a refusal. */
static void expect_answer(const char *what, mamba2_status_t st, int want_refused) {
    const char *msg = mamba2_last_error();
    if (st == MAMBA2_STATUS_OK) {
        th_expect(!want_refused, "%s: OK; expected a refusal", what);
        return;
    }
    th_expect(st == MAMBA2_STATUS_OUT_OF_MEMORY || st == MAMBA2_STATUS_INVALID_ARGUMENT ||
                  st == MAMBA2_STATUS_WORKSPACE_TOO_SMALL,
              "%s: status %s", what, mamba2_status_string(st));
    th_expect(msg && msg[0], "%s: no error message", what);
    th_note("%s: %s", what, mamba2_status_string(st));
}

/* The forward and backward queries of problem p (backward: the gradients `grads`, a mask of
 * DX, DA, DBM), then both calls with a 64-byte workspace. refused: the queries must refuse. */
static const char *only; /* -k NAME: only the problems whose name contains NAME */

static void run(mamba2_context_t *ctx, const prob *p, unsigned grads, int refused) {
    if (only && !strstr(p->name, only)) return;
    mamba2_tensor_t t[NT];
    make(p, t);
    th_begin("%s [B,L,H,P,N,G]=[%lld,%lld,%lld,%lld,%lld,%lld]", p->name, (long long)p->B,
             (long long)p->L, (long long)p->H, (long long)p->P, (long long)p->N, (long long)p->G);
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = 64;
    size_t ws = 0;
    mamba2_status_t st = mamba2_ssd_forward_workspace_size(ctx, &t[OUT], NULL, NULL, &t[X], &t[DT],
                                                           &t[A], &t[BM], &t[CM], &o, &ws);
    expect_answer("fwd query", st, refused);
    if (st == MAMBA2_STATUS_OK) th_expect(ws > 64, "fwd query: %zu bytes", ws);
    st = mamba2_ssd_forward(ctx, &t[OUT], NULL, NULL, &t[X], &t[DT], &t[A], &t[BM], &t[CM], &o,
                            tiny_ws, sizeof tiny_ws);
    expect_answer("fwd call", st, 1);
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = grads & (1u << DX) ? &t[DX] : NULL;
    g.dA = grads & (1u << DA) ? &t[DA] : NULL;
    g.dBm = grads & (1u << DBM) ? &t[DBM] : NULL;
    ws = 0;
    st = mamba2_ssd_backward_workspace_size(ctx, &g, &t[DOUT], NULL, &t[X], &t[DT], &t[A], &t[BM],
                                            &t[CM], NULL, &o, &ws);
    expect_answer("bwd query", st, refused);
    if (st == MAMBA2_STATUS_OK) th_expect(ws > 64, "bwd query: %zu bytes", ws);
    st = mamba2_ssd_backward(ctx, &g, &t[DOUT], NULL, &t[X], &t[DT], &t[A], &t[BM], &t[CM], NULL, &o,
                             tiny_ws, sizeof tiny_ws);
    expect_answer("bwd call", st, 1);
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) th_set_verbose(1);
        if (!strcmp(argv[i], "-k") && i + 1 < argc) only = argv[++i];
    }
    const int64_t K = 1024, M = K * K, G1 = M * K, T40 = G1 * K;
    const unsigned dx = 1u << DX, all = dx | (1u << DA) | (1u << DBM);
    /* a state of one head beyond size_t: the snapshot count divided by a wrapped product, the
     * forward's query wrapped its size, P * N overflowed int64 */
    const prob huge_state[] = {
        {"P=N=2^31", 1, 1, 1, 2 * G1, 2 * G1, 1},
        {"P=N=2^40", 1, 1, 1, T40, T40, 1},
        {"P=2^32,N=2^30", 1, 1, 1, 4 * G1, G1, 1},
        {"P=N=2^32,L=256", 1, 256, 1, 4 * G1, 4 * G1, 1},
    };
    /* many heads or sequences: the plans must come back at once (OK, or refused) */
    const prob many[] = {
        {"H=2^24", 1, 1, 16 * M, 1, 1, 1},
        {"H=2^28", 1, 1, 256 * M, 1, 1, 1},
        {"H=2^40", 1, 1, T40, 1, 1, 1},
        {"B=2^40", T40, 1, 1, 1, 1, 1},
        {"B=2^20,H=2^20", M, 1, M, 1, 1, 1},
    };
    for (int nt = 1; nt <= 2; nt++) {
        mamba2_context_t *ctx = NULL;
        th_begin("context with %d threads", nt);
        th_expect(mamba2_context_create(&ctx, MAMBA2_BACKEND_CPU, nt) == MAMBA2_STATUS_OK,
                  "context: %s", mamba2_last_error());
        th_end();
        if (!ctx) continue;
        for (size_t i = 0; i < sizeof huge_state / sizeof huge_state[0]; i++) {
            run(ctx, &huge_state[i], dx, 1);
            run(ctx, &huge_state[i], all, 1);
        }
        for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) run(ctx, &many[i], all, 0);
        /* and an ordinary problem still plans */
        const prob small = {"small", 2, 100, 4, 16, 16, 2};
        mamba2_tensor_t t[NT];
        make(&small, t);
        th_begin("small problem plans");
        size_t ws = 0;
        th_expect(mamba2_ssd_forward_workspace_size(ctx, &t[OUT], NULL, NULL, &t[X], &t[DT], &t[A],
                                                    &t[BM], &t[CM], NULL, &ws) == MAMBA2_STATUS_OK &&
                      ws > 0,
                  "forward query: %s", mamba2_last_error());
        th_end();
        mamba2_context_destroy(ctx);
    }
    return th_finish();
}
