/*
 * ops_main.c — test_ops: every op's case table on every backend asked for, against the
 * float64 reference (ops.h).
 *
 * Usage: test_ops [--backend LIST] [--op LIST] [-q | -v] [name-substring]
 *   --backend: comma-separated ref, cpu, opencl, cuda, or all (the default: ref, cpu, and the
 *     GPU backends that have a device here). ref runs the reference fed float32 against itself
 *     in float64 (the harness's self-check); cpu the CPU backend; opencl and cuda the GPU
 *     backends (host mode).
 *   --op: comma-separated ops (the default: all of them):
 *     ssd, stages, positions, conv1d, rmsnorm, conv1d_step, ssd_step (each: its case table,
 *     its NaN units and its error table), device (the OpenCL device-memory mode), context
 *     (the OpenCL device selection by MAMBA2C_OPENCL_DEVICE).
 *   name-substring: only the units whose name contains it (e.g. "varlen", "errors").
 * Exit code 77 (ctest SKIP_RETURN_CODE) only when every backend asked for is a GPU backend
 * without a device; with `all`, a missing GPU backend is a note, not a failure.
 * Without MAMBA2C_CUDA_TC the program sets it to 0 (the exact float32 tier); with
 * MAMBA2C_CUDA_TC=1 the CUDA backend runs on the tensor cores, a separate mode with the
 * tf32 tolerances of ops.h. MAMBA2C_TEST_REDUCED=1 (the emulated CUDA device, the AArch64
 * build under qemu): the layer-sized fused SSD case is left out.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

mamba2_context_t *ops_ref, *ops_cpu;
const char *ops_filter;

int ops_selected(const char *case_name) { return !ops_filter || strstr(case_name, ops_filter); }

double *ops_read_all(const th_ssd_io *io, int id, int64_t *n) {
    const mamba2_tensor_t *t = &io->v[id].t;
    const int64_t cnt = th_numel(t->rank, t->shape);
    double *v = th_xmalloc((size_t)(cnt ? cnt : 1) * sizeof(double));
    th_ssd_io_read(io, id, v);
    *n = cnt;
    return v;
}

/* MAMBA2C_OPENCL_DEVICE: an unknown name is BACKEND_UNAVAILABLE with a message naming the
 * variable (and no context); "0" picks the first device. */
static void opencl_context(const ops_be *be) {
    if (be->kind != OB_OPENCL || !ops_selected("context device selection")) return;
    th_begin("context device selection [opencl]");
    setenv("MAMBA2C_OPENCL_DEVICE", "no such device anywhere", 1);
    mamba2_context_t *x = NULL;
    gt_expect_err(mamba2_context_create(&x, MAMBA2_BACKEND_OPENCL, 1),
                  MAMBA2_STATUS_BACKEND_UNAVAILABLE, "MAMBA2C_OPENCL_DEVICE", NULL);
    th_expect(x == NULL, "ctx not NULL after a failed create");
    setenv("MAMBA2C_OPENCL_DEVICE", "0", 1); /* by index: the first device */
    gt_expect_err(mamba2_context_create(&x, MAMBA2_BACKEND_OPENCL, 1), MAMBA2_STATUS_OK, NULL,
                  NULL);
    mamba2_context_destroy(x);
    unsetenv("MAMBA2C_OPENCL_DEVICE");
    th_end();
}

static const struct {
    const char *name;
    void (*run)(const ops_be *be);
} op_table[] = {
    {"ssd", ops_ssd_fused},          {"stages", ops_ssd_stages},
    {"positions", ops_ssd_positions}, {"conv1d", ops_conv1d},
    {"rmsnorm", ops_rmsnorm},        {"conv1d_step", ops_conv1d_step},
    {"ssd_step", ops_ssd_step},      {"device", ops_opencl_device},
    {"context", opencl_context},
};
#define NOPS ((int)(sizeof op_table / sizeof op_table[0]))

static const char *const be_names[OB_N] = {"ref", "cpu", "opencl", "cuda"};

/* Is `word` an item of the comma-separated list? */
static int in_list(const char *list, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, word, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* Every item of the list is one of names[0..n-1] (or "all" when allow_all). */
static int list_valid(const char *list, const char *const *names, int n, int allow_all) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        int ok = allow_all && len == 3 && !strncmp(p, "all", 3);
        for (int i = 0; i < n && !ok; i++)
            ok = strlen(names[i]) == len && !strncmp(p, names[i], len);
        if (!ok) return 0;
        p = e ? e + 1 : NULL;
    }
    return list && *list;
}

/* A GPU context of `kind`, or NULL (with a note) when that backend has no device here. */
static mamba2_context_t *open_gpu(ops_kind kind) {
    mamba2_context_t *ctx = NULL;
    th_begin("context %s", be_names[kind]);
    const mamba2_status_t st = mamba2_context_create(
        &ctx, kind == OB_OPENCL ? MAMBA2_BACKEND_OPENCL : MAMBA2_BACKEND_CUDA, 1);
    if (st == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
        th_expect(mamba2_last_error()[0] != 0, "BACKEND_UNAVAILABLE without a message");
        th_note("unavailable here: %s", mamba2_last_error());
    } else {
        th_expect(st == MAMBA2_STATUS_OK, "%s: %s", mamba2_status_string(st), mamba2_last_error());
    }
    th_end();
    return st == MAMBA2_STATUS_OK ? ctx : NULL;
}

static int usage(void) {
    printf("usage: test_ops [--backend ref|cpu|opencl|cuda|all[,...]] [--op NAME[,...]] [-q|-v] "
           "[name-substring]\nops:");
    for (int i = 0; i < NOPS; i++) printf(" %s", op_table[i].name);
    printf("\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *which = "all", *ops = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
        else if (!strcmp(argv[i], "-v")) th_set_verbose(2);
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--op") && i + 1 < argc) ops = argv[++i];
        else if (argv[i][0] == '-') return usage();
        else ops_filter = argv[i];
    }
    const char *op_names[NOPS];
    for (int i = 0; i < NOPS; i++) op_names[i] = op_table[i].name;
    if (!list_valid(which, be_names, OB_N, 1) || (ops && !list_valid(ops, op_names, NOPS, 0)))
        return usage();
    const int all = in_list(which, "all");
    const char *tc_env = getenv("MAMBA2C_CUDA_TC");
    if (!tc_env || !*tc_env || !strcmp(tc_env, "auto")) setenv("MAMBA2C_CUDA_TC", "0", 1);
    const char *tc = getenv("MAMBA2C_CUDA_TC");
    const int tc_on = tc && !strcmp(tc, "1");

    ops_ref = th_ctx(MAMBA2_BACKEND_REF, 1, NULL);
    ops_cpu = th_ctx(MAMBA2_BACKEND_CPU, 2, NULL);
    ops_be bes[OB_N];
    int nbe = 0, host_asked = 0, gpu_open = 0;
    for (int k = 0; k < OB_N; k++) {
        if (!all && !in_list(which, be_names[k])) continue;
        ops_be b = {(ops_kind)k, be_names[k], NULL, k >= OB_OPENCL, TH_TOL_F32, TH_TOL_F32};
        if (k == OB_REF) b.ctx = ops_ref;
        if (k == OB_CPU) b.ctx = ops_cpu;
        if (b.gpu) b.ctx = open_gpu((ops_kind)k);
        else host_asked = 1;
        if (!b.ctx) continue;
        gpu_open += b.gpu;
        if (k == OB_CUDA && tc_on) {
            b.tol_fwd = TOL_TC_TF32;
            b.tol_grad = TOL_TC_TF32_GRAD;
        }
        bes[nbe++] = b;
    }
    if (!host_asked && !gpu_open) {
        printf("SKIP: no %s device\n", which);
        mamba2_context_destroy(ops_ref);
        mamba2_context_destroy(ops_cpu);
        return 77;
    }
    for (int b = 0; b < nbe; b++) {
        printf("backend %s%s\n", bes[b].name,
               bes[b].tol_fwd != TH_TOL_F32 ? " (tensor cores, tf32: forward outputs, dx, dBm, "
                                              "dCm within 2e-3, a separate mode)"
                                            : "");
        for (int i = 0; i < NOPS; i++)
            if (!ops || in_list(ops, op_table[i].name)) op_table[i].run(&bes[b]);
    }
    for (int b = 0; b < nbe; b++)
        if (bes[b].gpu) mamba2_context_destroy(bes[b].ctx);
    mamba2_context_destroy(ops_ref);
    mamba2_context_destroy(ops_cpu);
    return th_finish();
}
