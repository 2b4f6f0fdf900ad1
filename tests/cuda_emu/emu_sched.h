// emu_sched.h — the emulated device's kernel table and grid runner (emu_sched.cpp,
// kernels_host.cpp), used by the stand-in driver fake_libcuda.cpp.
#ifndef M2EMU_SCHED_H
#define M2EMU_SCHED_H

#include <cstddef>

#include "cuda_shim.h"

// one host-compiled kernel: invoke(params) runs the calling CUDA thread's share of it, the
// arguments read from params[i] as cuLaunchKernel's kernelParams
struct m2emu_kernel {
    const char *name;
    void (*invoke)(void **params);
    int nparams;
};
// the kernel of that name (src/gpu/kernels/list.h, src/cuda/tc_list.h), or NULL
const m2emu_kernel *m2emu_find_kernel(const char *name);

// Runs the grid (blocks in x, y, z order on the calling OS thread; each block's threads as
// fibers). 0 on success; else nonzero with the first error (a kernel-side m2emu_fail, a
// barrier or warp collective that not all threads reach) in err.
int m2emu_run_grid(const m2emu_kernel *k, uint3 grid, uint3 block, size_t smem, void **params,
                   char *err, size_t errlen);

#endif // M2EMU_SCHED_H
