// kernels.cu — the portable GPU kernels (src/gpu/kernels/) compiled by nvcc. The kernel files
// are C in the common subset of OpenCL C and CUDA C; common.h maps it onto CUDA here. nvcc
// makes a fat binary (sm_80, sm_90, and compute_90 PTX for later GPUs) that the build embeds
// into libmamba2c; src/cuda/cuda.c loads it with the driver API at context creation.
#include "../gpu/kernels/common.h"
#include "../gpu/kernels/ssd_chunked.cl"
#include "../gpu/kernels/ssd_bwd.cl"
#include "../gpu/kernels/conv1d.cl"
#include "../gpu/kernels/rmsnorm.cl"
#include "../gpu/kernels/step.cl"
#include "../gpu/kernels/tables.cl"
// CUDA only: the tensor-core twins of the forward's matmul stages (off by default)
#include "ssd_tc.cuh"
#include "ssd_tc_bwd.cuh" // and of the backward's
// @@ more kernel files go above this line @@
