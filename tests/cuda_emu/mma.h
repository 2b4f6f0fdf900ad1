// mma.h (host emulation) — a functional subset of CUDA's warp matrix API (nvcuda::wmma) for the
// emulated device: the fragment shapes and the load / store / mma / fill calls that
// src/cuda/ssd_tc.cuh uses (tf32 m16n16k8 and bf16 m16n16k16, float accumulators).
//
// Model: every lane of a warp holds the whole tile (x[] is the tile, row-major, num_elements
// = rows * cols), so element-wise code that treats every element alike works as on the device,
// and code that depends on the (unspecified) per-lane layout is caught: the lanes' tiles then
// differ, which mma_sync and store_matrix_sync report. Load, store and mma are warp collectives
// (m2emu_warp_collective): they run once per warp when all 32 lanes have arrived, so a lane
// never sees another lane's store of the same tile early. The pointer and ldm rules of the
// CUDA programming guide are checked: the same mptr and ldm in every lane, mptr 256-bit
// aligned, ldm a multiple of 16 bytes.
// Arithmetic: tf32 inputs use only their tf32 bits (the low 13 mantissa bits are ignored, as
// by the tensor cores), bf16 inputs are exact in float; products are summed in float in k
// order onto the accumulator. The device's summation order is not modelled.
#ifndef M2EMU_MMA_H
#define M2EMU_MMA_H

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_bf16.h"
#include "cuda_shim.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
} // namespace precision

// round to tf32: nearest, ties away from zero (cvt.rna.tf32.f32); the result keeps 10 bits
static inline float __float_to_tf32(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7F800000u) == 0x7F800000u) return f; // inf, NaN
    u = (u + 0x1000u) & 0xFFFFE000u;
    return __uint_as_float(u);
}

namespace emu {
template <class Use, int M, int N, int K> struct shape;
template <int M, int N, int K> struct shape<matrix_a, M, N, K> {
    enum { rows = M, cols = K };
};
template <int M, int N, int K> struct shape<matrix_b, M, N, K> {
    enum { rows = K, cols = N };
};
template <int M, int N, int K> struct shape<accumulator, M, N, K> {
    enum { rows = M, cols = N };
};
template <class T> struct storage {
    typedef T type;
};
template <> struct storage<precision::tf32> {
    typedef float type;
};
static inline float to_f(float v) { return v; }
static inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class E> static inline E from_f(float v);
template <> inline float from_f<float>(float v) { return v; }
template <> inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
static inline float tf32_bits(float v) { return __uint_as_float(__float_as_uint(v) & 0xFFFFE000u); }

struct ldst {
    void *frag;
    const void *p;
    unsigned ldm;
    int col; // column-major memory
};
template <class E, int R, int C> struct io {
    static bool check(void **lanes, int n, const char *what) {
        const ldst *a0 = (const ldst *)lanes[0];
        for (int i = 1; i < n; i++) {
            const ldst *a = (const ldst *)lanes[i];
            if (a->p != a0->p || a->ldm != a0->ldm || a->col != a0->col) {
                m2emu_fail("wmma::%s: lanes 0 and %d of a warp pass different arguments "
                           "(%p ldm %u vs %p ldm %u)", what, i, a0->p, a0->ldm, a->p, a->ldm);
                return false;
            }
        }
        if ((uintptr_t)a0->p % 32 != 0) {
            m2emu_fail("wmma::%s: pointer %p is not 256-bit aligned", what, a0->p);
            return false;
        }
        if ((a0->ldm * sizeof(E)) % 16 != 0) {
            m2emu_fail("wmma::%s: ldm %u is not a multiple of 16 bytes", what, a0->ldm);
            return false;
        }
        return true;
    }
    static void load(void **lanes, int n) {
        if (!check(lanes, n, "load_matrix_sync")) return;
        const ldst *a0 = (const ldst *)lanes[0];
        const E *p = (const E *)a0->p;
        E *x = (E *)a0->frag;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                x[r * C + c] = a0->col ? p[(size_t)c * a0->ldm + r] : p[(size_t)r * a0->ldm + c];
        for (int i = 1; i < n; i++) std::memcpy(((ldst *)lanes[i])->frag, x, sizeof(E) * R * C);
    }
    static void store(void **lanes, int n) {
        if (!check(lanes, n, "store_matrix_sync")) return;
        const ldst *a0 = (const ldst *)lanes[0];
        const E *x = (const E *)a0->frag;
        for (int i = 1; i < n; i++)
            if (std::memcmp(((ldst *)lanes[i])->frag, x, sizeof(E) * R * C)) {
                m2emu_fail("wmma::store_matrix_sync: lanes 0 and %d hold different tiles (a "
                           "lane-dependent element operation on a fragment?)", i);
                return;
            }
        E *p = (E *)a0->p;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                (a0->col ? p[(size_t)c * a0->ldm + r] : p[(size_t)r * a0->ldm + c]) = x[r * C + c];
    }
};

struct mma_args {
    void *d;
    const void *a, *b, *c;
};
template <class E, bool TF32, int M, int N, int K> static void mma_op(void **lanes, int n) {
    const mma_args *g = (const mma_args *)lanes[0];
    for (int i = 1; i < n; i++) {
        const mma_args *o = (const mma_args *)lanes[i];
        if (std::memcmp(o->a, g->a, sizeof(E) * M * K) || std::memcmp(o->b, g->b, sizeof(E) * K * N) ||
            std::memcmp(o->c, g->c, sizeof(float) * M * N)) {
            m2emu_fail("wmma::mma_sync: lanes 0 and %d hold different fragments (a "
                       "lane-dependent element operation on a fragment?)", i);
            return;
        }
    }
    const E *a = (const E *)g->a, *b = (const E *)g->b;
    const float *c = (const float *)g->c;
    float d[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c[i * N + j];
            for (int k = 0; k < K; k++) {
                float x = to_f(a[i * K + k]), y = to_f(b[k * N + j]);
                if (TF32) x = tf32_bits(x), y = tf32_bits(y);
                s += x * y;
            }
            d[i * N + j] = s;
        }
    for (int i = 0; i < n; i++) std::memcpy(((mma_args *)lanes[i])->d, d, sizeof d);
}
} // namespace emu

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    typedef typename emu::storage<T>::type element_type;
    enum {
        rows = emu::shape<Use, M, N, K>::rows,
        cols = emu::shape<Use, M, N, K>::cols,
        num_elements = rows * cols
    };
    element_type x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, float v) {
    typedef typename fragment<Use, M, N, K, T, L>::element_type E;
    for (int i = 0; i < f.num_elements; i++) f.x[i] = emu::from_f<E>(v);
}

template <class Use, int M, int N, int K, class T, class L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f,
                                    const typename emu::storage<T>::type *p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load takes a layout");
    typedef fragment<Use, M, N, K, T, L> F;
    emu::ldst a{f.x, p, ldm, std::is_same<L, col_major>::value};
    m2emu_warp_collective(emu::io<typename F::element_type, F::rows, F::cols>::load, &a);
}
template <int M, int N, int K>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p,
                                    unsigned ldm, layout_t l) {
    emu::ldst a{f.x, p, ldm, l == mem_col_major};
    m2emu_warp_collective(emu::io<float, M, N>::load, &a);
}
template <int M, int N, int K>
static inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f,
                                     unsigned ldm, layout_t l) {
    emu::ldst a{(void *)f.x, p, ldm, l == mem_col_major};
    m2emu_warp_collective(emu::io<float, M, N>::store, &a);
}
template <int M, int N, int K, class T, class LA, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                            const fragment<matrix_a, M, N, K, T, LA> &a,
                            const fragment<matrix_b, M, N, K, T, LB> &b,
                            const fragment<accumulator, M, N, K, float> &c) {
    typedef typename emu::storage<T>::type E;
    emu::mma_args g{d.x, a.x, b.x, c.x};
    m2emu_warp_collective(emu::mma_op<E, std::is_same<T, precision::tf32>::value, M, N, K>, &g);
}

} // namespace wmma
} // namespace nvcuda

#endif // M2EMU_MMA_H
