/*
 * abi.c — the ABI guard: the library's ABI version, the size of every public struct, and
 * the struct_size check every entry point runs on its options and grads structs.
 *
 * A struct's v1 size is where its last ABI-1 field ends (so a v1 caller's sizeof, which may
 * add tail padding, is at least that). Fields appended in a later ABI are read only when the
 * caller's struct_size covers them.
 */
#include <stddef.h>

#include "core/internal.h"

#define M2_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

typedef struct struct_info {
    const char *name;
    size_t size, v1_end;
} struct_info;

static const struct_info infos[] = {
    [MAMBA2_STRUCT_TENSOR] = {"mamba2_tensor_t", sizeof(mamba2_tensor_t),
                              M2_END(mamba2_tensor_t, stride)},
    [MAMBA2_STRUCT_SSD_OPTIONS] = {"mamba2_ssd_options_t", sizeof(mamba2_ssd_options_t),
                                   M2_END(mamba2_ssd_options_t, dt_limit_hi)},
    [MAMBA2_STRUCT_SSD_GRADS] = {"mamba2_ssd_grads_t", sizeof(mamba2_ssd_grads_t),
                                 M2_END(mamba2_ssd_grads_t, dinitial_state)},
    [MAMBA2_STRUCT_SSD_CHUNKED_OPTIONS] = {"mamba2_ssd_chunked_options_t",
                                           sizeof(mamba2_ssd_chunked_options_t),
                                           M2_END(mamba2_ssd_chunked_options_t, dt_limit_hi)},
    [MAMBA2_STRUCT_RMSNORM_OPTIONS] = {"mamba2_rmsnorm_gated_options_t",
                                       sizeof(mamba2_rmsnorm_gated_options_t),
                                       M2_END(mamba2_rmsnorm_gated_options_t, norm_before_gate)},
    [MAMBA2_STRUCT_RMSNORM_GRADS] = {"mamba2_rmsnorm_gated_grads_t",
                                     sizeof(mamba2_rmsnorm_gated_grads_t),
                                     M2_END(mamba2_rmsnorm_gated_grads_t, dbias)},
    [MAMBA2_STRUCT_CONV1D_OPTIONS] = {"mamba2_conv1d_options_t", sizeof(mamba2_conv1d_options_t),
                                      M2_END(mamba2_conv1d_options_t, activation)},
    [MAMBA2_STRUCT_CONV1D_GRADS] = {"mamba2_conv1d_grads_t", sizeof(mamba2_conv1d_grads_t),
                                    M2_END(mamba2_conv1d_grads_t, dinitial_conv_state)},
    [MAMBA2_STRUCT_CONV1D_STEP_OPTIONS] = {"mamba2_conv1d_step_options_t",
                                           sizeof(mamba2_conv1d_step_options_t),
                                           M2_END(mamba2_conv1d_step_options_t, activation)},
    [MAMBA2_STRUCT_SSD_STEP_OPTIONS] = {"mamba2_ssd_step_options_t",
                                        sizeof(mamba2_ssd_step_options_t),
                                        M2_END(mamba2_ssd_step_options_t, dt_limit_hi)},
    [MAMBA2_STRUCT_LINEAR_OPTIONS] = {"mamba2_linear_options_t", sizeof(mamba2_linear_options_t),
                                      M2_END(mamba2_linear_options_t, accumulate)},
    [MAMBA2_STRUCT_BLOCK_STEP_WEIGHTS] = {"mamba2_block_step_weights_t",
                                          sizeof(mamba2_block_step_weights_t),
                                          M2_END(mamba2_block_step_weights_t, out_proj_bias)},
    [MAMBA2_STRUCT_BLOCK_STEP_OPTIONS] = {"mamba2_block_step_options_t",
                                          sizeof(mamba2_block_step_options_t),
                                          M2_END(mamba2_block_step_options_t,
                                                 conv_state_indices)},
};
#define NINFOS ((int)(sizeof infos / sizeof infos[0]))

uint32_t mamba2_abi_version(void) { return MAMBA2C_ABI_VERSION; }

size_t mamba2_struct_size(mamba2_struct_id_t id) {
    return (unsigned)id < (unsigned)NINFOS ? infos[id].size : 0;
}

mamba2_status_t m2_check_struct_size(mamba2_struct_id_t id, const char *arg, uint32_t got) {
    const struct_info *s = &infos[id];
    if (got == 0 || (got >= s->v1_end && got <= s->size)) return MAMBA2_STATUS_OK;
    return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                    "%s (%s) has struct_size %u; expected 0 or %zu..%zu, the sizes of %s this "
                    "library (ABI %d) reads (set by its *_default(); a caller built against "
                    "another mamba2c.h?)",
                    arg, s->name, (unsigned)got, s->v1_end, s->size, s->name,
                    MAMBA2C_ABI_VERSION);
}
