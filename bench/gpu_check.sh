#!/usr/bin/env bash
# gpu_check.sh — the one-shot check for a machine with an NVIDIA GPU (docs/gpu.md §5a). Needs
# CMake, a C compiler, nvcc, the driver, Python 3 with a CUDA build of torch (and Triton for
# mamba_ssm); downloads nothing; ends within ~570 s. In order, each phase with a deadline:
#   0. preflight: GPU, driver, clocks, nvcc, torch and Triton versions (preflight.txt);
#   1. build (Release, CUDA on) into a scratch build dir                          (until 120 s);
#   2. the CUDA test suite under CUDA_LAUNCH_BLOCKING=1: test_cuda_device, test_ops (the SSD
#      ops, then the others), test_ssd_half, test_step_layouts (--backend cuda), the fat-binary kernel
#      list check, the tile emulation; the device and SSD tests again with the tensor-core
#      path (MAMBA2C_CUDA_TC=1); python/tests/test_cuda_tensors.py               (until 250 s);
#   3. compute-sanitizer memcheck, racecheck and synccheck on test_cuda_device, without and with
#      the tensor-core path                                                      (until 340 s);
#   4. gpu-bench (C, CUDA device mode, CUDA events): portable kernels, then tensor cores
#      (until 400 s);
#   5. bench/gpu_compare.py: mamba2c's Python op vs mamba_ssm's Triton (from --mamba-ssm DIR)
#      vs torch, f32 and bf16, fwd and fwdbwd, varlen rows, ratios, roofline, geometric means
#      (until 570 s).
# An exit trap writes $OUT/summary.txt (every phase's line and the tables) and
# $OUT/logs.tar.gz (every log), since only a few files come back from the GPU machine.
#
# Usage: bench/gpu_check.sh [--out DIR] [--build-dir DIR] [--python PY] [--mamba-ssm DIR]
#                           [--cases LIST] [--skip-build] [--skip-tests] [--cpu-dry-run]
#                           [--budget S]
#   --budget: the whole run's seconds (default 570); the phase deadlines above scale with it.
#   --out: default $OUT, else <build dir>/gpu_check. --cases: gpu-bench's and gpu_compare's
#   cases (default: a first pass of 14, FIRST_PASS below; all, std or a,b,...).
#   --cpu-dry-run: no GPU needed (make test runs it): the CUDA programs must report the
#   missing device cleanly, gpu-bench must exit 77, and gpu_compare.py runs on the CPU.
# Exit status: 0 when every phase passed.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpucheck
PY=${PYTHON:-python3}
OUTDIR=${OUT:-}
MSSM=${MAMBA_SSM_PATH:-}
FIRST_PASS=seq_4096,heavy_h256,batch_1,seq_1024,head_64,headdim_128,dstate_16,group_1,batch_16,seq_16384,logical_chunk256,cube_n128_c128,generic_tail_l513,tiny
CASES=$FIRST_PASS
SKIP_BUILD=0
SKIP_TESTS=0
DRY=0
BUDGET=570
while [ $# -gt 0 ]; do
    case "$1" in
    --out) OUTDIR=$2; shift 2 ;;
    --build-dir) BUILD=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --mamba-ssm) MSSM=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --skip-tests) SKIP_TESTS=1; shift ;;
    --cpu-dry-run) DRY=1; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    -h | --help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$BUDGET" in '' | *[!0-9]*) echo "gpu_check.sh: --budget takes whole seconds" >&2; exit 2 ;; esac
at() { echo $((BUDGET * $1 / 570)); } # a phase deadline of the 570 s plan, scaled to --budget
E_BUILD=$(at 120) E_TESTS=$(at 250) E_SAN=$(at 340) E_BP=$(at 362) E_BS=$(at 377) E_BT=$(at 392)
E_BTS=$(at 405) E_PROF=$(at 425)
E_CMP=$(at 570)
case "$BUILD" in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
[ -n "$OUTDIR" ] || OUTDIR=$BUILD/gpu_check
case "$OUTDIR" in /*) ;; *) OUTDIR=$PWD/$OUTDIR ;; esac
LOG=$OUTDIR/logs
mkdir -p "$LOG"
START=$(date +%s)
FAILED=0
PHASES=$OUTDIR/phases.txt
: >"$PHASES"
elapsed() { echo $(($(date +%s) - START)); }
say() { printf '[gpu_check %4ss] %s\n' "$(elapsed)" "$*" | tee -a "$PHASES"; }
left() { # seconds left until $1 s into the run (at least 10)
    local l=$(($1 - $(elapsed)))
    [ "$l" -lt 10 ] && l=10
    echo "$l"
}
finish() { # the exit trap: summary.txt and the log archive, whatever happened
    {
        echo "gpu_check: $([ "$FAILED" = 0 ] && echo 'all phases passed' || echo 'SOME PHASES FAILED')" \
             "in $(elapsed) s ($([ "$DRY" = 1 ] && echo 'CPU dry run' || echo 'GPU run'))"
        cat "$OUTDIR/preflight.txt" 2>/dev/null
        cat "$PHASES"
        for f in bench_ours.txt compare.txt profile.txt; do
            [ -s "$OUTDIR/$f" ] && { echo; cat "$OUTDIR/$f"; }
        done
    } >"$OUTDIR/summary.txt" 2>&1
    tar -czf "$OUTDIR/logs.tar.gz" -C "$OUTDIR" logs 2>/dev/null
}
trap finish EXIT

# ---- 0. preflight ---------------------------------------------------------------------------
{
    echo "root $ROOT, build dir $BUILD, out $OUTDIR, $(nproc 2>/dev/null) cores, $(date -u +%FT%TZ)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit \
            --format=csv 2>&1 | sed 's/^/GPU: /'
    else
        echo "GPU: nvidia-smi not found"
    fi
    NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    [ -x "$NVCC" ] && echo "nvcc: $("$NVCC" --version | tail -2 | head -1)" || echo "nvcc: not found"
    command -v compute-sanitizer >/dev/null 2>&1 && echo "compute-sanitizer: $(command -v compute-sanitizer)" \
        || echo "compute-sanitizer: not found"
    "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "devices", torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>&1
    "$PY" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
    [ -n "$MSSM" ] && echo "mamba_ssm copy: $MSSM" || echo "mamba_ssm copy: none given (--mamba-ssm)"
} >"$OUTDIR/preflight.txt" 2>&1
sed 's/^/[gpu_check preflight] /' "$OUTDIR/preflight.txt"
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    say "FAIL: $PY cannot import torch"
    FAILED=1
    exit 1
fi
if [ "$DRY" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    say "FAIL: torch in $PY sees no CUDA device (a CUDA build of torch is needed; or --cpu-dry-run)"
    FAILED=1
    exit 1
fi
NPROC=$(nproc 2>/dev/null || echo 4)

# ---- 1. build -------------------------------------------------------------------------------
if [ "$SKIP_BUILD" = 0 ]; then
    CUDA_FLAG=-DMAMBA2C_CUDA=ON
    if [ "$DRY" = 1 ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
        CUDA_FLAG=-DMAMBA2C_CUDA=OFF
    fi
    say "configure (Release, $CUDA_FLAG)"
    if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$CUDA_FLAG" \
        -DMAMBA2C_BUILD_TESTS=ON -DMAMBA2C_BUILD_BENCH=ON >"$LOG/configure.log" 2>&1; then
        say "FAIL: cmake configure (see logs/configure.log)"
        FAILED=1
        exit 1
    fi
    say "build (-j$NPROC)"
    if ! timeout "$(left "$E_BUILD")" cmake --build "$BUILD" -j"$NPROC" --target mamba2c gpu-bench \
        test_cuda_device test_ops test_ssd_half test_step_layouts \
        test_tc_tiles >"$LOG/build.log" 2>&1; then
        say "FAIL: build (see logs/build.log)"
        tail -30 "$LOG/build.log"
        FAILED=1
        exit 1
    fi
fi
LIB=$BUILD/libmamba2c.so
[ -f "$LIB" ] || { say "FAIL: $LIB missing"; FAILED=1; exit 1; }
T=$BUILD/tests

# ---- 2, 3. tests, then the sanitizers -------------------------------------------------------
run_test() { # end (s), name, command...: log logs/<name>.log, a PASS/FAIL/SKIP line, seconds
    local end=$1 name=$2 rc t0 secs last
    shift 2
    t0=$(date +%s)
    timeout "$(left "$end")" env CUDA_LAUNCH_BLOCKING=1 "$@" >"$LOG/$name.log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    last="$(grep -E 'passed|failed|SKIP|skipped|ERROR SUMMARY|PASS|FAIL' "$LOG/$name.log" | tail -1) [${secs} s]"
    case $rc in
    0) say "PASS $name: $last" ;;
    77) say "SKIP $name (no device): $last"; [ "$DRY" = 0 ] && FAILED=1 ;;
    124) say "TIMEOUT $name (its phase's deadline; logs/$name.log)"; FAILED=1 ;;
    *) say "FAIL $name (exit $rc): $last (logs/$name.log)"; FAILED=1 ;;
    esac
}
if [ "$SKIP_TESTS" = 0 ] && [ "$DRY" = 0 ]; then
    run_test "$E_TESTS" cuda_device "$T/test_cuda_device"
    run_test "$E_TESTS" cuda_ssd "$T/test_ops" --backend cuda --op ssd,stages,positions -q
    run_test "$E_TESTS" cuda_ops "$T/test_ops" --backend cuda --op conv1d,rmsnorm,conv1d_step,ssd_step
    run_test "$E_TESTS" cuda_half "$T/test_ssd_half" --backend cuda -q
    run_test "$E_TESTS" cuda_step_layouts "$T/test_step_layouts" --backend cuda -q
    [ -f "$BUILD/mamba2c_kernels.fatbin" ] && run_test "$E_TESTS" cuda_fatbin cmake \
        -DLIST="$ROOT/src/gpu/kernels/list.h" -DTC_LIST="$ROOT/src/cuda/tc_list.h" \
        -DFATBIN="$BUILD/mamba2c_kernels.fatbin" -P "$ROOT/cmake/check_fatbin.cmake"
    run_test "$E_TESTS" tc_tiles_emulated "$T/test_tc_tiles"
    run_test "$E_TESTS" tc_cuda_device env MAMBA2C_CUDA_TC=1 "$T/test_cuda_device"
    run_test "$E_TESTS" tc_cuda_ssd env MAMBA2C_CUDA_TC=1 "$T/test_ops" --backend cuda \
        --op ssd,stages,positions -q
    run_test "$E_TESTS" tc_cuda_half env MAMBA2C_CUDA_TC=1 "$T/test_ssd_half" --backend cuda -q
    PYT=$ROOT/python/tests/test_cuda_tensors.py
    [ -f "$PYT" ] && run_test "$E_TESTS" py_cuda_tensors env MAMBA2C_LIBRARY="$LIB" \
        PYTHONPATH="$ROOT/python" "$PY" -m pytest -q "$PYT"
    if command -v compute-sanitizer >/dev/null 2>&1; then
        for tool in memcheck racecheck synccheck; do
            for tc in 0 1; do
                # each run gets at most a quarter of the phase, so that a slow tool leaves time
                # for the others
                SAN_END=$(($(elapsed) + (E_SAN - E_TESTS) / 4))
                [ "$SAN_END" -gt "$E_SAN" ] && SAN_END=$E_SAN
                run_test "$SAN_END" "sanitizer_${tool}_tc$tc" env MAMBA2C_CUDA_TC=$tc compute-sanitizer \
                    --tool "$tool" --error-exitcode 1 "$T/test_cuda_device" -q
            done
        done
    else
        say "FAIL: compute-sanitizer not found: memcheck, racecheck and synccheck not run"
        FAILED=1
    fi
elif [ "$DRY" = 1 ]; then
    run_test "$E_TESTS" cuda_device_unavailable "$T/test_cuda_device"
    [ -x "$T/test_tc_tiles" ] && run_test "$E_TESTS" tc_tiles_emulated "$T/test_tc_tiles"
fi

# ---- 4. gpu-bench: ours in C, portable then tensor cores ------------------------------------
BENCH_CASES=$CASES
# the dry run: without a device gpu-bench must exit 77; where the build has the emulated CUDA
# device (cmake/cuda_emu.cmake), phases 4 and 4b run on it too (two small cases), so that
# their tables and the profile are checked before a GPU is ever used
EMU=
[ "$DRY" = 1 ] && BENCH_CASES=generic_tiny,tiny
[ "$DRY" = 1 ] && [ -f "$BUILD/cuda_emu/libcuda.so.1" ] && EMU=$BUILD/cuda_emu &&
    BENCH_CASES=generic_tiny,generic_tail_l65
run_bench() { # label, phase end (s), env assignments...
    local label=$1 end=$2 rc out=$LOG/bench_$1.tsv
    shift 2
    timeout "$(left $((end + 10)))" env ${EMU:+LD_LIBRARY_PATH=$EMU} "$@" "$BUILD/bench/gpu-bench" --cases "$BENCH_CASES" \
        --reps 10 --budget 0.5 --deadline "$(($(left "$end") - 5))" >"$out" 2>"$out.err"
    rc=$?
    if [ "$rc" = 77 ] && [ "$DRY" = 1 ] && [ -z "$EMU" ]; then
        say "PASS gpu-bench $label reports the missing device: $(head -1 "$out")"
    elif [ "$rc" != 0 ]; then
        say "FAIL gpu-bench $label exit $rc (logs/bench_$label.tsv.err)"
        FAILED=1
    elif [ "$(grep -c '^RESULT' "$out")" = 0 ]; then
        say "FAIL gpu-bench $label: no RESULT rows (logs/bench_$label.tsv)"
        FAILED=1
    else
        say "PASS gpu-bench $label: $(grep -c '^RESULT' "$out") rows${EMU:+ (emulated device)}"
    fi
}
run_bench portable "$E_BP" MAMBA2C_CUDA_TC=0
run_bench staged "$E_BS" MAMBA2C_CUDA_TC=0 MAMBA2C_GPU_SSD_FWD=staged
run_bench tc "$E_BT" MAMBA2C_CUDA_TC=1
run_bench tc_staged "$E_BTS" MAMBA2C_CUDA_TC=1 MAMBA2C_GPU_SSD_FWD=staged
if [ "$DRY" = 0 ] || [ -n "$EMU" ]; then # one table of the C timings: ms of the four forward forms, TFLOP/s of the best
    awk -F'\t' 'FNR == 1 { f++ } $1 == "RESULT" { k = $2 " " $3; ms[f, k] = $4; fl[k] = $6; sh[k] = $8; if (f == 1) o[++n] = k }
        function c(v) { return v == "" ? "-" : sprintf("%.3f", v) }
        END { printf "%-20s %-6s %-28s %9s %9s %9s %9s %8s\n", "case", "mode", "B,L,H,P,N,Q,G", "walk", "staged", "tc walk", "tc staged", "best TF/s"
              for (i = 1; i <= n; i++) { k = o[i]; split(k, a, " "); b = ms[1, k]
                  for (j = 2; j <= 4; j++) if (ms[j, k] != "" && ms[j, k] < b) b = ms[j, k]
                  printf "%-20s %-6s %-28s %9s %9s %9s %9s %8.2f\n", a[1], a[2], sh[k], c(ms[1, k]), c(ms[2, k]),
                         c(ms[3, k]), c(ms[4, k]), fl[k] / b / 1e9 } }' \
        "$LOG/bench_portable.tsv" "$LOG/bench_staged.tsv" "$LOG/bench_tc.tsv" "$LOG/bench_tc_staged.tsv" \
        >"$OUTDIR/bench_ours.txt" 2>/dev/null
    sed -i '1i gpu-bench (C, CUDA device mode, CUDA-event medians, ms; forward forms: portable on-chip walk (the default), portable staged (MAMBA2C_GPU_SSD_FWD=staged), tensor-core walk (MAMBA2C_CUDA_TC=1), tensor-core staged; the backward: portable in the first two, its tensor-core twins (docs/gpu.md §3b) in the two tc forms; TFLOP/s of the recurrence count, docs/flops.md)' \
        "$OUTDIR/bench_ours.txt"
    cat "$OUTDIR/bench_ours.txt"
fi

# ---- 4b. where the time goes: per-kernel event times (MAMBA2C_CUDA_PROFILE, gpu-bench --profile)
if [ "$DRY" = 0 ] || [ -n "$EMU" ]; then
    for tc in 0 1; do
        rm -f "$LOG/profile_tc$tc.txt"
        timeout "$(left $(((E_BTS + E_PROF) / 2 + tc * (E_PROF - E_BTS) / 2)))" \
            env ${EMU:+LD_LIBRARY_PATH=$EMU} MAMBA2C_CUDA_TC=$tc \
            "$BUILD/bench/gpu-bench" --cases "$BENCH_CASES" --reps 3 --budget 0.2 \
            --deadline "$(($(left "$E_PROF") / 2))" --profile "$LOG/profile_tc$tc.txt" \
            >"$LOG/profile_tc$tc.tsv" 2>&1 || { say "FAIL gpu-bench --profile (tc $tc)"; FAILED=1; }
    done
    # the five costliest kernels of each case and mode
    awk '/^## / { hdr = $0; n = 0; next } /^#/ || /^kernel/ { next }
         { if (n == 0) print hdr; if (n++ < 5) printf "    %-34s %6d launches %10.3f ms %9.1f us each\n", $1, $2, $3, $4 }' \
        "$LOG/profile_tc0.txt" "$LOG/profile_tc1.txt" >"$OUTDIR/profile.txt" 2>/dev/null
    sed -i '1i per-kernel event times over 1 warm-up + up to 3 calls (gpu-bench --profile; logs/profile_tc*.txt)' \
        "$OUTDIR/profile.txt"
    NPROF=$(grep -c '^## ' "$OUTDIR/profile.txt")
    if [ "$NPROF" -gt 0 ]; then
        say "PASS profile: $NPROF case/mode tables in profile.txt${EMU:+ (emulated device)}"
    else
        say "FAIL profile: no per-kernel table (logs/profile_tc*.txt)"
        FAILED=1
    fi
fi

# ---- 5. side by side with mamba_ssm and torch (Python) ---------------------------------------
# the cases in --cases order (gpu-bench lists them in its table's order): the first ones are
# the ones a short compare budget reaches
"$BUILD/bench/gpu-bench" --cases "$CASES" --list 2>/dev/null |
    awk -F'\t' -v order="$CASES" '{ nm[NR] = $1; row[$1] = $0 }
        END { n = split(order, o, ","); for (i = 1; i <= n; i++) if (o[i] in row) { print row[o[i]]; delete row[o[i]] }
              for (i = 1; i <= NR; i++) if (nm[i] in row) print row[nm[i]] }' >"$LOG/cases.tsv"
CMP=(--out "$OUTDIR" --deadline "$(($(left "$E_CMP") - 20))" --varlen)
[ -s "$LOG/cases.tsv" ] && CMP+=(--cases-file "$LOG/cases.tsv")
[ -n "$MSSM" ] && CMP+=(--mamba-ssm "$MSSM")
[ "$DRY" = 1 ] && CMP+=(--cpu-dry-run)
say "gpu_compare.py ${CMP[*]}"
timeout "$(left $((E_CMP + 10)))" env MAMBA2C_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" \
    TRITON_CACHE_DIR="$OUTDIR/triton-cache" "$PY" "$ROOT/bench/gpu_compare.py" "${CMP[@]}" \
    >"$LOG/compare.log" 2>&1
rc=$?
tail -n +1 "$OUTDIR/compare.txt" 2>/dev/null || tail -30 "$LOG/compare.log"
if [ "$rc" = 0 ]; then
    say "PASS gpu_compare.py"
else
    say "FAIL gpu_compare.py exit $rc (logs/compare.log)"
    FAILED=1
fi
say "done; $([ "$FAILED" = 0 ] && echo 'all phases passed' || echo 'SOME PHASES FAILED (above)'); summary in $OUTDIR/summary.txt"
exit "$FAILED"
