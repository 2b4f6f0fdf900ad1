/*
 * gen_seeds.c — writes the seed corpus: for every op, valid calls over both backends, every
 * activation dtype the op takes, and a spread of sizes and options. Each candidate is run
 * through the harness and kept only when the library accepts it, so the corpus starts from
 * calls that reach the kernels. Deterministic:
 *   m2fuzz_gen_seeds OUTDIR      (tests/fuzz/corpus is its output, checked in)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define PER_OP 10

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    uint64_t st = 0x6d616d6261326300ull;
    int total = 0, fail = 0;
    for (int op = 0; op < M2F_NOPS; op++) {
        int kept = 0;
        for (int k = 0; k < 400 && kept < PER_OP; k++) {
            uint8_t in[21];
            for (int i = 0; i < 21; i++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                in[i] = (uint8_t)(st >> 56);
            }
            in[0] = (uint8_t)op;
            /* backend alternates; threads 1..3; isa auto/scalar/avx2 */
            in[1] = (uint8_t)((kept & 1) | ((kept % 3) << 1) | ((kept % 3) << 3));
            /* workspace mode exact / NULL / misaligned; tame values; dtype cycles */
            static const uint8_t wsm[3] = {0, 1, 3};
            in[2] = (uint8_t)(wsm[kept % 3] | (k % 4) << 5);
            if (kept == 0) memset(in + 17, 0, 4);      /* no options */
            if (kept == 1) memset(in + 17, 0xFF, 4);   /* every option */
            m2f_run(in, sizeof in);
            if (!m2f_last_accepted) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%02d-%s-%d", argv[1], op, m2f_ops[op]->name, kept);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(in, 1, sizeof in, f) != sizeof in) {
                fprintf(stderr, "cannot write %s\n", path);
                return 1;
            }
            fclose(f);
            kept++;
            total++;
        }
        if (kept < PER_OP) {
            fprintf(stderr, "op %s: only %d accepted seeds\n", m2f_ops[op]->name, kept);
            fail = 1;
        }
    }
    printf("m2fuzz_gen_seeds: %d seeds\n", total);
    return fail;
}
