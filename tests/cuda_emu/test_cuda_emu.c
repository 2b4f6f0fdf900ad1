/*
 * test_cuda_emu.c — the emulated CUDA device itself (tests/cuda_emu/): that the stand-in
 * libcuda.so.1 returns what a real driver returns where cuda.c could go wrong, and that the
 * emulator exposes the kernel defects it exists to expose.
 *   driver: cuInit first; no current context -> CUDA_ERROR_INVALID_CONTEXT; copies outside an
 *   allocation and empty allocations -> INVALID_VALUE; unknown kernel names -> NOT_FOUND; the
 *   sm_90 launch limits (grid y/z, block size, dynamic shared memory above 48 KiB without the
 *   opt-in, the 227 KiB opt-in ceiling) -> INVALID_VALUE.
 *   kernels: a missing __syncthreads() gives order-dependent results (the emulator alternates
 *   the thread order from block to block); a barrier that half the block skips and a
 *   misaligned wmma pointer fail the launch and leave the context's error sticky, as a device
 *   fault does; a tf32 MMA tile matches a host computation.
 * Run with the stand-in first on LD_LIBRARY_PATH (tests/ops_cuda_emu.cmake).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "gpu/cu_loader.h"
#include "harness.h"

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
static struct {
    tcu t;
    tcu_result (*load)(void **, const void *);
    tcu_result (*get)(void **, void *, const char *);
    tcu_result (*setattr)(void *, int, int);
    tcu_result (*ctxsync)(void);
    tcu_result (*getattr)(int *, int, int);
    long (*count)(const char *);
    launch_fn launch;
} cu;

static void *fn(void *mod, const char *name) {
    void *f = NULL;
    th_expect(cu.get(&f, mod, name) == 0, "cuModuleGetFunction(%s)", name);
    return f;
}
static int launch1(void *f, unsigned gx, unsigned gy, unsigned bx, unsigned smem, void **p) {
    return cu.launch(f, gx, gy, 1, bx, 1, 1, smem, NULL, p, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    *(void **)&cu.count = h ? dlsym(h, "m2emu_call_count") : NULL;
    th_begin("emulated driver: loads");
    if (!th_expect(h && cu.count, "libcuda.so.1 is not the emulator (LD_LIBRARY_PATH?)"))
        return th_finish();
    *(void **)&cu.load = dlsym(h, "cuModuleLoadData");
    *(void **)&cu.get = dlsym(h, "cuModuleGetFunction");
    *(void **)&cu.setattr = dlsym(h, "cuFuncSetAttribute");
    *(void **)&cu.ctxsync = dlsym(h, "cuCtxSynchronize");
    *(void **)&cu.getattr = dlsym(h, "cuDeviceGetAttribute");
    *(void **)&cu.launch = dlsym(h, "cuLaunchKernel");
    tcu_ptr p = 0;
    th_expect(tcu_open(&cu.t, 0) == 1, "cuInit / device 0 / primary context");
    th_end();

    th_begin("emulated driver: contexts, memory, modules");
    cu.t.cuCtxSetCurrent(NULL);
    th_expect(cu.t.cuMemAlloc_v2(&p, 64) == 201, "cuMemAlloc without a context: want 201");
    cu.t.cuCtxSetCurrent(cu.t.ctx);
    int major = 0, optin = 0;
    cu.getattr(&major, 75, 0), cu.getattr(&optin, 97, 0);
    th_expect(major == 9 && optin == 227 * 1024, "sm_%d, opt-in smem %d", major, optin);
    th_expect(cu.t.cuMemAlloc_v2(&p, 0) == 1, "cuMemAlloc(0): want INVALID_VALUE");
    th_expect(cu.t.cuMemAlloc_v2(&p, 1024) == 0 && p % 256 == 0, "cuMemAlloc(1024)");
    char buf[1100] = {0};
    th_expect(cu.t.cuMemcpyHtoD_v2(p, buf, 1025) == 1, "copy past the allocation: want 1");
    th_expect(cu.t.cuMemcpyDtoH_v2(buf, p + 512, 512) == 0, "copy of the last 512 bytes");
    th_expect(cu.t.cuMemcpyDtoH_v2(buf, p + 513, 512) == 1, "copy 1 byte past: want 1");
    th_expect(cu.t.cuMemsetD8_v2(p, 0, 1024) == 0, "cuMemsetD8");
    void *mod = NULL, *f = NULL;
    th_expect(cu.load(&mod, "image") == 0, "cuModuleLoadData");
    th_expect(cu.get(&f, mod, "m2_no_such_kernel") == 500, "unknown kernel: want NOT_FOUND");
    fn(mod, "m2_ssd_chunk_cumsum_wi64");
    th_end();

    th_begin("emulated driver: sm_90 launch limits");
    void *fb = fn(mod, "m2emu_selftest_barrier_wi64");
    int one = 1;
    float base = 0.0f;
    void *pa[3] = {&p, &one, &base};
    th_expect(launch1(fb, 1, 65536, 64, 0, pa) == 1, "grid.y 65536: want INVALID_VALUE");
    th_expect(cu.launch(fb, 1, 1, 1, 1025, 1, 1, 0, NULL, pa, NULL) == 1, "1025 threads");
    th_expect(cu.launch(fb, 1, 1, 1, 32, 1, 65, 0, NULL, pa, NULL) == 1, "block.z 65");
    th_expect(launch1(fb, 1, 1, 32, 0, pa) == 1, "a _wi64 kernel on 32 threads");
    th_expect(launch1(fb, 1, 1, 64, 48 * 1024 + 1, pa) == 1, "48 KiB + 1 without the opt-in");
    th_expect(cu.setattr(fb, 8, 227 * 1024 + 1) == 1, "opt-in above 227 KiB: want 1");
    th_expect(cu.setattr(fb, 8, 100 * 1024) == 0, "opt-in 100 KiB");
    th_expect(launch1(fb, 1, 1, 64, 100 * 1024, pa) == 0, "100 KiB after the opt-in");
    th_expect(launch1(fb, 1, 1, 64, 100 * 1024 + 1, pa) == 1, "above the opt-in: want 1");
    th_end();

    th_begin("emulated kernels: a missing barrier shows");
    float out[256]; /* the barrier kernel writes 2 x 64, the wmma one a 16 x 16 tile */
    for (int bar = 0; bar < 2; bar++) {
        pa[1] = &bar;
        base = 1000.0f * (float)(bar + 1);
        th_expect(launch1(fb, 2, 1, 64, 0, pa) == 0, "launch (barrier %d)", bar);
        cu.t.cuMemcpyDtoH_v2(out, p, 128 * sizeof(float));
        int right[2] = {0, 0};
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 64; t++) right[b] += out[b * 64 + t] == base + (float)(b * 64 + (t + 1) % 64);
        if (bar)
            th_expect(right[0] == 64 && right[1] == 64, "with the barrier: %d, %d of 64 right",
                      right[0], right[1]);
        else
            th_expect(right[0] < 64 && right[1] < 64 && right[0] != right[1],
                      "without it: blocks 0 and 1 (forward, reverse order) %d and %d of 64 right",
                      right[0], right[1]);
        th_note("barrier %d: %d + %d right;", bar, right[0], right[1]);
    }
    th_end();

    th_begin("emulated kernels: tf32 wmma");
    float host[128 + 128], ref[256];
    for (int i = 0; i < 256; i++) host[i] = (float)((i * 7) % 13) * 0.25f - 1.0f;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = 1.0f;
            for (int k = 0; k < 8; k++) s += host[i * 8 + k] * host[128 + k * 16 + j];
            ref[i * 16 + j] = s;
        }
    tcu_ptr pin = 0;
    cu.t.cuMemAlloc_v2(&pin, sizeof host);
    cu.t.cuMemcpyHtoD_v2(pin, host, sizeof host);
    void *fw = fn(mod, "m2emu_selftest_wmma_tc32");
    int off = 0;
    void *pw[3] = {&pin, &p, &off};
    th_expect(launch1(fw, 1, 1, 32, 0, pw) == 0, "launch");
    cu.t.cuMemcpyDtoH_v2(out, p, 256 * sizeof(float));
    th_expect(!memcmp(out, ref, sizeof ref), "D = A B + C differs from the host's");
    th_end();

    th_begin("emulated kernels: faults are sticky");
    off = 1;
    th_expect(launch1(fw, 1, 1, 32, 0, pw) == 719, "misaligned wmma pointer: want 719");
    th_expect(cu.ctxsync() == 719, "the context's error is sticky");
    cu.t.cuCtxSetCurrent(NULL);
    /* the last reference: the context and all it owns (p, pin, mod) go, the next retain is
     * fresh */
    cu.t.cuDevicePrimaryCtxRelease_v2(0);
    th_expect(cu.t.cuDevicePrimaryCtxRetain(&cu.t.ctx, 0) == 0 &&
                  cu.t.cuCtxSetCurrent(cu.t.ctx) == 0 && cu.ctxsync() == 0,
              "a fresh primary context");
    th_expect(cu.t.cuMemFree_v2(p) == 1, "memory of the destroyed context: want INVALID_VALUE");
    void *mod2 = NULL;
    cu.load(&mod2, "image");
    void *fd = fn(mod2, "m2emu_selftest_divergent_wi64");
    th_expect(cu.t.cuMemAlloc_v2(&p, 64 * sizeof(float)) == 0, "cuMemAlloc");
    void *pd[1] = {&p};
    th_expect(launch1(fd, 1, 1, 64, 0, pd) == 719, "a barrier half the block skips: want 719");
    th_expect(cu.count("cuLaunchKernel") >= 10, "call counts: %ld launches",
              cu.count("cuLaunchKernel"));
    cu.t.cuCtxSetCurrent(NULL);
    cu.t.cuDevicePrimaryCtxRelease_v2(0); /* frees p and mod2 */
    th_end();
    return th_finish();
}
