/*
 * convert.cl — bf16 / f16 activation storage for the float32 kernels: a strided half tensor
 * (up to 4 dims, the last contiguous) to a dense float32 copy, and back (rounded to nearest
 * even once, as src/core/half.h on the CPU). kind: 1 bf16, 2 f16. One work-item per element.
 */
M2K_KERNEL void m2_cvt_to_f32_wi64(
    m2_i64 d0, m2_i64 d1, m2_i64 d2, m2_i64 d3,
    M2K_GLOBAL const m2_u16 *src, m2_i64 s_o, m2_i64 s_s0, m2_i64 s_s1, m2_i64 s_s2, m2_i32 kind,
    M2K_GLOBAL float *dst, m2_i64 d_o) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= d0 * d1 * d2 * d3) return;
    const m2_i64 i3 = e % d3, i2 = (e / d3) % d2, i1 = (e / (d3 * d2)) % d1, i0 = e / (d3 * d2 * d1);
    const m2_u16 h = src[s_o + i0 * s_s0 + i1 * s_s1 + i2 * s_s2 + i3];
    dst[d_o + e] = kind == 1 ? m2k_bf16_to_f32(h) : m2k_f16_to_f32(h);
}

M2K_KERNEL void m2_cvt_from_f32_wi64(
    m2_i64 d0, m2_i64 d1, m2_i64 d2, m2_i64 d3, M2K_GLOBAL const float *src, m2_i64 s_o,
    M2K_GLOBAL m2_u16 *dst, m2_i64 d_o, m2_i64 d_s0, m2_i64 d_s1, m2_i64 d_s2, m2_i32 kind) {
    const m2_i64 e = M2K_GROUP_ID(0) * 64 + M2K_LOCAL_ID(0);
    if (e >= d0 * d1 * d2 * d3) return;
    const m2_i64 i3 = e % d3, i2 = (e / d3) % d2, i1 = (e / (d3 * d2)) % d1, i0 = e / (d3 * d2 * d1);
    const float v = src[s_o + e];
    dst[d_o + i0 * d_s0 + i1 * d_s1 + i2 * d_s2 + i3] = kind == 1 ? m2k_f32_to_bf16(v) : m2k_f32_to_f16(v);
}
