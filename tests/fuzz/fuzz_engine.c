/*
 * fuzz_engine.c — decodes a fuzz input, places every tensor in a buffer of exactly its
 * extent, calls the op and checks the contract of include/mamba2c.h:
 *  - the status is a known one; on failure mamba2_last_error() is non-empty and no byte of
 *    any buffer changed (outputs included);
 *  - an accepted call wrote only the elements of its outputs (every other byte of every
 *    buffer, strided gaps included, is unchanged), and no output shares a byte with an
 *    input or another output (the harness aliases tensors on purpose);
 *  - with tame finite inputs every written output element is finite (outputs start as NaN,
 *    so an element the call forgot to write is caught too);
 *  - a workspace query that refuses means the call refuses with the same status; a call
 *    whose tensors are too big to back with memory gets faulting addresses for the query
 *    (which must not touch data) and NULL data for the call (which must refuse).
 * Any violation prints the case and aborts, which libFuzzer and the replay driver report.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define M2F_NUMEL_CAP ((int64_t)1 << 19)  /* elements per tensor backed by memory */
#define M2F_BYTES_CAP ((int64_t)2 << 20)  /* bytes per tensor backed by memory    */
#define M2F_WS_CAP ((size_t)64 << 20)     /* workspace the harness provides       */
#define M2F_REF_WORK_CAP 16777216.0       /* reference SSD: state elements x tokens run */
#ifdef MAMBA2C_ABI_VERSION
#define M2F_MAX_STATUS MAMBA2_STATUS_BUSY
#else
#define M2F_MAX_STATUS 6
#endif

const int64_t m2f_big_values[16] = {0, 1, 2, 3, 65537, (int64_t)1 << 31, ((int64_t)1 << 31) - 1,
                                    (int64_t)1 << 32, (int64_t)1 << 40, ((int64_t)1 << 40) + 1,
                                    (int64_t)1 << 46, (int64_t)1 << 62, INT64_MAX, -1, INT64_MIN,
                                    (int64_t)1 << 20};
const int64_t m2f_big_strides[16] = {0, 1, 2, -1, -2, (int64_t)1 << 31, (int64_t)1 << 40,
                                     ((int64_t)1 << 40) + 1, (int64_t)1 << 58, INT64_MAX,
                                     INT64_MIN, 3, 7, (int64_t)1 << 20, (int64_t)1 << 46,
                                     -((int64_t)1 << 40)};

uint64_t m2f_rand(m2f_case *c) {
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint8_t m2f_byte(m2f_case *c) { return c->pos < c->n ? c->in[c->pos++] : 0; }

int m2f_add(m2f_case *c, const char *name, int role, mamba2_dtype_t dt, int rank,
            const int64_t *shape) {
    int i = c->ns++;
    m2f_slot *s = &c->s[i];
    memset(s, 0, sizeof *s);
    s->name = name;
    s->role = role;
    s->present = 1;
    s->host = i;
    /* contiguous strides computed here, saturating: mamba2_tensor_make overflows on huge
     * shapes (a known defect, exercised by the context op) */
    s->t = mamba2_tensor_make_strided(NULL, dt, rank, shape, NULL);
    int64_t st = 1;
    for (int k = rank - 1; k >= 0; k--) {
        s->t.stride[k] = st;
        if (__builtin_mul_overflow(st, shape[k] > 0 ? shape[k] : 1, &st)) st = INT64_MAX;
    }
    return i;
}

const mamba2_tensor_t *m2f_t(m2f_case *c, int i) {
    return i >= 0 && i < c->ns && c->s[i].present ? &c->s[i].t : NULL;
}

static const double opt_doubles[16] = {NAN, -INFINITY, INFINITY, -1.0, 0.0, 1e-30, 1e300, -0.0,
                                       0.5, 2.0, 1e-5, 1e38, -1e-30, 100.0, 0.001, 5e-324};
double m2f_opt_d(m2f_case *c, int field, double dflt) {
    return c->oset[field] ? opt_doubles[c->oval[field] & 15] : dflt;
}
int64_t m2f_opt_i(m2f_case *c, int field, int64_t dflt) {
    return c->oset[field] ? m2f_big_values[c->oval[field] & 15] : dflt;
}

uint32_t m2f_struct_size(m2f_case *c, size_t real, size_t v1_end) {
    if (!c->oset[M2F_O_STRUCT_SIZE]) return (uint32_t)real;
    const uint32_t r = (uint32_t)real;
    static const int64_t delta[8] = {0, 0, -1, 1, 8, -8, -((int64_t)1 << 40), 4};
    const int k = c->oval[M2F_O_STRUCT_SIZE] & 7;
    uint32_t v = k == 0 ? 0 : k == 6 ? UINT32_MAX : (uint32_t)((int64_t)r + delta[k]);
    /* valid: 0, or from the end of the struct's last v1 field up to sizeof (a struct that
     * grew after v1, like conv1d_step's options, takes its v1 size: sizeof - 8 and less) */
    if (v != 0 && (v > r || v < v1_end)) c->struct_bad = 1;
    return v;
}

int64_t m2f_idx_value(m2f_case *c, int i, int64_t k) {
    return k < c->s[i].nidx ? c->s[i].idx[k] : (int64_t)(m2f_rand(c) % 64) - 8;
}

/* ---- geometry ------------------------------------------------------------------------ */

static int64_t esize(mamba2_dtype_t d) {
    size_t e = mamba2_dtype_size(d);
    return e ? (int64_t)e : 4; /* an unknown dtype is still backed by 4-byte elements */
}

/* numel, byte extent [lo, hi) relative to data; bad/big flags */
static void geometry(m2f_slot *s) {
    const mamba2_tensor_t *t = &s->t;
    s->bad = s->big = 0;
    s->numel = 0;
    s->lo = s->hi = 0;
    if (t->rank < 0 || t->rank > MAMBA2_MAX_RANK) {
        s->bad = 1;
        return;
    }
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] <= 0) return; /* empty (or negative: refused): no bytes */
        if (__builtin_mul_overflow(n, t->shape[i], &n)) n = INT64_MAX;
    }
    s->numel = n;
    const int64_t es = esize(t->dtype);
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < t->rank; i++) {
        int64_t e;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &e) ||
            __builtin_mul_overflow(e, es, &e)) {
            s->big = 1;
            return;
        }
        if (e < 0 ? __builtin_add_overflow(lo, e, &lo) : __builtin_add_overflow(hi, e, &hi)) {
            s->big = 1;
            return;
        }
    }
    if (__builtin_add_overflow(hi, es, &hi) || hi - lo > M2F_BYTES_CAP || n > M2F_NUMEL_CAP) {
        s->big = 1;
        return;
    }
    s->lo = lo;
    s->hi = hi;
}

int64_t m2f_elems(const mamba2_tensor_t *t, int64_t *out, int64_t cap) {
    int64_t idx[MAMBA2_MAX_RANK] = {0}, k = 0;
    const int64_t es = esize(t->dtype);
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] <= 0) return 0;
    for (;;) {
        int64_t off = 0;
        for (int i = 0; i < t->rank; i++) off += idx[i] * t->stride[i];
        if (k >= cap) return k;
        out[k++] = off * es;
        int d = t->rank - 1;
        while (d >= 0 && ++idx[d] == t->shape[d]) idx[d--] = 0;
        if (d < 0) return k;
    }
}

/* ---- records ---------------------------------------------------------------------------- */

static void apply_tensor_record(m2f_case *c, const uint8_t *r) {
    if (c->ns == 0) return;
    const int i = r[0] % c->ns;
    m2f_slot *s = &c->s[i];
    mamba2_tensor_t *t = &s->t;
    const int kind = r[1] % M2F_T_NKINDS, a = r[2], b = r[3];
    const int rk = t->rank > 0 && t->rank <= MAMBA2_MAX_RANK ? t->rank : 0;
    switch (kind) {
    case M2F_T_RANK: t->rank = (a & 7) == 7 ? (int32_t)(0x80000000u | (uint32_t)b) : a & 7; break;
    case M2F_T_SHAPE_BIG: if (rk) t->shape[a % rk] = m2f_big_values[b & 15]; break;
    case M2F_T_SHAPE_DELTA: if (rk) t->shape[a % rk] = m2f_sadd(t->shape[a % rk], (b % 5) - 2); break;
    case M2F_T_STRIDE_BIG: if (rk) t->stride[a % rk] = m2f_big_strides[b & 15]; break;
    case M2F_T_STRIDE_DELTA: if (rk) t->stride[a % rk] = m2f_sadd(t->stride[a % rk], (b % 8) - 3); break;
    case M2F_T_PAD: /* a wider row: dims before a%rk step over (b%4+1) extra elements */
        if (rk) {
            int d = a % rk;
            int64_t extra = (b % 4) + 1;
            int64_t s2 = 1;
            for (int k = rk - 1; k >= 0; k--) {
                t->stride[k] = s2;
                int64_t w = m2f_sadd(t->shape[k] > 0 ? t->shape[k] : 1, k == d ? extra : 0);
                if (__builtin_mul_overflow(s2, w, &s2)) s2 = INT64_MAX;
            }
        }
        break;
    case M2F_T_DTYPE: t->dtype = (b & 15) == 15 ? (mamba2_dtype_t)0x7fffffff : (mamba2_dtype_t)(b % 8); break;
    case M2F_T_NULL_DATA: s->null_data = 1; break;
    case M2F_T_ABSENT: s->present = 0; break;
    case M2F_T_PRESENT: if (!s->detached) s->present = 1; break;
    case M2F_T_ALIAS: {
        /* an index tensor with values the checks rely on (slots, ring positions) is never
         * laid over another tensor: the engine could not know which of the two value sets
         * the shared bytes hold */
        if (s->role == M2F_IDX && s->nidx > 0) break;
        int j = a % c->ns;
        while (c->s[j].host != j) j = c->s[j].host;
        if (j != i && c->s[i].host == i) {
            int used_as_host = 0;
            for (int k = 0; k < c->ns; k++) used_as_host |= k != i && c->s[k].host == i;
            if (!used_as_host) {
                s->host = j;
                s->alias_off = b % 48;
            }
        }
        break;
    }
    case M2F_T_BROADCAST: if (rk) t->stride[a % rk] = 0; break;
    case M2F_T_SWAP_STRIDES:
        if (rk) {
            int64_t x = t->stride[a % rk];
            t->stride[a % rk] = t->stride[b % rk];
            t->stride[b % rk] = x;
        }
        break;
    case M2F_T_MISALIGN: s->misalign = 1 + a % 3; break;
    case M2F_T_IDX_VALUE:
        if (s->role == M2F_IDX && s->nidx > 0) {
            int64_t k = a % s->nidx;
            s->idx[k] = (b & 16) ? m2f_big_values[b & 15] : m2f_sadd(s->idx[k], (b % 5) - 2);
        }
        break;
    }
}

/* ---- buffers ------------------------------------------------------------------------------ */

/* f16 bits of v, |v| <= 1 (round to nearest; subnormals below 2^-14) */
static uint16_t f16_bits(double v) {
    const uint16_t sign = (uint16_t)(v < 0) << 15;
    double a = fabs(v);
    if (a < ldexp(1.0, -14)) return (uint16_t)(sign | (uint16_t)nearbyint(ldexp(a, 24)));
    int e;
    const double fr = frexp(a, &e); /* a = fr 2^e, fr in [0.5, 1) */
    int E = e - 1 + 15, m = (int)nearbyint((2.0 * fr - 1.0) * 1024.0);
    if (m == 1024) m = 0, E++;
    return (uint16_t)(sign | E << 10 | m);
}

/* a SPEC §8 value (value mode 1) of class vclass >= M2F_V_SPEC_DT, from u in [0,1) */
static double spec_value(int vclass, double u, int sign) {
    switch (vclass) {
    case M2F_V_SPEC_DT: return 0.01 + 0.1 * u;
    case M2F_V_SPEC_A: return -(0.1 + 0.4 * u);
    case M2F_V_SPEC_SMALL: return (sign ? -u : u) * 0.2 * sqrt(3.0); /* sd 0.2 */
    default: return (sign ? -u : u) * 0.1 * sqrt(3.0);               /* sd 0.1 */
    }
}

static void fill_elem(m2f_case *c, uint8_t *p, mamba2_dtype_t dt, int vclass, int canary) {
    uint64_t r = m2f_rand(c);
    const int spec = vclass >= M2F_V_SPEC_DT && c->vmode == 1 && !canary;
    if (vclass >= M2F_V_SPEC_DT && !spec) vclass = vclass == M2F_V_SPEC_A ? M2F_V_NONPOS : M2F_V_ANY;
    int sign = vclass == M2F_V_NONPOS ? 1 : vclass == M2F_V_NONNEG ? 0 : (int)(r & 1);
    if (spec) {
        const double v = spec_value(vclass, (double)((r >> 11) & 0xFFFFF) / (double)0x100000, sign);
        const float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        const uint16_t h = dt == MAMBA2_DTYPE_BF16 ? (uint16_t)(u >> 16) : f16_bits(v);
        if (dt == MAMBA2_DTYPE_F64) memcpy(p, &v, 8);
        else if (dt == MAMBA2_DTYPE_F32) memcpy(p, &f, 4);
        else memcpy(p, &h, 2);
        return;
    }
    if (c->vmode == 2) { /* wild: any bit pattern */
        memcpy(p, &r, (size_t)esize(dt));
        return;
    }
    if (c->vmode == 3 && !canary && (r >> 8) % 13 == 0) { /* specials */
        static const double sp[8] = {NAN, INFINITY, -INFINITY, -1e36, 3e38, 2e19, 1e-40, -100.0};
        double v = sp[(r >> 16) & 7];
        if (dt == MAMBA2_DTYPE_F64) memcpy(p, &v, 8);
        else if (dt == MAMBA2_DTYPE_F32) { float f = (float)v; memcpy(p, &f, 4); }
        else { uint16_t h = (uint16_t)(0x7C00 | ((r >> 20) & 0x8000)); memcpy(p, &h, 2); }
        return;
    }
    double u = (double)((r >> 11) & 0xFFFFF) / (double)0x100000; /* [0,1) */
    double v = sign ? -u : u;
    switch (dt) {
    case MAMBA2_DTYPE_F32: {
        uint32_t nan = 0x7FC0DEAD;
        float f = (float)v;
        if (canary) memcpy(p, &nan, 4);
        else memcpy(p, &f, 4);
        break;
    }
    case MAMBA2_DTYPE_F64: {
        uint64_t nan = 0x7FF8DEADBEEF0000ull;
        if (canary) memcpy(p, &nan, 8);
        else memcpy(p, &v, 8);
        break;
    }
    case MAMBA2_DTYPE_BF16: { /* |v| in [2^-15, 1) */
        uint16_t h = canary ? 0x7FC1
                            : (uint16_t)(sign << 15 | (0x70 + (r >> 40) % 15) << 7 | ((r >> 50) & 0x7F));
        memcpy(p, &h, 2);
        break;
    }
    case MAMBA2_DTYPE_F16: {
        uint16_t h = canary ? 0x7E01
                            : (uint16_t)(sign << 15 | (1 + (r >> 40) % 14) << 10 | ((r >> 50) & 0x3FF));
        memcpy(p, &h, 2);
        break;
    }
    default: memcpy(p, &r, (size_t)esize(dt)); break;
    }
}

static int64_t g_offs[M2F_NUMEL_CAP];

static void place_and_fill(m2f_case *c) {
    c->any_big = 0;
    for (int i = 0; i < c->ns; i++) {
        m2f_slot *s = &c->s[i];
        geometry(s);
        if (!s->present) continue;
        if (s->big) c->any_big = 1;
    }
    /* an alias needs two small, enumerable tensors of a present host */
    for (int i = 0; i < c->ns; i++) {
        m2f_slot *s = &c->s[i], *h = &c->s[s->host];
        if (s->host != i && (!s->present || s->big || s->bad || !h->present || h->big || h->bad))
            s->host = i;
    }
    /* host buffers: the union of the members' extents, each member at its offset */
    for (int i = 0; i < c->ns; i++) {
        m2f_slot *h = &c->s[i];
        h->buf = NULL;
        h->bufsz = 0;
        if (h->host != i || !h->present || h->big) continue;
        if (h->bad) { /* an unenumerable descriptor: refusal expected; 64 dummy bytes */
            h->bufsz = 64;
            h->buf = malloc(64);
            memset(h->buf, 0x5A, 64);
            h->place = 0;
            h->t.data = h->buf;
            continue;
        }
        int64_t mn = 0, mx = 0;
        for (int k = 0; k < c->ns; k++) {
            m2f_slot *m = &c->s[k];
            if (m->host != i || !m->present) continue;
            int64_t rel = (k == i ? 0 : m->alias_off * esize(m->t.dtype)) + m->misalign;
            if (m->numel == 0) continue;
            if (rel + m->lo < mn) mn = rel + m->lo;
            if (rel + m->hi > mx) mx = rel + m->hi;
        }
        h->bufsz = (size_t)(mx - mn);
        h->buf = malloc(h->bufsz ? h->bufsz : 1);
        for (size_t b = 0; b < h->bufsz; b++) h->buf[b] = (uint8_t)(c->vmode == 2 ? m2f_rand(c) : 0xA5);
        for (int k = 0; k < c->ns; k++) {
            m2f_slot *m = &c->s[k];
            if (m->host != i || !m->present) continue;
            int64_t rel = (k == i ? 0 : m->alias_off * esize(m->t.dtype)) + m->misalign;
            m->place = rel - mn;
            m->t.data = h->buf + m->place;
        }
    }
    /* contents: outputs get the NaN canary, inputs tame values, index tensors their values */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->ns; i++) {
            m2f_slot *s = &c->s[i];
            if (!s->present || s->big || s->bad || s->numel == 0) continue;
            int is_out = s->role == M2F_OUT;
            if (is_out != (pass == 0)) continue;
            int64_t ne = m2f_elems(&s->t, g_offs, M2F_NUMEL_CAP);
            uint8_t *base = (uint8_t *)s->t.data;
            for (int64_t e = 0; e < ne; e++) {
                uint8_t *p = base + g_offs[e];
                if (s->role == M2F_IDX) {
                    int64_t v = m2f_idx_value(c, i, e);
                    if (s->t.dtype == MAMBA2_DTYPE_I32) {
                        int32_t w = (int32_t)v;
                        memcpy(p, &w, 4);
                    } else if (s->t.dtype == MAMBA2_DTYPE_I64) {
                        memcpy(p, &v, 8);
                    } else {
                        fill_elem(c, p, s->t.dtype, M2F_V_ANY, 0);
                    }
                } else {
                    fill_elem(c, p, s->t.dtype, s->vclass, is_out);
                }
            }
        }
    for (int i = 0; i < c->ns; i++) {
        m2f_slot *s = &c->s[i];
        s->snap = NULL;
        if (s->buf) {
            s->snap = malloc(s->bufsz ? s->bufsz : 1);
            memcpy(s->snap, s->buf, s->bufsz);
        }
    }
}

/* bytes a tensor spans, saturated at 2^61 */
static uint64_t span_bytes(const mamba2_tensor_t *t) {
    const uint64_t cap = (uint64_t)1 << 61;
    uint64_t sp = (uint64_t)esize(t->dtype);
    for (int i = 0; i < t->rank && i < MAMBA2_MAX_RANK; i++) {
        if (t->shape[i] <= 0) return 0;
        uint64_t st = t->stride[i] < 0 ? (t->stride[i] == INT64_MIN ? cap : (uint64_t)-t->stride[i])
                                       : (uint64_t)t->stride[i];
        uint64_t e;
        if (__builtin_mul_overflow((uint64_t)(t->shape[i] - 1), st, &e) ||
            __builtin_mul_overflow(e, (uint64_t)esize(t->dtype), &e) || e > cap)
            return cap;
        sp += e;
        if (sp > cap) return cap;
    }
    return sp;
}

/* data pointers of the over-cap tensors: poison 0 = NULL; 1 = distinct addresses above the
 * user address space (>= 2^48, non-canonical on x86-64: any access faults), spaced so that
 * their extents do not overlap, so validation and the planners see a realistic call (index
 * tensors, which validation reads, always get NULL); explicit NULL records win */
static void set_big_data(m2f_case *c, int poison) {
    uint64_t next = (uint64_t)1 << 48;
    for (int i = 0; i < c->ns; i++) {
        m2f_slot *s = &c->s[i];
        if (s->big) {
            s->t.data = NULL;
            if (poison && s->role != M2F_IDX) {
                uint64_t sp = (span_bytes(&s->t) + 8191) & ~(uint64_t)4095;
                if (next + sp > ((uint64_t)1 << 62)) next = (uint64_t)1 << 48;
                s->t.data = (void *)(uintptr_t)next;
                next += sp;
            }
        }
        if (s->null_data) s->t.data = NULL;
    }
}

static void free_buffers(m2f_case *c) {
    for (int i = 0; i < c->ns; i++) {
        free(c->s[i].buf);
        free(c->s[i].snap);
        c->s[i].buf = c->s[i].snap = NULL;
    }
}

/* ---- checks ------------------------------------------------------------------------------ */

static void check_status(m2f_case *c, mamba2_status_t st, const char *what) {
    if ((unsigned)st > M2F_MAX_STATUS) m2f_fail(c, "%s returned unknown status %d", what, (int)st);
    if (st != MAMBA2_STATUS_OK && mamba2_last_error()[0] == 0)
        m2f_fail(c, "%s failed with status %d (%s) but mamba2_last_error() is empty", what, (int)st,
                 mamba2_status_string(st));
}

static void check_unchanged(m2f_case *c, const char *what) {
    for (int i = 0; i < c->ns; i++) {
        m2f_slot *s = &c->s[i];
        if (s->buf && memcmp(s->buf, s->snap, s->bufsz) != 0) {
            size_t b = 0;
            while (s->buf[b] == s->snap[b]) b++;
            m2f_fail(c, "%s: the buffer of slot %d (%s) changed at byte %zu", what, i, s->name, b);
        }
    }
}

static int is_finite_at(const uint8_t *p, mamba2_dtype_t dt) {
    switch (dt) {
    case MAMBA2_DTYPE_F32: { float f; memcpy(&f, p, 4); return isfinite(f); }
    case MAMBA2_DTYPE_F64: { double d; memcpy(&d, p, 8); return isfinite(d); }
    case MAMBA2_DTYPE_BF16: { uint16_t h; memcpy(&h, p, 2); return ((h >> 7) & 0xFF) != 0xFF; }
    default: return 1; /* f16 overflows to inf by contract; index dtypes */
    }
}

static void check_success(m2f_case *c) {
    uint8_t *mask[M2F_MAX_SLOTS] = {0}, *inm[M2F_MAX_SLOTS] = {0};
    for (int i = 0; i < c->ns; i++)
        if (c->s[i].buf) {
            mask[i] = calloc(1, c->s[i].bufsz + 1);
            inm[i] = calloc(1, c->s[i].bufsz + 1);
        }
    /* ground truth of overlaps: inputs first, then outputs one by one */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < c->ns; i++) {
            m2f_slot *s = &c->s[i];
            if (!s->present || s->big || s->bad || s->numel == 0 || !s->t.data) continue;
            int is_out = s->role == M2F_OUT || s->role == M2F_INOUT;
            if (is_out != (pass == 1)) continue;
            const int h = s->host;
            const int64_t es = esize(s->t.dtype);
            int64_t ne = m2f_elems(&s->t, g_offs, M2F_NUMEL_CAP);
            for (int64_t e = 0; e < ne; e++)
                for (int64_t b = 0; b < es; b++) {
                    int64_t at = s->place + g_offs[e] + b;
                    if (!is_out) {
                        inm[h][at] = 1;
                        continue;
                    }
                    if (inm[h][at])
                        m2f_fail(c, "accepted a call whose output %s shares memory with an input", s->name);
                    if (mask[h][at])
                        m2f_fail(c, "accepted a call whose output %s shares memory with an output "
                                 "(or its own elements overlap)", s->name);
                    mask[h][at] = (uint8_t)(1 + i);
                }
        }
    if (m2f_ops[c->op]->untouched) m2f_ops[c->op]->untouched(c, mask);
    for (int h = 0; h < c->ns; h++) {
        m2f_slot *s = &c->s[h];
        if (!s->buf) continue;
        for (size_t b = 0; b < s->bufsz; b++)
            if (!mask[h][b] && s->buf[b] != s->snap[b])
                m2f_fail(c, "accepted call wrote byte %zu of the buffer of slot %d (%s), which "
                         "belongs to no output element it may write", b, h, s->name);
    }
    if (c->tame)
        for (int i = 0; i < c->ns; i++) {
            m2f_slot *s = &c->s[i];
            const int h = s->host;
            if (!s->present || s->numel == 0 || !c->s[h].buf || s->big || s->bad) continue;
            if (s->role != M2F_OUT && s->role != M2F_INOUT) continue;
            int64_t ne = m2f_elems(&s->t, g_offs, M2F_NUMEL_CAP);
            for (int64_t e = 0; e < ne; e++) {
                int64_t at = s->place + g_offs[e];
                if (mask[h][at] && mask[h][at] != M2F_EXEMPT && !is_finite_at(c->s[h].buf + at, s->t.dtype))
                    m2f_fail(c, "finite inputs, but output %s element %lld is not finite (or was "
                             "not written)", s->name, (long long)e);
            }
        }
    for (int i = 0; i < c->ns; i++) {
        free(mask[i]);
        free(inm[i]);
    }
}

void m2f_exempt(m2f_case *c, uint8_t **mask, int i) {
    m2f_slot *s = &c->s[i];
    if (!s->present || !c->s[s->host].buf || s->numel == 0 || s->big || s->bad) return;
    const int64_t es = esize(s->t.dtype);
    int64_t ne = m2f_elems(&s->t, g_offs, M2F_NUMEL_CAP);
    for (int64_t e = 0; e < ne; e++)
        for (int64_t b = 0; b < es; b++)
            if (mask[s->host][s->place + g_offs[e] + b]) mask[s->host][s->place + g_offs[e] + b] = M2F_EXEMPT;
}

void m2f_unmark_row(m2f_case *c, uint8_t **mask, int i, int64_t v) {
    m2f_slot *s = &c->s[i];
    if (!s->present || !s->buf || s->numel == 0 || s->t.rank < 1 || v < 0 || v >= s->t.shape[0]) return;
    mamba2_tensor_t row = s->t;
    row.shape[0] = 1;
    const int64_t es = esize(s->t.dtype), base = s->place + v * s->t.stride[0] * es;
    int64_t ne = m2f_elems(&row, g_offs, M2F_NUMEL_CAP);
    for (int64_t e = 0; e < ne; e++) memset(mask[s->host] + base + g_offs[e], 0, (size_t)es);
}

/* ---- the run ------------------------------------------------------------------------------- */

static mamba2_context_t *g_ctx[3][3]; /* [cpu, ref, gpu][threads - 1] */
static int g_gpu, g_gpu_all, g_diff; /* M2FUZZ_GPU=opencl|cuda, M2FUZZ_GPU_ALL=1, M2FUZZ_DIFF=1 */

static void print_counts(void) {
    fprintf(stderr,
            "m2fuzz: GPU calls %ld, accepted %ld, compared with the reference %ld; calls "
            "compared in all %ld\n",
            m2f_count.gpu_calls, m2f_count.gpu_accepted, m2f_count.gpu_compared, m2f_count.compared);
}

void m2f_init(void) {
    const char *gpu = getenv("M2FUZZ_GPU"), *diff = getenv("M2FUZZ_DIFF");
    const char *all = getenv("M2FUZZ_GPU_ALL");
    g_diff = diff && !strcmp(diff, "1");
    g_gpu_all = all && !strcmp(all, "1");
    /* one context per process: PoCL compiles once, the CUDA module loads once */
    const int cl = gpu && !strcmp(gpu, "opencl"), cu = gpu && !strcmp(gpu, "cuda");
    if (cl || cu) {
        g_gpu = mamba2_context_create(&g_ctx[2][0], cl ? MAMBA2_BACKEND_OPENCL : MAMBA2_BACKEND_CUDA,
                                      1) == MAMBA2_STATUS_OK;
        fprintf(stderr, "m2fuzz: %s mode %s%s%s\n", cl ? "OpenCL" : "CUDA", g_gpu ? "on" : "off: ",
                g_gpu ? "" : mamba2_last_error(), g_gpu && g_gpu_all ? " for every input" : "");
    }
    if (g_diff) fprintf(stderr, "m2fuzz: differential mode on (valid calls checked against the reference)\n");
    if (g_gpu || g_diff) atexit(print_counts); /* libFuzzer's runs end in exit() */
}

static mamba2_context_t *context_for(m2f_case *c) {
    if (c->backend == 2) return g_ctx[2][0];
    mamba2_context_t **slot = &g_ctx[c->backend][c->threads - 1];
    if (!*slot && mamba2_context_create(slot, c->backend ? MAMBA2_BACKEND_REF : MAMBA2_BACKEND_CPU,
                                        c->threads) != MAMBA2_STATUS_OK)
        m2f_fail(c, "mamba2_context_create failed");
    static const char *const isas[4] = {"auto", "scalar", "avx2", "avx512"};
    mamba2_status_t st = mamba2_context_force_isa(*slot, isas[c->isa]);
    check_status(c, st, "force_isa");
    if (st != MAMBA2_STATUS_OK) mamba2_context_force_isa(*slot, "auto");
    return *slot;
}

int m2f_last_accepted;
m2f_counts m2f_count;

/* Elements of one SSD state [H,P,N] as the call's x [B,L,H,P] and Bm [B,L,G,N] give it (0
 * for the other ops, or when either is absent); a double, as the product may overflow. */
static double ssd_state_numel(const m2f_case *c) {
    const m2f_slot *x = NULL, *bm = NULL;
    for (int i = 0; i < c->ns; i++) {
        if (!c->s[i].present || c->s[i].t.rank != 4) continue;
        if (!strcmp(c->s[i].name, "x")) x = &c->s[i];
        if (!strcmp(c->s[i].name, "Bm")) bm = &c->s[i];
    }
    if (!x || !bm) return 0.0;
    const double h = (double)x->t.shape[2], p = (double)x->t.shape[3], n = (double)bm->t.shape[3];
    return h > 0 && p > 0 && n > 0 ? h * p * n : 0.0;
}

/* Tokens B*L of the call's x [B,L,H,P] (0 without one). */
static double ssd_tokens(const m2f_case *c) {
    for (int i = 0; i < c->ns; i++)
        if (c->s[i].present && c->s[i].t.rank == 4 && !strcmp(c->s[i].name, "x"))
            return (double)c->s[i].t.shape[0] * (double)c->s[i].t.shape[1];
    return 0.0;
}

static void run_op(m2f_case *c) {
    const m2f_op *op = m2f_ops[c->op];
    mamba2_context_t *ctx = c->gflag[M2F_G_CTX_NULL] ? NULL : context_for(c);
    place_and_fill(c);
    mamba2_status_t st;
    if (op->has_query) {
        set_big_data(c, 1);
        size_t q = 12345;
        mamba2_status_t qs = op->call(c, ctx, &q, NULL, 0);
        check_status(c, qs, "workspace query");
        check_unchanged(c, "workspace query");
        if (c->any_big) {
            if (qs != MAMBA2_STATUS_OK) { /* refused: the call must refuse without touching data */
                st = op->call(c, ctx, NULL, NULL, 0);
                check_status(c, st, "call (poisoned data, query refused)");
                if (st != qs)
                    m2f_fail(c, "query refused with %d but the call returned %d", (int)qs, (int)st);
            }
            set_big_data(c, 0);
            st = op->call(c, ctx, NULL, NULL, 0);
            check_status(c, st, "call (NULL data of over-cap tensors)");
            if (st == MAMBA2_STATUS_OK) m2f_fail(c, "accepted a non-empty tensor with NULL data");
            check_unchanged(c, "refused call");
            return;
        }
        if (qs != MAMBA2_STATUS_OK) {
            st = op->call(c, ctx, NULL, NULL, 0);
            check_status(c, st, "call");
            if (st != qs) m2f_fail(c, "query refused with %d but the call returned %d", (int)qs, (int)st);
            check_unchanged(c, "refused call");
            return;
        }
        if (q > M2F_WS_CAP) {
            /* Small tensors can still make a large SSD state (H*P*N from x and Bm), which the
             * CPU backward snapshots: a workspace of a few states per thread is legitimate
             * but more than the harness provides, so such a call is checked only for its
             * refusal of a workspace that is too small. Beyond that allowance the query is
             * unbounded (a finding). */
            const double allow = (double)M2F_WS_CAP +
                                 4.0 * (c->threads > 0 ? c->threads : 1) * 8.0 * ssd_state_numel(c);
            if ((double)q > allow)
                m2f_fail(c, "workspace query asks %zu bytes for a small problem (state: %.0f "
                            "elements)", q, ssd_state_numel(c));
            uint8_t small[64];
            st = op->call(c, ctx, NULL, small, sizeof small);
            check_status(c, st, "call (64-byte workspace)");
            if (st != MAMBA2_STATUS_WORKSPACE_TOO_SMALL)
                m2f_fail(c, "a 64-byte workspace (query: %zu) gave status %d, not "
                            "WORKSPACE_TOO_SMALL", q, (int)st);
            check_unchanged(c, "refused call");
            return;
        }
        /* The float64 reference spends state-sized work on every token: a huge state (small
         * x and Bm can give H*P*N = 25M) over a few tokens is seconds under the sanitizers,
         * so such an accepted call is checked up to its query only. */
        if (c->backend && ssd_state_numel(c) * ssd_tokens(c) > M2F_REF_WORK_CAP) return;
        int mode = c->wsmode % 5;
        size_t wsz = q, alloc = q, off = 0;
        if (mode == 2 && q == 0) mode = 0;
        if (mode == 2) wsz = alloc = q - 1;
        if (mode == 3) { off = 3; wsz = q + 64; alloc = wsz + off; }
        uint8_t *wsb = NULL;
        if (mode != 1 && mode != 4) {
            wsb = malloc(alloc ? alloc : 1);
            for (size_t b = 0; b < alloc; b++) wsb[b] = (uint8_t)m2f_rand(c);
        }
        if (c->gflag[M2F_G_WS_NULL_SIZE] || mode == 1) {
            wsz = 0;
            if (wsb && q > 0) mode = 2; /* a buffer of size 0 is too small */
        }
        st = op->call(c, ctx, NULL, wsb ? wsb + off : NULL, wsz);
        free(wsb);
        check_status(c, st, "call");
        if (mode == 2 && st != MAMBA2_STATUS_WORKSPACE_TOO_SMALL &&
            !(op->has_query == 2 && st != MAMBA2_STATUS_OK))
            m2f_fail(c, "workspace of %zu bytes (query: %zu) gave status %d, not WORKSPACE_TOO_SMALL",
                     wsz, q, (int)st);
        /* has_query 2: the query does not see every tensor of the call (position_states) */
        if (mode != 2 && st != MAMBA2_STATUS_OK && op->has_query != 2)
            m2f_fail(c, "the query accepted the call, with enough workspace it returned %d", (int)st);
    } else {
        set_big_data(c, 0);
        st = op->call(c, ctx, NULL, NULL, 0);
        check_status(c, st, "call");
        if (c->any_big && st == MAMBA2_STATUS_OK) m2f_fail(c, "accepted a non-empty tensor with NULL data");
    }
    m2f_last_accepted = st == MAMBA2_STATUS_OK;
    m2f_count.gpu_calls += c->backend == 2;
    m2f_count.gpu_accepted += c->backend == 2 && st == MAMBA2_STATUS_OK;
    if (c->struct_bad && st == MAMBA2_STATUS_OK)
        m2f_fail(c, "accepted an options/grads struct with an invalid struct_size");
    if (st != MAMBA2_STATUS_OK) {
        check_unchanged(c, "refused call");
        return;
    }
    check_success(c);
    if (g_diff && ctx && m2f_diff_eligible(c) &&
        ssd_state_numel(c) * ssd_tokens(c) <= M2F_REF_WORK_CAP) {
        if (!g_ctx[1][0] && mamba2_context_create(&g_ctx[1][0], MAMBA2_BACKEND_REF, 1) != MAMBA2_STATUS_OK)
            m2f_fail(c, "mamba2_context_create (reference) failed");
        m2f_differential(c, g_ctx[1][0]);
        m2f_count.compared++;
        m2f_count.gpu_compared += c->backend == 2;
    }
}

int m2f_run(const uint8_t *data, size_t size) {
    static m2f_case cs;
    m2f_case *c = &cs;
    memset(c, 0, offsetof(m2f_case, s)); /* the slots are reset by m2f_add */
    c->ns = 0;
    c->any_big = 0;
    c->struct_bad = 0;
    c->in = data;
    c->n = size;
    c->op = m2f_byte(c) % M2F_NOPS;
    uint8_t b1 = m2f_byte(c), b2 = m2f_byte(c);
    c->backend = b1 & 1;
    if (((b1 & 0x20) || g_gpu_all) && g_gpu) c->backend = 2; /* the GPU mode: bit 5 picks the GPU */
    c->threads = 1 + ((b1 >> 1) & 3) % 3;
    c->isa = (b1 >> 3) & 3;
    c->wsmode = b2 & 7;
    c->vmode = (b2 >> 3) & 3;
    static const mamba2_dtype_t adts[4] = {MAMBA2_DTYPE_F32, MAMBA2_DTYPE_F64, MAMBA2_DTYPE_BF16,
                                           MAMBA2_DTYPE_F16};
    c->adt = adts[(b2 >> 5) & 3];
    c->pdt = c->adt == MAMBA2_DTYPE_F64 ? MAMBA2_DTYPE_F64 : MAMBA2_DTYPE_F32;
    c->rng = (uint64_t)m2f_byte(c) | (uint64_t)m2f_byte(c) << 8;
    for (int i = 0; i < 12; i++) c->d[i] = m2f_byte(c);
    for (int i = 0; i < 4; i++) c->f[i] = m2f_byte(c);
    c->idt = (c->f[3] & 0x80) ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32;
    c->tame = c->vmode < 2;
    while (c->pos + 4 <= c->n && c->nrec < M2F_MAX_RECS) {
        for (int k = 0; k < 4; k++) c->rec[c->nrec][k] = m2f_byte(c);
        c->nrec++;
    }
    m2f_last_accepted = 0;
    if (c->op == M2F_CONTEXT) {
        m2f_context_ops(c);
        m2f_last_accepted = 1;
        return 0;
    }
    const m2f_op *op = m2f_ops[c->op];
    op->dims(c);
    for (int r = 0; r < c->nrec; r++) {
        const uint8_t *rc = c->rec[r];
        if (rc[0] == M2F_REC_DIM) c->dim[rc[1] % 12] = m2f_big_values[rc[2] & 15];
        else if (rc[0] == M2F_REC_OPTION) {
            c->oset[rc[1] % M2F_O_NKINDS] = 1;
            c->oval[rc[1] % M2F_O_NKINDS] = rc[2];
            c->tame = 0;
        } else if (rc[0] == M2F_REC_GLOBAL) {
            c->gflag[rc[1] % M2F_G_NKINDS] = 1;
        }
    }
    op->build(c);
    for (int r = 0; r < c->nrec; r++)
        if (c->rec[r][0] < M2F_REC_GLOBAL) {
            apply_tensor_record(c, c->rec[r]);
            /* an alias can hand one tensor another's values (a positive A): no finiteness */
            if (c->rec[r][1] % M2F_T_NKINDS == M2F_T_ALIAS) c->tame = 0;
        }
    run_op(c);
    free_buffers(c);
    return 0;
}
