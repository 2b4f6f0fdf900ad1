/*
 * fuzz_target.c — the libFuzzer entry point (built with MAMBA2C_FUZZ=ON, clang).
 */
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    m2f_init(); /* outside any input's time limit: an OpenCL context compiles its kernels */
    return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return m2f_run(data, size); }
