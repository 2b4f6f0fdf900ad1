/*
 * test_kernel_sigs.c — the signature table of the GPU host layer (m2g_kernel_sigs,
 * m2g_kernel_params, m2g_kernel_local: generated from the kernel prototypes by
 * cmake/kernel_sigs.cmake) and the launch check built on it (m2g_check_args,
 * src/gpu/gpu_common.c). No device needed.
 *   - every kernel of list.h and tc_list.h has a signature, of the kinds M L I F only, and a
 *     work-group shape;
 *   - the table equals the prototypes of the kernel files given on the command line, names
 *     and kinds in order, read here by a parser of its own (not the generator's): a table
 *     with two parameters swapped, one dropped or renamed fails here, whether the generator
 *     or a hand edit put it there;
 *   - each tensor-core twin that the drivers launch on its portable kernel's parameters has
 *     that kernel's parameter list exactly;
 *   - an argument list built as its prototype reads passes the launch check; planted faults
 *     fail with INTERNAL_ERROR and a message naming the kernel: two arguments of different
 *     kinds swapped (the first such pair, and the last), one argument missing, one too many.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "harness.h"

/* ---- the prototypes of the kernel files, parsed here ----------------------------------- */

#define MAXK 128
typedef struct proto {
    char name[96];
    char sig[M2G_MAX_ARGS + 2];
    char params[2048]; /* names, comma-separated */
} proto;
static proto protos[MAXK];
static int nprotos;

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    if (t && fread(t, 1, (size_t)n, f) != (size_t)n) {
        free(t);
        t = NULL;
    }
    if (t) t[n] = 0;
    fclose(f);
    return t;
}

/* comments and line continuations to spaces, in place */
static void strip(char *t) {
    for (char *p = t; *p; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            memset(p, ' ', (size_t)(end - p));
            p = end - 1;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
            p--;
        } else if (p[0] == '\\' && p[1] == '\n') {
            p[0] = p[1] = ' ';
        }
    }
}

static const char *skip_ws(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}
static int ident(const char *p, char *out, size_t cap) {
    size_t n = 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
    if (n == 0 || n >= cap) return 0;
    memcpy(out, p, n);
    out[n] = 0;
    return (int)n;
}

/* the body of `#define <name> ...` in t (one line after strip), or NULL */
static const char *macro_body(const char *t, const char *name, size_t *len) {
    for (const char *p = strstr(t, "#define"); p; p = strstr(p + 1, "#define")) {
        const char *q = skip_ws(p + 7);
        char id[96];
        const int n = ident(q, id, sizeof id);
        if (n && !strcmp(id, name)) {
            q += n;
            const char *e = strchr(q, '\n');
            *len = e ? (size_t)(e - q) : strlen(q);
            return q;
        }
    }
    return NULL;
}

/* one parameter list (text between the parentheses) into pr */
static int parse_params(const char *s, size_t len, proto *pr) {
    char buf[8192];
    if (len >= sizeof buf) return 0;
    memcpy(buf, s, len);
    buf[len] = 0;
    size_t ns = 0, np = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *e = tok + strlen(tok);
        while (e > tok && isspace((unsigned char)e[-1])) *--e = 0;
        char *b = (char *)skip_ws(tok);
        char *nm = e;
        while (nm > b && (isalnum((unsigned char)nm[-1]) || nm[-1] == '_')) nm--;
        char kind;
        const char *ty = b;
        if (!strncmp(ty, "M2K_GLOBAL", 10)) ty = skip_ws(ty + 10);
        if (!strncmp(ty, "const ", 6)) ty = skip_ws(ty + 6);
        if (memchr(b, '*', (size_t)(nm - b))) kind = 'M';
        else if (!strncmp(ty, "m2_i64 ", 7)) kind = 'L';
        else if (!strncmp(ty, "m2_i32 ", 7)) kind = 'I';
        else if (!strncmp(ty, "float ", 6)) kind = 'F';
        else return 0;
        if (ns + 1 >= sizeof pr->sig || np + strlen(nm) + 2 >= sizeof pr->params) return 0;
        pr->sig[ns++] = kind;
        if (np) pr->params[np++] = ',';
        memcpy(pr->params + np, nm, strlen(nm));
        np += strlen(nm);
    }
    pr->sig[ns] = 0;
    pr->params[np] = 0;
    return ns > 0;
}

/* every `M2K_KERNEL void name(...)` and `__global__ void [__launch_bounds__(..)] name(...)` */
static int parse_file(const char *path) {
    char *t = read_text(path);
    if (!t) return 0;
    strip(t);
    static const char *const marks[2] = {"M2K_KERNEL", "__global__"};
    int ok = 1;
    for (int m = 0; m < 2; m++) {
        for (const char *p = strstr(t, marks[m]); p; p = strstr(p + 1, marks[m])) {
            const char *q = skip_ws(p + strlen(marks[m]));
            if (strncmp(q, "void", 4) || !isspace((unsigned char)q[4])) continue; /* a #define */
            q = skip_ws(q + 4);
            if (!strncmp(q, "__launch_bounds__", 17)) {
                q = strchr(q, ')');
                if (!q) break;
                q = skip_ws(q + 1);
            }
            if (nprotos >= MAXK) return 0;
            proto *pr = &protos[nprotos];
            const int n = ident(q, pr->name, sizeof pr->name);
            q = skip_ws(q + n);
            const char *e = *q == '(' ? strchr(q, ')') : NULL;
            if (!n || !e) {
                ok = 0;
                continue;
            }
            q = skip_ws(q + 1);
            char id[96];
            const int k = ident(q, id, sizeof id);
            size_t len = (size_t)(e - q);
            const char *body = q;
            if (k && skip_ws(q + k) == e) { /* one identifier: a parameter-list macro */
                body = macro_body(t, id, &len);
                if (!body) {
                    ok = 0;
                    continue;
                }
            }
            if (!parse_params(body, len, pr)) {
                ok = 0;
                continue;
            }
            nprotos++;
        }
    }
    free(t);
    return ok;
}

static const proto *find_proto(const char *name) {
    for (int i = 0; i < nprotos; i++)
        if (!strcmp(protos[i].name, name)) return &protos[i];
    return NULL;
}

/* 1 when the table's entry for id reads as prototype pr (kinds and names in order) */
static int same_as_proto(const char *sig, const char *params, const proto *pr) {
    return pr && !strcmp(sig, pr->sig) && !strcmp(params, pr->params);
}

/* the tensor-core twins launched on their portable kernel's parameters (src/cuda/ssd_tc.c) */
static const int twins[][2] = {
    {M2G_K_m2_ssd_bwd_dx_tf32_tc128, M2G_K_m2_ssd_bwd_dx_16x16},
    {M2G_K_m2_ssd_bwd_dx_bf16_tc128, M2G_K_m2_ssd_bwd_dx_16x16},
    {M2G_K_m2_ssd_bwd_dbc_tf32_tc128, M2G_K_m2_ssd_bwd_dbc_16x16},
    {M2G_K_m2_ssd_bwd_dbc_bf16_tc128, M2G_K_m2_ssd_bwd_dbc_16x16},
    {M2G_K_m2_ssd_bwd_tok_3xtf32_tc128, M2G_K_m2_ssd_bwd_tok_16x16},
    {M2G_K_m2_ssd_bwd_E_3xtf32_tc128, M2G_K_m2_ssd_bwd_E_16x16},
    {M2G_K_m2_ssd_chunk_state_3xtf32_tc128, M2G_K_m2_ssd_chunk_state_16x16},
    {M2G_K_m2_ssd_bmm_chunk_3xtf32_tc128, M2G_K_m2_ssd_bmm_chunk_16x16},
};

/* ---- the launch check --------------------------------------------------------------------- */

static void build(m2g_args *a, const char *sig) {
    a->n = 0;
    for (const char *p = sig; *p; p++) {
        if (*p == 'M') m2g_arg_mem(a, (m2g_mem)(uintptr_t)0x1000);
        if (*p == 'L') m2g_arg_i64(a, 7);
        if (*p == 'I') m2g_arg_i32(a, 3);
        if (*p == 'F') m2g_arg_f32(a, 0.5f);
    }
}

static void expect_refused(int id, const m2g_args *a, const char *what) {
    mamba2_status_t st = m2g_check_args(id, a);
    const char *msg = mamba2_last_error();
    th_expect(st == MAMBA2_STATUS_INTERNAL_ERROR && strstr(msg, m2g_kernel_names[id]),
              "%s: status %d, message '%s'", what, (int)st, msg);
}

int main(int argc, char **argv) {
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-q")) {
            th_set_verbose(0);
            continue;
        }
        th_begin("prototypes of %s", argv[i]);
        th_expect(parse_file(argv[i]), "cannot read or parse every kernel prototype");
        th_end();
        nfiles++;
    }
    th_begin("kernel files given");
    th_expect(nfiles > 0, "usage: test_kernel_sigs [-q] <kernel file>...");
    th_end();
    /* the comparison itself refuses a table with two parameters swapped */
    th_begin("a planted swap in a table entry is refused");
    {
        const proto *pr = find_proto(m2g_kernel_names[M2G_K_m2_ssd_chunk_cumsum_wi64]);
        if (th_expect(pr != NULL, "no prototype of m2_ssd_chunk_cumsum_wi64")) {
            char sig[sizeof pr->sig], par[sizeof pr->params];
            strcpy(sig, pr->sig);
            strcpy(par, pr->params);
            th_expect(same_as_proto(sig, par, pr), "the prototype against itself");
            /* "ct,nc,H,Q,...": nc and H swapped (same kind: only the names see it) */
            memcpy(par + 3, "H,nc", 4);
            th_expect(!same_as_proto(sig, par, pr), "nc and H swapped not seen");
        }
    }
    th_end();
    int swaps = 0;
    for (int id = 0; id < M2G_NUM_ALL_KERNELS; id++) {
        const char *sig = m2g_kernel_sigs[id];
        th_begin("%s (%d parameters)", m2g_kernel_names[id], sig ? (int)strlen(sig) : -1);
        if (!th_expect(sig && *sig && strspn(sig, "MLIF") == strlen(sig) &&
                           strlen(sig) <= M2G_MAX_ARGS,
                       "signature '%s'", sig ? sig : "(null)")) {
            th_end();
            continue;
        }
        const proto *pr = find_proto(m2g_kernel_names[id]);
        th_expect(same_as_proto(sig, m2g_kernel_params[id], pr),
                  "table '%s' (%s) but the prototype in the kernel files is '%s' (%s)", sig,
                  m2g_kernel_params[id], pr ? pr->sig : "(none)", pr ? pr->params : "");
        const size_t *l = m2g_kernel_local[id];
        th_expect(l[0] * l[1] * l[2] >= 1 && l[0] * l[1] * l[2] <= 1024, "work-group %zux%zux%zu",
                  l[0], l[1], l[2]);
        m2g_args a;
        build(&a, sig);
        th_expect(m2g_check_args(id, &a) == MAMBA2_STATUS_OK, "as the prototype: %s",
                  mamba2_last_error());
        const int n = (int)strlen(sig);
        for (int pass = 0; pass < 2; pass++) { /* the first and the last differing pair */
            int i = -1;
            for (int k = 0; k + 1 < n; k++)
                if (sig[k] != sig[k + 1] && (i < 0 || pass == 1)) i = k;
            if (i < 0) break;
            m2g_args s = a;
            const m2g_arg t = s.a[i];
            s.a[i] = s.a[i + 1], s.a[i + 1] = t;
            char what[64];
            snprintf(what, sizeof what, "arguments %d and %d swapped", i, i + 1);
            expect_refused(id, &s, what);
            swaps++;
        }
        m2g_args s = a;
        s.n--;
        expect_refused(id, &s, "one argument missing");
        s = a;
        m2g_arg_i32(&s, 1);
        expect_refused(id, &s, "one argument too many");
        th_end();
    }
    for (size_t i = 0; i < sizeof twins / sizeof twins[0]; i++) {
        const int t = twins[i][0], p = twins[i][1];
        th_begin("%s launched as %s", m2g_kernel_names[t], m2g_kernel_names[p]);
        th_expect(!strcmp(m2g_kernel_sigs[t], m2g_kernel_sigs[p]) &&
                      !strcmp(m2g_kernel_params[t], m2g_kernel_params[p]),
                  "parameters differ: %s / %s", m2g_kernel_params[t], m2g_kernel_params[p]);
        th_end();
    }
    th_note("%d kernels (%d tensor-core), %d prototypes read, %d planted swaps refused",
            M2G_NUM_ALL_KERNELS, M2G_NUM_TC_KERNELS, nprotos, swaps);
    return th_finish();
}
