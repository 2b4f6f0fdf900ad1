#!/usr/bin/env bash
# run_fuzz.sh — the bounded libFuzzer run of `make test-fuzz`:
#   tests/fuzz/run_fuzz.sh [BUILD_DIR]   (env: FUZZ_TIME seconds, default 180)
# The OpenCL (M2FUZZ_GPU=opencl, where PoCL or another OpenCL device is installed) and
# differential (M2FUZZ_DIFF=1) modes are on unless the environment sets them empty
# (M2FUZZ_GPU= M2FUZZ_DIFF= make test-fuzz): tests/fuzz/README.md, "Modes".
# Installs clang + libFuzzer from Debian when missing, builds the m2fuzz target with
# -DMAMBA2C_FUZZ=ON, copies the checked-in corpus and regressions into a scratch directory
# (the checked-in files are never modified) and fuzzes for FUZZ_TIME seconds. Any crash,
# leak, sanitizer report, failed contract check or timeout (> 10 s per input) fails the run;
# the reproducer is left in the scratch directory, whose path is printed. With the OpenCL mode on,
# the limit per input is 60 s: PoCL compiles a kernel for its local size at its first launch,
# seconds each with an empty kernel cache (a newcomer's machine).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build-fuzz}"
time_s="${FUZZ_TIME:-180}"

have_fuzzer() {
    command -v clang >/dev/null 2>&1 || return 1
    local t
    t="$(mktemp -d)"
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' >"$t/t.c"
    clang -fsanitize=fuzzer,address,undefined "$t/t.c" -o "$t/t" >/dev/null 2>&1
    local ok=$?
    rm -rf "$t"
    return $ok
}
if ! have_fuzzer; then
    echo "run_fuzz: clang with libFuzzer missing; installing clang-14 libclang-rt-14-dev libfuzzer-14-dev"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq clang-14 libclang-rt-14-dev libfuzzer-14-dev
    command -v clang >/dev/null 2>&1 || $sudo_cmd ln -sf "$(command -v clang-14)" /usr/local/bin/clang
    have_fuzzer || { echo "run_fuzz: clang -fsanitize=fuzzer still does not link"; exit 1; }
fi

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DMAMBA2C_FUZZ=ON \
    -DMAMBA2C_BUILD_BENCH=OFF -DMAMBA2C_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" >/dev/null
cmake --build "$build" -j "${JOBS:-$(nproc 2>/dev/null || echo 2)}" --target m2fuzz

scratch="$(mktemp -d "${TMPDIR:-/tmp}/m2fuzz.XXXXXX")"
mkdir -p "$scratch/corpus" "$scratch/artifacts"
cp "$here"/corpus/* "$scratch/corpus/"
cp "$here"/regressions/* "$scratch/corpus/" 2>/dev/null || true
echo "run_fuzz: fuzzing for ${time_s}s in $scratch"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
# the GPU and differential modes (fuzz.h): input bit 5 runs the call on one OpenCL context
# (PoCL, where it is installed), and every valid call is checked against the reference;
# PoCL's own leaks are suppressed (tests/fuzz/lsan_fuzz.supp)
export M2FUZZ_GPU="${M2FUZZ_GPU-opencl}" M2FUZZ_DIFF="${M2FUZZ_DIFF-1}"
limit=10
[ -n "$M2FUZZ_GPU" ] && limit=60
export LSAN_OPTIONS="suppressions=$here/lsan_fuzz.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
# a failed contract check aborts from the harness (m2f_fail), where libFuzzer writes no
# crash file: the harness saves the input itself
export M2FUZZ_DUMP="${M2FUZZ_DUMP:-$scratch/artifacts/failed-check-input}"
if "$build/tests/fuzz/m2fuzz" -max_total_time="$time_s" -timeout="$limit" -rss_limit_mb=2048 -max_len=256 \
    -print_final_stats=1 -artifact_prefix="$scratch/artifacts/" "$scratch/corpus" \
    >"$scratch/log" 2>&1; then
    tail -n 20 "$scratch/log"
    echo "run_fuzz: passed (no crash, leak or timeout)"
    rm -rf "$scratch"
else
    tail -n 80 "$scratch/log"
    echo "run_fuzz: FAILED; reproducer(s) in $scratch/artifacts, log in $scratch/log"
    exit 1
fi
