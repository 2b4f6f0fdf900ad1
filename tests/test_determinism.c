/*
 * test_determinism.c — bitwise reproducibility (header: "Results are bitwise identical for every
 * thread count"; SPEC §2: fixed-order reductions, no float atomics).
 *
 * For each case and each kernel set, forward then backward run on contexts with 1, 2, 3 and 7
 * threads, twice on the same context, and once after mamba2_context_set_num_threads; every output
 * and gradient buffer (payload, gaps and guards) must be byte-identical to the 1-thread run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g
#define ALL_OPTS .z = 1, .dt_bias = 1, .softplus = 1, .limit = 1, .lo = 0.02, .hi = 0.08, \
                 .init = 1, .final = 1, .dfinal = 1

static th_ssd_case cases[] = {
    {"det_G2_H8_all", SH(2, 130, 8, 16, 32, 32, 2), .D_mode = 1, ALL_OPTS},
    {"det_varlen7_all", SH(1, 0, 6, 8, 16, 16, 3), .nseq = 7, .seqlen = {33, 1, 60, 5, 1, 70, 20},
     .D_mode = 2, ALL_OPTS},
    {"det_varlen3_i64_G1", SH(1, 0, 4, 8, 8, 8, 1), .nseq = 3, .seqlen = {40, 1, 25}, .cu64 = 1,
     .init = 1, .final = 1, .dfinal = 1},
    {"det_G_eq_H_plain", SH(3, 100, 4, 8, 16, 64, 4)},
    {"det_large_G2", SH(1, 384, 8, 32, 64, 64, 2), .D_mode = 1, .z = 1, .final = 1},
    {"det_view_zxbcdt_all", SH(2, 70, 4, 6, 10, 16, 2), .D_mode = 2, ALL_OPTS,
     .layout = TH_LAYOUT_ZXBCDT},
    {"det_view_headmajor_all", SH(2, 70, 6, 64, 64, 16, 3), .D_mode = 2, ALL_OPTS,
     .layout = TH_LAYOUT_HEADMAJOR},
    /* long sequences, few heads: the CPU backend's chunk-parallel split (fixed by the
     * problem, not the thread count) */
    {"det_chunked_L6200_H3", SH(1, 6200, 3, 8, 8, 64, 3), .D_mode = 1, ALL_OPTS},
    /* the AVX-512 kernel set's shapes (P >= 64, or P = 32 with N >= 64) where the CPU has it */
    {"det_wide_P64_varlen_all", SH(1, 0, 4, 64, 20, 16, 2), .nseq = 3, .seqlen = {90, 1, 41},
     .D_mode = 2, ALL_OPTS},
    {"det_wide_chunked_P64_L4200", SH(1, 4200, 2, 64, 16, 64, 2), .D_mode = 1, ALL_OPTS},
    /* the backward's AVX-512 shapes (N >= 64): a group split across head sets, strong decay */
    {"det_wide_N64_G3_H9_all", SH(2, 130, 9, 16, 64, 32, 3), .D_mode = 1, ALL_OPTS},
    {"det_wide_N65_strong", SH(2, 150, 6, 5, 65, 32, 3), .D_mode = 2, .z = 1, .dt_bias = 1,
     .softplus = 1, .init = 1, .final = 1, .dfinal = 1, .dt_mode = TH_DT_LARGE},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const int32_t threads[] = {1, 2, 3, 7};
#define NTHR ((int)(sizeof threads / sizeof threads[0]))

static int run(mamba2_context_t *ctx, th_ssd_io *io) {
    th_ssd_io_reset_outputs(io);
    mamba2_status_t st = th_ssd_io_forward(ctx, io, 1);
    if (st == MAMBA2_STATUS_OK) st = th_ssd_io_backward(ctx, io, 1);
    if (st != MAMBA2_STATUS_OK) {
        th_fail("returned %s: %s", mamba2_status_string(st), mamba2_last_error());
        return 0;
    }
    char msg[256];
    return th_expect(th_ssd_io_check_memory(io, msg, sizeof msg), "%s", msg);
}

static void same(const th_ssd_io *a, const th_ssd_io *b, const char *what) {
    char msg[256];
    if (!th_ssd_io_outputs_equal(a, b, msg, sizeof msg)) th_fail("%s: %s", what, msg);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    struct {
        mamba2_backend_t be;
        const char *isa;
        mamba2_dtype_t dt;
    } kinds[4] = {{MAMBA2_BACKEND_CPU, NULL, MAMBA2_DTYPE_F32},
                  {MAMBA2_BACKEND_CPU, "avx2", MAMBA2_DTYPE_F32},
                  {MAMBA2_BACKEND_CPU, "scalar", MAMBA2_DTYPE_F32},
                  {MAMBA2_BACKEND_REF, NULL, MAMBA2_DTYPE_F64}};
    /* the AVX2 set forced only where the default is wider (AVX-512); else it is the default */
    mamba2_context_t *probe = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    const int wide = strcmp(mamba2_context_get_isa(probe), "avx512") == 0;
    mamba2_context_destroy(probe);
    const int default_scalar = th_cpu_default_isa_is("scalar");
    /* reduced (emulated) runs: threads {1, 3} only, and not the reference backend (the same
     * C on every target) */
    static const int32_t threads_reduced[] = {1, 3};
    const int32_t *thr = th_reduced() ? threads_reduced : threads;
    const int nthr = th_reduced() ? 2 : NTHR, nkind = th_reduced() ? 3 : 4;
    for (int k = 0; k < nkind; k++) {
        if (k == 1 && !wide) continue;
        if (k == 2 && default_scalar) continue; /* the default kind ran it */
        mamba2_context_t *ctx[NTHR];
        for (int t = 0; t < nthr; t++) ctx[t] = th_ctx(kinds[k].be, thr[t], kinds[k].isa);
        char label[64];
        snprintf(label, sizeof label, "%s[%s]", kinds[k].be == MAMBA2_BACKEND_REF ? "ref" : "cpu",
                 kinds[k].be == MAMBA2_BACKEND_REF ? "f64" : mamba2_context_get_isa(ctx[0]));
        for (int ci = 0; ci < NCASES; ci++) {
            th_ssd_case c = cases[ci];
            /* the reference is slow: only the smaller cases */
            if (kinds[k].be == MAMBA2_BACKEND_REF && ci >= 4) continue;
            th_ssd_data d;
            th_ssd_data_make(&d, &c);
            th_begin("%-22s %-16s", c.name, label);
            th_ssd_io base, other;
            th_ssd_io_make(&base, &c, &d, kinds[k].dt, c.layout);
            th_ssd_io_make(&other, &c, &d, kinds[k].dt, c.layout);
            if (run(ctx[0], &base)) {
                if (run(ctx[0], &other)) same(&base, &other, "repeat on the same context");
                for (int t = 1; t < nthr; t++) {
                    char what[64];
                    snprintf(what, sizeof what, "%d threads vs 1", (int)thr[t]);
                    if (run(ctx[t], &other)) same(&base, &other, what);
                    if (run(ctx[t], &other)) same(&base, &other, "repeat");
                }
                mamba2_status_t st = mamba2_context_set_num_threads(ctx[0], 2);
                th_expect(st == MAMBA2_STATUS_OK && mamba2_context_get_num_threads(ctx[0]) == 2,
                          "set_num_threads(2): %s, get_num_threads = %d", mamba2_status_string(st),
                          (int)mamba2_context_get_num_threads(ctx[0]));
                if (run(ctx[0], &other)) same(&base, &other, "after set_num_threads(2)");
                mamba2_context_set_num_threads(ctx[0], 1);
            }
            th_note("threads {1,%s}, repeats, set_num_threads: %s", th_reduced() ? "3" : "2,3,7",
                    th_unit_failed() ? "DIFFER" : "bitwise identical");
            th_ssd_io_free(&base);
            th_ssd_io_free(&other);
            th_ssd_data_free(&d);
            th_end();
        }
        for (int t = 0; t < nthr; t++) mamba2_context_destroy(ctx[t]);
    }
    return th_finish();
}
