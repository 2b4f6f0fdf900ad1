/*
 * threadpool.c — the library-owned persistent thread pool.
 *
 * nthreads - 1 workers sleep on a condition variable; m2_pool_run wakes them, the calling
 * thread joins in as worker 0, and tasks are handed out through an atomic counter (load
 * balance). Which worker runs which task therefore varies from call to call, so kernels
 * must make each task write only its own outputs and do every cross-task reduction
 * afterwards in a fixed order: that is what keeps results bitwise identical for any thread
 * count. Only the task counter is atomic; no floating-point value ever is.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/internal.h"

struct m2_pool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* workers wait for a new generation          */
    pthread_cond_t done;  /* the caller waits for all workers to finish */
    uint64_t generation;
    int active;           /* workers still inside the current job       */
    int shutdown;
    /* the current job */
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
    pthread_mutex_lock(&pool->mu);
    for (;;) {
        while (!pool->shutdown && pool->generation == seen) pthread_cond_wait(&pool->wake, &pool->mu);
        if (pool->shutdown) break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->mu);
        run_tasks(pool, wa.id);
        pthread_mutex_lock(&pool->mu);
        if (--pool->active == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mu);
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
        pool->shutdown = 1;
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
    pthread_mutex_lock(&pool->mu);
    pool->fn = fn;
    pool->arg = arg;
    pool->ntasks = ntasks;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    pool->active = pool->nthreads - 1;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mu);

    run_tasks(pool, 0);

    pthread_mutex_lock(&pool->mu);
    while (pool->active > 0) pthread_cond_wait(&pool->done, &pool->mu);
    pthread_mutex_unlock(&pool->mu);
}
