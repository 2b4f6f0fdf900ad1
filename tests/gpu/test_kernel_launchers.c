/*
 * test_kernel_launchers.c — the typed launchers of the GPU host layer
 * (<build>/gpu_launch/<file>.h, generated from the kernel prototypes by
 * cmake/kernel_launchers.cmake) compiled and run on a recording device (an m2g_dev whose
 * launch keeps what it is given). No GPU needed.
 *   - a launcher puts named fields into the argument list in prototype order: a tensor field
 *     as buffer, offset and the prototype's count of strides; scalars with their kinds;
 *   - the work-group shape comes from the kernel's name, dynamic shared bytes pass through;
 *   - M2G_LAUNCH_AS with a twin of the same parameter list reaches the twin's id, and one with
 *     a different list is refused by the launch check before the device sees it.
 */
#include <string.h>

#include "gpu/gpu.h"
#include "gpu_launch/ssd_bwd.h"
#include "gpu_launch/ssd_chunked.h"
#include "gpu_launch/ssd_tc.h"
#include "gpu_launch/ssd_tc_bwd.h"
#include "harness.h"

static struct {
    int n, id, nargs;
    size_t groups[3], local[3], smem;
    m2g_arg args[M2G_MAX_ARGS];
} rec;

static mamba2_status_t rec_launch(m2g_dev *d, int id, const size_t groups[3],
                                  const size_t local[3], size_t smem, int nargs,
                                  const m2g_arg *args) {
    (void)d;
    rec.n++;
    rec.id = id;
    rec.nargs = nargs;
    rec.smem = smem;
    memcpy(rec.groups, groups, sizeof rec.groups);
    memcpy(rec.local, local, sizeof rec.local);
    memcpy(rec.args, args, (size_t)nargs * sizeof *args);
    return MAMBA2_STATUS_OK;
}

/* the recorded argument i is (kind, value) */
static int arg_is(int i, m2g_arg_kind kind, double v) {
    const m2g_arg *a = &rec.args[i];
    if (i >= rec.nargs || a->kind != kind) return 0;
    switch (kind) {
    case M2G_ARG_MEM: return a->v.mem == (m2g_mem)v;
    case M2G_ARG_I64: return a->v.i64 == (int64_t)v;
    case M2G_ARG_I32: return a->v.i32 == (int32_t)v;
    default: return a->v.f32 == (float)v;
    }
}
/* a tensor at argument i: buffer, offset, then ns strides */
static int tensor_is(int i, const m2g_t *t, int ns) {
    int ok = arg_is(i, M2G_ARG_MEM, (double)t->mem) && arg_is(i + 1, M2G_ARG_I64, (double)t->off);
    for (int k = 0; k < ns; k++) ok &= arg_is(i + 2 + k, M2G_ARG_I64, (double)t->s[k]);
    return ok;
}
static m2g_t tensor(m2g_mem mem, int64_t off, int64_t s0) {
    return (m2g_t){.mem = mem, .off = off, .s = {s0, s0 + 1, s0 + 2, s0 + 3, s0 + 4}, .present = 1};
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    m2g_dev d;
    memset(&d, 0, sizeof d);
    d.api = "recorder";
    d.launch = rec_launch;

    th_begin("m2_ssd_chunk_cumsum_wi64 by name");
    {
        const m2g_t dt = tensor(11, 100, 1000), A = tensor(12, 200, 0), bias = tensor(13, 300, 0);
        const m2g_t dto = tensor(14, 400, 2000), dac = tensor(15, 500, 3000);
        /* fields in an order unlike the prototype's: the launcher puts them right */
        const mamba2_status_t st = M2G_LAUNCH(
            &d, m2_ssd_chunk_cumsum_wi64, M2G_GRID(7, 1, 1), .dac = dac, .dto = dto, .hi = 2.5f,
            .lo = 0.25f, .softplus = 1, .has_bias = 1, .bias = bias, .A = A, .dt_ty = 2, .dt = dt,
            .Q = 64, .H = 3, .nc = 9, .ct = 10);
        th_expect(st == MAMBA2_STATUS_OK && rec.n == 1, "launch: %s", mamba2_last_error());
        th_expect(rec.id == M2G_K_m2_ssd_chunk_cumsum_wi64 && rec.nargs == 27, "id %d, %d args",
                  rec.id, rec.nargs);
        th_expect(arg_is(0, M2G_ARG_MEM, 10) && arg_is(1, M2G_ARG_I64, 9) &&
                      arg_is(2, M2G_ARG_I64, 3) && arg_is(3, M2G_ARG_I64, 64),
                  "ct, nc, H, Q");
        th_expect(tensor_is(4, &dt, 2) && arg_is(8, M2G_ARG_I32, 2) && tensor_is(9, &A, 0) &&
                      tensor_is(11, &bias, 0),
                  "dt (2 strides), dt_ty, A, bias (none)");
        th_expect(arg_is(13, M2G_ARG_I32, 1) && arg_is(14, M2G_ARG_I32, 1) &&
                      arg_is(15, M2G_ARG_F32, 0.25) && arg_is(16, M2G_ARG_F32, 2.5),
                  "has_bias, softplus, lo, hi");
        th_expect(tensor_is(17, &dto, 3) && tensor_is(22, &dac, 3), "dto, dac (3 strides)");
        th_expect(rec.local[0] == 64 && rec.local[1] == 1 && rec.local[2] == 1 &&
                      rec.groups[0] == 7 && rec.smem == 0,
                  "work-group %zux%zux%zu, grid %zu, smem %zu", rec.local[0], rec.local[1],
                  rec.local[2], rec.groups[0], rec.smem);
    }
    th_end();

    th_begin("m2_ssd_bwd_E_16x16 and its tensor-core twin");
    {
        const m2g_t dac = tensor(21, 1, 0), dy = tensor(22, 2, 10), x = tensor(23, 3, 20);
        const m2g_t E = tensor(24, 4, 0);
        mamba2_status_t st = M2G_LAUNCH(&d, m2_ssd_bwd_E_16x16, M2G_GRID(16, 2, 3), .ct = 20,
                                        .nc = 3, .Q = 64, .H = 2, .P = 8, .dac = dac, .dy = dy,
                                        .x = x, .E = E);
        th_expect(st == MAMBA2_STATUS_OK && rec.nargs == 20 && tensor_is(5, &dac, 0) &&
                      tensor_is(7, &dy, 3) && tensor_is(12, &x, 3) && arg_is(17, M2G_ARG_I32, 0) &&
                      tensor_is(18, &E, 0),
                  "portable: %s", mamba2_last_error());
        th_expect(rec.local[0] == 16 && rec.local[1] == 16 && rec.local[2] == 1, "16x16 group");
        st = M2G_LAUNCH_AS(&d, M2G_K_m2_ssd_bwd_E_3xtf32_tc128, m2_ssd_bwd_E_16x16,
                           M2G_GRID(3, 2, 1), 0, .ct = 20, .nc = 3, .Q = 64, .H = 2, .P = 8,
                           .dac = dac, .dy = dy, .x = x, .E = E);
        th_expect(st == MAMBA2_STATUS_OK && rec.id == M2G_K_m2_ssd_bwd_E_3xtf32_tc128 &&
                      rec.local[0] == 128 && rec.local[1] == 1,
                  "twin: id %d, group %zu: %s", rec.id, rec.local[0], mamba2_last_error());
        const int before = rec.n;
        st = M2G_LAUNCH_AS(&d, M2G_K_m2_ssd_bwd_dx_tf32_tc128, m2_ssd_bwd_E_16x16,
                           M2G_GRID(3, 2, 1), 0, .ct = 20, .nc = 3, .Q = 64, .H = 2, .P = 8,
                           .dac = dac, .dy = dy, .x = x, .E = E);
        th_expect(st == MAMBA2_STATUS_INTERNAL_ERROR && rec.n == before &&
                      strstr(mamba2_last_error(), "m2_ssd_bwd_dx_tf32_tc128"),
                  "a kernel of another parameter list refused: status %d, '%s'", (int)st,
                  mamba2_last_error());
    }
    th_end();

    th_begin("m2_ssd_scan_seq_bf16_tc128 (macro parameter list), dynamic shared memory");
    {
        const m2g_t t = tensor(31, 5, 50);
        const mamba2_status_t st = M2G_LAUNCH_AS(
            &d, M2G_K_m2_ssd_scan_seq_bf16_tc128, m2_ssd_scan_seq_bf16_tc128, M2G_GRID(1, 2, 3),
            70000, .ct = 1, .st = 2, .H = 2, .G = 1, .P = 64, .N = 128, .x = t, .x_ty = 1, .dto = t,
            .dac = t, .Bm = t, .Cm = t, .D = t, .D_mode = 1, .z = t, .has_z = 0, .init = t,
            .has_init = 1, .out = t, .ox = t, .has_ox = 0, .fin = t, .has_final = 1);
        th_expect(st == MAMBA2_STATUS_OK && rec.nargs == 70 && rec.smem == 70000 &&
                      arg_is(0, M2G_ARG_MEM, 1) && arg_is(1, M2G_ARG_MEM, 2) &&
                      tensor_is(6, &t, 3) && arg_is(11, M2G_ARG_I32, 1) &&
                      arg_is(69, M2G_ARG_I32, 1),
                  "%d args, smem %zu: %s", rec.nargs, rec.smem, mamba2_last_error());
    }
    th_end();

    return th_finish();
}
