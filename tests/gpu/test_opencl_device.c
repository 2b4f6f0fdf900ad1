/*
 * test_opencl_device.c — the OpenCL backend's device mode (mamba2_context_create_opencl +
 * mamba2_opencl_register_buffer): tensors that live in the caller's cl_mem buffers.
 *
 * The test opens the ICD loader itself (dlopen, the ABI of src/opencl/cl_api.h), makes its own
 * cl_context and queue, places every tensor of an SSD problem (all options, varlen too) at its
 * own offset inside ONE input buffer and every output inside one output buffer, runs the
 * fused forward and backward through a device-mode context, and requires the results to be
 * bitwise the host-mode context's on the same device (same kernels, same order). Also: a
 * pointer in no registered buffer and registering on a host-mode context are
 * INVALID_ARGUMENT. Exit code 77 only when no OpenCL device exists.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "opencl/cl_api.h"

static struct {
#define M2CL_PTR(ret, name, args) ret(*name) args;
    M2CL_FUNCS(M2CL_PTR)
#undef M2CL_PTR
} cl;

static int load_cl(void) {
    void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
#define M2CL_SYM(ret, name, args)                                                              \
    *(void **)(&cl.name) = dlsym(h, #name);                                                    \
    if (!cl.name) return 0;
    M2CL_FUNCS(M2CL_SYM)
#undef M2CL_SYM
    return 1;
}

#define SH(b, l, h, p, n, q, g) .B = b, .L = l, .H = h, .P = p, .N = n, .Q = q, .G = g

/* Bytes from a tensor's data to its last element + 1. */
static size_t span_bytes(const mamba2_tensor_t *t) {
    return (size_t)th_tensor_span(t) * mamba2_dtype_size(t->dtype);
}

static void run_case(th_ssd_case *c, mamba2_context_t *host, mamba2_context_t *dev,
                     cl_context clc, cl_command_queue q) {
    th_ssd_data d;
    th_ssd_data_make(&d, c);
    th_begin("device mode %-22s", c->name);
    th_ssd_io h;
    th_ssd_io_make(&h, c, &d, MAMBA2_DTYPE_F32, TH_LAYOUT_CONTIG);
    int ok = th_expect(th_ssd_io_forward(host, &h, 0) == MAMBA2_STATUS_OK &&
                           th_ssd_io_backward(host, &h, 0) == MAMBA2_STATUS_OK,
                       "host mode: %s", mamba2_last_error());
    /* one buffer for the inputs, one for the outputs; each tensor 256-byte aligned in it */
    size_t off[TH_NT], in_bytes = 0, out_bytes = 0;
    for (int id = 0; id < TH_NT; id++) {
        if (!h.v[id].present || id == TH_CU) continue;
        size_t *tot = id >= TH_OUT ? &out_bytes : &in_bytes;
        off[id] = *tot + 256 * (size_t)(id + 1); /* and some space between */
        *tot = (off[id] + span_bytes(&h.v[id].t) + 255) & ~(size_t)255;
    }
    unsigned char *in = calloc(1, in_bytes + 1), *out = calloc(1, out_bytes + 1);
    for (int id = 0; id < TH_OUT; id++)
        if (h.v[id].present && id != TH_CU)
            memcpy(in + off[id], h.v[id].t.data, span_bytes(&h.v[id].t));
    cl_int err = 0;
    cl_mem bin = cl.clCreateBuffer(clc, CL_MEM_READ_WRITE, in_bytes + 1, NULL, &err);
    cl_mem bout = cl.clCreateBuffer(clc, CL_MEM_READ_WRITE, out_bytes + 1, NULL, &err);
    ok = ok && th_expect(bin && bout, "clCreateBuffer failed (%d)", (int)err);
    if (ok) cl.clEnqueueWriteBuffer(q, bin, CL_TRUE, 0, in_bytes + 1, in, 0, NULL, NULL);
    void *vin = NULL, *vout = NULL;
    ok = ok && th_expect(mamba2_opencl_register_buffer(dev, bin, in_bytes + 1, &vin) ==
                                 MAMBA2_STATUS_OK &&
                             mamba2_opencl_register_buffer(dev, bout, out_bytes + 1, &vout) ==
                                 MAMBA2_STATUS_OK,
                         "register: %s", mamba2_last_error());
    mamba2_tensor_t t[TH_NT];
    const mamba2_tensor_t *tp[TH_NT];
    for (int id = 0; id < TH_NT; id++) {
        tp[id] = NULL;
        if (!h.v[id].present) continue;
        t[id] = h.v[id].t;
        if (id != TH_CU) t[id].data = (char *)(id >= TH_OUT ? vout : vin) + off[id];
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
    if (ok) {
        mamba2_status_t st = mamba2_ssd_forward(dev, tp[TH_OUT], NULL, tp[TH_FINAL], tp[TH_X],
                                                tp[TH_DT], tp[TH_A], tp[TH_BM], tp[TH_CM], &o,
                                                NULL, 0);
        if (st == MAMBA2_STATUS_OK)
            st = mamba2_ssd_backward(dev, &g, tp[TH_DOUT], tp[TH_DFINAL], tp[TH_X], tp[TH_DT],
                                     tp[TH_A], tp[TH_BM], tp[TH_CM], NULL, &o, NULL, 0);
        ok = th_expect(st == MAMBA2_STATUS_OK, "device mode: %s: %s", mamba2_status_string(st),
                       mamba2_last_error());
    }
    if (ok) {
        cl.clFinish(q);
        cl.clEnqueueReadBuffer(q, bout, CL_TRUE, 0, out_bytes + 1, out, 0, NULL, NULL);
        int same = 1;
        for (int id = TH_OUT; id < TH_NT; id++)
            if (h.v[id].present && memcmp(out + off[id], h.v[id].t.data, span_bytes(&h.v[id].t))) {
                th_fail("%s differs from host mode", th_tname[id]);
                same = 0;
            }
        if (same) th_note("all outputs bitwise equal to host mode");
        /* a pointer outside every registered buffer */
        mamba2_tensor_t bad = t[TH_X];
        bad.data = (char *)vin - 4096;
        mamba2_status_t st = mamba2_ssd_forward(dev, tp[TH_OUT], NULL, tp[TH_FINAL], &bad, tp[TH_DT],
                                                tp[TH_A], tp[TH_BM], tp[TH_CM], &o, NULL, 0);
        th_expect(st == MAMBA2_STATUS_INVALID_ARGUMENT && strstr(mamba2_last_error(), "registered"),
                  "unregistered pointer: %s: %s", mamba2_status_string(st), mamba2_last_error());
    }
    if (vin) mamba2_opencl_unregister_buffer(dev, bin);
    if (vout) mamba2_opencl_unregister_buffer(dev, bout);
    if (bin) cl.clReleaseMemObject(bin);
    if (bout) cl.clReleaseMemObject(bout);
    free(in);
    free(out);
    th_ssd_io_free(&h);
    th_ssd_data_free(&d);
    th_end();
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    mamba2_context_t *host = NULL;
    if (!load_cl() ||
        mamba2_context_create(&host, MAMBA2_BACKEND_OPENCL, 1) == MAMBA2_STATUS_BACKEND_UNAVAILABLE) {
        printf("SKIP: no OpenCL device\n");
        return 77;
    }
    /* the first device of the first platform with one, as the host-mode default picks */
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_device_id dv = NULL;
    cl.clGetPlatformIDs(16, plats, &np);
    for (cl_uint p = 0; p < np && p < 16 && !dv; p++) {
        cl_uint nd = 0;
        if (cl.clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 1, &dv, &nd) != CL_SUCCESS || !nd) dv = NULL;
    }
    cl_int err = 0;
    cl_context clc = cl.clCreateContext(NULL, 1, &dv, NULL, NULL, &err);
    cl_command_queue q = cl.clCreateCommandQueue(clc, dv, 0, &err);
    mamba2_context_t *dev = NULL;
    th_begin("device mode context");
    th_expect(mamba2_context_create_opencl(&dev, clc, dv, q) == MAMBA2_STATUS_OK, "create: %s",
              mamba2_last_error());
    void *base = NULL;
    th_expect(mamba2_opencl_register_buffer(host, (void *)clc, 64, &base) ==
                  MAMBA2_STATUS_INVALID_ARGUMENT,
              "registering on a host-mode context must be INVALID_ARGUMENT");
    th_end();
    static th_ssd_case cases[] = {
        {"all_options", SH(2, 77, 4, 8, 16, 32, 2), .D_mode = 2, .z = 1, .dt_bias = 1,
         .softplus = 1, .init = 1, .final = 1, .dfinal = 1, .limit = 1, .lo = 0.02, .hi = 0.08},
        {"varlen", SH(1, 0, 4, 8, 8, 8, 2), .nseq = 3, .seqlen = {10, 1, 70}, .cu64 = 1,
         .D_mode = 1, .init = 1, .final = 1, .dfinal = 1},
    };
    if (dev)
        for (int i = 0; i < 2; i++) run_case(&cases[i], host, dev, clc, q);
    mamba2_context_destroy(dev); /* releases its references; ours follow */
    mamba2_context_destroy(host);
    cl.clReleaseCommandQueue(q);
    cl.clReleaseContext(clc);
    return th_finish();
}
