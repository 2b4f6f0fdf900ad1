/*
 * gpu_common.c — what every GPU op's host code shares: kernel names, argument lists, and the
 * buffers of one call (copy in, scratch, copy back) over the m2g_dev table of gpu.h.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"

const char *const m2g_kernel_names[M2G_NUM_KERNELS] = {
#define M2G_KERNEL(name) #name,
#include "gpu/kernels/list.h"
#undef M2G_KERNEL
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

static mamba2_status_t own(m2g_call *c, size_t bytes, m2g_mem *mem) {
    if (c->nown >= M2G_CALL_MAX)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "%s backend: too many buffers in one call",
                        c->dev->api);
    M2_TRY(c->dev->alloc(c->dev, bytes ? bytes : 16, mem));
    c->own[c->nown++] = *mem;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_in(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                            size_t esize, m2g_t *t) {
    memset(t, 0, sizeof *t);
    if (!v->p) {
        t->mem = c->dev->dummy;
        return MAMBA2_STATUS_OK;
    }
    t->present = 1;
    fill_strides(v, rank, t);
    if (c->dev->device_memory) {
        t->mem = (m2g_mem)(uintptr_t)v->p;
        return MAMBA2_STATUS_OK;
    }
    size_t span, bytes;
    if (!view_span(rank, dims, t->s, &span) || !m2_size_mul(span, esize, &bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: tensor too large", c->dev->api);
    M2_TRY(own(c, bytes, &t->mem));
    if (bytes) M2_TRY(c->dev->write(c->dev, t->mem, 0, v->p, bytes));
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2g_call_out(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                             size_t esize, m2g_t *t) {
    memset(t, 0, sizeof *t);
    if (!v->p) {
        t->mem = c->dev->dummy;
        return MAMBA2_STATUS_OK;
    }
    t->present = 1;
    fill_strides(v, rank, t);
    if (c->dev->device_memory) {
        t->mem = (m2g_mem)(uintptr_t)v->p;
        return MAMBA2_STATUS_OK;
    }
    if (c->nout >= M2G_CALL_MAX)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "%s backend: too many outputs", c->dev->api);
    size_t span, bytes;
    if (!view_span(rank, dims, t->s, &span) || !m2_size_mul(span, esize, &bytes))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "%s backend: tensor too large", c->dev->api);
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
    if (!c->dev->device_memory) return own(c, bytes, mem);
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
    for (int i = 0; i < c->nown; i++) d->release(d, c->own[i]);
    c->nown = c->nout = 0;
    return st;
}

void m2_gpu_close(mamba2_context_t *ctx) {
    m2g_dev *d = (m2g_dev *)ctx->gpu;
    ctx->gpu = NULL;
    if (d) d->destroy(d);
}
