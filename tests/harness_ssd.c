/*
 * harness_ssd.c — the SSD part of the shared test harness (see harness.h): the case data
 * (th_ssd_data: shapes, draws, processed dt) and its library tensors (th_ssd_io: guarded
 * buffers in every layout, the calls with an exact workspace, memory checks, read/poke/compare).
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* =========================================================================== SSD data === */

const char *const th_tname[TH_NT] = {
    "x", "dt", "A", "Bm", "Cm", "D", "z", "dt_bias", "initial_state", "cu_seqlens", "dout",
    "dfinal_state", "out", "final_state", "dx", "ddt", "dA", "dBm", "dCm", "dD", "dz", "ddt_bias",
    "dinitial_state"};

int th_grad_of(int g) {
    static const int map[] = {TH_X, TH_DT, TH_A, TH_BM, TH_CM, TH_D, TH_Z, TH_DTB, TH_INIT};
    return (g >= TH_DX && g <= TH_DINIT) ? map[g - TH_DX] : -1;
}

static int present(const th_ssd_case *c, int id) {
    switch (id) {
    case TH_D: case TH_DD: return c->D_mode != 0;
    case TH_Z: case TH_DZ: return c->z;
    case TH_DTB: case TH_DDTB: return c->dt_bias;
    case TH_INIT: case TH_DINIT: return c->init;
    case TH_CU: return c->nseq > 0;
    case TH_FINAL: return c->final;
    case TH_DFINAL: return c->dfinal;
    default: return 1;
    }
}

static int requested(const th_ssd_case *c, int id) {
    if (!present(c, id)) return 0;
    if (id >= TH_DX && c->grad_mask) return (c->grad_mask >> (id - TH_DX)) & 1u;
    return 1;
}

int th_ssd_shape(const th_ssd_case *c, const th_ssd_data *d, int id, int64_t *s) {
    if (!present(c, id)) return 0;
    int64_t B = d->B, L = d->L, H = d->H, P = d->P, N = d->N, G = d->G, S = d->S;
    switch (id) {
    case TH_X: case TH_Z: case TH_DOUT: case TH_OUT: case TH_DX: case TH_DZ:
        s[0] = B; s[1] = L; s[2] = H; s[3] = P; return 4;
    case TH_DT: case TH_DDT:
        s[0] = B; s[1] = L; s[2] = H; return 3;
    case TH_A: case TH_DA: case TH_DTB: case TH_DDTB:
        s[0] = H; return 1;
    case TH_BM: case TH_CM: case TH_DBM: case TH_DCM:
        s[0] = B; s[1] = L; s[2] = G; s[3] = N; return 4;
    case TH_D: case TH_DD:
        s[0] = H; s[1] = P; return c->D_mode == 2 ? 2 : 1;
    case TH_INIT: case TH_DFINAL: case TH_FINAL: case TH_DINIT:
        s[0] = S; s[1] = H; s[2] = P; s[3] = N; return 4;
    case TH_CU:
        s[0] = c->nseq + 1; return 1;
    }
    return 0;
}

static double softplus(double v) { return v > 20.0 ? v : log1p(exp(v)); }

double th_ssd_dt_processed(const th_ssd_case *c, const th_ssd_data *d, int64_t i, double *pre) {
    int64_t h = i % d->H;
    double v = d->v[TH_DT][i];
    if (c->dt_bias) v += d->v[TH_DTB][h];
    if (c->softplus) v = softplus(v);
    if (pre) *pre = v;
    double lo = c->limit ? c->lo : 0.0, hi = c->limit ? c->hi : INFINITY;
    return v < lo ? lo : (v > hi ? hi : v);
}

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void th_ssd_data_make(th_ssd_data *d, th_ssd_case *c) {
    memset(d, 0, sizeof *d);
    if (c->nseq > 0) {
        if (c->nseq > TH_MAX_SEQ || c->B != 1) {
            printf("bad case %s: varlen needs B == 1 and nseq <= %d\n", c->name, TH_MAX_SEQ);
            exit(2);
        }
        d->cu[0] = 0;
        for (int s = 0; s < c->nseq; s++) d->cu[s + 1] = d->cu[s] + c->seqlen[s];
        c->L = d->cu[c->nseq];
    }
    d->B = c->B; d->L = c->L; d->H = c->H; d->P = c->P; d->N = c->N; d->G = c->G;
    d->S = c->nseq > 0 ? c->nseq : c->B;
    int dt_mode = c->dt_mode;
    if (dt_mode == TH_DT_AUTO) dt_mode = c->softplus ? TH_DT_SOFTPLUS : TH_DT_PLAIN;

    th_rng r;
    th_rng_seed(&r, c->seed ? c->seed : hash_name(c->name));
    static const int order[] = {TH_X, TH_DT, TH_A, TH_BM, TH_CM, TH_D, TH_Z, TH_DTB, TH_INIT,
                                TH_DOUT, TH_DFINAL};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        int id = order[k];
        int64_t shape[MAMBA2_MAX_RANK] = {0};
        int rank = th_ssd_shape(c, d, id, shape);
        if (!rank) continue;
        int64_t n = th_numel(rank, shape);
        double *v = th_xmalloc((size_t)(n ? n : 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            double x;
            switch (id) {
            case TH_DT:
                switch (dt_mode) {
                case TH_DT_SOFTPLUS: x = th_rng_uniform(&r, -4.6, -2.2); break; /* sp -> .01...105 */
                case TH_DT_NEG: x = th_rng_uniform(&r, -0.11, -0.01); break;
                case TH_DT_LARGE: x = th_rng_uniform(&r, 15.0, 25.0); break;
                case TH_DT_INVSP: x = 0.5 * th_rng_normal(&r); break;
                default: x = th_rng_uniform(&r, 0.01, 0.11); break;
                }
                break;
            case TH_A: x = -th_rng_uniform(&r, 0.1, 0.5); break;
            case TH_BM: case TH_CM: case TH_INIT: case TH_DFINAL: x = th_rng_normal(&r) / 5.0; break;
            case TH_DTB:
                if (dt_mode == TH_DT_INVSP) { /* mamba_ssm: dt_bias = softplus^-1(U(1e-3, 0.1)) */
                    double t = th_rng_uniform(&r, 0.001, 0.1);
                    x = log(expm1(t));
                } else {
                    x = 0.1 * th_rng_normal(&r);
                }
                break;
            default: x = th_rng_normal(&r); break; /* x, D, z, dout */
            }
            v[i] = (double)(float)x;
        }
        d->v[id] = v;
    }
}

void th_ssd_data_free(th_ssd_data *d) {
    for (int i = 0; i < TH_NT; i++) free(d->v[i]);
    memset(d, 0, sizeof *d);
}

/* ============================================================================ SSD io === */

static int new_buf(th_ssd_io *io, const char *name, size_t bytes, int is_output) {
    if (io->nbuf >= TH_MAX_BUF) {
        printf("harness: too many buffers\n");
        exit(2);
    }
    th_buf *b = &io->buf[io->nbuf];
    memset(b, 0, sizeof *b);
    b->name = name;
    size_t total = bytes + 2 * TH_GUARD;
    b->alloc = th_xmalloc(total);
    b->data = b->alloc + TH_GUARD;
    b->bytes = bytes;
    b->is_output = is_output;
    memset(b->alloc, TH_PAT_GUARD, total);
    if (!is_output) memset(b->data, TH_PAT_UNSET, bytes);
    b->mask = is_output ? calloc(total, 1) : NULL;
    b->snap = th_xmalloc(total);
    return io->nbuf++;
}

static size_t esize_of(const th_ssd_io *io, int id) {
    if (id == TH_CU) return io->c.cu64 ? 8 : 4;
    return mamba2_dtype_size(io->dtype);
}

struct mask_arg {
    unsigned char *mask;
    size_t esize;
};
static void mask_one(void *a_, int64_t off, int64_t i) {
    (void)i;
    struct mask_arg *a = a_;
    memset(a->mask + (size_t)off * a->esize, 1, a->esize);
}

static void set_view(th_ssd_io *io, int id, int buf, int64_t elem_off, int rank,
                     const int64_t *shape, const int64_t *stride) {
    th_view *v = &io->v[id];
    th_buf *b = &io->buf[buf];
    size_t es = esize_of(io, id);
    mamba2_dtype_t dt = id == TH_CU ? (io->c.cu64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32) : io->dtype;
    v->present = 1;
    v->buf = buf;
    v->t = mamba2_tensor_make_strided(b->data + (size_t)elem_off * es, dt, rank, shape, stride);
    int64_t span = th_tensor_span(&v->t);
    if ((size_t)(elem_off + span) * es > b->bytes) {
        printf("harness: view %s exceeds its buffer %s\n", th_tname[id], b->name);
        exit(2);
    }
    if (b->is_output) {
        struct mask_arg a = {b->mask + TH_GUARD + (size_t)elem_off * es, es};
        th_tensor_for_each(&v->t, mask_one, &a);
    }
}

static void contig_strides(int rank, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

/* Contiguous tensor in its own buffer. */
static void own_buf(th_ssd_io *io, const th_ssd_data *d, int id, int is_output) {
    int64_t shape[MAMBA2_MAX_RANK] = {0}, stride[MAMBA2_MAX_RANK];
    int rank = th_ssd_shape(&io->c, d, id, shape);
    contig_strides(rank, shape, stride);
    int b = new_buf(io, th_tname[id], (size_t)th_numel(rank, shape) * esize_of(io, id), is_output);
    set_view(io, id, b, 0, rank, shape, stride);
}

static void arm_outputs(th_ssd_io *io) {
    for (int i = 0; i < io->nbuf; i++) {
        th_buf *b = &io->buf[i];
        size_t total = b->bytes + 2 * TH_GUARD;
        if (b->is_output) {
            for (size_t k = 0; k < total; k++) b->alloc[k] = b->mask[k] ? TH_PAT_UNSET : TH_PAT_GUARD;
        }
        memcpy(b->snap, b->alloc, total);
    }
}

void th_ssd_io_reset_outputs(th_ssd_io *io) { arm_outputs(io); }

#define TV(io, id) ((io)->v[id].present ? &(io)->v[id].t : NULL)

static int is_output_id(int id) { return id >= TH_OUT; }

void th_ssd_io_make(th_ssd_io *io, const th_ssd_case *c, const th_ssd_data *d,
                    mamba2_dtype_t dtype, int layout) {
    memset(io, 0, sizeof *io);
    io->c = *c;
    io->dtype = dtype;
    io->layout = layout;
    const th_ssd_case *cc = &io->c;
    int64_t B = d->B, L = d->L, H = d->H, P = d->P, N = d->N, G = d->G, S = d->S;
    int64_t HP = H * P, GN = G * N;
    size_t es = mamba2_dtype_size(dtype);
    int want[TH_NT];
    for (int id = 0; id < TH_NT; id++) want[id] = requested(cc, id);

    if (layout == TH_LAYOUT_CONTIG) {
        for (int id = 0; id < TH_NT; id++)
            if (want[id]) own_buf(io, d, id, is_output_id(id));
    } else {
        /* Views laid out like Mamba-2: parameters packed at odd offsets in one buffer. */
        for (int pass = 0; pass < 2; pass++) {
            int o = pass; /* 0: inputs, 1: gradients */
            int idA = o ? TH_DA : TH_A, idB = o ? TH_DDTB : TH_DTB, idD = o ? TH_DD : TH_D;
            int pb = new_buf(io, o ? "dA|ddt_bias|dD" : "A|dt_bias|D",
                             (size_t)(2 * H + 4 + H * (P + 1)) * es, o);
            int64_t sh[2] = {H, P}, st[2] = {P + 1, 1};
            if (want[idA]) set_view(io, idA, pb, 1, 1, sh, st + 1);
            if (want[idB]) set_view(io, idB, pb, H + 2, 1, sh, st + 1);
            if (want[idD]) set_view(io, idD, pb, 2 * H + 3, cc->D_mode == 2 ? 2 : 1, sh, cc->D_mode == 2 ? st : st + 1);
        }
        if (layout == TH_LAYOUT_XBC) {
            /* xBC row: x | Bm | Cm | 3 pad; zdt row: z | dt | 2 pad */
            int64_t W = HP + 2 * GN + 3, W2 = HP + H + 2;
            for (int o = 0; o < 2; o++) {
                int xb = new_buf(io, o ? "dx|dBm|dCm" : "x|Bm|Cm", (size_t)(B * L * W) * es, o);
                int zb = new_buf(io, o ? "dz|ddt" : "z|dt", (size_t)(B * L * W2) * es, o);
                int64_t shx[4] = {B, L, H, P}, stx[4] = {L * W, W, P, 1};
                int64_t shb[4] = {B, L, G, N}, stb[4] = {L * W, W, N, 1};
                int64_t stz[4] = {L * W2, W2, P, 1}, sht[3] = {B, L, H}, stt[3] = {L * W2, W2, 1};
                if (want[o ? TH_DX : TH_X]) set_view(io, o ? TH_DX : TH_X, xb, 0, 4, shx, stx);
                if (want[o ? TH_DBM : TH_BM]) set_view(io, o ? TH_DBM : TH_BM, xb, HP, 4, shb, stb);
                if (want[o ? TH_DCM : TH_CM]) set_view(io, o ? TH_DCM : TH_CM, xb, HP + GN, 4, shb, stb);
                if (want[o ? TH_DZ : TH_Z]) set_view(io, o ? TH_DZ : TH_Z, zb, 0, 4, shx, stz);
                if (want[o ? TH_DDT : TH_DT]) set_view(io, o ? TH_DDT : TH_DT, zb, HP, 3, sht, stt);
            }
            /* dout and out: rows padded by 1 and 5; states: N padded by 2 */
            int64_t shx[4] = {B, L, H, P};
            int64_t sts[4] = {H * P * (N + 2), P * (N + 2), N + 2, 1}, shs[4] = {S, H, P, N};
            int64_t std_[4] = {L * (HP + 1), HP + 1, P, 1}, sto[4] = {L * (HP + 5), HP + 5, P, 1};
            int b = new_buf(io, "dout", (size_t)(B * L * (HP + 1)) * es, 0);
            set_view(io, TH_DOUT, b, 0, 4, shx, std_);
            b = new_buf(io, "out", (size_t)(B * L * (HP + 5)) * es, 1);
            set_view(io, TH_OUT, b, 0, 4, shx, sto);
            static const int sid[4] = {TH_INIT, TH_DFINAL, TH_FINAL, TH_DINIT};
            for (int k = 0; k < 4; k++) {
                if (!want[sid[k]]) continue;
                b = new_buf(io, th_tname[sid[k]], (size_t)(S * H * P * (N + 2)) * es, k >= 2);
                set_view(io, sid[k], b, 0, 4, shs, sts);
            }
        } else if (layout == TH_LAYOUT_HEADMAJOR) {
            /* x, z, dout, out, Bm, Cm and their gradients in [B,H,L,P]-ordered storage; dt and
             * the states contiguous */
            static const int hid[] = {TH_X, TH_Z, TH_DOUT, TH_OUT, TH_DX, TH_DZ};
            static const int gid[] = {TH_BM, TH_CM, TH_DBM, TH_DCM};
            static const int tid[] = {TH_DT, TH_DDT};
            int64_t shx[4] = {B, L, H, P}, stx[4] = {H * L * P, P, L * P, 1};
            int64_t shb[4] = {B, L, G, N}, stb[4] = {G * L * N, N, L * N, 1};
            for (int k = 0; k < 6; k++)
                if (want[hid[k]])
                    set_view(io, hid[k], new_buf(io, th_tname[hid[k]], (size_t)(B * L * HP) * es,
                                                 is_output_id(hid[k])), 0, 4, shx, stx);
            for (int k = 0; k < 4; k++)
                if (want[gid[k]])
                    set_view(io, gid[k], new_buf(io, th_tname[gid[k]], (size_t)(B * L * GN) * es,
                                                 is_output_id(gid[k])), 0, 4, shb, stb);
            for (int k = 0; k < 2; k++) /* dt's last dimension must stay contiguous (SPEC) */
                if (want[tid[k]]) own_buf(io, d, tid[k], is_output_id(tid[k]));
            static const int sid[4] = {TH_INIT, TH_DFINAL, TH_FINAL, TH_DINIT};
            for (int k = 0; k < 4; k++)
                if (want[sid[k]]) own_buf(io, d, sid[k], k >= 2);
        } else { /* TH_LAYOUT_ZXBCDT */
            /* one row: z | x | Bm | Cm | dt | 1 pad; two gap rows after each batch row */
            int64_t W = 2 * HP + 2 * GN + H + 1, RB = (L + 2) * W;
            for (int o = 0; o < 2; o++) {
                int zb = new_buf(io, o ? "dzxbcdt" : "zxbcdt", (size_t)(B * RB) * es, o);
                int64_t shx[4] = {B, L, H, P}, stx[4] = {RB, W, P, 1};
                int64_t shb[4] = {B, L, G, N}, stb[4] = {RB, W, N, 1};
                int64_t sht[3] = {B, L, H}, stt[3] = {RB, W, 1};
                if (want[o ? TH_DZ : TH_Z]) set_view(io, o ? TH_DZ : TH_Z, zb, 0, 4, shx, stx);
                if (want[o ? TH_DX : TH_X]) set_view(io, o ? TH_DX : TH_X, zb, HP, 4, shx, stx);
                if (want[o ? TH_DBM : TH_BM]) set_view(io, o ? TH_DBM : TH_BM, zb, 2 * HP, 4, shb, stb);
                if (want[o ? TH_DCM : TH_CM]) set_view(io, o ? TH_DCM : TH_CM, zb, 2 * HP + GN, 4, shb, stb);
                if (want[o ? TH_DDT : TH_DT]) set_view(io, o ? TH_DDT : TH_DT, zb, 2 * HP + 2 * GN, 3, sht, stt);
            }
            /* dout/out: a gap row after each batch row; states stored [H,S,P,N+1] (permuted) */
            int64_t shx[4] = {B, L, H, P}, stx[4] = {(L + 1) * HP, HP, P, 1};
            int64_t shs[4] = {S, H, P, N}, sts[4] = {P * (N + 1), S * P * (N + 1), N + 1, 1};
            int b = new_buf(io, "dout", (size_t)(B * (L + 1) * HP) * es, 0);
            set_view(io, TH_DOUT, b, 0, 4, shx, stx);
            b = new_buf(io, "out", (size_t)(B * (L + 1) * HP) * es, 1);
            set_view(io, TH_OUT, b, 0, 4, shx, stx);
            static const int sid[4] = {TH_INIT, TH_DFINAL, TH_FINAL, TH_DINIT};
            for (int k = 0; k < 4; k++) {
                if (!want[sid[k]]) continue;
                b = new_buf(io, th_tname[sid[k]], (size_t)(S * H * P * (N + 1)) * es, k >= 2);
                set_view(io, sid[k], b, 0, 4, shs, sts);
            }
        }
        if (want[TH_CU]) own_buf(io, d, TH_CU, 0);
    }

    /* input values */
    for (int id = 0; id < TH_OUT; id++) {
        if (!io->v[id].present) continue;
        if (id == TH_CU) {
            double cu[TH_MAX_SEQ + 1];
            for (int s = 0; s <= cc->nseq; s++) cu[s] = (double)d->cu[s];
            th_tensor_scatter(&io->v[id].t, cu);
        } else {
            th_tensor_scatter(&io->v[id].t, d->v[id]);
        }
    }
    arm_outputs(io);

    /* options and gradient requests */
    const mamba2_tensor_t *t[TH_NT];
    for (int id = 0; id < TH_NT; id++) t[id] = TV(io, id);
    th_ssd_wire(cc, t, &io->opts, &io->grads);
}

void th_ssd_wire(const th_ssd_case *c, const mamba2_tensor_t *const t[TH_NT],
                 mamba2_ssd_options_t *op, mamba2_ssd_grads_t *g) {
    *op = mamba2_ssd_options_default();
    op->chunk_size = c->Q;
    op->D = t[TH_D];
    op->z = t[TH_Z];
    op->dt_bias = t[TH_DTB];
    op->initial_state = t[TH_INIT];
    op->cu_seqlens = t[TH_CU];
    op->dt_softplus = c->softplus;
    if (c->limit) {
        op->dt_limit_lo = c->lo;
        op->dt_limit_hi = c->hi;
    }
    g->dx = t[TH_DX];
    g->ddt = t[TH_DDT];
    g->dA = t[TH_DA];
    g->dBm = t[TH_DBM];
    g->dCm = t[TH_DCM];
    g->dD = t[TH_DD];
    g->dz = t[TH_DZ];
    g->ddt_bias = t[TH_DDTB];
    g->dinitial_state = t[TH_DINIT];
}

void th_ssd_io_free(th_ssd_io *io) {
    for (int i = 0; i < io->nbuf; i++) {
        free(io->buf[i].alloc);
        free(io->buf[i].mask);
        free(io->buf[i].snap);
    }
    free(io->ws_alloc);
    memset(io, 0, sizeof *io);
}


/* Workspace of exactly `need` bytes at an address 16 mod 64 (malloc's guarantee, no more),
 * pre-filled with NaN bytes and followed by a guard. */
static void *prep_ws(th_ssd_io *io, size_t need) {
    free(io->ws_alloc);
    size_t total = (16 + need + TH_GUARD + 63) / 64 * 64;
    io->ws_alloc = aligned_alloc(64, total);
    if (!io->ws_alloc) {
        printf("out of memory (workspace %zu)\n", need);
        exit(2);
    }
    memset(io->ws_alloc, TH_PAT_GUARD, total);
    memset(io->ws_alloc + 16, TH_PAT_UNSET, need);
    io->ws_bytes = need;
    return io->ws_alloc + 16;
}

mamba2_status_t th_ssd_io_forward(mamba2_context_t *ctx, th_ssd_io *io, int ws_mode) {
    void *ws = NULL;
    size_t need = 0;
    if (ws_mode) {
        mamba2_status_t st = mamba2_ssd_forward_workspace_size(
            ctx, TV(io, TH_OUT), io->out_x, TV(io, TH_FINAL), TV(io, TH_X), TV(io, TH_DT),
            TV(io, TH_A), TV(io, TH_BM), TV(io, TH_CM), &io->opts, &need);
        if (st != MAMBA2_STATUS_OK) return st;
        ws = prep_ws(io, need);
    }
    return mamba2_ssd_forward(ctx, TV(io, TH_OUT), io->out_x, TV(io, TH_FINAL), TV(io, TH_X),
                              TV(io, TH_DT), TV(io, TH_A), TV(io, TH_BM), TV(io, TH_CM), &io->opts,
                              ws, need);
}

mamba2_status_t th_ssd_io_backward(mamba2_context_t *ctx, th_ssd_io *io, int ws_mode) {
    void *ws = NULL;
    size_t need = 0;
    if (ws_mode) {
        mamba2_status_t st = mamba2_ssd_backward_workspace_size(
            ctx, &io->grads, TV(io, TH_DOUT), TV(io, TH_DFINAL), TV(io, TH_X), TV(io, TH_DT),
            TV(io, TH_A), TV(io, TH_BM), TV(io, TH_CM), io->out_x, &io->opts, &need);
        if (st != MAMBA2_STATUS_OK) return st;
        ws = prep_ws(io, need);
    }
    return mamba2_ssd_backward(ctx, &io->grads, TV(io, TH_DOUT), TV(io, TH_DFINAL), TV(io, TH_X),
                               TV(io, TH_DT), TV(io, TH_A), TV(io, TH_BM), TV(io, TH_CM),
                               io->out_x, &io->opts, ws, need);
}

int th_ssd_io_check_memory(const th_ssd_io *io, char *msg, size_t msg_size) {
    for (int i = 0; i < io->nbuf; i++) {
        const th_buf *b = &io->buf[i];
        size_t total = b->bytes + 2 * TH_GUARD;
        for (size_t k = 0; k < total; k++) {
            int bad = b->is_output ? (!b->mask[k] && b->alloc[k] != TH_PAT_GUARD)
                                   : (b->alloc[k] != b->snap[k]);
            if (bad) {
                long long rel = (long long)k - TH_GUARD;
                const char *where = rel < 0 ? "head guard"
                                    : (size_t)rel >= b->bytes ? "tail guard"
                                    : b->is_output ? "gap between view elements"
                                                   : "input data (inputs must not be written)";
                snprintf(msg, msg_size, "buffer %s: byte %lld (%s) changed to 0x%02x", b->name, rel,
                         where, b->alloc[k]);
                return 0;
            }
        }
    }
    if (io->ws_alloc) {
        for (size_t k = 0; k < 16; k++)
            if (io->ws_alloc[k] != TH_PAT_GUARD) {
                snprintf(msg, msg_size, "workspace: byte %zu before the workspace written", k);
                return 0;
            }
        for (size_t k = 0; k < TH_GUARD; k++)
            if (io->ws_alloc[16 + io->ws_bytes + k] != TH_PAT_GUARD) {
                snprintf(msg, msg_size, "workspace of %zu bytes: written %zu bytes past its end",
                         io->ws_bytes, k + 1);
                return 0;
            }
    }
    return 1;
}

int64_t th_ssd_io_read(const th_ssd_io *io, int id, double *dst) {
    if (!io->v[id].present) return -1;
    th_tensor_gather(&io->v[id].t, dst);
    return th_numel(io->v[id].t.rank, io->v[id].t.shape);
}

void th_ssd_io_poke(th_ssd_io *io, int id, int64_t i, double value) {
    th_view *v = &io->v[id];
    int64_t idx = i, off = 0;
    for (int d = v->t.rank - 1; d >= 0; d--) {
        off += (idx % v->t.shape[d]) * v->t.stride[d];
        idx /= v->t.shape[d];
    }
    if (v->t.dtype == MAMBA2_DTYPE_F64) ((double *)v->t.data)[off] = value;
    else ((float *)v->t.data)[off] = (float)value;
    th_buf *b = &io->buf[v->buf];
    memcpy(b->snap, b->alloc, b->bytes + 2 * TH_GUARD);
}

int th_ssd_io_outputs_equal(const th_ssd_io *a, const th_ssd_io *b, char *msg, size_t msg_size) {
    if (a->nbuf != b->nbuf) {
        snprintf(msg, msg_size, "different buffer lists");
        return 0;
    }
    for (int i = 0; i < a->nbuf; i++) {
        const th_buf *x = &a->buf[i], *y = &b->buf[i];
        if (!x->is_output) continue;
        if (x->bytes != y->bytes) {
            snprintf(msg, msg_size, "buffer %s: sizes differ", x->name);
            return 0;
        }
        size_t total = x->bytes + 2 * TH_GUARD;
        for (size_t k = 0; k < total; k++) {
            if (x->alloc[k] != y->alloc[k]) {
                /* name the view that holds the byte */
                const char *who = x->name;
                for (int id = TH_OUT; id < TH_NT; id++) {
                    if (!a->v[id].present || a->v[id].buf != i) continue;
                    size_t es = mamba2_dtype_size(a->v[id].t.dtype);
                    size_t start = (size_t)((unsigned char *)a->v[id].t.data - x->alloc);
                    size_t end = start + (size_t)th_tensor_span(&a->v[id].t) * es;
                    if (k >= start && k < end) who = th_tname[id];
                }
                snprintf(msg, msg_size, "%s differs (buffer %s byte %lld)", who, x->name,
                         (long long)k - TH_GUARD);
                return 0;
            }
        }
    }
    return 1;
}
