/*
 * test_kernel_sigs.c — the launch check of the GPU host layer (m2g_check_args,
 * src/gpu/gpu_common.c) against the kernel prototypes (m2g_kernel_sigs, generated from the
 * kernel files by cmake/kernel_sigs.cmake). No device needed: it checks the table and the
 * check itself.
 *   - every kernel of list.h has a signature, of the kinds M L I F only;
 *   - an argument list built as its prototype reads passes;
 *   - planted faults fail with INTERNAL_ERROR and a message naming the kernel: two arguments
 *     of different kinds swapped (the first such pair, and the last), one argument missing,
 *     one too many.
 */
#include <stdio.h>
#include <string.h>

#include "gpu/gpu.h"
#include "harness.h"

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
    if (argc > 1 && !strcmp(argv[1], "-q")) th_set_verbose(0);
    int swaps = 0;
    for (int id = 0; id < M2G_NUM_KERNELS; id++) {
        const char *sig = m2g_kernel_sigs[id];
        th_begin("%s (%d parameters)", m2g_kernel_names[id], sig ? (int)strlen(sig) : -1);
        if (!th_expect(sig && *sig && strspn(sig, "MLIF") == strlen(sig) &&
                           strlen(sig) <= M2G_MAX_ARGS,
                       "signature '%s'", sig ? sig : "(null)")) {
            th_end();
            continue;
        }
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
    th_note("%d kernels, %d planted swaps refused", M2G_NUM_KERNELS, swaps);
    return th_finish();
}
