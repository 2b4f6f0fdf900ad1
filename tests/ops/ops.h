/*
 * ops.h — the per-op test program (test_ops): one case table per op, run on any backend
 * against the float64 reference (`--backend ref|cpu|opencl|cuda|all`).
 *
 * The program (ops_main.c) opens the backends asked for and calls every selected op's runner
 * once per backend. A runner owns its op's case table, its NaN-propagation units and its
 * error table ({description, mutate function, expected status}). The "backend under test"
 * (ops_be) is the context the op runs on with float32 storage; the reference is always the
 * reference backend fed float64 copies of the same (float32-rounded) inputs, so
 * `--backend ref` is the harness's self-check: the reference fed float32 against itself in
 * float64, within the same SPEC §8 tolerance (TH_TOL_F32) as every other backend.
 *
 * The conv1d, RMSNorm and step ops describe their tensors by `spec` rows (ops_spec.c): a
 * name, a shape, a role (input, output, in/out) and logical values; run_spec() turns them
 * into guarded tensors (gt.h), calls the op and reads the outputs back.
 */
#ifndef MAMBA2C_TEST_OPS_H
#define MAMBA2C_TEST_OPS_H

#include "gt.h"
#include "harness.h"

/* ---- backends ------------------------------------------------------------------------------ */
typedef enum { OB_REF, OB_CPU, OB_OPENCL, OB_CUDA, OB_N } ops_kind;

typedef struct ops_be {
    ops_kind kind;
    const char *name; /* "ref", "cpu", "opencl", "cuda": in unit names and error messages */
    mamba2_context_t *ctx;
    int gpu;          /* opencl or cuda                                                  */
    /* the fused SSD forward's outputs and the tf32 gradients (dx, dBm, dCm): TH_TOL_F32,
     * except on a CUDA context with MAMBA2C_CUDA_TC=1 (ops_ssd.c, TOL_TC_TF32) */
    double tol_fwd, tol_grad;
} ops_be;

/* logical values of tensor id of an SSD io (malloc'ed; *n gets the element count) */
double *ops_read_all(const th_ssd_io *io, int id, int64_t *n);

/* the float64 reference and the CPU backend (cross-check of the GPU backends), both always
 * open; the name filter (NULL: every case) */
extern mamba2_context_t *ops_ref, *ops_cpu;
extern const char *ops_filter;
int ops_selected(const char *case_name); /* does the filter pick this case? */

/* expected status per backend: the reference, the CPU backend, the GPU backends (the
 * storage types each implements differ: float64 on the reference only, ...) */
typedef struct ops_want {
    mamba2_status_t ref, cpu, gpu;
} ops_want;
mamba2_status_t ops_want_for(const ops_be *be, ops_want w);

/* The tensor cores' tf32 mode of the CUDA backend (MAMBA2C_CUDA_TC=1), ops_main.c sets the
 * tolerances from these: */
/* The CUDA tensor-core forward's tf32 mode (not a SPEC §8 dtype: tf32 keeps 10 mantissa
 * bits, unit roundoff 2^-11 = 4.9e-4; the host emulation tests/gpu/test_tc_tiles.c measures
 * 3e-4 .. 5e-4 per chunk), so 2e-3. ops_be.tol_fwd is TH_TOL_F32 except on a CUDA context with
 * MAMBA2C_CUDA_TC=1. */
#define TOL_TC_TF32 2e-3
/* The tensor-core backward's tf32 mode (MAMBA2C_CUDA_TC=1): dx, dBm and dCm come from one
 * tf32 tile product each (src/cuda/ssd_tc_bwd.cuh: operands rounded to tf32, u = 2^-11 =
 * 4.9e-4 relative each, float32 accumulate), so 4u = 2e-3 as the forward (the emulated device
 * measures <= 5.0e-4, docs/gpu.md §3b). The products behind ddt, dA and ddt_bias (the
 * per-token sums, E, the recomputed CB and chunk states, chunk_state mode 1) run in split tf32
 * (~21 bits): those and the other gradients stay at TH_TOL_F32. ops_be.tol_grad is
 * TH_TOL_F32 except on a CUDA context with MAMBA2C_CUDA_TC=1. */
#define TOL_TC_TF32_GRAD 2e-3

/* ---- the op runners (one per op; each runs its case, NaN and error tables) ------------- */
void ops_ssd_fused(const ops_be *be);
void ops_ssd_stages(const ops_be *be);
void ops_ssd_positions(const ops_be *be);
void ops_conv1d(const ops_be *be);
void ops_rmsnorm(const ops_be *be);
void ops_conv1d_step(const ops_be *be);
void ops_ssd_step(const ops_be *be);
void ops_opencl_device(const ops_be *be); /* the OpenCL device-memory mode (cl_mem tensors) */

/* ---- spec rows (the ops other than the SSD ones) ------------------------------------------ */
#define MAXT 16 /* tensors of one op */

typedef struct spec {
    const char *name;
    int present, is_out, inout, rank;
    int64_t sh[6];
    mamba2_dtype_t dt;
    double *vals;
} spec;

typedef mamba2_status_t (*call_fn)(mamba2_context_t *ctx, const void *cs, gt *g);

spec *spec_add(spec *s, int id, const char *name, int rank, const int64_t *sh, int is_out);
/* float32-rounded normal(0,1) * scale + shift values */
void spec_fill(th_rng *r, spec *s, double scale, double shift);
void spec_free(spec *s, int n);
void res_free(double **res, int n);

/* The tensor mutation of an error-table row, applied after the tensors are built (the gt's
 * and the case struct; a NULL tensor: g[id].present = 0). */
typedef void (*mutate_fn)(gt *g, void *cs);

/* Run op fn on ctx: guarded tensors from the specs (pad: strided views; f64: float64 storage
 * for every float32 row), mut (may be NULL) applied, call, guards/gaps/inputs checked, every
 * output read into res[id] (malloc'ed; NULL when absent). Returns the status. */
mamba2_status_t run_spec(mamba2_context_t *ctx, spec *s, int n, int pad, int f64, call_fn fn,
                         const void *cs, double **res, const char *tag, mutate_fn mut);

/* One case of a spec op on backend be: be vs the float64 reference (TH_TOL_F32, no NaN/Inf),
 * a second run with the other layout bitwise identical, and (be not cpu) be vs the CPU
 * backend within TH_TOL_F32. */
void compare_spec(const ops_be *be, spec *s, int n, int pad, call_fn fn, const void *cs);
/* Step ops: padding rows (negative slot) keep outputs out_id..as_id bitwise. */
void check_padding(const ops_be *be, spec *s, int out_id, int as_id, int ix_id, int n,
                   call_fn fn, const void *cs);
/* NaN propagation: every output NaN exactly where the reference's is (and some are). */
void nan_pattern(const ops_be *be, const char *what, spec *s, int n, call_fn fn, const void *cs);

/* One row of an error table of a spec op. */
typedef struct spec_err {
    const char *what;   /* the unit's name                                                 */
    mutate_fn mutate;   /* the bad argument                                                */
    ops_want want;      /* the status per backend class                                    */
    const char *word;   /* a word the message must name ("$be": the backend's name)        */
    int f64;            /* 1: float64 storage of every float tensor (before the mutation)  */
} spec_err;
/* Builds a valid call (specs from make), applies the row's mutation, checks the status,
 * the message, and that no output was written (in/out tensors unchanged). */
void run_spec_errors(const ops_be *be, const char *op, const spec_err *rows, int nrows,
                     int (*make)(const void *cs, spec *s, uint64_t seed), const void *cs,
                     size_t cs_size, call_fn fn);

/* One case of each spec op, for the OpenCL device-memory mode (ops_cl_device.c). */
typedef struct ops_sample {
    const char *what;
    int (*make)(const void *cs, spec *s, uint64_t seed);
    call_fn fn;
    const void *cs;
    uint64_t seed;
} ops_sample;
extern const ops_sample ops_conv1d_sample, ops_rmsnorm_sample, ops_conv1d_step_sample,
    ops_ssd_step_sample;

#endif /* MAMBA2C_TEST_OPS_H */
