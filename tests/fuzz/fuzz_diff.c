/*
 * fuzz_diff.c — the fuzz harness's differential mode: a valid call (no hostile record, tame
 * values, every tensor backed by memory) that the CPU or OpenCL backend accepted runs again
 * on the float64 reference from the same inputs (every buffer restored from its snapshot, so
 * in/out caches start over), and each output must agree within SPEC §8's tolerance:
 * normalised error ‖got − ref‖/‖ref‖ <= 1e-5 for float32 storage, 2e-2 when any tensor of the
 * call is stored in bf16/f16 (a half state cache rounds each token's state: an element whose
 * float32 and float64 values round to neighbouring bf16 values differs by 2^-8). The
 * reference refusing what the backend accepted is a finding too. Calls that pass a backward
 * the forward's saved output (out_x, rstd) are left out: the harness's values are random; so
 * are the SSD calls of value mode 0, whose inputs are not SPEC §8's distribution.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static int64_t d_offs[(int64_t)1 << 19];

static double load(const uint8_t *p, mamba2_dtype_t dt) {
    switch (dt) {
    case MAMBA2_DTYPE_F32: { float f; memcpy(&f, p, 4); return f; }
    case MAMBA2_DTYPE_F64: { double d; memcpy(&d, p, 8); return d; }
    case MAMBA2_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case MAMBA2_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        const int e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
        return (h & 0x8000) ? -v : v;
    }
    default: return 0.0; /* index dtypes are never outputs */
    }
}

/* the output elements of slot i, as doubles (malloc'd; *n their count) */
static double *gather(m2f_case *c, int i, int64_t *n) {
    const m2f_slot *s = &c->s[i];
    const int64_t ne = m2f_elems(&s->t, d_offs, (int64_t)1 << 19);
    double *v = malloc((size_t)(ne ? ne : 1) * sizeof *v);
    for (int64_t e = 0; e < ne; e++) v[e] = load((const uint8_t *)s->t.data + d_offs[e], s->t.dtype);
    *n = ne;
    return v;
}

static int is_output(const m2f_slot *s) {
    return s->present && !s->big && !s->bad && s->numel > 0 && s->t.data &&
           (s->role == M2F_OUT || s->role == M2F_INOUT);
}

int m2f_diff_eligible(const m2f_case *c) {
    if (c->nrec || !c->tame || c->any_big || c->backend == 1 || c->struct_bad) return 0;
    for (int i = 0; i < c->ns; i++) {
        const m2f_slot *s = &c->s[i];
        if (s->present && (s->host != i || s->misalign || s->null_data)) return 0;
        /* the forward's saved outputs a backward takes (the SSD's out_x, the norm's rstd):
         * the harness fills them with random values, which the backends' formulas assume
         * consistent with the other inputs (a backend may also recompute them) */
        if (s->present && s->role == M2F_IN && (!strcmp(s->name, "out_x") || !strcmp(s->name, "rstd")))
            return 0;
        /* SPEC §8's tolerances hold on its input distribution: the SSD's inputs are drawn
         * from it in value mode 1 only (mode 0's U(-1,1) dt, Bm, Cm make dA's float32 sums
         * cancel: tests/fuzz/README.md, "Campaigns") */
        if (s->present && s->vclass >= M2F_V_SPEC_DT && c->vmode != 1) return 0;
    }
    return c->adt == MAMBA2_DTYPE_F32 || c->adt == MAMBA2_DTYPE_BF16 || c->adt == MAMBA2_DTYPE_F16;
}

void m2f_differential(m2f_case *c, mamba2_context_t *ref) {
    const m2f_op *op = m2f_ops[c->op];
    double *got[M2F_MAX_SLOTS] = {0};
    int64_t n[M2F_MAX_SLOTS] = {0};
    for (int i = 0; i < c->ns; i++)
        if (is_output(&c->s[i])) got[i] = gather(c, i, &n[i]);
    for (int i = 0; i < c->ns; i++) /* the inputs, and in/out caches, as before the call */
        if (c->s[i].buf) memcpy(c->s[i].buf, c->s[i].snap, c->s[i].bufsz);
    mamba2_status_t st = op->call(c, ref, NULL, NULL, 0);
    if (st != MAMBA2_STATUS_OK)
        m2f_fail(c, "differential: the backend accepted the call, the reference returned %d (%s)",
                 (int)st, mamba2_last_error());
    /* SPEC §8's tiers go by storage: any bf16/f16 tensor in the call (activations, or a half
     * state cache with float32 activations) puts every output in the half tier */
    int half = c->adt == MAMBA2_DTYPE_BF16 || c->adt == MAMBA2_DTYPE_F16;
    for (int i = 0; i < c->ns; i++)
        if (c->s[i].present &&
            (c->s[i].t.dtype == MAMBA2_DTYPE_BF16 || c->s[i].t.dtype == MAMBA2_DTYPE_F16))
            half = 1;
    const double tol = half ? 2e-2 : 1e-5;
    for (int i = 0; i < c->ns; i++) {
        if (!got[i]) continue;
        int64_t m;
        double *want = gather(c, i, &m), num = 0.0, den = 0.0;
        for (int64_t e = 0; e < m && e < n[i]; e++) {
            if (isnan(got[i][e]) && isnan(want[e])) continue; /* left untouched by both (the
                                                                  NaN canary: padding rows) */
            const double d = got[i][e] - want[e];
            num += d * d;
            den += want[e] * want[e];
        }
        /* the norm floored at sqrt(count): inputs are tame (|v| <= 1), so an output that
         * cancels to near 0 (a one-element dA of a 3-token sequence: 1.5e-5 relative) is
         * compared absolutely rather than against its own small size */
        int64_t cnt = 0;
        for (int64_t e = 0; e < m && e < n[i]; e++) cnt += !(isnan(got[i][e]) && isnan(want[e]));
        /* (an output every element of which both left as the canary, e.g. an all-padding
         * decode step, has nothing to compare) */
        const double err = cnt ? sqrt(num) / fmax(sqrt(den), sqrt((double)cnt)) : 0.0;
        if (!(err <= tol))
            m2f_fail(c, "differential: output %s differs from the reference: normalised error "
                        "%.3g > %.0e", c->s[i].name, err, tol);
        free(want);
        free(got[i]);
    }
}
