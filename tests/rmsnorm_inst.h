/*
 * rmsnorm_inst.h — the shared part of test_rmsnorm (test_rmsnorm.c, rmsnorm_api.c,
 * rmsnorm_bench.c): one gated-RMSNorm problem (rcase), its logical data (rdata), and an
 * instance of it as guarded library tensors (inst: guard bytes around every buffer, gaps of
 * strided views and Mamba-2 in_proj views checked, inputs checked unchanged, outputs pre-filled
 * with NaN), the calls with an exactly sized workspace, and the results read back (res).
 */
#ifndef MAMBA2C_TEST_RMSNORM_INST_H
#define MAMBA2C_TEST_RMSNORM_INST_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"

/* ------------------------------------------------------------------ guarded buffers --- */

#define MAXBUF 16

typedef struct gbuf {
    unsigned char *alloc, *data, *mask, *snap;
    size_t bytes;
    int is_out;
} gbuf;

typedef struct inst {
    int nbuf;
    gbuf b[MAXBUF];
    mamba2_dtype_t dt;
    /* tensors; .data == NULL when absent */
    mamba2_tensor_t x, z, w, bias, out, rstd, dout, dx, dz, dw, db;
} inst;

int buf_new(inst *I, size_t bytes, int is_out);
/* A rank-1 or rank-2 view into buffer `bi` at element offset off, row stride ld. */
mamba2_tensor_t view(inst *I, int bi, int64_t off, int rank, int64_t rows, int64_t cols, int64_t ld);
/* Own buffer for a [rows, cols] tensor with row stride cols + pad (rank 1 when rows < 0). */
mamba2_tensor_t own(inst *I, int is_out, int64_t rows, int64_t cols, int64_t pad);
/* Outputs back to NaN (payload) / guard pattern (gaps), inputs snapshotted. */
void arm(inst *I);
/* Guards and gaps intact, inputs unchanged. */
int mem_ok(const inst *I, char *msg, size_t n);
/* Payload bytes of every output buffer equal? */
int outs_equal(const inst *a, const inst *b, char *msg, size_t n);
void inst_free(inst *I);

#define T(t) ((t).data || (t).rank ? &(t) : NULL)

/* ------------------------------------------------------------------------- cases --- */

typedef struct rcase {
    const char *name;
    int64_t M, D, S; /* S = group_size (0 = D) */
    int z, bias, nbg;
    int layout;      /* 0: own buffers with row padding `pad`; 1: Mamba-2 in_proj views */
    int64_t pad;
    double eps;
    uint64_t seed;
} rcase;

/* Logical data of one case (row-major doubles, already float32-rounded). */
typedef struct rdata {
    double *x, *z, *w, *b, *dout;
} rdata;

double f32r(double v);
void data_make(rdata *d, const rcase *c);
void data_free(rdata *d);
int64_t groups_of(const rcase *c);
/* layout 0: own buffers with row padding c->pad; 1: Mamba-2 in_proj views (z | x in one row) */
void inst_make(inst *I, const rcase *c, const rdata *d, mamba2_dtype_t dt, int layout);
mamba2_rmsnorm_gated_options_t opts_of(const rcase *c);
/* ws_mode 0: NULL workspace (library allocates); 1: exactly the queried size, guarded tail */
mamba2_status_t call_fwd(mamba2_context_t *ctx, inst *I, const rcase *c, int want_rstd, int ws_mode);
mamba2_status_t call_bwd(mamba2_context_t *ctx, inst *I, const rcase *c, int use_rstd, int ws_mode);

/* Results of one run, gathered to row-major doubles. */
enum { R_OUT, R_RSTD, R_DX, R_DZ, R_DW, R_DB, R_N };
extern const char *const rname[R_N];

typedef struct res {
    double *v[R_N];
    int64_t n[R_N];
} res;

void res_read(res *r, const inst *I);
void res_free(res *r);
/* Full forward (with rstd) + backward (rstd reused or not) on one instance. */
int run_both(mamba2_context_t *ctx, inst *I, const rcase *c, int use_rstd, int ws_mode);

/* ------------------------------------------------------------- the other parts --- */

/* rmsnorm_api.c: invalid arguments (the api_* units) */
void test_api(mamba2_context_t *cpu, mamba2_context_t *ref);
/* rmsnorm_bench.c: `test_rmsnorm --bench [threads]` */
int bench(int32_t nthreads);

#endif /* MAMBA2C_TEST_RMSNORM_INST_H */
