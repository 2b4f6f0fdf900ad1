// selftest.cuh — kernels that only the emulator's own test (test_cuda_emu.c) launches, each with
// a defect of the kind the emulated device must expose, and a correct twin. Compiled with the
// project's kernels into the stand-in driver (kernels_host.cpp); cuda.c never asks for them.
#include <mma.h>

// each thread writes its slot, then reads its neighbour's: correct only with the barrier (base
// differs from launch to launch, so that what an earlier launch left in s never looks right)
extern "C" __global__ void m2emu_selftest_barrier_wi64(float *out, int with_barrier, float base) {
    __shared__ float s[64];
    const int t = (int)threadIdx.x;
    s[t] = base + (float)(blockIdx.x * 64 + t);
    if (with_barrier) __syncthreads();
    out[blockIdx.x * 64 + t] = s[(t + 1) % 64];
    if (with_barrier) __syncthreads(); // the next block (on a device: this one) rewrites s
}

// a barrier inside a branch that half of the block skips
extern "C" __global__ void m2emu_selftest_divergent_wi64(float *out) {
    if (threadIdx.x < 32) __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// one warp: D = A B + C on a tf32 m16n16k8 tile from `in` + off (A 16x8, then B 8x16, row
// major); off = 1 breaks the 256-bit alignment rule
extern "C" __global__ void m2emu_selftest_wmma_tc32(const float *in, float *out, int off) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> c;
    wmma::fill_fragment(c, 1.0f);
    wmma::load_matrix_sync(a, in + off, 8);
    wmma::load_matrix_sync(b, in + 128, 16);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(out, c, 16, wmma::mem_row_major);
}
