/*
 * harness.h — the one table-driven test harness of mamba2c.
 *
 * Every test program links the harness (harness.c; the SSD cases and io: harness_ssd.c) and uses
 * only the public API (mamba2c.h). The harness holds:
 *  - the tolerance table (the only place a tolerance is written);
 *  - a fixed-seed PRNG (xoshiro256**; never rand(), so runs are identical on every libc);
 *  - guarded buffers: a head and a tail guard around every allocation, gap bytes of strided
 *    views checked too, inputs checked unchanged byte for byte, outputs pre-filled with NaN so an
 *    element the library forgets to write (or accumulates into) shows up;
 *  - the SSD case description (th_ssd_case) and an "io" instance that turns one case plus one set
 *    of logical input values into library tensors of a given dtype and memory layout (contiguous,
 *    or strided views laid out like Mamba-2's in_proj split);
 *  - normalised-error metrics and pass/fail bookkeeping: one log line per unit, a worst-error
 *    tracker, and the final "N passed, M failed" line with a nonzero exit on any failure.
 */
#ifndef MAMBA2C_TEST_HARNESS_H
#define MAMBA2C_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "mamba2c.h"

/* ------------------------------------------------------------------------------------------ */
/* Tolerances: the one table. Every metric is a normalised error ||got - ref||_2 / ||ref||_2   */
/* over a whole tensor (absolute ||got - ref||_2 when ||ref|| == 0).                            */
/*                                                                                              */
/* TH_TOL_F32     1e-5   SPEC §8: float32 storage (CPU backend, or the reference fed float32)  */
/*                       against the float64 reference on the same (float32-rounded) inputs.    */
/*                       Derivation: fp32 unit roundoff u = 6e-8; rounding the output alone     */
/*                       costs ~u/sqrt(3) = 3e-8 (what ref-f32 shows); a reduction of n terms   */
/*                       with random-sign rounding adds ~sqrt(n)*u relative: states over L <=   */
/*                       1024 steps ~2e-6, dA over B*L*P*N ~1e6 terms summed blockwise ~1e-6..  */
/*                       1e-5. 1e-5 is the contract; measured worst ~2.5e-6 (dA).              */
/* TH_TOL_ORACLE  1e-12  float64 reference vs the in-test float64 CHUNKED algorithm: the same   */
/*                       sums in a different order and with exp(cs_i-cs_j) instead of products */
/*                       of exp; fp64 eps = 1.1e-16 times reductions of <= ~1e3 terms.          */
/* TH_TOL_FD      1e-6   float64 reference backward vs central finite differences with step    */
/*                       h = 1e-5*max(1,|v|): truncation h^2*f'''/6 ~ 1e-11*f''', cancellation  */
/*                       eps*|loss|/h ~ 1e-10*|loss|; measured 1e-11..3e-8 on our cases (the    */
/*                       error scales as 1/h: it is rounding, not a gradient mismatch).         */
/* TH_TOL_EXACT   0      results that must be identical: thread count, repeats, the same       */
/*                       problem reached two ways (clamp edges vs no clamp, NULL opts vs the    */
/*                       defaults), L = 0 (final = initial, dinitial = dfinal).                 */
/* ------------------------------------------------------------------------------------------ */
#define TH_TOL_F32 1e-5
#define TH_TOL_ORACLE 1e-12
#define TH_TOL_FD 1e-6
#define TH_TOL_EXACT 0.0

/* ---- PRNG ---------------------------------------------------------------------------------- */
typedef struct th_rng {
    uint64_t s[4];
} th_rng;
void th_rng_seed(th_rng *r, uint64_t seed);
uint64_t th_rng_next(th_rng *r);
double th_rng_uniform(th_rng *r, double lo, double hi); /* [lo, hi) */
double th_rng_normal(th_rng *r);                        /* N(0,1), Box-Muller */

/* ---- bookkeeping ------------------------------------------------------------------------------
 * A "unit" is one logged line (a case on one backend variant, one API check, ...). th_begin
 * opens it, th_metric / th_fail add to it, th_end prints it and counts it. */
void th_begin(const char *fmt, ...);
void th_fail(const char *fmt, ...);   /* marks the open unit failed; prints the reason */
int th_expect(int cond, const char *fmt, ...); /* th_fail(fmt) unless cond; returns cond */
/* Adds "label=err" to the open unit's line; fails it when err is NaN or err > tol. Tracks the
 * worst err/tol-class value seen (per program) for the summary. */
void th_metric(const char *label, double err, double tol);
void th_note(const char *fmt, ...);  /* appends free text to the open unit's line */
void th_end(void);
int th_unit_failed(void);
/* Prints the worst error and "N passed, M failed"; returns the process exit code. */
int th_finish(void);
void th_set_verbose(int v);
int th_verbose(void);
/* 1 when MAMBA2C_TEST_REDUCED=1 is set (tests/CMakeLists.txt sets it for emulated runs, e.g.
 * the AArch64 cross-build under qemu): the programs that take minutes natively drop repeats
 * of paths covered elsewhere (docs/architecture.md, "Testing off x86"). */
int th_reduced(void);
/* 1 in AArch64 builds (ASIMD, the NEON kernel set, is part of its base ISA) */
#if defined(__aarch64__)
#define TH_AARCH64 1
#else
#define TH_AARCH64 0
#endif

/* ---- metrics ------------------------------------------------------------------------------- */
/* ||got-ref|| / ||ref|| (absolute when ||ref|| == 0); NaN if got has a NaN/Inf. */
double th_nerr(const double *got, const double *ref, int64_t n);
int th_all_finite(const double *v, int64_t n);

/* ---- guarded buffers ------------------------------------------------------------------------ */
#define TH_GUARD 64             /* bytes before and after every payload                       */
#define TH_PAT_GUARD 0xA5       /* guards, gaps of output views, workspace tail               */
#define TH_PAT_UNSET 0xFF       /* output elements before the call (a NaN in f32 and f64),     */
                                /* and padding of input buffers (a NaN the library must not   */
                                /* read)                                                       */
typedef struct th_buf {
    const char *name;     /* for messages: the tensor(s) it holds                               */
    unsigned char *alloc; /* TH_GUARD + bytes + TH_GUARD                                       */
    unsigned char *data;  /* alloc + TH_GUARD                                                  */
    size_t bytes;
    int is_output;
    unsigned char *mask;  /* outputs: 1 for bytes covered by an output view (alloc-relative)   */
    unsigned char *snap;  /* snapshot of the whole allocation                                  */
} th_buf;

/* ---- SSD cases ----------------------------------------------------------------------------- */
enum {
    TH_X, TH_DT, TH_A, TH_BM, TH_CM, TH_D, TH_Z, TH_DTB, TH_INIT, TH_CU, TH_DOUT, TH_DFINAL,
    TH_OUT, TH_FINAL,
    TH_DX, TH_DDT, TH_DA, TH_DBM, TH_DCM, TH_DD, TH_DZ, TH_DDTB, TH_DINIT,
    TH_NT
};
#define TH_FIRST_GRAD TH_DX
extern const char *const th_tname[TH_NT];
/* the input each gradient belongs to (TH_DX -> TH_X, ...) */
int th_grad_of(int grad_id);

/* TH_LAYOUT_HEADMAJOR: the [B,L,H,P] / [B,L,G,N] tensors are views of [B,H,L,P] / [B,G,L,N]
 * storage (a head's tokens adjacent, heads L rows apart); dt contiguous */
enum { TH_LAYOUT_CONTIG = 0, TH_LAYOUT_XBC = 1, TH_LAYOUT_ZXBCDT = 2, TH_LAYOUT_HEADMAJOR = 3 };
enum { TH_DT_AUTO = 0, TH_DT_PLAIN, TH_DT_SOFTPLUS, TH_DT_NEG, TH_DT_LARGE, TH_DT_INVSP };

#define TH_MAX_SEQ 8
typedef struct th_ssd_case {
    const char *name;
    int64_t B, L, H, P, N, Q, G;
    int D_mode;    /* 0 none, 1 D[H], 2 D[H,P]                                                 */
    int z, dt_bias, softplus;
    int limit;     /* 1: dt_limit = (lo, hi) below; 0: the default (0, +inf)                  */
    double lo, hi;
    int init, final, dfinal;
    int nseq;      /* > 0: varlen, B must be 1, L = sum(seqlen)                                */
    int64_t seqlen[TH_MAX_SEQ];
    int cu64;      /* cu_seqlens int64 (else int32)                                            */
    int layout;    /* TH_LAYOUT_*: used for float32 runs; float64 reference runs are contiguous */
    int dt_mode;   /* TH_DT_*                                                                   */
    unsigned grad_mask; /* 0: request every gradient that exists; else bit (id - TH_DX)        */
    uint64_t seed;
} th_ssd_case;

/* Logical (row-major, contiguous) values of one problem, already rounded to float32. */
typedef struct th_ssd_data {
    int64_t B, L, H, P, N, G, S; /* S = number of state rows (B, or nseq)                        */
    double *v[TH_NT];            /* inputs only (TH_X..TH_DFINAL except TH_CU); NULL if absent   */
    int64_t cu[TH_MAX_SEQ + 1];
} th_ssd_data;

/* Validates the case (derives L for varlen) and draws its inputs as SPEC §8 says. */
void th_ssd_data_make(th_ssd_data *d, th_ssd_case *c);
void th_ssd_data_free(th_ssd_data *d);
/* Number of elements and shape of tensor `id` for the case. Returns the rank (0 if absent). */
int th_ssd_shape(const th_ssd_case *c, const th_ssd_data *d, int id, int64_t *shape);
int64_t th_numel(int rank, const int64_t *shape);
/* processed dt (bias, softplus, clamp) of element i of dt[B,L,H], in double; *pre gets the
 * value before the clamp */
double th_ssd_dt_processed(const th_ssd_case *c, const th_ssd_data *d, int64_t i, double *pre);

/* One instance of a problem as library tensors. */
#define TH_MAX_BUF 24
typedef struct th_view {
    int present;
    int buf;
    mamba2_tensor_t t;
} th_view;

typedef struct th_ssd_io {
    th_ssd_case c;
    mamba2_dtype_t dtype; /* F32 or F64: activations AND parameters/states                    */
    int layout;
    int nbuf;
    th_buf buf[TH_MAX_BUF];
    th_view v[TH_NT];
    mamba2_ssd_options_t opts;
    mamba2_ssd_grads_t grads;
    const mamba2_tensor_t *out_x; /* NULL unless a test sets it (forward out, backward in) */
    /* workspace of the last call (exact size, 16 mod 64 aligned, guarded tail) */
    unsigned char *ws_alloc;
    size_t ws_bytes;
} th_ssd_io;

/* Builds tensors for data `d` in `dtype` with `layout`; outputs pre-filled with NaN. */
void th_ssd_io_make(th_ssd_io *io, const th_ssd_case *c, const th_ssd_data *d,
                    mamba2_dtype_t dtype, int layout);
void th_ssd_io_free(th_ssd_io *io);
/* The options and gradient requests of case c over tensors t[TH_NT] (NULL: absent). */
void th_ssd_wire(const th_ssd_case *c, const mamba2_tensor_t *const t[TH_NT],
                 mamba2_ssd_options_t *op, mamba2_ssd_grads_t *g);
/* Refills every output with NaN (and re-arms the guards), e.g. before a repeated run. */
void th_ssd_io_reset_outputs(th_ssd_io *io);
/* ws_mode 0: workspace NULL (the library allocates); 1: exactly the queried size. */
mamba2_status_t th_ssd_io_forward(mamba2_context_t *ctx, th_ssd_io *io, int ws_mode);
mamba2_status_t th_ssd_io_backward(mamba2_context_t *ctx, th_ssd_io *io, int ws_mode);
/* Guards, gaps, unchanged inputs, workspace tail. Returns 1 if all intact; on failure writes a
 * description to msg. */
int th_ssd_io_check_memory(const th_ssd_io *io, char *msg, size_t msg_size);
/* Logical values of tensor id (row-major) as double; returns the element count, -1 if absent.
 * dst must hold th_numel() values. */
int64_t th_ssd_io_read(const th_ssd_io *io, int id, double *dst);
/* Overwrites element i (logical row-major) of input tensor id and re-snapshots its buffer. */
void th_ssd_io_poke(th_ssd_io *io, int id, int64_t i, double value);
/* Do two instances (same case and layout) hold bitwise identical output buffers (payload, gaps
 * and guards)? On a difference writes the buffer and first differing byte to msg. */
int th_ssd_io_outputs_equal(const th_ssd_io *a, const th_ssd_io *b, char *msg, size_t msg_size);

/* ---- generic strided access (any dtype the tests use) ----------------------------------- */
int64_t th_tensor_span(const mamba2_tensor_t *t); /* elements from data to the last one + 1 */
/* Calls fn(arg, element offset from t->data, logical row-major index) for every element. */
void th_tensor_for_each(const mamba2_tensor_t *t, void (*fn)(void *, int64_t, int64_t), void *arg);
void th_tensor_gather(const mamba2_tensor_t *t, double *dst);
void th_tensor_scatter(const mamba2_tensor_t *t, const double *src);

/* ---- contexts ------------------------------------------------------------------------------ */
/* Creates a context or exits the program with a message (a test setup failure). isa may be
 * NULL (default) or "scalar". */
mamba2_context_t *th_ctx(mamba2_backend_t backend, int32_t threads, const char *isa);

/* Is `isa` the kernel set a default CPU context picks (the CPU's widest, or MAMBA2C_ISA's cap)?
 * The programs that also force a set skip forcing the one the default already runs: with
 * MAMBA2C_ISA=scalar (test-arm's second pass) the forced scalar run would repeat the default
 * run bit for bit. */
int th_cpu_default_isa_is(const char *isa);

/* does msg contain `word` as a whole identifier? */
int th_has_word(const char *msg, const char *word);

void *th_xmalloc(size_t n);
/* A caller-owned workspace of `need` bytes followed by a TH_GUARD-byte tail, every byte
 * TH_PAT_GUARD (free() it). th_ws_tail_ok: is the tail intact? If not, *first gets the offset
 * from ws of the first written tail byte. */
unsigned char *th_ws_alloc(size_t need);
int th_ws_tail_ok(const unsigned char *ws, size_t need, size_t *first);

#endif /* MAMBA2C_TEST_HARNESS_H */
