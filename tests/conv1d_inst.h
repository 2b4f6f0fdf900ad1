/*
 * conv1d_inst.h — the shared part of test_conv1d (test_conv1d.c: oracle, gradcheck,
 * determinism, main; conv1d_parity.c: parity and step units; conv1d_errors.c: invalid
 * arguments): one conv1d problem (cv_case), its logical data (cv_data), an instance of it as
 * guarded tensors (cv_inst, on gt.h) with the calls, the CPU kernel sets under test, and the
 * guarded tensors of one decode step (step_io).
 */
#ifndef MAMBA2C_TEST_CONV1D_INST_H
#define MAMBA2C_TEST_CONV1D_INST_H

#include "gt.h"
#include "harness.h"
#include "mamba2c.h"

/* ================================================================= the problem === */

enum { X, WT, BIAS, INIT, CU, DOUT, DFINAL, OUT, FINAL, DX, DW, DB, DINIT, NT };
extern const char *const tname[NT];
#define MAXSEQ 8

typedef struct cv_case {
    const char *name;
    int64_t B, L, C, W;
    int bias, silu, init, final, dfinal;
    int nseq; /* > 0: varlen (B = 1, L = sum of seqlen) */
    int64_t seqlen[MAXSEQ];
    int cu64;
    int pad;        /* strided views (the f32 runs; f64 oracle runs are contiguous) */
    int align64;    /* buffers on 64-byte boundaries (with C % 16 == 0: dx rows on whole lines,
                       the CPU backward's non-temporal path) */
    unsigned gmask; /* requested gradients: bit (id - DX); 0 = all that exist */
    uint64_t seed;
} cv_case;

typedef struct cv_data {
    int64_t S;
    double *v[NT];
    int64_t cu[MAXSEQ + 1];
} cv_data;

int shape_of(const cv_case *c, const cv_data *d, int id, int64_t *sh);
int present(const cv_case *c, int id);
int64_t numel_of(const cv_case *c, const cv_data *d, int id);
/* Inputs drawn as causal-conv1d's tests do (randn), rounded to float32. */
void data_make(cv_data *d, cv_case *c);
void data_free(cv_data *d);

typedef struct cv_inst {
    cv_case c;
    cv_data *d;
    mamba2_dtype_t dt;
    gt g[NT];
    mamba2_conv1d_options_t opts;
    mamba2_conv1d_grads_t grads;
    mamba2_activation_t act;
} cv_inst;

void inst_make(cv_inst *in, const cv_case *c, cv_data *d, mamba2_dtype_t dt, int pad);
void inst_free(cv_inst *in);
const mamba2_tensor_t *T_(cv_inst *in, int id);
mamba2_status_t inst_forward(mamba2_context_t *ctx, cv_inst *in);
/* ws_mode 0: the library allocates; 1: exactly the queried size, with a guarded tail. */
mamba2_status_t inst_backward(mamba2_context_t *ctx, cv_inst *in, int ws_mode);
/* Every buffer's guards, gaps and inputs intact; fails the open unit otherwise. */
int inst_check_memory(const cv_inst *in);
double *read_out(const cv_inst *in, int id);

/* The CPU kernel sets under test: each one this CPU (and MAMBA2C_ISA) allows, widest first
 * (find_isas fills them). */
extern const char *g_isa[4];
extern int g_nisa;
void find_isas(void);

/* The float64 reference results of a case: outputs by id (NULL if absent). */
typedef struct results {
    double *v[NT];
} results;
void results_free(results *r);
/* Forward + backward, memory checks, outputs read back into res. */
int run_case(mamba2_context_t *ctx, cv_inst *in, results *res, int ws_mode);

/* Guarded step tensors. */
typedef struct step_io {
    gt x, out, cache, idx, bias, w;
} step_io;
mamba2_status_t do_step(mamba2_context_t *ctx, step_io *s, int has_idx, int silu);
int step_check_memory(const step_io *s);
void step_free(step_io *s);

/* ============================================================== the other parts === */

/* conv1d_parity.c */
void test_prefill_vs_steps(mamba2_backend_t be, const char *isa, int64_t T, int64_t C_);
void test_split_prefill(mamba2_backend_t be, const char *isa);
void test_varlen_vs_separate(mamba2_backend_t be, const char *isa);
void test_step_indices(mamba2_backend_t be, const char *isa, int T, int i64);
/* conv1d_errors.c */
void test_errors(void);

#endif /* MAMBA2C_TEST_CONV1D_INST_H */
