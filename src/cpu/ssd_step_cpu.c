/*
 * ssd_step_cpu.c — the CPU backend of the SSD decode step (SPEC §6): slots, dt processing
 * and threading. The arithmetic on the state lives in the per-ISA kernel sets
 * (ssd_step_kernels.h), picked from ctx->isa.
 *
 * One task per (batch row, head), static in content, handed to the context's pool: the task
 * looks up the row's slot (a padding row's tasks return at once), processes dt for a block of
 * up to TOK_BLOCK tokens (bias, softplus, clamp, decay exp(d A), in double and rounded once, as
 * the fused forward does), runs the row kernel on the slot's [P,N] state in place — writing the
 * raw y_t into the out rows and, when asked, every S_t into all_states — and then turns each y_t
 * into out_t = (y_t + D x_t) * silu(z_t) in place. Tasks touch disjoint slots (the entry point
 * rejects duplicate indices) and disjoint out rows, and each does the same float operations
 * whatever thread runs it: results are bitwise identical for any thread count. No workspace:
 * the per-task scratch (decays and steps of one token block) lives on the stack.
 */
#include <math.h>
#include <stdint.h>

#include "core/half.h"
#include "core/ssd_step.h"
#include "cpu/cpu.h"
#include "cpu/ssd_step_kernels.h"

#define TOK_BLOCK 64 /* tokens whose dt is processed at once (stack scratch: 2 x 256 bytes) */
#define HALF_SCRATCH 4096 /* half state: floats of state rows widened at a time (16 KiB stack) */

static const m2_ssd_step_kernels *kernels_for(const mamba2_context_t *ctx) {
#if defined(M2_KSETS_X86) /* AVX2 also at the AVX-512 level */
    return ctx->isa != M2_ISA_SCALAR ? &m2_ssd_step_kernels_avx2 : &m2_ssd_step_kernels_scalar;
#elif defined(M2_KSETS_NEON)
    return ctx->isa == M2_ISA_NEON ? &m2_ssd_step_kernels_neon : &m2_ssd_step_kernels_scalar;
#else
    (void)ctx;
    return &m2_ssd_step_kernels_scalar;
#endif
}

typedef struct step_job {
    const m2_ssd_step_problem *pr;
    const m2_ssd_step_kernels *k;
} step_job;

static void step_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const step_job *job = (const step_job *)arg;
    const m2_ssd_step_problem *pr = job->pr;
    const m2_ssd_step_kernels *k = job->k;
    const int64_t b = task / pr->H, h = task % pr->H, g = h / (pr->H / pr->G);
    const int64_t q = m2_ssd_step_slot(pr, b);
    if (q < 0) return; /* padding row */

    /* per-head parameters (SPEC §1 step 1) */
    const double A = (double)((const float *)pr->A.p)[h];
    const double bias = pr->dt_bias.p ? (double)((const float *)pr->dt_bias.p)[h] : 0.0;
    const float *D = NULL;
    int64_t Ds = 0;
    if (pr->D.p) {
        D = pr->D_per_channel ? (const float *)pr->D.p + h * pr->D.s[0]
                              : (const float *)pr->D.p + h;
        Ds = pr->D_per_channel ? 1 : 0;
    }

    float *S = (float *)pr->cache.p + q * pr->cache.s[0] + h * pr->cache.s[1];
    const float *dt = (const float *)pr->dt.p + b * pr->dt.s[0] + h;
    const float *x = (const float *)pr->x.p + b * pr->x.s[0] + h * pr->x.s[2];
    const float *z = pr->z.p ? (const float *)pr->z.p + b * pr->z.s[0] + h * pr->z.s[2] : NULL;
    const float *Bm = (const float *)pr->Bm.p + b * pr->Bm.s[0] + g * pr->Bm.s[2];
    const float *Cm = (const float *)pr->Cm.p + b * pr->Cm.s[0] + g * pr->Cm.s[2];
    float *out = (float *)pr->out.p + b * pr->out.s[0] + h * pr->out.s[2];
    float *all = pr->all_states.p
                     ? (float *)pr->all_states.p + b * pr->all_states.s[0] + h * pr->all_states.s[2]
                     : NULL;

    float a[TOK_BLOCK], d[TOK_BLOCK];
    for (int64_t t0 = 0; t0 < pr->T; t0 += TOK_BLOCK) {
        const int64_t nt = pr->T - t0 < TOK_BLOCK ? pr->T - t0 : TOK_BLOCK;
        for (int64_t i = 0; i < nt; i++) {
            double v = (double)dt[(t0 + i) * pr->dt.s[1]] + bias;
            if (pr->dt_softplus && v <= 20.0) v = log1p(exp(v));
            if (v < pr->dt_lo) v = pr->dt_lo;
            if (v > pr->dt_hi) v = pr->dt_hi;
            d[i] = (float)v;
            a[i] = (float)exp(v * A);
        }
        float *o = out + t0 * pr->out.s[1];
        const float *xb = x + t0 * pr->x.s[1];
        k->rows(nt, pr->P, pr->N, a, d, xb, pr->x.s[1], Bm + t0 * pr->Bm.s[1], pr->Bm.s[1],
                Cm + t0 * pr->Cm.s[1], pr->Cm.s[1], S, pr->cache.s[2], o, pr->out.s[1],
                all ? all + t0 * pr->all_states.s[1] : NULL, pr->all_states.s[1],
                pr->all_states.s[3]);
        for (int64_t i = 0; i < nt; i++) {
            float *ot = o + i * pr->out.s[1];
            k->epilogue(pr->P, ot, xb + i * pr->x.s[1], D, Ds, z ? z + (t0 + i) * pr->z.s[1] : NULL,
                        ot);
        }
    }
}

/*
 * A BF16/F16 state_cache (task per (row, head) as above): token by token, the slot's state
 * rows are widened a block of rows at a time into float scratch, the row kernel runs on them
 * for that one token (the same float operations as a one-token call on an F32 state; y from
 * the unrounded state), and the rows are stored back rounded once (and into all_states[t]).
 * Rows of the state are independent, so the blocking changes no result; the state between
 * tokens is the rounded one, as the API specifies.
 */
static void step_task_half(void *arg, int64_t task, int thread) {
    (void)thread;
    const step_job *job = (const step_job *)arg;
    const m2_ssd_step_problem *pr = job->pr;
    const m2_ssd_step_kernels *k = job->k;
    const int64_t b = task / pr->H, h = task % pr->H, g = h / (pr->H / pr->G);
    const int64_t q = m2_ssd_step_slot(pr, b);
    if (q < 0) return; /* padding row */
    const mamba2_dtype_t sdt = pr->state_dtype;
    const int64_t P = pr->P, N = pr->N;

    const double A = (double)((const float *)pr->A.p)[h];
    const double bias = pr->dt_bias.p ? (double)((const float *)pr->dt_bias.p)[h] : 0.0;
    const float *D = NULL;
    int64_t Ds = 0;
    if (pr->D.p) {
        D = pr->D_per_channel ? (const float *)pr->D.p + h * pr->D.s[0]
                              : (const float *)pr->D.p + h;
        Ds = pr->D_per_channel ? 1 : 0;
    }
    uint16_t *S = (uint16_t *)pr->cache.p + q * pr->cache.s[0] + h * pr->cache.s[1];
    const float *dt = (const float *)pr->dt.p + b * pr->dt.s[0] + h;
    const float *x = (const float *)pr->x.p + b * pr->x.s[0] + h * pr->x.s[2];
    const float *z = pr->z.p ? (const float *)pr->z.p + b * pr->z.s[0] + h * pr->z.s[2] : NULL;
    const float *Bm = (const float *)pr->Bm.p + b * pr->Bm.s[0] + g * pr->Bm.s[2];
    const float *Cm = (const float *)pr->Cm.p + b * pr->Cm.s[0] + g * pr->Cm.s[2];
    float *out = (float *)pr->out.p + b * pr->out.s[0] + h * pr->out.s[2];
    uint16_t *all = pr->all_states.p ? (uint16_t *)pr->all_states.p + b * pr->all_states.s[0] +
                                           h * pr->all_states.s[2]
                                     : NULL;
    float scr[HALF_SCRATCH];
    const int64_t R = HALF_SCRATCH / N < P ? HALF_SCRATCH / N : P; /* >= 1: N <= HALF_SCRATCH */
    for (int64_t t = 0; t < pr->T; t++) {
        double v = (double)dt[t * pr->dt.s[1]] + bias;
        if (pr->dt_softplus && v <= 20.0) v = log1p(exp(v));
        if (v < pr->dt_lo) v = pr->dt_lo;
        if (v > pr->dt_hi) v = pr->dt_hi;
        const float d = (float)v, a = (float)exp(v * A);
        const float *xt = x + t * pr->x.s[1];
        float *ot = out + t * pr->out.s[1];
        for (int64_t p0 = 0; p0 < P; p0 += R) {
            const int64_t r = P - p0 < R ? P - p0 : R;
            for (int64_t i = 0; i < r; i++)
                m2_row_to_f32(S + (p0 + i) * pr->cache.s[2], sdt, N, scr + i * N);
            k->rows(1, r, N, &a, &d, xt + p0, pr->x.s[1], Bm + t * pr->Bm.s[1], pr->Bm.s[1],
                    Cm + t * pr->Cm.s[1], pr->Cm.s[1], scr, N, ot + p0, pr->out.s[1], NULL, 0, 0);
            for (int64_t i = 0; i < r; i++) {
                m2_row_from_f32(S + (p0 + i) * pr->cache.s[2], sdt, N, scr + i * N);
                if (all)
                    m2_row_from_f32(all + t * pr->all_states.s[1] + (p0 + i) * pr->all_states.s[3],
                                    sdt, N, scr + i * N);
            }
        }
        k->epilogue(P, ot, xt, D, Ds, z ? z + t * pr->z.s[1] : NULL, ot);
    }
}

/*
 * BF16/F16 activations (x, dt, Bm, Cm, z, out), with an F32, BF16 or F16 state_cache (task per
 * (row, head) as above): token by token, Bm_t and Cm_t are widened to float scratch, and the
 * state's rows are processed a block of at most RB rows at a time: x_t and z_t of the block
 * widened, the rows widened too when the state is half (else used in place), the row kernel for
 * that one token, a half state stored back rounded once (and into all_states[t]), the
 * epilogue in float, and out rounded once. Every token runs the float operations of a
 * one-token call on the widened values (rows are independent, so the blocking changes no
 * result): the float32 step on the rounded inputs, with out rounded once.
 */
#define RB 64 /* state rows per block with half activations */

static void step_task_hact(void *arg, int64_t task, int thread) {
    (void)thread;
    const step_job *job = (const step_job *)arg;
    const m2_ssd_step_problem *pr = job->pr;
    const m2_ssd_step_kernels *k = job->k;
    const int64_t b = task / pr->H, h = task % pr->H, g = h / (pr->H / pr->G);
    const int64_t q = m2_ssd_step_slot(pr, b);
    if (q < 0) return; /* padding row */
    const mamba2_dtype_t adt = pr->act_dtype, sdt = pr->state_dtype;
    const int half_state = sdt != MAMBA2_DTYPE_F32;
    const int64_t P = pr->P, N = pr->N;

    const double A = (double)((const float *)pr->A.p)[h];
    const double bias = pr->dt_bias.p ? (double)((const float *)pr->dt_bias.p)[h] : 0.0;
    const float *D = NULL;
    int64_t Ds = 0;
    if (pr->D.p) {
        D = pr->D_per_channel ? (const float *)pr->D.p + h * pr->D.s[0]
                              : (const float *)pr->D.p + h;
        Ds = pr->D_per_channel ? 1 : 0;
    }
    const size_t ss = mamba2_dtype_size(sdt);
    char *S = (char *)pr->cache.p + (size_t)(q * pr->cache.s[0] + h * pr->cache.s[1]) * ss;
    char *all = pr->all_states.p ? (char *)pr->all_states.p +
                                       (size_t)(b * pr->all_states.s[0] +
                                                h * pr->all_states.s[2]) * ss
                                 : NULL;
    const uint16_t *dt = (const uint16_t *)pr->dt.p + b * pr->dt.s[0] + h;
    const uint16_t *x = (const uint16_t *)pr->x.p + b * pr->x.s[0] + h * pr->x.s[2];
    const uint16_t *z = pr->z.p ? (const uint16_t *)pr->z.p + b * pr->z.s[0] + h * pr->z.s[2]
                                : NULL;
    const uint16_t *Bm = (const uint16_t *)pr->Bm.p + b * pr->Bm.s[0] + g * pr->Bm.s[2];
    const uint16_t *Cm = (const uint16_t *)pr->Cm.p + b * pr->Cm.s[0] + g * pr->Cm.s[2];
    uint16_t *out = (uint16_t *)pr->out.p + b * pr->out.s[0] + h * pr->out.s[2];

    float bc[2 * HALF_SCRATCH], xs[RB], zs[RB], ys[RB], scr[HALF_SCRATCH];
    /* rows per block: RB, and with a half state as many as the scratch holds (>= 1) */
    int64_t R = P < RB ? P : RB;
    if (half_state && HALF_SCRATCH / N < R) R = HALF_SCRATCH / N;
    for (int64_t t = 0; t < pr->T; t++) {
        float dtv;
        m2_row_to_f32(dt + t * pr->dt.s[1], adt, 1, &dtv);
        double v = (double)dtv + bias;
        if (pr->dt_softplus && v <= 20.0) v = log1p(exp(v));
        if (v < pr->dt_lo) v = pr->dt_lo;
        if (v > pr->dt_hi) v = pr->dt_hi;
        const float d = (float)v, a = (float)exp(v * A);
        m2_row_to_f32(Bm + t * pr->Bm.s[1], adt, N, bc);
        m2_row_to_f32(Cm + t * pr->Cm.s[1], adt, N, bc + N);
        const uint16_t *xt = x + t * pr->x.s[1];
        uint16_t *ot = out + t * pr->out.s[1];
        for (int64_t p0 = 0; p0 < P; p0 += R) {
            const int64_t r = P - p0 < R ? P - p0 : R;
            m2_row_to_f32(xt + p0, adt, r, xs);
            if (half_state) {
                for (int64_t i = 0; i < r; i++)
                    m2_row_to_f32(S + (size_t)((p0 + i) * pr->cache.s[2]) * ss, sdt, N,
                                  scr + i * N);
                k->rows(1, r, N, &a, &d, xs, 0, bc, 0, bc + N, 0, scr, N, ys, 0, NULL, 0, 0);
                for (int64_t i = 0; i < r; i++) {
                    m2_row_from_f32(S + (size_t)((p0 + i) * pr->cache.s[2]) * ss, sdt, N,
                                    scr + i * N);
                    if (all)
                        m2_row_from_f32(all + (size_t)(t * pr->all_states.s[1] +
                                                       (p0 + i) * pr->all_states.s[3]) * ss,
                                        sdt, N, scr + i * N);
                }
            } else {
                float *Sf = (float *)S + p0 * pr->cache.s[2];
                float *af = all ? (float *)all + t * pr->all_states.s[1] +
                                      p0 * pr->all_states.s[3]
                                : NULL;
                k->rows(1, r, N, &a, &d, xs, 0, bc, 0, bc + N, 0, Sf, pr->cache.s[2], ys, 0, af,
                        0, pr->all_states.s[3]);
            }
            if (z) m2_row_to_f32(z + t * pr->z.s[1] + p0, adt, r, zs);
            k->epilogue(r, ys, xs, D ? D + p0 * Ds : NULL, Ds, z ? zs : NULL, ys);
            m2_row_from_f32(ot + p0, adt, r, ys);
        }
    }
}

mamba2_status_t m2_cpu_ssd_step(mamba2_context_t *ctx, const m2_ssd_step_problem *pr) {
    if (pr->par_dtype != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED, "the cpu backend runs ssd_step with f32, "
                                                   "bf16 or f16 activations only");
    const int half = pr->state_dtype != MAMBA2_DTYPE_F32;
    const int hact = pr->act_dtype != MAMBA2_DTYPE_F32;
    if ((half || hact) && pr->N > HALF_SCRATCH)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the cpu backend runs ssd_step with %s %s for N <= %d only (N is %lld)",
                        m2_dtype_name(hact ? pr->act_dtype : pr->state_dtype),
                        hact ? "activations" : "state_cache", HALF_SCRATCH,
                        (long long)pr->N);
    if (pr->T == 0) return MAMBA2_STATUS_OK;
    step_job job = {pr, kernels_for(ctx)};
    m2_cpu_run_tasks(ctx, pr->B * pr->H, hact ? step_task_hact : half ? step_task_half : step_task,
                     &job);
    return MAMBA2_STATUS_OK;
}
