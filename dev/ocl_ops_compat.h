/*
 * ocl_ops_compat.h — PROVISIONAL portable macro set for the conv1d / rmsnorm / step kernels,
 * used only by dev/ocl_ops_probe.c until the gpu branch's src/gpu/kernels/common.h lands
 * (then the kernels are renamed onto its names and this file goes).
 */
#ifndef M2G_COMPAT_H
#define M2G_COMPAT_H
#ifdef __OPENCL_VERSION__
#define M2G_KERNEL __kernel void
#define M2G_GLOBAL __global
#define M2G_LOCAL __local
#define M2G_FN static inline
#define M2G_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define M2G_GID() ((long)get_global_id(0))
#define M2G_LID() ((int)get_local_id(0))
#define M2G_GRP() ((long)get_group_id(0))
#define M2G_LSIZE() ((int)get_local_size(0))
typedef long m2g_i64;
#define M2G_EXP(v) exp(v)
#define M2G_LOG1P(v) log1p(v)
#define M2G_SQRT(v) sqrt(v)
#else
#define M2G_KERNEL extern "C" __global__ void
#define M2G_GLOBAL
#define M2G_LOCAL __shared__
#define M2G_FN static __device__ inline
#define M2G_BARRIER() __syncthreads()
#define M2G_GID() ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define M2G_LID() ((int)threadIdx.x)
#define M2G_GRP() ((long long)blockIdx.x)
#define M2G_LSIZE() ((int)blockDim.x)
typedef long long m2g_i64;
#define M2G_EXP(v) expf(v)
#define M2G_LOG1P(v) log1pf(v)
#define M2G_SQRT(v) sqrtf(v)
#endif
#endif
