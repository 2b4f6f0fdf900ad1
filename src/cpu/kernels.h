/*
 * kernels.h — the CPU backend's SSD kernel sets: one table per instruction set, same
 * signatures.
 *
 * ssd_cpu*.c (planning, threading, segment bookkeeping, reductions) calls the kernels only
 * through an m2_cpu_kernels table chosen from ctx->isa, so the per-ISA files hold nothing
 * but arithmetic on packed or row-contiguous float32 data. Both tables are generated from
 * the one kernel text in ssd_kernels_impl.h.
 *
 * Conventions: a "row" is P (or N) contiguous floats; `ld*` is the element distance between
 * the rows of consecutive tokens. The sweeps keep a state in their own layout S[a][b] (b
 * contiguous, both padded with zeros to the register tile): the forward's states are
 * [Np][Pp], B and C packed per block as [Np/4][T][4] (4 = M2_TILE_COLS); the backward's
 * are transposed, [Pp][Np], with x̂ and E dy read as rows (M2_SWEEP_VROWS). Either way a
 * state is stored tile-major: each M2_TILE_COLS x tile_p register tile contiguous, tiles row
 * of tiles after row of tiles (m2_tile_off below). All kernels are deterministic:
 * the same inputs give the same bits whatever thread runs them.
 */
#ifndef MAMBA2C_CPU_KERNELS_H
#define MAMBA2C_CPU_KERNELS_H

#include <stdint.h>

#include "core/ksets.h"

/*
 * Cache lines to prefetch while a block's sweeps run: rows of the streamed tensors the block's
 * epilogue or the next block reads (ssd_cpu_fwd.c, ssd_cpu_bwd_pass.c build one plan per block for a set of heads,
 * in address order). Requesting them all at once would queue far more misses than the core
 * has fill buffers, so the sweep issues a few every 8 tokens of a register tile and the
 * misses overlap its arithmetic.
 * Stream i: rows[i] rows of lines[i] cache lines, ld[i] bytes apart, from p[i]; how[i]:
 * M2_PF_L2 (prefetcht1: into L2 only on Intel cores), M2_PF_NTA (prefetchnta: what the
 * backend requests on AMD cores instead, ctx->amd) or M2_PF_READ (into L1: dev probes).
 * The cursor (cs, cr, cl) walks the streams in order.
 */
#define M2_PF_MAX 8
enum { M2_PF_READ = 0, M2_PF_L2 = 1, M2_PF_NTA = 2 };
typedef struct m2_pf {
    int n;
    const char *p[M2_PF_MAX];
    int64_t ld[M2_PF_MAX], rows[M2_PF_MAX], lines[M2_PF_MAX];
    int how[M2_PF_MAX];
    int cs;
    int64_t cr, cl, left; /* left: lines not yet requested */
    int64_t per8;         /* lines the sweep requests every 8 tokens of a tile */
} m2_pf;

static inline void m2_pf_init(m2_pf *pf) {
    pf->n = 0;
    pf->cs = 0;
    pf->cr = pf->cl = pf->left = pf->per8 = 0;
}

/* Add a stream of `rows` rows of `bytes` bytes, `ld` bytes apart (p == NULL: nothing). */
static inline void m2_pf_add(m2_pf *pf, const void *p, int64_t ld, int64_t rows, int64_t bytes,
                             int how) {
    if (!p || rows <= 0 || bytes <= 0 || pf->n == M2_PF_MAX) return;
    const int i = pf->n++;
    pf->p[i] = (const char *)p;
    pf->ld[i] = ld;
    pf->rows[i] = rows;
    pf->lines[i] = (bytes + 63) / 64;
    pf->how[i] = how;
    pf->left += rows * pf->lines[i];
}

/* One line into L1 (a short-range request: the line is read within the block). */
static inline void m2_pf_line(const void *p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, 0, 3);
#else
    (void)p;
#endif
}

/* Request the next `count` lines. */
static inline void m2_pf_issue(m2_pf *pf, int64_t count) {
    if (!pf) return;
    for (; count > 0 && pf->left > 0; count--, pf->left--) {
        const char *a = pf->p[pf->cs] + pf->cr * pf->ld[pf->cs] + pf->cl * 64;
#if defined(__GNUC__)
        if (pf->how[pf->cs] == M2_PF_L2)
            __builtin_prefetch(a, 0, 2);
        else if (pf->how[pf->cs] == M2_PF_NTA)
            __builtin_prefetch(a, 0, 0);
        else
            __builtin_prefetch(a, 0, 3);
#else
        (void)a;
#endif
        if (++pf->cl == pf->lines[pf->cs]) {
            pf->cl = 0;
            if (++pf->cr == pf->rows[pf->cs]) {
                pf->cr = 0;
                pf->cs++;
            }
        }
    }
}

/* The sweep's register tile, the one definition the kernel text, its tables and the driver's
 * layouts derive from: M2_TILE_VECS vectors along the state's contiguous dimension (tile_p =
 * M2_TILE_VECS * lanes floats: 16 with AVX2, 32 with AVX-512, 2 scalar) by M2_TILE_COLS
 * columns of the other (tile_n). B and C packed for the forward sweep are [Np/M2_TILE_COLS][T]
 * [M2_TILE_COLS], a tile's columns of one token adjacent. The sweep's macros
 * (ssd_kernels_impl.h) spell the 2 x 4 registers out by name and check these values. */
#define M2_TILE_VECS 2
#define M2_TILE_COLS 4

/* Offset of element (a, b) of a sweep state with rows of Bp floats, stored tile-major: the
 * register tile holding it (M2_TILE_COLS rows a of tb floats b; tb = tile_p, a power of two,
 * and Bp a multiple of it) is one contiguous block, tiles row of tiles after row of tiles, in
 * the order the sweeps visit them. */
static inline int64_t m2_tile_off(int64_t a, int64_t b, int64_t Bp, int64_t tb) {
    const int64_t lo = b & (tb - 1), c = a & (M2_TILE_COLS - 1); /* a power of two */
    return (a - c) * Bp + M2_TILE_COLS * (b - lo) + c * tb + lo;
}

/* sweep flags */
#define M2_SWEEP_REV 1   /* tokens in reverse order (restart factors applied after a token) */
#define M2_SWEEP_W_PRE 2 /* the w row from the state before the token's update            */
#define M2_SWEEP_R_PRE 4 /* the acc row likewise                                          */
#define M2_SWEEP_VROWS 8 /* V and W are rows [T][Np], not packed [Np/4][T][4]              */

typedef struct m2_cpu_kernels {
    const char *isa;
    /* The sweep's register tile (M2_TILE_VECS * lanes, M2_TILE_COLS): callers pad the
     * state's contiguous dimension (the sweep's Pp: P in the forward, N in the backward) to a
     * multiple of tile_p and the other to a multiple of tile_n, with zeros. */
    int tile_p, tile_n;

    /*
     * One rescaled state over a block of T <= 64 tokens (see ssd_kernels_impl.h):
     *   S[n][p] += u_t[p] V_t[n];  w_t[p] += S_t[:,p]·W_t (W != NULL; S_{t-1}, the state
     *   before the update, with M2_SWEEP_W_PRE); acc[t*Np + n] = S_t[n,:]·r_t (r != NULL;
     *   S_{t-1} with M2_SWEEP_R_PRE);
     *   t ascending, or descending with M2_SWEEP_REV.
     * S: [Np][Pp], tile-major (above). u, r, w: [T][Pp]; V, W: [Np/4][T][4], or [T][Np] with M2_SWEEP_VROWS
     * (the 4 columns of a register tile are adjacent either way). Restarts: S *= rf[k] before token
     * ridx[k] (ascending indices; with M2_SWEEP_REV, after it). pf (may be NULL): lines to prefetch,
     * pf->per8 every 8 tokens of every register tile. Sc (may be NULL): a second copy of
     * the final state, [Np][Pp] like S (the backward's snapshots, written without a pass
     * over S; with non-temporal stores when aligned, so a thread other than the caller reads
     * it only after a fence).
     */
    void (*sweep)(int64_t T, int64_t Np, int64_t Pp, int nr, const int32_t *ridx,
                  const float *rf, int flags, const float *u, const float *V, const float *W,
                  const float *r, float *S, float *Sc, float *w, float *acc, m2_pf *pf);

    /*
     * The reverse sweep (flags M2_SWEEP_REV | M2_SWEEP_R_PRE; u = ur, V = Vr, W, r) that also
     * returns lam[t] = Σ G_t ∘ S_{t-1}: the forward states of the block are recomputed per
     * register tile from S0 (the state before the block, with the same restarts and the
     * update u = uf, V = Vf). w, acc may be NULL. Layouts as in the sweep with M2_SWEEP_VROWS
     * (Vf, Vr, W rows [T][Np]).
     */
    void (*sweep_direct)(int64_t T, int64_t Np, int64_t Pp, int nr, const int32_t *ridx,
                         const float *rf, const float *S0, const float *uf, const float *Vf,
                         const float *ur, const float *Vr, const float *W, const float *r,
                         float *G, float *w, float *acc, float *lam);

    /* dt processing and segment scales of nh heads over T tokens (ssd_kernels_impl.h);
     * outputs per head ldo apart */
    void (*dt_block)(int64_t nh, int64_t T, int64_t ldo, const float *raw, int64_t ld, const float *bias,
                     const float *A, int softplus, double lo, double hi, int seq_start,
                     double *c, float *d, float *E, float *w, float *gf, int *nr,
                     int32_t *ridx, float *rf);

    /* For heads j < nh (operand rows ld* floats apart per head): out_j[i] = s_j x_j[i] */
    void (*scale)(int64_t nh, int64_t n, const float *s, int64_t lds, const float *x,
                  int64_t ldx, float *out, int64_t ldo);
    /* For heads j < nh likewise: out_j[i] = (e_j y_j[i] + D_j[i] x_j[i]) * silu(z_j[i]); D and z
     * may be NULL (term dropped); outx (may be NULL) gets the value before the gate. With
     * stream set, out and outx are written with non-temporal stores where aligned (the
     * caller fences before its task ends). */
    void (*fwd_out)(int64_t nh, int64_t n, const float *e, int64_t lde, const float *y,
                    int64_t ldy, const float *x, int64_t ldx, const float *D, int64_t ldD,
                    const float *z, int64_t ldz, float *out, int64_t ldo, float *outx,
                    int64_t ldox, int stream);
    /* Rows of the backward (n = P; ssd_kernels_impl.h has the formulas):
     *   bwd_prep:  u = w x, dy = dout silu(z), r = E dy, gz = dout silu'(z), dD += dy x
     *   bwd_a_out: y = E (ym + cb u); dz = (y + D x) gz (y + D x read from vx when given:
     *              the forward's out_x); returns Σ r ym (0 when ym is NULL)
     *   bwd_b_out: gb = gp + cb r; dx = w gb + D dy; xg[0] = Σ x gb, xg[1] = Σ u gp
     * Optional pointers may be NULL (that output skipped; yhat NULL: returns 0). */
    void (*bwd_prep)(int64_t n, float w, float E, const float *x, const float *dout,
                     const float *z, float *u, float *dy, float *r, float *gz, float *dD);
    float (*bwd_a_out)(int64_t n, float E, float cb, const float *ym, const float *vx,
                       const float *u, const float *r, const float *x, const float *D,
                       const float *gz, float *dz, int stream);
    void (*bwd_b_out)(int64_t n, float w, float cb, const float *gp, const float *r,
                      const float *u, const float *x, const float *D, const float *dy,
                      float *dx, float *xg, int stream);
    /* Activation rows in their storage dtype (F32, BF16, F16; a mamba2_dtype_t): n elements
     * at src as floats into dst, and n floats rounded to nearest even into dst (with stream,
     * the whole lines of an aligned dst by non-temporal stores: the caller fences before
     * another thread reads them). */
    void (*load_row)(int64_t n, int dtype, const void *src, float *dst);
    void (*store_row)(int64_t n, int dtype, const float *src, void *dst, int stream);
    /* Σ a[i] b[i], accumulated in a fixed order, returned in double */
    double (*dot)(int64_t n, const float *a, const float *b);
    /* y[i] = y[i] + a x[i] (a = 1: the add of the backward's dBm/dCm head sums) */
    void (*axpy)(int64_t n, float a, const float *x, float *y);
    /* dst[i] = ((src[i] + src[ld + i]) + src[2 ld + i]) + ... over k rows (k >= 1): the same
     * sums, in the same order, as a copy of the first row and axpy(n, 1, ...) of the others;
     * with stream, non-temporal stores where dst is aligned for them */
    void (*head_sum)(int64_t n, int64_t k, const float *src, int64_t ld, float *dst, int stream);
} m2_cpu_kernels;

extern const m2_cpu_kernels m2_cpu_kernels_scalar; /* ssd_kernels_scalar.c, any CPU     */
#if defined(M2_KSETS_X86)
extern const m2_cpu_kernels m2_cpu_kernels_avx2;   /* ssd_kernels_avx2.c, -mavx2 -mfma */
extern const m2_cpu_kernels m2_cpu_kernels_avx512; /* ssd_kernels_avx512.c, -mavx512f.. */
#else
/* ssd_cpu.c picks its set by the x86 names: the AVX-512 one only where ctx->isa is
 * M2_ISA_AVX512, the AVX2 one for any other level above M2_ISA_SCALAR. Off x86-64 neither
 * exists, and the two names stand for this architecture's vector set (NEON on AArch64, whose
 * ctx->isa is then M2_ISA_NEON) or for the scalar set (no vector set: ctx->isa is always
 * M2_ISA_SCALAR there). */
#if defined(M2_KSETS_NEON)
extern const m2_cpu_kernels m2_cpu_kernels_neon; /* ssd_kernels_neon.c, AArch64 */
#define m2_cpu_kernels_avx2 m2_cpu_kernels_neon
#define m2_cpu_kernels_avx512 m2_cpu_kernels_neon
#else
#define m2_cpu_kernels_avx2 m2_cpu_kernels_scalar
#define m2_cpu_kernels_avx512 m2_cpu_kernels_scalar
#endif
#endif

#endif /* MAMBA2C_CPU_KERNELS_H */
