// cuda_shim.h — CUDA C's device-side vocabulary mapped onto host C++, so that g++ compiles the
// project's CUDA kernel text (src/cuda/kernels.cu) into host functions that the emulated
// device (fake_libcuda.cpp) runs block by block.
//
// The execution model (emu_sched.cpp): one fiber per CUDA thread, all fibers of a block on
// the OS thread that launched the grid, one launch at a time in the process (a lock). So:
//   __shared__      -> static: one copy, the running block's;
//   threadIdx, blockIdx, blockDim, gridDim -> globals; threadIdx is rewritten by the scheduler
//                      on every switch into a fiber;
//   __syncthreads() -> a real block barrier (the fiber yields until every thread of the block
//                      has arrived; a barrier that some threads never reach is an error);
//   warp collectives (wmma load/store/mma, __syncwarp, __shfl*_sync) -> m2emu_warp_collective:
//                      the fiber yields until every lane of its warp has arrived, then the
//                      operation runs once for the whole warp at that instant.
// Dynamic shared memory is the kernels' M2K_DYNAMIC_SHARED accessor (src/gpu/kernels/common.h),
// defined here onto the launch's per-block buffer.
// Never compiled by nvcc, and never defines __CUDACC__ (headers test it for nvcc itself).
#ifndef M2EMU_CUDA_SHIM_H
#define M2EMU_CUDA_SHIM_H

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>

struct uint3 {
    unsigned int x, y, z;
};
typedef uint3 dim3;

// plain globals: launches run one at a time in the process (emu_sched.cpp holds a lock for the
// whole grid), so the running block is the only one that reads them
extern uint3 threadIdx, blockIdx, blockDim, gridDim;

// the scheduler (emu_sched.cpp)
void __syncthreads(void);
typedef void (*m2emu_collective_fn)(void **lane_args, int nlanes);
// every lane of the calling thread's warp calls this with the same fn and its own arg; when
// the last lane arrives, fn runs once with all lanes' args (in lane order)
void m2emu_warp_collective(m2emu_collective_fn fn, void *lane_arg);
// a kernel-side error (e.g. a misaligned wmma pointer): the launch fails with this message
void m2emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// the running block's dynamic shared memory (the launch's sharedMemBytes)
unsigned char *m2emu_dynamic_smem(void);

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __restrict__ __restrict
#define M2K_DYNAMIC_SHARED(type, name) type *const name = (type *)m2emu_dynamic_smem()

static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
static inline float __int_as_float(int i) { return __uint_as_float((unsigned int)i); }

// ---- warp-level primitives (none in the kernels today; here so that a kernel using them
// runs with warp semantics rather than racing) ----
struct m2emu_shfl {
    unsigned long long v;
    int src;           // shfl: source lane; xor: lane mask; down: delta
    int mode;          // 0 idx, 1 xor, 2 down
    unsigned long long out;
};
void m2emu_shfl_op(void **lanes, int n);
static inline void m2emu_syncwarp_op(void **, int) {}
static inline void __syncwarp(unsigned = 0xffffffffu) {
    m2emu_warp_collective(m2emu_syncwarp_op, nullptr);
}
template <class T> static inline T m2emu_shfl_any(T v, int arg, int mode) {
    static_assert(sizeof(T) <= 8, "shuffle of a value over 8 bytes");
    m2emu_shfl s{0, arg, mode, 0};
    std::memcpy(&s.v, &v, sizeof v);
    m2emu_warp_collective(m2emu_shfl_op, &s);
    T r;
    std::memcpy(&r, &s.out, sizeof r);
    return r;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int lane, int = 32) {
    return m2emu_shfl_any(v, lane, 0);
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask, int = 32) {
    return m2emu_shfl_any(v, mask, 1);
}
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned d, int = 32) {
    return m2emu_shfl_any(v, (int)d, 2);
}

#endif // M2EMU_CUDA_SHIM_H
