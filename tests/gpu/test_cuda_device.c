/*
 * test_cuda_device.c — the CUDA backend's device mode (mamba2_context_create_cuda): tensors
 * that are CUDA device pointers, work queued on the caller's stream.
 *
 * Everywhere: bad arguments (NULL ctx, device < 0) are INVALID_ARGUMENT; without a CUDA
 * build, driver or device the create call is BACKEND_UNAVAILABLE with a message (the case on
 * our CI machines: exit 0 after checking that). Where a GPU exists: every tensor of an SSD
 * problem (all options, varlen too) at its own offset in ONE cuMemAlloc'd input buffer and
 * the outputs in one output buffer, fused forward and backward queued on a stream of the
 * test's own, twice (the second call reuses the context's scratch), and the results must be
 * bitwise the host-mode CUDA context's (same kernels, same order). Also: a misaligned data
 * pointer is INVALID_ARGUMENT; MAMBA2C_CUDA_PROFILE: a context made with it gives the same
 * results and appends its per-kernel table to the file when destroyed, and a path too long
 * for it is INVALID_ARGUMENT; the tensor-core forward's choice (read from those tables):
 * MAMBA2C_CUDA_TC=1 always, 0 never, unset or auto on a shape with 2 blocks per
 * multiprocessor and not on a small one; any other value is INVALID_ARGUMENT.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/cu_loader.h"
#include "harness.h"

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g

static tcu cu;

static size_t span_bytes(const mamba2_tensor_t *t) {
    return (size_t)th_tensor_span(t) * mamba2_dtype_size(t->dtype);
}

static void run_case(th_ssd_case *c, mamba2_context_t *host, mamba2_context_t *dev,
                     tcu_handle stream) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("cuda device mode %-22s", c->name);
    th_ssd_io h;
    th_ssd_io_make(&h, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    int ok = th_expect(th_ssd_io_forward(host, &h, 0) == MAMBA2_STATUS_OK &&
                           th_ssd_io_backward(host, &h, 0) == MAMBA2_STATUS_OK,
                       "host mode: %s", mamba2_last_error());
    size_t off[TH_NT], in_bytes = 0, out_bytes = 0;
    for (int id = 0; id < TH_NT; id++) {
        if (!h.v[id].present || id == TH_CU) continue;
        size_t *tot = id >= TH_OUT ? &out_bytes : &in_bytes;
        off[id] = *tot + 256 * (size_t)(id + 1);
        *tot = (off[id] + span_bytes(&h.v[id].t) + 255) & ~(size_t)255;
    }
    unsigned char *in = calloc(1, in_bytes + 1), *out = calloc(1, out_bytes + 1);
    for (int id = 0; id < TH_OUT; id++)
        if (h.v[id].present && id != TH_CU)
            memcpy(in + off[id], h.v[id].t.data, span_bytes(&h.v[id].t));
    tcu_ptr bin = 0, bout = 0;
    ok = ok && th_expect(!cu.cuMemAlloc_v2(&bin, in_bytes + 1) &&
                             !cu.cuMemAlloc_v2(&bout, out_bytes + 1) &&
                             !cu.cuMemcpyHtoD_v2(bin, in, in_bytes + 1),
                         "cuMemAlloc / cuMemcpyHtoD failed");
    mamba2_tensor_t t[TH_NT];
    const mamba2_tensor_t *tp[TH_NT];
    for (int id = 0; id < TH_NT; id++) {
        tp[id] = NULL;
        if (!h.v[id].present) continue;
        t[id] = h.v[id].t;
        if (id != TH_CU)
            t[id].data = (void *)(uintptr_t)((id >= TH_OUT ? bout : bin) + off[id]);
        tp[id] = &t[id];
    }
    mamba2_ssd_options_t o = h.opts;
    o.D = tp[TH_D];
    o.z = tp[TH_Z];
    o.dt_bias = tp[TH_DTB];
    o.initial_state = tp[TH_INIT];
    o.cu_seqlens = tp[TH_CU] ? &h.v[TH_CU].t : NULL; /* index tensors stay on the host */
    mamba2_ssd_grads_t g = {0, tp[TH_DX], tp[TH_DDT], tp[TH_DA], tp[TH_DBM], tp[TH_DCM],
                            tp[TH_DD], tp[TH_DZ], tp[TH_DDTB], tp[TH_DINIT]};
    for (int rep = 0; ok && rep < 2; rep++) {
        mamba2_status_t st = mamba2_ssd_forward(dev, tp[TH_OUT], NULL, tp[TH_FINAL], tp[TH_X],
                                                tp[TH_DT], tp[TH_A], tp[TH_BM], tp[TH_CM], &o,
                                                NULL, 0);
        if (st == MAMBA2_STATUS_OK)
            st = mamba2_ssd_backward(dev, &g, tp[TH_DOUT], tp[TH_DFINAL], tp[TH_X], tp[TH_DT],
                                     tp[TH_A], tp[TH_BM], tp[TH_CM], NULL, &o, NULL, 0);
        ok = th_expect(st == MAMBA2_STATUS_OK, "device mode (call %d): %s: %s", rep + 1,
                       mamba2_status_string(st), mamba2_last_error());
        if (!ok) break;
        cu.cuStreamSynchronize(stream);
        memset(out, 0, out_bytes + 1);
        cu.cuMemcpyDtoH_v2(out, bout, out_bytes + 1);
        int same = 1;
        for (int id = TH_OUT; id < TH_NT; id++)
            if (h.v[id].present && memcmp(out + off[id], h.v[id].t.data, span_bytes(&h.v[id].t))) {
                th_fail("call %d: %s differs from host mode", rep + 1, th_tname[id]);
                same = 0;
            }
        if (same) th_note("call %d: all outputs bitwise equal to host mode", rep + 1);
    }
    if (ok) {
        mamba2_tensor_t bad = t[TH_X];
        bad.data = (char *)bad.data + 2; /* not a multiple of 4 bytes */
        mamba2_status_t st = mamba2_ssd_forward(dev, tp[TH_OUT], NULL, tp[TH_FINAL], &bad,
                                                tp[TH_DT], tp[TH_A], tp[TH_BM], tp[TH_CM], &o,
                                                NULL, 0);
        th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT, "misaligned pointer: %s: %s",
                  mamba2_status_string(st), mamba2_last_error());
    }
    cu.cuStreamSynchronize(stream);
    if (bin) cu.cuMemFree_v2(bin);
    if (bout) cu.cuMemFree_v2(bout);
    free(in);
    free(out);
    th_ssd_io_free(&h);
    th_ssd_data_free(&d);
    th_end();
}

/* MAMBA2C_CUDA_PROFILE: same results (run_case), then the file holds the table, with a
 * kernel whose name holds `want` and none whose name holds `unwanted` (either may be NULL) */
static void profile_case(th_ssd_case *c, mamba2_context_t *host, tcu_handle stream,
                         const char *want, const char *unwanted) {
    char path[64], line[256], big[700];
    snprintf(path, sizeof path, "/tmp/mamba2c_cuda_profile_%ld.txt", (long)getpid());
    remove(path);
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    mamba2_context_t *dev = NULL;
    static int once;
    if (!once++) {
        setenv("MAMBA2C_CUDA_PROFILE", big, 1);
        const mamba2_status_t st = mamba2_context_create_cuda(&dev, 0, stream);
        th_begin("cuda profile: a path too long");
        th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && !dev &&
                      strstr(mamba2_last_error(), "MAMBA2C_CUDA_PROFILE"),
                  "a 699-character path: %s: %s", mamba2_status_string(st), mamba2_last_error());
        th_end();
        mamba2_context_destroy(dev);
        dev = NULL;
    }
    setenv("MAMBA2C_CUDA_PROFILE", path, 1);
    const mamba2_status_t st2 = mamba2_context_create_cuda(&dev, 0, stream);
    unsetenv("MAMBA2C_CUDA_PROFILE");
    if (st2 != MAMBA2_STATUS_OK) {
        th_begin("cuda profile");
        th_fail("create: %s: %s", mamba2_status_string(st2), mamba2_last_error());
        th_end();
        return;
    }
    run_case(c, host, dev, stream); /* bitwise the host context's, events or not */
    mamba2_context_destroy(dev);
    th_begin("cuda profile: the report");
    FILE *f = fopen(path, "r");
    int header = 0, kernels = 0, scan = 0, wanted = !want, bad = 0;
    while (f && fgets(line, sizeof line, f)) {
        long long n = 0;
        double total = -1;
        char name[128];
        if (!strncmp(line, "# mamba2c CUDA profile: ", 24)) header++;
        else if (sscanf(line, "%127s\t%lld\t%lf", name, &n, &total) == 3 && n > 0 &&
                 total >= 0) {
            kernels++;
            scan += !strncmp(name, "m2_ssd_", 7);
            wanted |= want && strstr(name, want);
            bad |= unwanted && strstr(name, unwanted);
        }
    }
    th_expect(f && header == 1 && kernels >= 2 && scan >= 2,
              "%s: %d header lines, %d kernel lines (%d m2_ssd_*)", path, header, kernels, scan);
    th_expect(wanted && !bad, "%s: the forward ran%s%s%s%s", c->name,
              want && !wanted ? " without " : "", want && !wanted ? want : "",
              bad ? " with " : "", bad ? unwanted : "");
    if (f) fclose(f);
    remove(path);
    th_end();
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    th_begin("cuda device mode: arguments");
    mamba2_context_t *dev = NULL;
    th_expect(mamba2_context_create_cuda(NULL, 0, NULL) == MAMBA2_STATUS_INVALID_ARGUMENT,
              "NULL ctx must be INVALID_ARGUMENT");
    th_expect(mamba2_context_create_cuda(&dev, -1, NULL) == MAMBA2_STATUS_INVALID_ARGUMENT &&
                  dev == NULL,
              "device -1 must be INVALID_ARGUMENT");
    th_end();
    const int have_gpu = tcu_open(&cu, 0);
    tcu_handle stream = NULL;
    if (have_gpu && cu.cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */)) stream = NULL;
    th_begin("cuda device mode: context");
    mamba2_status_t st = mamba2_context_create_cuda(&dev, 0, stream);
    if (!have_gpu) {
        /* no driver or no device here: unavailable, cleanly, with a message */
        th_expect(st == MAMBA2_STATUS_BACKEND_UNAVAILABLE && dev == NULL,
                  "without a GPU: %s (%s), want BACKEND_UNAVAILABLE", mamba2_status_string(st),
                  mamba2_last_error());
        th_expect(mamba2_last_error()[0] != 0, "BACKEND_UNAVAILABLE without a message");
        th_note("unavailable here: %s", mamba2_last_error());
    } else {
        th_expect(st == MAMBA2_STATUS_OK, "create: %s: %s", mamba2_status_string(st),
                  mamba2_last_error());
        mamba2_context_t *x = NULL;
        th_expect(mamba2_context_create_cuda(&x, 1 << 20, NULL) ==
                      MAMBA2_STATUS_INVALID_ARGUMENT,
                  "a device past the count must be INVALID_ARGUMENT");
        char keep[16] = "";
        const char *tc = getenv("MAMBA2C_CUDA_TC");
        if (tc) snprintf(keep, sizeof keep, "%s", tc);
        setenv("MAMBA2C_CUDA_TC", "2", 1);
        const mamba2_status_t s2 = mamba2_context_create_cuda(&x, 0, NULL);
        th_expect(s2 == MAMBA2_STATUS_INVALID_ARGUMENT && !x &&
                      strstr(mamba2_last_error(), "MAMBA2C_CUDA_TC"),
                  "MAMBA2C_CUDA_TC=2: %s: %s", mamba2_status_string(s2), mamba2_last_error());
        if (tc) setenv("MAMBA2C_CUDA_TC", keep, 1);
        else unsetenv("MAMBA2C_CUDA_TC");
    }
    th_end();
    if (have_gpu && dev) {
        mamba2_context_t *host = NULL;
        if (mamba2_context_create(&host, MAMBA2_BACKEND_CUDA, 1) != MAMBA2_STATUS_OK) {
            th_begin("cuda host mode context");
            th_fail("%s", mamba2_last_error());
            th_end();
        } else {
            static th_ssd_case cases[] = {
                {"all_options", SH(2, 77, 4, 8, 16, 32, 2), .D_mode = 2, .z = 1, .dt_bias = 1,
                 .softplus = 1, .init = 1, .final = 1, .dfinal = 1, .limit = 1, .lo = 0.02,
                 .hi = 0.08},
                {"varlen", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {10, 1, 70}, .cu64 = 1,
                 .D_mode = 1, .init = 1, .final = 1, .dfinal = 1},
            };
            for (int i = 0; i < 2; i++) run_case(&cases[i], host, dev, stream);
            /* the tensor-core forward's choice (MAMBA2C_CUDA_TC: 1 always, 0 never, else
             * auto: its on-chip scan from 2 blocks per multiprocessor, sequences x H x
             * ceil(P/32); the emulated device and an H200 have 132) */
            static th_ssd_case small = {"tc_rule_small", SH(1, 8, 4, 8, 16, 64, 2), .init = 1,
                                        .final = 1, .dfinal = 1};
            static th_ssd_case big = {"tc_rule_264_blocks", SH(1, 8, 264, 32, 16, 64, 2),
                                      .init = 1, .final = 1, .dfinal = 1};
            int sms = 0;
            cu.cuDeviceGetAttribute(&sms, 16, cu.device);
            const char *tc = getenv("MAMBA2C_CUDA_TC"), *t = "_tc128", *p = "scan_seq_16x16";
            const int mode = tc && !strcmp(tc, "1") ? 1 : tc && !strcmp(tc, "0") ? 0 : 2;
            profile_case(&small, host, stream, mode == 1 ? t : p, mode == 1 ? NULL : t);
            if (sms == 132) profile_case(&big, host, stream, mode ? t : p, mode ? NULL : t);
        }
        mamba2_context_destroy(host);
    }
    mamba2_context_destroy(dev);
    if (stream) cu.cuStreamDestroy_v2(stream);
    return th_finish();
}
