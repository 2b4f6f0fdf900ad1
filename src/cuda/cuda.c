/*
 * cuda.c — the CUDA device layer (m2g_dev of src/gpu/gpu.h) over the CUDA driver API.
 *
 * libcuda.so.1 is opened with dlopen when the first CUDA context is created (libmamba2c never
 * links libcuda or cudart). The kernels are the portable ones of src/gpu/kernels/, compiled by
 * nvcc at build time into a fat binary embedded in the library (m2g_cuda_fatbin), loaded once
 * per context with cuModuleLoadData; each kernel's function is looked up once. A context
 * uses the device's primary context (the one the CUDA runtime uses, so cudaMalloc'd pointers
 * are valid in it).
 *
 * Host mode (mamba2_context_create, MAMBA2_BACKEND_CUDA): the default stream, copies in,
 * launches, copies out; MAMBA2C_CUDA_DEVICE picks the device ordinal (default 0).
 * Device mode (mamba2_context_create_cuda): tensor data pointers are device addresses, passed
 * to the kernels as they are; everything (index-table uploads included) is queued on the
 * caller's stream and no call waits for it. Index tables go through a ring of pinned host
 * staging buffers (each reused once the event recorded after its copy has passed), so the
 * upload is a true asynchronous copy: the driver never stages pageable memory.
 * In both modes the buffers of a call (copies of host tensors in host mode, index tables,
 * float32 copies of half tensors, scratch) come from a cache of device buffers owned by the
 * context: a buffer a call releases goes back to the cache (host mode: the call has waited
 * for its copies back; device mode: the next call's work on the same stream runs after this
 * call's), so a call repeating earlier sizes allocates and frees nothing (cuMemFree would
 * synchronise the device).
 * MAMBA2C_CUDA_TC at context creation chooses the tensor-core forward (ssd_tc.c, docs/gpu.md
 * §3a): "1" for every fused forward, "0" never (float32 storage stays exact float32), unset,
 * empty or "auto" (the default) where it measured faster: its on-chip scan, with at least two
 * blocks per multiprocessor. The fused backward's tensor-core twins (ssd_tc_bwd.cuh,
 * docs/gpu.md §3b) run with "1" only: no device run has measured them yet.
 * MAMBA2C_CUDA_PROFILE=<file> at context creation times every launch of the context with a
 * pair of events around it and, when the context is destroyed, appends one line per kernel
 * (launches, total / mean / min / max time) to the file: the diagnostic behind gpu-bench
 * --profile (docs/gpu.md §5a). Off, it costs one test per launch.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/tc.h"
#include "cuda/tc_tiles.h"
#include "gpu/gpu.h"

extern const unsigned char m2g_cuda_fatbin[];

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
#define CUDA_SUCCESS 0

#define M2CU_FUNCS(X)                                                                          \
    X(CUresult, cuInit, (unsigned int))                                                        \
    X(CUresult, cuDeviceGetCount, (int *))                                                     \
    X(CUresult, cuDeviceGet, (CUdevice *, int))                                                \
    X(CUresult, cuDeviceGetName, (char *, int, CUdevice))                                      \
    X(CUresult, cuDeviceGetAttribute, (int *, int, CUdevice))                                  \
    X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                             \
    X(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice))                                      \
    X(CUresult, cuCtxPushCurrent_v2, (CUcontext))                                              \
    X(CUresult, cuCtxPopCurrent_v2, (CUcontext *))                                             \
    X(CUresult, cuModuleLoadData, (CUmodule *, const void *))                                  \
    X(CUresult, cuModuleUnload, (CUmodule))                                                    \
    X(CUresult, cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                   \
    X(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t))                                        \
    X(CUresult, cuMemFree_v2, (CUdeviceptr))                                                   \
    X(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t))                          \
    X(CUresult, cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t))                                \
    X(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream))           \
    X(CUresult, cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))                 \
    X(CUresult, cuStreamSynchronize, (CUstream))                                               \
    X(CUresult, cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, \
                                 unsigned, unsigned, CUstream, void **, void **))              \
    X(CUresult, cuCtxSynchronize, (void))                                                     \
    X(CUresult, cuMemHostAlloc, (void **, size_t, unsigned int))                               \
    X(CUresult, cuMemFreeHost, (void *))                                                       \
    X(CUresult, cuEventCreate, (CUevent *, unsigned int))                                      \
    X(CUresult, cuEventRecord, (CUevent, CUstream))                                            \
    X(CUresult, cuEventSynchronize, (CUevent))                                                 \
    X(CUresult, cuEventDestroy_v2, (CUevent))                                                  \
    X(CUresult, cuEventElapsedTime, (float *, CUevent, CUevent))                               \
    X(CUresult, cuGetErrorName, (CUresult, const char **))                                     \
    X(CUresult, cuGetErrorString, (CUresult, const char **))                                   \
    X(CUresult, cuFuncSetAttribute, (CUfunction, int, int))

static struct {
#define M2CU_PTR(ret, name, args) ret(*name) args;
    M2CU_FUNCS(M2CU_PTR)
#undef M2CU_PTR
} cu;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[200];

static void load_api(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_error, sizeof load_error,
                 "CUDA: no driver (libcuda.so.1 could not be loaded): no NVIDIA GPU here?");
        return;
    }
#define M2CU_SYM(ret, name, args)                                                              \
    *(void **)(&cu.name) = dlsym(h, #name);                                                    \
    if (!cu.name) {                                                                            \
        snprintf(load_error, sizeof load_error, "CUDA: the driver lacks %s", #name);          \
        return;                                                                                \
    }
    M2CU_FUNCS(M2CU_SYM)
#undef M2CU_SYM
}

/* The context's device buffers, in use by the current call or free. */
#define CU_CACHE_MAX 64
typedef struct cu_buf {
    CUdeviceptr p;
    size_t bytes;
    int in_use;
} cu_buf;

/* Device mode: a pinned host buffer an upload is copied through; ev is recorded on the
 * stream after the copy, so the buffer is free again once ev has passed. */
#define CU_STAGE_SLOTS 32
typedef struct cu_stage {
    void *host;
    size_t bytes;
    CUevent ev;
    int pending;
} cu_stage;

typedef struct cu_dev {
    m2g_dev base; /* first */
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUstream stream; /* the caller's (device mode) or NULL: the default stream */
    CUfunction fn[M2G_NUM_ALL_KERNELS]; /* the portable kernels, then tc_list.h */
    m2cu_tc_cfg tc;                     /* what MAMBA2C_CUDA_TC allows (ssd_tc.c reads it) */
    int ncache;
    cu_buf cache[CU_CACHE_MAX];
    int stage_next; /* device mode: the pinned staging ring of index-table uploads */
    struct cu_prof *prof; /* MAMBA2C_CUDA_PROFILE, else NULL */
    unsigned grid_max[3]; /* the device's grid limits (MAX_GRID_DIM_X, _Y, _Z) */
    cu_stage stage[CU_STAGE_SLOTS];
} cu_dev;

/* "CUDA_ERROR_X (text)": the driver's own name and words for a result code */
static const char *cu_why(CUresult r, char *buf, size_t n) {
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown error";
    if (cu.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text || !strcmp(text, name)) text = "";
    snprintf(buf, n, "%s, error %d%s%s", name, (int)r, *text ? ": " : "", text);
    return buf;
}
static mamba2_status_t cu_fail(CUresult r, const char *what) {
    char why[192];
    return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: %s failed (%s)", what,
                    cu_why(r, why, sizeof why));
}
static void push(cu_dev *c) { cu.cuCtxPushCurrent_v2(c->context); }
static void pop(void) {
    CUcontext o;
    cu.cuCtxPopCurrent_v2(&o);
}

static mamba2_status_t raw_alloc(m2g_dev *d, size_t bytes, m2g_mem *mem) {
    CUdeviceptr p = 0;
    push((cu_dev *)d);
    CUresult r = cu.cuMemAlloc_v2(&p, bytes);
    pop();
    if (r != CUDA_SUCCESS) {
        char why[192];
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "CUDA: cannot allocate %zu bytes (%s)",
                        bytes, cu_why(r, why, sizeof why));
    }
    *mem = (m2g_mem)p;
    return MAMBA2_STATUS_OK;
}
static void raw_release(m2g_dev *d, m2g_mem mem) {
    if (!mem) return;
    push((cu_dev *)d);
    cu.cuMemFree_v2((CUdeviceptr)mem);
    pop();
}
/* The smallest free cached buffer of bytes..2*bytes, else a new one (a free buffer is
 * evicted when the cache is full: after the stream has drained, as it may still be read by
 * queued work). */
static mamba2_status_t d_alloc(m2g_dev *d, size_t bytes, m2g_mem *mem) {
    cu_dev *c = (cu_dev *)d;
    int best = -1;
    for (int i = 0; i < c->ncache; i++) {
        const cu_buf *b = &c->cache[i];
        if (!b->in_use && b->bytes >= bytes && b->bytes / 2 <= bytes &&
            (best < 0 || b->bytes < c->cache[best].bytes))
            best = i;
    }
    if (best >= 0) {
        c->cache[best].in_use = 1;
        *mem = (m2g_mem)c->cache[best].p;
        return MAMBA2_STATUS_OK;
    }
    if (c->ncache == CU_CACHE_MAX) {
        int victim = -1;
        for (int i = 0; i < c->ncache && victim < 0; i++)
            if (!c->cache[i].in_use) victim = i;
        if (victim < 0)
            return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: more than %d buffers in use",
                            CU_CACHE_MAX);
        push(c);
        cu.cuStreamSynchronize(c->stream);
        cu.cuMemFree_v2(c->cache[victim].p);
        pop();
        c->cache[victim] = c->cache[--c->ncache];
    }
    if (raw_alloc(d, bytes, mem) != MAMBA2_STATUS_OK) {
        /* out of memory: free the cached buffers no call uses (after the stream drains) and
         * try once more */
        push(c);
        cu.cuStreamSynchronize(c->stream);
        for (int i = c->ncache - 1; i >= 0; i--)
            if (!c->cache[i].in_use) {
                cu.cuMemFree_v2(c->cache[i].p);
                if (d->arena == (m2g_mem)c->cache[i].p) d->arena = 0, d->arena_bytes = 0;
                c->cache[i] = c->cache[--c->ncache];
            }
        pop();
        M2_TRY(raw_alloc(d, bytes, mem));
    }
    c->cache[c->ncache++] = (cu_buf){(CUdeviceptr)*mem, bytes, 1};
    return MAMBA2_STATUS_OK;
}
static void d_release(m2g_dev *d, m2g_mem mem) {
    cu_dev *c = (cu_dev *)d;
    if (!mem) return;
    for (int i = 0; i < c->ncache; i++)
        if (c->cache[i].p == (CUdeviceptr)mem) {
            c->cache[i].in_use = 0;
            return;
        }
    raw_release(d, mem);
}
/* Device mode: src goes through the next slot of the pinned ring and the copy is queued on
 * the stream; src may go at once. The slot's previous copy must have left it: a wait only
 * when CU_STAGE_SLOTS uploads are still queued ahead of the device. A slot grows (a pinned
 * allocation) only when an upload is larger than any before it in that slot. */
static CUresult stage_write(cu_dev *c, CUdeviceptr dst, const void *src, size_t n) {
    cu_stage *s = &c->stage[c->stage_next];
    c->stage_next = (c->stage_next + 1) % CU_STAGE_SLOTS;
    CUresult r = CUDA_SUCCESS;
    if (s->pending && (r = cu.cuEventSynchronize(s->ev)) != CUDA_SUCCESS) return r;
    s->pending = 0;
    if (!s->ev && (r = cu.cuEventCreate(&s->ev, 0x2 /* CU_EVENT_DISABLE_TIMING */)) != CUDA_SUCCESS) {
        s->ev = NULL;
        return r;
    }
    if (s->bytes < n) {
        size_t want = 4096;
        while (want < n && want <= ((size_t)-1) / 2) want *= 2;
        if (want < n) want = n;
        if (s->host) cu.cuMemFreeHost(s->host);
        s->host = NULL;
        s->bytes = 0;
        if ((r = cu.cuMemHostAlloc(&s->host, want, 0)) != CUDA_SUCCESS) {
            s->host = NULL;
            return r;
        }
        s->bytes = want;
    }
    memcpy(s->host, src, n);
    if ((r = cu.cuMemcpyHtoDAsync_v2(dst, s->host, n, c->stream)) != CUDA_SUCCESS) return r;
    if ((r = cu.cuEventRecord(s->ev, c->stream)) != CUDA_SUCCESS) return r;
    s->pending = 1;
    return CUDA_SUCCESS;
}
static mamba2_status_t d_write(m2g_dev *d, m2g_mem dst, size_t off, const void *src, size_t n) {
    cu_dev *c = (cu_dev *)d;
    push(c);
    CUresult r = d->device_memory ? stage_write(c, (CUdeviceptr)dst + off, src, n)
                                  : cu.cuMemcpyHtoD_v2((CUdeviceptr)dst + off, src, n);
    pop();
    return r == CUDA_SUCCESS ? MAMBA2_STATUS_OK : cu_fail(r, "cuMemcpyHtoD");
}
static mamba2_status_t d_read(m2g_dev *d, void *dst, m2g_mem src, size_t off, size_t n) {
    cu_dev *c = (cu_dev *)d;
    push(c);
    CUresult r = CUDA_SUCCESS;
    if (d->device_memory) { /* not used by the ops in device mode; kept correct anyway */
        r = cu.cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)src + off, n, c->stream);
        if (r == CUDA_SUCCESS) r = cu.cuStreamSynchronize(c->stream);
    } else {
        r = cu.cuMemcpyDtoH_v2(dst, (CUdeviceptr)src + off, n);
    }
    pop();
    return r == CUDA_SUCCESS ? MAMBA2_STATUS_OK : cu_fail(r, "cuMemcpyDtoH");
}
static const char *kname(int id) {
    return m2g_kernel_names[id];
}
/* MAMBA2C_CUDA_PROFILE: each launch between two events of its own, on the context's stream;
 * the pairs are read back in batches of CU_PROF_RECS (the only wait this adds) and when the
 * context is destroyed. Called with the context current. */
#define CU_PROF_RECS 1024
#define CU_NKERNELS M2G_NUM_ALL_KERNELS
typedef struct cu_prof {
    char path[512];
    int nrec, failed; /* failed: an event call failed, so the report is incomplete */
    int id[CU_PROF_RECS];
    CUevent a[CU_PROF_RECS], b[CU_PROF_RECS];
    long long launches[CU_NKERNELS];
    double total[CU_NKERNELS], min[CU_NKERNELS], max[CU_NKERNELS]; /* ms */
} cu_prof;
static void prof_resolve(cu_prof *p) {
    if (!p->nrec) return;
    if (cu.cuEventSynchronize(p->b[p->nrec - 1]) != CUDA_SUCCESS) p->failed = 1;
    for (int i = 0; i < p->nrec; i++) {
        float ms = 0;
        const int k = p->id[i];
        if (cu.cuEventElapsedTime(&ms, p->a[i], p->b[i]) != CUDA_SUCCESS) {
            p->failed = 1;
            continue;
        }
        if (!p->launches[k] || ms < p->min[k]) p->min[k] = ms;
        if (ms > p->max[k]) p->max[k] = ms;
        p->total[k] += ms;
        p->launches[k]++;
    }
    p->nrec = 0;
}
static int prof_begin(cu_dev *c) { /* the record's index, or -1 */
    cu_prof *p = c->prof;
    if (p->nrec == CU_PROF_RECS) prof_resolve(p);
    const int i = p->nrec;
    if ((!p->a[i] && cu.cuEventCreate(&p->a[i], 0) != CUDA_SUCCESS) ||
        (!p->b[i] && cu.cuEventCreate(&p->b[i], 0) != CUDA_SUCCESS) ||
        cu.cuEventRecord(p->a[i], c->stream) != CUDA_SUCCESS) {
        p->failed = 1;
        return -1;
    }
    return i;
}
static void prof_end(cu_dev *c, int i, int id) {
    cu_prof *p = c->prof;
    if (i < 0) return;
    if (cu.cuEventRecord(p->b[i], c->stream) != CUDA_SUCCESS) {
        p->failed = 1;
        return;
    }
    p->id[i] = id;
    p->nrec = i + 1;
}
/* appends the report to the file (kernels by total time, largest first) and frees it all */
static void prof_report(cu_dev *c) {
    cu_prof *p = c->prof;
    prof_resolve(p);
    FILE *f = fopen(p->path, "a");
    if (f) {
        fprintf(f, "# mamba2c CUDA profile: %s, %s mode%s\n", c->base.name,
                c->base.device_memory ? "device" : "host",
                p->failed ? " (an event call failed: incomplete)" : "");
        fprintf(f, "kernel\tlaunches\ttotal_ms\tmean_us\tmin_us\tmax_us\n");
        unsigned char done[CU_NKERNELS] = {0};
        for (;;) {
            int best = -1;
            for (int k = 0; k < CU_NKERNELS; k++)
                if (!done[k] && p->launches[k] && (best < 0 || p->total[k] > p->total[best]))
                    best = k;
            if (best < 0) break;
            done[best] = 1;
            fprintf(f, "%s\t%lld\t%.4f\t%.2f\t%.2f\t%.2f\n", kname(best), p->launches[best],
                    p->total[best], 1e3 * p->total[best] / (double)p->launches[best],
                    1e3 * p->min[best], 1e3 * p->max[best]);
        }
        fclose(f);
    }
    for (int i = 0; i < CU_PROF_RECS; i++) {
        if (p->a[i]) cu.cuEventDestroy_v2(p->a[i]);
        if (p->b[i]) cu.cuEventDestroy_v2(p->b[i]);
    }
    free(p);
    c->prof = NULL;
}

m2cu_tc_cfg m2cu_tc_config(const m2g_dev *d) { return ((const cu_dev *)d)->tc; }

/* The z extents of these kernels count chunks, sequences or positions, and they read their
 * ids through common.h's fold (M2K_GROUP_X / M2K_GROUP_Z): every portable kernel (CUDA has no
 * plain z id) and the tensor-core on-chip scans. The other tensor-core kernels put the chunks
 * in x; their z (tiles of P and N) is never folded. */
static int foldable(int id) {
    return id < M2G_NUM_KERNELS || id == M2G_K_m2_ssd_scan_seq_tf32_tc128 ||
           id == M2G_K_m2_ssd_scan_seq_bf16_tc128;
}
/* The smallest k dividing gz with gz / k <= zmax (at worst gz; divisors in pairs up to sqrt(gz)). */
static size_t fold_factor(size_t gz, size_t zmax) {
    const size_t k0 = (gz + zmax - 1) / zmax;
    size_t best = gz; /* gz / gz = 1 always fits */
    for (size_t q = 1; q <= gz / q; q++)
        if (gz % q == 0) {
            if (q >= k0 && q < best) best = q;
            if (gz / q >= k0 && gz / q < best) best = gz / q;
        }
    return best;
}

static mamba2_status_t d_launch(m2g_dev *d, int id, const size_t groups[3], const size_t local[3],
                                size_t smem, int nargs, const m2g_arg *args) {
    cu_dev *c = (cu_dev *)d;
    if (id < 0 || id >= M2G_NUM_ALL_KERNELS || nargs > M2G_MAX_ARGS)
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: bad launch of kernel %d", id);
    if (groups[0] == 0 || groups[1] == 0 || groups[2] == 0) return MAMBA2_STATUS_OK;
    /* z past the device's limit: k z-slices per row of x (common.h, "Grid folding") */
    size_t grid[3] = {groups[0], groups[1], groups[2]};
    if (grid[2] > c->grid_max[2] && foldable(id)) {
        const size_t k = fold_factor(grid[2], c->grid_max[2]);
        if (grid[0] <= c->grid_max[0] / k) grid[0] *= k, grid[2] /= k;
    }
    if (grid[0] > c->grid_max[0] || grid[1] > c->grid_max[1] || grid[2] > c->grid_max[2])
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "CUDA: %s needs a grid of %zu x %zu x %zu blocks; %s allows %u x %u x "
                        "%u%s",
                        kname(id), groups[0], groups[1], groups[2], c->base.name,
                        c->grid_max[0], c->grid_max[1], c->grid_max[2],
                        foldable(id) ? " (z folded into x where that fits)" : "");
    m2g_trace_launch(kname(id), groups, local, smem, nargs, args);
    void *params[M2G_MAX_ARGS];
    for (int i = 0; i < nargs; i++) params[i] = (void *)&args[i].v; /* union: value at offset 0 */
    push(c);
    const int rec = c->prof ? prof_begin(c) : -1;
    CUresult r = cu.cuLaunchKernel(c->fn[id], (unsigned)grid[0], (unsigned)grid[1],
                                   (unsigned)grid[2], (unsigned)local[0], (unsigned)local[1],
                                   (unsigned)local[2], (unsigned)smem, c->stream, params, NULL);
    if (c->prof && r == CUDA_SUCCESS) prof_end(c, rec, id);
    pop();
    if (r != CUDA_SUCCESS) {
        char why[192];
        return m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: launch of %s failed (%s)",
                        kname(id), cu_why(r, why, sizeof why));
    }
    return MAMBA2_STATUS_OK;
}
static mamba2_status_t d_finish(m2g_dev *d) {
    cu_dev *c = (cu_dev *)d;
    push(c);
    CUresult r = d->device_memory ? cu.cuStreamSynchronize(c->stream) : cu.cuCtxSynchronize();
    pop();
    return r == CUDA_SUCCESS ? MAMBA2_STATUS_OK : cu_fail(r, "synchronize");
}
static void d_destroy(m2g_dev *d) {
    cu_dev *c = (cu_dev *)d;
    if (!c) return;
    if (c->context) {
        d_finish(d);
        if (c->prof) {
            push(c);
            prof_report(c);
            pop();
        }
        if (d->dummy) raw_release(d, d->dummy);
        if (d->arena) d_release(d, d->arena);
        for (int i = 0; i < c->ncache; i++) raw_release(d, (m2g_mem)c->cache[i].p);
        c->ncache = 0;
        push(c);
        for (int i = 0; i < CU_STAGE_SLOTS; i++) {
            if (c->stage[i].host) cu.cuMemFreeHost(c->stage[i].host);
            if (c->stage[i].ev) cu.cuEventDestroy_v2(c->stage[i].ev);
        }
        pop();
        if (c->module) {
            push(c);
            cu.cuModuleUnload(c->module);
            pop();
        }
        cu.cuDevicePrimaryCtxRelease_v2(c->device);
    }
    free(c->prof); /* only where the context never came up */
    free(c);
}

/* ordinal < 0: MAMBA2C_CUDA_DEVICE or 0, host mode; else device mode on `stream`. */
static mamba2_status_t open_cuda(mamba2_context_t *ctx, int ordinal, void *stream) {
    const int device_mode = ordinal >= 0;
    pthread_once(&load_once, load_api);
    if (load_error[0]) return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE, "%s", load_error);
    CUresult r = cu.cuInit(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
        char why[192] = "no error";
        if (r != CUDA_SUCCESS) cu_why(r, why, sizeof why);
        return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                        "CUDA: no usable device (cuInit/cuDeviceGetCount: %s; %d devices)", why,
                        count);
    }
    if (device_mode && ordinal >= count)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "CUDA: device %d but there are %d devices",
                        ordinal, count);
    if (!device_mode) {
        const char *want = getenv("MAMBA2C_CUDA_DEVICE");
        ordinal = want && *want ? atoi(want) : 0;
        if (ordinal < 0 || ordinal >= count)
            return m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                            "CUDA: MAMBA2C_CUDA_DEVICE=%s but there are %d devices", want, count);
    }
    const char *tc = getenv("MAMBA2C_CUDA_TC"); /* the tensor-core forward: 0, 1 or auto */
    const int tc_mode = !tc || !*tc || !strcmp(tc, "auto") ? 2 : !strcmp(tc, "1") ? 1
                        : !strcmp(tc, "0")                 ? 0
                                                           : -1;
    if (tc_mode < 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "CUDA: MAMBA2C_CUDA_TC=%.40s; use 0 (exact float32), 1 (tensor cores) "
                        "or auto (the default)",
                        tc);
    cu_dev *c = calloc(1, sizeof *c);
    if (!c) return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate a CUDA context");
    c->base.api = "CUDA";
    c->base.device_memory = device_mode;
    c->base.flat_addresses = device_mode; /* data pointers are the device addresses */
    c->stream = (CUstream)stream;
    c->base.stream = stream; /* what the caller's allocator is given */
    c->base.local_mem = 48 * 1024; /* static shared memory per block on sm_80 / sm_90 */
    c->base.alloc = d_alloc;
    c->base.release = d_release;
    c->base.write = d_write;
    c->base.read = d_read;
    c->base.launch = d_launch;
    c->base.finish = d_finish;
    c->base.destroy = d_destroy;
    c->tc.forward = tc_mode != 0;
    c->tc.backward = tc_mode == 1; /* auto: not until measured */
    mamba2_status_t st = MAMBA2_STATUS_OK;
    if ((r = cu.cuDeviceGet(&c->device, ordinal)) != CUDA_SUCCESS) st = cu_fail(r, "cuDeviceGet");
    if (!st && (r = cu.cuDevicePrimaryCtxRetain(&c->context, c->device)) != CUDA_SUCCESS) {
        c->context = NULL;
        st = cu_fail(r, "cuDevicePrimaryCtxRetain");
    }
    if (!st) {
        cu.cuDeviceGetName(c->base.name, (int)sizeof c->base.name - 1, c->device);
        push(c);
        r = cu.cuModuleLoadData(&c->module, m2g_cuda_fatbin);
        if (r != CUDA_SUCCESS) {
            char why[192];
            c->module = NULL;
            st = m2_error(MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                          "CUDA: the kernels do not load on %s (%s; built for sm_80, sm_90 and "
                          "compute_90 PTX: a driver older than the toolkit that built them "
                          "cannot JIT that PTX)",
                          c->base.name, cu_why(r, why, sizeof why));
        }
        for (int i = 0; !st && i < M2G_NUM_ALL_KERNELS; i++)
            if ((r = cu.cuModuleGetFunction(&c->fn[i], c->module, kname(i))) != CUDA_SUCCESS) {
                char why[192];
                st = m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: kernel %s not found (%s)",
                              kname(i), cu_why(r, why, sizeof why));
            }
        /* the tensor-core on-chip scans take a dynamic shared block above the default 48 KB:
         * without it (a device with less), the tc forward keeps its two-kernel form */
        if (!st && c->tc.forward) {
            const int ids[2] = {M2G_K_m2_ssd_scan_seq_tf32_tc128,
                                M2G_K_m2_ssd_scan_seq_bf16_tc128};
            m2tc_seq_layout lay[2];
            m2tc_seq_layout_of(0, M2TC_SEQ_NMAX, &lay[0]);
            m2tc_seq_layout_of(1, M2TC_SEQ_NMAX, &lay[1]);
            const int smem = lay[0].bytes > lay[1].bytes ? lay[0].bytes : lay[1].bytes;
            int ok = 1;
            for (int k = 0; k < 2; k++)
                ok &= cu.cuFuncSetAttribute(c->fn[ids[k]], 8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */,
                                            smem) == CUDA_SUCCESS;
            c->tc.seq_nmax = ok ? M2TC_SEQ_NMAX : 0;
            /* auto: the on-chip scan with two blocks per multiprocessor or more; without the
             * scan or the count, no tensor cores */
            int sms = 0;
            if (tc_mode == 2 &&
                (!ok || cu.cuDeviceGetAttribute(&sms, 16 /* MULTIPROCESSOR_COUNT */,
                                                c->device) != CUDA_SUCCESS || sms <= 0))
                c->tc.forward = 0;
            else if (tc_mode == 2)
                c->tc.min_blocks = 2 * (int64_t)sms;
        }
        pop();
    }
    /* the grid limits the launch folds to (MAX_GRID_DIM_X, _Y, _Z: attributes 5, 6, 7) */
    for (int k = 0; !st && k < 3; k++) {
        int v = 0;
        if ((r = cu.cuDeviceGetAttribute(&v, 5 + k, c->device)) != CUDA_SUCCESS)
            st = cu_fail(r, "cuDeviceGetAttribute (MAX_GRID_DIM)");
        else if (v <= 0)
            st = m2_error(MAMBA2_STATUS_INTERNAL_ERROR, "CUDA: grid limit %d of %s is %d", k,
                          c->base.name, v);
        else
            c->grid_max[k] = (unsigned)v;
    }
    const char *prof = getenv("MAMBA2C_CUDA_PROFILE");
    if (!st && prof && *prof) {
        if (strlen(prof) >= sizeof c->prof->path)
            st = m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                          "CUDA: MAMBA2C_CUDA_PROFILE is longer than %zu characters",
                          sizeof c->prof->path - 1);
        else if (!(c->prof = calloc(1, sizeof *c->prof)))
            st = m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate the CUDA profile");
        else
            memcpy(c->prof->path, prof, strlen(prof) + 1);
    }
    if (!st) st = raw_alloc(&c->base, 64, &c->base.dummy);
    if (st) {
        d_destroy(&c->base);
        return st;
    }
    ctx->gpu = &c->base;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_cuda_open(mamba2_context_t *ctx) { return open_cuda(ctx, -1, NULL); }

mamba2_status_t m2_cuda_open_device(mamba2_context_t *ctx, int32_t device, void *stream) {
    if (device < 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "CUDA: device is %d; must be >= 0",
                        (int)device);
    return open_cuda(ctx, (int)device, stream);
}
