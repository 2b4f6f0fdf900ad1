/*
 * opencl.h — the OpenCL backend's entry points used by the core (src/core/context.c) and
 * the embedded kernel text (generated at build time from src/gpu/kernels/).
 */
#ifndef MAMBA2C_OPENCL_H
#define MAMBA2C_OPENCL_H

#include <stddef.h>

#include "core/internal.h"

/* The kernel program: common.h first, then every kernel file (gpu_kernel_sources.c). */
extern const char *m2g_kernel_sources[];
extern const size_t m2g_kernel_sources_count;

/* Attach an OpenCL device (host mode: default or MAMBA2C_OPENCL_DEVICE) to ctx->gpu. */
mamba2_status_t m2_opencl_open(mamba2_context_t *ctx);
/* Device mode on the caller's cl_context, cl_device_id, cl_command_queue (retained). */
mamba2_status_t m2_opencl_open_device(mamba2_context_t *ctx, void *context, void *device,
                                      void *queue);

#endif /* MAMBA2C_OPENCL_H */
