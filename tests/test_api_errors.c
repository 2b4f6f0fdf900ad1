/*
 * test_api_errors.c — argument validation and the small API surface.
 *
 * Each invalid call must return the documented status (INVALID_ARGUMENT; UNSUPPORTED for a dtype
 * the backend cannot serve; WORKSPACE_TOO_SMALL), leave a non-empty mamba2_last_error() that
 * names the offending argument, and write nothing to any output (header: "On failure nothing has
 * been written to any output"). Valid edge cases (broadcast inputs, size-1 last dims with any
 * stride, NULL data for empty tensors, all-NULL gradients, lo == hi) must succeed. A valid call
 * after all the failures must still give the same result as before them. Also: status strings,
 * contexts, ISA forcing, version, dtype sizes, tensor helpers, per-thread last error.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g

/* ------------------------------------------------------------------ call description --- */
typedef struct args {
    mamba2_context_t *ctx;
    mamba2_tensor_t t[TH_NT];
    int on[TH_NT];
    mamba2_ssd_options_t opts;
    int opts_null, grads_null, wss_null;
    void *ws;
    size_t ws_size;
    th_ssd_io *io; /* whose output buffers must stay untouched on failure */
} args;

static args make_args(th_ssd_io *io, mamba2_context_t *ctx) {
    args a;
    memset(&a, 0, sizeof a);
    a.ctx = ctx;
    a.io = io;
    for (int id = 0; id < TH_NT; id++) {
        a.on[id] = io->v[id].present;
        a.t[id] = io->v[id].t;
    }
    a.opts = io->opts;
    return a;
}

#define TP(a, id) ((a)->on[id] ? &(a)->t[id] : NULL)

static mamba2_ssd_options_t opts_of(args *a) {
    mamba2_ssd_options_t o = a->opts;
    o.D = TP(a, TH_D);
    o.z = TP(a, TH_Z);
    o.dt_bias = TP(a, TH_DTB);
    o.initial_state = TP(a, TH_INIT);
    o.cu_seqlens = TP(a, TH_CU);
    return o;
}

static mamba2_ssd_grads_t grads_of(args *a) {
    mamba2_ssd_grads_t g = {0, TP(a, TH_DX), TP(a, TH_DDT), TP(a, TH_DA), TP(a, TH_DBM), TP(a, TH_DCM),
                            TP(a, TH_DD), TP(a, TH_DZ), TP(a, TH_DDTB), TP(a, TH_DINIT)};
    return g;
}

static mamba2_status_t fwd(args *a) {
    mamba2_ssd_options_t o = opts_of(a);
    return mamba2_ssd_forward(a->ctx, TP(a, TH_OUT), NULL, TP(a, TH_FINAL), TP(a, TH_X), TP(a, TH_DT),
                              TP(a, TH_A), TP(a, TH_BM), TP(a, TH_CM), a->opts_null ? NULL : &o,
                              a->ws, a->ws_size);
}

static mamba2_status_t fwd_wss(args *a, size_t *sz) {
    mamba2_ssd_options_t o = opts_of(a);
    return mamba2_ssd_forward_workspace_size(a->ctx, TP(a, TH_OUT), NULL, TP(a, TH_FINAL), TP(a, TH_X),
                                             TP(a, TH_DT), TP(a, TH_A), TP(a, TH_BM), TP(a, TH_CM),
                                             a->opts_null ? NULL : &o, a->wss_null ? NULL : sz);
}

static mamba2_status_t bwd(args *a) {
    mamba2_ssd_options_t o = opts_of(a);
    mamba2_ssd_grads_t g = grads_of(a);
    return mamba2_ssd_backward(a->ctx, a->grads_null ? NULL : &g, TP(a, TH_DOUT), TP(a, TH_DFINAL),
                               TP(a, TH_X), TP(a, TH_DT), TP(a, TH_A), TP(a, TH_BM), TP(a, TH_CM),
                               NULL, a->opts_null ? NULL : &o, a->ws, a->ws_size);
}

static mamba2_status_t bwd_wss(args *a, size_t *sz) {
    mamba2_ssd_options_t o = opts_of(a);
    mamba2_ssd_grads_t g = grads_of(a);
    return mamba2_ssd_backward_workspace_size(a->ctx, a->grads_null ? NULL : &g, TP(a, TH_DOUT),
                                              TP(a, TH_DFINAL), TP(a, TH_X), TP(a, TH_DT),
                                              TP(a, TH_A), TP(a, TH_BM), TP(a, TH_CM), NULL,
                                              a->opts_null ? NULL : &o, a->wss_null ? NULL : sz);
}

/* Output buffers byte-identical to their pre-call snapshot (i.e. not written at all). */
static int outputs_untouched(const th_ssd_io *io, char *msg, size_t n) {
    for (int i = 0; i < io->nbuf; i++) {
        const th_buf *b = &io->buf[i];
        if (!b->is_output) continue;
        if (memcmp(b->alloc, b->snap, b->bytes + 2 * TH_GUARD) != 0) {
            snprintf(msg, n, "output %s was written by a failing call", b->name);
            return 0;
        }
    }
    return 1;
}

/* names: '|'-separated alternatives; the message must contain one as a whole word. */
static void check_failure(const char *label, mamba2_status_t got, mamba2_status_t want,
                          mamba2_status_t alt, const char *names, const th_ssd_io *io) {
    th_begin("%-52s", label);
    const char *m = mamba2_last_error();
    th_expect(got == want || got == alt, "status %s, expected %s (last error: \"%s\")",
              mamba2_status_string(got), mamba2_status_string(want), m ? m : "(null)");
    th_expect(m && m[0], "mamba2_last_error() is empty after a failing call");
    if (names && m && m[0]) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", names);
        int found = 0;
        for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|")) found |= th_has_word(m, tok);
        th_expect(found, "message \"%s\" does not name %s", m, names);
    }
    char msg[256];
    if (io) th_expect(outputs_untouched(io, msg, sizeof msg), "%s", msg);
    th_note("-> %s: \"%s\"", mamba2_status_string(got), m ? m : "(null)");
    th_end();
}

#define INV MAMBA2_STATUS_INVALID_ARGUMENT
#define UNS MAMBA2_STATUS_UNSUPPORTED
#define WTS MAMBA2_STATUS_WORKSPACE_TOO_SMALL

/* A forward test: mutate a copy of the base arguments with STMT, expect status and names. */
#define FWD_ERR(label, base, want, names, STMT)                                   \
    do {                                                                          \
        args a_ = (base);                                                         \
        args *a = &a_;                                                            \
        (void)a;                                                                  \
        STMT;                                                                     \
        mamba2_status_t st_ = fwd(a);                                             \
        check_failure("forward: " label, st_, want, want, names, a->io);          \
        size_t sz_ = 0;                                                           \
        a->wss_null = 0;                                                          \
        st_ = fwd_wss(a, &sz_);                                                   \
        check_failure("forward_workspace_size: " label, st_, want, want, names, a->io); \
    } while (0)

#define BWD_ERR(label, base, want, names, STMT)                                   \
    do {                                                                          \
        args a_ = (base);                                                         \
        args *a = &a_;                                                            \
        (void)a;                                                                  \
        STMT;                                                                     \
        mamba2_status_t st_ = bwd(a);                                             \
        check_failure("backward: " label, st_, want, want, names, a->io);         \
        size_t sz_ = 0;                                                           \
        a->wss_null = 0;                                                          \
        st_ = bwd_wss(a, &sz_);                                                   \
        check_failure("backward_workspace_size: " label, st_, want, want, names, a->io); \
    } while (0)

/* ---------------------------------------------------------------------------------------- */
static double *read_all(const th_ssd_io *io, int id, int64_t *n) {
    const mamba2_tensor_t *t = &io->v[id].t;
    *n = th_numel(t->rank, t->shape);
    double *v = th_xmalloc((size_t)(*n + 1) * sizeof(double));
    th_ssd_io_read(io, id, v);
    return v;
}

/* compare every output of two runs (same case) with TH_TOL_F32 (or TH_TOL_EXACT) */
static void compare_runs(const th_ssd_io *got, const th_ssd_io *ref, double tol) {
    for (int id = TH_OUT; id < TH_NT; id++) {
        if (!ref->v[id].present || !got->v[id].present) continue;
        int64_t n1, n2;
        double *x = read_all(got, id, &n1), *y = read_all(ref, id, &n2);
        th_metric(th_tname[id], n1 == n2 ? th_nerr(x, y, n1) : NAN, tol);
        free(x);
        free(y);
    }
}

static void run_ok(const char *label, mamba2_context_t *ctx, th_ssd_io *io, int backward) {
    mamba2_status_t st = th_ssd_io_forward(ctx, io, 1);
    if (st == MAMBA2_STATUS_OK && backward) st = th_ssd_io_backward(ctx, io, 1);
    th_expect(st == MAMBA2_STATUS_OK, "%s: %s: %s", label, mamba2_status_string(st), mamba2_last_error());
    char msg[256];
    if (st == MAMBA2_STATUS_OK) th_expect(th_ssd_io_check_memory(io, msg, sizeof msg), "%s: %s", label, msg);
}

/* ----------------------------------------------------------------- per-thread last error --- */
static void *thread_fn(void *arg) {
    char *res = arg;
    const char *m = mamba2_last_error();
    snprintf(res, 256, "%s", m ? m : "(null)");
    /* fail here; must not change the main thread's message */
    mamba2_status_t st = mamba2_ssd_forward(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0);
    (void)st;
    return NULL;
}

/* --------------------------------------------------------------------------------- main --- */
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    mamba2_context_t *cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    mamba2_context_t *ref = th_ctx(MAMBA2_BACKEND_REF, 2, NULL);

    /* ---- small API surface ---- */
    th_begin("status strings");
    {
        const char *s[7];
        for (int i = 0; i <= 6; i++) {
            s[i] = mamba2_status_string((mamba2_status_t)i);
            th_expect(s[i] && s[i][0], "status %d has no string", i);
            for (int j = 0; j < i; j++)
                if (s[i] && s[j]) th_expect(strcmp(s[i], s[j]) != 0, "statuses %d and %d share \"%s\"", i, j, s[i]);
        }
        const char *u = mamba2_status_string((mamba2_status_t)99);
        th_expect(u != NULL && u[0], "unknown status 99 gives NULL/empty");
        th_note("ok=\"%s\" invalid=\"%s\" unsupported=\"%s\" oom=\"%s\" ws=\"%s\" unavailable=\"%s\" internal=\"%s\" 99=\"%s\"",
                s[0], s[1], s[2], s[3], s[4], s[5], s[6], u ? u : "(null)");
    }
    th_end();

    th_begin("version");
    {
        char want[32];
        snprintf(want, sizeof want, "%d.%d.%d", MAMBA2C_VERSION_MAJOR, MAMBA2C_VERSION_MINOR, MAMBA2C_VERSION_PATCH);
        const char *v = mamba2_version_string();
        th_expect(v && !strcmp(v, want), "version \"%s\", header says %s", v ? v : "(null)", want);
    }
    th_end();

    th_begin("dtype sizes");
    th_expect(mamba2_dtype_size(MAMBA2_DTYPE_F32) == 4 && mamba2_dtype_size(MAMBA2_DTYPE_F64) == 8 &&
                  mamba2_dtype_size(MAMBA2_DTYPE_BF16) == 2 && mamba2_dtype_size(MAMBA2_DTYPE_F16) == 2 &&
                  mamba2_dtype_size(MAMBA2_DTYPE_I32) == 4 && mamba2_dtype_size(MAMBA2_DTYPE_I64) == 8 &&
                  mamba2_dtype_size((mamba2_dtype_t)99) == 0,
              "wrong dtype size");
    th_end();

    th_begin("tensor_make / tensor_make_strided");
    {
        float buf[1];
        int64_t sh[4] = {2, 3, 4, 5}, st[4] = {100, 20, 5, 1};
        mamba2_tensor_t t = mamba2_tensor_make(buf, MAMBA2_DTYPE_F32, 4, sh);
        th_expect(t.data == buf && t.dtype == MAMBA2_DTYPE_F32 && t.rank == 4, "fields");
        th_expect(t.stride[0] == 60 && t.stride[1] == 20 && t.stride[2] == 5 && t.stride[3] == 1,
                  "contiguous strides %lld,%lld,%lld,%lld", (long long)t.stride[0], (long long)t.stride[1],
                  (long long)t.stride[2], (long long)t.stride[3]);
        mamba2_tensor_t u = mamba2_tensor_make_strided(buf, MAMBA2_DTYPE_F64, 4, sh, st);
        th_expect(u.stride[0] == 100 && u.stride[1] == 20 && u.shape[3] == 5 && u.dtype == MAMBA2_DTYPE_F64, "strided");
    }
    th_end();

    th_begin("contexts");
    {
        mamba2_context_t *c = NULL;
        th_expect(mamba2_context_create(NULL, MAMBA2_BACKEND_CPU, 1) == INV, "create(NULL) not invalid");
        mamba2_status_t st = mamba2_context_create(&c, (mamba2_backend_t)42, 1);
        th_expect((st == INV || st == MAMBA2_STATUS_BACKEND_UNAVAILABLE) && c == NULL,
                  "create(backend 42) -> %s", mamba2_status_string(st));
        if (c) mamba2_context_destroy(c);
        c = NULL;
        st = mamba2_context_create(&c, MAMBA2_BACKEND_CUDA, 1);
        th_expect(st == MAMBA2_STATUS_OK || st == MAMBA2_STATUS_BACKEND_UNAVAILABLE,
                  "create(CUDA) -> %s", mamba2_status_string(st));
        th_note("CUDA: %s;", mamba2_status_string(st));
        mamba2_context_destroy(c);
        c = NULL;
        st = mamba2_context_create(&c, MAMBA2_BACKEND_CPU, 0);
        th_expect(st == MAMBA2_STATUS_OK && c && mamba2_context_get_num_threads(c) >= 1,
                  "create(CPU, 0 threads)");
        if (c) {
            th_note("default threads %d;", (int)mamba2_context_get_num_threads(c));
            th_expect(mamba2_context_get_backend(c) == MAMBA2_BACKEND_CPU, "get_backend");
            th_expect(mamba2_context_set_num_threads(c, 3) == MAMBA2_STATUS_OK &&
                          mamba2_context_get_num_threads(c) == 3, "set_num_threads(3)");
            th_expect(mamba2_context_set_num_threads(c, -1) == MAMBA2_STATUS_OK &&
                          mamba2_context_get_num_threads(c) >= 1, "set_num_threads(-1)");
            const char *isa = mamba2_context_get_isa(c);
            th_note("default isa %s;", isa ? isa : "(null)");
            int has_avx2 = 0, has_avx512 = 0, has_neon = TH_AARCH64; /* what the library should find */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
            has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
            has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512dq");
#endif
            const char *cap = getenv("MAMBA2C_ISA"); /* caps the level (scalar | avx2) */
            if (cap && !strcmp(cap, "scalar")) has_avx2 = has_avx512 = has_neon = 0;
            if (cap && (!strcmp(cap, "avx2") || !strcmp(cap, "avx2+fma"))) has_avx512 = 0;
            const char *want = has_avx512 ? "avx512" : has_avx2 ? "avx2+fma" : has_neon ? "neon" : 0;
            if (want)
                th_expect(isa && !strcmp(isa, want), "CPU has %s but the default kernel set is %s",
                          want, isa ? isa : "(null)");
            th_expect(mamba2_context_force_isa(c, "bogus") == INV, "force_isa(bogus) not invalid");
            th_expect(mamba2_context_force_isa(c, NULL) == INV, "force_isa(NULL) not invalid");
            th_expect(mamba2_context_force_isa(c, "AVX512") == INV, "force_isa(AVX512) not invalid");
            /* each named set: OK where the CPU has it (get_isa then names it), else UNSUPPORTED */
            static const char *const names[5][2] = {{"avx512", "avx512"}, {"avx2", "avx2+fma"},
                {"avx2+fma", "avx2+fma"}, {"neon", "neon"}, {"scalar", "scalar"}};
            for (int i = 0; i < 5; i++) {
                const int have = i == 0 ? has_avx512 : i < 3 ? has_avx2 : i == 3 ? has_neon : 1;
                const mamba2_status_t fs = mamba2_context_force_isa(c, names[i][0]);
                th_expect(fs == (have ? MAMBA2_STATUS_OK : MAMBA2_STATUS_UNSUPPORTED),
                          "force_isa(%s): %s", names[i][0], mamba2_status_string(fs));
                if (fs != MAMBA2_STATUS_OK) continue;
                isa = mamba2_context_get_isa(c);
                th_expect(isa && !strcmp(isa, names[i][1]), "get_isa after forcing %s: %s",
                          names[i][0], isa ? isa : "(null)");
            }
            th_expect(mamba2_context_force_isa(c, "auto") == MAMBA2_STATUS_OK, "force_isa(auto)");
            isa = mamba2_context_get_isa(c);
            if (want)
                th_expect(isa && !strcmp(isa, want), "get_isa after auto: %s", isa ? isa : "(null)");
            th_expect(mamba2_context_force_isa(c, "scalar") == MAMBA2_STATUS_OK, "force_isa(scalar)");
            isa = mamba2_context_get_isa(c);
            th_expect(isa && !strcmp(isa, "scalar"), "get_isa after forcing scalar: %s", isa ? isa : "(null)");
        }
        mamba2_context_destroy(c);
        th_expect(mamba2_context_force_isa(NULL, "scalar") == INV, "force_isa(NULL ctx)");
        th_expect(mamba2_context_set_num_threads(NULL, 1) == INV, "set_num_threads(NULL ctx)");
        mamba2_context_destroy(NULL);
        th_expect(mamba2_context_get_backend(ref) == MAMBA2_BACKEND_REF, "ref get_backend");
    }
    th_end();

    /* ---- the base problem: B=2, L=64, H=8, P=4, N=16, G=4, every option ---- */
    th_ssd_case bc = {"base", SH(2, 64, 8, 4, 16, 16, 4), .D_mode = 1, .z = 1, .dt_bias = 1,
                      .softplus = 1, .limit = 1, .lo = 0.001, .hi = 1.0, .init = 1, .final = 1, .dfinal = 1};
    th_ssd_data bd;
    th_ssd_data_make(&bd, &bc);
    th_ssd_io io, io0, io64;
    th_ssd_io_make(&io, &bc, &bd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);  /* mutated by failing calls? never */
    th_ssd_io_make(&io0, &bc, &bd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG); /* first valid result   */
    th_ssd_io_make(&io64, &bc, &bd, MAMBA2_DTYPE_F64, TH_LAYOUT_CONTIG);
    th_begin("valid base call (CPU forward+backward)");
    run_ok("base", cpu, &io0, 1);
    th_end();
    args A0 = make_args(&io, cpu);   /* CPU, float32 */
    args R0 = make_args(&io, ref);   /* reference, float32 */
    args R64 = make_args(&io64, ref);
    args C64 = make_args(&io64, cpu);

    /* rank */
    FWD_ERR("x rank 3", A0, INV, "x", a->t[TH_X].rank = 3);
    FWD_ERR("dt rank 2", A0, INV, "dt", a->t[TH_DT].rank = 2);
    FWD_ERR("A rank 2 [H,1]", A0, INV, "A", (a->t[TH_A].rank = 2, a->t[TH_A].shape[1] = 1, a->t[TH_A].stride[1] = 1));
    FWD_ERR("Bm rank 3", A0, INV, "Bm", a->t[TH_BM].rank = 3);
    FWD_ERR("Cm rank 5", A0, INV, "Cm", (a->t[TH_CM].rank = 5, a->t[TH_CM].shape[4] = 1, a->t[TH_CM].stride[4] = 1));
    FWD_ERR("out rank 3", A0, INV, "out", a->t[TH_OUT].rank = 3);
    FWD_ERR("x rank 7 (> MAMBA2_MAX_RANK)", A0, INV, "x", a->t[TH_X].rank = 7);
    FWD_ERR("x rank -1", A0, INV, "x", a->t[TH_X].rank = -1);
    FWD_ERR("D rank 3", A0, INV, "D", (a->t[TH_D].rank = 3, a->t[TH_D].shape[1] = 1, a->t[TH_D].shape[2] = 1,
                                       a->t[TH_D].stride[1] = 1, a->t[TH_D].stride[2] = 1));
    /* shape */
    FWD_ERR("Cm [2,64,3,16] with G=4", A0, INV, "Cm", a->t[TH_CM].shape[2] = 3);
    FWD_ERR("H % G != 0: Bm, Cm [2,64,3,16] with H=8", A0, INV, "G|H|Bm|Cm",
            (a->t[TH_BM].shape[2] = 3, a->t[TH_CM].shape[2] = 3));
    FWD_ERR("Bm N=15 vs Cm N=16", A0, INV, "Bm|Cm", a->t[TH_BM].shape[3] = 15);
    FWD_ERR("dt L=63", A0, INV, "dt", a->t[TH_DT].shape[1] = 63);
    FWD_ERR("dt H=7", A0, INV, "dt", a->t[TH_DT].shape[2] = 7);
    FWD_ERR("Bm B=1", A0, INV, "Bm", a->t[TH_BM].shape[0] = 1);
    FWD_ERR("out P=3", A0, INV, "out", a->t[TH_OUT].shape[3] = 3);
    FWD_ERR("A [7]", A0, INV, "A", a->t[TH_A].shape[0] = 7);
    FWD_ERR("D [7]", A0, INV, "D", a->t[TH_D].shape[0] = 7);
    /* [8,3] as a broadcast view (stride 0 over H) so a wrong acceptance cannot read out of bounds */
    FWD_ERR("D [8,3] with P=4", A0, INV, "D", (a->t[TH_D].rank = 2, a->t[TH_D].shape[1] = 3,
                                               a->t[TH_D].stride[0] = 0, a->t[TH_D].stride[1] = 1));
    FWD_ERR("z P=3", A0, INV, "z", a->t[TH_Z].shape[3] = 3);
    FWD_ERR("dt_bias [4]", A0, INV, "dt_bias", a->t[TH_DTB].shape[0] = 4);
    FWD_ERR("initial_state [2,8,4,15]", A0, INV, "initial_state", a->t[TH_INIT].shape[3] = 15);
    FWD_ERR("initial_state [1,8,4,16]", A0, INV, "initial_state", a->t[TH_INIT].shape[0] = 1);
    FWD_ERR("final_state [1,8,4,16]", A0, INV, "final_state", a->t[TH_FINAL].shape[0] = 1);
    FWD_ERR("x L = -1", A0, INV, "x", a->t[TH_X].shape[1] = -1);
    /* NULL arguments */
    FWD_ERR("x NULL", A0, INV, "x", a->on[TH_X] = 0);
    FWD_ERR("dt NULL", A0, INV, "dt", a->on[TH_DT] = 0);
    FWD_ERR("A NULL", A0, INV, "A", a->on[TH_A] = 0);
    FWD_ERR("Bm NULL", A0, INV, "Bm", a->on[TH_BM] = 0);
    FWD_ERR("Cm NULL", A0, INV, "Cm", a->on[TH_CM] = 0);
    FWD_ERR("out NULL", A0, INV, "out", a->on[TH_OUT] = 0);
    FWD_ERR("ctx NULL", A0, INV, "ctx|context", a->ctx = NULL);
    FWD_ERR("x data NULL (nonzero size)", A0, INV, "x", a->t[TH_X].data = NULL);
    FWD_ERR("Cm data NULL (nonzero size)", A0, INV, "Cm", a->t[TH_CM].data = NULL);
    FWD_ERR("out data NULL (nonzero size)", A0, INV, "out", a->t[TH_OUT].data = NULL);
    FWD_ERR("initial_state data NULL", A0, INV, "initial_state", a->t[TH_INIT].data = NULL);
    {
        args a_ = A0;
        size_t sz = 0;
        a_.wss_null = 1;
        mamba2_status_t st = fwd_wss(&a_, NULL);
        check_failure("forward_workspace_size: workspace_size NULL", st, INV, INV, "workspace_size", &io);
        (void)sz;
        st = bwd_wss(&a_, NULL);
        check_failure("backward_workspace_size: workspace_size NULL", st, INV, INV, "workspace_size", &io);
    }
    /* strides */
    FWD_ERR("x last-dim stride 2", A0, INV, "x", a->t[TH_X].stride[3] = 2);
    FWD_ERR("Bm last-dim stride 2", A0, INV, "Bm", a->t[TH_BM].stride[3] = 2);
    FWD_ERR("dt last-dim stride 0", A0, INV, "dt", a->t[TH_DT].stride[2] = 0);
    FWD_ERR("A stride 2", A0, INV, "A", a->t[TH_A].stride[0] = 2);
    FWD_ERR("out last-dim stride 2", A0, INV, "out", a->t[TH_OUT].stride[3] = 2);
    FWD_ERR("x negative stride (dim 1)", A0, INV, "x", a->t[TH_X].stride[1] = -a->t[TH_X].stride[1]);
    FWD_ERR("Cm negative stride (dim 0)", A0, INV, "Cm", a->t[TH_CM].stride[0] = -a->t[TH_CM].stride[0]);
    FWD_ERR("out stride 0 (broadcast output)", A0, INV, "out", a->t[TH_OUT].stride[1] = 0);
    FWD_ERR("final_state stride 0 (broadcast output)", A0, INV, "final_state", a->t[TH_FINAL].stride[0] = 0);
    /* overlap */
    FWD_ERR("out aliases x", A0, INV, "out|x", a->t[TH_OUT].data = a->t[TH_X].data);
    FWD_ERR("out overlaps x (offset 5 elements)", A0, INV, "out|x",
            a->t[TH_OUT].data = (float *)a->t[TH_X].data + 5);
    FWD_ERR("out aliases z", A0, INV, "out|z", a->t[TH_OUT].data = a->t[TH_Z].data);
    FWD_ERR("final_state aliases initial_state", A0, INV, "final_state|initial_state",
            a->t[TH_FINAL].data = a->t[TH_INIT].data);
    /* options */
    FWD_ERR("dt_limit lo > hi", A0, INV, "dt_limit", (a->opts.dt_limit_lo = 0.1, a->opts.dt_limit_hi = 0.05));
    FWD_ERR("dt_limit lo NaN", A0, INV, "dt_limit", a->opts.dt_limit_lo = NAN);
    FWD_ERR("dt_limit hi NaN", A0, INV, "dt_limit", a->opts.dt_limit_hi = NAN);
    FWD_ERR("chunk_size 0", A0, INV, "chunk_size", a->opts.chunk_size = 0);
    FWD_ERR("chunk_size -3", A0, INV, "chunk_size", a->opts.chunk_size = -3);
    /* dtypes */
    /* bf16/f16 storage: every activation in one half dtype, parameters and states f32 */
    FWD_ERR("BF16 activations with a BF16 A (CPU)", A0, INV, "A",
            (a->t[TH_X].dtype = a->t[TH_DT].dtype = a->t[TH_BM].dtype = a->t[TH_CM].dtype =
                 a->t[TH_Z].dtype = a->t[TH_OUT].dtype = a->t[TH_A].dtype = MAMBA2_DTYPE_BF16));
    FWD_ERR("BF16 activations with a BF16 A (reference)", R0, INV, "A",
            (a->t[TH_X].dtype = a->t[TH_DT].dtype = a->t[TH_BM].dtype = a->t[TH_CM].dtype =
                 a->t[TH_Z].dtype = a->t[TH_OUT].dtype = a->t[TH_A].dtype = MAMBA2_DTYPE_BF16));
    FWD_ERR("F16 activations with an F16 A (CPU)", A0, INV, "A",
            (a->t[TH_X].dtype = a->t[TH_DT].dtype = a->t[TH_BM].dtype = a->t[TH_CM].dtype =
                 a->t[TH_Z].dtype = a->t[TH_OUT].dtype = a->t[TH_A].dtype = MAMBA2_DTYPE_F16));
    FWD_ERR("x BF16, the other activations F32 (CPU)", A0, INV, "x|dt|Bm|Cm|z|out",
            a->t[TH_X].dtype = MAMBA2_DTYPE_BF16);
    FWD_ERR("F64 tensors on the CPU backend", C64, UNS, "x|dt|Bm|Cm|z|out|A", (void)0);
    FWD_ERR("x F64, rest F32 (reference)", R0, INV, "x|dt|Bm|Cm|z|out",
            (a->t[TH_X] = io64.v[TH_X].t));
    FWD_ERR("A F64 with F32 activations (reference)", R0, INV, "A", (a->t[TH_A] = io64.v[TH_A].t));
    FWD_ERR("final_state F64 with F32 activations", A0, INV, "final_state",
            (a->t[TH_FINAL] = io64.v[TH_FINAL].t, a->io = &io64));
    FWD_ERR("initial_state F32 with F64 activations (reference)", R64, INV, "initial_state",
            (a->t[TH_INIT] = io.v[TH_INIT].t));
    {
        args a_ = A0;
        a_.t[TH_X].dtype = MAMBA2_DTYPE_I32;
        mamba2_status_t st = fwd(&a_);
        check_failure("forward: x I32", st, INV, UNS, "x", &io);
        a_ = A0;
        a_.t[TH_X].dtype = (mamba2_dtype_t)99;
        st = fwd(&a_);
        check_failure("forward: x unknown dtype 99", st, INV, INV, "x", &io);
    }

    /* ---- backward ---- */
    BWD_ERR("dout NULL", A0, INV, "dout", a->on[TH_DOUT] = 0);
    BWD_ERR("grads NULL", A0, INV, "grads", a->grads_null = 1);
    BWD_ERR("dout P=3", A0, INV, "dout", a->t[TH_DOUT].shape[3] = 3);
    BWD_ERR("dfinal_state [2,8,4,15]", A0, INV, "dfinal_state", a->t[TH_DFINAL].shape[3] = 15);
    BWD_ERR("dx P=3", A0, INV, "dx", a->t[TH_DX].shape[3] = 3);
    BWD_ERR("dA rank 2", A0, INV, "dA", (a->t[TH_DA].rank = 2, a->t[TH_DA].shape[1] = 1, a->t[TH_DA].stride[1] = 1));
    BWD_ERR("dCm [2,64,3,16]", A0, INV, "dCm", a->t[TH_DCM].shape[2] = 3);
    BWD_ERR("dD [2,4] while D is [8]", A0, INV, "dD",
            (a->t[TH_DD].rank = 2, a->t[TH_DD].shape[0] = 2, a->t[TH_DD].shape[1] = 4, a->t[TH_DD].stride[0] = 4,
             a->t[TH_DD].stride[1] = 1));
    BWD_ERR("dD requested without D", A0, INV, "dD", a->on[TH_D] = 0);
    BWD_ERR("dz requested without z", A0, INV, "dz", a->on[TH_Z] = 0);
    BWD_ERR("ddt_bias requested without dt_bias", A0, INV, "ddt_bias", a->on[TH_DTB] = 0);
    BWD_ERR("dinitial_state requested without initial_state", A0, INV, "dinitial_state", a->on[TH_INIT] = 0);
    BWD_ERR("dx aliases dout", A0, INV, "dx|dout", a->t[TH_DX].data = a->t[TH_DOUT].data);
    BWD_ERR("dz overlaps dout (offset 3)", A0, INV, "dz|dout", a->t[TH_DZ].data = (float *)a->t[TH_DOUT].data + 3);
    BWD_ERR("dBm aliases Bm", A0, INV, "dBm|Bm", a->t[TH_DBM].data = a->t[TH_BM].data);
    BWD_ERR("ddt aliases dt", A0, INV, "ddt|dt", a->t[TH_DDT].data = a->t[TH_DT].data);
    BWD_ERR("dinitial_state aliases dfinal_state", A0, INV, "dinitial_state|dfinal_state",
            a->t[TH_DINIT].data = a->t[TH_DFINAL].data);
    BWD_ERR("dx last-dim stride 2", A0, INV, "dx", a->t[TH_DX].stride[3] = 2);
    BWD_ERR("dx data NULL (nonzero size)", A0, INV, "dx", a->t[TH_DX].data = NULL);
    BWD_ERR("Cm [2,64,3,16] with G=4", A0, INV, "Cm", a->t[TH_CM].shape[2] = 3);
    BWD_ERR("dt_limit lo > hi", A0, INV, "dt_limit", (a->opts.dt_limit_lo = 1.0, a->opts.dt_limit_hi = 0.5));
    BWD_ERR("chunk_size 0", A0, INV, "chunk_size", a->opts.chunk_size = 0);
    BWD_ERR("F64 tensors on the CPU backend", C64, UNS, "x|dt|Bm|Cm|z|out|A|dout|dx", (void)0);
    BWD_ERR("ctx NULL", A0, INV, "ctx|context", a->ctx = NULL);

    /* ---- cu_seqlens (varlen base: B = 1, 3 sequences) ---- */
    th_ssd_case vc = {"varlen_base", SH(1, 0, 8, 4, 16, 16, 4), .nseq = 3, .seqlen = {20, 1, 43},
                      .D_mode = 1, .z = 1, .init = 1, .final = 1, .dfinal = 1};
    th_ssd_data vd;
    th_ssd_data_make(&vd, &vc);
    th_ssd_io vio;
    th_ssd_io_make(&vio, &vc, &vd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    th_begin("valid varlen base call");
    run_ok("varlen base", cpu, &vio, 1);
    th_end();
    th_ssd_io_reset_outputs(&vio);
    args V0 = make_args(&vio, cpu);
    static int32_t cu_nonmono[4] = {0, 30, 20, 64}, cu_start1[4] = {1, 21, 22, 64},
                   cu_end63[4] = {0, 20, 21, 63}, cu_end65[4] = {0, 20, 21, 65};
    static int64_t cu_neg64[4] = {0, -1, 21, 64};
    static float cu_f32[4] = {0.f, 20.f, 21.f, 64.f};
    int64_t cu_shape[1] = {4}, cu_shape2[2] = {1, 4};
    FWD_ERR("cu_seqlens non-monotone {0,30,20,64}", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_nonmono, MAMBA2_DTYPE_I32, 1, cu_shape));
    FWD_ERR("cu_seqlens not starting at 0 {1,21,22,64}", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_start1, MAMBA2_DTYPE_I32, 1, cu_shape));
    FWD_ERR("cu_seqlens ending at 63 != L", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_end63, MAMBA2_DTYPE_I32, 1, cu_shape));
    FWD_ERR("cu_seqlens ending at 65 != L", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_end65, MAMBA2_DTYPE_I32, 1, cu_shape));
    FWD_ERR("cu_seqlens int64 negative entry", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_neg64, MAMBA2_DTYPE_I64, 1, cu_shape));
    FWD_ERR("cu_seqlens float32", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_f32, MAMBA2_DTYPE_F32, 1, cu_shape));
    FWD_ERR("cu_seqlens rank 2", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_nonmono, MAMBA2_DTYPE_I32, 2, cu_shape2));
    FWD_ERR("cu_seqlens data NULL", V0, INV, "cu_seqlens", a->t[TH_CU].data = NULL);
    FWD_ERR("initial_state [1,...] with 3 sequences", V0, INV, "initial_state", a->t[TH_INIT].shape[0] = 1);
    FWD_ERR("final_state [1,...] with 3 sequences", V0, INV, "final_state", a->t[TH_FINAL].shape[0] = 1);
    {
        static int32_t cu_b2[3] = {0, 32, 64};
        int64_t s3[1] = {3};
        FWD_ERR("cu_seqlens with B = 2", A0, INV, "cu_seqlens|B|x",
                (a->t[TH_CU] = mamba2_tensor_make(cu_b2, MAMBA2_DTYPE_I32, 1, s3), a->on[TH_CU] = 1,
                 a->t[TH_INIT].shape[0] = 2));
    }
    BWD_ERR("cu_seqlens non-monotone", V0, INV, "cu_seqlens",
            a->t[TH_CU] = mamba2_tensor_make(cu_nonmono, MAMBA2_DTYPE_I32, 1, cu_shape));
    BWD_ERR("dinitial_state [1,...] with 3 sequences", V0, INV, "dinitial_state", a->t[TH_DINIT].shape[0] = 1);

    /* ---- workspace too small ---- */
    for (int be = 0; be < 2; be++) {
        args base = be ? R0 : A0;
        const char *bn = be ? "reference" : "CPU";
        for (int dir = 0; dir < 2; dir++) {
            args a = base;
            size_t need = 0;
            mamba2_status_t st = dir ? bwd_wss(&a, &need) : fwd_wss(&a, &need);
            char label[128];
            snprintf(label, sizeof label, "%s %s: workspace one byte short", bn, dir ? "backward" : "forward");
            if (st != MAMBA2_STATUS_OK) {
                th_begin("%-52s", label);
                th_fail("workspace query failed: %s: %s", mamba2_status_string(st), mamba2_last_error());
                th_end();
                continue;
            }
            if (need == 0) {
                th_begin("%-52s", label);
                th_note("needs no workspace: not testable");
                th_end();
                continue;
            }
            unsigned char *w = th_xmalloc(need);
            a.ws = w;
            a.ws_size = need - 1;
            st = dir ? bwd(&a) : fwd(&a);
            check_failure(label, st, WTS, WTS, "workspace|workspace_size", &io);
            snprintf(label, sizeof label, "%s %s: workspace non-NULL, size 0", bn, dir ? "backward" : "forward");
            a.ws_size = 0;
            st = dir ? bwd(&a) : fwd(&a);
            check_failure(label, st, WTS, WTS, "workspace|workspace_size", &io);
            free(w);
        }
    }

    /* ---- per-thread last error ---- */
    th_begin("last error is per thread");
    {
        args a = A0;
        a.t[TH_CM].shape[2] = 3;
        (void)fwd(&a);
        char mine[256], theirs[256];
        snprintf(mine, sizeof mine, "%s", mamba2_last_error());
        pthread_t th;
        if (pthread_create(&th, NULL, thread_fn, theirs) == 0) {
            pthread_join(th, NULL);
            th_expect(theirs[0] == 0, "a new thread sees \"%s\" instead of \"\"", theirs);
            th_expect(!strcmp(mine, mamba2_last_error()), "another thread's failure changed this thread's message");
        } else {
            th_fail("pthread_create failed");
        }
    }
    th_end();

    /* ---- valid edge cases ---- */
    th_begin("valid: NULL opts (= defaults)");
    {
        th_ssd_case dc = {"defaults", SH(2, 20, 4, 4, 8, 256, 2)};
        th_ssd_data dd;
        th_ssd_data_make(&dd, &dc);
        th_ssd_io x1, x2;
        th_ssd_io_make(&x1, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        th_ssd_io_make(&x2, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        run_ok("default options", cpu, &x1, 1);
        args a = make_args(&x2, cpu);
        a.opts_null = 1;
        mamba2_status_t st = fwd(&a);
        if (st == MAMBA2_STATUS_OK) st = bwd(&a);
        if (st == MAMBA2_STATUS_OK) {
            th_note("accepted;");
            compare_runs(&x2, &x1, TH_TOL_EXACT);
        } else {
            th_expect(st == INV && th_has_word(mamba2_last_error(), "opts"),
                      "NULL opts: %s: \"%s\" (expected OK, or INVALID naming opts)", mamba2_status_string(st),
                      mamba2_last_error());
            th_note("rejected: \"%s\"", mamba2_last_error());
        }
        th_ssd_io_free(&x1);
        th_ssd_io_free(&x2);
        th_ssd_data_free(&dd);
    }
    th_end();

    th_begin("valid: broadcast inputs (dt stride 0 over B, Bm stride 0 over L)");
    {
        th_ssd_case dc = {"bcast", SH(2, 24, 4, 4, 8, 8, 2), .D_mode = 1, .final = 1};
        th_ssd_data dd;
        th_ssd_data_make(&dd, &dc);
        /* materialise what the broadcast views read: dt[1] = dt[0], Bm[b,t] = Bm[b,0] */
        int64_t LH = dd.L * dd.H, GN = dd.G * dd.N;
        for (int64_t i = 0; i < LH; i++) dd.v[TH_DT][LH + i] = dd.v[TH_DT][i];
        for (int64_t b = 0; b < dd.B; b++)
            for (int64_t t = 1; t < dd.L; t++)
                memcpy(dd.v[TH_BM] + (b * dd.L + t) * GN, dd.v[TH_BM] + b * dd.L * GN, (size_t)GN * sizeof(double));
        th_ssd_io full, bc_;
        th_ssd_io_make(&full, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        th_ssd_io_make(&bc_, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        run_ok("materialised", cpu, &full, 1);
        bc_.v[TH_DT].t.stride[0] = 0;
        bc_.v[TH_BM].t.stride[1] = 0;
        mamba2_status_t st = th_ssd_io_forward(cpu, &bc_, 1);
        if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(cpu, &bc_, 1);
        th_expect(st == MAMBA2_STATUS_OK, "broadcast: %s: %s", mamba2_status_string(st), mamba2_last_error());
        if (st == MAMBA2_STATUS_OK) compare_runs(&bc_, &full, TH_TOL_F32);
        th_ssd_io_free(&full);
        th_ssd_io_free(&bc_);
        th_ssd_data_free(&dd);
    }
    th_end();

    th_begin("valid: size-1 last dims with stride != 1 (P = N = 1)");
    {
        th_ssd_case dc = {"p1n1", SH(1, 10, 2, 1, 1, 4, 1), .final = 1};
        th_ssd_data dd;
        th_ssd_data_make(&dd, &dc);
        th_ssd_io c1, c2;
        th_ssd_io_make(&c1, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        th_ssd_io_make(&c2, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        run_ok("contiguous", cpu, &c1, 1);
        /* only the size-1 dims get bogus strides: the element addresses are unchanged */
        static const int ids4[] = {TH_X, TH_BM, TH_CM, TH_OUT, TH_DOUT, TH_DX, TH_DBM, TH_DCM, TH_FINAL};
        for (int k = 0; k < 9; k++) {
            c2.v[ids4[k]].t.stride[3] = 3 + k;
            if (ids4[k] == TH_FINAL) c2.v[ids4[k]].t.stride[2] = 5;
        }
        mamba2_status_t st = th_ssd_io_forward(cpu, &c2, 1);
        if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(cpu, &c2, 1);
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
        if (st == MAMBA2_STATUS_OK) compare_runs(&c2, &c1, TH_TOL_F32);
        th_ssd_io_free(&c1);
        th_ssd_io_free(&c2);
        th_ssd_data_free(&dd);
    }
    th_end();

    th_begin("valid: L = 0 with NULL data for the empty tensors");
    {
        th_ssd_case dc = {"l0null", SH(2, 0, 2, 4, 4, 8, 1), .z = 1, .init = 1, .final = 1, .dfinal = 1};
        th_ssd_data dd;
        th_ssd_data_make(&dd, &dc);
        th_ssd_io e;
        th_ssd_io_make(&e, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        static const int empty[] = {TH_X, TH_DT, TH_BM, TH_CM, TH_Z, TH_OUT, TH_DOUT, TH_DX, TH_DDT, TH_DBM, TH_DCM, TH_DZ};
        for (size_t k = 0; k < sizeof empty / sizeof empty[0]; k++) e.v[empty[k]].t.data = NULL;
        mamba2_status_t st = th_ssd_io_forward(cpu, &e, 1);
        if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(cpu, &e, 0);
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
        if (st == MAMBA2_STATUS_OK) {
            int64_t n;
            double *f = read_all(&e, TH_FINAL, &n), *g = read_all(&e, TH_DINIT, &n);
            th_metric("final-init", th_nerr(f, dd.v[TH_INIT], n), TH_TOL_EXACT);
            th_metric("dinit-dfinal", th_nerr(g, dd.v[TH_DFINAL], n), TH_TOL_EXACT);
            free(f);
            free(g);
        }
        th_ssd_io_free(&e);
        th_ssd_data_free(&dd);
    }
    th_end();

    th_begin("valid: out interleaved with inputs, element-disjoint");
    {
        /* one buffer, row = x | out | Bm | Cm | dt: out's address range overlaps the inputs'
         * but no element is shared, so this is not an overlap */
        th_ssd_case dc = {"inter", SH(2, 20, 2, 3, 4, 8, 1)};
        th_ssd_data dd;
        th_ssd_data_make(&dd, &dc);
        th_ssd_io ci;
        th_ssd_io_make(&ci, &dc, &dd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        run_ok("contiguous", cpu, &ci, 0);
        int64_t B = dd.B, L = dd.L, H = dd.H, P = dd.P, N = dd.N, HP = H * P;
        int64_t W = 2 * HP + 2 * N + H, total = B * L * W;
        float *buf = th_xmalloc((size_t)total * sizeof(float));
        for (int64_t i = 0; i < total; i++) buf[i] = NAN;
        int64_t shx[4] = {B, L, H, P}, stx[4] = {L * W, W, P, 1};
        int64_t shb[4] = {B, L, 1, N}, stb[4] = {L * W, W, N, 1};
        int64_t sht[3] = {B, L, H}, stt[3] = {L * W, W, 1};
        mamba2_tensor_t x = mamba2_tensor_make_strided(buf, MAMBA2_DTYPE_F32, 4, shx, stx);
        mamba2_tensor_t o = mamba2_tensor_make_strided(buf + HP, MAMBA2_DTYPE_F32, 4, shx, stx);
        mamba2_tensor_t bm = mamba2_tensor_make_strided(buf + 2 * HP, MAMBA2_DTYPE_F32, 4, shb, stb);
        mamba2_tensor_t cm = mamba2_tensor_make_strided(buf + 2 * HP + N, MAMBA2_DTYPE_F32, 4, shb, stb);
        mamba2_tensor_t dt = mamba2_tensor_make_strided(buf + 2 * HP + 2 * N, MAMBA2_DTYPE_F32, 3, sht, stt);
        th_tensor_scatter(&x, dd.v[TH_X]);
        th_tensor_scatter(&bm, dd.v[TH_BM]);
        th_tensor_scatter(&cm, dd.v[TH_CM]);
        th_tensor_scatter(&dt, dd.v[TH_DT]);
        mamba2_status_t st = mamba2_ssd_forward(cpu, &o, NULL, NULL, &x, &dt, &ci.v[TH_A].t, &bm, &cm,
                                                &ci.opts, NULL, 0);
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
        if (st == MAMBA2_STATUS_OK) {
            int64_t n = B * L * HP;
            double *got = th_xmalloc((size_t)n * sizeof(double)), *want = th_xmalloc((size_t)n * sizeof(double));
            double *xin = th_xmalloc((size_t)n * sizeof(double));
            th_tensor_gather(&o, got);
            th_ssd_io_read(&ci, TH_OUT, want);
            th_metric("out", th_nerr(got, want, n), TH_TOL_F32);
            th_tensor_gather(&x, xin);
            th_metric("x unchanged", th_nerr(xin, dd.v[TH_X], n), TH_TOL_EXACT);
            free(got);
            free(want);
            free(xin);
        }
        free(buf);
        th_ssd_io_free(&ci);
        th_ssd_data_free(&dd);
    }
    th_end();

    th_begin("valid: backward with every gradient NULL");
    {
        args a = A0;
        for (int id = TH_DX; id <= TH_DINIT; id++) a.on[id] = 0;
        mamba2_status_t st = bwd(&a);
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
        char msg[256];
        th_expect(outputs_untouched(&io, msg, sizeof msg), "%s", msg);
    }
    th_end();

    th_begin("valid: dt_limit lo == hi");
    {
        args a = A0;
        a.opts.dt_limit_lo = a.opts.dt_limit_hi = 0.05;
        mamba2_status_t st = fwd(&a);
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
        th_ssd_io_reset_outputs(&io);
    }
    th_end();

    th_begin("valid: varlen with one sequence == plain B = 1");
    {
        th_ssd_case c1 = {"one", SH(1, 0, 4, 4, 8, 8, 2), .nseq = 1, .seqlen = {37}, .D_mode = 1, .z = 1,
                          .init = 1, .final = 1, .dfinal = 1};
        th_ssd_data d1;
        th_ssd_data_make(&d1, &c1);
        th_ssd_case c2 = c1;
        c2.nseq = 0;
        th_ssd_io i1, i2;
        th_ssd_io_make(&i1, &c1, &d1, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        th_ssd_io_make(&i2, &c2, &d1, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        run_ok("varlen", cpu, &i1, 1);
        run_ok("plain", cpu, &i2, 1);
        compare_runs(&i1, &i2, TH_TOL_F32);
        th_ssd_io_free(&i1);
        th_ssd_io_free(&i2);
        th_ssd_data_free(&d1);
    }
    th_end();

    /* ---- after all the failures, a valid call still works and gives the same result ---- */
    th_begin("valid call after the failures == first valid call");
    {
        th_ssd_io again;
        th_ssd_io_make(&again, &bc, &bd, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
        run_ok("again", cpu, &again, 1);
        char msg[256];
        th_expect(th_ssd_io_outputs_equal(&again, &io0, msg, sizeof msg), "%s", msg);
        th_ssd_io_free(&again);
    }
    th_end();

    th_ssd_io_free(&vio);
    th_ssd_data_free(&vd);
    th_ssd_io_free(&io);
    th_ssd_io_free(&io0);
    th_ssd_io_free(&io64);
    th_ssd_data_free(&bd);
    mamba2_context_destroy(cpu);
    mamba2_context_destroy(ref);
    return th_finish();
}
