/*
 * test_busy.c — one context, two host threads: a call made while another thread's call runs on
 * the same context returns MAMBA2_STATUS_BUSY at once (never a deadlock, never a wrong result),
 * for the ops, the workspace queries, mamba2_context_set_num_threads and
 * mamba2_context_force_isa; and contexts used one per thread stay independent.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

/* one SSD forward problem, large enough that a call takes a while */
enum { B = 2, L = 512, H = 8, P = 32, N = 32 };
typedef struct problem {
    float *x, *dt, *A, *Bm, *Cm, *out;
    mamba2_tensor_t tx, tdt, tA, tB, tC, to;
} problem;

static void problem_make(problem *p) {
    th_rng r;
    th_rng_seed(&r, 3);
    const int64_t nx = (int64_t)B * L * H * P, nb = (int64_t)B * L * N;
    p->x = th_xmalloc(nx * 4), p->dt = th_xmalloc(B * L * H * 4), p->A = th_xmalloc(H * 4);
    p->Bm = th_xmalloc(nb * 4), p->Cm = th_xmalloc(nb * 4), p->out = th_xmalloc(nx * 4);
    for (int64_t i = 0; i < nx; i++) p->x[i] = (float)th_rng_normal(&r);
    for (int64_t i = 0; i < B * L * H; i++) p->dt[i] = (float)th_rng_uniform(&r, 0.01, 0.1);
    for (int64_t i = 0; i < H; i++) p->A[i] = (float)th_rng_uniform(&r, -0.5, -0.1);
    for (int64_t i = 0; i < nb; i++) p->Bm[i] = (float)th_rng_normal(&r) / 5, p->Cm[i] = (float)th_rng_normal(&r) / 5;
    const int64_t sx[4] = {B, L, H, P}, sdt[3] = {B, L, H}, sa[1] = {H}, sb[4] = {B, L, 1, N};
    p->tx = mamba2_tensor_make(p->x, MAMBA2_DTYPE_F32, 4, sx);
    p->tdt = mamba2_tensor_make(p->dt, MAMBA2_DTYPE_F32, 3, sdt);
    p->tA = mamba2_tensor_make(p->A, MAMBA2_DTYPE_F32, 1, sa);
    p->tB = mamba2_tensor_make(p->Bm, MAMBA2_DTYPE_F32, 4, sb);
    p->tC = mamba2_tensor_make(p->Cm, MAMBA2_DTYPE_F32, 4, sb);
    p->to = mamba2_tensor_make(p->out, MAMBA2_DTYPE_F32, 4, sx);
}
static void problem_free(problem *p) {
    free(p->x), free(p->dt), free(p->A), free(p->Bm), free(p->Cm), free(p->out);
}
static mamba2_status_t forward(mamba2_context_t *ctx, problem *p) {
    return mamba2_ssd_forward(ctx, &p->to, NULL, NULL, &p->tx, &p->tdt, &p->tA, &p->tB, &p->tC, NULL, NULL, 0);
}

typedef struct worker {
    mamba2_context_t *ctx;
    problem *p;
    int calls;
    atomic_int started, stop;
    int ok, busy, other;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    atomic_store(&w->started, 1);
    for (int i = 0; i < w->calls && !atomic_load(&w->stop); i++) {
        mamba2_status_t st = forward(w->ctx, w->p);
        if (st == MAMBA2_STATUS_OK) w->ok++;
        else if (st == MAMBA2_STATUS_BUSY) w->busy++;
        else w->other++;
    }
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    th_begin("busy_status_string");
    th_expect(strcmp(mamba2_status_string(MAMBA2_STATUS_BUSY), "context busy") == 0,
              "status string of BUSY is \"%s\"", mamba2_status_string(MAMBA2_STATUS_BUSY));
    th_expect(MAMBA2_STATUS_BUSY == 7, "MAMBA2_STATUS_BUSY is %d", (int)MAMBA2_STATUS_BUSY);
    th_end();

    for (int be = 0; be < 2; be++) {
        problem p, q;
        problem_make(&p);
        problem_make(&q);
        mamba2_context_t *ctx = th_ctx(be ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU, 2, NULL);
        /* the expected result, alone */
        th_begin("busy_two_threads/%s", be ? "ref" : "cpu");
        if (forward(ctx, &q) != MAMBA2_STATUS_OK) th_fail("forward: %s", mamba2_last_error());
        /* the worker calls until told to stop, so how the two threads are scheduled (a loaded
         * machine) cannot end the test before every entry point has met a running call */
        worker w = {.ctx = ctx, .p = &p, .calls = 1 << 30};
        pthread_t th;
        pthread_create(&th, NULL, work, &w);
        while (!atomic_load(&w.started)) {
        }
        /* while the worker calls back to back, this thread tries every kind of entry point;
         * each must return OK or BUSY at once */
        int busy[5] = {0}, bad = 0, tries = 0;
        const double t0 = now();
        size_t ws = 0;
        problem mine;
        problem_make(&mine);
        while (now() - t0 < 60.0) {
            mamba2_status_t st[5];
            /* named[k]: a BUSY status came with a message naming the context (read at once:
             * the next call replaces the thread's last error) */
            int named[5];
#define BUSY_CALL(k, call) (st[k] = (call), named[k] = st[k] != MAMBA2_STATUS_BUSY || \
                                                   th_has_word(mamba2_last_error(), "context"))
            BUSY_CALL(0, mamba2_context_set_num_threads(ctx, (tries & 1) ? 2 : 3));
            BUSY_CALL(1, mamba2_context_force_isa(ctx, "auto"));
            BUSY_CALL(2, forward(ctx, &mine));
            BUSY_CALL(3, mamba2_ssd_forward_workspace_size(ctx, &mine.to, NULL, NULL, &mine.tx, &mine.tdt,
                                                           &mine.tA, &mine.tB, &mine.tC, NULL, &ws));
            float cache[H * P * N];
            const int64_t sc[4] = {1, H, P, N}, s3[3] = {1, H, P}, s2[2] = {1, H}, sbn[3] = {1, 1, N};
            mamba2_tensor_t tc = mamba2_tensor_make(cache, MAMBA2_DTYPE_F32, 4, sc),
                            sx = mamba2_tensor_make(mine.x, MAMBA2_DTYPE_F32, 3, s3),
                            sy = mamba2_tensor_make(mine.out, MAMBA2_DTYPE_F32, 3, s3),
                            sdt = mamba2_tensor_make(mine.dt, MAMBA2_DTYPE_F32, 2, s2),
                            sb = mamba2_tensor_make(mine.Bm, MAMBA2_DTYPE_F32, 3, sbn);
            memset(cache, 0, sizeof cache);
            BUSY_CALL(4, mamba2_ssd_step(ctx, &tc, &sy, NULL, &sx, &sdt, &mine.tA, &sb, &sb, NULL));
#undef BUSY_CALL
            for (int k = 0; k < 5; k++) {
                if (st[k] == MAMBA2_STATUS_BUSY) {
                    busy[k]++;
                    if (!named[k]) bad++;
                } else if (st[k] != MAMBA2_STATUS_OK) {
                    bad++;
                }
            }
            tries++;
            int all = w.ok > 0;
            for (int k = 0; k < 5; k++) all = all && busy[k] > 0;
            if (all && tries >= 8) break;
        }
        atomic_store(&w.stop, 1);
        pthread_join(th, NULL);
        th_expect(bad == 0, "%d calls returned neither OK nor BUSY (with a message naming the context)", bad);
        th_expect(w.other == 0, "the worker got %d statuses other than OK/BUSY", w.other);
        th_expect(w.ok > 0, "the worker never ran");
        for (int k = 0; k < 5; k++)
            th_expect(busy[k] > 0, "entry point %d never saw BUSY in %d tries", k, tries);
        th_note("%d tries; BUSY %d/%d/%d/%d/%d; worker ok %d busy %d", tries, busy[0], busy[1],
                busy[2], busy[3], busy[4], w.ok, w.busy);
        /* the worker's result is the one computed alone */
        th_expect(memcmp(p.out, q.out, (size_t)B * L * H * P * 4) == 0,
                  "the worker's output differs from the same call made alone");
        /* the context works normally afterwards */
        th_expect(mamba2_context_set_num_threads(ctx, 1) == MAMBA2_STATUS_OK &&
                      forward(ctx, &mine) == MAMBA2_STATUS_OK,
                  "the context fails after the concurrent use: %s", mamba2_last_error());
        th_end();
        problem_free(&mine);
        mamba2_context_destroy(ctx);
        problem_free(&p);
        problem_free(&q);
    }

    /* two contexts, one per thread: both run, never BUSY */
    th_begin("busy_one_context_per_thread");
    {
        problem p, q;
        problem_make(&p);
        problem_make(&q);
        mamba2_context_t *c1 = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL), *c2 = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
        worker w1 = {.ctx = c1, .p = &p, .calls = 5}, w2 = {.ctx = c2, .p = &q, .calls = 5};
        pthread_t a, b;
        pthread_create(&a, NULL, work, &w1);
        pthread_create(&b, NULL, work, &w2);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        th_expect(w1.ok == 5 && w2.ok == 5, "ok %d and %d of 5 (busy %d, %d)", w1.ok, w2.ok, w1.busy, w2.busy);
        th_expect(memcmp(p.out, q.out, (size_t)B * L * H * P * 4) == 0, "the two results differ");
        mamba2_context_destroy(c1);
        mamba2_context_destroy(c2);
        problem_free(&p);
        problem_free(&q);
    }
    th_end();
    return th_finish();
}
