/*
 * conv1d_inst.c — the problems, guarded instances, calls and step tensors of test_conv1d (see
 * conv1d_inst.h).
 */
#include "conv1d_inst.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================= the problem === */

const char *const tname[NT] = {"x",    "weight", "bias", "initial_conv_state",
                                      "cu_seqlens", "dout", "dfinal_conv_state", "out",
                                      "final_conv_state", "dx", "dweight", "dbias",
                                      "dinitial_conv_state"};

int shape_of(const cv_case *c, const cv_data *d, int id, int64_t *sh) {
    switch (id) {
    case X: case DOUT: case OUT: case DX:
        sh[0] = c->B; sh[1] = c->L; sh[2] = c->C;
        return 3;
    case WT: case DW:
        sh[0] = c->C; sh[1] = c->W;
        return 2;
    case BIAS: case DB:
        sh[0] = c->C;
        return 1;
    case INIT: case DFINAL: case FINAL: case DINIT:
        sh[0] = d->S; sh[1] = c->C; sh[2] = c->W - 1;
        return 3;
    case CU:
        sh[0] = c->nseq + 1;
        return 1;
    }
    return 0;
}

int present(const cv_case *c, int id) {
    switch (id) {
    case BIAS: return c->bias;
    case INIT: return c->init;
    case CU: return c->nseq > 0;
    case DFINAL: return c->dfinal;
    case FINAL: return c->final;
    case DB: return c->bias && (!c->gmask || (c->gmask >> (DB - DX) & 1));
    case DINIT: return c->init && (!c->gmask || (c->gmask >> (DINIT - DX) & 1));
    case DX: case DW: return !c->gmask || (c->gmask >> (id - DX) & 1);
    default: return 1;
    }
}

int64_t numel_of(const cv_case *c, const cv_data *d, int id) {
    int64_t sh[3];
    int r = shape_of(c, d, id, sh);
    return th_numel(r, sh);
}

/* Inputs drawn as causal-conv1d's tests do (randn), rounded to float32. */
void data_make(cv_data *d, cv_case *c) {
    memset(d, 0, sizeof *d);
    if (c->nseq > 0) {
        c->B = 1;
        c->L = 0;
        d->cu[0] = 0;
        for (int s = 0; s < c->nseq; s++) {
            c->L += c->seqlen[s];
            d->cu[s + 1] = c->L;
        }
    }
    d->S = c->nseq > 0 ? c->nseq : c->B;
    th_rng r;
    th_rng_seed(&r, c->seed ? c->seed : 12345);
    for (int id = X; id <= DFINAL; id++) {
        if (id == CU || !present(c, id)) continue;
        int64_t n = numel_of(c, d, id);
        d->v[id] = (double *)th_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) d->v[id][i] = (double)(float)th_rng_normal(&r);
    }
    if (c->nseq > 0) {
        d->v[CU] = (double *)th_xmalloc(sizeof(double) * (size_t)(c->nseq + 1));
        for (int s = 0; s <= c->nseq; s++) d->v[CU][s] = (double)d->cu[s];
    }
}

void data_free(cv_data *d) {
    for (int i = 0; i < NT; i++) free(d->v[i]);
    memset(d, 0, sizeof *d);
}

void inst_make(cv_inst *in, const cv_case *c, cv_data *d, mamba2_dtype_t dt, int pad) {
    memset(in, 0, sizeof *in);
    in->c = *c;
    in->d = d;
    in->dt = dt;
    for (int id = 0; id < NT; id++) {
        if (!present(c, id)) continue;
        int64_t sh[3];
        int r = shape_of(c, d, id, sh);
        mamba2_dtype_t t = id == CU ? (c->cu64 ? MAMBA2_DTYPE_I64 : MAMBA2_DTYPE_I32) : dt;
        gt_make_a(&in->g[id], t, r, sh, id == CU ? 0 : pad, id >= OUT, id >= OUT ? NULL : d->v[id],
                  c->align64);
    }
    in->opts = mamba2_conv1d_options_default();
    in->opts.bias = c->bias ? &in->g[BIAS].t : NULL;
    in->opts.initial_conv_state = c->init ? &in->g[INIT].t : NULL;
    in->opts.cu_seqlens = c->nseq > 0 ? &in->g[CU].t : NULL;
    in->opts.activation = c->silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    in->grads.dx = in->g[DX].present ? &in->g[DX].t : NULL;
    in->grads.dweight = in->g[DW].present ? &in->g[DW].t : NULL;
    in->grads.dbias = in->g[DB].present ? &in->g[DB].t : NULL;
    in->grads.dinitial_conv_state = in->g[DINIT].present ? &in->g[DINIT].t : NULL;
}

void inst_free(cv_inst *in) {
    for (int id = 0; id < NT; id++) gt_free(&in->g[id]);
}

const mamba2_tensor_t *T_(cv_inst *in, int id) { return in->g[id].present ? &in->g[id].t : NULL; }

mamba2_status_t inst_forward(mamba2_context_t *ctx, cv_inst *in) {
    return mamba2_conv1d_forward(ctx, T_(in, OUT), T_(in, FINAL), T_(in, X), T_(in, WT), &in->opts);
}

/* ws_mode 0: the library allocates; 1: exactly the queried size, with a guarded tail. */
mamba2_status_t inst_backward(mamba2_context_t *ctx, cv_inst *in, int ws_mode) {
    if (ws_mode == 0)
        return mamba2_conv1d_backward(ctx, &in->grads, T_(in, DOUT), T_(in, DFINAL), T_(in, X),
                                      T_(in, WT), &in->opts, NULL, 0);
    size_t need = 0;
    mamba2_status_t st = mamba2_conv1d_backward_workspace_size(
        ctx, &in->grads, T_(in, DOUT), T_(in, DFINAL), T_(in, X), T_(in, WT), &in->opts, &need);
    if (st != MAMBA2_STATUS_OK) return st;
    unsigned char *ws = th_ws_alloc(need);
    st = mamba2_conv1d_backward(ctx, &in->grads, T_(in, DOUT), T_(in, DFINAL), T_(in, X),
                                T_(in, WT), &in->opts, need ? ws : NULL, need);
    if (!th_ws_tail_ok(ws, need, NULL)) th_fail("workspace written past its queried size (%zu bytes)", need);
    free(ws);
    return st;
}

/* Every buffer's guards, gaps and inputs intact; fails the open unit otherwise. */
int inst_check_memory(const cv_inst *in) {
    char msg[256];
    for (int id = 0; id < NT; id++)
        if (in->g[id].present && !gt_check(&in->g[id], tname[id], msg, sizeof msg)) {
            th_fail("%s", msg);
            return 0;
        }
    return 1;
}

double *read_out(const cv_inst *in, int id) {
    double *v = (double *)th_xmalloc((size_t)(in->g[id].n > 0 ? in->g[id].n : 1) * sizeof(double));
    gt_read(&in->g[id], v);
    return v;
}

const char *g_isa[4];
int g_nisa;

void find_isas(void) {
    static const char *const all[4] = {"avx512", "avx2", "neon", "scalar"};
    mamba2_context_t *ctx = th_ctx(MAMBA2_BACKEND_CPU, 1, NULL);
    for (int i = 0; i < 4; i++) {
        if (mamba2_context_force_isa(ctx, all[i]) == MAMBA2_STATUS_OK)
            g_isa[g_nisa++] = all[i];
        else
            printf("note: kernel set %s skipped: %s\n", all[i], mamba2_last_error());
    }
    mamba2_context_destroy(ctx);
}

void results_free(results *r) {
    for (int i = 0; i < NT; i++) free(r->v[i]);
}

int run_case(mamba2_context_t *ctx, cv_inst *in, results *res, int ws_mode) {
    memset(res, 0, sizeof *res);
    mamba2_status_t st = inst_forward(ctx, in);
    if (!th_expect(st == MAMBA2_STATUS_OK, "forward: %s: %s", mamba2_status_string(st),
                   mamba2_last_error()))
        return 0;
    st = inst_backward(ctx, in, ws_mode);
    if (!th_expect(st == MAMBA2_STATUS_OK, "backward: %s: %s", mamba2_status_string(st),
                   mamba2_last_error()))
        return 0;
    if (!inst_check_memory(in)) return 0;
    for (int id = OUT; id < NT; id++)
        if (in->g[id].present) res->v[id] = read_out(in, id);
    return 1;
}

mamba2_status_t do_step(mamba2_context_t *ctx, step_io *s, int has_idx, int silu) {
    mamba2_conv1d_step_options_t o = mamba2_conv1d_step_options_default();
    o.bias = s->bias.present ? &s->bias.t : NULL;
    o.state_indices = has_idx ? &s->idx.t : NULL;
    o.activation = silu ? MAMBA2_ACTIVATION_SILU : MAMBA2_ACTIVATION_NONE;
    return mamba2_conv1d_step(ctx, &s->out.t, &s->cache.t, &s->x.t, &s->w.t, &o);
}

int step_check_memory(const step_io *s) {
    char msg[256];
    const gt *g[6] = {&s->x, &s->out, &s->cache, &s->idx, &s->bias, &s->w};
    const char *nm[6] = {"x", "out", "conv_cache", "state_indices", "bias", "weight"};
    for (int i = 0; i < 6; i++)
        if (g[i]->present && !gt_check(g[i], nm[i], msg, sizeof msg)) {
            th_fail("%s", msg);
            return 0;
        }
    return 1;
}

void step_free(step_io *s) {
    gt_free(&s->x);
    gt_free(&s->out);
    gt_free(&s->cache);
    gt_free(&s->idx);
    gt_free(&s->bias);
    gt_free(&s->w);
}
