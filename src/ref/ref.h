/*
 * ref.h — entry points of the reference backend (src/ref/), one block per operator.
 * The backend's function table (src/ref/backend.c) points at these.
 */
#ifndef MAMBA2C_REF_H
#define MAMBA2C_REF_H

#include "core/internal.h"

/* SSD fused scan (ssd_ref.c) */
mamba2_status_t m2_ref_ssd_forward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                             size_t *bytes);
mamba2_status_t m2_ref_ssd_forward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);
mamba2_status_t m2_ref_ssd_backward_workspace(const mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                              size_t *bytes);
mamba2_status_t m2_ref_ssd_backward(mamba2_context_t *ctx, const m2_ssd_problem *pr, void *ws);

/* gated RMSNorm (rmsnorm_ref.c) */
mamba2_status_t m2_ref_rmsnorm_forward_workspace(const mamba2_context_t *ctx,
                                                 const m2_rmsnorm_problem *pr, size_t *bytes);
mamba2_status_t m2_ref_rmsnorm_forward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                       void *ws);
mamba2_status_t m2_ref_rmsnorm_backward_workspace(const mamba2_context_t *ctx,
                                                  const m2_rmsnorm_problem *pr, size_t *bytes);
mamba2_status_t m2_ref_rmsnorm_backward(mamba2_context_t *ctx, const m2_rmsnorm_problem *pr,
                                        void *ws);

/* causal depthwise conv1d and its decode step (conv1d_ref.c) */
mamba2_status_t m2_ref_conv1d_forward(mamba2_context_t *ctx, const m2_conv1d_problem *pr);
mamba2_status_t m2_ref_conv1d_backward_workspace(const mamba2_context_t *ctx,
                                                 const m2_conv1d_problem *pr, size_t *bytes);
mamba2_status_t m2_ref_conv1d_backward(mamba2_context_t *ctx, const m2_conv1d_problem *pr,
                                       void *ws);
mamba2_status_t m2_ref_conv1d_step(mamba2_context_t *ctx, const m2_conv1d_problem *pr);

/* SSD decode step (ssd_step_ref.c) */
mamba2_status_t m2_ref_ssd_step(mamba2_context_t *ctx, const m2_ssd_step_problem *pr);

/* staged SSD chunk pipeline (ssd_chunked_ref.c) */
mamba2_status_t m2_ref_ssd_chunk_cumsum(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_ref_ssd_bmm_chunk(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_ref_ssd_chunk_state(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_ref_ssd_state_passing(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
mamba2_status_t m2_ref_ssd_chunk_scan(mamba2_context_t *ctx, const m2_ssd_chunk_problem *pr);
/* @@ more reference ops are declared above this line @@ */

#endif /* MAMBA2C_REF_H */
