/*
 * ops_cl_device.c — the OpenCL device-memory mode for test_ops (ops.h, `--op device`):
 * mamba2_context_create_opencl on the test's own cl_context and queue, every tensor in its own
 * registered cl_mem (mamba2_opencl_register_buffer; index tensors stay host arrays), the
 * context's scratch arena: bitwise the host mode's results, for one case of each spec op
 * (conv1d, RMSNorm, conv1d_step, ssd_step). The CUDA device mode: tests/gpu/test_cuda_device.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cl_loader.h"
#include "ops.h"


static tcl cl;
static cl_context dcl_ctx;
static cl_command_queue dcl_q;
static mamba2_context_t *dgpu;

/* 0 when the device mode cannot be set up (reported as a failure by the caller). */
static int device_open(void) {
    cl_platform_id pf[8];
    cl_uint np = 0, nd = 0;
    cl_device_id dev;
    cl_int e = 0;
    if (!tcl_load(&cl) || cl.clGetPlatformIDs(8, pf, &np) != CL_SUCCESS || !np) return 0;
    for (cl_uint i = 0; i < np && !nd; i++)
        if (cl.clGetDeviceIDs(pf[i], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS) nd = 0;
    if (!nd) return 0;
    dcl_ctx = cl.clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (!dcl_ctx || e) return 0;
    dcl_q = cl.clCreateCommandQueue(dcl_ctx, dev, 0, &e);
    if (!dcl_q || e) return 0;
    return mamba2_context_create_opencl(&dgpu, dcl_ctx, dev, dcl_q) == MAMBA2_STATUS_OK;
}

/* The op on cl_mem tensors (contiguous; index tensors stay host arrays) == the host mode. */
static void device_unit(const ops_be *be, const char *what, spec *s, int n, call_fn fn,
                        const void *cs) {
    th_begin("device mode %s [opencl]", what);
    if (!th_expect(dgpu != NULL, "no device-mode context (%s)", mamba2_last_error())) {
        th_end();
        return;
    }
    double *rh[MAXT];
    mamba2_status_t st = run_spec(be->ctx, s, n, 0, 0, fn, cs, rh, "opencl host", NULL);
    th_expect(st == MAMBA2_STATUS_OK, "host mode: %s", mamba2_last_error());
    gt g[MAXT];
    cl_mem m[MAXT] = {0};
    memset(g, 0, sizeof g);
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        if (s[i].dt != MAMBA2_DTYPE_F32) { /* an index tensor: host memory */
            gt_make(&g[i], s[i].dt, s[i].rank, s[i].sh, 0, 0, s[i].vals);
            continue;
        }
        const int64_t k = th_numel(s[i].rank, s[i].sh);
        float *h = (float *)th_xmalloc((size_t)(k > 0 ? k : 1) * sizeof(float));
        for (int64_t j = 0; j < k; j++)
            h[j] = s[i].is_out && !s[i].inout ? NAN : (float)s[i].vals[j];
        cl_int e = 0;
        m[i] = cl.clCreateBuffer(dcl_ctx, CL_MEM_READ_WRITE, (size_t)(k > 0 ? k : 1) * 4, NULL, &e);
        if (k > 0)
            cl.clEnqueueWriteBuffer(dcl_q, m[i], CL_TRUE, 0, (size_t)k * 4, h, 0, NULL, NULL);
        free(h);
        void *base = NULL;
        st = mamba2_opencl_register_buffer(dgpu, m[i], (size_t)(k > 0 ? k : 1) * 4, &base);
        th_expect(st == MAMBA2_STATUS_OK, "register_buffer: %s", mamba2_last_error());
        g[i].present = 1;
        g[i].t = mamba2_tensor_make(base, MAMBA2_DTYPE_F32, s[i].rank, s[i].sh);
    }
    st = fn(dgpu, cs, g);
    th_expect(st == MAMBA2_STATUS_OK, "device mode: %s", mamba2_last_error());
    cl.clFinish(dcl_q);
    for (int i = 0; i < n; i++) {
        if (!s[i].present) continue;
        if (!m[i]) {
            gt_free(&g[i]);
            continue;
        }
        const int64_t k = th_numel(s[i].rank, s[i].sh);
        if (s[i].is_out && k > 0 && rh[i]) {
            float *h = (float *)th_xmalloc((size_t)k * sizeof(float));
            double *v = (double *)th_xmalloc((size_t)k * sizeof(double));
            cl.clEnqueueReadBuffer(dcl_q, m[i], CL_TRUE, 0, (size_t)k * 4, h, 0, NULL, NULL);
            for (int64_t j = 0; j < k; j++) v[j] = h[j];
            th_expect(gt_bits_equal(v, rh[i], k), "%s differs from the host mode", s[i].name);
            free(h);
            free(v);
        }
        mamba2_opencl_unregister_buffer(dgpu, m[i]);
        cl.clReleaseMemObject(m[i]);
    }
    res_free(rh, n);
    th_end();
}

void ops_opencl_device(const ops_be *be) {
    if (be->kind != OB_OPENCL || !ops_selected("device mode")) return;
    if (!device_open()) {
        th_begin("device mode setup [opencl]");
        th_fail("cannot create a device-mode context: %s", mamba2_last_error());
        th_end();
        return;
    }
    const ops_sample *const smp[] = {&ops_conv1d_sample, &ops_rmsnorm_sample,
                                     &ops_conv1d_step_sample, &ops_ssd_step_sample};
    for (size_t i = 0; i < sizeof smp / sizeof *smp; i++) {
        spec s[MAXT];
        const int n = smp[i]->make(smp[i]->cs, s, smp[i]->seed);
        device_unit(be, smp[i]->what, s, n, smp[i]->fn, smp[i]->cs);
        spec_free(s, n);
    }
    mamba2_context_destroy(dgpu);
    dgpu = NULL;
    cl.clReleaseCommandQueue(dcl_q);
    cl.clReleaseContext(dcl_ctx);
}
