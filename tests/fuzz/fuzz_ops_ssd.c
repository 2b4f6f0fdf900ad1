/*
 * fuzz_ops_ssd.c — the SSD ops of the fuzz harness: the fused forward, forward_states and
 * backward (with their workspace queries), the decode step and the five staged stages.
 * Each op: dims (fuzz bytes -> problem sizes), build (sizes -> the tensors of a valid call)
 * and call (the one call site of each entry point).
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"

#define T(i) m2f_t(c, (i))
#define SKIP_NULL_OPTS() (c->gflag[M2F_G_OPTS_NULL])

/* divisor number k (mod count) of h */
int64_t m2f_divisor_of(int64_t h, int k) {
    int64_t d[64];
    int n = 0;
    for (int64_t g = 1; g <= h && n < 64; g++)
        if (h % g == 0) d[n++] = g;
    return d[k % n];
}

/* a slot carried by an options struct: present when `on`, never when opts is NULL */
void m2f_opt_slot(m2f_case *c, int i, int on) {
    c->s[i].present = on && !SKIP_NULL_OPTS();
    c->s[i].detached = SKIP_NULL_OPTS();
}
void m2f_grad_slot(m2f_case *c, int i, int on) {
    c->s[i].present = on && !c->gflag[M2F_G_GRADS_NULL];
    c->s[i].detached = c->gflag[M2F_G_GRADS_NULL];
}

/* cu_seqlens [nseq+1]: 0 = c0 <= c1 <= ... <= c_nseq = L, cut points from the PRNG */
void m2f_fill_cu(m2f_case *c, int i, int64_t nseq, int64_t L) {
    m2f_slot *s = &c->s[i];
    s->nidx = 0;
    if (nseq < 0) return;
    s->nidx = nseq < M2F_MAX_IDX - 1 ? nseq + 1 : M2F_MAX_IDX;
    s->idx[0] = 0;
    for (int64_t k = 1; k < s->nidx; k++) s->idx[k] = L > 0 ? (int64_t)(m2f_rand(c) % ((uint64_t)L + 1)) : 0;
    for (int64_t a = 1; a < s->nidx; a++) /* insertion sort */
        for (int64_t b = a; b > 1 && s->idx[b] < s->idx[b - 1]; b--) {
            int64_t t = s->idx[b];
            s->idx[b] = s->idx[b - 1];
            s->idx[b - 1] = t;
        }
    if (nseq < M2F_MAX_IDX - 1 && s->nidx == nseq + 1) s->idx[nseq] = L;
}

/* state_indices [B] over S slots: distinct slots, some rows padding (-1) when `pad` */
void m2f_fill_slots(m2f_case *c, int i, int64_t B, int64_t S, int pad) {
    m2f_slot *s = &c->s[i];
    int64_t perm[M2F_MAX_IDX];
    int64_t n = S < 0 ? 0 : S < M2F_MAX_IDX ? S : M2F_MAX_IDX;
    for (int64_t k = 0; k < n; k++) perm[k] = k;
    for (int64_t k = n - 1; k > 0; k--) {
        int64_t j = (int64_t)(m2f_rand(c) % (uint64_t)(k + 1)), t = perm[k];
        perm[k] = perm[j];
        perm[j] = t;
    }
    s->nidx = B < 0 ? 0 : B < M2F_MAX_IDX ? B : M2F_MAX_IDX;
    for (int64_t b = 0; b < s->nidx; b++)
        s->idx[b] = (pad && m2f_rand(c) % 4 == 0) || b >= n ? -1 : perm[b];
}

/* the slot of cache row b (identity without state_indices); -1: padding */
static int64_t slot_of(m2f_case *c, int ix, int64_t b) {
    if (!c->s[ix].present) return b;
    int64_t v = b < c->s[ix].nidx ? c->s[ix].idx[b] : -1;
    return c->s[ix].t.dtype == MAMBA2_DTYPE_I32 ? (int32_t)v : v; /* as the engine wrote it */
}

/* unmark padding rows of outs[] and the cache slots no row references */
void m2f_step_untouched(m2f_case *c, uint8_t **mask, int cache, int ix, int64_t B,
                           const int *outs, int nouts) {
    const mamba2_tensor_t *ct = &c->s[cache].t;
    int64_t S = ct->rank >= 1 ? ct->shape[0] : 0;
    for (int64_t s = 0; s < S && s < 4096; s++) {
        int used = 0;
        for (int64_t b = 0; b < B && !used; b++) used = slot_of(c, ix, b) == s;
        if (!used) m2f_unmark_row(c, mask, cache, s);
    }
    for (int64_t b = 0; b < B; b++)
        if (slot_of(c, ix, b) < 0)
            for (int k = 0; k < nouts; k++) m2f_unmark_row(c, mask, outs[k], b);
}

/* ---- fused SSD: forward, forward_states, backward ----------------------------------- */
/* dim: 0 B, 1 L, 2 H, 3 G, 4 P, 5 N, 6 Q, 7 nseq, 8 npos */
enum { X = 0, DT, A_, BM, CM, D_, Z, DTB, INIT, CU, OUT, OUTX, FIN, POS, PSTATES };
enum { DOUT = OUT, DFIN = FIN, GDX = 13, GDDT, GDA, GDBM, GDCM, GDD, GDZ, GDDTB, GDINIT };

static void ssd_dims(m2f_case *c) {
    const uint8_t *d = c->d;
    int64_t *m = c->dim;
    m[0] = (c->f[0] & 0x20) ? 1 : 1 + d[0] % 3;
    m[1] = d[1] < 200 ? d[1] % 40 : d[1] < 240 ? 40 + (d[1] - 200) : 64 + (int64_t)(d[1] - 240) * 16;
    m[2] = 1 + d[2] % 6;
    m[3] = m2f_divisor_of(m[2], d[3]);
    m[4] = d[4] < 240 ? 1 + d[4] % 20 : d[4] < 248 ? 32 : 64;
    m[5] = d[5] < 240 ? 1 + d[5] % 20 : d[5] < 248 ? 32 : 128;
    static const int64_t qs[8] = {256, 1, 2, 3, 7, 16, 64, 100};
    m[6] = qs[(c->f[1] >> 2) & 7];
    m[7] = 1 + d[6] % 5;
    m[8] = d[7] % 17;
    /* bound the work of a call (the reference backend is quadratic within a chunk) */
    const int64_t cap = (int64_t)1 << (d[8] < 224 ? 12 : 16); /* big calls are the exception */
    while (m[0] * m[1] * m[2] * m[4] * m[5] > cap && m[1] > 4) m[1] /= 2;
    while (m[0] * m[1] * m[2] * m[4] * m[5] > cap && m[5] > 4) m[5] /= 2;
    while (m[0] * m[1] * m[2] * m[4] * m[5] > cap && m[4] > 4) m[4] /= 2;
    if (m[1] > 64 && m[6] < 16) m[6] = 16;
}

/* SPEC §8's input distribution (value mode 1) for the SSD inputs in these slots */
static void spec_classes(m2f_case *c, int dt, int a, int bm, int cm, int dtb, int state) {
    c->s[dt].vclass = M2F_V_SPEC_DT;
    c->s[a].vclass = M2F_V_SPEC_A;
    c->s[bm].vclass = c->s[cm].vclass = c->s[state].vclass = M2F_V_SPEC_SMALL;
    c->s[dtb].vclass = M2F_V_SPEC_BIAS;
}

static void ssd_build_common(m2f_case *c, int backward) {
    const int64_t B = c->dim[0], L = c->dim[1], H = c->dim[2], G = c->dim[3], P = c->dim[4],
                  N = c->dim[5], nseq = c->dim[7];
    const int varlen = (c->f[0] & 0x20) != 0;
    const int64_t S = varlen ? nseq : B;
    const mamba2_dtype_t a = c->adt, p = c->pdt;
    m2f_add(c, "x", M2F_IN, a, 4, M2F_SHAPE(B, L, H, P));
    m2f_add(c, "dt", M2F_IN, a, 3, M2F_SHAPE(B, L, H));
    m2f_add(c, "A", M2F_IN, p, 1, M2F_SHAPE(H));
    m2f_add(c, "Bm", M2F_IN, a, 4, M2F_SHAPE(B, L, G, N));
    m2f_add(c, "Cm", M2F_IN, a, 4, M2F_SHAPE(B, L, G, N));
    if (c->f[0] & 2) m2f_add(c, "D", M2F_IN, p, 2, M2F_SHAPE(H, P));
    else m2f_add(c, "D", M2F_IN, p, 1, M2F_SHAPE(H));
    m2f_opt_slot(c, D_, c->f[0] & 1);
    m2f_add(c, "z", M2F_IN, a, 4, M2F_SHAPE(B, L, H, P));
    m2f_opt_slot(c, Z, c->f[0] & 4);
    m2f_add(c, "dt_bias", M2F_IN, p, 1, M2F_SHAPE(H));
    m2f_opt_slot(c, DTB, c->f[0] & 8);
    m2f_add(c, "initial_state", M2F_IN, p, 4, M2F_SHAPE(S, H, P, N));
    m2f_opt_slot(c, INIT, c->f[0] & 16);
    spec_classes(c, DT, A_, BM, CM, DTB, INIT);
    m2f_add(c, "cu_seqlens", M2F_IDX, c->idt, 1, M2F_SHAPE(m2f_sadd(nseq, 1)));
    m2f_opt_slot(c, CU, varlen);
    m2f_fill_cu(c, CU, nseq, L);
    const int r = backward ? M2F_IN : M2F_OUT;
    m2f_add(c, backward ? "dout" : "out", r, a, 4, M2F_SHAPE(B, L, H, P));
    m2f_add(c, "out_x", r, a, 4, M2F_SHAPE(B, L, H, P));
    m2f_opt_slot(c, OUTX, c->f[1] & 1);
    m2f_add(c, backward ? "dfinal_state" : "final_state", r, p, 4, M2F_SHAPE(S, H, P, N));
    c->s[FIN].present = backward ? (c->f[1] & 0x20) != 0 : (c->f[0] & 0x80) != 0;
}

static mamba2_ssd_options_t ssd_opts(m2f_case *c) {
    mamba2_ssd_options_t o = mamba2_ssd_options_default();
    o.chunk_size = m2f_opt_i(c, M2F_O_CHUNK, c->dim[6]);
    o.D = T(D_);
    o.z = T(Z);
    o.dt_bias = T(DTB);
    o.initial_state = T(INIT);
    o.cu_seqlens = T(CU);
    o.dt_softplus = (int32_t)m2f_opt_i(c, M2F_O_SOFTPLUS, (c->f[0] & 0x40) != 0);
    o.dt_limit_lo = m2f_opt_d(c, M2F_O_DT_LO, (c->f[1] & 2) ? 0.001 : 0.0);
    o.dt_limit_hi = m2f_opt_d(c, M2F_O_DT_HI, (c->f[1] & 2) ? 0.5 : INFINITY);
#ifndef MAMBA2C_ABI_VERSION
    o.out_x = T(OUTX); /* before ABI v1 an options field, since an explicit argument */
#endif
    if (c->op == M2F_SSD_FWD_STATES) o.state_positions = T(POS);
    return o;
}

static void ssd_fwd_build(m2f_case *c) { ssd_build_common(c, 0); }

static mamba2_status_t ssd_fwd_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                    size_t wsz) {
    mamba2_ssd_options_t o = ssd_opts(c);
    const mamba2_ssd_options_t *op = SKIP_NULL_OPTS() ? NULL : &o;
    if (op) M2F_SET_SIZE(c, o);
#ifdef MAMBA2C_ABI_VERSION
    if (q) return mamba2_ssd_forward_workspace_size(ctx, T(OUT), T(OUTX), T(FIN), T(X), T(DT), T(A_),
                                                   T(BM), T(CM), op, q);
    return mamba2_ssd_forward(ctx, T(OUT), T(OUTX), T(FIN), T(X), T(DT), T(A_), T(BM), T(CM), op, ws,
                              wsz);
#else
    if (q) return mamba2_ssd_forward_workspace_size(ctx, T(OUT), T(FIN), T(X), T(DT), T(A_), T(BM),
                                                   T(CM), op, q);
    return mamba2_ssd_forward(ctx, T(OUT), T(FIN), T(X), T(DT), T(A_), T(BM), T(CM), op, ws, wsz);
#endif
}

static void ssd_fwd_states_build(m2f_case *c) {
    ssd_build_common(c, 0);
    const int64_t B = c->dim[0], L = c->dim[1], npos = c->dim[8];
    int64_t ntok;
    if (__builtin_mul_overflow(B, L, &ntok) || ntok < 0) ntok = INT64_MAX;
    int i = m2f_add(c, "state_positions", M2F_IDX, c->idt, 1, M2F_SHAPE(npos));
    m2f_opt_slot(c, i, 1);
    /* strictly increasing flat token indices: a sorted sample without repeats */
    m2f_slot *s = &c->s[i];
    s->nidx = 0;
    int64_t want = npos < ntok ? npos : ntok;
    if (want > M2F_MAX_IDX) want = M2F_MAX_IDX;
    for (int64_t t = 0, left = ntok; t < ntok && s->nidx < want; t++, left--) {
        if ((int64_t)(m2f_rand(c) % (uint64_t)left) < want - s->nidx) s->idx[s->nidx++] = t;
        if (ntok > 4096 && t > 64) { /* huge grids: spread the rest out */
            while (s->nidx < want) {
                s->idx[s->nidx] = (s->nidx ? s->idx[s->nidx - 1] : t) + 1 + s->nidx;
                s->nidx++;
            }
            break;
        }
    }
    s->t.shape[0] = s->nidx < npos ? s->nidx : npos;
    m2f_add(c, "position_states", M2F_OUT, c->pdt, 4,
            M2F_SHAPE(s->t.shape[0], c->dim[2], c->dim[4], c->dim[5]));
}

static mamba2_status_t ssd_fwd_states_call(m2f_case *c, mamba2_context_t *ctx, size_t *q,
                                           void *ws, size_t wsz) {
    mamba2_ssd_options_t o = ssd_opts(c);
    const mamba2_ssd_options_t *op = SKIP_NULL_OPTS() ? NULL : &o;
    if (op) M2F_SET_SIZE(c, o);
#ifdef MAMBA2C_ABI_VERSION
    if (q) return mamba2_ssd_forward_workspace_size(ctx, T(OUT), T(OUTX), T(FIN), T(X), T(DT), T(A_),
                                                   T(BM), T(CM), op, q);
    return mamba2_ssd_forward_states(ctx, T(OUT), T(OUTX), T(FIN), T(PSTATES), T(X), T(DT), T(A_),
                                     T(BM), T(CM), op, ws, wsz);
#else
    if (q) return mamba2_ssd_forward_workspace_size(ctx, T(OUT), T(FIN), T(X), T(DT), T(A_), T(BM),
                                                   T(CM), op, q);
    return mamba2_ssd_forward_states(ctx, T(OUT), T(FIN), T(PSTATES), T(X), T(DT), T(A_), T(BM),
                                     T(CM), op, ws, wsz);
#endif
}

static void ssd_bwd_build(m2f_case *c) {
    ssd_build_common(c, 1);
    const int64_t B = c->dim[0], L = c->dim[1], H = c->dim[2], G = c->dim[3], P = c->dim[4],
                  N = c->dim[5];
    const int64_t S = (c->f[0] & 0x20) ? c->dim[7] : B;
    const mamba2_dtype_t a = c->adt, p = c->pdt;
    const uint8_t g = c->f[2];
    m2f_grad_slot(c, m2f_add(c, "dx", M2F_OUT, a, 4, M2F_SHAPE(B, L, H, P)), g & 1);
    m2f_grad_slot(c, m2f_add(c, "ddt", M2F_OUT, a, 3, M2F_SHAPE(B, L, H)), g & 2);
    m2f_grad_slot(c, m2f_add(c, "dA", M2F_OUT, p, 1, M2F_SHAPE(H)), g & 4);
    m2f_grad_slot(c, m2f_add(c, "dBm", M2F_OUT, a, 4, M2F_SHAPE(B, L, G, N)), g & 8);
    m2f_grad_slot(c, m2f_add(c, "dCm", M2F_OUT, a, 4, M2F_SHAPE(B, L, G, N)), g & 16);
    if (c->f[0] & 2) m2f_add(c, "dD", M2F_OUT, p, 2, M2F_SHAPE(H, P));
    else m2f_add(c, "dD", M2F_OUT, p, 1, M2F_SHAPE(H));
    m2f_grad_slot(c, GDD, (g & 32) && c->s[D_].present);
    m2f_grad_slot(c, m2f_add(c, "dz", M2F_OUT, a, 4, M2F_SHAPE(B, L, H, P)), (g & 64) && c->s[Z].present);
    m2f_grad_slot(c, m2f_add(c, "ddt_bias", M2F_OUT, p, 1, M2F_SHAPE(H)), (g & 128) && c->s[DTB].present);
    m2f_grad_slot(c, m2f_add(c, "dinitial_state", M2F_OUT, p, 4, M2F_SHAPE(S, H, P, N)),
              (c->f[3] & 1) && c->s[INIT].present);
}

static mamba2_status_t ssd_bwd_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                    size_t wsz) {
    mamba2_ssd_options_t o = ssd_opts(c);
    const mamba2_ssd_options_t *op = SKIP_NULL_OPTS() ? NULL : &o;
    if (op) M2F_SET_SIZE(c, o);
    mamba2_ssd_grads_t g;
    memset(&g, 0, sizeof g);
    g.dx = T(GDX);
    g.ddt = T(GDDT);
    g.dA = T(GDA);
    g.dBm = T(GDBM);
    g.dCm = T(GDCM);
    g.dD = T(GDD);
    g.dz = T(GDZ);
    g.ddt_bias = T(GDDTB);
    g.dinitial_state = T(GDINIT);
    const mamba2_ssd_grads_t *gp = c->gflag[M2F_G_GRADS_NULL] ? NULL : &g;
    if (gp) M2F_SET_SIZE(c, g);
#ifdef MAMBA2C_ABI_VERSION
    if (q) return mamba2_ssd_backward_workspace_size(ctx, gp, T(DOUT), T(DFIN), T(X), T(DT), T(A_),
                                                    T(BM), T(CM), T(OUTX), op, q);
    return mamba2_ssd_backward(ctx, gp, T(DOUT), T(DFIN), T(X), T(DT), T(A_), T(BM), T(CM), T(OUTX),
                               op, ws, wsz);
#else
    if (q) return mamba2_ssd_backward_workspace_size(ctx, gp, T(DOUT), T(DFIN), T(X), T(DT), T(A_),
                                                    T(BM), T(CM), op, q);
    return mamba2_ssd_backward(ctx, gp, T(DOUT), T(DFIN), T(X), T(DT), T(A_), T(BM), T(CM), op, ws,
                               wsz);
#endif
}

/* ---- SSD decode step ------------------------------------------------------------------ */
/* dim: 0 B, 1 T, 2 H, 3 G, 4 P, 5 N, 6 S (extra slots) */
enum { SC_CACHE = 0, SC_X, SC_DT, SC_A, SC_BM, SC_CM, SC_D, SC_Z, SC_DTB, SC_IX, SC_OUT, SC_ALL };

static void step_dims(m2f_case *c) {
    const uint8_t *d = c->d;
    int64_t *m = c->dim;
    m[0] = 1 + d[0] % 5;
    m[1] = d[1] % 5;
    m[2] = 1 + d[2] % 6;
    m[3] = m2f_divisor_of(m[2], d[3]);
    m[4] = 1 + d[4] % 20;
    m[5] = d[5] < 240 ? 1 + d[5] % 20 : 64;
    m[6] = d[6] % 4;
}

static void step_build(m2f_case *c) {
    const int64_t B = c->dim[0], Tn = c->dim[1], H = c->dim[2], G = c->dim[3], P = c->dim[4],
                  N = c->dim[5], S = m2f_sadd(B, c->dim[6]);
    const int multi = (c->f[0] & 0x20) != 0;
    const mamba2_dtype_t a = c->adt, p = c->pdt;
    /* the state's storage: f32, or bf16 / f16 with f32 activations */
    const int hs = (c->f[1] >> 4) & 3;
    const mamba2_dtype_t sd = a != MAMBA2_DTYPE_F32 || hs == 0 || hs == 3 ? p
                              : hs == 1 ? MAMBA2_DTYPE_BF16 : MAMBA2_DTYPE_F16;
    m2f_add(c, "state_cache", M2F_INOUT, sd, 4, M2F_SHAPE(S, H, P, N));
    if (multi) {
        m2f_add(c, "x", M2F_IN, a, 4, M2F_SHAPE(B, Tn, H, P));
        m2f_add(c, "dt", M2F_IN, a, 3, M2F_SHAPE(B, Tn, H));
    } else {
        m2f_add(c, "x", M2F_IN, a, 3, M2F_SHAPE(B, H, P));
        m2f_add(c, "dt", M2F_IN, a, 2, M2F_SHAPE(B, H));
    }
    m2f_add(c, "A", M2F_IN, p, 1, M2F_SHAPE(H));
    if (multi) {
        m2f_add(c, "Bm", M2F_IN, a, 4, M2F_SHAPE(B, Tn, G, N));
        m2f_add(c, "Cm", M2F_IN, a, 4, M2F_SHAPE(B, Tn, G, N));
    } else {
        m2f_add(c, "Bm", M2F_IN, a, 3, M2F_SHAPE(B, G, N));
        m2f_add(c, "Cm", M2F_IN, a, 3, M2F_SHAPE(B, G, N));
    }
    if (c->f[0] & 2) m2f_add(c, "D", M2F_IN, p, 2, M2F_SHAPE(H, P));
    else m2f_add(c, "D", M2F_IN, p, 1, M2F_SHAPE(H));
    m2f_opt_slot(c, SC_D, c->f[0] & 1);
    int zi = multi ? m2f_add(c, "z", M2F_IN, a, 4, M2F_SHAPE(B, Tn, H, P))
                   : m2f_add(c, "z", M2F_IN, a, 3, M2F_SHAPE(B, H, P));
    m2f_opt_slot(c, zi, c->f[0] & 4);
    m2f_opt_slot(c, m2f_add(c, "dt_bias", M2F_IN, p, 1, M2F_SHAPE(H)), c->f[0] & 8);
    spec_classes(c, SC_DT, SC_A, SC_BM, SC_CM, SC_DTB, SC_CACHE);
    m2f_add(c, "state_indices", M2F_IDX, c->idt, 1, M2F_SHAPE(B));
    m2f_opt_slot(c, SC_IX, c->f[0] & 16);
    m2f_fill_slots(c, SC_IX, B, S, c->f[0] & 0x40);
    if (multi) {
        m2f_add(c, "out", M2F_OUT, a, 4, M2F_SHAPE(B, Tn, H, P));
        m2f_add(c, "all_states", M2F_OUT, sd, 5, M2F_SHAPE(B, Tn, H, P, N));
    } else {
        m2f_add(c, "out", M2F_OUT, a, 3, M2F_SHAPE(B, H, P));
        m2f_add(c, "all_states", M2F_OUT, sd, 4, M2F_SHAPE(B, H, P, N));
    }
    c->s[SC_ALL].present = (c->f[0] & 0x80) != 0;
}

static mamba2_status_t step_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                 size_t wsz) {
    mamba2_ssd_step_options_t o = mamba2_ssd_step_options_default();
    o.D = T(SC_D);
    o.z = T(SC_Z);
    o.dt_bias = T(SC_DTB);
    o.state_indices = T(SC_IX);
    o.dt_softplus = (int32_t)m2f_opt_i(c, M2F_O_SOFTPLUS, (c->f[1] & 1) != 0);
    o.dt_limit_lo = m2f_opt_d(c, M2F_O_DT_LO, (c->f[1] & 2) ? 0.001 : 0.0);
    o.dt_limit_hi = m2f_opt_d(c, M2F_O_DT_HI, (c->f[1] & 2) ? 0.5 : INFINITY);
    if (!SKIP_NULL_OPTS()) M2F_SET_SIZE(c, o);
    return mamba2_ssd_step(ctx, T(SC_CACHE), T(SC_OUT), T(SC_ALL), T(SC_X), T(SC_DT), T(SC_A),
                           T(SC_BM), T(SC_CM), SKIP_NULL_OPTS() ? NULL : &o);
}

static void step_untouched_hook(m2f_case *c, uint8_t **mask) {
    const int outs[2] = {SC_OUT, SC_ALL};
    m2f_step_untouched(c, mask, SC_CACHE, SC_IX, c->dim[0], outs, 2);
}

/* ---- staged stages -------------------------------------------------------------------- */
/* dim: 0 B, 1 L, 2 H, 3 G, 4 P, 5 N, 6 Q */
static void staged_dims(m2f_case *c) {
    const uint8_t *d = c->d;
    int64_t *m = c->dim;
    m[0] = 1 + d[0] % 2;
    m[1] = d[1] < 220 ? d[1] % 70 : 70 + (int64_t)(d[1] - 220) * 4;
    m[2] = 1 + d[2] % 4;
    m[3] = m2f_divisor_of(m[2], d[3]);
    m[4] = 1 + d[4] % 12;
    m[5] = 1 + d[5] % 12;
    static const int64_t qs[8] = {1, 2, 3, 4, 7, 16, 64, 256};
    m[6] = qs[d[6] & 7];
    if (m[6] == 256 && m[1] > 64) m[6] = 64;
}

static int64_t kchunks(m2f_case *c) {
    const int64_t L = c->dim[1], Q = c->dim[6];
    return Q > 0 && L >= 0 ? L / Q + (L % Q != 0) : 1;
}

#ifdef MAMBA2C_ABI_VERSION
typedef mamba2_ssd_chunked_options_t staged_opts_t;
#define STAGED_DEFAULT() mamba2_ssd_chunked_options_default()
#else
typedef mamba2_ssd_options_t staged_opts_t;
#define STAGED_DEFAULT() mamba2_ssd_options_default()
#endif
static staged_opts_t staged_opts(m2f_case *c, int init, int D, int z, int dtb) {
    staged_opts_t o = STAGED_DEFAULT();
    o.chunk_size = m2f_opt_i(c, M2F_O_CHUNK, c->dim[6]);
    o.dt_softplus = (int32_t)m2f_opt_i(c, M2F_O_SOFTPLUS, (c->f[0] & 2) != 0);
    o.dt_limit_lo = m2f_opt_d(c, M2F_O_DT_LO, (c->f[0] & 4) ? 0.001 : 0.0);
    o.dt_limit_hi = m2f_opt_d(c, M2F_O_DT_HI, (c->f[0] & 4) ? 0.5 : INFINITY);
    o.initial_state = init >= 0 ? T(init) : NULL;
    o.D = D >= 0 ? T(D) : NULL;
    o.z = z >= 0 ? T(z) : NULL;
    o.dt_bias = dtb >= 0 ? T(dtb) : NULL;
    return o;
}
#define STAGED_OPTS(...)                                                                   \
    staged_opts_t o = staged_opts(c, __VA_ARGS__);                                         \
    const staged_opts_t *op = SKIP_NULL_OPTS() ? NULL : &o;                                \
    if (op) M2F_SET_SIZE(c, o)

static void cumsum_build(m2f_case *c) {
    const int64_t B = c->dim[0], L = c->dim[1], H = c->dim[2], Q = c->dim[6], K = kchunks(c);
    m2f_add(c, "dt", M2F_IN, c->adt, 3, M2F_SHAPE(B, L, H));
    c->s[m2f_add(c, "A", M2F_IN, c->pdt, 1, M2F_SHAPE(H))].vclass = M2F_V_NONPOS;
    m2f_opt_slot(c, m2f_add(c, "dt_bias", M2F_IN, c->pdt, 1, M2F_SHAPE(H)), c->f[0] & 1);
    m2f_add(c, "dt_out", M2F_OUT, c->pdt, 4, M2F_SHAPE(B, H, K, Q));
    m2f_add(c, "dA_cumsum", M2F_OUT, c->pdt, 4, M2F_SHAPE(B, H, K, Q));
}
static mamba2_status_t cumsum_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                   size_t wsz) {
    STAGED_OPTS(-1, -1, -1, 2);
    return mamba2_ssd_chunk_cumsum(ctx, T(3), T(4), T(0), T(1), op);
}

static void bmm_build(m2f_case *c) {
    const int64_t B = c->dim[0], L = c->dim[1], G = c->dim[3], N = c->dim[5], Q = c->dim[6],
                  K = kchunks(c);
    m2f_add(c, "Bm", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, G, N));
    m2f_add(c, "Cm", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, G, N));
    m2f_add(c, "CB", M2F_OUT, c->pdt, 5, M2F_SHAPE(B, K, G, Q, Q));
}
static mamba2_status_t bmm_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                size_t wsz) {
    STAGED_OPTS(-1, -1, -1, -1);
    return mamba2_ssd_bmm_chunk(ctx, T(2), T(0), T(1), op);
}

static void cstate_build(m2f_case *c) {
    const int64_t B = c->dim[0], L = c->dim[1], H = c->dim[2], G = c->dim[3], P = c->dim[4],
                  N = c->dim[5], Q = c->dim[6], K = kchunks(c);
    m2f_add(c, "x", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, H, P));
    m2f_add(c, "Bm", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, G, N));
    c->s[m2f_add(c, "dt_out", M2F_IN, c->pdt, 4, M2F_SHAPE(B, H, K, Q))].vclass = M2F_V_NONNEG;
    c->s[m2f_add(c, "dA_cumsum", M2F_IN, c->pdt, 4, M2F_SHAPE(B, H, K, Q))].vclass = M2F_V_NONPOS;
    m2f_add(c, "states", M2F_OUT, c->pdt, 5, M2F_SHAPE(B, K, H, P, N));
}
static mamba2_status_t cstate_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                   size_t wsz) {
    STAGED_OPTS(-1, -1, -1, -1);
    return mamba2_ssd_chunk_state(ctx, T(4), T(0), T(1), T(2), T(3), op);
}

static void passing_build(m2f_case *c) {
    const int64_t B = c->dim[0], H = c->dim[2], P = c->dim[4], N = c->dim[5], Q = c->dim[6],
                  K = kchunks(c);
    m2f_add(c, "states", M2F_IN, c->pdt, 5, M2F_SHAPE(B, K, H, P, N));
    c->s[m2f_add(c, "dA_cumsum", M2F_IN, c->pdt, 4, M2F_SHAPE(B, H, K, Q))].vclass = M2F_V_NONPOS;
    m2f_opt_slot(c, m2f_add(c, "initial_state", M2F_IN, c->pdt, 4, M2F_SHAPE(B, H, P, N)), c->f[0] & 1);
    m2f_add(c, "states_start", M2F_OUT, c->pdt, 5, M2F_SHAPE(B, K, H, P, N));
    c->s[m2f_add(c, "final_state", M2F_OUT, c->pdt, 4, M2F_SHAPE(B, H, P, N))].present =
        (c->f[0] & 8) != 0;
}
static mamba2_status_t passing_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                    size_t wsz) {
    STAGED_OPTS(2, -1, -1, -1);
    return mamba2_ssd_state_passing(ctx, T(3), T(4), T(0), T(1), op);
}

static void cscan_build(m2f_case *c) {
    const int64_t B = c->dim[0], L = c->dim[1], H = c->dim[2], G = c->dim[3], P = c->dim[4],
                  N = c->dim[5], Q = c->dim[6], K = kchunks(c);
    m2f_add(c, "CB", M2F_IN, c->pdt, 5, M2F_SHAPE(B, K, G, Q, Q));
    m2f_add(c, "x", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, H, P));
    c->s[m2f_add(c, "dt_out", M2F_IN, c->pdt, 4, M2F_SHAPE(B, H, K, Q))].vclass = M2F_V_NONNEG;
    c->s[m2f_add(c, "dA_cumsum", M2F_IN, c->pdt, 4, M2F_SHAPE(B, H, K, Q))].vclass = M2F_V_NONPOS;
    m2f_add(c, "Cm", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, G, N));
    m2f_add(c, "states_start", M2F_IN, c->pdt, 5, M2F_SHAPE(B, K, H, P, N));
    if (c->f[0] & 2) m2f_add(c, "D", M2F_IN, c->pdt, 2, M2F_SHAPE(H, P));
    else m2f_add(c, "D", M2F_IN, c->pdt, 1, M2F_SHAPE(H));
    m2f_opt_slot(c, 6, c->f[0] & 1);
    m2f_opt_slot(c, m2f_add(c, "z", M2F_IN, c->adt, 4, M2F_SHAPE(B, L, H, P)), c->f[0] & 4);
    m2f_add(c, "out", M2F_OUT, c->adt, 4, M2F_SHAPE(B, L, H, P));
}
static mamba2_status_t cscan_call(m2f_case *c, mamba2_context_t *ctx, size_t *q, void *ws,
                                  size_t wsz) {
    STAGED_OPTS(-1, 6, 7, -1);
    return mamba2_ssd_chunk_scan(ctx, T(8), T(0), T(1), T(2), T(3), T(4), T(5), op);
}

/* ---- op descriptors (the table is in fuzz_ops.c) -------------------------------------- */
const m2f_op m2f_op_ssd_fwd = {"ssd_forward", ssd_dims, ssd_fwd_build, ssd_fwd_call, NULL, 1};
const m2f_op m2f_op_ssd_fwd_states = {"ssd_forward_states", ssd_dims, ssd_fwd_states_build,
                                      ssd_fwd_states_call, NULL, 2};
const m2f_op m2f_op_ssd_bwd = {"ssd_backward", ssd_dims, ssd_bwd_build, ssd_bwd_call,
                               NULL, 1};
const m2f_op m2f_op_ssd_step = {"ssd_step", step_dims, step_build, step_call, step_untouched_hook, 0};
const m2f_op m2f_op_cumsum = {"ssd_chunk_cumsum", staged_dims, cumsum_build, cumsum_call, NULL, 0};
const m2f_op m2f_op_bmm = {"ssd_bmm_chunk", staged_dims, bmm_build, bmm_call, NULL, 0};
const m2f_op m2f_op_cstate = {"ssd_chunk_state", staged_dims, cstate_build, cstate_call, NULL, 0};
const m2f_op m2f_op_passing = {"ssd_state_passing", staged_dims, passing_build, passing_call, NULL, 0};
const m2f_op m2f_op_cscan = {"ssd_chunk_scan", staged_dims, cscan_build, cscan_call, NULL, 0};
