/*
 * internal.h — what the core (argument checks, dispatch, thread pool) hands to a backend.
 *
 * The public entry points in src/core/ validate every argument, then describe the problem
 * with an m2_ssd_problem: sizes, and for every tensor a data pointer plus element strides
 * padded to 4 dims in PyTorch order. A backend (src/ref/, src/cpu/, src/cuda/) implements
 * the function table m2_backend_ops and may assume everything here has been checked:
 * shapes agree, the last dimension is contiguous, outputs do not overlap inputs, dtypes are
 * ones the backend declared it supports.
 */
#ifndef MAMBA2C_INTERNAL_H
#define MAMBA2C_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>

#include "core/ksets.h"
#include "mamba2c.h"

/* A validated tensor: data pointer and element strides (outermost first, padded with 0).
 * p == NULL means "absent". The last used dimension always has stride 1 (or size 1), except
 * for conv1d_step's conv_cache (any strides, core/conv1d.h). */
typedef struct m2_view {
    void *p;
    int64_t s[4];
} m2_view;

/* The SSD problem (SPEC §1–2), after validation. */
typedef struct m2_ssd_problem {
    int64_t B, L, H, P, N, G, Q; /* Q = requested chunk size (>= 1)                         */
    int64_t nseq;                /* independent sequences: B, or cu_seqlens length - 1      */
    mamba2_dtype_t act_dtype;    /* x, dt, Bm, Cm, z, out, dout, dx, ddt, dBm, dCm, dz      */
    mamba2_dtype_t par_dtype;    /* A, D, dt_bias, states, and their gradients              */

    /* cu_seqlens (NULL when absent; then sequence s is batch row s, tokens [0, L)). */
    const void *cu_seqlens;
    mamba2_dtype_t cu_dtype; /* I32 or I64 */

    int dt_softplus;
    double dt_lo, dt_hi;
    int D_per_channel; /* D is [H,P] (1) or [H] (0); meaningless when D absent */

    /* inputs                         shape                strides used             */
    m2_view x;      /* [B,L,H,P]                            s[0..2], s[3] == 1        */
    m2_view dt;     /* [B,L,H]                              s[0..1], s[2] == 1        */
    m2_view A;      /* [H]                                  s[0] == 1                 */
    m2_view Bm;     /* [B,L,G,N]                            s[0..2]                   */
    m2_view Cm;     /* [B,L,G,N]                            s[0..2]                   */
    m2_view D;      /* [H] (s[0]==1) or [H,P] (s[0], s[1]==1), optional                */
    m2_view z;      /* [B,L,H,P], optional                                            */
    m2_view dt_bias;/* [H], optional                                                  */
    m2_view init;   /* [S,H,P,N] initial state, optional (S = nseq)                   */

    /* forward outputs */
    m2_view out;    /* [B,L,H,P]                                                      */
    m2_view out_x;  /* [B,L,H,P], optional: y + D x before the gate (forward: output;
                     * backward: input)                                               */
    m2_view final;  /* [S,H,P,N], optional                                            */

    /* states after chosen tokens (mamba2_ssd_forward_states); npos == 0 when absent */
    const void *positions;  /* [npos] flat token indices b*L + t, strictly increasing */
    mamba2_dtype_t pos_dtype;
    int64_t npos;
    m2_view pos_states;     /* [npos,H,P,N], like a state tensor                      */

    /* backward inputs */
    m2_view dout;   /* [B,L,H,P]                                                      */
    m2_view dfinal; /* [S,H,P,N], optional (zero when absent)                         */

    /* backward outputs, each optional (p == NULL: not wanted), all overwritten */
    m2_view dx, ddt, dA, dBm, dCm, dD, dz, ddt_bias, dinit;
} m2_ssd_problem;

/* Sequence s covers tokens [*t0, *t1) of batch row *b. */
static inline void m2_ssd_seq(const m2_ssd_problem *pr, int64_t s, int64_t *b, int64_t *t0,
                              int64_t *t1) {
    if (!pr->cu_seqlens) {
        *b = s;
        *t0 = 0;
        *t1 = pr->L;
    } else if (pr->cu_dtype == MAMBA2_DTYPE_I32) {
        const int32_t *cu = (const int32_t *)pr->cu_seqlens;
        *b = 0;
        *t0 = cu[s];
        *t1 = cu[s + 1];
    } else {
        const int64_t *cu = (const int64_t *)pr->cu_seqlens;
        *b = 0;
        *t0 = cu[s];
        *t1 = cu[s + 1];
    }
}

/* Problem structs of the other op families live in their own private headers in src/core/
 * (listed in core/ops.def) and are only forward-declared here. */
#define M2_PROBLEM(type, header) typedef struct type type;
#include "core/ops.def"

/* Flat token index of state position i. */
static inline int64_t m2_ssd_pos(const m2_ssd_problem *pr, int64_t i) {
    return pr->pos_dtype == MAMBA2_DTYPE_I32 ? ((const int32_t *)pr->positions)[i]
                                             : ((const int64_t *)pr->positions)[i];
}
/* Index of the first state position >= flat token index f (npos if none). */
static inline int64_t m2_ssd_pos_lower_bound(const m2_ssd_problem *pr, int64_t f) {
    int64_t lo = 0, hi = pr->npos;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (m2_ssd_pos(pr, mid) < f) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* ---- checked size arithmetic (every planner and workspace query) ---------------------- */

/* *r = a * b and *r = a + b on size_t; return 0 (and leave *r alone) when the result would
 * not fit. Planners chain them and report MAMBA2_STATUS_OUT_OF_MEMORY on overflow, so a
 * workspace size is either exact or refused, never wrapped. */
static inline int m2_size_mul(size_t a, size_t b, size_t *r) {
    if (b != 0 && a > SIZE_MAX / b) return 0;
    *r = a * b;
    return 1;
}
static inline int m2_size_add(size_t a, size_t b, size_t *r) {
    if (a > SIZE_MAX - b) return 0;
    *r = a + b;
    return 1;
}
/* *r = f[0] * ... * f[n-1] for non-negative int64 factors; 0 on overflow or a negative one. */
static inline int m2_size_prod(size_t *r, int n, const int64_t *f) {
    size_t acc = 1;
    for (int i = 0; i < n; i++) {
        if (f[i] < 0 || !m2_size_mul(acc, (size_t)f[i], &acc)) return 0;
    }
    *r = acc;
    return 1;
}

/* ---- thread pool (src/core/threadpool.c) ------------------------------------------ */

typedef struct m2_pool m2_pool;
/* fn(arg, task, thread): runs every task in [0, ntasks) once; `thread` in [0, nthreads)
 * identifies the worker (for per-thread scratch). Which thread runs which task may vary
 * between calls: a task must write only its own outputs. */
typedef void (*m2_task_fn)(void *arg, int64_t task, int thread);
mamba2_status_t m2_pool_create(m2_pool **pool, int nthreads);
void m2_pool_destroy(m2_pool *pool);
int m2_pool_num_threads(const m2_pool *pool);
void m2_pool_run(m2_pool *pool, int64_t ntasks, m2_task_fn fn, void *arg);

/* ---- CPU feature detection (src/core/cpuid.c) ------------------------------------- */

/* Kernel sets. x86-64 levels are ordered, a level may use every set below it:
 * SCALAR < AVX2 < AVX512 (AVX-512 F/VL/BW/DQ on top of AVX2+FMA+F16C: its own kernels for
 * conv1d and the fused SSD; every other op runs its AVX2 kernels there). M2_ISA_NEON
 * (AArch64 ASIMD) is the one vector level of AArch64 and above SCALAR only: compare levels
 * within one architecture (m2_isa_usable), never NEON against the x86 ones. */
typedef enum m2_isa { M2_ISA_SCALAR = 0, M2_ISA_AVX2 = 1, M2_ISA_AVX512 = 2, M2_ISA_NEON = 3 } m2_isa;
/* The best level this CPU and OS support, capped by MAMBA2C_ISA=scalar|avx2 in the
 * environment (a stand-in for a CPU without the higher sets; also caps force_isa). */
m2_isa m2_detect_isa(void);
/* 1 when kernel set `want` can run where m2_detect_isa() found `have`: SCALAR always, an x86
 * level up to an x86 `have`, NEON where `have` is NEON. */
int m2_isa_usable(m2_isa want, m2_isa have);
/* 1 on AMD cores (cpuid vendor). The CPU backend tunes two choices by it, each chosen by
 * measurement (docs/cpu_ssd.md §6, §10, docs/code_notes.md): its far
 * prefetches go out as prefetchnta rather than prefetcht1 (there the T0/T1/T2 hints all fill
 * L1), and the AVX-512 SSD kernels run for narrower heads and states (full-width 512-bit
 * units). */
int m2_detect_amd(void);

/* ---- context and backends ---------------------------------------------------------- */

/* The parameters of a backend entry of each kind (core/ops.def). */
#define M2_OP_ARGS_WS(problem) const mamba2_context_t *ctx, const problem *pr, size_t *bytes
#define M2_OP_ARGS_WSRUN(problem) mamba2_context_t *ctx, const problem *pr, void *ws
#define M2_OP_ARGS_RUN(problem) mamba2_context_t *ctx, const problem *pr

typedef struct m2_backend_ops {
    const char *name;
    /* which activation dtypes this backend accepts (bit (1 << dtype)), for every op */
    uint32_t act_dtypes;
    /* further activation dtypes the fused SSD op (mamba2_ssd_forward/_states/_backward)
     * accepts: BF16/F16 storage, with A, D, dt_bias and the states F32. 0 (the default of
     * a designated initializer) = none. Kept apart from act_dtypes so that enabling half
     * storage for the SSD op does not let other ops' kernels see half data. */
    uint32_t ssd_extra_act_dtypes;
    /* further activation dtypes the decode steps (mamba2_conv1d_step, mamba2_ssd_step)
     * accept: BF16/F16 storage of the activations (and of the conv cache), float32
     * arithmetic. 0 = none (those calls return MAMBA2_STATUS_UNSUPPORTED for half
     * activations, naming the backend). */
    uint32_t step_extra_act_dtypes;
    /* one entry per operator of core/ops.def, its signature given by its kind */
#define M2_OP(name, problem, kind) mamba2_status_t (*name)(M2_OP_ARGS_##kind(problem));
#include "core/ops.def"
} m2_backend_ops;

struct mamba2_context {
    mamba2_backend_t backend;
    const m2_backend_ops *ops;
    int32_t num_threads;
    m2_pool *pool;
    m2_isa isa; /* CPU backend kernel set */
    int amd;    /* m2_detect_amd() */
    void *gpu;  /* GPU backends: the device (struct m2g_dev, src/gpu/gpu.h); else NULL */
    atomic_int in_use; /* 1 while an entry point runs on this context (m2_ctx_enter) */
    int device_indices; /* CUDA device mode: index tensors are device arrays, values unchecked
                         * (mamba2_context_set_device_indices) */
};

/* Every entry point that takes a context brackets its work with these: m2_ctx_enter fails
 * with INVALID_ARGUMENT for a NULL ctx and with MAMBA2_STATUS_BUSY (at once, never waiting)
 * while another call holds the context; on success the caller must m2_ctx_leave. */
mamba2_status_t m2_ctx_enter(mamba2_context_t *ctx);
void m2_ctx_leave(mamba2_context_t *ctx);

extern const m2_backend_ops m2_ref_backend;  /* src/ref/ */
extern const m2_backend_ops m2_cpu_backend;  /* src/cpu/ */
/* GPU backends (src/gpu/ op code over src/opencl/, src/cuda/ device layers): attach a device
 * to ctx->gpu at creation, release it at destruction. */
extern const m2_backend_ops m2_opencl_backend;
mamba2_status_t m2_opencl_open(mamba2_context_t *ctx);
mamba2_status_t m2_opencl_open_device(mamba2_context_t *ctx, void *context, void *device,
                                      void *queue);
extern const m2_backend_ops m2_cuda_backend;
mamba2_status_t m2_cuda_open(mamba2_context_t *ctx);
void m2_gpu_close(mamba2_context_t *ctx);

/* ---- errors (src/core/error.c) ----------------------------------------------------- */

/* Set this thread's last-error message (printf format) and return st. */
mamba2_status_t m2_error(mamba2_status_t st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void m2_clear_error(void);

/* ---- the ABI guard (src/core/abi.c) ------------------------------------------------- */

/* INVALID_ARGUMENT naming `arg` (e.g. "opts", "grads") and the struct unless struct_size
 * `got` is 0 (the v1 size) or within [the struct's v1 size, its sizeof]. */
mamba2_status_t m2_check_struct_size(mamba2_struct_id_t id, const char *arg, uint32_t got);

/* ---- argument checks shared by the entry points (src/core/validate.c) ---------------- */

#define MAX_DIM ((int64_t)1 << 40) /* largest size or stride accepted in any dimension */
/* SSD ops (fused, staged, decode step): at most M2_MAX_HEADS heads and M2_MAX_STATE
 * elements H*P*N in one sequence's state, so that no planner sees sizes whose products or
 * loops are out of proportion (INVALID_ARGUMENT, checked in O(1) before any tensor). */
#define M2_MAX_HEADS ((int64_t)1 << 20)
#define M2_MAX_STATE ((int64_t)1 << 36)
/* INVALID_ARGUMENT naming `who` unless H <= M2_MAX_HEADS and H*P*N <= M2_MAX_STATE. */
mamba2_status_t m2_check_ssd_sizes(const char *who, int64_t H, int64_t P, int64_t N);

const char *m2_dtype_name(mamba2_dtype_t d);
/* "[2,64,3,16]" */
void m2_fmt_dims(char *buf, size_t n, int rank, const int64_t *dims);
/* Check one tensor: rank, shape == want (layout names the dims, e.g. "[B,L,G,N]"), dtype
 * (dtype_why says where the expectation comes from), non-negative bounded strides, last dim
 * contiguous, non-NULL data when non-empty, and for outputs no self-overlap. On success
 * *numel is its element count. On failure the message names the tensor. */
mamba2_status_t m2_check_tensor(const char *name, const mamba2_tensor_t *t, int rank,
                                const int64_t *want, const char *layout, mamba2_dtype_t dtype,
                                const char *dtype_why, int is_output, int64_t *numel);
/* m2_check_tensor without the contiguity rule for the last dimension (any stride there): for
 * the one tensor the kernels read through all its strides (conv1d_step's conv_cache). */
mamba2_status_t m2_check_tensor_strided(const char *name, const mamba2_tensor_t *t, int rank,
                                        const int64_t *want, const char *layout,
                                        mamba2_dtype_t dtype, const char *dtype_why,
                                        int is_output, int64_t *numel);
/* The activation dtype of an op, read off tensor `name` (x, or a stage's leading tensor):
 * INVALID_ARGUMENT unless a floating-point dtype, UNSUPPORTED unless one of `accepted`
 * (bits 1 << dtype), naming the backend, the op (`op`, e.g. "the SSD op") and what it takes. */
mamba2_status_t m2_check_act_dtype(const char *name, mamba2_dtype_t dt, uint32_t accepted,
                                   const char *backend, const char *op);
/* A tensor taking part in the overlap checks of an entry point. */
typedef struct span {
    const char *name;
    const mamba2_tensor_t *t;
    int64_t numel;
} span;
/* No output may share memory with an input or an earlier output (empty tensors never do).
 * inplace_name, if not NULL, names the input updated in place (a decode cache), so the
 * message says "the in-place" instead of "input" for it. */
mamba2_status_t m2_check_no_overlap(const span *ins, int nin, const span *outs, int nout,
                                    const char *inplace_name);
/* Argument checking inside an entry point's validate(): return a failing status at once. */
#define M2_TRY(expr)                                                                       \
    do {                                                                                   \
        mamba2_status_t st_ = (expr);                                                      \
        if (st_ != MAMBA2_STATUS_OK) return st_;                                           \
    } while (0)
/* Check an input (M2_IN) or output (M2_OUT) tensor with m2_check_tensor and record it for
 * m2_check_no_overlap; the caller declares span ins[], outs[], int nin, nout, and int64_t n
 * (then the element count of the tensor just checked). */
#define M2_IN(nm, t, rk, sh, lay, dty, why)                                                \
    do {                                                                                   \
        M2_TRY(m2_check_tensor(nm, t, rk, sh, lay, dty, why, 0, &n));                      \
        ins[nin++] = (span){nm, t, n};                                                     \
    } while (0)
#define M2_OUT(nm, t, rk, sh, lay, dty, why)                                               \
    do {                                                                                   \
        M2_TRY(m2_check_tensor(nm, t, rk, sh, lay, dty, why, 1, &n));                      \
        outs[nout++] = (span){nm, t, n};                                                   \
    } while (0)
/* 0 only when the two tensors provably share no byte (see validate.c). */
int m2_may_overlap(const mamba2_tensor_t *a, const mamba2_tensor_t *b);
/* The m2_view of a tensor (NULL -> absent view). */
m2_view m2_view_of(const mamba2_tensor_t *t);
/* Element i of a rank-1 i32/i64 index tensor. */
int64_t m2_index_at(const mamba2_tensor_t *t, int64_t i);
/* cu_seqlens[nseq+1]: rank 1, i32/i64, contiguous, 0 = c[0] <= ... <= c[nseq] = L, B == 1.
 * values == 0 (a device array: ctx->device_indices): everything but the values. */
mamba2_status_t m2_check_cu_seqlens(const mamba2_tensor_t *cu, int64_t B, int64_t L, int values,
                                    int64_t *nseq);
/* state_indices[B]: i32/i64, each < S (slots of cache_name) or negative (padding), the
 * non-negative ones distinct (values == 0: not the values). */
mamba2_status_t m2_check_state_indices(const mamba2_tensor_t *ix, int64_t B, int64_t S,
                                       int values, const char *cache_name);

/* Workspace: a backend's byte count is padded by M2_WS_ALIGN so that any caller pointer can
 * be aligned (OUT_OF_MEMORY when that does not fit a size_t); workspace == NULL with
 * need > 0 allocates (*owned, free it after the call). */
#define M2_WS_ALIGN 64
static inline mamba2_status_t m2_workspace_padded(size_t backend_bytes, size_t *padded) {
    if (!backend_bytes) {
        *padded = 0;
        return MAMBA2_STATUS_OK;
    }
    if (!m2_size_add(backend_bytes, M2_WS_ALIGN, padded))
        return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "the workspace this call needs exceeds "
                                                     "the address space");
    return MAMBA2_STATUS_OK;
}
mamba2_status_t m2_workspace_acquire(size_t need, void *workspace, size_t workspace_size,
                                     void **aligned, void **owned);

#endif /* MAMBA2C_INTERNAL_H */
