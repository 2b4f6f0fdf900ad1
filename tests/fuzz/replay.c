/*
 * replay.c — runs fuzz inputs once each without libFuzzer, so the checked-in seed corpus and
 * the minimised regressions run as a normal ctest with any compiler:
 *   m2fuzz_replay DIR_OR_FILE...
 *   m2fuzz_replay --random N SEED DIR   N inputs mutated from DIR's files (a smoke run of the
 *                                       harness where libFuzzer is not available)
 * Each input is decoded and checked exactly as under libFuzzer; a violated check aborts.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "m2fuzz_replay: cannot open %s\n", path);
        return 1;
    }
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (getenv("M2FUZZ_VERBOSE")) fprintf(stderr, "%s\n", path);
    m2f_run(buf, n);
    return 0;
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint64_t rng;
static uint64_t next(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 11;
}

/* N mutants of the seeds: byte flips in the header, then appended random records */
static int random_run(long n, uint64_t seed, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 1;
    static uint8_t seeds[512][64];
    static size_t lens[512];
    int ns = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && ns < 512;) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        lens[ns] = fread(seeds[ns], 1, sizeof seeds[ns], f);
        fclose(f);
        ns++;
    }
    closedir(d);
    if (ns == 0) return 1;
    rng = seed;
    for (long i = 0; i < n; i++) {
        uint8_t in[256];
        int k = (int)(next() % (uint64_t)ns);
        size_t len = lens[k];
        memcpy(in, seeds[k], len);
        int flips = (int)(next() % 3);
        for (int f = 0; f < flips && len > 1; f++) in[1 + next() % (len - 1)] = (uint8_t)next();
        int recs = (int)(next() % 4);
        for (int r = 0; r < recs && len + 4 <= sizeof in; r++) {
            uint64_t v = next();
            in[len] = (v & 0x300) == 0x300 ? (uint8_t)(0xF0 + (v & 3)) : (uint8_t)(v & 0x1F);
            in[len + 1] = (uint8_t)(v >> 16);
            in[len + 2] = (uint8_t)(v >> 24);
            in[len + 3] = (uint8_t)(v >> 32);
            len += 4;
        }
        m2f_run(in, len);
    }
    printf("m2fuzz_replay: %ld random inputs, all checks passed (GPU: %ld calls, %ld accepted, %ld "
           "compared; %ld compared in all)\n", n, m2f_count.gpu_calls, m2f_count.gpu_accepted,
           m2f_count.gpu_compared, m2f_count.compared);
    return 0;
}

int main(int argc, char **argv) {
    m2f_init();
    int files = 0, bad = 0;
    if (argc == 5 && strcmp(argv[1], "--random") == 0)
        return random_run(atol(argv[2]), strtoull(argv[3], NULL, 0), argv[4]);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "m2fuzz_replay: no such file or directory: %s\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (n + 1) * sizeof *names);
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp);
        for (size_t k = 0; k < n; k++) {
            bad |= run_file(names[k]);
            free(names[k]);
            files++;
        }
        free(names);
    }
    printf("m2fuzz_replay: %d inputs, %s (GPU: %ld calls, %ld accepted, %ld compared with the "
           "reference; %ld calls compared in all)\n", files, bad ? "FAILED" : "all checks passed",
           m2f_count.gpu_calls, m2f_count.gpu_accepted, m2f_count.gpu_compared, m2f_count.compared);
    return bad;
}
