/*
 * gpu.h — the device layer under the GPU backends, and the per-op host logic above it.
 *
 * The op code in src/gpu/ (ssd_ops.c, ...: problem struct -> buffers -> launches) is written
 * once against m2g_dev, a small table of device operations (allocate, copy, launch by kernel
 * id, finish) that each API fills in: src/opencl/opencl.c (OpenCL 1.2 through a dlopen'ed ICD
 * loader) and src/cuda/cuda.c (the CUDA driver API through a dlopen'ed libcuda). Every launch
 * is a typed launcher's (M2G_LAUNCH below), generated from the kernel prototypes and checked
 * against the signature table (docs/gpu.md §2a). Everything above this layer (argument
 * checks, problem structs) is the core's, unchanged.
 *
 * Memory modes. In host mode (mamba2_context_create with MAMBA2_BACKEND_OPENCL/CUDA) tensor
 * data pointers are host pointers: an op copies each input's span in, runs, and copies each
 * output's elements back (the gaps of a strided output are never written). In device mode
 * (mamba2_context_create_opencl, _cuda) tensor data pointers are on the device and nothing
 * is copied: OpenCL's are registered buffers' virtual addresses (m2g_region), CUDA's the
 * device addresses themselves (flat_addresses). Either way a kernel sees a tensor as
 * (buffer, element offset, element strides).
 * Scratch between the stages of one op lives in buffers of the call (host mode) or of the
 * context (device mode, grown to the largest call).
 */
#ifndef MAMBA2C_GPU_H
#define MAMBA2C_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* A device buffer: a cl_mem or a CUdeviceptr, carried as an integer. 0 = none. */
typedef uint64_t m2g_mem;

/* Kernel ids, M2G_K_<name>: the portable kernels in the order of gpu/kernels/list.h (every
 * backend builds them), then the CUDA-only tensor-core kernels of cuda/tc_list.h (the CUDA
 * backend builds them too; their signatures are in the same table). */
enum m2g_kernel_id {
#define M2G_KERNEL(name) M2G_K_##name,
#include "gpu/kernels/list.h"
#undef M2G_KERNEL
    M2G_NUM_KERNELS
};
enum m2g_tc_kernel_id {
    M2G_TC_BEFORE_FIRST = M2G_NUM_KERNELS - 1,
#define M2G_TC_KERNEL(name) M2G_K_##name,
#include "cuda/tc_list.h"
#undef M2G_TC_KERNEL
    M2G_NUM_ALL_KERNELS
};
#define M2G_NUM_TC_KERNELS (M2G_NUM_ALL_KERNELS - M2G_NUM_KERNELS)
extern const char *const m2g_kernel_names[M2G_NUM_ALL_KERNELS];

/* One kernel argument. MEM is a buffer handle (the kernel parameter is a pointer), I64 a
 * long / long long, I32 an int, F32 a float: the kernel's parameter types, in order. */
typedef enum m2g_arg_kind { M2G_ARG_MEM, M2G_ARG_I64, M2G_ARG_I32, M2G_ARG_F32 } m2g_arg_kind;
typedef struct m2g_arg {
    m2g_arg_kind kind;
    union {
        m2g_mem mem;
        int64_t i64;
        int32_t i32;
        float f32;
    } v;
} m2g_arg;
#define M2G_MAX_ARGS 96

/* Device mode with buffer handles (OpenCL): each registered buffer gets a range of a virtual
 * address space, so tensor data pointers are base + byte offset, the core's overlap checks
 * see real offsets, and the op code finds (buffer, element offset) by lookup. */
typedef struct m2g_region {
    uint64_t vbase;
    size_t bytes;
    m2g_mem mem;
} m2g_region;
#define M2G_MAX_REGIONS 256

typedef struct m2g_dev m2g_dev;
struct m2g_dev {
    const char *api;   /* "OpenCL", "CUDA" (for messages) */
    char name[192];    /* device name (for messages)      */
    int device_memory; /* 1: tensor data pointers are device buffer handles */
    int flat_addresses; /* device mode: a data pointer is its buffer (offset 0), no regions */
    size_t local_mem;  /* bytes of local (shared) memory a work-group may use */
    m2g_mem dummy;     /* a small buffer bound to absent optional tensor arguments */
    m2g_mem arena;     /* device mode: the context's scratch buffer */
    size_t arena_bytes;
    /* device mode: the caller's allocator (mamba2_context_set_device_allocator), else NULL:
     * every buffer of a call then comes from it and goes back to it at the call's end, on
     * `stream` (the context's) */
    mamba2_device_alloc_fn user_alloc;
    mamba2_device_free_fn user_free;
    void *user, *stream;
    int device_indices; /* device mode: index tensors are device pointers (no host reads) */
    int nregions;      /* device mode: registered buffers, by vbase */
    uint64_t next_vbase;
    m2g_region regions[M2G_MAX_REGIONS];
    mamba2_status_t (*alloc)(m2g_dev *d, size_t bytes, m2g_mem *mem);
    void (*release)(m2g_dev *d, m2g_mem mem);
    mamba2_status_t (*write)(m2g_dev *d, m2g_mem dst, size_t off, const void *src, size_t bytes);
    mamba2_status_t (*read)(m2g_dev *d, void *dst, m2g_mem src, size_t off, size_t bytes);
    /* launch kernel `id` on groups[0..2] work-groups of local[0..2] work-items with `smem`
     * bytes of dynamic local (shared) memory (OpenCL: 0 only) */
    mamba2_status_t (*launch)(m2g_dev *d, int id, const size_t groups[3], const size_t local[3],
                              size_t smem, int nargs, const m2g_arg *args);
    mamba2_status_t (*finish)(m2g_dev *d); /* wait for everything queued */
    void (*destroy)(m2g_dev *d);            /* release the device objects and d itself */
};

/* The m2g_dev of a GPU context (ctx->gpu). */
static inline m2g_dev *m2g_of(mamba2_context_t *ctx) { return (m2g_dev *)ctx->gpu; }

/* ---- a tensor on the device, and the kernel argument list -------------------------------- */

typedef struct m2g_t {
    m2g_mem mem;
    int64_t off;  /* element offset of element 0 */
    int64_t s[5]; /* element strides, outermost first */
    int present;  /* 0: an absent optional tensor (mem is the dummy buffer) */
    int ty;       /* an activation's storage, the kernels' <p>_ty: 0 float32, 1 bf16, 2 f16 */
} m2g_t;

typedef struct m2g_args {
    int n;
    m2g_arg a[M2G_MAX_ARGS];
} m2g_args;
/* Argument-list builders: used by the generated launchers only (a driver names its
 * arguments through M2G_LAUNCH below; test_kernel_sigs builds lists by kind) */
void m2g_arg_mem(m2g_args *a, m2g_mem m);
void m2g_arg_i64(m2g_args *a, int64_t v);
void m2g_arg_i32(m2g_args *a, int32_t v);
void m2g_arg_f32(m2g_args *a, float v);
/* buffer, offset, then the first nstrides strides of t */
void m2g_arg_t(m2g_args *a, const m2g_t *t, int nstrides);

/* Each kernel's signature, described once: generated from the kernel prototypes at build
 * time (cmake/kernel_sigs.cmake), indexed like m2g_kernel_names. m2g_kernel_sigs: the
 * parameter kinds in order, one letter per parameter ('M' a buffer, 'L' i64, 'I' i32, 'F'
 * float: the letter fixes its size); m2g_kernel_params: the parameter names, comma-separated;
 * m2g_kernel_local: the work-group shape its name states (_16x16, _wi64, _tc128, ...). */
extern const char *const m2g_kernel_sigs[M2G_NUM_ALL_KERNELS];
extern const char *const m2g_kernel_params[M2G_NUM_ALL_KERNELS];
extern const size_t m2g_kernel_local[M2G_NUM_ALL_KERNELS][3];
/* MAMBA2_STATUS_OK when a's count and kinds are kernel id's prototype; else
 * MAMBA2_STATUS_INTERNAL_ERROR naming the kernel and the first mismatch. */
mamba2_status_t m2g_check_args(int id, const m2g_args *a);

/* MAMBA2C_GPU_TRACE: each backend's launch writes the launch it makes (gpu_common.c) */
void m2g_trace_launch(const char *kernel, const size_t groups[3], const size_t local[3],
                      size_t smem, int nargs, const m2g_arg *args);

/* The checked launch under the typed launchers: m2g_check_args, then d->launch with the
 * work-group shape of the kernel's name (m2g_kernel_local). */
mamba2_status_t m2g_launch_id(m2g_dev *d, int id, const size_t groups[3], size_t smem,
                              const m2g_args *a);

/* Typed launches (the launchers of <build>/gpu_launch/<kernel file>.h, generated from the
 * prototypes by cmake/kernel_launchers.cmake): every argument by its parameter name,
 *   M2G_LAUNCH(d, m2_ssd_bwd_E_16x16, M2G_GRID(nt * nt, H, nc), .ct = s->ct, .Q = Q, ...)
 * A tensor parameter (pointer, offset, strides) is one m2g_t field named as the pointer.
 * M2G_LAUNCH_AS launches kernel `id` on the parameters of kernel k (a tensor-core twin with
 * k's parameter list, checked at the launch and by test_kernel_sigs), with `smem` bytes of
 * dynamic shared memory. */
#define M2G_GRID(x, y, z) ((const size_t[3]){(size_t)(x), (size_t)(y), (size_t)(z)})
/* n one-task work-items in 1-D groups of 64 (the _wi64 kernels); no launch when n <= 0 */
#define M2G_GRID64(n) M2G_GRID(m2g_groups((n), 64), 1, 1)
#define M2G_LAUNCH(d, k, grid, ...)                                                            \
    m2l_##k((d), M2G_K_##k, (grid), 0, &(const struct m2l_##k){__VA_ARGS__})
#define M2G_LAUNCH_AS(d, id, k, grid, smem, ...)                                               \
    m2l_##k((d), (id), (grid), (smem), &(const struct m2l_##k){__VA_ARGS__})

/* ---- one call's buffers ------------------------------------------------------------------- */

#define M2G_CALL_MAX 48
typedef struct m2g_out_rec {
    void *host;
    m2g_mem mem;
    int rank;
    int64_t dims[5], s[5];
    size_t esize, span;
} m2g_out_rec;
typedef struct m2g_call {
    m2g_dev *dev;
    int nown, nout;
    m2g_mem own[M2G_CALL_MAX];
    unsigned char own_user[M2G_CALL_MAX]; /* 1: from the caller's allocator */
    m2g_out_rec out[M2G_CALL_MAX];
    size_t arena_used; /* device mode: bytes of the arena handed out so far */
} m2g_call;

void m2g_call_begin(m2g_call *c, m2g_dev *d);
/* An input tensor of `rank` dims (the last contiguous), outer strides from v->s. v->p NULL:
 * an absent optional tensor. */
mamba2_status_t m2g_call_in(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                            size_t esize, m2g_t *t);
/* An output tensor: every element is written by the op's kernels; copied back at the end. */
mamba2_status_t m2g_call_out(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                             size_t esize, m2g_t *t);
/* Activations that the kernels read / write in their storage dtype (m2k_ld / m2k_st of
 * kernels/common.h): the caller's tensor as it is, 2 or 4 bytes per element, t->ty its kind
 * (0 float32, 1 bf16, 2 f16), to be passed as the kernel's <p>_ty. No copy, no conversion. */
mamba2_status_t m2g_call_in_native(m2g_call *c, const m2_view *v, int rank, const int64_t *dims,
                                   mamba2_dtype_t dtype, m2g_t *t);
mamba2_status_t m2g_call_out_native(m2g_call *c, const m2_view *v, int rank,
                                    const int64_t *dims, mamba2_dtype_t dtype, m2g_t *t);
/* Device scratch of `bytes` (any content), and a buffer filled from host memory. */
mamba2_status_t m2g_call_tmp(m2g_call *c, size_t bytes, m2g_mem *mem, int64_t *elem_off,
                             size_t esize);
mamba2_status_t m2g_call_upload(m2g_call *c, const void *src, size_t bytes, m2g_mem *mem);
/* A device buffer of the call (any content; released at m2g_call_end). */
mamba2_status_t m2g_call_buf(m2g_call *c, size_t bytes, m2g_mem *mem);
/* An int32/int64 index tensor p[n] (cu_seqlens, state_positions, state_indices, ...) as an
 * int64 table on the device (the dummy buffer when p is NULL or n <= 0). A host array (host
 * mode, or device mode without device indices; the core has checked its values) is
 * converted and uploaded; a device array (d->device_indices) is converted by a kernel that
 * clamps every value to [lo, hi] (mono: cu_seqlens, made non-decreasing from lo), so no
 * content can send a kernel out of range. */
mamba2_status_t m2g_call_index(m2g_call *c, const void *p, mamba2_dtype_t dt, int64_t n,
                               int mono, int64_t lo, int64_t hi, m2g_mem *mem);
/* Copy the outputs back (st == OK) and release the call's buffers; returns st, or the first
 * failure of the copy. */
mamba2_status_t m2g_call_end(m2g_call *c, mamba2_status_t st);

/* Device mode: register / unregister a buffer of `bytes` (see m2g_region); *vbase receives
 * the address of its byte 0. */
mamba2_status_t m2g_register(m2g_dev *d, m2g_mem mem, size_t bytes, void **vbase);
mamba2_status_t m2g_unregister(m2g_dev *d, m2g_mem mem);

/* ceil(a / b) for a >= 0, b > 0 */
static inline int64_t m2g_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* work-groups of `per` one-task work-items for n tasks: 0 (no launch) when n <= 0 */
static inline int64_t m2g_groups(int64_t n, int64_t per) { return n > 0 ? m2g_cdiv(n, per) : 0; }

/* ---- the op entry points shared by every GPU backend table (src/gpu/ssd_ops.c) --------- */
mamba2_status_t m2g_ssd_forward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                          size_t *bytes);
mamba2_status_t m2g_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);
mamba2_status_t m2g_ssd_backward_workspace(const mamba2_context_t *ctx,
                                           const m2_ssd_problem *pr, size_t *bytes);
mamba2_status_t m2g_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);
mamba2_status_t m2g_ssd_chunk_cumsum(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2g_ssd_bmm_chunk(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2g_ssd_chunk_state(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2g_ssd_state_passing(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2g_ssd_chunk_scan(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
/* conv1d, gated RMSNorm, decode steps (src/gpu/ops_conv1d.c, ops_rmsnorm.c, ops_step.c) */
mamba2_status_t m2g_conv1d_forward(mamba2_context_t *ctx, const m2_conv1d_problem *pr);
mamba2_status_t m2g_conv1d_backward_workspace(const mamba2_context_t *ctx,
                                              const m2_conv1d_problem *pr, size_t *bytes);
mamba2_status_t m2g_conv1d_backward(mamba2_context_t *ctx, const m2_conv1d_problem *pr,
                                    void *ws);
mamba2_status_t m2g_conv1d_step(mamba2_context_t *ctx, const m2_conv1d_problem *pr);
mamba2_status_t m2g_rmsnorm_forward_workspace(const mamba2_context_t *ctx,
                                              const m2_rmsnorm_problem *pr, size_t *bytes);
mamba2_status_t m2g_rmsnorm_forward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                    void *ws);
mamba2_status_t m2g_rmsnorm_backward_workspace(const mamba2_context_t *ctx,
                                               const m2_rmsnorm_problem *pr, size_t *bytes);
mamba2_status_t m2g_rmsnorm_backward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                     void *ws);
mamba2_status_t m2g_ssd_step(mamba2_context_t *ctx, const m2_ssd_step_problem *pr);
/* @@ more GPU op entry points go above this line @@ */

#endif /* MAMBA2C_GPU_H */
