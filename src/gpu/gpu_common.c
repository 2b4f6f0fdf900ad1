/*
 * gpu_common.c — what every GPU op's host code shares: kernel names, argument lists, and the
 * buffers of one call (copy in, scratch, copy back) over the m2g_dev table of gpu.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu_launch/tables.h"

const char *const m2g_kernel_names[M2G_NUM_ALL_KERNELS] = {
#define M2G_KERNEL(name) #name,
#include "gpu/kernels/list.h"
#undef M2G_KERNEL
#define M2G_TC_KERNEL(name) #name,
#include "cuda/tc_list.h"
#undef M2G_TC_KERNEL
};

/* ---- argument lists ---------------------------------------------------------------------- */

/* Overflowing M2G_MAX_ARGS is a programming error caught by the tests: the launch then
 * fails (n is left past the end) instead of writing out of bounds. */
static m2g_arg *next_arg(m2g_args *a) {
    if (a->n >= M2G_MAX_ARGS) {
        a->n = M2G_MAX_ARGS + 1;
        return NULL;
    }
    return &a->a[a->n++];
}
void m2g_arg_mem(m2g_args *a, m2g_mem m) {
    m2g_arg *g = next_arg(a);
    if (g) *g = (m2g_arg){.kind = M2G_ARG_MEM, .v.mem = m};
}
void m2g_arg_i64(m2g_args *a, int64_t v) {
    m2g_arg *g = next_arg(a);
    if (g) *g = (m2g_arg){.kind = M2G_ARG_I64, .v.i64 = v};
}
void m2g_arg_i32(m2g_args *a, int32_t v) {
    m2g_arg *g = next_arg(a);
    if (g) *g = (m2g_arg){.kind = M2G_ARG_I32, .v.i32 = v};
}
void m2g_arg_f32(m2g_args *a, float v) {
    m2g_arg *g = next_arg(a);
    if (g) *g = (m2g_arg){.kind = M2G_ARG_F32, .v.f32 = v};
}
void m2g_arg_t(m2g_args *a, const m2g_t *t, int nstrides) {
    m2g_arg_mem(a, t->mem);
    m2g_arg_i64(a, t->off);
    for (int i = 0; i < nstrides; i++) m2g_arg_i64(a, t->s[i]);
}

mamba2_status_t m2g_check_args(int id, const m2g_args *a) {
    static const char letter[4] = {'M', 'L', 'I', 'F'};
    static const char *const kind[4] = {"a buffer", "an i64", "an i32", "a float"};
    if (id < 0 || id >= M2G_NUM_ALL_KERNELS)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "GPU launch: kernel id %d out of range", id);
    const char *sig = m2g_kernel_sigs[id];
    const int want = (int)strlen(sig);
    if (a->n != want)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                        "GPU launch of %s: %d arguments, its prototype has %d", m2g_kernel_names[id],
                        a->n, want);
    for (int i = 0; i < want; i++)
        if (letter[a->a[i].kind] != sig[i]) {
            const int k = sig[i] == 'M' ? 0 : sig[i] == 'L' ? 1 : sig[i] == 'I' ? 2 : 3;
            return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                            "GPU launch of %s: argument %d is %s, its prototype takes %s",
                            m2g_kernel_names[id], i, kind[a->a[i].kind], kind[k]);
        }
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_launch_id(m2g_dev *d, int id, const size_t groups[3], size_t smem,
                              const m2g_args *a) {
    mamba2_status_t st = m2g_check_args(id, a);
    return st ? st : d->launch(d, id, groups, m2g_kernel_local[id], smem, a->n, a->a);
}

/* MAMBA2C_GPU_TRACE=<file>: one line per launch (kernel, grid, block, dynamic shared bytes,
 * every argument's kind and value) appended to the file; a buffer is written as the order of
 * its first appearance in the process (its handle is an address: different run to run), so
 * two runs of the same program give the same text. A diagnostic of the host layer: a rewrite
 * of the launch code must leave it byte-identical (docs/gpu.md §2a). Read once per process;
 * off, it costs one test per launch. */
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_file;
static void trace_open(void) {
    const char *path = getenv("MAMBA2C_GPU_TRACE");
    trace_file = path && *path ? fopen(path, "a") : NULL;
}

void m2g_trace_launch(const char *kernel, const size_t groups[3], const size_t local[3],
                      size_t smem, int nargs, const m2g_arg *args) {
    static m2g_mem seen[4096];
    static int nseen;
    pthread_once(&trace_once, trace_open);
    if (!trace_file) return;
    pthread_mutex_lock(&trace_mu);
    FILE *f = trace_file;
    fprintf(f, "%s g=%zu,%zu,%zu l=%zu,%zu,%zu smem=%zu:", kernel, groups[0], groups[1],
            groups[2], local[0], local[1], local[2], smem);
    for (int i = 0; i < nargs; i++) {
        const m2g_arg *a = &args[i];
        if (a->kind == M2G_ARG_MEM) {
            int k = 0;
            while (k < nseen && seen[k] != a->v.mem) k++;
            if (k == nseen && nseen < 4096) seen[nseen++] = a->v.mem;
            fprintf(f, " M%d", k);
        } else if (a->kind == M2G_ARG_I64) {
            fprintf(f, " L%lld", (long long)a->v.i64);
        } else if (a->kind == M2G_ARG_I32) {
            fprintf(f, " I%d", (int)a->v.i32);
        } else {
            fprintf(f, " F%a", (double)a->v.f32);
        }
    }
    fputc('\n', f);
    fflush(f);
    pthread_mutex_unlock(&trace_mu);
}

/* ---- one call's buffers ------------------------------------------------------------------ */

void m2g_call_begin(m2g_call *c, m2g_dev *d) {
    memset(c, 0, sizeof *c);
    c->dev = d;
}

/* Elements from element 0 to the last one of a view (0 when empty). */
static int view_span(int rank, const int64_t *dims, const int64_t *s, size_t *span) {
    size_t last = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0) {
            *span = 0;
            return 1;
        }
    }
    for (int i = 0; i < rank; i++) {
        size_t t;
        if (!m2_size_mul((size_t)(dims[i] - 1), (size_t)s[i], &t) || !m2_size_add(last, t, &last))
            return 0;
    }
    return m2_size_add(last, 1, span);
}

static void fill_strides(const m2_view *v, int rank, m2g_t *t) {
    for (int i = 0; i < 5; i++) t->s[i] = 0;
    for (int i = 0; i + 1 < rank && i < 4; i++) t->s[i] = v->s[i];
    t->s[rank - 1] = 1;
}

mamba2_status_t m2g_register(m2g_dev *d, m2g_mem mem, size_t bytes, void **vbase) {
    if (!d->device_memory)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s: buffers are registered only with a device-mode context", d->api);
    if (!mem || bytes == 0 || bytes > ((uint64_t)1 << 44))
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s: register a non-NULL buffer of 1 byte to 16 TiB", d->api);
    if (d->nregions >= M2G_MAX_REGIONS)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s: at most %d registered buffers", d->api,
                        M2G_MAX_REGIONS);
    for (int i = 0; i < d->nregions; i++)
        if (d->regions[i].mem == mem)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s: buffer already registered",
                            d->api);
    if (!d->next_vbase) d->next_vbase = (uint64_t)1 << 44;
    const uint64_t span = ((uint64_t)bytes + ((uint64_t)1 << 20)) & ~(((uint64_t)1 << 20) - 1);
    if (d->next_vbase > ((uint64_t)1 << 62) - span)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s: virtual address range exhausted",
                        d->api);
    m2g_region *r = &d->regions[d->nregions++]; /* increasing vbase: appended in order */
    r->vbase = d->next_vbase;
    r->bytes = bytes;
    r->mem = mem;
    d->next_vbase += span; /* a gap of >= 1 MiB: ranges never touch */
    *vbase = (void *)(uintptr_t)r->vbase;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_unregister(m2g_dev *d, m2g_mem mem) {
    for (int i = 0; i < d->nregions; i++)
        if (d->regions[i].mem == mem) {
            memmove(&d->regions[i], &d->regions[i + 1],
                    (size_t)(d->nregions - i - 1) * sizeof d->regions[0]);
            d->nregions--;
            return MAMBA2_STATUS_OK;
        }
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s: buffer not registered", d->api);
}

/* (buffer, element offset) of a device-mode data pointer covering span elements */
static mamba2_status_t translate(m2g_dev *d, const void *p, size_t span, size_t esize,
                                 m2g_t *t) {
    const uint64_t a = (uint64_t)(uintptr_t)p;
    if (d->flat_addresses) {
        size_t need;
        if (a % esize || !m2_size_mul(span, esize, &need) || a + need < a)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s: a tensor's data pointer is misaligned for its element size or "
                            "its extent wraps the address space",
                            d->api);
        t->mem = (m2g_mem)a;
        t->off = 0;
        return MAMBA2_STATUS_OK;
    }
    for (int i = 0; i < d->nregions; i++) {
        const m2g_region *r = &d->regions[i];
        if (a < r->vbase || a - r->vbase >= r->bytes) continue;
        const uint64_t off = a - r->vbase;
        size_t need;
        if (off % esize || !m2_size_mul(span, esize, &need) || need > r->bytes - off)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s: a tensor at byte %llu of a registered buffer of %zu bytes is "
                            "misaligned or runs past its end",
                            d->api, (unsigned long long)off, r->bytes);
        t->mem = r->mem;
        t->off = (int64_t)(off / esize);
        return MAMBA2_STATUS_OK;
    }
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                    "%s: a tensor's data pointer is in no registered buffer "
                    "(mamba2_opencl_register_buffer)",
                    d->api);
}

static mamba2_status_t own(m2g_call *c, size_t bytes, m2g_mem *mem) {
    m2g_dev *d = c->dev;
    if (c->nown >= M2G_CALL_MAX)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "%s backend: too many buffers in one call",
                        d->api);
    if (!bytes) bytes = 16;
    if (d->device_memory && d->user_alloc) { /* the caller's allocator, on the stream */
        void *p = d->user_alloc(d->user, bytes, d->stream);
        if (!p)
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                            "%s: the device allocator returned NULL for %zu bytes", d->api, bytes);
        if ((uintptr_t)p % 256) {
            d->user_free(d->user, p, d->stream);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s: the device allocator returned a pointer not aligned to 256 "
                            "bytes",
                            d->api);
        }
        *mem = (m2g_mem)(uintptr_t)p;
        c->own_user[c->nown] = 1;
    } else {
        M2_TRY(d->alloc(d, bytes, mem));
        c->own_user[c->nown] = 0;
    }
    c->own[c->nown++] = *mem;
    return MAMBA2_STATUS_OK;
}

/* What m2g_call_in and m2g_call_out share: t for view v (absent: the dummy buffer), its span
 * and byte count; *done when nothing is left to do (absent, or device mode: translated). */
static mamba2_status_t bind_view(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                                 size_t esize, m2g_t *t, size_t *span, size_t *bytes, int *done) {
    memset(t, 0, sizeof *t);
    *done = 1;
    if (!v->p) {
        t->mem = c->dev->dummy;
        return MAMBA2_STATUS_OK;
    }
    t->present = 1;
    fill_strides(v, rank, t);
    if (!view_span(rank, dims, t->s, span) || !m2_size_mul(*span, esize, bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: tensor too large", c->dev->api);
    if (c->dev->device_memory) {
        if (*span == 0) {
            t->mem = c->dev->dummy;
            return MAMBA2_STATUS_OK;
        }
        return translate(c->dev, v->p, *span, esize, t);
    }
    *done = 0;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_in(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                            size_t esize, m2g_t *t) {
    size_t span, bytes;
    int done;
    M2_TRY(bind_view(c, v, rank, dims, esize, t, &span, &bytes, &done));
    if (done) return MAMBA2_STATUS_OK;
    M2_TRY(own(c, bytes, &t->mem));
    if (bytes) M2_TRY(c->dev->write(c->dev, t->mem, 0, v->p, bytes));
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_out(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                             size_t esize, m2g_t *t) {
    size_t span, bytes;
    int done;
    M2_TRY(bind_view(c, v, rank, dims, esize, t, &span, &bytes, &done));
    if (done) return MAMBA2_STATUS_OK;
    if (c->nout >= M2G_CALL_MAX)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "%s backend: too many outputs", c->dev->api);
    M2_TRY(own(c, bytes, &t->mem));
    m2g_out_rec *r = &c->out[c->nout++];
    r->host = v->p;
    r->mem = t->mem;
    r->rank = rank;
    for (int i = 0; i < 5; i++) {
        r->dims[i] = i < rank ? dims[i] : 1;
        r->s[i] = t->s[i];
    }
    r->esize = esize;
    r->span = span;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_tmp(m2g_call *c, size_t bytes, m2g_mem *mem, int64_t *elem_off,
                             size_t esize) {
    *elem_off = 0;
    if (!c->dev->device_memory || c->dev->user_alloc) return own(c, bytes, mem);
    /* device mode: carve from the context's arena (grown between calls, never inside one
     * after a carve, so earlier carves stay valid) */
    size_t at = (c->arena_used + 255) & ~(size_t)255, end;
    if (!m2_size_add(at, bytes, &end))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: scratch too large", c->dev->api);
    if (end > c->dev->arena_bytes) {
        if (c->arena_used)
            return m2_error(MAMBA2_STATUS_INTERNAL_ERROR,
                            "%s backend: scratch must be requested at once", c->dev->api);
        if (c->dev->arena) c->dev->release(c->dev, c->dev->arena);
        c->dev->arena = 0;
        c->dev->arena_bytes = 0;
        M2_TRY(c->dev->alloc(c->dev, end, &c->dev->arena));
        c->dev->arena_bytes = end;
    }
    *mem = c->dev->arena;
    *elem_off = (int64_t)(at / esize);
    c->arena_used = end;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_upload(m2g_call *c, const void *src, size_t bytes, m2g_mem *mem) {
    M2_TRY(own(c, bytes, mem));
    if (bytes) M2_TRY(c->dev->write(c->dev, *mem, 0, src, bytes));
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_buf(m2g_call *c, size_t bytes, m2g_mem *mem) {
    return own(c, bytes, mem);
}

mamba2_status_t m2g_call_index(m2g_call *c, const void *p, mamba2_dtype_t dt, int64_t n,
                               int mono, int64_t lo, int64_t hi, m2g_mem *mem) {
    m2g_dev *d = c->dev;
    *mem = d->dummy;
    if (!p || n <= 0) return MAMBA2_STATUS_OK;
    size_t bytes;
    if (!m2_size_mul((size_t)n, sizeof(int64_t), &bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: index table too large", d->api);
    if (d->device_memory && d->device_indices) {
        M2_TRY(own(c, bytes, mem));
        const m2g_mem src = (m2g_mem)(uintptr_t)p;
        return M2G_LAUNCH(d, m2_idx_load_wi64, M2G_GRID(mono ? 1 : m2g_cdiv(n, 64), 1, 1),
                          .src32 = src, .src64 = src,
                          .kind = dt == MAMBA2_DTYPE_I64, .n = n, .mono = mono, .lo = lo,
                          .hi = hi, .dst = *mem);
    }
    int64_t *t = (int64_t *)malloc(bytes);
    if (!t)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: cannot stage an index table",
                        d->api);
    for (int64_t i = 0; i < n; i++)
        t[i] = dt == MAMBA2_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
    const mamba2_status_t st = m2g_call_upload(c, t, bytes, mem);
    free(t);
    return st;
}

/* Copy the elements of one output back: rows of dims[rank-1] contiguous elements. */
static mamba2_status_t copy_back(m2g_dev *d, const m2g_out_rec *r) {
    if (r->span == 0) return MAMBA2_STATUS_OK;
    size_t numel = 1;
    for (int i = 0; i < r->rank; i++) numel *= (size_t)r->dims[i]; /* <= span: fits */
    if (numel == r->span) /* dense: one copy */
        return d->read(d, r->host, r->mem, 0, r->span * r->esize);
    char *stage = malloc(r->span * r->esize);
    if (!stage)
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: cannot stage an output", d->api);
    mamba2_status_t st = d->read(d, stage, r->mem, 0, r->span * r->esize);
    if (st == MAMBA2_STATUS_OK) {
        const int outer = r->rank - 1;
        const size_t row = (size_t)r->dims[outer] * r->esize;
        int64_t idx[4] = {0, 0, 0, 0};
        for (;;) {
            int64_t e = 0;
            for (int i = 0; i < outer; i++) e += idx[i] * r->s[i];
            memcpy((char *)r->host + (size_t)e * r->esize, stage + (size_t)e * r->esize, row);
            int i = outer - 1;
            while (i >= 0 && ++idx[i] == r->dims[i]) idx[i--] = 0;
            if (i < 0) break;
        }
    }
    free(stage);
    return st;
}

mamba2_status_t m2g_call_end(m2g_call *c, mamba2_status_t st) {
    m2g_dev *d = c->dev;
    if (st == MAMBA2_STATUS_OK && !d->device_memory) {
        for (int i = 0; i < c->nout && st == MAMBA2_STATUS_OK; i++) st = copy_back(d, &c->out[i]);
    }
    /* device mode: no wait; a released buffer outlives the commands queued on it */
    for (int i = 0; i < c->nown; i++) {
        if (c->own_user[i])
            d->user_free(d->user, (void *)(uintptr_t)c->own[i], d->stream);
        else
            d->release(d, c->own[i]);
    }
    c->nown = c->nout = 0;
    return st;
}

/* a device-mode CUDA context's m2g_dev, else INVALID_ARGUMENT naming the setter */
static mamba2_status_t cuda_device_ctx(mamba2_context_t *ctx, const char *fn, m2g_dev **d) {
    if (!ctx) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "ctx is NULL");
    if (ctx->backend != MAMBA2_BACKEND_CUDA || !ctx->gpu || !m2g_of(ctx)->device_memory)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s: ctx is not a device-mode CUDA context (mamba2_context_create_cuda)",
                        fn);
    *d = m2g_of(ctx);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t mamba2_context_set_device_allocator(mamba2_context_t *ctx,
                                                    mamba2_device_alloc_fn alloc,
                                                    mamba2_device_free_fn free_fn, void *user) {
    m2_clear_error();
    m2g_dev *d = NULL;
    M2_TRY(cuda_device_ctx(ctx, "mamba2_context_set_device_allocator", &d));
    if (!alloc != !free_fn)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "mamba2_context_set_device_allocator: alloc and free must both be given "
                        "or both be NULL");
    M2_TRY(m2_ctx_enter(ctx));
    d->user_alloc = alloc;
    d->user_free = free_fn;
    d->user = alloc ? user : NULL;
    m2_ctx_leave(ctx);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t mamba2_context_set_device_indices(mamba2_context_t *ctx, int32_t on) {
    m2_clear_error();
    m2g_dev *d = NULL;
    M2_TRY(cuda_device_ctx(ctx, "mamba2_context_set_device_indices", &d));
    M2_TRY(m2_ctx_enter(ctx));
    d->device_indices = on != 0;
    ctx->device_indices = on != 0;
    m2_ctx_leave(ctx);
    return MAMBA2_STATUS_OK;
}

void m2_gpu_close(mamba2_context_t *ctx) {
    m2g_dev *d = (m2g_dev *)ctx->gpu;
    ctx->gpu = NULL;
    if (d) d->destroy(d);
}

/* ---- bf16/f16 activations ------------------------------------------------------------------ */

static int act_kind(mamba2_dtype_t dtype) {
    return dtype == MAMBA2_DTYPE_BF16 ? 1 : dtype == MAMBA2_DTYPE_F16 ? 2 : 0;
}

mamba2_status_t m2g_call_in_native(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                                   mamba2_dtype_t dtype, m2g_t *t) {
    const int ty = act_kind(dtype);
    M2_TRY(m2g_call_in(c, v, rank, dims, ty ? 2 : 4, t));
    t->ty = ty;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_out_native(m2g_call *c, const m2_view *v, int rank,
                                    const int64_t *dims, mamba2_dtype_t dtype, m2g_t *t) {
    const int ty = act_kind(dtype);
    M2_TRY(m2g_call_out(c, v, rank, dims, ty ? 2 : 4, t));
    t->ty = ty;
    return MAMBA2_STATUS_OK;
}
