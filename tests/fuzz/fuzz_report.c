/*
 * fuzz_report.c — what a failed check prints: the message, mamba2_last_error(), the decoded
 * case (op, backend, every tensor's dtype, shape, strides, aliasing and index values, the
 * options and global flags set); then the input is saved where M2FUZZ_DUMP says (libFuzzer
 * writes no file for the harness's abort) and the process aborts.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"

static void describe(m2f_case *c) {
    fprintf(stderr, "m2fuzz case: op %s backend %s threads %d isa %d ws %d vmode %d dtype %d\n",
            m2f_ops[c->op]->name, c->backend == 2 ? "gpu" : c->backend ? "ref" : "cpu", c->threads, c->isa, c->wsmode,
            c->vmode, (int)c->adt);
    for (int i = 0; i < c->ns; i++) {
        const m2f_slot *s = &c->s[i];
        const mamba2_tensor_t *t = &s->t;
        fprintf(stderr, "  [%d] %-18s %s%s", i, s->name,
                s->role == M2F_OUT ? "out  " : s->role == M2F_INOUT ? "inout" : s->role == M2F_IDX ? "idx  " : "in   ",
                s->present ? "" : " (absent)");
        if (!s->present) {
            fprintf(stderr, "\n");
            continue;
        }
        fprintf(stderr, " dtype %d rank %d shape [", (int)t->dtype, (int)t->rank);
        for (int k = 0; k < t->rank && k < MAMBA2_MAX_RANK; k++)
            fprintf(stderr, k ? ",%lld" : "%lld", (long long)t->shape[k]);
        fprintf(stderr, "] stride [");
        for (int k = 0; k < t->rank && k < MAMBA2_MAX_RANK; k++)
            fprintf(stderr, k ? ",%lld" : "%lld", (long long)t->stride[k]);
        fprintf(stderr, "]%s%s%s", s->null_data ? " NULL" : "", s->big ? " big" : "",
                s->bad ? " bad" : "");
        if (s->host != i) fprintf(stderr, " alias-of %d +%lld", s->host, (long long)s->alias_off);
        if (s->misalign) fprintf(stderr, " misalign %d", s->misalign);
        if (s->role == M2F_IDX && s->nidx) {
            fprintf(stderr, " values");
            for (int64_t k = 0; k < s->nidx && k < 12; k++) fprintf(stderr, " %lld", (long long)s->idx[k]);
        }
        fprintf(stderr, "\n");
    }
    for (int k = 0; k < M2F_O_NKINDS; k++)
        if (c->oset[k]) fprintf(stderr, "  option %d = value #%d\n", k, c->oval[k] & 15);
    for (int k = 0; k < M2F_G_NKINDS; k++)
        if (c->gflag[k]) fprintf(stderr, "  global flag %d\n", k);
}

void m2f_fail(m2f_case *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "m2fuzz FAILURE: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n  last_error: \"%s\"\n", mamba2_last_error());
    va_end(ap);
    describe(c);
    const char *dump = getenv("M2FUZZ_DUMP"); /* where to save the failing input */
    if (dump) {
        FILE *f = fopen(dump, "wb");
        if (f) {
            fwrite(c->in, 1, c->n, f);
            fclose(f);
        }
    }
    abort();
}

