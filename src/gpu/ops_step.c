/*
 * ops_step.c — host logic of the SSD decode step (SPEC §6 ssd_step) on a GPU backend (any
 * m2g_dev): problem struct -> device tensors -> one launch of m2_ssd_step_32x4
 * (src/gpu/kernels/step.cl). The state cache, out and all_states are updated in place:
 * padding rows (negative slot) keep their values. (conv1d_step: ops_conv1d.c.)
 */
#include "core/ssd_step.h"
#include "gpu/ops_common.h"
#include "gpu_launch/step.h"

#define F4 sizeof(float)

mamba2_status_t m2g_ssd_step(mamba2_context_t *ctx, const m2_ssd_step_problem *pr) {
    m2g_dev *d = m2g_of(ctx);
    M2_TRY(m2g_ops_f32(d, "ssd_step", pr->act_dtype, pr->par_dtype));
    /* state_cache / all_states: float32 or bf16 / f16 storage, read and written by the
     * kernel itself (st_kind) */
    const size_t SE = pr->state_dtype == MAMBA2_DTYPE_F32 ? F4 : 2;
    const int32_t st_kind = pr->state_dtype == MAMBA2_DTYPE_BF16  ? 1
                            : pr->state_dtype == MAMBA2_DTYPE_F16 ? 2
                                                                  : 0;
    const int64_t B = pr->B, T = pr->T, H = pr->H, P = pr->P, N = pr->N, G = pr->G, S = pr->S;
    m2g_call c;
    m2g_call_begin(&c, d);
    m2g_t cache, out, as, x, dt, A, Bm, Cm, D, z, dtb;
    m2g_mem idx = d->dummy;
    mamba2_status_t st = m2g_ops_inout(&c, &pr->cache, 4, (int64_t[]){S, H, P, N}, SE, &cache);
    if (!st) st = m2g_ops_inout(&c, &pr->out, 4, (int64_t[]){B, T, H, P}, F4, &out);
    if (!st) st = m2g_ops_inout(&c, &pr->all_states, 5, (int64_t[]){B, T, H, P, N}, SE, &as);
    if (!st) st = m2g_call_in(&c, &pr->x, 4, (int64_t[]){B, T, H, P}, F4, &x);
    if (!st) st = m2g_call_in(&c, &pr->dt, 3, (int64_t[]){B, T, H}, F4, &dt);
    if (!st) st = m2g_call_in(&c, &pr->A, 1, (int64_t[]){H}, F4, &A);
    if (!st) st = m2g_call_in(&c, &pr->Bm, 4, (int64_t[]){B, T, G, N}, F4, &Bm);
    if (!st) st = m2g_call_in(&c, &pr->Cm, 4, (int64_t[]){B, T, G, N}, F4, &Cm);
    if (!st) {
        if (pr->D.p && pr->D_per_channel)
            st = m2g_call_in(&c, &pr->D, 2, (int64_t[]){H, P}, F4, &D);
        else
            st = m2g_call_in(&c, &pr->D, 1, (int64_t[]){H}, F4, &D);
    }
    if (!st) st = m2g_call_in(&c, &pr->z, 4, (int64_t[]){B, T, H, P}, F4, &z);
    if (!st) st = m2g_call_in(&c, &pr->dt_bias, 1, (int64_t[]){H}, F4, &dtb);
    if (!st)
        st = m2g_call_index(&c, pr->state_indices, pr->idx_dtype, pr->state_indices ? B : 0, 0,
                            -1, S - 1, &idx);
    if (!st && T > 0)
        st = M2G_LAUNCH(d, m2_ssd_step_32x4, M2G_GRID(B * H * m2g_cdiv(P, 4), 1, 1),
                        .cache = cache, .out = out, .as = as, .has_as = as.present, .x = x,
                        .dt = dt, .A = A, .Bm = Bm, .Cm = Cm,
                        .Dp = D, /* [H,P]: the row stride; [H]: s[0] = 1, unused */
                        .D_mode = !D.present ? 0 : pr->D_per_channel ? 2 : 1, .z = z,
                        .has_z = z.present, .dtb = dtb, .has_dtb = dtb.present, .idx = idx,
                        .has_idx = pr->state_indices != NULL, .B = B, .T = T, .H = H, .P = P,
                        .N = N, .G = G, .softplus = pr->dt_softplus, .lo = (float)pr->dt_lo,
                        .hi = (float)pr->dt_hi, .st_kind = st_kind);
    return m2g_call_end(&c, st);
}
