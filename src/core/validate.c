/*
 * validate.c — checks shared by every public entry point: one tensor against its expected
 * rank, shape, dtype and strides; whether two tensors may share memory; message helpers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"


const char *m2_dtype_name(mamba2_dtype_t d) {
    switch (d) {
    case MAMBA2_DTYPE_F32: return "f32";
    case MAMBA2_DTYPE_F64: return "f64";
    case MAMBA2_DTYPE_BF16: return "bf16";
    case MAMBA2_DTYPE_F16: return "f16";
    case MAMBA2_DTYPE_I32: return "i32";
    case MAMBA2_DTYPE_I64: return "i64";
    case MAMBA2_DTYPE_Q8_0: return "q8_0";
    }
    return "unknown";
}

void m2_fmt_dims(char *buf, size_t n, int rank, const int64_t *dims) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---- one tensor ------------------------------------------------------------------- */

/* Check rank, shape, strides, dtype and data of one tensor against what the problem
 * expects. `layout` names the dims ("[B,L,G,N]"); `want` holds their values. */
static mamba2_status_t check_tensor(const char *name, const mamba2_tensor_t *t, int rank,
                                    const int64_t *want, const char *layout, mamba2_dtype_t dtype,
                                    const char *dtype_why, int is_output, int last_free,
                                    int64_t *numel) {
    char got[128], exp[128];
    if (t->rank != rank) {
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has rank %d; expected rank %d %s", name,
                        (int)t->rank, rank, layout);
    }
    int shape_ok = 1;
    for (int i = 0; i < rank; i++)
        if (t->shape[i] != want[i]) shape_ok = 0;
    if (!shape_ok) {
        m2_fmt_dims(got, sizeof got, rank, t->shape);
        m2_fmt_dims(exp, sizeof exp, rank, want);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has shape %s; expected %s = %s", name,
                        got, layout, exp);
    }
    if ((unsigned)t->dtype > (unsigned)MAMBA2_DTYPE_Q8_0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has an unknown dtype (%d)", name,
                        (int)t->dtype);
    if (t->dtype != dtype) {
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has dtype %s; expected %s (%s)", name,
                        m2_dtype_name(t->dtype), m2_dtype_name(dtype), dtype_why);
    }
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (t->stride[i] < 0) {
            m2_fmt_dims(got, sizeof got, rank, t->stride);
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s has strides %s; negative strides are not supported", name, got);
        }
        if (t->stride[i] > MAX_DIM)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has stride %lld in dim %d; too large",
                            name, (long long)t->stride[i], i);
        if (__builtin_mul_overflow(n, t->shape[i], &n) || n > MAX_DIM * 64)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has too many elements", name);
    }
    /* the farthest element must be addressable: (shape-1)*stride summed, in bytes < 2^62 */
    int64_t ext = 0;
    for (int i = 0; i < rank && n > 0; i++) {
        int64_t e;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->stride[i], &e) ||
            __builtin_add_overflow(ext, e, &ext) || ext > ((int64_t)1 << 58))
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "%s spans more memory than can be addressed (strides too large)", name);
    }
    if (!last_free && rank > 0 && t->shape[rank - 1] > 1 && t->stride[rank - 1] != 1) {
        m2_fmt_dims(got, sizeof got, rank, t->stride);
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s has strides %s; its last dimension must be contiguous (stride 1)", name,
                        got);
    }
    if (n > 0 && !t->data)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "%s has %lld elements but a NULL data pointer",
                        name, (long long)n);
    if (n > 0 && mamba2_dtype_size(t->dtype) > 1 &&
        (uintptr_t)t->data % mamba2_dtype_size(t->dtype) != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s has a data pointer not aligned to its %zu-byte elements", name,
                        mamba2_dtype_size(t->dtype));
    if (is_output && n > 1) {
        /* Distinct indices must map to distinct elements: sorted by stride, each stride
         * must step over everything the faster dims cover. */
        int idx[MAMBA2_MAX_RANK], m = 0;
        for (int i = 0; i < rank; i++)
            if (t->shape[i] > 1) idx[m++] = i;
        for (int a = 1; a < m; a++)
            for (int b = a; b > 0 && t->stride[idx[b]] < t->stride[idx[b - 1]]; b--) {
                int tmp = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = tmp;
            }
        int64_t covered = 1;
        for (int a = 0; a < m; a++) {
            int d = idx[a];
            if (t->stride[d] < covered) {
                m2_fmt_dims(got, sizeof got, rank, t->stride);
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                                "%s has strides %s: its elements overlap each other, which an "
                                "output may not",
                                name, got);
            }
            covered = t->stride[d] * (t->shape[d] - 1) + covered;
        }
    }
    *numel = n;
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_check_tensor(const char *name, const mamba2_tensor_t *t, int rank,
                                const int64_t *want, const char *layout, mamba2_dtype_t dtype,
                                const char *dtype_why, int is_output, int64_t *numel) {
    return check_tensor(name, t, rank, want, layout, dtype, dtype_why, is_output, 0, numel);
}

mamba2_status_t m2_check_tensor_strided(const char *name, const mamba2_tensor_t *t, int rank,
                                        const int64_t *want, const char *layout,
                                        mamba2_dtype_t dtype, const char *dtype_why,
                                        int is_output, int64_t *numel) {
    return check_tensor(name, t, rank, want, layout, dtype, dtype_why, is_output, 1, numel);
}

/* Byte range [lo, hi) a tensor touches. */
static void byte_range(const mamba2_tensor_t *t, int64_t *lo, int64_t *hi) {
    int64_t es = (int64_t)mamba2_dtype_size(t->dtype);
    int64_t ext = 0;
    for (int i = 0; i < t->rank; i++) ext += (t->shape[i] - 1) * t->stride[i];
    *lo = (int64_t)(intptr_t)t->data;
    *hi = *lo + (ext + 1) * es;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Could two tensors share a byte? Conservative: returns 1 unless disjointness is proven.
 * Proofs: disjoint byte ranges; or, splitting each tensor into outer dims (whose byte
 * strides are all multiples of m) and an inner block narrower than m, inner blocks that
 * never meet modulo m — the case of views into one row-interleaved buffer, such as the
 * x | B | C split of Mamba-2's in_proj output (or dx | dB | dC gradients written into one). */
int m2_may_overlap(const mamba2_tensor_t *a, const mamba2_tensor_t *b) {
    int64_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    if (ahi <= blo || bhi <= alo) return 0;
    int64_t ea = (int64_t)mamba2_dtype_size(a->dtype), eb = (int64_t)mamba2_dtype_size(b->dtype);
    for (int ka = 1; ka < a->rank; ka++) {
        for (int kb = 1; kb < b->rank; kb++) {
            int64_t m = 0, spa = 0, spb = 0;
            for (int i = 0; i < ka; i++)
                if (a->shape[i] > 1) m = gcd64(m, a->stride[i] * ea);
            for (int i = 0; i < kb; i++)
                if (b->shape[i] > 1) m = gcd64(m, b->stride[i] * eb);
            if (m == 0) continue;
            for (int i = ka; i < a->rank; i++) spa += (a->shape[i] - 1) * a->stride[i];
            for (int i = kb; i < b->rank; i++) spb += (b->shape[i] - 1) * b->stride[i];
            spa = (spa + 1) * ea;
            spb = (spb + 1) * eb;
            if (spa > m || spb > m) continue;
            /* a's inner block is [0, spa) mod m, b's is [d, d + spb) mod m */
            int64_t d = ((blo - alo) % m + m) % m;
            if (d >= spa && d + spb <= m) return 0;
        }
    }
    return 1;
}

/* ---- helpers shared by the entry points ----------------------------------------------- */

m2_view m2_view_of(const mamba2_tensor_t *t) {
    m2_view v;
    memset(&v, 0, sizeof v);
    if (!t) return v;
    v.p = t->data;
    for (int i = 0; i < t->rank && i < 4; i++) v.s[i] = t->stride[i];
    return v;
}

int64_t m2_index_at(const mamba2_tensor_t *t, int64_t i) {
    return t->dtype == MAMBA2_DTYPE_I32 ? ((const int32_t *)t->data)[i * t->stride[0]]
                                        : ((const int64_t *)t->data)[i * t->stride[0]];
}

/* cu_seqlens[nseq+1]: rank 1, i32/i64, contiguous, 0 = c[0] <= c[1] <= ... <= c[nseq] = L. */
mamba2_status_t m2_check_cu_seqlens(const mamba2_tensor_t *cu, int64_t B, int64_t L, int values,
                                    int64_t *nseq) {
    if (cu->rank != 1)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cu_seqlens has rank %d; expected rank 1 [nseq+1]", (int)cu->rank);
    if (cu->dtype != MAMBA2_DTYPE_I32 && cu->dtype != MAMBA2_DTYPE_I64)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "cu_seqlens has dtype %s; expected i32 or i64",
                        m2_dtype_name(cu->dtype));
    if (cu->shape[0] < 2 || cu->shape[0] > MAX_DIM)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cu_seqlens has %lld entries; expected nseq+1 >= 2", (long long)cu->shape[0]);
    if (cu->stride[0] != 1)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cu_seqlens has stride %lld; it must be contiguous", (long long)cu->stride[0]);
    if (!cu->data) return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "cu_seqlens has a NULL data pointer");
    if ((uintptr_t)cu->data % mamba2_dtype_size(cu->dtype) != 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cu_seqlens has a data pointer not aligned to its elements");
    if (B != 1)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cu_seqlens is given but x has batch B=%lld; packed sequences need B == 1",
                        (long long)B);
    *nseq = cu->shape[0] - 1;
    if (!values) return MAMBA2_STATUS_OK;
    int64_t prev = 0;
    for (int64_t i = 0; i < cu->shape[0]; i++) {
        int64_t v = m2_index_at(cu, i);
        if (i == 0 && v != 0)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "cu_seqlens[0] is %lld; expected 0",
                            (long long)v);
        if (v < prev)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "cu_seqlens is not non-decreasing: cu_seqlens[%lld]=%lld < "
                            "cu_seqlens[%lld]=%lld",
                            (long long)i, (long long)v, (long long)(i - 1), (long long)prev);
        prev = v;
    }
    if (prev != L)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "cu_seqlens ends at %lld; expected the token count L=%lld", (long long)prev,
                        (long long)L);
    *nseq = cu->shape[0] - 1;
    return MAMBA2_STATUS_OK;
}

/* An index value and the row holding it, ordered by value, then row. */
typedef struct slot_row {
    int64_t v, row;
} slot_row;
static int slot_row_less(slot_row a, slot_row b) { return a.v < b.v || (a.v == b.v && a.row < b.row); }

/* Heapsort (no recursion, no allocation): O(n log n). */
static void sort_slot_rows(slot_row *a, int64_t n) {
    for (int64_t start = n / 2 - 1, end = n; end > 1;) {
        int64_t root;
        if (start >= 0) {
            root = start--;
        } else {
            end--;
            slot_row t = a[0];
            a[0] = a[end];
            a[end] = t;
            root = 0;
        }
        for (int64_t child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && slot_row_less(a[child], a[child + 1])) child++;
            if (!slot_row_less(a[root], a[child])) break;
            slot_row t = a[root];
            a[root] = a[child];
            a[child] = t;
        }
    }
}

/* Rows whose slots a stack bitmap or a stack sort covers; beyond both (more than
 * STACK_SORT_ROWS rows into more than STACK_BITMAP_SLOTS slots) the sort runs on a heap
 * copy of the B indices: memory in proportion to the batch, never to the cache's S slots. */
#define STACK_BITMAP_SLOTS 32768
#define STACK_SORT_ROWS 1024

/* state_indices[B]: i32/i64, every value < S, the non-negative ones distinct. */
mamba2_status_t m2_check_state_indices(const mamba2_tensor_t *ix, int64_t B, int64_t S,
                                       int values, const char *cache_name) {
    int64_t n;
    const int64_t want[1] = {B};
    if (ix->dtype != MAMBA2_DTYPE_I32 && ix->dtype != MAMBA2_DTYPE_I64)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_indices has dtype %s; expected i32 or i64", m2_dtype_name(ix->dtype));
    M2_TRY(m2_check_tensor("state_indices", ix, 1, want, "[B]", ix->dtype, "an index dtype", 0, &n));
    if (!values) return MAMBA2_STATUS_OK;
    /* the first row out of range */
    int64_t used = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t v = m2_index_at(ix, b);
        if (v < 0) continue; /* padding row */
        if (v >= S)
            return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                            "state_indices[%lld] is %lld; expected < S=%lld (%s slots) or "
                            "negative (padding)",
                            (long long)b, (long long)v, (long long)S, cache_name);
        used++;
    }
    if (used < 2) return MAMBA2_STATUS_OK;
    /* duplicates: the first row whose slot an earlier row already uses */
    int64_t dup = -1, dupv = 0;
    if (S <= STACK_BITMAP_SLOTS) {
        unsigned char bits[STACK_BITMAP_SLOTS / 8];
        memset(bits, 0, (size_t)((S + 7) / 8));
        for (int64_t b = 0; b < B && dup < 0; b++) {
            const int64_t v = m2_index_at(ix, b);
            if (v < 0) continue;
            if (bits[v >> 3] & (1u << (v & 7))) dup = b, dupv = v;
            bits[v >> 3] |= (unsigned char)(1u << (v & 7));
        }
    } else {
        slot_row stack_rows[STACK_SORT_ROWS], *rows = stack_rows;
        if (used > STACK_SORT_ROWS) {
            size_t bytes;
            if (!m2_size_mul((size_t)used, sizeof *rows, &bytes) || !(rows = malloc(bytes)))
                return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY,
                                "cannot allocate %lld index pairs to check state_indices for "
                                "duplicates",
                                (long long)used);
        }
        int64_t k = 0;
        for (int64_t b = 0; b < B; b++) {
            const int64_t v = m2_index_at(ix, b);
            if (v >= 0) rows[k++] = (slot_row){v, b};
        }
        sort_slot_rows(rows, k);
        /* in a run of equal values the second entry is the value's first repeat */
        for (int64_t i = 1; i < k; i++)
            if (rows[i].v == rows[i - 1].v && (dup < 0 || rows[i].row < dup) &&
                (i < 2 || rows[i - 2].v != rows[i].v))
                dup = rows[i].row, dupv = rows[i].v;
        if (rows != stack_rows) free(rows);
    }
    if (dup >= 0)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "state_indices[%lld] is %lld, a slot an earlier row already uses; "
                        "slots must be distinct",
                        (long long)dup, (long long)dupv);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_check_ssd_sizes(const char *who, int64_t H, int64_t P, int64_t N) {
    if (H > M2_MAX_HEADS)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s has H=%lld heads; at most 2^20 are supported", who, (long long)H);
    size_t e;
    const int64_t f[3] = {H, P, N};
    if (!m2_size_prod(&e, 3, f) || e > (size_t)M2_MAX_STATE)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "the state [H,P,N] = [%lld,%lld,%lld] (from %s) has more than 2^36 "
                        "elements per sequence; that is not supported",
                        (long long)H, (long long)P, (long long)N, who);
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_workspace_acquire(size_t need, void *workspace, size_t workspace_size,
                                     void **aligned, void **owned) {
    *aligned = NULL;
    *owned = NULL;
    if (need > 0 && !workspace) {
        *owned = malloc(need);
        if (!*owned)
            return m2_error(MAMBA2_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes of workspace", need);
        workspace = *owned;
        workspace_size = need;
    }
    if (workspace_size < need) {
        return m2_error(MAMBA2_STATUS_WORKSPACE_TOO_SMALL,
                        "workspace is %zu bytes; this call needs %zu (see the *_workspace_size query)",
                        workspace_size, need);
    }
    if (workspace)
        *aligned = (void *)(((uintptr_t)workspace + M2_WS_ALIGN - 1) & ~(uintptr_t)(M2_WS_ALIGN - 1));
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_check_no_overlap(const span *ins, int nin, const span *outs, int nout,
                                    const char *inplace_name) {
    for (int i = 0; i < nout; i++) {
        if (outs[i].numel == 0) continue;
        for (int j = 0; j < nin; j++)
            if (ins[j].numel > 0 && m2_may_overlap(outs[i].t, ins[j].t))
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "output %s overlaps %s %s in memory",
                                outs[i].name,
                                inplace_name && strcmp(ins[j].name, inplace_name) == 0 ? "the in-place"
                                                                                       : "input",
                                ins[j].name);
        for (int j = 0; j < i; j++)
            if (outs[j].numel > 0 && m2_may_overlap(outs[i].t, outs[j].t))
                return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT, "output %s overlaps output %s in memory",
                                outs[i].name, outs[j].name);
    }
    return MAMBA2_STATUS_OK;
}

mamba2_status_t m2_check_act_dtype(const char *name, mamba2_dtype_t dt, uint32_t accepted,
                                   const char *backend, const char *op) {
    static const mamba2_dtype_t floats[4] = {MAMBA2_DTYPE_F32, MAMBA2_DTYPE_F64,
                                             MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F16};
    int is_float = 0;
    for (int i = 0; i < 4; i++) is_float |= dt == floats[i];
    if (!is_float)
        return m2_error(MAMBA2_STATUS_INVALID_ARGUMENT,
                        "%s has dtype %s; expected a floating-point dtype", name, m2_dtype_name(dt));
    if (accepted & (1u << dt)) return MAMBA2_STATUS_OK;
    char list[64] = "";
    for (int i = 0; i < 4; i++)
        if (accepted & (1u << floats[i])) {
            if (list[0]) strcat(list, ", ");
            strcat(list, m2_dtype_name(floats[i]));
        }
    return m2_error(MAMBA2_STATUS_UNSUPPORTED,
                    "%s has dtype %s, which the %s backend does not support for %s "
                    "(supported: %s)",
                    name, m2_dtype_name(dt), backend, op, list[0] ? list : "none");
}
