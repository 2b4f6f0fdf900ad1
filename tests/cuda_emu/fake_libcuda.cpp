// fake_libcuda.cpp — a stand-in libcuda.so.1: the CUDA driver API entry points that
// src/cuda/cuda.c and tests/gpu/cu_loader.h open with dlsym, over one emulated sm_90 device
// (an H200's limits) whose kernels are the host-compiled ones of kernels_host.cpp.
//
// What it models, as the driver documents it: cuInit before anything; the per-thread context
// stack (memory, module, stream and launch calls need a current context, a launch the
// context of its function's module); device memory as plain host allocations (so ASan and
// LSan see every byte; a copy or memset outside one allocation is CUDA_ERROR_INVALID_VALUE);
// modules (the image is not read: cuModuleGetFunction finds a kernel by name and fails with
// CUDA_ERROR_NOT_FOUND for any other name); function attributes (the dynamic shared memory
// opt-in, 48 KiB by default, at most 227 KiB); cuLaunchKernel's limits (block <= 1024 threads,
// 1024 x 1024 x 64; grid x < 2^31, y and z <= 65535; dynamic shared memory <= the function's
// limit) with the error a real driver returns; streams and events. Work runs synchronously in
// the calling thread, so every stream is trivially ordered and every event has passed when it is
// recorded. A kernel that fails (a wmma rule, a barrier not every thread reaches) makes the
// context's error sticky (CUDA_ERROR_LAUNCH_FAILED, as a device fault does) and prints why.
// The last cuDevicePrimaryCtxRelease destroys the context and everything it owns.
// Not modelled: static shared memory and registers per function, occupancy, asynchrony.
// M2EMU_MEM_BYTES caps the emulated memory (default 4 GiB); m2emu_call_count(name) counts calls.
// M2EMU_MAX_GRID_X, _Y, _Z lower the grid limits (read at every attribute query and launch, so
// a test can change them between contexts): a small problem then needs the host's grid fold,
// and a launch past them still fails.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emu_sched.h"

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
    OK = 0,
    E_INVALID_VALUE = 1,
    E_OUT_OF_MEMORY = 2,
    E_NOT_INITIALIZED = 3,
    E_INVALID_DEVICE = 101,
    E_INVALID_CONTEXT = 201,
    E_INVALID_HANDLE = 400,
    E_NOT_FOUND = 500,
    E_LAUNCH_FAILED = 719,
    E_NOT_SUPPORTED = 801,
};

namespace {
const int kSmemDefault = 48 * 1024, kSmemOptin = 227 * 1024;
const size_t kTotalMem = 143771336704ull; // an H200's cuDeviceTotalMem

struct ctx_st {
    int device = 0;
    int refs = 0;
    int sticky = OK;
};
struct module_st;
struct func_st {
    const m2emu_kernel *k;
    module_st *mod;
    int max_dyn = kSmemDefault;
    int carveout = -1;
};
struct module_st {
    ctx_st *ctx;
    std::vector<func_st *> funcs;
};
struct stream_st {
    ctx_st *ctx;
};
struct event_st {
    ctx_st *ctx;
    unsigned flags;
    double t = -1; // seconds at the last record
};

std::mutex mu;
bool inited = false;
ctx_st primary;
std::map<uintptr_t, size_t> allocs; // device memory: base -> bytes
size_t used = 0;
std::set<void *> hosts, modules, streams, events;
thread_local std::vector<ctx_st *> stack;

#define M2EMU_APIS(X)                                                                            \
    X(cuInit) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2)            \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoD_v2) X(cuMemcpyDtoDAsync_v2)  \
    X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuMemsetD32_v2) X(cuMemsetD32Async)                   \
    X(cuLaunchKernel) X(cuStreamSynchronize) X(cuCtxSynchronize) X(cuMemHostAlloc)              \
    X(cuMemFreeHost) X(cuEventRecord) X(cuEventSynchronize) X(cuModuleLoadData)                 \
    X(cuFuncSetAttribute)
enum {
#define M2EMU_ID(n) ID_##n,
    M2EMU_APIS(M2EMU_ID)
#undef M2EMU_ID
    NUM_IDS
};
const char *const api_names[NUM_IDS] = {
#define M2EMU_NAME(n) #n,
    M2EMU_APIS(M2EMU_NAME)
#undef M2EMU_NAME
};
std::atomic<long> counts[NUM_IDS];
#define COUNT(n) counts[ID_##n].fetch_add(1, std::memory_order_relaxed)

double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}
ctx_st *current() { return stack.empty() ? nullptr : stack.back(); }
// the current context's state: E_NOT_INITIALIZED, E_INVALID_CONTEXT, its sticky error or OK
int need_ctx() {
    if (!inited) return E_NOT_INITIALIZED;
    ctx_st *c = current();
    if (!c || c->refs <= 0) return E_INVALID_CONTEXT;
    return c->sticky;
}
// grid limit of axis a (0 x, 1 y, 2 z): an H200's, or M2EMU_MAX_GRID_X/_Y/_Z when set lower
unsigned grid_limit(int a) {
    static const char *const var[3] = {"M2EMU_MAX_GRID_X", "M2EMU_MAX_GRID_Y", "M2EMU_MAX_GRID_Z"};
    const unsigned long long hw = a == 0 ? 2147483647ull : 65535ull;
    const char *e = getenv(var[a]);
    const unsigned long long v = e && *e ? strtoull(e, nullptr, 0) : hw;
    return (unsigned)(v >= 1 && v < hw ? v : hw);
}
size_t mem_limit() {
    const char *e = getenv("M2EMU_MEM_BYTES");
    return e && *e ? (size_t)strtoull(e, nullptr, 0) : (size_t)4 << 30;
}
// [p, p + n) lies in one allocation (caller holds mu)
bool in_device(CUdeviceptr p, size_t n) {
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p - it->first + n <= it->second;
}
bool stream_ok(void *s) {
    return !s || s == (void *)1 || s == (void *)2 || streams.count(s);
}
CUresult copy_check(CUdeviceptr dst, bool dst_dev, CUdeviceptr src, bool src_dev, size_t n,
                    void *stream) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!stream_ok(stream)) return E_INVALID_HANDLE;
    if (n == 0) return OK;
    if (!dst || !src) return E_INVALID_VALUE;
    if ((dst_dev && !in_device(dst, n)) || (src_dev && !in_device(src, n))) return E_INVALID_VALUE;
    return OK;
}
CUresult copy(CUdeviceptr dst, bool dd, CUdeviceptr src, bool sd, size_t n, void *stream) {
    CUresult r = copy_check(dst, dd, src, sd, n, stream);
    if (r == OK && n) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return r;
}
CUresult memset_elems(CUdeviceptr p, unsigned v, size_t count, int width, void *stream) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!stream_ok(stream)) return E_INVALID_HANDLE;
    if (!count) return OK;
    if (!in_device(p, count * width) || (p % width)) return E_INVALID_VALUE;
    if (width == 1) memset((void *)(uintptr_t)p, (int)v, count);
    else
        for (size_t i = 0; i < count; i++) memcpy((char *)(uintptr_t)p + 4 * i, &v, 4);
    return OK;
}
// the naming rule of src/gpu/kernels/list.h and src/cuda/tc_list.h: a name ending _AxB is a
// block of A x B threads, _wiN / _wgN / _tcN a 1-D block of N
bool block_named(const char *name, unsigned bx, unsigned by, unsigned bz, char *want, size_t n) {
    const char *u = strrchr(name, '_');
    unsigned a = 0, b = 1;
    if (!u) return true;
    if (sscanf(u, "_%ux%u", &a, &b) == 2 || sscanf(u, "_wi%u", &a) == 1 ||
        sscanf(u, "_wg%u", &a) == 1 || sscanf(u, "_tc%u", &a) == 1) {
        snprintf(want, n, "%u x %u x 1", a, b);
        return bx == a && by == b && bz == 1;
    }
    return true;
}
// The last release of the primary context destroys it, and with it everything it owns, as the
// driver does: device and pinned host memory, modules (their functions), streams, events
// (caller holds mu). A program that releases its context leaks nothing here either.
void destroy_primary() {
    for (auto &a : allocs) free((void *)a.first);
    allocs.clear();
    used = 0;
    for (void *h : hosts) free(h);
    hosts.clear();
    for (void *m : modules) {
        for (func_st *f : ((module_st *)m)->funcs) delete f;
        delete (module_st *)m;
    }
    modules.clear();
    for (void *x : streams) delete (stream_st *)x;
    streams.clear();
    for (void *x : events) delete (event_st *)x;
    events.clear();
}
} // namespace

API long m2emu_call_count(const char *name) {
    for (int i = 0; i < NUM_IDS; i++)
        if (!strcmp(api_names[i], name)) return counts[i].load();
    return -1;
}
API void m2emu_reset_counts(void) {
    for (auto &c : counts) c.store(0);
}

API CUresult cuInit(unsigned flags) {
    COUNT(cuInit);
    if (flags) return E_INVALID_VALUE;
    inited = true;
    return OK;
}
API CUresult cuDriverGetVersion(int *v) {
    if (!v) return E_INVALID_VALUE;
    *v = 13000;
    return OK;
}
API CUresult cuDeviceGetCount(int *n) {
    if (!inited) return E_NOT_INITIALIZED;
    if (!n) return E_INVALID_VALUE;
    *n = 1;
    return OK;
}
API CUresult cuDeviceGet(int *d, int ordinal) {
    if (!inited) return E_NOT_INITIALIZED;
    if (!d) return E_INVALID_VALUE;
    if (ordinal != 0) return E_INVALID_DEVICE;
    *d = 0;
    return OK;
}
API CUresult cuDeviceGetName(char *name, int len, int dev) {
    if (!inited) return E_NOT_INITIALIZED;
    if (dev != 0) return E_INVALID_DEVICE;
    if (!name || len <= 0) return E_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", "NVIDIA H200 (mamba2c emulated device)");
    return OK;
}
API CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    if (!inited) return E_NOT_INITIALIZED;
    if (dev != 0) return E_INVALID_DEVICE;
    if (!bytes) return E_INVALID_VALUE;
    *bytes = kTotalMem;
    return OK;
}
API CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (!inited) return E_NOT_INITIALIZED;
    if (dev != 0) return E_INVALID_DEVICE;
    if (!v) return E_INVALID_VALUE;
    switch (attr) {
    case 1: case 2: case 3: *v = 1024; return OK;     // threads per block, block x, y
    case 4: *v = 64; return OK;                       // block z
    case 5: case 6: case 7: *v = (int)grid_limit(attr - 5); return OK; // grid x, y, z
    case 8: *v = kSmemDefault; return OK;             // shared memory per block
    case 9: *v = 65536; return OK;                    // constant memory
    case 10: *v = 32; return OK;                      // warp size
    case 12: case 82: *v = 65536; return OK;          // registers per block / SM
    case 13: *v = 1980000; return OK;                 // clock rate, kHz
    case 16: *v = 132; return OK;                     // SMs
    case 38: *v = 60 * 1024 * 1024; return OK;        // L2
    case 39: *v = 2048; return OK;                    // threads per SM
    case 41: *v = 1; return OK;                       // unified addressing
    case 75: *v = 9; return OK;                       // compute capability
    case 76: *v = 0; return OK;
    case 81: *v = 228 * 1024; return OK;              // shared memory per SM
    case 97: *v = kSmemOptin; return OK;              // per block, opt-in
    default: *v = 0; return OK;
    }
}
API CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (!inited) return E_NOT_INITIALIZED;
    if (dev != 0) return E_INVALID_DEVICE;
    if (!ctx) return E_INVALID_VALUE;
    std::lock_guard<std::mutex> g(mu);
    if (primary.refs++ == 0) primary.sticky = OK; // a fresh primary context
    *ctx = &primary;
    return OK;
}
API CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    if (!inited) return E_NOT_INITIALIZED;
    if (dev != 0) return E_INVALID_DEVICE;
    std::lock_guard<std::mutex> g(mu);
    if (primary.refs <= 0) return E_INVALID_CONTEXT;
    if (--primary.refs == 0) destroy_primary();
    return OK;
}
API CUresult cuCtxPushCurrent_v2(void *c) {
    if (!inited) return E_NOT_INITIALIZED;
    if (c != &primary || primary.refs <= 0) return E_INVALID_CONTEXT;
    stack.push_back((ctx_st *)c);
    return OK;
}
API CUresult cuCtxPopCurrent_v2(void **out) {
    if (!inited) return E_NOT_INITIALIZED;
    if (stack.empty()) return E_INVALID_CONTEXT;
    if (out) *out = stack.back();
    stack.pop_back();
    return OK;
}
API CUresult cuCtxSetCurrent(void *c) {
    if (!inited) return E_NOT_INITIALIZED;
    if (!c) {
        if (!stack.empty()) stack.pop_back();
        return OK;
    }
    if (c != &primary || primary.refs <= 0) return E_INVALID_CONTEXT;
    if (stack.empty()) stack.push_back((ctx_st *)c);
    else stack.back() = (ctx_st *)c;
    return OK;
}
API CUresult cuCtxGetCurrent(void **c) {
    if (!inited) return E_NOT_INITIALIZED;
    if (!c) return E_INVALID_VALUE;
    *c = current();
    return OK;
}
API CUresult cuCtxGetDevice(int *d) {
    int r = need_ctx();
    if (r == E_NOT_INITIALIZED || r == E_INVALID_CONTEXT) return r;
    *d = 0;
    return OK;
}
API CUresult cuCtxSynchronize(void) {
    COUNT(cuCtxSynchronize);
    return need_ctx();
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    COUNT(cuMemAlloc_v2);
    int r = need_ctx();
    if (r) return r;
    if (!p || bytes == 0) return E_INVALID_VALUE;
    std::lock_guard<std::mutex> g(mu);
    if (bytes > mem_limit() || used > mem_limit() - bytes) return E_OUT_OF_MEMORY;
    void *m = nullptr;
    if (posix_memalign(&m, 256, bytes)) return E_OUT_OF_MEMORY; // cudaMalloc's alignment
    allocs[(uintptr_t)m] = bytes;
    used += bytes;
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
API CUresult cuMemFree_v2(CUdeviceptr p) {
    COUNT(cuMemFree_v2);
    int r = need_ctx();
    if (r) return r;
    if (!p) return OK;
    std::lock_guard<std::mutex> g(mu);
    auto it = allocs.find((uintptr_t)p);
    if (it == allocs.end()) return E_INVALID_VALUE;
    used -= it->second;
    allocs.erase(it);
    free((void *)(uintptr_t)p);
    return OK;
}
API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (free_b) *free_b = mem_limit() > used ? mem_limit() - used : 0;
    if (total) *total = mem_limit();
    return OK;
}
API CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
    COUNT(cuMemHostAlloc);
    int r = need_ctx();
    if (r) return r;
    if (!p || bytes == 0) return E_INVALID_VALUE;
    void *m = nullptr;
    if (posix_memalign(&m, 4096, bytes)) return E_OUT_OF_MEMORY;
    std::lock_guard<std::mutex> g(mu);
    hosts.insert(m);
    *p = m;
    return OK;
}
API CUresult cuMemFreeHost(void *p) {
    COUNT(cuMemFreeHost);
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!hosts.erase(p)) return E_INVALID_VALUE;
    free(p);
    return OK;
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
    COUNT(cuMemcpyHtoD_v2);
    return copy(d, true, (CUdeviceptr)(uintptr_t)s, false, n, nullptr);
}
API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
    COUNT(cuMemcpyDtoH_v2);
    return copy((CUdeviceptr)(uintptr_t)d, false, s, true, n, nullptr);
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    COUNT(cuMemcpyDtoD_v2);
    return copy(d, true, s, true, n, nullptr);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st) {
    COUNT(cuMemcpyHtoDAsync_v2);
    return copy(d, true, (CUdeviceptr)(uintptr_t)s, false, n, st);
}
API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st) {
    COUNT(cuMemcpyDtoHAsync_v2);
    return copy((CUdeviceptr)(uintptr_t)d, false, s, true, n, st);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) {
    COUNT(cuMemcpyDtoDAsync_v2);
    return copy(d, true, s, true, n, st);
}
API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    COUNT(cuMemsetD8_v2);
    return memset_elems(p, v, n, 1, nullptr);
}
API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *st) {
    COUNT(cuMemsetD8Async);
    return memset_elems(p, v, n, 1, st);
}
API CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned v, size_t n) {
    COUNT(cuMemsetD32_v2);
    return memset_elems(p, v, n, 4, nullptr);
}
API CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, void *st) {
    COUNT(cuMemsetD32Async);
    return memset_elems(p, v, n, 4, st);
}

API CUresult cuStreamCreate(void **s, unsigned flags) {
    int r = need_ctx();
    if (r) return r;
    if (!s || flags > 1) return E_INVALID_VALUE;
    std::lock_guard<std::mutex> g(mu);
    stream_st *x = new stream_st{current()};
    streams.insert(x);
    *s = x;
    return OK;
}
API CUresult cuStreamDestroy_v2(void *s) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!streams.erase(s)) return E_INVALID_HANDLE;
    delete (stream_st *)s;
    return OK;
}
API CUresult cuStreamSynchronize(void *s) {
    COUNT(cuStreamSynchronize);
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    return stream_ok(s) ? OK : E_INVALID_HANDLE;
}
API CUresult cuStreamQuery(void *s) { return cuStreamSynchronize(s); }
API CUresult cuStreamWaitEvent(void *s, void *e, unsigned) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    return stream_ok(s) && events.count(e) ? OK : E_INVALID_HANDLE;
}
API CUresult cuEventCreate(void **e, unsigned flags) {
    int r = need_ctx();
    if (r) return r;
    if (!e || flags > 0x7) return E_INVALID_VALUE;
    std::lock_guard<std::mutex> g(mu);
    event_st *x = new event_st{current(), flags};
    events.insert(x);
    *e = x;
    return OK;
}
API CUresult cuEventDestroy_v2(void *e) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!events.erase(e)) return E_INVALID_HANDLE;
    delete (event_st *)e;
    return OK;
}
API CUresult cuEventRecord(void *e, void *s) {
    COUNT(cuEventRecord);
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!events.count(e) || !stream_ok(s)) return E_INVALID_HANDLE;
    ((event_st *)e)->t = now();
    return OK;
}
API CUresult cuEventSynchronize(void *e) {
    COUNT(cuEventSynchronize);
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    return events.count(e) ? OK : E_INVALID_HANDLE;
}
API CUresult cuEventQuery(void *e) { return cuEventSynchronize(e); }
API CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!ms || !events.count(a) || !events.count(b)) return E_INVALID_HANDLE;
    const event_st *x = (event_st *)a, *y = (event_st *)b;
    if ((x->flags & 2) || (y->flags & 2) || x->t < 0 || y->t < 0) return E_INVALID_HANDLE;
    *ms = (float)((y->t - x->t) * 1e3);
    return OK;
}

API CUresult cuModuleLoadData(void **m, const void *image) {
    COUNT(cuModuleLoadData);
    int r = need_ctx();
    if (r) return r;
    if (!m || !image) return E_INVALID_VALUE;
    std::lock_guard<std::mutex> g(mu);
    module_st *x = new module_st{current(), {}};
    modules.insert(x);
    *m = x;
    return OK;
}
API CUresult cuModuleUnload(void *m) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!modules.erase(m)) return E_INVALID_HANDLE;
    module_st *x = (module_st *)m;
    for (func_st *f : x->funcs) delete f;
    delete x;
    return OK;
}
API CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    int r = need_ctx();
    if (r) return r;
    if (!f || !name) return E_INVALID_VALUE;
    std::lock_guard<std::mutex> g(mu);
    if (!modules.count(m)) return E_INVALID_HANDLE;
    const m2emu_kernel *k = m2emu_find_kernel(name);
    if (!k) return E_NOT_FOUND;
    module_st *x = (module_st *)m;
    for (func_st *fn : x->funcs)
        if (fn->k == k) {
            *f = fn;
            return OK;
        }
    func_st *fn = new func_st{k, x};
    x->funcs.push_back(fn);
    *f = fn;
    return OK;
}
// a function of a live module (caller holds mu)
static bool func_ok(void *f) {
    if (!f) return false;
    for (void *m : modules)
        for (func_st *fn : ((module_st *)m)->funcs)
            if (fn == f) return true;
    return false;
}
API CUresult cuFuncSetAttribute(void *f, int attr, int v) {
    COUNT(cuFuncSetAttribute);
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!func_ok(f)) return E_INVALID_HANDLE;
    func_st *fn = (func_st *)f;
    if (attr == 8) { // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        if (v < 0 || v > kSmemOptin) return E_INVALID_VALUE;
        fn->max_dyn = v;
        return OK;
    }
    if (attr == 9) { // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
        if (v < -1 || v > 100) return E_INVALID_VALUE;
        fn->carveout = v;
        return OK;
    }
    return E_INVALID_VALUE;
}
API CUresult cuFuncGetAttribute(int *v, int attr, void *f) {
    int r = need_ctx();
    if (r) return r;
    std::lock_guard<std::mutex> g(mu);
    if (!func_ok(f)) return E_INVALID_HANDLE;
    if (!v) return E_INVALID_VALUE;
    const func_st *fn = (const func_st *)f;
    switch (attr) {
    case 0: *v = 1024; return OK;              // max threads per block
    case 1: case 2: case 3: *v = 0; return OK; // static shared, const, local bytes: unknown
    case 4: *v = 32; return OK;                // registers
    case 5: case 6: *v = 90; return OK;        // PTX, binary version
    case 7: *v = 0; return OK;
    case 8: *v = fn->max_dyn; return OK;
    case 9: *v = fn->carveout; return OK;
    default: return E_INVALID_VALUE;
    }
}

API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned smem, void *stream,
                            void **params, void **extra) {
    COUNT(cuLaunchKernel);
    int r = need_ctx();
    if (r) return r;
    func_st *fn;
    {
        std::lock_guard<std::mutex> g(mu);
        if (!func_ok(f)) return E_INVALID_HANDLE;
        fn = (func_st *)f;
        if (fn->mod->ctx != current()) return E_INVALID_HANDLE; // another context's function
        if (!stream_ok(stream)) return E_INVALID_HANDLE;
    }
    if (!gx || !gy || !gz || gx > grid_limit(0) || gy > grid_limit(1) || gz > grid_limit(2))
        return E_INVALID_VALUE;
    if (!bx || !by || !bz || bx > 1024 || by > 1024 || bz > 64 ||
        (unsigned long long)bx * by * bz > 1024)
        return E_INVALID_VALUE;
    if ((int)smem > fn->max_dyn || smem > (unsigned)kSmemOptin) return E_INVALID_VALUE;
    if (extra) return E_NOT_SUPPORTED; // CU_LAUNCH_PARAM_*: not modelled
    if (!params && fn->k->nparams > 0) return E_INVALID_VALUE;
    char want[64], err[512];
    if (!block_named(fn->k->name, bx, by, bz, want, sizeof want)) {
        fprintf(stderr, "cuda_emu: %s launched with a block of %u x %u x %u threads; its name "
                "says %s\n", fn->k->name, bx, by, bz, want);
        return E_INVALID_VALUE;
    }
    if (m2emu_run_grid(fn->k, uint3{gx, gy, gz}, uint3{bx, by, bz}, smem, params, err,
                       sizeof err)) {
        fprintf(stderr, "cuda_emu: %s (grid %u x %u x %u, block %u x %u x %u, %u bytes dynamic "
                "shared): %s\n", fn->k->name, gx, gy, gz, bx, by, bz, smem, err);
        fn->mod->ctx->sticky = E_LAUNCH_FAILED;
        return E_LAUNCH_FAILED;
    }
    return OK;
}

API CUresult cuGetErrorName(CUresult e, const char **s) {
    if (!s) return E_INVALID_VALUE;
    switch (e) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case E_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case E_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case E_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
    case E_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; return OK;
    case E_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case E_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; return OK;
    case E_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
    case E_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; return OK;
    case E_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; return OK;
    default: *s = nullptr; return E_INVALID_VALUE;
    }
}
API CUresult cuGetErrorString(CUresult e, const char **s) { return cuGetErrorName(e, s); }
