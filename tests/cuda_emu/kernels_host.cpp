// kernels_host.cpp — the project's CUDA kernel text (src/cuda/kernels.cu: the portable kernels
// of src/gpu/kernels/ and the tensor-core ones of src/cuda/ssd_tc.cuh) compiled by the host
// C++ compiler through cuda_shim.h, and the table that cuModuleGetFunction looks names up in.
// Each entry's invoke() reads the kernel's arguments from kernelParams with the types of the
// kernel's own prototype (as the driver does from the module's parameter metadata).
// selftest.cuh adds the emulator's own test kernels (m2emu_selftest_*).
#include "cuda_shim.h"

#include "../../src/cuda/kernels.cu"
#include "selftest.cuh"

#include <cstring>
#include <utility>

#include "emu_sched.h"

namespace {
template <class Fn> struct kfn;
template <class... A> struct kfn<void (*)(A...)> {
    enum { n = sizeof...(A) };
    template <void (*F)(A...), std::size_t... I>
    static void call(void **p, std::index_sequence<I...>) {
        F(*static_cast<A *>(p[I])...);
    }
    template <void (*F)(A...)> static void run(void **p) {
        call<F>(p, std::index_sequence_for<A...>());
    }
};

const m2emu_kernel table[] = {
#define M2G_KERNEL(name) {#name, &kfn<decltype(&name)>::run<&name>, kfn<decltype(&name)>::n},
#include "../../src/gpu/kernels/list.h"
#define M2G_TC_KERNEL(name) {#name, &kfn<decltype(&name)>::run<&name>, kfn<decltype(&name)>::n},
#include "../../src/cuda/tc_list.h"
#undef M2G_TC_KERNEL
    M2G_KERNEL(m2emu_selftest_barrier_wi64)
    M2G_KERNEL(m2emu_selftest_divergent_wi64)
    M2G_KERNEL(m2emu_selftest_wmma_tc32)
#undef M2G_KERNEL
};
} // namespace

const m2emu_kernel *m2emu_find_kernel(const char *name) {
    for (const m2emu_kernel &k : table)
        if (!std::strcmp(k.name, name)) return &k;
    return nullptr;
}
