/*
 * threadpool.c — the library-owned persistent thread pool.
 *
 * nthreads - 1 workers wait for a job; m2_pool_run publishes it, the calling thread joins in
 * as worker 0, and tasks are handed out through an atomic counter (load balance). A worker
 * that finished a job polls for the next one for a short while (M2_POOL_SPIN polls) before it
 * sleeps on a condition variable, and the caller polls for the workers' end the same way:
 * back-to-back calls (a model's ops, a small problem's passes) then do not pay a sleep and a
 * wake-up (a futex round trip; docs/code_notes.md) per parallel
 * region, and an idle pool stops using the cores within that while. Which worker runs which
 * task therefore varies from call to call, so kernels
 * must make each task write only its own outputs and do every cross-task reduction
 * afterwards in a fixed order: that is what keeps results bitwise identical for any thread
 * count. Only the task counter is atomic; no floating-point value ever is.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define M2_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__) && defined(__GNUC__)
#define M2_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define M2_CPU_RELAX() ((void)0)
#endif

/* polls of the job counter before a worker sleeps (and of the workers' end before the caller
 * sleeps): a few pause instructions each, longer than the gap between the parallel regions
 * of one call and short next to a futex round trip (docs/code_notes.md) */
#define M2_POOL_SPIN 1000

struct m2_pool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* workers wait for a new generation          */
    pthread_cond_t done;  /* the caller waits for all workers to finish */
    _Atomic uint64_t generation; /* written under mu; polled without it  */
    atomic_int active;    /* workers still inside the current job       */
    atomic_int shutdown;
    /* the current job (written before generation is released) */
    m2_task_fn fn;
    void *arg;
    int64_t ntasks;
    atomic_llong next;
};

typedef struct worker_arg {
    m2_pool *pool;
    int id;
} worker_arg;

static void run_tasks(m2_pool *pool, int id) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (t >= pool->ntasks) break;
        pool->fn(pool->arg, t, id);
    }
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    m2_pool *pool = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        /* poll for a while; only if nothing came, sleep until a new generation (or shutdown) */
        int woke = 0;
        for (int i = 0; i < M2_POOL_SPIN && !woke; i++) {
            woke = atomic_load_explicit(&pool->generation, memory_order_acquire) != seen ||
                   atomic_load_explicit(&pool->shutdown, memory_order_acquire);
            if (!woke) M2_CPU_RELAX();
        }
        if (!woke) {
            pthread_mutex_lock(&pool->mu);
            while (!atomic_load_explicit(&pool->shutdown, memory_order_relaxed) &&
                   atomic_load_explicit(&pool->generation, memory_order_relaxed) == seen)
                pthread_cond_wait(&pool->wake, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load_explicit(&pool->shutdown, memory_order_acquire)) break;
        /* acquire: the job published before this generation is visible */
        seen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        run_tasks(pool, wa.id);
        if (atomic_fetch_sub_explicit(&pool->active, 1, memory_order_acq_rel) == 1) {
            /* the last one out: wake the caller if it went to sleep (under mu, so that a
             * caller between its check of active and its wait cannot miss it) */
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->mu);
        }
    }
    return NULL;
}

mamba2_status_t m2_pool_create(m2_pool **out, int nthreads) {
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    m2_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate the thread pool");
    pool->nthreads = nthreads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    atomic_init(&pool->next, 0);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->active, 0);
    atomic_init(&pool->shutdown, 0);
    if (nthreads > 1) {
        pool->threads = calloc((size_t)nthreads - 1, sizeof(pthread_t));
        if (!pool->threads) {
            m2_pool_destroy(pool);
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate the thread pool");
        }
        for (int i = 1; i < nthreads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->pool = pool;
                wa->id = i;
            }
            if (!wa || pthread_create(&pool->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                pool->nthreads = i; /* threads 1..i-1 exist */
                m2_pool_destroy(pool);
                return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot start worker thread %d of %d", i, nthreads);
            }
        }
    }
    *out = pool;
    return MAMBA2_STATUS_OK;
}

void m2_pool_destroy(m2_pool *pool) {
    if (!pool) return;
    if (pool->threads) {
        pthread_mutex_lock(&pool->mu);
        atomic_store_explicit(&pool->shutdown, 1, memory_order_release);
        pthread_cond_broadcast(&pool->wake);
        pthread_mutex_unlock(&pool->mu);
        for (int i = 1; i < pool->nthreads; i++) pthread_join(pool->threads[i - 1], NULL);
        free(pool->threads);
    }
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    free(pool);
}

int m2_pool_num_threads(const m2_pool *pool) { return pool ? pool->nthreads : 1; }

void m2_pool_run(m2_pool *pool, int64_t ntasks, m2_task_fn fn, void *arg) {
    if (ntasks <= 0) return;
    if (!pool || pool->nthreads == 1 || ntasks == 1) {
        for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
        return;
    }
    /* every worker is idle here (the previous call waited for active == 0) */
    pool->fn = fn;
    pool->arg = arg;
    pool->ntasks = ntasks;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->active, pool->nthreads - 1, memory_order_relaxed);
    pthread_mutex_lock(&pool->mu);
    /* release: a worker that sees the new generation sees the job above */
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    run_tasks(pool, 0);

    for (int i = 0; i < M2_POOL_SPIN; i++) {
        if (atomic_load_explicit(&pool->active, memory_order_acquire) == 0) return;
        M2_CPU_RELAX();
    }
    pthread_mutex_lock(&pool->mu);
    while (atomic_load_explicit(&pool->active, memory_order_acquire) > 0)
        pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
