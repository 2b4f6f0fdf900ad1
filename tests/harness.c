/*
 * harness.c — implementation of the shared test harness (see harness.h for what and why):
 * the PRNG, the unit bookkeeping, the metrics, strided tensor access and contexts. The SSD
 * case data and its guarded library tensors (th_ssd_data, th_ssd_io) are in harness_ssd.c.
 */
#include "harness.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================================ PRNG === */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void th_rng_seed(th_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t th_rng_next(th_rng *r) { /* xoshiro256** */
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double th_rng_uniform(th_rng *r, double lo, double hi) {
    double u = (double)(th_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); /* [0,1) */
    return lo + (hi - lo) * u;
}

double th_rng_normal(th_rng *r) {
    /* Box-Muller without caching the second value: the draw sequence then depends only on
     * the number of calls, which keeps cases reproducible when one tensor is added. */
    double u1 = th_rng_uniform(r, 0.0, 1.0);
    double u2 = th_rng_uniform(r, 0.0, 1.0);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ========================================================================= bookkeeping === */

static int g_passed, g_failed;
static int g_open, g_unit_failed;
static char g_name[512];
static char g_line[4096];
static int g_verbose = 1;

#define TH_MAX_TOLS 8
static struct {
    double tol, worst;
    char where[640];
    int used;
} g_worst[TH_MAX_TOLS];

void th_set_verbose(int v) { g_verbose = v; }
int th_verbose(void) { return g_verbose; }
int th_reduced(void) {
    const char *e = getenv("MAMBA2C_TEST_REDUCED");
    return e && !strcmp(e, "1");
}

void th_begin(const char *fmt, ...) {
    if (g_open) th_end();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_name, sizeof g_name, fmt, ap);
    va_end(ap);
    g_line[0] = 0;
    g_open = 1;
    g_unit_failed = 0;
}

static void vfail(const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    printf("    FAIL %s: %s\n", g_open ? g_name : "(setup)", msg);
    fflush(stdout);
    if (g_open) {
        g_unit_failed = 1;
    } else {
        g_failed++;
    }
}

void th_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(fmt, ap);
    va_end(ap);
}

int th_expect(int cond, const char *fmt, ...) {
    if (!cond) {
        va_list ap;
        va_start(ap, fmt);
        vfail(fmt, ap);
        va_end(ap);
    }
    return cond;
}

void th_metric(const char *label, double err, double tol) {
    size_t len = strlen(g_line);
    if (len + 40 < sizeof g_line)
        snprintf(g_line + len, sizeof g_line - len, " %s=%.1e", label, err);
    if (!(err <= tol)) th_fail("%s normalised error %.3e exceeds %.1e", label, err, tol);
    int slot = -1;
    for (int i = 0; i < TH_MAX_TOLS; i++) {
        if (g_worst[i].used && g_worst[i].tol == tol) { slot = i; break; }
        if (!g_worst[i].used && slot < 0) slot = i;
    }
    if (slot < 0) return;
    if (!g_worst[slot].used) {
        g_worst[slot].used = 1;
        g_worst[slot].tol = tol;
        g_worst[slot].worst = -1.0;
    }
    double e = err != err ? INFINITY : err;
    if (e > g_worst[slot].worst) {
        g_worst[slot].worst = e;
        snprintf(g_worst[slot].where, sizeof g_worst[slot].where, "%s %s", g_name, label);
    }
}

void th_note(const char *fmt, ...) {
    size_t len = strlen(g_line);
    if (len + 2 >= sizeof g_line) return;
    g_line[len] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_line + len + 1, sizeof g_line - len - 1, fmt, ap);
    va_end(ap);
}

int th_unit_failed(void) { return g_unit_failed; }

void th_end(void) {
    if (!g_open) return;
    if (g_unit_failed) g_failed++;
    else g_passed++;
    if (g_verbose || g_unit_failed) printf("%s %s%s\n", g_unit_failed ? "FAIL" : "ok  ", g_name, g_line);
    fflush(stdout);
    g_open = 0;
}

int th_finish(void) {
    if (g_open) th_end();
    for (int i = 0; i < TH_MAX_TOLS; i++) {
        if (!g_worst[i].used) continue;
        printf("worst normalised error (tolerance %.0e): %.3e at %s\n", g_worst[i].tol,
               g_worst[i].worst, g_worst[i].where);
    }
    printf("%d passed, %d failed\n", g_passed, g_failed);
    fflush(stdout);
    return g_failed ? 1 : 0;
}

/* ============================================================================= metrics === */

int th_all_finite(const double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

double th_nerr(const double *got, const double *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return NAN;
        double e = got[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num) / sqrt(den) : sqrt(num);
}

void *th_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

unsigned char *th_ws_alloc(size_t need) {
    unsigned char *ws = th_xmalloc(need + TH_GUARD);
    memset(ws, TH_PAT_GUARD, need + TH_GUARD);
    return ws;
}

int th_ws_tail_ok(const unsigned char *ws, size_t need, size_t *first) {
    for (size_t k = need; k < need + TH_GUARD; k++)
        if (ws[k] != TH_PAT_GUARD) {
            if (first) *first = k;
            return 0;
        }
    return 1;
}

int th_has_word(const char *msg, const char *word) {
    size_t wl = strlen(word);
    if (!msg || !wl) return 0;
    for (const char *p = msg; (p = strstr(p, word)) != NULL; p++) {
        int before = (p == msg) ||
                     !((p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                       (p[-1] >= '0' && p[-1] <= '9') || p[-1] == '_');
        char a = p[wl];
        int after = !((a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9') ||
                      a == '_');
        if (before && after) return 1;
    }
    return 0;
}

/* ================================================================== strided access === */

int64_t th_numel(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

int64_t th_tensor_span(const mamba2_tensor_t *t) {
    int64_t last = 0;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] == 0) return 0;
        last += (t->shape[i] - 1) * t->stride[i];
    }
    return last + 1;
}

void th_tensor_for_each(const mamba2_tensor_t *t, void (*fn)(void *, int64_t, int64_t), void *arg) {
    int64_t n = th_numel(t->rank, t->shape);
    int64_t idx[MAMBA2_MAX_RANK] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < t->rank; d++) off += idx[d] * t->stride[d];
        fn(arg, off, i);
        for (int d = t->rank - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

struct rw_arg {
    const mamba2_tensor_t *t;
    double *v;
    const double *cv;
};

static void gather_one(void *a_, int64_t off, int64_t i) {
    struct rw_arg *a = a_;
    switch (a->t->dtype) {
    case MAMBA2_DTYPE_F32: a->v[i] = ((const float *)a->t->data)[off]; break;
    case MAMBA2_DTYPE_F64: a->v[i] = ((const double *)a->t->data)[off]; break;
    case MAMBA2_DTYPE_I32: a->v[i] = ((const int32_t *)a->t->data)[off]; break;
    case MAMBA2_DTYPE_I64: a->v[i] = (double)((const int64_t *)a->t->data)[off]; break;
    default: a->v[i] = NAN; break;
    }
}

static void scatter_one(void *a_, int64_t off, int64_t i) {
    struct rw_arg *a = a_;
    switch (a->t->dtype) {
    case MAMBA2_DTYPE_F32: ((float *)a->t->data)[off] = (float)a->cv[i]; break;
    case MAMBA2_DTYPE_F64: ((double *)a->t->data)[off] = a->cv[i]; break;
    case MAMBA2_DTYPE_I32: ((int32_t *)a->t->data)[off] = (int32_t)a->cv[i]; break;
    case MAMBA2_DTYPE_I64: ((int64_t *)a->t->data)[off] = (int64_t)a->cv[i]; break;
    default: break;
    }
}

void th_tensor_gather(const mamba2_tensor_t *t, double *dst) {
    struct rw_arg a = {t, dst, NULL};
    th_tensor_for_each(t, gather_one, &a);
}

void th_tensor_scatter(const mamba2_tensor_t *t, const double *src) {
    struct rw_arg a = {t, NULL, src};
    th_tensor_for_each(t, scatter_one, &a);
}

/* ============================================================================ contexts === */

mamba2_context_t *th_ctx(mamba2_backend_t backend, int32_t threads, const char *isa) {
    mamba2_context_t *ctx = NULL;
    mamba2_status_t st = mamba2_context_create(&ctx, backend, threads);
    if (st != MAMBA2_STATUS_OK || !ctx) {
        printf("setup: mamba2_context_create(backend %d, %d threads) failed: %s: %s\n", (int)backend,
               (int)threads, mamba2_status_string(st), mamba2_last_error());
        printf("0 passed, 1 failed\n");
        exit(1);
    }
    if (isa) {
        st = mamba2_context_force_isa(ctx, isa);
        if (st != MAMBA2_STATUS_OK) {
            printf("setup: mamba2_context_force_isa(%s) failed: %s: %s\n", isa,
                   mamba2_status_string(st), mamba2_last_error());
            printf("0 passed, 1 failed\n");
            exit(1);
        }
    }
    return ctx;
}

int th_cpu_default_isa_is(const char *isa) {
    mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    const int same = strcmp(mamba2_context_get_isa(ctx), isa) == 0;
    mamba2_context_destroy(ctx);
    return same;
}
