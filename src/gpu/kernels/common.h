/*
 * common.h — the macro header under every GPU kernel: the common subset of OpenCL C 1.2 and
 * CUDA C that the kernel files (*.cl beside this header) are written in.
 *
 * One kernel text serves both APIs. For OpenCL the host hands the driver this header and the
 * kernel files as one program (src/opencl/); for CUDA, src/cuda/kernels.cu includes them and
 * nvcc compiles them. The kernel files therefore include nothing themselves, use only what is
 * defined here, and stay C (no C++ in the shared text: no overloading, templates, references).
 *
 *   M2K_KERNEL            a kernel entry point (__kernel / extern "C" __global__)
 *   M2K_FN                a device helper function (static inline / static __device__)
 *   M2K_GLOBAL            global-memory pointer qualifier (empty in CUDA)
 *   M2K_LOCAL_ARRAY(t,n,d) a work-group (shared-memory) array declared in a kernel body
 *   M2K_DYNAMIC_SHARED(t,n) CUDA only: `t *n`, the launch's dynamic shared block (128-aligned);
 *                         the host emulator of tests/cuda_emu defines its own before this header
 *   M2K_BARRIER()         work-group barrier with local-memory fence
 *   M2K_GROUP_ID(d), M2K_NUM_GROUPS(d)   group ids and counts, d = 0, 1 (z: M2K_GROUP_Z)
 *   M2K_GROUP_X(gx), M2K_GROUP_Z(gx)     x and z ids of a kernel whose z extent can pass the
 *                         CUDA grid limit (chunks, sequences, positions); gx: its x extent
 *   M2K_LOCAL_ID(d)       work-item id in its group, d = 0, 1, 2
 *   m2_i64, m2_i32, m2_u32, m2_u16                     fixed-width integers
 *   m2k_exp, m2k_log1p, m2k_expm1, m2k_fmax, m2k_fmin, m2k_sqrt, m2k_fabs   float32 math
 *   m2k_f32_bits, m2k_f32_from_bits                     bit casts
 *   m2k_bf16_to_f32 / m2k_f32_to_bf16, m2k_f16_to_f32 / m2k_f32_to_f16     half storage as bit
 *                         operations, round to nearest even (as src/core/half.h on the CPU),
 *                         so no device needs cl_khr_fp16 or a bf16 type.
 *   m2k_ld(p, i, dt), m2k_st(p, i, v, dt)  an activation element in its storage dtype dt
 *                         (0 f32, 1 bf16, 2 f16), widened to / rounded from float32
 *
 * Work-group shape: kernels are launched with a fixed local size that their name states
 * (e.g. _16x16); the host (src/gpu/) passes group counts, never global sizes.
 * Grid folding: CUDA caps grid.y and grid.z at 65535 (x at 2^31 - 1), and a z extent counts
 * chunks, sequences or positions, so it passes the cap near 4.2 M tokens. A kernel with a z
 * extent reads its x and z ids as M2K_GROUP_X(gx) / M2K_GROUP_Z(gx), gx being its x extent
 * recomputed from its arguments exactly as the host computes it. Where z passes the device's
 * limit, src/cuda/cuda.c launches (gx * k, y, z / k) blocks, k the smallest divisor of z that
 * fits: launch block (bx, by, bz) is x = bx % gx, z = bx / gx + k * bz (so every block exists
 * once and the numerics cannot change); unfolded, k = 1, that is (bx, bz). OpenCL has no such
 * limit: the plain ids. CUDA has no M2K_GROUP_ID(2) / M2K_NUM_GROUPS(2), so a kernel that
 * reads z without the fold does not compile for CUDA (M2K_CU_GROUP_ID_2 is undeclared).
 * Precision: float32 arithmetic throughout; the OpenCL host builds without
 * -cl-fast-relaxed-math / -cl-mad-enable and nvcc without --use_fast_math.
 */
#ifndef M2K_COMMON_H
#define M2K_COMMON_H

#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
/* ---- OpenCL C 1.2 -------------------------------------------------------------------- */
#define M2K_OPENCL 1
#define M2K_KERNEL __kernel
#define M2K_FN static inline
#define M2K_GLOBAL __global
#define M2K_LOCAL_ARRAY(type, name, dims) __local type name dims
#define M2K_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define M2K_GROUP_ID(d) ((m2_i64)get_group_id(d))
#define M2K_NUM_GROUPS(d) ((m2_i64)get_num_groups(d))
#define M2K_GROUP_X(gx) ((m2_i64)get_group_id(0))
#define M2K_GROUP_Z(gx) ((m2_i64)get_group_id(2))
#define M2K_LOCAL_ID(d) ((int)get_local_id(d))
typedef long m2_i64;
typedef int m2_i32;
typedef uint m2_u32;
typedef ushort m2_u16;
#define m2k_exp(v) exp((float)(v))
#define m2k_log1p(v) log1p((float)(v))
#define m2k_expm1(v) expm1((float)(v))
#define m2k_fmax(a, b) fmax((float)(a), (float)(b))
#define m2k_fmin(a, b) fmin((float)(a), (float)(b))
#define m2k_sqrt(v) sqrt((float)(v))
#define m2k_fabs(v) fabs((float)(v))
#define m2k_f32_bits(f) as_uint((float)(f))
#define m2k_f32_from_bits(u) as_float((uint)(u))
#define M2K_INF INFINITY

#else
/* ---- CUDA C (compiled by nvcc as part of src/cuda/kernels.cu) ------------------------ */
#define M2K_CUDA 1
#define M2K_KERNEL extern "C" __global__
#define M2K_FN static __device__ __forceinline__
#define M2K_GLOBAL
#define M2K_LOCAL_ARRAY(type, name, dims) __shared__ type name dims
#ifndef M2K_DYNAMIC_SHARED
#define M2K_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif
#define M2K_BARRIER() __syncthreads()
/* d is a literal 0 or 1: z only through the fold (the header comment, "Grid folding") */
#define M2K_GROUP_ID(d) M2K_CU_GROUP_ID_##d
#define M2K_NUM_GROUPS(d) M2K_CU_NUM_GROUPS_##d
#define M2K_CU_GROUP_ID_0 ((m2_i64)blockIdx.x)
#define M2K_CU_GROUP_ID_1 ((m2_i64)blockIdx.y)
#define M2K_CU_NUM_GROUPS_0 ((m2_i64)gridDim.x)
#define M2K_CU_NUM_GROUPS_1 ((m2_i64)gridDim.y)
#define M2K_GROUP_X(gx) ((m2_i64)(blockIdx.x % (unsigned int)(gx)))
#define M2K_GROUP_Z(gx)                                                                        \
    ((m2_i64)(blockIdx.x / (unsigned int)(gx)) +                                               \
     (m2_i64)(gridDim.x / (unsigned int)(gx)) * (m2_i64)blockIdx.z)
#define M2K_LOCAL_ID(d) ((int)((d) == 0 ? threadIdx.x : (d) == 1 ? threadIdx.y : threadIdx.z))
typedef long long m2_i64;
typedef int m2_i32;
typedef unsigned int m2_u32;
typedef unsigned short m2_u16;
#define m2k_exp(v) expf((float)(v))
#define m2k_log1p(v) log1pf((float)(v))
#define m2k_expm1(v) expm1f((float)(v))
#define m2k_fmax(a, b) fmaxf((float)(a), (float)(b))
#define m2k_fmin(a, b) fminf((float)(a), (float)(b))
#define m2k_sqrt(v) sqrtf((float)(v))
#define m2k_fabs(v) fabsf((float)(v))
#define m2k_f32_bits(f) __float_as_uint((float)(f))
#define m2k_f32_from_bits(u) __uint_as_float((unsigned int)(u))
#define M2K_INF __int_as_float(0x7f800000)
#endif

/* ---- bfloat16 / float16 storage ---------------------------------------------------------- */

M2K_FN float m2k_bf16_to_f32(m2_u16 h) { return m2k_f32_from_bits(((m2_u32)h) << 16); }

M2K_FN m2_u16 m2k_f32_to_bf16(float f) {
    m2_u32 u = m2k_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (m2_u16)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u); /* nearest even; a carry into the exponent is correct */
    return (m2_u16)(u >> 16);
}

M2K_FN float m2k_f16_to_f32(m2_u16 h) {
    const m2_u32 sign = ((m2_u32)h & 0x8000u) << 16;
    const m2_u32 e = ((m2_u32)h >> 10) & 0x1Fu, m = (m2_u32)h & 0x3FFu;
    if (e == 0x1Fu) return m2k_f32_from_bits(sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        return sign ? -v : v;
    }
    return m2k_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

M2K_FN m2_u16 m2k_f32_to_f16(float f) {
    const m2_u32 u = m2k_f32_bits(f);
    const m2_u32 sign = (u >> 16) & 0x8000u;
    const m2_u32 a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (m2_u16)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN */
    if (a >= 0x477FF000u) return (m2_u16)(sign | 0x7C00u);                      /* -> inf */
    if (a >= 0x38800000u) { /* normal: round the 13 dropped bits to nearest even */
        const m2_u32 r = a + 0x0FFFu + ((a >> 13) & 1u);
        return (m2_u16)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a <= 0x33000000u) return (m2_u16)sign; /* <= 2^-25: zero (ties to even) */
    const m2_u32 e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u, s = 126u - e;
    m2_u32 q = m >> s;
    const m2_u32 rem = m & ((1u << s) - 1u), halfway = 1u << (s - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (m2_u16)(sign | q);
}

/* Activations in their storage dtype (a kernel parameter per tensor, uniform per launch):
 * dt 0 float32, 1 bf16, 2 f16. The pointer is declared float; for dt != 0 it holds 16-bit
 * elements and i (an element index, as for float32) addresses them. Loads widen exactly;
 * stores round to nearest even once, as the former widening copies did, so a kernel
 * reading and writing half storage gives the bits of widen -> float32 kernel -> narrow. */
M2K_FN float m2k_ld(M2K_GLOBAL const float *p, m2_i64 i, m2_i32 dt) {
    if (dt == 0) return p[i];
    const m2_u16 h = ((M2K_GLOBAL const m2_u16 *)p)[i];
    return dt == 1 ? m2k_bf16_to_f32(h) : m2k_f16_to_f32(h);
}
M2K_FN void m2k_st(M2K_GLOBAL float *p, m2_i64 i, float v, m2_i32 dt) {
    if (dt == 0)
        p[i] = v;
    else
        ((M2K_GLOBAL m2_u16 *)p)[i] = dt == 1 ? m2k_f32_to_bf16(v) : m2k_f32_to_f16(v);
}

/* ---- small float helpers shared by the op families ---------------------------------------- */

/* softplus(v) = v for v > 20, else log1p(exp(v)) (SPEC §1 step 1) */
M2K_FN float m2k_softplus(float v) { return v > 20.0f ? v : m2k_log1p(m2k_exp(v)); }
/* silu(v) = v / (1 + exp(-v)) (SPEC §1 step 4) */
M2K_FN float m2k_silu(float v) { return v / (1.0f + m2k_exp(-v)); }
M2K_FN float m2k_sigmoid(float v) { return 1.0f / (1.0f + m2k_exp(-v)); }

#endif /* M2K_COMMON_H */
