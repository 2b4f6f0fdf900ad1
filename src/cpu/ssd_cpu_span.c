/*
 * ssd_cpu_span.c — the sequence split of the CPU SSD scan: spans of a long sequence as tasks.
 *
 * With fewer (sequence, head) pairs than M2_CPU_PAR_WIDTH, a long sequence is cut into K
 * spans of ceil(len / K) tokens, K = ceil(PAR_WIDTH / (nseq H)) (at most len / SPAN_MIN;
 * K < 3 gains nothing and is not used). The spans run in parallel from zero states, a short
 * sequential pass carries the true states across the span boundaries,
 * S_start[k+1] = (Π_{t in span k} a_t) S_start[k] + S_local[k], and the spans run again
 * from their true start states (docs/cpu_ssd.md §5). This changes the arithmetic against one
 * sequential pass (the carried state is a sum in another order), so K depends on the problem
 * only — never on the thread count — and every thread count gives the same bits.
 *
 * Only problems with few pairs split (fewer than PAR_WIDTH sequences, so every walk over the
 * sequences below is short); for all others every sequence is one span and the bookkeeping
 * is O(1) per item.
 */
#include <math.h>

#include "cpu/ssd_cpu.h"

#ifndef M2_CPU_PAR_WIDTH
#define M2_CPU_PAR_WIDTH 32
#endif
#ifndef M2_CPU_SPAN_MIN
#define M2_CPU_SPAN_MIN 2048
#endif

/* nseq * H < PAR_WIDTH, without forming a product that could overflow */
static int may_split(const m2_ssd_problem *pr) {
    return pr->nseq < M2_CPU_PAR_WIDTH && pr->H < M2_CPU_PAR_WIDTH &&
           pr->nseq * pr->H < M2_CPU_PAR_WIDTH;
}

int64_t m2_span_count(const m2_ssd_problem *pr, int64_t len) {
    if (!may_split(pr)) return 1;
    const int64_t pairs = pr->nseq * pr->H;
    if (pairs <= 0) return 1;
    int64_t k = (M2_CPU_PAR_WIDTH + pairs - 1) / pairs;
    if (k > len / M2_CPU_SPAN_MIN) k = len / M2_CPU_SPAN_MIN;
    return k < 3 ? 1 : k;
}

int64_t m2_span_first(const m2_ssd_problem *pr, int64_t si) {
    if (!may_split(pr)) return si;
    int64_t c0 = 0;
    for (int64_t s = 0; s < si; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        c0 += m2_span_count(pr, t1 - t0);
    }
    return c0;
}

int64_t m2_span_total(const m2_ssd_problem *pr) { return m2_span_first(pr, pr->nseq); }

int64_t m2_span_longest(const m2_ssd_problem *pr) {
    int64_t lmax = 0;
    if (!may_split(pr) && !pr->cu_seqlens) return pr->nseq > 0 ? pr->L : 0;
    if (!may_split(pr)) { /* one span per sequence: the cu_seqlens entries */
        for (int64_t s = 0; s < pr->nseq; s++) {
            int64_t b, t0, t1;
            m2_ssd_seq(pr, s, &b, &t0, &t1);
            if (t1 - t0 > lmax) lmax = t1 - t0;
        }
        return lmax;
    }
    const int64_t n = m2_span_total(pr);
    for (int64_t i = 0; i < n; i++) {
        span_ref r;
        if (m2_span_item(pr, SPANS_ALL, i, &r) && r.tb - r.ta > lmax) lmax = r.tb - r.ta;
    }
    return lmax;
}

/* Items per sequence are spans [lo, hi) of its K: SPANS_ALL every span, SPANS_FIRST the ones a
 * first pass runs (all of an unsplit sequence; 0 .. K-2 of a split one), SPANS_LAST the second
 * full pass (1 .. K-1 of a split sequence). */
int m2_span_item(const m2_ssd_problem *pr, int mode, int64_t i, span_ref *r) {
    if (!may_split(pr)) { /* item i is sequence i, whole (SPANS_LAST has no items) */
        if (mode == SPANS_LAST || i < 0 || i >= pr->nseq) return 0;
        m2_ssd_seq(pr, i, &r->b, &r->t0, &r->t1);
        r->s = i;
        r->k = 0;
        r->K = 1;
        r->ta = r->t0;
        r->tb = r->t1;
        r->c = i;
        return 1;
    }
    int64_t c = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        const int64_t K = m2_span_count(pr, t1 - t0);
        const int64_t lo = mode == SPANS_LAST ? 1 : 0;
        const int64_t hi = mode == SPANS_ALL     ? K
                           : mode == SPANS_FIRST ? (K == 1 ? 1 : K - 1)
                                                 : (K == 1 ? 1 : K);
        if (i < hi - lo) {
            const int64_t k = lo + i, Lc = (t1 - t0 + K - 1) / K;
            r->s = s;
            r->k = k;
            r->K = K;
            r->b = b;
            r->t0 = t0;
            r->t1 = t1;
            r->ta = t0 + k * Lc < t1 ? t0 + k * Lc : t1;
            r->tb = t0 + (k + 1) * Lc < t1 ? t0 + (k + 1) * Lc : t1;
            r->c = c + k;
            return 1;
        }
        i -= hi > lo ? hi - lo : 0;
        c += K;
    }
    return 0;
}

int64_t m2_span_items(const m2_ssd_problem *pr, int mode) {
    if (!may_split(pr)) return mode == SPANS_LAST ? 0 : pr->nseq;
    int64_t n = 0;
    for (int64_t s = 0; s < pr->nseq; s++) {
        int64_t b, t0, t1;
        m2_ssd_seq(pr, s, &b, &t0, &t1);
        const int64_t K = m2_span_count(pr, t1 - t0);
        n += mode == SPANS_ALL     ? K
             : mode == SPANS_FIRST ? (K == 1 ? 1 : K - 1)
                                   : (K == 1 ? 0 : K - 1);
    }
    return n;
}

m2_view m2_span_view(void *p, const m2_ssd_problem *pr) {
    m2_view v;
    v.p = p;
    v.s[0] = pr->H * pr->P * pr->N; /* within the workspace: the plan checked the size */
    v.s[1] = pr->P * pr->N;
    v.s[2] = pr->N;
    v.s[3] = 1;
    return v;
}

void m2_span_carry(const m2_ssd_problem *pr, const m2_view *cs, const m2_view *cl,
                   const double *cdec, int64_t c0, int64_t K, int64_t h) {
    const int64_t P = pr->P, N = pr->N;
    for (int64_t k = 1; k + 1 < K; k++) {
        const float a = (float)exp(cdec[(c0 + k) * pr->H + h]);
        for (int64_t p = 0; p < P; p++) {
            const float *src = row3(cs, c0 + k, h, p), *loc = row3(cl, c0 + k, h, p);
            float *dst = row3(cs, c0 + k + 1, h, p);
            for (int64_t n = 0; n < N; n++) dst[n] = a * src[n] + loc[n];
        }
    }
}
