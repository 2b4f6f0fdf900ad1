/*
 * fuzz.h — the mamba2c fuzz harness: one fuzz input decodes into one call (or, for the
 * context op, a short sequence of calls) of a public entry point of include/mamba2c.h.
 *
 * Input layout (bytes past the end read as 0, so every prefix is a valid input):
 *   [0] op (mod M2F_NOPS)   [1] backend bit 0 (cpu/ref), threads bits 1-2, isa bits 3-4,
 *       bit 5 OpenCL (when m2f_init enabled it)
 *   [2] workspace mode bits 0-2, value mode bits 3-4, activation dtype bits 5-6
 *   [3..4] PRNG seed   [5..16] twelve problem dims d[]   [17..20] four option flag bytes f[]
 *   then 4-byte records {target, kind, a, b} (M2F_REC_* below): hostile shapes, strides,
 *   dtypes, NULL pointers, aliasing between tensors, hostile option values, huge dims.
 * The op builders (fuzz_ops.c) derive every tensor of a valid call from d[] and f[]; the
 * records then break it. The engine (fuzz_engine.c) places each tensor in a buffer of
 * exactly its extent, fills it, calls the entry point and checks the contract.
 */
#ifndef MAMBA2C_FUZZ_H
#define MAMBA2C_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "mamba2c.h"

#define M2F_MAX_SLOTS 24
#define M2F_MAX_RECS 48
#define M2F_MAX_IDX 512

/* tensor roles */
enum { M2F_IN = 0, M2F_OUT = 1, M2F_INOUT = 2, M2F_IDX = 3 };
/* value classes of tame fills: any sign in [-1,1], [-1,0], [0,1]; and the SSD inputs of SPEC
 * §8's accuracy contract, drawn from its distribution when the value mode is 1 (uniform with
 * the same ranges or spreads: dt U(0.01,0.11), A -U(0.1,0.5), Bm / Cm / states / dt_bias
 * scaled to the spread of N(0,1)/5 and 0.1 N(0,1)) and as ANY / NONPOS / ANY / ANY in mode 0 */
enum { M2F_V_ANY = 0, M2F_V_NONPOS = 1, M2F_V_NONNEG = 2, M2F_V_SPEC_DT = 3, M2F_V_SPEC_A = 4,
       M2F_V_SPEC_SMALL = 5, M2F_V_SPEC_BIAS = 6 };

/* ops */
enum {
    M2F_SSD_FWD = 0, M2F_SSD_FWD_STATES, M2F_SSD_BWD, M2F_RMS_FWD, M2F_RMS_BWD, M2F_CONV_FWD,
    M2F_CONV_BWD, M2F_CONV_STEP, M2F_SSD_STEP, M2F_CUMSUM, M2F_BMM, M2F_CSTATE, M2F_PASSING,
    M2F_CSCAN, M2F_CONTEXT, M2F_NOPS
};

/* record targets >= 0xF0 are global; others select a tensor slot (mod slot count) */
enum {
    M2F_REC_GLOBAL = 0xF0, /* kind: M2F_G_* */
    M2F_REC_OPTION = 0xF1, /* kind: option field (M2F_O_*), a: value index */
    M2F_REC_DIM = 0xF2     /* kind: problem dim index, a: huge-value index */
};
enum { M2F_G_CTX_NULL = 0, M2F_G_OPTS_NULL, M2F_G_GRADS_NULL, M2F_G_WS_NULL_SIZE, M2F_G_NKINDS };
enum {
    M2F_O_CHUNK = 0, M2F_O_DT_LO, M2F_O_DT_HI, M2F_O_SOFTPLUS, M2F_O_EPS, M2F_O_GROUP,
    M2F_O_NBG, M2F_O_ACT, M2F_O_STRUCT_SIZE, M2F_O_NKINDS
};
/* tensor record kinds */
enum {
    M2F_T_RANK = 0, M2F_T_SHAPE_BIG, M2F_T_SHAPE_DELTA, M2F_T_STRIDE_BIG, M2F_T_STRIDE_DELTA,
    M2F_T_PAD, M2F_T_DTYPE, M2F_T_NULL_DATA, M2F_T_ABSENT, M2F_T_ALIAS, M2F_T_BROADCAST,
    M2F_T_SWAP_STRIDES, M2F_T_MISALIGN, M2F_T_IDX_VALUE, M2F_T_PRESENT, M2F_T_NKINDS
};

typedef struct m2f_slot {
    const char *name;
    int role, vclass, present;
    mamba2_tensor_t t;
    int host;         /* slot whose buffer holds this tensor (itself unless aliased)  */
    int64_t alias_off;/* element offset inside the host tensor's placement           */
    int null_data, misalign;
    int detached;     /* carried by an options/grads struct the case passes as NULL    */
    int64_t nidx;     /* index tensors: values idx[0..nidx) (the rest: PRNG)          */
    int64_t idx[M2F_MAX_IDX];
    /* computed by the engine */
    int bad;          /* shape/stride/rank not enumerable (refusal expected)          */
    int big;          /* over the harness caps: never given real memory               */
    int64_t numel, lo, hi; /* element count; byte extent [lo, hi) relative to data    */
    uint8_t *buf;     /* host buffer (host slots only) and its size                   */
    size_t bufsz;
    uint8_t *snap;
    int64_t place;    /* byte offset of data inside the host buffer                   */
} m2f_slot;

typedef struct m2f_case {
    const uint8_t *in;
    size_t n, pos;
    int op, backend, threads, isa, wsmode, vmode, tame;
    mamba2_dtype_t adt, pdt, idt;
    uint8_t d[12], f[4];
    uint64_t rng;
    int64_t dim[12];
    int nrec;
    uint8_t rec[M2F_MAX_RECS][4];
    int gflag[M2F_G_NKINDS];
    int oset[M2F_O_NKINDS];
    uint8_t oval[M2F_O_NKINDS];
    m2f_slot s[M2F_MAX_SLOTS];
    int ns;
    int has_query;
    int any_big;
    int struct_bad; /* an options/grads struct of the call has an invalid struct_size */
} m2f_case;

/* PRNG (splitmix64) and value tables, shared with the seed generator */
uint64_t m2f_rand(m2f_case *c);
extern const int64_t m2f_big_values[16];
extern const int64_t m2f_big_strides[16];

/* slot helpers for the op builders */
int m2f_add(m2f_case *c, const char *name, int role, mamba2_dtype_t dt, int rank,
            const int64_t *shape);
#define M2F_SHAPE(...) ((const int64_t[]){__VA_ARGS__})
/* a + b saturated to the int64 range (sizes from M2F_REC_DIM records may be INT64_MIN/MAX) */
static inline int64_t m2f_sadd(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}
/* the descriptor of slot i, or NULL when absent */
const mamba2_tensor_t *m2f_t(m2f_case *c, int i);
/* option value (a double / an int64) overridden by an M2F_REC_OPTION record, else dflt */
double m2f_opt_d(m2f_case *c, int field, double dflt);
int64_t m2f_opt_i(m2f_case *c, int field, int64_t dflt);

/* the struct_size to put in an options/grads struct whose sizeof is `real` and whose v1
 * fields end at byte v1_end (the library takes 0 or v1_end..real): real, or a hostile value
 * from an M2F_O_STRUCT_SIZE record (then c->struct_bad notes whether the library must
 * refuse it) */
uint32_t m2f_struct_size(m2f_case *c, size_t real, size_t v1_end);
#ifdef MAMBA2C_ABI_VERSION
/* a struct whose last v1 field ends within its last 8 bytes (all but the one below) */
#define M2F_SET_SIZE(c, st) ((st).struct_size = m2f_struct_size((c), sizeof(st), sizeof(st) - 7))
/* a struct that grew after v1: its v1 fields end with `last` */
#define M2F_SET_SIZE_V1(c, st, last)                                                             \
    ((st).struct_size =                                                                        \
         m2f_struct_size((c), sizeof(st), (size_t)((char *)&(st).last - (char *)&(st)) +       \
                                              sizeof((st).last)))
#else
#define M2F_SET_SIZE(c, st) ((void)0)
#define M2F_SET_SIZE_V1(c, st, last) ((void)0)
#endif

/* per-op: build the slots of a valid call from c->dim / c->f; call the entry point.
 * query != NULL: run the op's workspace query (if it has one) into *query. */
typedef struct m2f_op {
    const char *name;
    void (*dims)(m2f_case *c);  /* c->d -> c->dim (before M2F_REC_DIM records) */
    void (*build)(m2f_case *c); /* c->dim, c->f -> slots                      */
    mamba2_status_t (*call)(m2f_case *c, mamba2_context_t *ctx, size_t *query, void *ws,
                            size_t ws_size);
    /* after a successful call: unmark bytes the op must leave alone (padding rows,
     * unreferenced cache slots) from the writable mask. May be NULL. */
    void (*untouched)(m2f_case *c, uint8_t **mask);
    int has_query; /* 1: has a workspace query; 2: one that sees only some tensors */
} m2f_op;
extern const m2f_op *const m2f_ops[M2F_NOPS];
extern const m2f_op m2f_op_ssd_fwd, m2f_op_ssd_fwd_states, m2f_op_ssd_bwd, m2f_op_ssd_step,
    m2f_op_cumsum, m2f_op_bmm, m2f_op_cstate, m2f_op_passing, m2f_op_cscan;

/* the context op: a sequence of context calls (fuzz_ops.c) */
void m2f_context_ops(m2f_case *c);
/* shared by the op files */
int64_t m2f_divisor_of(int64_t h, int k);
void m2f_opt_slot(m2f_case *c, int i, int on);
void m2f_grad_slot(m2f_case *c, int i, int on);
void m2f_fill_cu(m2f_case *c, int i, int64_t nseq, int64_t L);
void m2f_fill_slots(m2f_case *c, int i, int64_t B, int64_t S, int pad);
void m2f_step_untouched(m2f_case *c, uint8_t **mask, int cache, int ix, int64_t B,
                        const int *outs, int nouts);

/* engine */
int m2f_run(const uint8_t *data, size_t size);
/* once per process, from the environment: M2FUZZ_GPU=opencl or cuda (input byte [1] bit 5
 * then runs the call on one OpenCL or CUDA context; M2FUZZ_GPU_ALL=1: every input's call, as the
 * replays of the corpus do) and M2FUZZ_DIFF=1 (the differential mode, fuzz_diff.c) */
void m2f_init(void);
/* fuzz_diff.c: is the accepted call a clean one; then run it on ref and compare outputs */
int m2f_diff_eligible(const m2f_case *c);
void m2f_differential(m2f_case *c, mamba2_context_t *ref);
extern int m2f_last_accepted; /* the last m2f_run's call succeeded (for the seed generator) */
/* calls so far: run on the GPU context, accepted there, checked against the reference (all, GPU) */
typedef struct m2f_counts {
    long gpu_calls, gpu_accepted, compared, gpu_compared;
} m2f_counts;
extern m2f_counts m2f_count;
void m2f_fail(m2f_case *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3), noreturn))
#endif
    ;
/* element byte offsets of a tensor (relative to data), in index order; returns count */
int64_t m2f_elems(const mamba2_tensor_t *t, int64_t *out, int64_t cap);
uint8_t m2f_byte(m2f_case *c);
/* for untouched hooks: clear the mask bytes of every element of slot i whose first index is
 * v (a padding row, an unreferenced cache slot) */
void m2f_unmark_row(m2f_case *c, uint8_t **mask, int i, int64_t v);
/* for untouched hooks: slot i may be written but is exempt from the finiteness check */
#define M2F_EXEMPT 0xFF
void m2f_exempt(m2f_case *c, uint8_t **mask, int i);
/* value of index slot i at position k (what the engine wrote there) */
int64_t m2f_idx_value(m2f_case *c, int i, int64_t k);

#endif /* MAMBA2C_FUZZ_H */
