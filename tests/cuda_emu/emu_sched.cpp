// emu_sched.cpp — runs a host-compiled CUDA kernel over a grid: the blocks one after another on
// the calling OS thread, the threads of a block as fibers (one stack each) switched
// cooperatively at __syncthreads() and at warp collectives. Launches from several OS threads
// wait for each other (a process-wide lock), so the block's ids and __shared__ arrays are plain
// globals, which the kernels read without a TLS lookup.
//
// A block runs in phases. Each phase resumes every ready fiber once, in thread order on even
// phases and in reverse order on odd ones (the parity also alternates from block to block), so
// a missing barrier shows as a result that depends on the order, not as a lucky pass. When all
// fibers have stopped: a warp whose every lane waits at the same collective runs it (once, for
// the warp) and resumes; when every live thread waits at __syncthreads(), the barrier opens.
// A barrier or collective that not every thread of the block (lane of the warp) reaches is an
// error of the launch, as are divergent collectives; the block is then abandoned.
// The context switch is a few instructions on x86-64 (the callee-saved registers) and ucontext
// elsewhere; under AddressSanitizer every switch is announced
// with __sanitizer_{start,finish}_switch_fiber so that ASan follows the stacks.
#include "emu_sched.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define M2EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define M2EMU_ASAN 1
#endif
#endif
#ifdef M2EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

uint3 threadIdx, blockIdx, blockDim, gridDim;

#if defined(__x86_64__)
// m2emu_switch(&from_sp, to_sp): save the callee-saved registers on this stack, store its
// stack pointer in *from_sp, continue on to_sp (a stack saved the same way, or a fresh one laid
// out by init_fiber). MXCSR and the x87 control word are not switched: every fiber of a launch
// runs in the launching thread's floating-point environment, which no kernel changes (saving
// them made the switch several times slower: fnstcw/fldcw serialise).
extern "C" void m2emu_switch(void **from_sp, void *to_sp);
asm(".text\n"
    ".globl m2emu_switch\n"
    ".hidden m2emu_switch\n"
    ".type m2emu_switch,@function\n"
    "m2emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size m2emu_switch,.-m2emu_switch\n");
#endif

namespace {

enum { READY, AT_BAR, AT_WARP, DONE };

struct fiber {
    unsigned char *mem = nullptr; // the mapping: a guard page, then the stack
    size_t mem_bytes = 0;
    unsigned char *stack = nullptr;
    size_t stack_bytes = 0;
#if defined(__x86_64__)
    void *sp = nullptr;
#else
    ucontext_t uc;
#endif
    void *asan_fake = nullptr;
    int state = DONE;
    uint3 tid{0, 0, 0};
    m2emu_collective_fn fn = nullptr;
    void *arg = nullptr;
};

struct runner {
    std::vector<fiber> f;
    int cur = -1; // the fiber running, -1: the scheduler
#if defined(__x86_64__)
    void *main_sp = nullptr;
#else
    ucontext_t main_uc;
#endif
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    const m2emu_kernel *k = nullptr;
    void **params = nullptr;
    unsigned char *dsmem = nullptr;
    int n_bar = 0, n_warp = 0, n_done = 0; // fibers AT_BAR, AT_WARP, DONE
    void *args[32];                         // a warp's collective arguments
    bool failed = false;
    char err[400];
    ~runner() {
        for (fiber &x : f)
            if (x.mem) munmap(x.mem, x.mem_bytes);
    }
};
// the scheduler's state; one launch at a time (launch_mu), so one runner serves them all
std::mutex launch_mu;
runner run_state;
runner *const tl = &run_state;

void set_state(runner &r, fiber &x, int s) {
    r.n_bar += (s == AT_BAR) - (x.state == AT_BAR);
    r.n_warp += (s == AT_WARP) - (x.state == AT_WARP);
    r.n_done += (s == DONE) - (x.state == DONE);
    x.state = s;
}

size_t stack_bytes() {
    const char *e = getenv("M2EMU_STACK_KB");
    size_t kb = e && atoi(e) > 0 ? (size_t)atoi(e) : 256;
    return kb * 1024;
}

void asan_start(void **fake, const void *bottom, size_t size) {
#ifdef M2EMU_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
void asan_finish(void *fake, const void **bottom, size_t *size) {
#ifdef M2EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

[[noreturn]] void fiber_main() {
    runner &r = *tl;
    asan_finish(nullptr, &r.main_bottom, &r.main_size);
    threadIdx = r.f[r.cur].tid;
    r.k->invoke(r.params);
    set_state(r, r.f[r.cur], DONE);
    asan_start(nullptr, r.main_bottom, r.main_size); // this fiber's frames are gone
#if defined(__x86_64__)
    m2emu_switch(&r.f[r.cur].sp, r.main_sp); // sp: where init_fiber's unpoisoning starts
#else
    setcontext(&r.main_uc);
#endif
    __builtin_trap();
}

bool init_fiber(fiber &x) {
    if (!x.mem) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        x.stack_bytes = stack_bytes();
        x.mem_bytes = x.stack_bytes + page;
        void *m = mmap(nullptr, x.mem_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED) return false;
        x.mem = (unsigned char *)m;
        mprotect(x.mem, page, PROT_NONE); // an overflow faults instead of corrupting
        x.stack = x.mem + page;
    }
#ifdef M2EMU_ASAN
    // the redzones of the frames the last block's fiber left live on this stack: all of them
    // lie above the stack pointer of its last switch (the whole stack would be 32 KiB of
    // shadow per thread per block, most of the sanitizer build's time)
#if defined(__x86_64__)
    if (x.sp) {
        unsigned char *lo = (unsigned char *)x.sp - 256;
        if (lo < x.stack) lo = x.stack;
        ASAN_UNPOISON_MEMORY_REGION(lo, (size_t)(x.stack + x.stack_bytes - lo));
    }
#else
    ASAN_UNPOISON_MEMORY_REGION(x.stack, x.stack_bytes);
#endif
#endif
#if defined(__x86_64__)
    uint64_t *sp = (uint64_t *)(((uintptr_t)(x.stack + x.stack_bytes)) & ~(uintptr_t)15);
    *--sp = 0;                          // fiber_main's return address: none
    *--sp = (uint64_t)(uintptr_t)&fiber_main; // where the first switch's ret goes
    for (int i = 0; i < 6; i++) *--sp = 0; // rbp (ends the frame chain), rbx, r12-r15
    x.sp = sp;
#else
    getcontext(&x.uc);
    x.uc.uc_stack.ss_sp = x.stack;
    x.uc.uc_stack.ss_size = x.stack_bytes;
    x.uc.uc_link = nullptr;
    makecontext(&x.uc, (void (*)())fiber_main, 0);
#endif
    x.fn = nullptr;
    x.arg = nullptr;
    x.asan_fake = nullptr;
    return true;
}

void resume(runner &r, int i) {
    fiber &x = r.f[i];
    r.cur = i;
    threadIdx = x.tid;
    void *fake = nullptr;
    asan_start(&fake, x.stack, x.stack_bytes);
#if defined(__x86_64__)
    m2emu_switch(&r.main_sp, x.sp);
#else
    swapcontext(&r.main_uc, &x.uc);
#endif
    asan_finish(fake, nullptr, nullptr);
    r.cur = -1;
}

// called on a fiber: back to the scheduler until resumed
void yield_fiber() {
    runner &r = *tl;
    fiber &x = r.f[r.cur];
    asan_start(&x.asan_fake, r.main_bottom, r.main_size);
#if defined(__x86_64__)
    m2emu_switch(&x.sp, r.main_sp);
#else
    swapcontext(&x.uc, &r.main_uc);
#endif
    asan_finish(x.asan_fake, nullptr, nullptr);
    threadIdx = x.tid;
}

void fail(runner &r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(runner &r, const char *fmt, ...) {
    if (r.failed) return;
    r.failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r.err, sizeof r.err, fmt, ap);
    va_end(ap);
}

// one block; false on an error (r.err)
bool run_block(runner &r, int n, int flip) {
    r.n_bar = r.n_warp = 0;
    r.n_done = n;
    for (int i = 0; i < n; i++) {
        fiber &x = r.f[i];
        x.state = DONE;
        if (!init_fiber(x)) {
            fail(r, "cannot map a fiber stack");
            return false;
        }
        set_state(r, x, READY);
        x.tid = {(unsigned)i % blockDim.x, (unsigned)(i / blockDim.x) % blockDim.y,
                 (unsigned)(i / (blockDim.x * blockDim.y))};
    }
    for (int phase = 0;;) {
        const bool rev = ((phase + flip) & 1) != 0;
        for (int j = 0; j < n; j++) {
            const int i = rev ? n - 1 - j : j;
            if (r.f[i].state == READY) resume(r, i);
            if (r.failed) return false;
        }
        bool released = false;
        for (int w0 = 0; r.n_warp && w0 < n; w0 += 32) {
            const int w1 = w0 + 32 < n ? w0 + 32 : n;
            int at = 0, done = 0;
            for (int i = w0; i < w1; i++) at += r.f[i].state == AT_WARP, done += r.f[i].state == DONE;
            if (at == 0 || at + done < w1 - w0) continue; // none, or some lanes at __syncthreads
            if (done) {
                fail(r, "a warp collective reached by %d lanes of warp %d; %d lanes exited", at,
                     w0 / 32, done);
                return false;
            }
            for (int i = w0; i < w1; i++) {
                if (r.f[i].fn != r.f[w0].fn) {
                    fail(r, "lanes %d and %d of warp %d wait at different warp collectives",
                         0, i - w0, w0 / 32);
                    return false;
                }
                r.args[i - w0] = r.f[i].arg;
            }
            r.f[w0].fn(r.args, w1 - w0);
            if (r.failed) return false;
            for (int i = w0; i < w1; i++) set_state(r, r.f[i], READY);
            released = true;
        }
        if (released) continue;
        const int done = r.n_done, bar = r.n_bar;
        if (done == n) return true;
        if (bar + done < n) {
            fail(r, "deadlock: %d threads at __syncthreads(), %d at a warp collective, %d exited",
                 bar, n - bar - done, done);
            return false;
        }
        if (done) {
            fail(r, "__syncthreads() reached by %d of %d threads; the others exited", bar, n);
            return false;
        }
        for (int i = 0; i < n; i++) r.f[i].state = READY;
        r.n_bar = 0;
        phase++;
    }
}

} // namespace

void __syncthreads(void) {
    runner &r = *tl;
    set_state(r, r.f[r.cur], AT_BAR);
    yield_fiber();
}

void m2emu_warp_collective(m2emu_collective_fn fn, void *lane_arg) {
    runner &r = *tl;
    fiber &x = r.f[r.cur];
    x.fn = fn;
    x.arg = lane_arg;
    set_state(r, x, AT_WARP);
    yield_fiber();
}

void m2emu_fail(const char *fmt, ...) {
    runner &r = *tl;
    if (!r.failed) {
        r.failed = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r.err, sizeof r.err, fmt, ap);
        va_end(ap);
    }
    if (r.cur >= 0) { // on a fiber: it stops here for good (the block is abandoned)
        set_state(r, r.f[r.cur], DONE);
        yield_fiber();
    }
}

unsigned char *m2emu_dynamic_smem(void) { return tl->dsmem; }

void m2emu_shfl_op(void **lanes, int n) {
    for (int i = 0; i < n; i++) {
        m2emu_shfl *s = (m2emu_shfl *)lanes[i];
        int src = s->mode == 0 ? (s->src & 31) : s->mode == 1 ? (i ^ s->src) : i + s->src;
        if (src < 0 || src >= n) src = i;
        s->out = ((m2emu_shfl *)lanes[src])->v;
    }
}

int m2emu_run_grid(const m2emu_kernel *k, uint3 grid, uint3 block, size_t smem, void **params,
                   char *err, size_t errlen) {
    std::lock_guard<std::mutex> lock(launch_mu);
    runner &r = *tl;
    const int n = (int)(block.x * block.y * block.z);
    if ((int)r.f.size() < n) r.f.resize((size_t)n);
    r.k = k;
    r.params = params;
    r.failed = false;
    r.err[0] = 0;
    void *dyn = nullptr;
    if (posix_memalign(&dyn, 128, smem ? smem : 1)) {
        snprintf(err, errlen, "cannot allocate %zu bytes of dynamic shared memory", smem);
        return 1;
    }
    r.dsmem = (unsigned char *)dyn;
    gridDim = grid;
    blockDim = block;
    int rc = 0;
    unsigned long long lin = 0;
    for (unsigned z = 0; z < grid.z && !rc; z++)
        for (unsigned y = 0; y < grid.y && !rc; y++)
            for (unsigned x = 0; x < grid.x && !rc; x++, lin++) {
                blockIdx = {x, y, z};
                memset(dyn, 0xFF, smem); // garbage, as on a device: NaN as floats
                if (!run_block(r, n, (int)(lin & 1))) {
                    snprintf(err, errlen, "block (%u,%u,%u): %s", x, y, z, r.err);
                    rc = 1;
                }
            }
    free(dyn);
    r.dsmem = nullptr;
    return rc;
}
