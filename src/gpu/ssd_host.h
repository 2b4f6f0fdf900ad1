/*
 * ssd_host.h — what the SSD host files of src/gpu/ share: the device tensors of one SSD call
 * and one launch function per stage kernel (ssd_ops.c), used by the fused forward there and by
 * the fused backward (ssd_bwd.c).
 */
#ifndef MAMBA2C_GPU_SSD_HOST_H
#define MAMBA2C_GPU_SSD_HOST_H

#include "gpu/gpu.h"

/* The fused ops' own block size (SPEC §1 lets a backend choose): 64 keeps the float32
 * cumulative decay sums short and fills the 16x16 tiles of every stage (docs/gpu.md §3). */
#define M2G_FUSED_Q 64

struct ssd_dev;
/* A backend's tensor-core twin of a portable SSD kernel (src/cuda/ssd_tc.c): the id of the
 * twin of kernel `id` that runs on id's parameters, its grid written to g; -1 when id has none.
 * bf16: the bf16-MMA twin where there is one. */
typedef int (*m2g_twin_fn)(int id, const struct ssd_dev *s, int bf16, size_t g[3]);

typedef struct ssd_dev {
    m2g_mem ct, stab;
    int64_t nc, nseq, Q, H, G, P, N;
    m2g_t x, dt, A, Bm, Cm, D, z, bias, init;
    int D_mode, softplus;
    float lo, hi;       /* the dt limits rounded to nearest: the clamp's values          */
    float lo_up, hi_dn; /* the least float >= lo, the greatest <= hi: its compares       */
    m2g_t dto, dac, CB, states, start, final, out, outx;
    m2g_twin_fn twin; /* NULL, or the backward's tensor-core twins (m2g_ssd_backward_with) */
} ssd_dev;

/* the kernel to launch for portable kernel id on grid g: id itself, or s->twin's twin (and
 * its grid) */
static inline int m2g_pick(const ssd_dev *s, int id, int bf16, size_t g[3]) {
    return s->twin ? s->twin(id, s, bf16, g) : id;
}

/* one launch of each stage kernel of ssd_chunked.cl over the tensors of s (m2g_run_bmm and
 * m2g_run_state on s->twin's split-tf32 twins where it is set) */
mamba2_status_t m2g_run_cumsum(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_bmm(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_state(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_passing(m2g_dev *d, const ssd_dev *s);
mamba2_status_t m2g_run_scan(m2g_dev *d, const ssd_dev *s);
/* UNSUPPORTED unless both dtypes are F32 */
mamba2_status_t m2g_need_f32(const char *api, mamba2_dtype_t at, mamba2_dtype_t pt);
/* The chunk table of a fused call (chunks of every sequence in order, Q tokens each but the
 * last of a sequence) and its sequence table; *nc_out = number of chunks. */
mamba2_status_t m2g_fused_tables(m2g_call *c, const m2_ssd_problem *pr, int64_t Q,
                                 int64_t *nc_out, m2g_mem *ct, m2g_mem *stab);

/* ---- the fused forward's pieces (ssd_ops.c), shared with the CUDA tensor-core forward ---- */
/* s from pr, the chunk tables, the scratch (dt_out, dA_cumsum, CB unless !with_cb, chunk
 * states, states at chunk starts) and every input and output bound in call c */
mamba2_status_t m2g_ssd_fwd_bind(m2g_call *c, const m2_ssd_problem *pr, int with_cb,
                                 ssd_dev *s);
/* no tokens: final_state = initial_state (or 0), nothing else */
mamba2_status_t m2g_ssd_fwd_empty(m2g_dev *d, const ssd_dev *s);
/* mamba2_ssd_forward_states: the states at pr's positions from s's states at chunk starts */
mamba2_status_t m2g_ssd_pos_states(m2g_call *c, const m2_ssd_problem *pr, const ssd_dev *s);
/* MAMBA2C_GPU_SSD_FWD=staged: the forward without its on-chip scans */
int m2g_ssd_staged_forced(void);
/* the fused backward with s->twin = twin (NULL: portable only); m2g_ssd_backward is twin NULL */
mamba2_status_t m2g_ssd_backward_with(mamba2_context_t *ctx, const m2_ssd_problem *pr,
                                      m2g_twin_fn twin);

#endif /* MAMBA2C_GPU_SSD_HOST_H */
