/*
 * ref.h — entry points of the reference backend (src/ref/), one per operator of core/ops.def.
 * The backend's function table (src/ref/backend.c) points at these.
 */
#ifndef MAMBA2C_REF_H
#define MAMBA2C_REF_H

#include "core/internal.h"

/* The backend's operators (core/ops.def): m2_ref_<name>, defined in ssd_ref.c (SSD fused
 * scan), rmsnorm_ref.c, conv1d_ref.c (conv1d and its step), ssd_step_ref.c and
 * ssd_chunked_ref.c (the staged pipeline). */
#define M2_OP(name, problem, kind) mamba2_status_t m2_ref_##name(M2_OP_ARGS_##kind(problem));
#include "core/ops.def"

#endif /* MAMBA2C_REF_H */
