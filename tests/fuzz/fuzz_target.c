/*
 * fuzz_target.c — the libFuzzer entry point (built with MAMBA2C_FUZZ=ON, clang).
 */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return m2f_run(data, size); }
