/*
 * mamba2c.h — the whole public C API of mamba2c, the Mamba-2 operator library.
 *
 * Everything the library offers is declared here and in mamba2c_block.h, which this file
 * includes at its end (the whole-block decode step); every other header is private.
 * The math of each operator is specified in SPEC.md (the operator contract); this
 * file says how to call it.
 *
 * Conventions
 *  - Every entry point returns a mamba2_status_t. On failure nothing has been written
 *    to any output, and mamba2_last_error() returns a message naming the offending
 *    argument ("Cm has shape [2,64,3,16]; expected [2,64,G,N] with G=4"). The library
 *    never exits, aborts or prints.
 *  - Tensors are described by mamba2_tensor_t: data pointer, dtype, rank, shape and
 *    *element* strides, in PyTorch order (outermost dimension first), so a torch.Tensor
 *    maps onto one without reordering. The last dimension must be contiguous
 *    (stride 1, or any stride when its size is 1); the other strides are free, so views
 *    into a wider buffer (Mamba-2's in_proj split) work without a copy. Strides must be
 *    non-negative; stride 0 (broadcast) is accepted for inputs only.
 *  - An optional tensor is passed as a NULL pointer.
 *  - Argument order: outputs first, then inputs, then parameters in a struct.
 *  - ABI (MAMBA2C_ABI_VERSION, mamba2_abi_version, mamba2_struct_size): every options and
 *    grads struct starts with `uint32_t struct_size`, the caller's sizeof of the struct.
 *    The *_options_default() functions set it; 0 means the v1 size, so that a zero-
 *    initialised struct (memset, `= {0}`) keeps working. The library accepts 0 or a size
 *    from the struct's v1 size up to its own sizeof, and reads a field only when
 *    struct_size covers it (fields added later then take their defaults); anything else is
 *    MAMBA2_STATUS_INVALID_ARGUMENT naming the struct. Structs are APPEND-ONLY: a field is
 *    added at the end, never inserted, removed or retyped. mamba2_tensor_t has no
 *    struct_size; its layout is fixed for ABI 1. A binding checks its idea of every struct
 *    against mamba2_struct_size() when it loads the library.
 *  - The caller owns all memory. An op that needs scratch space reports how much via
 *    its *_workspace_size query. Passing workspace == NULL makes the library allocate
 *    (and free) the scratch itself for that call — a convenience; pass a workspace to
 *    keep allocation out of a hot path.
 *  - Threading: a context owns a persistent thread pool. Results are bitwise identical
 *    for every thread count (all reductions run in a fixed order, no float atomics).
 *    A context serves one call at a time: a call made while another thread's call on the
 *    same context is running (including mamba2_context_set_num_threads and
 *    mamba2_context_force_isa) returns MAMBA2_STATUS_BUSY at once, having done nothing.
 *    Distinct contexts are independent. The last-error message is per calling thread.
 */
#ifndef MAMBA2C_H
#define MAMBA2C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(MAMBA2C_BUILD_SHARED)
#define MAMBA2_API __declspec(dllexport)
#elif defined(__GNUC__)
#define MAMBA2_API __attribute__((visibility("default")))
#else
#define MAMBA2_API
#endif

#define MAMBA2C_VERSION_MAJOR 0
#define MAMBA2C_VERSION_MINOR 1
#define MAMBA2C_VERSION_PATCH 0

/* ------------------------------------------------------------------------- */
/* Status codes                                                              */
/* ------------------------------------------------------------------------- */

typedef enum mamba2_status {
    MAMBA2_STATUS_OK = 0,
    MAMBA2_STATUS_INVALID_ARGUMENT = 1, /* a shape, stride, dtype or value is wrong   */
    MAMBA2_STATUS_UNSUPPORTED = 2,      /* valid request this backend cannot serve     */
    MAMBA2_STATUS_OUT_OF_MEMORY = 3,    /* an allocation the caller allowed failed     */
    MAMBA2_STATUS_WORKSPACE_TOO_SMALL = 4,
    MAMBA2_STATUS_BACKEND_UNAVAILABLE = 5, /* backend not compiled in or no device     */
    MAMBA2_STATUS_INTERNAL_ERROR = 6,
    MAMBA2_STATUS_BUSY = 7 /* the context is in use by a call from another thread (see
                              "Threading"): nothing was done; retry or use one per thread */
} mamba2_status_t;

/* Static text for a status ("invalid argument", ...). Never NULL. */
MAMBA2_API const char *mamba2_status_string(mamba2_status_t status);

/* The message of the last failed call made by this thread ("" if none). The pointer
 * stays valid until this thread's next mamba2 call. */
MAMBA2_API const char *mamba2_last_error(void);

/* "0.1.0" */
MAMBA2_API const char *mamba2_version_string(void);

/* The ABI this header describes; mamba2_abi_version() returns the library's (1). A binding
 * refuses a library whose ABI version differs from the one it was written for. */
#define MAMBA2C_ABI_VERSION 1
MAMBA2_API uint32_t mamba2_abi_version(void);

/* The public structs, for mamba2_struct_size. Ids are append-only. */
typedef enum mamba2_struct_id {
    MAMBA2_STRUCT_TENSOR = 0,
    MAMBA2_STRUCT_SSD_OPTIONS = 1,
    MAMBA2_STRUCT_SSD_GRADS = 2,
    MAMBA2_STRUCT_SSD_CHUNKED_OPTIONS = 3,
    MAMBA2_STRUCT_RMSNORM_OPTIONS = 4,
    MAMBA2_STRUCT_RMSNORM_GRADS = 5,
    MAMBA2_STRUCT_CONV1D_OPTIONS = 6,
    MAMBA2_STRUCT_CONV1D_GRADS = 7,
    MAMBA2_STRUCT_CONV1D_STEP_OPTIONS = 8,
    MAMBA2_STRUCT_SSD_STEP_OPTIONS = 9,
    MAMBA2_STRUCT_LINEAR_OPTIONS = 10,
    MAMBA2_STRUCT_BLOCK_STEP_WEIGHTS = 11, /* mamba2c_block.h */
    MAMBA2_STRUCT_BLOCK_STEP_OPTIONS = 12
} mamba2_struct_id_t;

/* sizeof the struct `id` in this library (0 for an unknown id). */
MAMBA2_API size_t mamba2_struct_size(mamba2_struct_id_t id);

/* ------------------------------------------------------------------------- */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------- */

typedef enum mamba2_dtype {
    MAMBA2_DTYPE_F32 = 0,
    MAMBA2_DTYPE_F64 = 1,  /* reference backend only (float64 oracle, gradient checks) */
    MAMBA2_DTYPE_BF16 = 2, /* activation storage of the fused SSD op and the decode    */
    MAMBA2_DTYPE_F16 = 3,  /* steps (see "dtypes" there), ssd_step's state_cache        */
    MAMBA2_DTYPE_I32 = 4,  /* index tensors (cu_seqlens)                                */
    MAMBA2_DTYPE_I64 = 5,
    MAMBA2_DTYPE_Q8_0 = 6  /* weights of mamba2_linear_forward only: GGUF's Q8_0 blocks of  */
                           /* 32 elements, each 34 bytes: an f16 scale d, then 32 int8 q;   */
                           /* element = d * q. mamba2_dtype_size() is 0 (no element size)   */
} mamba2_dtype_t;

#define MAMBA2_MAX_RANK 6

typedef struct mamba2_tensor {
    void *data;
    mamba2_dtype_t dtype;
    int32_t rank;
    int64_t shape[MAMBA2_MAX_RANK];
    int64_t stride[MAMBA2_MAX_RANK]; /* in elements, outermost first */
} mamba2_tensor_t;

/* A contiguous (row-major) descriptor of `rank` dims; rank <= MAMBA2_MAX_RANK. */
MAMBA2_API mamba2_tensor_t mamba2_tensor_make(void *data, mamba2_dtype_t dtype, int32_t rank,
                                              const int64_t *shape);
/* A descriptor with explicit element strides. */
MAMBA2_API mamba2_tensor_t mamba2_tensor_make_strided(void *data, mamba2_dtype_t dtype,
                                                      int32_t rank, const int64_t *shape,
                                                      const int64_t *stride);
/* Size in bytes of one element of dtype (0 for an unknown dtype). */
MAMBA2_API size_t mamba2_dtype_size(mamba2_dtype_t dtype);

/* ------------------------------------------------------------------------- */
/* Context: backend choice and thread pool                                   */
/* ------------------------------------------------------------------------- */

typedef enum mamba2_backend {
    MAMBA2_BACKEND_CPU = 0, /* optimized CPU kernels (AVX2+FMA or portable scalar)  */
    MAMBA2_BACKEND_REF = 1, /* float64-accumulating reference: the oracle, slow      */
    MAMBA2_BACKEND_CUDA = 2, /* NVIDIA GPUs; BACKEND_UNAVAILABLE when not built in    */
    MAMBA2_BACKEND_OPENCL = 3 /* OpenCL 1.2 devices: see "GPU backends" at the end      */
} mamba2_backend_t;

typedef struct mamba2_context mamba2_context_t;

/* Create a context for `backend`. num_threads <= 0 means one per online CPU. */
MAMBA2_API mamba2_status_t mamba2_context_create(mamba2_context_t **ctx, mamba2_backend_t backend,
                                                 int32_t num_threads);
/* Destroy a context (NULL is allowed and does nothing). */
MAMBA2_API void mamba2_context_destroy(mamba2_context_t *ctx);
/* Change the thread count (<= 0: one per online CPU). Results do not change. */
MAMBA2_API mamba2_status_t mamba2_context_set_num_threads(mamba2_context_t *ctx,
                                                          int32_t num_threads);
MAMBA2_API int32_t mamba2_context_get_num_threads(const mamba2_context_t *ctx);
MAMBA2_API mamba2_backend_t mamba2_context_get_backend(const mamba2_context_t *ctx);
/* The SIMD kernel set the CPU backend chose at run time: "avx512" (conv1d and the fused SSD
 * op have AVX-512 kernels, the SSD op using them for wide enough heads and states and its
 * AVX2 ones otherwise; the other ops run their AVX2 ones), "avx2+fma", "neon" (AArch64) or
 * "scalar"; "gpu" for the GPU backends.
 * mamba2_context_force_isa(ctx, name) picks one of "scalar" (the portable path, for tests),
 * "avx2+fma" (or "avx2"), "avx512", "neon" (UNSUPPORTED where the CPU lacks it) or "auto"; the
 * environment variable MAMBA2C_ISA=scalar|avx2 caps the level the library may use. */
MAMBA2_API const char *mamba2_context_get_isa(const mamba2_context_t *ctx);
MAMBA2_API mamba2_status_t mamba2_context_force_isa(mamba2_context_t *ctx, const char *isa);

/* ------------------------------------------------------------------------- */
/* SSD chunked scan (SPEC §1–2)                                              */
/* ------------------------------------------------------------------------- */
/*
 * Shapes (PyTorch order):
 *   x[B,L,H,P]  dt[B,L,H]  A[H]  Bm[B,L,G,N]  Cm[B,L,G,N]  ->  out[B,L,H,P]
 *   H % G == 0; head h reads group h / (H/G).
 * Options (all optional):
 *   D[H] or D[H,P]; z[B,L,H,P]; dt_bias[H]; dt_softplus; dt_limit (lo, hi);
 *   initial_state[S,H,P,N] and final_state[S,H,P,N] (float32), where S = B, or
 *   S = nseq when cu_seqlens[nseq+1] (int32 or int64; requires B == 1) packs nseq
 *   independent sequences into the L tokens.
 * dtypes: x, dt, Bm, Cm, z, out, dout (and their gradients dx, ddt, dBm, dCm, dz)
 * share one dtype, x's: F32/BF16/F16 (CPU backend) or F32/F64/BF16/F16 (reference).
 * A, D, dt_bias, the states (initial, final, position, dfinal) and their gradients
 * (dA, dD, ddt_bias, dinitial_state) are F32, except that with F64 activations on the
 * reference backend they are F64 too; with BF16/F16 activations they stay F32.
 * Half storage changes only loads and stores: arithmetic is float32 (CPU) or float64
 * (reference), and each half output is rounded once, to nearest even (dBm, dCm: summed
 * over a group's heads in float32 first; the CPU backend's workspace then holds that sum,
 * 2*B*L*G*N floats). A result beyond
 * the range of F16 (|v| > 65504) becomes ±inf in that element; the call still succeeds.
 * A dtype a backend does not accept is MAMBA2_STATUS_UNSUPPORTED, naming the ones it does.
 * L == 0 is valid: out is empty and final_state = initial_state (or 0).
 */
typedef struct mamba2_ssd_options {
    uint32_t struct_size;                 /* sizeof(mamba2_ssd_options_t), or 0 (v1)   */
    int64_t chunk_size;                   /* Q >= 1; see "chunk_size" below            */
    const mamba2_tensor_t *D;             /* [H] or [H,P], or NULL                     */
    const mamba2_tensor_t *z;             /* [B,L,H,P], or NULL: out = y * silu(z)     */
    const mamba2_tensor_t *dt_bias;       /* [H], or NULL                              */
    const mamba2_tensor_t *initial_state; /* [S,H,P,N], or NULL (zeros)                */
    const mamba2_tensor_t *cu_seqlens;    /* [nseq+1] int32/int64, or NULL             */
    const mamba2_tensor_t *state_positions; /* [npos] int32/int64, or NULL; see
                                             mamba2_ssd_forward_states              */
    int32_t dt_softplus;                  /* nonzero: dt = softplus(dt + dt_bias)      */
    double dt_limit_lo;                   /* clamp of the processed dt, always applied */
    double dt_limit_hi;                   /* default (0, +inf)                         */
} mamba2_ssd_options_t;

/* chunk_size: what Q does per backend. The result never depends on it beyond rounding
 * (SPEC §1, §8). The reference backend evaluates the SSD in chunks of Q tokens; the staged
 * pipeline (below) is defined by it (K = ceil(L/Q) chunks, the staged tensors' shapes); the
 * fused CPU backend validates it (>= 1) and otherwise chooses its own blocking.
 *
 * out_x (an explicit argument of the forward and the backward, NULL when not wanted):
 * [B,L,H,P] in the activation dtype, the output before the z gate, y + D x (mamba_ssm's
 * out_x; = out without z). Forward: an output, written like out. Backward: an optional
 * input, the forward's out_x for the same inputs; with z it replaces the recomputation of y
 * that dz needs (one contraction less per state element and token on the CPU backend).
 * Training saves it, as mamba_ssm does. */

/* Defaults: struct_size set, chunk_size 256, no optional tensors, no softplus, dt_limit
 * (0, +inf). */
MAMBA2_API mamba2_ssd_options_t mamba2_ssd_options_default(void);

/*
 * Forward. out[B,L,H,P] is overwritten; out_x[B,L,H,P] and final_state[S,H,P,N] (each may
 * be NULL) are overwritten. No output may overlap an input. opts may be NULL (defaults).
 */
MAMBA2_API mamba2_status_t mamba2_ssd_forward_workspace_size(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *out_x,
    const mamba2_tensor_t *final_state, const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
    const mamba2_tensor_t *A, const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
    const mamba2_ssd_options_t *opts, size_t *workspace_size);

MAMBA2_API mamba2_status_t mamba2_ssd_forward(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *out_x,
    const mamba2_tensor_t *final_state, const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
    const mamba2_tensor_t *A, const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
    const mamba2_ssd_options_t *opts, void *workspace, size_t workspace_size);

/*
 * Forward that also returns the states after chosen tokens, so that a serving engine can
 * cache prefixes at arbitrary boundaries in one prefill call.
 * opts->state_positions[npos] (int32 or int64, strictly increasing) are flat token indices
 * into the B x L token grid: b*L + t (with cu_seqlens, B == 1 and the index is the packed
 * token index t). position_states[npos,H,P,N] (the state dtype) receives, for each
 * position, S_t: the state of that token's sequence after token t (token t included).
 * With position_states == NULL this is mamba2_ssd_forward. Workspace: the size that
 * mamba2_ssd_forward_workspace_size reports for the same opts.
 */
MAMBA2_API mamba2_status_t mamba2_ssd_forward_states(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *out_x,
    const mamba2_tensor_t *final_state, const mamba2_tensor_t *position_states,
    const mamba2_tensor_t *x, const mamba2_tensor_t *dt, const mamba2_tensor_t *A,
    const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm, const mamba2_ssd_options_t *opts,
    void *workspace, size_t workspace_size);

/*
 * Backward outputs. Each pointer may be NULL (that gradient is not wanted). Every
 * gradient given is OVERWRITTEN (never accumulated into):
 *   dx[B,L,H,P]  ddt[B,L,H] (w.r.t. the raw dt, through bias, softplus and clamp)
 *   dA[H]  dBm[B,L,G,N]  dCm[B,L,G,N]  dD (shape of D)  dz[B,L,H,P]
 *   ddt_bias[H]  dinitial_state[S,H,P,N]
 * dD, dz, ddt_bias and dinitial_state may only be requested when the matching option
 * is present. Sums over heads, batch and time (dA, dD, ddt_bias, dBm, dCm) run in a
 * fixed order: bitwise identical for any thread count.
 */
typedef struct mamba2_ssd_grads {
    uint32_t struct_size; /* sizeof(mamba2_ssd_grads_t), or 0 (v1) */
    const mamba2_tensor_t *dx;
    const mamba2_tensor_t *ddt;
    const mamba2_tensor_t *dA;
    const mamba2_tensor_t *dBm;
    const mamba2_tensor_t *dCm;
    const mamba2_tensor_t *dD;
    const mamba2_tensor_t *dz;
    const mamba2_tensor_t *ddt_bias;
    const mamba2_tensor_t *dinitial_state;
} mamba2_ssd_grads_t;

/*
 * Backward: given dout[B,L,H,P] and optionally dfinal_state[S,H,P,N] (the gradient
 * flowing into final_state; NULL = zero), write the requested gradients. Inputs and
 * options must be the ones the forward saw. out_x (may be NULL) is an input here: the
 * forward's out_x for the same inputs (see out_x above).
 */
MAMBA2_API mamba2_status_t mamba2_ssd_backward_workspace_size(
    mamba2_context_t *ctx, const mamba2_ssd_grads_t *grads, const mamba2_tensor_t *dout,
    const mamba2_tensor_t *dfinal_state, const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
    const mamba2_tensor_t *A, const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
    const mamba2_tensor_t *out_x, const mamba2_ssd_options_t *opts, size_t *workspace_size);

MAMBA2_API mamba2_status_t mamba2_ssd_backward(
    mamba2_context_t *ctx, const mamba2_ssd_grads_t *grads, const mamba2_tensor_t *dout,
    const mamba2_tensor_t *dfinal_state, const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
    const mamba2_tensor_t *A, const mamba2_tensor_t *Bm, const mamba2_tensor_t *Cm,
    const mamba2_tensor_t *out_x, const mamba2_ssd_options_t *opts, void *workspace,
    size_t workspace_size);

/* ------------------------------------------------------------------------- */
/* Gated RMSNorm (SPEC §5)                                                   */
/* ------------------------------------------------------------------------- */
/*
 * Shapes (PyTorch order):
 *   x[M,D]  z[M,D] (optional gate)  weight[D]  bias[D] (optional)
 *   ->  out[M,D]  rstd[M,D/group_size] (optional)
 *   M rows (e.g. B*L tokens; the row stride is free, so a slice of a wider buffer works).
 * The statistics are taken per group of group_size consecutive channels of a row, as in
 * mamba_ssm's RMSNormGated(group_size = D/ngroups). A norm over the whole row, as some
 * ports of Mamba-2 compute it whatever ngroups is, is group_size = D; the two differ as
 * soon as ngroups > 1. With r = 1/sqrt(mean over the group of v^2 + eps) and
 * silu(s) = s/(1+exp(-s)):
 *   norm_before_gate == 0 (Mamba-2):  v = x * silu(z) (v = x without z)
 *                                     out = v * r * weight (+ bias)
 *   norm_before_gate != 0:            v = x
 *                                     out = (x * r * weight (+ bias)) * silu(z)
 * rstd[m,g] receives r of row m, group g (the forward's statistics, for the backward).
 * dtypes: x, z, out, dout, dx, dz share one dtype: F32 (CPU backend) or F32/F64 (reference
 * backend). weight, bias, rstd, dweight and dbias are F32, or F64 with F64 activations.
 * M == 0 is valid: nothing is written to out, and dweight and dbias become 0.
 */
typedef struct mamba2_rmsnorm_gated_options {
    uint32_t struct_size;     /* sizeof(mamba2_rmsnorm_gated_options_t), or 0    */
    double eps;               /* finite, >= 0; added to the mean square          */
    int64_t group_size;       /* channels per group, divides D; 0 means D        */
    int32_t norm_before_gate; /* nonzero: normalise x, then gate (see above)     */
} mamba2_rmsnorm_gated_options_t;

/* Defaults (mamba_ssm's RMSNormGated as Mamba-2 uses it): struct_size set, eps 1e-5,
 * group_size 0 (= D), norm_before_gate 0. */
MAMBA2_API mamba2_rmsnorm_gated_options_t mamba2_rmsnorm_gated_options_default(void);

/*
 * Forward. out[M,D] is overwritten; rstd[M,D/group_size] (may be NULL) is overwritten.
 * z and bias may be NULL; opts may be NULL (defaults). No output may overlap an input
 * or the other output.
 */
MAMBA2_API mamba2_status_t mamba2_rmsnorm_gated_forward_workspace_size(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *rstd,
    const mamba2_tensor_t *x, const mamba2_tensor_t *z, const mamba2_tensor_t *weight,
    const mamba2_tensor_t *bias, const mamba2_rmsnorm_gated_options_t *opts,
    size_t *workspace_size);

MAMBA2_API mamba2_status_t mamba2_rmsnorm_gated_forward(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *rstd,
    const mamba2_tensor_t *x, const mamba2_tensor_t *z, const mamba2_tensor_t *weight,
    const mamba2_tensor_t *bias, const mamba2_rmsnorm_gated_options_t *opts, void *workspace,
    size_t workspace_size);

/*
 * Backward outputs. Each pointer may be NULL (that gradient is not wanted). Every
 * gradient given is OVERWRITTEN (never accumulated into):
 *   dx[M,D]  dz[M,D] (only when z is given)
 *   dweight[D]  dbias[D] (only when bias is given): sums over the M rows, in a fixed
 *   order: bitwise identical for any thread count.
 */
typedef struct mamba2_rmsnorm_gated_grads {
    uint32_t struct_size; /* sizeof(mamba2_rmsnorm_gated_grads_t), or 0 (v1) */
    const mamba2_tensor_t *dx;
    const mamba2_tensor_t *dz;
    const mamba2_tensor_t *dweight;
    const mamba2_tensor_t *dbias;
} mamba2_rmsnorm_gated_grads_t;

/*
 * Backward: given dout[M,D], write the requested gradients. Inputs and options must be
 * the ones the forward saw. rstd[M,D/group_size] may be NULL (the statistics are
 * recomputed from x and z) or the rstd the forward wrote, which then is used as is.
 */
MAMBA2_API mamba2_status_t mamba2_rmsnorm_gated_backward_workspace_size(
    mamba2_context_t *ctx, const mamba2_rmsnorm_gated_grads_t *grads,
    const mamba2_tensor_t *dout, const mamba2_tensor_t *x, const mamba2_tensor_t *z,
    const mamba2_tensor_t *weight, const mamba2_tensor_t *bias, const mamba2_tensor_t *rstd,
    const mamba2_rmsnorm_gated_options_t *opts, size_t *workspace_size);

MAMBA2_API mamba2_status_t mamba2_rmsnorm_gated_backward(
    mamba2_context_t *ctx, const mamba2_rmsnorm_gated_grads_t *grads,
    const mamba2_tensor_t *dout, const mamba2_tensor_t *x, const mamba2_tensor_t *z,
    const mamba2_tensor_t *weight, const mamba2_tensor_t *bias, const mamba2_tensor_t *rstd,
    const mamba2_rmsnorm_gated_options_t *opts, void *workspace, size_t workspace_size);

/* ------------------------------------------------------------------------- */
/* Causal depthwise conv1d (SPEC §4) and its decode step (SPEC §6)           */
/* ------------------------------------------------------------------------- */
/*
 * Shapes (PyTorch order, channel-last as Mamba-2 stores the xBC slice of its in_proj
 * output; a view with a row stride larger than C works without a copy):
 *   x[B,L,C]  weight[C,W] (1 <= W <= 8)  ->  out[B,L,C]
 *   out[b,t,c] = act(bias[c] + Σ_{k<W} weight[c,k] * u[t-W+1+k][c])
 * where u[j] = x[b,j] for j >= 0 and, before the start of the sequence (j < 0), the
 * entry W-1+j of initial_conv_state (zero when it is absent).
 * Conv states [S,C,W-1] hold the W-1 inputs before a position, oldest first (the
 * conv_state layout of causal-conv1d). final_conv_state[s,c,i] = u[len-W+1+i][c]: the last
 * W-1 inputs of the sequence, which for a sequence shorter than W-1 include entries of
 * initial_conv_state. S = B, or S = nseq when cu_seqlens[nseq+1] (int32 or int64;
 * requires B == 1) packs nseq independent sequences into the L tokens (the window never
 * crosses a boundary).
 * dtypes: x, out, the conv states and their gradients share one dtype: F32 (CPU backend)
 * or F32/F64 (reference backend). weight and bias (and their gradients) are F32, F64 with
 * F64 activations. L == 0 is valid: out is empty and final_conv_state = initial (or 0).
 */
typedef enum mamba2_activation {
    MAMBA2_ACTIVATION_NONE = 0,
    MAMBA2_ACTIVATION_SILU = 1 /* silu(v) = v / (1 + exp(-v)) */
} mamba2_activation_t;

typedef struct mamba2_conv1d_options {
    uint32_t struct_size;                      /* sizeof(mamba2_conv1d_options_t), or 0    */
    const mamba2_tensor_t *bias;               /* [C], or NULL (zero)                      */
    const mamba2_tensor_t *initial_conv_state; /* [S,C,W-1], or NULL (zeros)               */
    const mamba2_tensor_t *cu_seqlens;         /* [nseq+1] int32/int64, or NULL; B == 1    */
    mamba2_activation_t activation;            /* applied after the bias                   */
} mamba2_conv1d_options_t;

/* Defaults: struct_size set, no bias, no initial state, no cu_seqlens,
 * MAMBA2_ACTIVATION_NONE. */
MAMBA2_API mamba2_conv1d_options_t mamba2_conv1d_options_default(void);

/*
 * Forward. out[B,L,C] is overwritten; final_conv_state[S,C,W-1] (may be NULL) is
 * overwritten. No output may overlap an input. Needs no workspace.
 */
MAMBA2_API mamba2_status_t mamba2_conv1d_forward(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                                 const mamba2_tensor_t *final_conv_state,
                                                 const mamba2_tensor_t *x,
                                                 const mamba2_tensor_t *weight,
                                                 const mamba2_conv1d_options_t *opts);

/*
 * Backward outputs. Each pointer may be NULL (that gradient is not wanted). Every gradient
 * given is OVERWRITTEN (never accumulated into):
 *   dx[B,L,C]  dweight[C,W]  dbias[C]  dinitial_conv_state[S,C,W-1]
 * dbias and dinitial_conv_state may only be requested when bias / initial_conv_state are
 * given. dweight and dbias are sums over all B·L tokens computed in a fixed order: bitwise
 * identical for any thread count.
 */
typedef struct mamba2_conv1d_grads {
    uint32_t struct_size; /* sizeof(mamba2_conv1d_grads_t), or 0 (v1) */
    const mamba2_tensor_t *dx;
    const mamba2_tensor_t *dweight;
    const mamba2_tensor_t *dbias;
    const mamba2_tensor_t *dinitial_conv_state;
} mamba2_conv1d_grads_t;

/*
 * Backward: given dout[B,L,C] and optionally dfinal_conv_state[S,C,W-1] (the gradient
 * flowing into final_conv_state; NULL = zero), write the requested gradients. x, weight
 * and opts must be the ones the forward saw (the activation is recomputed, not stored).
 */
MAMBA2_API mamba2_status_t mamba2_conv1d_backward_workspace_size(
    mamba2_context_t *ctx, const mamba2_conv1d_grads_t *grads, const mamba2_tensor_t *dout,
    const mamba2_tensor_t *dfinal_conv_state, const mamba2_tensor_t *x,
    const mamba2_tensor_t *weight, const mamba2_conv1d_options_t *opts, size_t *workspace_size);

MAMBA2_API mamba2_status_t mamba2_conv1d_backward(
    mamba2_context_t *ctx, const mamba2_conv1d_grads_t *grads, const mamba2_tensor_t *dout,
    const mamba2_tensor_t *dfinal_conv_state, const mamba2_tensor_t *x,
    const mamba2_tensor_t *weight, const mamba2_conv1d_options_t *opts, void *workspace,
    size_t workspace_size);

/*
 * Decode step: T new tokens per sequence against a cache updated in place.
 *   x[B,C] (T = 1) or x[B,T,C] (e.g. speculative verification)  ->  out of x's shape
 *   conv_cache[S,C,Lc] with any Lc >= W-1 and ANY element strides on all three dims (the one
 *   tensor of the API whose last dimension need not be contiguous: mamba_ssm's and
 *   transformers' [B,C,d_conv] caches (Lc = W), causal-conv1d's channel-last views (stride
 *   of Lc != 1) and the classic [S,C,W-1] all work in place, without a copy). Slot
 *   state_indices[b] (or b) holds row b's last Lc inputs. The call computes the T outputs
 *   exactly as mamba2_conv1d_forward would with the W-1 inputs before the row's first new
 *   token as initial_conv_state, then updates the slot, in one of two modes:
 *   - shift (cache_seqlens NULL, the default): the slot holds the last Lc inputs, oldest
 *     first; the history is slot[Lc-W+1 .. Lc-1]; afterwards the slot holds the last Lc
 *     entries of [old slot, x[b,0..T-1]] (shifted left by T, the T new inputs appended;
 *     for T >= Lc just the last Lc new inputs). With Lc = W-1 this is the v1 behaviour.
 *   - circular (cache_seqlens[B] int32/int64 given; causal_conv1d_update's cache_seqlens):
 *     the slot is a ring buffer and cache_seqlens[b] >= 0 counts the inputs the row has
 *     seen. Input t of the call (t = 0..T-1) is written at position (cache_seqlens[b] + t)
 *     mod Lc, in order (for T > Lc later tokens overwrite earlier ones); the history is
 *     read before any write, at positions (cache_seqlens[b] - W+1 + i) mod Lc, i = 0..W-2
 *     (oldest first). Nothing is shifted, and the op does NOT advance cache_seqlens: the
 *     caller adds T after the call. Needs Lc >= 1 when W > 1 (with Lc = 0 and W = 1 the
 *     cache holds nothing and is not touched). cache_seqlens of padding rows is not read.
 * state_indices[B] (int32/int64, optional): the slot of each row; NULL means row b uses
 * slot b and then B <= S. A negative index marks a padding row: its out row is left
 * untouched and no slot changes. Non-negative indices must be < S and distinct.
 * out is overwritten (except padding rows); conv_cache is read and updated in place and
 * may overlap nothing else (its own elements must be distinct).
 * dtypes: x, out and conv_cache share one dtype: F32, F64 (reference backend), or BF16/F16
 * (CPU and reference backends: the conv1d_step of a bf16 model on its own cache, without
 * copies). With BF16/F16 x, weight and bias are F32 or x's dtype (both the same); otherwise
 * as for the forward. Arithmetic is float32 (float64 on the reference) on the widened
 * values; each output is rounded once to nearest even, and the cache receives the inputs
 * as they are (nothing rounded). The GPU backends return MAMBA2_STATUS_UNSUPPORTED for
 * half activations here (F32 only). Needs no workspace. Every backend (CPU, reference, OpenCL, CUDA) serves every layout and
 * both modes.
 */
typedef struct mamba2_conv1d_step_options {
    uint32_t struct_size;                 /* sizeof(mamba2_conv1d_step_options_t), or 0   */
    const mamba2_tensor_t *bias;          /* [C], or NULL (zero)                          */
    const mamba2_tensor_t *state_indices; /* [B] int32/int64, or NULL (row b -> slot b)   */
    mamba2_activation_t activation;
    /* ---- appended after ABI v1 (read only when struct_size covers it) ---- */
    const mamba2_tensor_t *cache_seqlens; /* [B] int32/int64 >= 0, or NULL: circular mode */
} mamba2_conv1d_step_options_t;

/* Defaults: struct_size set, no bias, identity slots, MAMBA2_ACTIVATION_NONE, shift mode
 * (no cache_seqlens). */
MAMBA2_API mamba2_conv1d_step_options_t mamba2_conv1d_step_options_default(void);

MAMBA2_API mamba2_status_t mamba2_conv1d_step(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                              const mamba2_tensor_t *conv_cache,
                                              const mamba2_tensor_t *x,
                                              const mamba2_tensor_t *weight,
                                              const mamba2_conv1d_step_options_t *opts);

/* ------------------------------------------------------------------------- */
/* SSD decode step (SPEC §6)                                                 */
/* ------------------------------------------------------------------------- */
/*
 * T new tokens per sequence against a state cache updated in place: T = 1 is the decode
 * step, T > 1 e.g. speculative verification. Shapes (PyTorch order), one form for all:
 *   T = 1:  x[B,H,P]    dt[B,H]    Bm[B,G,N]    Cm[B,G,N]    -> out[B,H,P]
 *   T >= 0: x[B,T,H,P]  dt[B,T,H]  Bm[B,T,G,N]  Cm[B,T,G,N]  -> out[B,T,H,P]
 *   A[H]; H % G == 0, head h reads group h / (H/G).
 * state_cache[S,H,P,N] is IN/OUT: slot state_indices[b] (or b) holds row b's state S_{-1};
 * the call runs SPEC §1 steps 1-4 for the row's T tokens in order, starting from that state,
 * then stores the state after the last token back into the slot. So one call with T tokens,
 * T calls with one token, and mamba2_ssd_forward over the same tokens with the slot as
 * initial_state and final_state all agree (SPEC §8 tolerance).
 * all_states (optional output): [B,T,H,P,N] ([B,H,P,N] for the T = 1 form), the state after
 * every token; all_states[b,T-1] equals the slot afterwards.
 * Options: D[H] or D[H,P], z (shape of x), dt_bias[H], dt_softplus, dt_limit exactly as for
 * mamba2_ssd_forward; state_indices[B] (int32/int64, optional): NULL means row b uses slot b,
 * and then B <= S is required. A negative index marks a padding row: its rows of out and
 * all_states are left untouched and no slot changes. Non-negative indices must be < S and
 * distinct.
 * dtypes: x, dt, Bm, Cm, z, out share one dtype: F32 (every backend), F64 (reference
 * backend), or BF16/F16 (CPU and reference backends; the GPU backends return
 * MAMBA2_STATUS_UNSUPPORTED for half activations here). A, D and dt_bias are F32 (F64 with
 * F64 activations). state_cache is F32, BF16 or F16 with F32/BF16/F16 activations (F64 with
 * F64 activations), and all_states has state_cache's dtype. Half activations are widened to
 * float32 on load and out is rounded once to nearest even. Arithmetic is float32 (float64 on the reference) whatever the state
 * storage: with a BF16/F16 state_cache each token loads the slot's state, updates it, computes
 * y from the unrounded updated state, and stores the state rounded once to nearest even (as
 * mamba_ssm's selective_state_update does for a half state). The state between two tokens is
 * therefore the rounded one, also inside one call with T > 1, so one call with T tokens and T
 * calls with one token give the same result; all_states[b,t] holds the same rounded values.
 * (F32 states: the reference carries float64 across a call's tokens, the CPU and GPU
 * backends float32.) The CPU backend takes a BF16/F16 state_cache for N <= 4096 (larger N:
 * MAMBA2_STATUS_UNSUPPORTED), and half activations likewise for N <= 4096.
 * out and all_states are overwritten (padding rows excepted); state_cache may overlap no
 * other tensor, and no output may overlap an input. Needs no workspace.
 */
typedef struct mamba2_ssd_step_options {
    uint32_t struct_size;                 /* sizeof(mamba2_ssd_step_options_t), or 0     */
    const mamba2_tensor_t *D;             /* [H] or [H,P], or NULL                       */
    const mamba2_tensor_t *z;             /* shape of x, or NULL: out = y * silu(z)      */
    const mamba2_tensor_t *dt_bias;       /* [H], or NULL                                */
    const mamba2_tensor_t *state_indices; /* [B] int32/int64, or NULL (row b -> slot b)  */
    int32_t dt_softplus;                  /* nonzero: dt = softplus(dt + dt_bias)        */
    double dt_limit_lo;                   /* clamp of the processed dt, always applied   */
    double dt_limit_hi;                   /* default (0, +inf)                           */
} mamba2_ssd_step_options_t;

/* Defaults: struct_size set, no optional tensors, identity slots, no softplus, dt_limit
 * (0, +inf). */
MAMBA2_API mamba2_ssd_step_options_t mamba2_ssd_step_options_default(void);

/* state_cache (in/out) comes first among the outputs; all_states may be NULL; opts may be
 * NULL (defaults). */
MAMBA2_API mamba2_status_t mamba2_ssd_step(mamba2_context_t *ctx,
                                           const mamba2_tensor_t *state_cache,
                                           const mamba2_tensor_t *out,
                                           const mamba2_tensor_t *all_states,
                                           const mamba2_tensor_t *x, const mamba2_tensor_t *dt,
                                           const mamba2_tensor_t *A, const mamba2_tensor_t *Bm,
                                           const mamba2_tensor_t *Cm,
                                           const mamba2_ssd_step_options_t *opts);

/* ------------------------------------------------------------------------- */
/* Linear layer for decode: matrix-vector and small-batch products           */
/* ------------------------------------------------------------------------- */
/*
 * out[M,O] = (accumulate ? out : 0) + (x[M,I] · weight[O,I]ᵀ + bias[O])
 * The products of a decode step (in_proj, out_proj, lm_head at batch M = 1..8): the cost is
 * reading the weights once, so they may be stored narrow. Larger M works too (each group of
 * two rows of x re-reads the weights, from cache when a block of rows fits).
 * dtypes: x, out (and bias) F32 (CPU); F32 or F64 on the reference backend (bias follows x).
 * weight: F32, BF16, or Q8_0 (GGUF's layout, row-major by output: row o is I/32 blocks of 34
 * bytes, an f16 scale d then 32 int8 q, element d*q). For Q8_0, I and the row stride
 * weight.stride[0] (in elements) must be multiples of 32 and the blocks need no alignment;
 * row o starts at byte o * stride[0] / 32 * 34. weight.stride[1] is 1 for every dtype.
 * Arithmetic is float32 (float64 on the reference; Q8_0 dequantized exactly); the CPU sums
 * each out[m,o] in an order fixed by I and the kernel set alone (Q8_0: per block Σ q x times
 * the scale, x not quantized; bf16 weights times an all-bf16 row of x: vdpbf16ps's order where
 * the CPU has AVX512-BF16), never by M, m's position, the thread count or O.
 * NaN/inf in x, weight or a Q8_0 scale reaches the elements it enters. bias is added to the
 * float32 sum, then (accumulate) that to out; out may overlap no input. GPU: UNSUPPORTED.
 * quantize_x (Q8_0 weights, CPU backend; the reference ignores it): each 32-block of x is
 * rounded to dx = amax/127 (float32), qx = x/dx to nearest even; per block the exact integer
 * Σ qw·qx times (dw·dx) in float32, summed in float32 (NaN/inf in a block of x: its row of
 * out is NaN). Extra error <= Σ_blocks dx/2 · Σ|w| per output, for half the instructions
 * per weight byte (docs/decode.md); the copy of x: stack up to 16 KiB, else one heap block.
 */
typedef struct mamba2_linear_options {
    uint32_t struct_size;          /* sizeof(mamba2_linear_options_t), or 0 (v1)           */
    const mamba2_tensor_t *bias;   /* [O] (x's dtype), or NULL                             */
    int32_t accumulate;            /* nonzero: out += x Wᵀ + bias (a residual connection)  */
    int64_t quantize_x; /* appended (64-bit: v1's sizeof covers bytes 20..23); see above   */
} mamba2_linear_options_t;

/* Defaults: struct_size set, no bias, out overwritten. */
MAMBA2_API mamba2_linear_options_t mamba2_linear_options_default(void);

/* opts may be NULL (defaults). */
MAMBA2_API mamba2_status_t mamba2_linear_forward(mamba2_context_t *ctx, const mamba2_tensor_t *out,
                                                 const mamba2_tensor_t *x,
                                                 const mamba2_tensor_t *weight,
                                                 const mamba2_linear_options_t *opts);

/* ------------------------------------------------------------------------- */
/* SSD staged chunk pipeline (SPEC §3), forward only                         */
/* ------------------------------------------------------------------------- */
/*
 * mamba2_ssd_forward split into the five stages mamba_ssm and CANN ops-transformer run, each
 * its own entry point, so an engine can call them one by one and keep or reuse the staged
 * tensors (e.g. chunk states for prefix caching). Batch form only: there is no packed
 * (cu_seqlens) variant; run packed sequences through mamba2_ssd_forward. Every stage takes
 * the pipeline's options, mamba2_ssd_chunked_options_t (NULL: the defaults), and reads only
 * the fields listed with it; the same chunk_size must be used for all stages.
 *
 * Q = chunk_size, K = ceil(L/Q): chunk k holds tokens [kQ, min(kQ+Q, L)); the last chunk may
 * be shorter, and its missing positions ("padding") hold zeros in the staged tensors, except
 * dA_cumsum (see 1). Below, for chunk k of row b and head h (group g = h / (H/G)), i and j
 * index positions within the chunk, d = dt_out[b,h,k,:], cs = dA_cumsum[b,h,k,:], and
 * cs_last = cs[Q-1].
 *
 * 1. chunk_cumsum   dt[B,L,H], A[H]; opts: chunk_size, dt_bias, dt_softplus, dt_limit
 *    -> dt_out[B,H,K,Q]     d_i = clamp(softplus(dt + dt_bias)) (SPEC §1 step 1); 0 in padding
 *       dA_cumsum[B,H,K,Q]  cs_i = Σ_{j<=i} d_j A[h] (inclusive, restarting in every chunk);
 *                           flat over the padding, so cs[Q-1] is always the chunk's total
 * 2. bmm_chunk      Bm[B,L,G,N], Cm[B,L,G,N]; opts: chunk_size
 *    -> CB[B,K,G,Q,Q]       CB[b,k,g,i,j] = Cm_{kQ+i} · Bm_{kQ+j} (the full Q x Q block;
 *                           0 where i or j is padding)
 * 3. chunk_state    x[B,L,H,P], Bm, dt_out, dA_cumsum; opts: chunk_size
 *    -> states[B,K,H,P,N]   Σ_j exp(cs_last - cs_j) d_j x_j ⊗ Bm_j: the chunk's state from a
 *                           zero initial state
 * 4. state_passing  states, dA_cumsum; opts: chunk_size, initial_state[B,H,P,N]
 *    -> states_start[B,K,H,P,N]  S_start[0] = initial_state (or 0);
 *                                S_start[k+1] = exp(cs_last[k]) S_start[k] + states[k]
 *       final_state[B,H,P,N] (optional): the state after the last chunk (initial_state or 0
 *                           when L = 0); equals mamba2_ssd_forward's final_state
 * 5. chunk_scan     CB, x, dt_out, dA_cumsum, Cm, states_start; opts: chunk_size, D, z
 *    -> out[B,L,H,P]        y_i = Σ_{j<=i} CB[i,j] exp(cs_i - cs_j) d_j x_j
 *                                 + exp(cs_i) Cm_i · S_start[k] + D x_i;
 *                           out_i = y_i * silu(z_i) (y_i without z)
 * Composing 1-5 equals mamba2_ssd_forward within the SPEC §8 tolerance.
 * dtypes: x, dt, Bm, Cm, z, out share one dtype, F32 (CPU backend) or F32/F64 (reference);
 * A, D, dt_bias, initial_state and every staged tensor (dt_out, dA_cumsum, CB, states,
 * states_start, final_state) are F32, F64 with F64 activations. Every output is overwritten;
 * no output may overlap an input or another output. They need no workspace.
 */
typedef struct mamba2_ssd_chunked_options {
    uint32_t struct_size;                 /* sizeof(mamba2_ssd_chunked_options_t), or 0  */
    int64_t chunk_size;                   /* Q >= 1: defines the chunks (K = ceil(L/Q))   */
    const mamba2_tensor_t *D;             /* [H] or [H,P], or NULL (chunk_scan)           */
    const mamba2_tensor_t *z;             /* [B,L,H,P], or NULL (chunk_scan)              */
    const mamba2_tensor_t *dt_bias;       /* [H], or NULL (chunk_cumsum)                  */
    const mamba2_tensor_t *initial_state; /* [B,H,P,N], or NULL (state_passing)           */
    int32_t dt_softplus;                  /* nonzero: softplus (chunk_cumsum)             */
    double dt_limit_lo;                   /* the clamp of the processed dt (chunk_cumsum) */
    double dt_limit_hi;                   /* default (0, +inf)                            */
} mamba2_ssd_chunked_options_t;

/* Defaults: struct_size set, chunk_size 256, no optional tensors, no softplus, dt_limit
 * (0, +inf). */
MAMBA2_API mamba2_ssd_chunked_options_t mamba2_ssd_chunked_options_default(void);

MAMBA2_API mamba2_status_t mamba2_ssd_chunk_cumsum(mamba2_context_t *ctx,
                                                   const mamba2_tensor_t *dt_out,
                                                   const mamba2_tensor_t *dA_cumsum,
                                                   const mamba2_tensor_t *dt,
                                                   const mamba2_tensor_t *A,
                                                   const mamba2_ssd_chunked_options_t *opts);

MAMBA2_API mamba2_status_t mamba2_ssd_bmm_chunk(mamba2_context_t *ctx, const mamba2_tensor_t *CB,
                                                const mamba2_tensor_t *Bm,
                                                const mamba2_tensor_t *Cm,
                                                const mamba2_ssd_chunked_options_t *opts);

MAMBA2_API mamba2_status_t mamba2_ssd_chunk_state(mamba2_context_t *ctx,
                                                  const mamba2_tensor_t *states,
                                                  const mamba2_tensor_t *x,
                                                  const mamba2_tensor_t *Bm,
                                                  const mamba2_tensor_t *dt_out,
                                                  const mamba2_tensor_t *dA_cumsum,
                                                  const mamba2_ssd_chunked_options_t *opts);

/* final_state may be NULL. */
MAMBA2_API mamba2_status_t mamba2_ssd_state_passing(mamba2_context_t *ctx,
                                                    const mamba2_tensor_t *states_start,
                                                    const mamba2_tensor_t *final_state,
                                                    const mamba2_tensor_t *states,
                                                    const mamba2_tensor_t *dA_cumsum,
                                                    const mamba2_ssd_chunked_options_t *opts);

MAMBA2_API mamba2_status_t mamba2_ssd_chunk_scan(
    mamba2_context_t *ctx, const mamba2_tensor_t *out, const mamba2_tensor_t *CB,
    const mamba2_tensor_t *x, const mamba2_tensor_t *dt_out, const mamba2_tensor_t *dA_cumsum,
    const mamba2_tensor_t *Cm, const mamba2_tensor_t *states_start,
    const mamba2_ssd_chunked_options_t *opts);

/* ------------------------------------------------------------------------- */
/* GPU backends (OpenCL, CUDA)                                               */
/* ------------------------------------------------------------------------- */
/*
 * Both run the same kernels (src/gpu/kernels/) behind the same entry points and checks as the
 * CPU backends. libOpenCL.so.1 / libcuda.so.1 are opened with dlopen at context creation;
 * without a driver or a device that returns BACKEND_UNAVAILABLE saying what is missing.
 *
 * Implemented: every op but mamba2_linear_forward (steps: float32 activations only).
 *
 * Host mode: mamba2_context_create(&ctx, MAMBA2_BACKEND_OPENCL, n) opens the first OpenCL
 * device, or the one MAMBA2C_OPENCL_DEVICE names (an index in `clinfo -l` order, or a
 * substring of "<platform> / <device>"). Data pointers are host pointers: a call copies its
 * inputs in and its outputs back (only their elements, never the gaps of a strided view).
 *
 * Device mode: mamba2_context_create_opencl(&ctx, cl_context, cl_device_id, cl_command_queue)
 * binds a context to the caller's OpenCL objects (retained until mamba2_context_destroy).
 * OpenCL buffers have no addresses, so each cl_mem a tensor lives in is registered once with
 * mamba2_opencl_register_buffer(ctx, buffer, size_in_bytes, &base): the context gives it a
 * range of a private address space, and a tensor's data pointer is base + its byte offset in
 * the buffer (a multiple of its element size). The argument checks then see real offsets
 * (overlap checks included); the kernels get (buffer, offset). Ranges of different buffers
 * never touch. Index tensors stay host arrays. Work is queued on the caller's queue; a call
 * does not wait. Scratch is the context's: *_workspace_size reports 0 bytes on GPUs.
 */
MAMBA2_API mamba2_status_t mamba2_context_create_opencl(mamba2_context_t **ctx, void *cl_context,
                                                        void *cl_device, void *cl_queue);
/* Device mode: make cl_buffer (a cl_mem of `bytes` bytes) addressable; *base = its byte 0.
 * Unregister before releasing the buffer (at most 256 at a time). */
MAMBA2_API mamba2_status_t mamba2_opencl_register_buffer(mamba2_context_t *ctx, void *cl_buffer,
                                                         size_t bytes, void **base);
MAMBA2_API mamba2_status_t mamba2_opencl_unregister_buffer(mamba2_context_t *ctx,
                                                           void *cl_buffer);

/*
 * CUDA device mode: mamba2_context_create_cuda(&ctx, device, stream) binds a context to CUDA
 * device `device` (its primary context, the CUDA runtime's) and the caller's stream
 * (cudaStream_t / CUstream; NULL: the default stream). Tensor data pointers are device
 * pointers (each a multiple of its element size); the checks see real addresses. A call
 * queues its work on the stream and does not wait; mamba2_context_destroy waits for it.
 * Chunk, sequence and position tables are built on the device. Index tensors (cu_seqlens,
 * state_positions, state_indices, cache_seqlens) are host arrays, checked and uploaded
 * through pinned buffers, unless mamba2_context_set_device_indices(ctx, 1): then they are
 * device arrays, checked for shape, dtype and alignment, not values (that would need a copy
 * and a wait); invalid values give unspecified results, never an access out of bounds (the
 * kernels clamp every index). Scratch: the context's cache of device buffers (a call
 * repeating earlier sizes allocates nothing), or after mamba2_context_set_device_allocator
 * the caller's: each buffer a call needs is alloc(user, bytes, stream) and goes back with
 * free(user, ptr, stream) before the call returns, for the context's stream, so the
 * allocator must be stream-ordered (torch's caching allocator, cudaMallocAsync). alloc
 * returns a 256-byte aligned device pointer or NULL (then MAMBA2_STATUS_OUT_OF_MEMORY); both
 * NULL restore the cache. With both set a call makes no allocation, host copy or sync of its
 * own: CUDA-graph capturable. The setters need a device-mode CUDA context, and device < 0 or
 * past the count is INVALID_ARGUMENT; no CUDA build, driver or device: BACKEND_UNAVAILABLE.
 */
MAMBA2_API mamba2_status_t mamba2_context_create_cuda(mamba2_context_t **ctx, int32_t device,
                                                      void *stream);
typedef void *(*mamba2_device_alloc_fn)(void *user, size_t bytes, void *stream);
typedef void (*mamba2_device_free_fn)(void *user, void *ptr, void *stream);
MAMBA2_API mamba2_status_t mamba2_context_set_device_allocator(mamba2_context_t *ctx,
                                                               mamba2_device_alloc_fn alloc,
                                                               mamba2_device_free_fn free_fn,
                                                               void *user);
MAMBA2_API mamba2_status_t mamba2_context_set_device_indices(mamba2_context_t *ctx, int32_t on);

#ifdef __cplusplus
}
#endif

#include "mamba2c_block.h" /* the whole-block decode step (mamba2_block_step) */

#endif /* MAMBA2C_H */
