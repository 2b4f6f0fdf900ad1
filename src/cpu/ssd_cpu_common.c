/*
 * ssd_cpu_common.c — what the CPU SSD forward and backward share (ssd_cpu.h has the overview):
 * the kernel-set choice, the dtype check, the problems without tokens, D rows, the backward's
 * transposed state layout, activation rows, prefetch rows, and the checked workspace layout
 * arithmetic.
 */
#include "cpu/ssd_cpu.h"

/* The kernel set of a forward: the context's ISA, except that the AVX-512 set (register tile
 * 2 x 16 lanes x 4: P padded to a multiple of 32) runs only where P fills that tile well
 * enough to beat the AVX2 set's 16 x 4 one: on Intel cores P >= 64, or P = 32 with N >= 64; on
 * AMD cores (ctx->amd; full-width 512-bit units) from P = 16 (docs/cpu_ssd.md §10). The
 * choice depends on the problem and the CPU only, never on the thread count, so results stay
 * bitwise identical across thread counts. */
const m2_cpu_kernels *m2_ssdc_fwd_kernels(const mamba2_context_t *ctx, const m2_ssd_problem *pr) {
    if (ctx->isa == M2_ISA_AVX512 &&
        (pr->P >= 64 || (pr->P % 32 == 0 && pr->N >= 64) || (ctx->amd && pr->P >= 16)))
        return &m2_cpu_kernels_avx512;
    return ctx->isa != M2_ISA_SCALAR ? &m2_cpu_kernels_avx2 : &m2_cpu_kernels_scalar;
}

/* The backward's kernel set. Its states are transposed ([P][N], n along the vectors:
 * ssd_cpu_bwd_pass.c), so there the AVX-512 tile pads N, not P, to a multiple of 32: the
 * forward's rule with P and N swapped, except that on AMD cores it starts at N = 32
 * (docs/cpu_ssd.md §10). */
const m2_cpu_kernels *m2_ssdc_bwd_kernels(const mamba2_context_t *ctx, const m2_ssd_problem *pr) {
    if (ctx->isa == M2_ISA_AVX512 &&
        (pr->N >= 64 || (pr->N % 32 == 0 && pr->P >= 64) || (ctx->amd && pr->N >= 32)))
        return &m2_cpu_kernels_avx512;
    return ctx->isa != M2_ISA_SCALAR ? &m2_cpu_kernels_avx2 : &m2_cpu_kernels_scalar;
}

mamba2_status_t m2_ssdc_check_dtype(const m2_ssd_problem *pr) {
    const int act = pr->act_dtype == MAMBA2_DTYPE_F32 || pr->act_dtype == MAMBA2_DTYPE_BF16 ||
                    pr->act_dtype == MAMBA2_DTYPE_F16;
    if (!act || pr->par_dtype != MAMBA2_DTYPE_F32)
        return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                        "the cpu backend supports f32, bf16 or f16 activations with f32 "
                        "parameters and states (got %s/%s)",
                        m2_dtype_name(pr->act_dtype), m2_dtype_name(pr->par_dtype));
    return MAMBA2_STATUS_OK;
}

const float *m2_ssdc_head_D(const m2_ssd_problem *pr, int64_t h, float *buf) {
    if (!pr->D.p) return NULL;
    if (pr->D_per_channel) return (const float *)pr->D.p + h * pr->D.s[0];
    const float v = at1(&pr->D, h);
    for (int64_t p = 0; p < pr->P; p++) buf[p] = v;
    return buf;
}

void m2_ssdc_state_in_t(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                        int64_t Pp, int64_t Np, int64_t tb, float *S) {
    memset(S, 0, (size_t)(Pp * Np) * sizeof(float));
    if (!st->p) return;
    for (int64_t p = 0; p < P; p++) {
        const float *r = row3(st, s, h, p);
        for (int64_t n = 0; n < N; n += tb)
            memcpy(S + m2_tile_off(p, n, Np, tb), r + n, (size_t)(N - n < tb ? N - n : tb) * sizeof(float));
    }
}

void m2_ssdc_state_out_t(const m2_view *st, int64_t s, int64_t h, int64_t P, int64_t N,
                         int64_t Np, int64_t tb, const float *S, float e) {
    for (int64_t p = 0; p < P; p++) {
        float *r = row3(st, s, h, p);
        for (int64_t n0 = 0; n0 < N; n0 += tb) {
            const float *q = S + m2_tile_off(p, n0, Np, tb);
            for (int64_t n = n0; n < N && n < n0 + tb; n++) r[n] = e * q[n - n0];
        }
    }
}

typedef struct empty_job {
    const m2_ssd_problem *pr;
    const m2_view *dst, *src;
} empty_job;

static void empty_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const empty_job *J = (const empty_job *)arg;
    const m2_ssd_problem *pr = J->pr;
    const int64_t s = task / pr->H, h = task % pr->H;
    for (int64_t p = 0; p < pr->P; p++) {
        float *r = row3(J->dst, s, h, p);
        if (J->src->p) memcpy(r, row3(J->src, s, h, p), (size_t)pr->N * sizeof(float));
        else memset(r, 0, (size_t)pr->N * sizeof(float));
    }
}

void m2_ssdc_empty_states(mamba2_context_t *ctx, const m2_ssd_problem *pr, const m2_view *dst,
                          const m2_view *src) {
    if (!dst->p) return;
    empty_job J = {pr, dst, src};
    m2_cpu_run_tasks(ctx, pr->nseq * pr->H, empty_task, &J); /* nseq H <= 2^40 2^20: no wrap */
}

void m2_ssdc_rows_act(const m2_ssd_problem *pr, const m2_cpu_kernels *K, float *dst,
                      const m2_view *v, int64_t b, int64_t u, int64_t g, int64_t Tb, int64_t N,
                      int64_t Np, float *tmp) {
    for (int64_t t = 0; t < Tb; t++) {
        memcpy(dst + t * Np, act_in(pr, K, v, b, u + t, g, N, tmp), (size_t)N * sizeof(float));
        if (Np > N) memset(dst + t * Np + N, 0, (size_t)(Np - N) * sizeof(float));
    }
}

/* Rows of a [B,L,H,P] view (hint `how`: into L2 with prefetcht1, or prefetchnta on AMD
 * cores): as one range per token when the heads are the inner (smaller) stride, else one range
 * per head (a head-major view: its tokens adjacent); a layout whose ranges would be more than
 * twice the rows themselves (heads and tokens both far apart) is not requested at all. */
void m2_ssdc_pf_add_rows(m2_pf *pf, const m2_ssd_problem *pr, const m2_view *v, int64_t b,
                         int64_t u, int64_t h0, int64_t nt, int64_t nh, int64_t len, int how) {
    if (!v->p || nt <= 0 || nh <= 0) return;
    const int64_t es = act_size(pr), ldt = v->s[1], ldh = v->s[2], rows = nt * nh * len;
    const char *p = arow(pr, v, b, u, h0);
    if (ldh <= ldt) {
        const int64_t ext = (nh - 1) * ldh + len;
        if (ext * nt <= 2 * rows) m2_pf_add(pf, p, ldt * es, nt, ext * es, how);
    } else {
        const int64_t ext = (nt - 1) * ldt + len;
        if (ext * nh <= 2 * rows) m2_pf_add(pf, p, ldh * es, nh, ext * es, how);
    }
}

/* ---- workspace layouts ---------------------------------------------------------------- */

size_t m2_ssdc_ws_take(ws_acc *a, size_t size, const size_t *f, size_t n) {
    size_t bytes = size, o;
    for (size_t i = 0; i < n; i++)
        if (!m2_size_mul(bytes, f[i], &bytes)) a->ok = 0;
    if (!a->ok || !m2_size_add(a->off, 63, &o)) {
        a->ok = 0;
        return 0;
    }
    o &= ~(size_t)63;
    if (!m2_size_add(o, bytes, &a->off)) a->ok = 0;
    return o;
}

int m2_ssdc_size_fma(size_t a, size_t b, size_t c, size_t *r) {
    size_t p;
    return m2_size_mul(b, c, &p) && m2_size_add(a, p, r);
}

mamba2_status_t m2_ssdc_too_big(const m2_ssd_problem *pr, const char *what) {
    return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                    "cpu ssd %s: the workspace of [B,L,H,P,N] = [%lld,%lld,%lld,%lld,%lld] "
                    "(%lld sequences) does not fit in the address space",
                    what, (long long)pr->B, (long long)pr->L, (long long)pr->H, (long long)pr->P,
                    (long long)pr->N, (long long)pr->nseq);
}
