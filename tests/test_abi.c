/*
 * test_abi.c — the ABI guard (header "ABI"): the version, mamba2_struct_size for every struct
 * id, and the struct_size rule on every options and grads struct of every op: 0 (v1) and the
 * default's sizeof are accepted; too small and too large are INVALID_ARGUMENT naming the
 * struct, before anything is written.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static mamba2_tensor_t tn(void *p, int r, int64_t a, int64_t b, int64_t c, int64_t d) {
    const int64_t s[4] = {a, b, c, d};
    return mamba2_tensor_make(p, MAMBA2_DTYPE_F32, r, s);
}

/* One op on tiny tensors, its struct_size fields given: the options' (so) and the grads'
 * (sg; ops without grads ignore it). */
enum { OP_SSD_FWD, OP_SSD_BWD, OP_SSD_CHUNKED, OP_RMS_FWD, OP_RMS_BWD, OP_CONV_FWD, OP_CONV_BWD,
       OP_CONV_STEP, OP_SSD_STEP, NOPS };
static const char *op_name[NOPS] = {"ssd_forward", "ssd_backward", "ssd_chunk_cumsum",
                                    "rmsnorm_forward", "rmsnorm_backward", "conv1d_forward",
                                    "conv1d_backward", "conv1d_step", "ssd_step"};
static const char *opt_struct[NOPS] = {"mamba2_ssd_options_t", "mamba2_ssd_options_t",
                                       "mamba2_ssd_chunked_options_t",
                                       "mamba2_rmsnorm_gated_options_t",
                                       "mamba2_rmsnorm_gated_options_t",
                                       "mamba2_conv1d_options_t", "mamba2_conv1d_options_t",
                                       "mamba2_conv1d_step_options_t",
                                       "mamba2_ssd_step_options_t"};
static const char *grad_struct[NOPS] = {NULL, "mamba2_ssd_grads_t", NULL, NULL,
                                        "mamba2_rmsnorm_gated_grads_t", NULL,
                                        "mamba2_conv1d_grads_t", NULL, NULL};
static size_t opt_size(int op) {
    switch (op) {
    case OP_SSD_FWD: case OP_SSD_BWD: return sizeof(mamba2_ssd_options_t);
    case OP_SSD_CHUNKED: return sizeof(mamba2_ssd_chunked_options_t);
    case OP_RMS_FWD: case OP_RMS_BWD: return sizeof(mamba2_rmsnorm_gated_options_t);
    case OP_CONV_FWD: case OP_CONV_BWD: return sizeof(mamba2_conv1d_options_t);
    case OP_CONV_STEP: return sizeof(mamba2_conv1d_step_options_t);
    default: return sizeof(mamba2_ssd_step_options_t);
    }
}
static size_t grad_size(int op) {
    return op == OP_SSD_BWD ? sizeof(mamba2_ssd_grads_t)
           : op == OP_RMS_BWD ? sizeof(mamba2_rmsnorm_gated_grads_t)
                              : sizeof(mamba2_conv1d_grads_t);
}

/* out is 4 floats set to 7 before the call; *untouched reports whether they still are */
static mamba2_status_t call(mamba2_context_t *ctx, int op, uint32_t so, uint32_t sg, int *untouched) {
    float x[4] = {1, 2, 3, 4}, dt[2] = {0.1f, 0.2f}, A[1] = {-1}, Bv[2] = {1, 1}, w[4] = {1, 1, 1, 1};
    float out[4] = {7, 7, 7, 7}, dw[4] = {7, 7, 7, 7}, cache[4] = {0, 0, 0, 0};
    mamba2_tensor_t tx = tn(x, 4, 1, 2, 1, 2), tdt = tn(dt, 3, 1, 2, 1, 0), tA = tn(A, 1, 1, 0, 0, 0),
                    tB = tn(Bv, 4, 1, 2, 1, 1), to = tn(out, 4, 1, 2, 1, 2), tdx = to;
    mamba2_status_t st = MAMBA2_STATUS_OK;
    switch (op) {
    case OP_SSD_FWD:
    case OP_SSD_BWD: {
        mamba2_ssd_options_t o = mamba2_ssd_options_default();
        o.struct_size = so;
        mamba2_ssd_grads_t g;
        memset(&g, 0, sizeof g);
        g.struct_size = sg;
        g.dx = &tdx;
        st = op == OP_SSD_FWD
                 ? mamba2_ssd_forward(ctx, &to, NULL, NULL, &tx, &tdt, &tA, &tB, &tB, &o, NULL, 0)
                 : mamba2_ssd_backward(ctx, &g, &tx, NULL, &tx, &tdt, &tA, &tB, &tB, NULL, &o, NULL, 0);
        break;
    }
    case OP_SSD_CHUNKED: {
        mamba2_ssd_chunked_options_t o = mamba2_ssd_chunked_options_default();
        o.struct_size = so;
        o.chunk_size = 2;
        mamba2_tensor_t d1 = tn(out, 4, 1, 1, 1, 2), d2 = tn(out + 2, 4, 1, 1, 1, 2);
        st = mamba2_ssd_chunk_cumsum(ctx, &d1, &d2, &tdt, &tA, &o);
        break;
    }
    case OP_RMS_FWD:
    case OP_RMS_BWD: {
        mamba2_rmsnorm_gated_options_t o = mamba2_rmsnorm_gated_options_default();
        o.struct_size = so;
        mamba2_tensor_t rx = tn(x, 2, 1, 4, 0, 0), ro = tn(out, 2, 1, 4, 0, 0), rw = tn(w, 1, 4, 0, 0, 0),
                        rdw = tn(dw, 1, 4, 0, 0, 0);
        mamba2_rmsnorm_gated_grads_t g;
        memset(&g, 0, sizeof g);
        g.struct_size = sg;
        g.dx = &ro;
        g.dweight = &rdw;
        st = op == OP_RMS_FWD
                 ? mamba2_rmsnorm_gated_forward(ctx, &ro, NULL, &rx, NULL, &rw, NULL, &o, NULL, 0)
                 : mamba2_rmsnorm_gated_backward(ctx, &g, &rx, &rx, NULL, &rw, NULL, NULL, &o, NULL, 0);
        break;
    }
    case OP_CONV_FWD:
    case OP_CONV_BWD: {
        mamba2_conv1d_options_t o = mamba2_conv1d_options_default();
        o.struct_size = so;
        mamba2_tensor_t cx = tn(x, 3, 1, 2, 2, 0), co = tn(out, 3, 1, 2, 2, 0), cw = tn(w, 2, 2, 2, 0, 0),
                        cdw = tn(dw, 2, 2, 2, 0, 0);
        mamba2_conv1d_grads_t g;
        memset(&g, 0, sizeof g);
        g.struct_size = sg;
        g.dx = &co;
        g.dweight = &cdw;
        st = op == OP_CONV_FWD ? mamba2_conv1d_forward(ctx, &co, NULL, &cx, &cw, &o)
                               : mamba2_conv1d_backward(ctx, &g, &cx, NULL, &cx, &cw, &o, NULL, 0);
        break;
    }
    case OP_CONV_STEP: {
        mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
        o.struct_size = so;
        mamba2_tensor_t cx = tn(x, 2, 2, 2, 0, 0), co = tn(out, 2, 2, 2, 0, 0), cw = tn(w, 2, 2, 2, 0, 0),
                        cc = tn(cache, 3, 2, 2, 1, 0);
        st = mamba2_conv1d_step(ctx, &co, &cc, &cx, &cw, &o);
        break;
    }
    case OP_SSD_STEP: {
        mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
        o.struct_size = so;
        mamba2_tensor_t sx = tn(x, 3, 1, 1, 2, 0), so_ = tn(out, 3, 1, 1, 2, 0), sdt = tn(dt, 2, 1, 1, 0, 0),
                        sb = tn(Bv, 3, 1, 1, 1, 0), sc = tn(cache, 4, 1, 1, 2, 1);
        st = mamba2_ssd_step(ctx, &sc, &so_, NULL, &sx, &sdt, &tA, &sb, &sb, &o);
        break;
    }
    }
    *untouched = out[0] == 7 && out[1] == 7 && out[2] == 7 && out[3] == 7 && dw[0] == 7;
    return st;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    th_begin("abi_version");
    th_expect(mamba2_abi_version() == MAMBA2C_ABI_VERSION && MAMBA2C_ABI_VERSION == 1,
              "mamba2_abi_version() = %u, MAMBA2C_ABI_VERSION = %d", mamba2_abi_version(),
              MAMBA2C_ABI_VERSION);
    th_end();

    th_begin("struct_size values");
    const size_t want[13] = {sizeof(mamba2_tensor_t), sizeof(mamba2_ssd_options_t),
                             sizeof(mamba2_ssd_grads_t), sizeof(mamba2_ssd_chunked_options_t),
                             sizeof(mamba2_rmsnorm_gated_options_t),
                             sizeof(mamba2_rmsnorm_gated_grads_t), sizeof(mamba2_conv1d_options_t),
                             sizeof(mamba2_conv1d_grads_t), sizeof(mamba2_conv1d_step_options_t),
                             sizeof(mamba2_ssd_step_options_t), sizeof(mamba2_linear_options_t),
                             sizeof(mamba2_block_step_weights_t),
                             sizeof(mamba2_block_step_options_t)};
    for (int id = 0; id < 13; id++)
        th_expect(mamba2_struct_size((mamba2_struct_id_t)id) == want[id],
                  "mamba2_struct_size(%d) = %zu; sizeof is %zu", id,
                  mamba2_struct_size((mamba2_struct_id_t)id), want[id]);
    th_expect(mamba2_struct_size((mamba2_struct_id_t)13) == 0 &&
                  mamba2_struct_size((mamba2_struct_id_t)-1) == 0,
              "an unknown struct id does not give 0");
    /* the defaults set struct_size to sizeof */
    th_expect(mamba2_ssd_options_default().struct_size == sizeof(mamba2_ssd_options_t) &&
                  mamba2_ssd_chunked_options_default().struct_size == sizeof(mamba2_ssd_chunked_options_t) &&
                  mamba2_rmsnorm_gated_options_default().struct_size ==
                      sizeof(mamba2_rmsnorm_gated_options_t) &&
                  mamba2_conv1d_options_default().struct_size == sizeof(mamba2_conv1d_options_t) &&
                  mamba2_conv1d_step_options_default().struct_size ==
                      sizeof(mamba2_conv1d_step_options_t) &&
                  mamba2_ssd_step_options_default().struct_size == sizeof(mamba2_ssd_step_options_t),
              "a *_options_default() does not set struct_size to sizeof");
    /* struct_size is the first member (the binding relies on it) */
    th_expect(offsetof(mamba2_ssd_options_t, struct_size) == 0 &&
                  offsetof(mamba2_ssd_grads_t, struct_size) == 0 &&
                  offsetof(mamba2_ssd_chunked_options_t, struct_size) == 0,
              "struct_size is not the first member");
    th_end();

    for (int be = 0; be < 2; be++) {
        mamba2_context_t *ctx = th_ctx(be ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU, 1, NULL);
        for (int op = 0; op < NOPS; op++) {
            th_begin("struct_size %s/%s", op_name[op], be ? "ref" : "cpu");
            const uint32_t full = (uint32_t)opt_size(op), gfull = (uint32_t)grad_size(op);
            int un;
            mamba2_status_t st = call(ctx, op, full, gfull, &un);
            th_expect(st == MAMBA2_STATUS_OK, "sizeof: %s", mamba2_last_error());
            st = call(ctx, op, 0, 0, &un);
            th_expect(st == MAMBA2_STATUS_OK, "struct_size 0: %s", mamba2_last_error());
            /* below every v1 size (each struct has a pointer after struct_size), and past
             * sizeof; full - 8 is no longer bad once a struct has grown an appended field */
            const uint32_t bad[3] = {4, 12, full + 8};
            for (int k = 0; k < 3; k++) {
                st = call(ctx, op, bad[k], gfull, &un);
                th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && un &&
                              strstr(mamba2_last_error(), opt_struct[op]) &&
                              strstr(mamba2_last_error(), "struct_size"),
                          "opts struct_size %u: %s, \"%s\"%s", bad[k], mamba2_status_string(st),
                          mamba2_last_error(), un ? "" : ", an output written");
                if (grad_struct[op]) {
                    const uint32_t gb = k == 0 ? 4 : k == 1 ? 12 : gfull + 8;
                    st = call(ctx, op, full, gb, &un);
                    th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && un &&
                                  strstr(mamba2_last_error(), grad_struct[op]) &&
                                  strstr(mamba2_last_error(), "grads"),
                              "grads struct_size %u: %s, \"%s\"", gb, mamba2_status_string(st),
                              mamba2_last_error());
                }
            }
            th_end();
        }
        mamba2_context_destroy(ctx);
    }
    return th_finish();
}
