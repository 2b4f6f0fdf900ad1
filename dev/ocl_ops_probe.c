/*
 * ocl_ops_probe.c — standalone check of the conv1d / rmsnorm / step GPU kernels on any
 * OpenCL device (PoCL here) without the library's OpenCL backend: builds the kernel sources with
 * src/gpu/kernels/common.h (or the header named by argv[1]), runs them on host arrays copied into
 * whole buffers, and compares with the float64 reference backend through the public API.
 *
 *   gcc -O1 -Iinclude dev/ocl_ops_probe.c build/libmamba2c.a -lOpenCL -lm -lpthread \
 *       -o build/ocl_ops_probe && ./build/ocl_ops_probe
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mamba2c.h"

static cl_context cctx;
static cl_command_queue cq;
static cl_program prog;
static int fails, checks;
static cl_mem dummy;
static size_t cdiv(int64_t a, int64_t b) { return (size_t)((a + b - 1) / b); }

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

static cl_mem up(const void *p, size_t bytes) {
    if (!p) return NULL;
    cl_int e;
    cl_mem m = clCreateBuffer(cctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)p, &e);
    if (e) { fprintf(stderr, "buffer %d\n", e); exit(1); }
    return m;
}
static void down(cl_mem m, void *p, size_t bytes) {
    if (m && p) clEnqueueReadBuffer(cq, m, CL_TRUE, 0, bytes, p, 0, NULL, NULL);
}

/* fmt: b = cl_mem (NULL ok), l = int64, i = int, f = float */
/* n work-items in groups of lx x ly (lx * ly items per group, groups along dimension 0) */
static void launch(const char *name, size_t ngroups, size_t lx, size_t ly, const char *fmt, ...) {
    cl_int e;
    cl_kernel k = clCreateKernel(prog, name, &e);
    if (e) { fprintf(stderr, "kernel %s: %d\n", name, e); exit(1); }
    va_list ap;
    va_start(ap, fmt);
    cl_uint na = 0, i = 0;
    clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof na, &na, NULL);
    for (const char *c = fmt; *c; c++) {
        if (*c == ' ') continue;
        if (*c == 'b') {
            cl_mem m = va_arg(ap, cl_mem);
            if (!m) m = dummy;
            e = clSetKernelArg(k, i, sizeof m, &m);
        } else if (*c == 'z') {
            cl_long v = 0;
            e = clSetKernelArg(k, i, sizeof v, &v);
        }
        else if (*c == 'l') { cl_long v = va_arg(ap, int64_t); e = clSetKernelArg(k, i, sizeof v, &v); }
        else if (*c == 'i') { cl_int v = va_arg(ap, int); e = clSetKernelArg(k, i, sizeof v, &v); }
        else { cl_float v = (float)va_arg(ap, double); e = clSetKernelArg(k, i, sizeof v, &v); }
        if (e) { fprintf(stderr, "%s arg %u: %d\n", name, i, e); exit(1); }
        i++;
    }
    if (i != na) { fprintf(stderr, "%s: %u args given, %u wanted\n", name, i, na); exit(1); }
    va_end(ap);
    size_t gs[2] = {ngroups * lx, ly}, ls[2] = {lx, ly};
    if (ngroups) {
        e = clEnqueueNDRangeKernel(cq, k, 2, NULL, gs, ls, 0, NULL, NULL);
        if (e) { fprintf(stderr, "%s enqueue: %d\n", name, e); exit(1); }
    }
    clFinish(cq);
    clReleaseKernel(k);
}

static uint64_t rs = 88172645463325252ull;
static double urand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }
static float *randv(size_t n, double scale) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = (float)(nrand() * scale);
    return p;
}
static float *zerov(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void cmp(const char *what, const float *a, const float *r, size_t n) {
    double e = 0, nr = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - r[i];
        e += d * d;
        nr += (double)r[i] * r[i];
        if (isfinite(r[i]) && !isfinite(a[i])) bad = 1;
    }
    double rel = nr > 0 ? sqrt(e / nr) : sqrt(e);
    checks++;
    if (!(rel <= 1e-5) || bad) {
        fails++;
        printf("FAIL %s: rel %.3g\n", what, rel);
    }
}

static mamba2_context_t *ref;
#define T3(p, a, b_, c) mamba2_tensor_make(p, MAMBA2_DTYPE_F32, 3, (int64_t[]){a, b_, c})

/* conv1d fwd + bwd with x rows of stride xs >= C */
static void t_conv1d(int64_t B, int64_t L, int64_t C, int W, int silu, int with_bias, int with_init,
                     int nseq_packed, int64_t xs) {
    char tag[128];
    snprintf(tag, sizeof tag, "conv1d B%lld L%lld C%lld W%d silu%d b%d i%d v%d xs%lld", (long long)B,
             (long long)L, (long long)C, W, silu, with_bias, with_init, nseq_packed, (long long)xs);
    int64_t nseq = B, cu[16];
    if (nseq_packed) {
        B = 1;
        nseq = nseq_packed;
        cu[0] = 0;
        for (int s = 1; s < nseq; s++) cu[s] = (int64_t)(urand() * (L + 1));
        cu[nseq] = L;
        for (int i = 1; i < nseq; i++) /* sort */
            for (int j = i; j > 0 && cu[j] < cu[j - 1]; j--) { int64_t t = cu[j]; cu[j] = cu[j - 1]; cu[j - 1] = t; }
    }
    const int64_t Wm = W - 1 > 0 ? W - 1 : 1;
    size_t nx = (size_t)(B * L * xs);
    float *x = randv(nx, 1), *w = randv(C * W, 0.5), *bias = with_bias ? randv(C, 0.5) : NULL;
    float *init = with_init ? randv(nseq * C * Wm, 1) : NULL;
    float *dout = randv(B * L * C, 1), *dfin = randv(nseq * C * Wm, 1);
    float *o = zerov(B * L * C), *ro = zerov(B * L * C), *f = zerov(nseq * C * Wm), *rf = zerov(nseq * C * Wm);
    mamba2_tensor_t tx = mamba2_tensor_make_strided(x, MAMBA2_DTYPE_F32, 3, (int64_t[]){B, L, C},
                                                    (int64_t[]){L * xs, xs, 1});
    mamba2_tensor_t tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 2, (int64_t[]){C, W});
    mamba2_tensor_t tb = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, (int64_t[]){C});
    mamba2_tensor_t ti = T3(init, nseq, C, W - 1), tro = T3(ro, B, L, C), trf = T3(rf, nseq, C, W - 1);
    mamba2_tensor_t tcu = mamba2_tensor_make(cu, MAMBA2_DTYPE_I64, 1, (int64_t[]){nseq + 1});
    mamba2_conv1d_options_t op = mamba2_conv1d_options_default();
    op.bias = bias ? &tb : NULL;
    op.initial_conv_state = init ? &ti : NULL;
    op.cu_seqlens = nseq_packed ? &tcu : NULL;
    op.activation = silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    if (mamba2_conv1d_forward(ref, &tro, W > 1 ? &trf : NULL, &tx, &tw, &op)) {
        printf("ref fwd failed: %s\n", mamba2_last_error());
        exit(1);
    }
    cl_mem bx = up(x, nx * 4), bw = up(w, C * W * 4), bb = up(bias, C * 4), bi = up(init, nseq * C * Wm * 4);
    cl_mem bcu = nseq_packed ? up(cu, (nseq + 1) * 8) : NULL, bo = up(o, B * L * C * 4), bf = up(f, nseq * C * Wm * 4);
    launch("m2_conv1d_fwd_wi64", cdiv(B * L * C, 64), 64, 1, "bzll bzll bzl bzi bzlli bil lll ii", bo, L * C, C,
           bx, L * xs, xs, bw, (int64_t)W, bb, with_bias, bi, C * Wm, Wm, with_init, bcu, nseq_packed > 0, nseq, B,
           L, C, W, silu);
    launch("m2_conv1d_final_wi64", cdiv(nseq * C * (W - 1), 64), 64, 1, "bzll bzll bzlli bil lli", bf, C * Wm,
           Wm, bx, L * xs, xs, bi, C * Wm, Wm, with_init, bcu, nseq_packed > 0, nseq, L, C, W);
    down(bo, o, B * L * C * 4);
    down(bf, f, nseq * C * Wm * 4);
    char t2[160];
    snprintf(t2, sizeof t2, "%s out", tag);
    cmp(t2, o, ro, B * L * C);
    if (W > 1) {
        snprintf(t2, sizeof t2, "%s final", tag);
        cmp(t2, f, rf, nseq * C * (W - 1));
    }
    /* backward */
    float *dx = zerov(B * L * C), *rdx = zerov(B * L * C), *dw = zerov(C * W), *rdw = zerov(C * W);
    float *db = zerov(C), *rdb = zerov(C), *di = zerov(nseq * C * Wm), *rdi = zerov(nseq * C * Wm);
    mamba2_tensor_t tdo = T3(dout, B, L, C), tdf = T3(dfin, nseq, C, W - 1), trdx = T3(rdx, B, L, C);
    mamba2_tensor_t trdw = mamba2_tensor_make(rdw, MAMBA2_DTYPE_F32, 2, (int64_t[]){C, W});
    mamba2_tensor_t trdb = mamba2_tensor_make(rdb, MAMBA2_DTYPE_F32, 1, (int64_t[]){C});
    mamba2_tensor_t trdi = T3(rdi, nseq, C, W - 1);
    mamba2_conv1d_grads_t gr = {0, &trdx, &trdw, bias ? &trdb : NULL, init ? &trdi : NULL};
    if (mamba2_conv1d_backward(ref, &gr, &tdo, W > 1 ? &tdf : NULL, &tx, &tw, &op, NULL, 0)) {
        printf("ref bwd failed: %s\n", mamba2_last_error());
        exit(1);
    }
    const int64_t nbt = (L + 63) / 64, nblk = B * nbt;
    cl_mem bdo = up(dout, B * L * C * 4), bdf = W > 1 ? up(dfin, nseq * C * Wm * 4) : NULL;
    cl_mem bdx = up(dx, B * L * C * 4), bdw = up(dw, C * W * 4), bdb = up(db, C * 4), bdi = up(di, nseq * C * Wm * 4);
    float *pz = zerov(nblk * C * (W + 1));
    cl_mem bp = up(pz, (nblk * C * (W + 1) + 1) * 4);
    launch("m2_conv1d_bwd_t64_wi64", cdiv(nblk * C, 64), 64, 1, "bzlli bzi bzll bzlli bzll bzl bzi bzlli bil lll ii",
           bdx, L * C, C, 1, bp, 1, bdo, L * C, C, bdf, C * Wm, Wm, W > 1, bx, L * xs, xs, bw, (int64_t)W, bb,
           with_bias, bi, C * Wm, Wm, with_init, bcu, nseq_packed > 0, nseq, B, L, C, W, silu);
    if (init)
        launch("m2_conv1d_bwd_dinit_wi64", cdiv(nseq * C, 64), 64, 1, "bzll bzll bzlli bzll bzl bzi bzll bil llii",
               bdi, C * Wm, Wm, bdo, L * C, C, bdf, C * Wm, Wm, W > 1, bx, L * xs, xs, bw, (int64_t)W, bb,
               with_bias, bi, C * Wm, Wm, bcu, nseq_packed > 0, nseq, L, C, W, silu);
    launch("m2_conv1d_bwd_reduce_wi64", cdiv(C * (W + 1), 64), 64, 1, "bzli bzi bz lli", bdw, (int64_t)W, 1, bdb,
           with_bias, bp, nblk, C, W);
    down(bdx, dx, B * L * C * 4);
    down(bdw, dw, C * W * 4);
    down(bdb, db, C * 4);
    down(bdi, di, nseq * C * Wm * 4);
    snprintf(t2, sizeof t2, "%s dx", tag);
    cmp(t2, dx, rdx, B * L * C);
    snprintf(t2, sizeof t2, "%s dw", tag);
    cmp(t2, dw, rdw, C * W);
    if (bias) {
        snprintf(t2, sizeof t2, "%s db", tag);
        cmp(t2, db, rdb, C);
    }
    if (init && W > 1) {
        snprintf(t2, sizeof t2, "%s dinit", tag);
        cmp(t2, di, rdi, nseq * C * (W - 1));
    }
    cl_mem all[] = {bx, bw, bb, bi, bcu, bo, bf, bdo, bdf, bdx, bdw, bdb, bdi, bp};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(x); free(w); free(bias); free(init); free(dout); free(dfin); free(o); free(ro); free(f); free(rf);
    free(dx); free(rdx); free(dw); free(rdw); free(db); free(rdb); free(di); free(rdi); free(pz);
}

static void t_conv1d_step(int64_t B, int64_t T, int64_t C, int W, int silu, int with_bias, int pad) {
    char tag[128];
    snprintf(tag, sizeof tag, "conv1d_step B%lld T%lld C%lld W%d s%d b%d pad%d", (long long)B, (long long)T,
             (long long)C, W, silu, with_bias, pad);
    const int64_t S = B + 2, Wm = W > 1 ? W - 1 : 1;
    int32_t idx[64];
    for (int b = 0; b < B; b++) idx[b] = (int32_t)(S - 1 - b);
    if (pad) idx[B / 2] = -1;
    int64_t idx64[64];
    for (int b = 0; b < B; b++) idx64[b] = idx[b];
    float *x = randv(B * T * C, 1), *w = randv(C * W, 0.5), *bias = with_bias ? randv(C, 0.5) : NULL;
    float *cache = randv(S * C * Wm, 1), *rcache = malloc(S * C * Wm * 4);
    memcpy(rcache, cache, S * C * Wm * 4);
    float *o = randv(B * T * C, 1), *ro = malloc(B * T * C * 4);
    memcpy(ro, o, B * T * C * 4);
    mamba2_tensor_t tx = T3(x, B, T, C), tro = T3(ro, B, T, C), trc = T3(rcache, S, C, W - 1);
    mamba2_tensor_t tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 2, (int64_t[]){C, W});
    mamba2_tensor_t tb = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, (int64_t[]){C});
    mamba2_tensor_t tix = mamba2_tensor_make(idx, MAMBA2_DTYPE_I32, 1, (int64_t[]){B});
    mamba2_conv1d_step_options_t op = mamba2_conv1d_step_options_default();
    op.bias = bias ? &tb : NULL;
    op.state_indices = &tix;
    op.activation = silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    if (mamba2_conv1d_step(ref, &tro, &trc, &tx, &tw, &op)) {
        printf("ref step failed: %s\n", mamba2_last_error());
        exit(1);
    }
    cl_mem bo = up(o, B * T * C * 4), bc = up(cache, S * C * Wm * 4), bx = up(x, B * T * C * 4),
           bw = up(w, C * W * 4), bb = up(bias, C * 4), bix = up(idx64, B * 8);
    launch("m2_conv1d_step_wi64", cdiv(B * C, 64), 64, 1, "bzll bzll bzll bzl bzi bi lll ii", bo, T * C, C, bc,
           C * Wm, Wm, bx, T * C, C, bw, (int64_t)W, bb, with_bias, bix, 1, B, T, C, W, silu);
    down(bo, o, B * T * C * 4);
    down(bc, cache, S * C * Wm * 4);
    char t2[160];
    snprintf(t2, sizeof t2, "%s out", tag);
    cmp(t2, o, ro, B * T * C);
    snprintf(t2, sizeof t2, "%s cache", tag);
    cmp(t2, cache, rcache, S * C * Wm);
    cl_mem all[] = {bo, bc, bx, bw, bb, bix};
    for (size_t i = 0; i < 6; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(x); free(w); free(bias); free(cache); free(rcache); free(o); free(ro);
}

static void t_rmsnorm(int64_t M, int64_t D, int64_t S, int gate, int with_bias, int use_rstd, int64_t xs) {
    const double eps = S == 1 ? 1e-3 : 1e-5; /* S = 1: dx ~ eps, keep it conditioned */
    char tag[128];
    snprintf(tag, sizeof tag, "rmsnorm M%lld D%lld S%lld gate%d b%d r%d xs%lld", (long long)M, (long long)D,
             (long long)S, gate, with_bias, use_rstd, (long long)xs);
    const int64_t G = D / S;
    float *x = randv(M * xs, 1), *z = gate ? randv(M * xs, 1) : NULL, *w = randv(D, 1);
    float *bias = with_bias ? randv(D, 0.5) : NULL, *dout = randv(M * D, 1);
    float *o = zerov(M * D), *ro = zerov(M * D), *r = zerov(M * G), *rr = zerov(M * G);
    mamba2_tensor_t tx = mamba2_tensor_make_strided(x, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, D}, (int64_t[]){xs, 1});
    mamba2_tensor_t tz = mamba2_tensor_make_strided(z, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, D}, (int64_t[]){xs, 1});
    mamba2_tensor_t tw = mamba2_tensor_make(w, MAMBA2_DTYPE_F32, 1, (int64_t[]){D});
    mamba2_tensor_t tb = mamba2_tensor_make(bias, MAMBA2_DTYPE_F32, 1, (int64_t[]){D});
    mamba2_tensor_t tro = mamba2_tensor_make(ro, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, D});
    mamba2_tensor_t trr = mamba2_tensor_make(rr, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, G});
    mamba2_rmsnorm_gated_options_t op = mamba2_rmsnorm_gated_options_default();
    op.group_size = S;
    op.norm_before_gate = gate == 2;
    op.eps = eps;
    if (mamba2_rmsnorm_gated_forward(ref, &tro, &trr, &tx, gate ? &tz : NULL, &tw, bias ? &tb : NULL, &op, NULL, 0)) {
        printf("ref rms failed: %s\n", mamba2_last_error());
        exit(1);
    }
    cl_mem bx = up(x, M * xs * 4), bz = up(z, M * xs * 4), bw = up(w, D * 4), bb = up(bias, D * 4);
    cl_mem bo = up(o, M * D * 4), br = up(r, M * G * 4);
    launch("m2_rmsnorm_fwd_wg128", M * G, 128, 1, "bzl bzli bzl bzl bz bzi lll fi", bo, D, br, G, 1, bx, xs, bz,
           xs, bw, bb, with_bias, M, D, S, eps, gate);
    down(bo, o, M * D * 4);
    down(br, r, M * G * 4);
    char t2[160];
    snprintf(t2, sizeof t2, "%s out", tag);
    cmp(t2, o, ro, M * D);
    snprintf(t2, sizeof t2, "%s rstd", tag);
    cmp(t2, r, rr, M * G);
    /* backward */
    float *dx = zerov(M * D), *rdx = zerov(M * D), *dz = zerov(M * D), *rdz = zerov(M * D);
    float *dw = zerov(D), *rdw = zerov(D), *db = zerov(D), *rdb = zerov(D);
    mamba2_tensor_t tdo = mamba2_tensor_make(dout, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, D});
    mamba2_tensor_t trdx = mamba2_tensor_make(rdx, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, D});
    mamba2_tensor_t trdz = mamba2_tensor_make(rdz, MAMBA2_DTYPE_F32, 2, (int64_t[]){M, D});
    mamba2_tensor_t trdw = mamba2_tensor_make(rdw, MAMBA2_DTYPE_F32, 1, (int64_t[]){D});
    mamba2_tensor_t trdb = mamba2_tensor_make(rdb, MAMBA2_DTYPE_F32, 1, (int64_t[]){D});
    mamba2_rmsnorm_gated_grads_t gr = {0, &trdx, gate ? &trdz : NULL, &trdw, bias ? &trdb : NULL};
    if (mamba2_rmsnorm_gated_backward(ref, &gr, &tdo, &tx, gate ? &tz : NULL, &tw, bias ? &tb : NULL,
                                      use_rstd ? &trr : NULL, &op, NULL, 0)) {
        printf("ref rms bwd failed: %s\n", mamba2_last_error());
        exit(1);
    }
    const int64_t nblk = (M + 63) / 64;
    float *pz = zerov(nblk * D * 2), *rb = zerov(M * G);
    cl_mem bdo = up(dout, M * D * 4), bdx = up(dx, M * D * 4), bdz = up(dz, M * D * 4), bdw = up(dw, D * 4);
    cl_mem bdb = up(db, D * 4), bp = up(pz, (nblk * D * 2 + 1) * 4), brb = up(rb, (M * G + 1) * 4);
    launch("m2_rmsnorm_bwd_wg128", M * G, 128, 1, "bzli bzli bzi bzl bzli bzl bzl bz bzi lll fi", bdx, D, 1, bdz,
           D, gate != 0, brb, 1, bdo, D, br, G, use_rstd, bx, xs, bz, xs, bw, bb, with_bias, M, D, S, eps, gate);
    launch("m2_rmsnorm_bwd_dw_r64_wi64", cdiv(nblk * D, 64), 64, 1, "bz bz bzl bzl bzl llli", bp, brb, bdo, D,
           bx, xs, bz, xs, M, D, S, gate);
    launch("m2_rmsnorm_bwd_reduce_wi64", cdiv(D, 64), 64, 1, "bzi bzi bz ll", bdw, 1, bdb, with_bias, bp, nblk,
           D);
    down(bdx, dx, M * D * 4);
    down(bdz, dz, M * D * 4);
    down(bdw, dw, D * 4);
    down(bdb, db, D * 4);
    snprintf(t2, sizeof t2, "%s dx", tag);
    cmp(t2, dx, rdx, M * D);
    if (gate) {
        snprintf(t2, sizeof t2, "%s dz", tag);
        cmp(t2, dz, rdz, M * D);
    }
    snprintf(t2, sizeof t2, "%s dw", tag);
    cmp(t2, dw, rdw, D);
    if (bias) {
        snprintf(t2, sizeof t2, "%s db", tag);
        cmp(t2, db, rdb, D);
    }
    cl_mem all[] = {bx, bz, bw, bb, bo, br, bdo, bdx, bdz, bdw, bdb, bp, brb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(x); free(z); free(w); free(bias); free(dout); free(o); free(ro); free(r); free(rr);
    free(dx); free(rdx); free(dz); free(rdz); free(dw); free(rdw); free(db); free(rdb); free(pz); free(rb);
}

static void t_ssd_step(int64_t B, int64_t T, int64_t H, int64_t P, int64_t N, int64_t G, int Dpc, int with_z,
                       int sp, int pad, int with_as) {
    char tag[160];
    snprintf(tag, sizeof tag, "ssd_step B%lld T%lld H%lld P%lld N%lld G%lld Dpc%d z%d sp%d pad%d as%d",
             (long long)B, (long long)T, (long long)H, (long long)P, (long long)N, (long long)G, Dpc, with_z, sp,
             pad, with_as);
    const int64_t S = B + 1;
    int64_t idx[64];
    for (int b = 0; b < B; b++) idx[b] = (b + 1) % S;
    if (pad) idx[0] = -3;
    size_t nx = B * T * H * P, nbc = B * T * G * N, nst = S * H * P * N, nas = B * T * H * P * N;
    float *x = randv(nx, 1), *dt = malloc(B * T * H * 4), *A = malloc(H * 4), *Bm = randv(nbc, 0.2);
    float *Cm = randv(nbc, 0.2), *D = randv(Dpc ? H * P : H, 1), *z = with_z ? randv(nx, 1) : NULL;
    float *dtb = randv(H, 0.1);
    for (int64_t i = 0; i < B * T * H; i++) dt[i] = (float)(0.01 + 0.1 * urand()) - (i % 7 == 0 ? 0.05f : 0);
    for (int64_t i = 0; i < H; i++) A[i] = (float)-(0.1 + 0.4 * urand());
    float *st = randv(nst, 0.2), *rst = malloc(nst * 4), *o = randv(nx, 1), *ro = malloc(nx * 4);
    memcpy(rst, st, nst * 4);
    memcpy(ro, o, nx * 4);
    float *as = randv(nas, 1), *ras = malloc(nas * 4);
    memcpy(ras, as, nas * 4);
    mamba2_tensor_t tx = mamba2_tensor_make(x, MAMBA2_DTYPE_F32, 4, (int64_t[]){B, T, H, P});
    mamba2_tensor_t tdt = mamba2_tensor_make(dt, MAMBA2_DTYPE_F32, 3, (int64_t[]){B, T, H});
    mamba2_tensor_t tA = mamba2_tensor_make(A, MAMBA2_DTYPE_F32, 1, (int64_t[]){H});
    mamba2_tensor_t tB = mamba2_tensor_make(Bm, MAMBA2_DTYPE_F32, 4, (int64_t[]){B, T, G, N});
    mamba2_tensor_t tC = mamba2_tensor_make(Cm, MAMBA2_DTYPE_F32, 4, (int64_t[]){B, T, G, N});
    mamba2_tensor_t tD = Dpc ? mamba2_tensor_make(D, MAMBA2_DTYPE_F32, 2, (int64_t[]){H, P})
                             : mamba2_tensor_make(D, MAMBA2_DTYPE_F32, 1, (int64_t[]){H});
    mamba2_tensor_t tz = mamba2_tensor_make(z, MAMBA2_DTYPE_F32, 4, (int64_t[]){B, T, H, P});
    mamba2_tensor_t tdb = mamba2_tensor_make(dtb, MAMBA2_DTYPE_F32, 1, (int64_t[]){H});
    mamba2_tensor_t tst = mamba2_tensor_make(rst, MAMBA2_DTYPE_F32, 4, (int64_t[]){S, H, P, N});
    mamba2_tensor_t tro = mamba2_tensor_make(ro, MAMBA2_DTYPE_F32, 4, (int64_t[]){B, T, H, P});
    mamba2_tensor_t tas = mamba2_tensor_make(ras, MAMBA2_DTYPE_F32, 5, (int64_t[]){B, T, H, P, N});
    mamba2_tensor_t tix = mamba2_tensor_make(idx, MAMBA2_DTYPE_I64, 1, (int64_t[]){B});
    mamba2_ssd_step_options_t op = mamba2_ssd_step_options_default();
    op.D = &tD;
    op.z = z ? &tz : NULL;
    op.dt_bias = &tdb;
    op.state_indices = &tix;
    op.dt_softplus = sp;
    if (sp) op.dt_limit_hi = 0.5;
    if (mamba2_ssd_step(ref, &tst, &tro, with_as ? &tas : NULL, &tx, &tdt, &tA, &tB, &tC, &op)) {
        printf("ref ssd_step failed: %s\n", mamba2_last_error());
        exit(1);
    }
    cl_mem bst = up(st, nst * 4), bo = up(o, nx * 4), bas = with_as ? up(as, nas * 4) : NULL, bx = up(x, nx * 4);
    cl_mem bdt = up(dt, B * T * H * 4), bA = up(A, H * 4), bB = up(Bm, nbc * 4), bC = up(Cm, nbc * 4);
    cl_mem bD = up(D, (Dpc ? H * P : H) * 4), bz = up(z, nx * 4), bdb = up(dtb, H * 4), bix = up(idx, B * 8);
    const int64_t npb = (P + 3) / 4;
    launch("m2_ssd_step_32x4", B * H * npb, 32, 4,
           "bzlll bzlll bzlllli bzlll bzll bz bzlll bzlll bzli bzllli bzi bi llllll iff", bst, H * P * N, P * N, N,
           bo, T * H * P, H * P, P, bas, T * H * P * N, H * P * N, P * N, N, with_as, bx, T * H * P, H * P, P, bdt,
           T * H, H, bA, bB, T * G * N, G * N, N, bC, T * G * N, G * N, N, bD, P, Dpc ? 2 : 1, bz, T * H * P,
           H * P, P, with_z, bdb, 1, bix, 1, B, T, H, P, N, G, sp, 0.0, sp ? 0.5 : INFINITY);
    down(bst, st, nst * 4);
    down(bo, o, nx * 4);
    down(bas, as, nas * 4);
    char t2[200];
    snprintf(t2, sizeof t2, "%s out", tag);
    cmp(t2, o, ro, nx);
    snprintf(t2, sizeof t2, "%s state", tag);
    cmp(t2, st, rst, nst);
    if (with_as) {
        snprintf(t2, sizeof t2, "%s all_states", tag);
        cmp(t2, as, ras, nas);
    }
    cl_mem all[] = {bst, bo, bas, bx, bdt, bA, bB, bC, bD, bz, bdb, bix};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) clReleaseMemObject(all[i]);
    free(x); free(dt); free(A); free(Bm); free(Cm); free(D); free(z); free(dtb); free(st); free(rst);
    free(o); free(ro); free(as); free(ras);
}

int main(int argc, char **argv) {
    const char *common_h = argc > 1 ? argv[1] : "src/gpu/kernels/common.h";
    cl_platform_id pf;
    cl_device_id dev;
    cl_uint np = 0;
    if (clGetPlatformIDs(1, &pf, &np) || !np || clGetDeviceIDs(pf, CL_DEVICE_TYPE_ALL, 1, &dev, NULL)) {
        printf("no OpenCL device\n");
        return 77;
    }
    cctx = clCreateContext(NULL, 1, &dev, NULL, NULL, NULL);
    cq = clCreateCommandQueue(cctx, dev, 0, NULL);
    const char *files[] = {common_h, "src/gpu/kernels/conv1d.cl", "src/gpu/kernels/rmsnorm.cl",
                           "src/gpu/kernels/step.cl"};
    char *src[4];
    for (int i = 0; i < 4; i++)
        if (!(src[i] = slurp(files[i]))) { printf("cannot read %s\n", files[i]); return 1; }
    cl_int e;
    prog = clCreateProgramWithSource(cctx, 4, (const char **)src, NULL, &e);
    e = clBuildProgram(prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
    if (e) {
        char log[20000];
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        printf("build failed:\n%s\n", log);
        return 1;
    }
    mamba2_context_create(&ref, MAMBA2_BACKEND_REF, 1);
    dummy = clCreateBuffer(cctx, CL_MEM_READ_WRITE, 64, NULL, NULL);

    for (int W = 1; W <= 8; W++) {
        if (W > 4 && W != 8) continue;
        t_conv1d(2, 37, 19, W, 1, 1, 1, 0, 19);
        t_conv1d(1, 130, 70, W, 0, 0, 0, 0, 83);
        t_conv1d(1, 150, 33, W, 1, 1, 1, 5, 40);
        t_conv1d(3, 1, 5, W, 1, 1, 1, 0, 5);
        t_conv1d(1, 3, 7, W, 1, 0, 1, 4, 7);
        t_conv1d_step(5, 1, 21, W, 1, 1, 1);
        t_conv1d_step(3, 4, 67, W, 0, 0, 0);
    }
    int64_t rm[][3] = {{7, 64, 64}, {5, 96, 32}, {3, 300, 100}, {130, 20, 5}, {2, 1000, 1000}, {4, 3, 1}, {1, 3, 3}};
    for (size_t i = 0; i < sizeof rm / sizeof *rm; i++)
        for (int gate = 0; gate < 3; gate++) {
            t_rmsnorm(rm[i][0], rm[i][1], rm[i][2], gate, gate != 1, 0, rm[i][1]);
            t_rmsnorm(rm[i][0], rm[i][1], rm[i][2], gate, gate == 1, 1, rm[i][1] + 3);
        }
    t_ssd_step(3, 1, 4, 16, 32, 2, 0, 1, 1, 1, 1);
    t_ssd_step(2, 3, 3, 7, 45, 1, 1, 0, 0, 0, 1);
    t_ssd_step(4, 2, 2, 64, 128, 2, 1, 1, 1, 1, 0);
    t_ssd_step(1, 5, 1, 1, 1, 1, 0, 1, 0, 0, 1);
    printf("%d checks, %d failures\n", checks, fails);
    return fails != 0;
}
