#!/usr/bin/env bash
# gpu_check.sh — the prepared check for a machine with an NVIDIA GPU (docs/gpu.md "The GPU
# check"). Needs CMake, a C compiler, nvcc, the NVIDIA driver, and Python 3 with a CUDA
# build of torch; downloads nothing. In order:
#   1. builds the library (Release, CUDA on) and the GPU programs into a scratch build dir;
#   2. runs the GPU test suite on the CUDA backend (tests/gpu: test_cuda_device, test_opencl_ssd
#      --backend cuda, test_opencl_ops --backend cuda, test_ssd_half --backend cuda; the
#      fat-binary kernel check; the host emulation of the tensor-core tiles), then the SSD
#      tests again with the tensor-core forward on (MAMBA2C_CUDA_TC=1: a separate mode, tf32
#      checked against 2e-3, bf16 against SPEC §8's bf16 tolerance), and
#      python/tests/test_cuda_tensors.py when that file exists; each test's seconds;
#   3. times SSD forward and forward + backward on the 52-case matrix with CUDA events
#      (bench/gpu_bench.c on the CUDA device mode; medians), portable kernels and again with
#      the tensor-core forward, then PyTorch's chunked SSD (bench/side_by_side.py's
#      ssd_minimal, the Mamba-2 paper's listing) on the same GPU and inputs of the same
#      distributions, and a short matmul / copy probe of the device's peaks;
#   4. prints one table: case, shape, ms (ours, ours tc, torch), torch/ours, torch/tc,
#      TFLOP/s, GB/s and the fractions of the measured peaks.
# Every phase has a time budget so that the whole run stays under 8 minutes; cases that do
# not fit in memory or in the budget are listed as skipped, with the reason.
#
# Usage: bench/gpu_check.sh [--build-dir DIR] [--python PY] [--cases all|std|a,b,...]
#                           [--skip-build] [--skip-tests] [--cpu-dry-run]
#   --cpu-dry-run: no GPU needed: builds (CUDA where nvcc is), checks that gpu-bench reports
#   BACKEND_UNAVAILABLE cleanly, and runs the torch side on the CPU on two tiny shapes.
# Output: the log of each phase under $BUILD/gpu_check/, and the table on stdout (also in
# $BUILD/gpu_check/table.txt). Exit status: 0 when every phase passed.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpucheck
PY=${PYTHON:-python3}
CASES=all
SKIP_BUILD=0
SKIP_TESTS=0
DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --skip-tests) SKIP_TESTS=1; shift ;;
    --cpu-dry-run) DRY=1; shift ;;
    -h | --help) sed -n '2,30p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$BUILD" in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
LOG=$BUILD/gpu_check
mkdir -p "$LOG"
START=$(date +%s)
FAILED=0
elapsed() { echo $(($(date +%s) - START)); }
say() { printf '[gpu_check %4ss] %s\n' "$(elapsed)" "$*"; }
# seconds left of a phase that must end by $1 seconds into the run (at least 10)
left() {
    local l=$(($1 - $(elapsed)))
    [ "$l" -lt 10 ] && l=10
    echo "$l"
}

# ---- 0. what is here ------------------------------------------------------------------------
say "root $ROOT, build dir $BUILD"
if [ "$DRY" = 0 ]; then
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
            sed 's/^/[gpu_check] GPU: /'
    else
        say "nvidia-smi not found (continuing: the library finds the driver itself)"
    fi
fi
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    say "FAIL: $PY cannot import torch"
    exit 1
fi
if [ "$DRY" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    say "FAIL: torch in $PY sees no CUDA device (a CUDA build of torch is needed; or --cpu-dry-run)"
    exit 1
fi
NPROC=$(nproc 2>/dev/null || echo 4)

# ---- 1. build (budget: until 150 s) -------------------------------------------------------
if [ "$SKIP_BUILD" = 0 ]; then
    CUDA_FLAG=-DMAMBA2C_CUDA=ON
    if [ "$DRY" = 1 ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
        CUDA_FLAG=-DMAMBA2C_CUDA=OFF
    fi
    say "configure (Release, $CUDA_FLAG)"
    if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "$CUDA_FLAG" \
        -DMAMBA2C_BUILD_TESTS=ON -DMAMBA2C_BUILD_BENCH=ON >"$LOG/configure.log" 2>&1; then
        say "FAIL: cmake configure (see $LOG/configure.log)"
        tail -20 "$LOG/configure.log"
        exit 1
    fi
    say "build (-j$NPROC)"
    if ! timeout "$(left 150)" cmake --build "$BUILD" -j"$NPROC" --target mamba2c gpu-bench \
        test_cuda_device test_opencl_ssd test_opencl_ops test_ssd_half test_tc_tiles \
        >"$LOG/build.log" 2>&1; then
        say "FAIL: build (see $LOG/build.log)"
        tail -30 "$LOG/build.log"
        exit 1
    fi
fi
LIB=$BUILD/libmamba2c.so
[ -f "$LIB" ] || { say "FAIL: $LIB missing"; exit 1; }

# ---- 2. the GPU tests on the CUDA backend (budget: until 300 s) ----------------------------
run_test() { # name, command...: its log in $LOG/<name>.log, a PASS/FAIL/SKIP line, seconds
    local name=$1 rc t0
    shift
    t0=$(date +%s)
    timeout "$(left 300)" "$@" >"$LOG/$name.log" 2>&1
    rc=$?
    local tail_line secs
    secs=$(($(date +%s) - t0))
    tail_line="$(grep -E 'passed|failed|SKIP|skipped|PASS|FAIL' "$LOG/$name.log" | tail -1) [${secs} s]"
    case $rc in
    0) say "PASS $name: $tail_line" ;;
    77) say "SKIP $name (no device): $tail_line"; [ "$DRY" = 0 ] && FAILED=1 ;;
    124) say "TIMEOUT $name (the phase budget ran out; see $LOG/$name.log)"; FAILED=1 ;;
    *) say "FAIL $name (exit $rc): $tail_line (see $LOG/$name.log)"; FAILED=1 ;;
    esac
}
if [ "$SKIP_TESTS" = 0 ] && [ "$DRY" = 0 ]; then
    T=$BUILD/tests
    run_test cuda_device "$T/test_cuda_device"
    run_test cuda_ssd "$T/test_opencl_ssd" --backend cuda -q
    run_test cuda_ops "$T/test_opencl_ops" --backend cuda
    run_test cuda_half "$T/test_ssd_half" --backend cuda -q
    if [ -f "$BUILD/mamba2c_kernels.fatbin" ]; then
        run_test cuda_fatbin cmake -DLIST="$ROOT/src/gpu/kernels/list.h" \
            -DTC_LIST="$ROOT/src/cuda/tc_list.h" \
            -DFATBIN="$BUILD/mamba2c_kernels.fatbin" -P "$ROOT/cmake/check_fatbin.cmake"
    fi
    run_test tc_tiles_emulated "$T/test_tc_tiles"
    # the tensor-core forward (off by default): the same tests with the switch on
    run_test tc_cuda_device env MAMBA2C_CUDA_TC=1 "$T/test_cuda_device"
    run_test tc_cuda_ssd env MAMBA2C_CUDA_TC=1 "$T/test_opencl_ssd" --backend cuda -q
    run_test tc_cuda_half env MAMBA2C_CUDA_TC=1 "$T/test_ssd_half" --backend cuda -q
    # the binding on CUDA tensors (written elsewhere; run only where the file exists)
    PYT=$ROOT/python/tests/test_cuda_tensors.py
    if [ -f "$PYT" ]; then
        if "$PY" -c 'import pytest' >/dev/null 2>&1; then
            run_test py_cuda_tensors env MAMBA2C_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" \
                "$PY" -m pytest -q -x "$PYT"
        else
            run_test py_cuda_tensors env MAMBA2C_LIBRARY="$LIB" PYTHONPATH="$ROOT/python" \
                "$PY" "$PYT"
        fi
    else
        say "not run: $PYT does not exist"
    fi
elif [ "$DRY" = 1 ]; then
    run_test cuda_device_unavailable "$BUILD/tests/test_cuda_device"
    [ -x "$BUILD/tests/test_tc_tiles" ] && run_test tc_tiles_emulated "$BUILD/tests/test_tc_tiles"
    [ -f "$ROOT/python/tests/test_cuda_tensors.py" ] &&
        say "dry run: python/tests/test_cuda_tensors.py exists (runs on the GPU machine only)"
fi

# ---- 3a. ours: gpu-bench, portable (until 350 s) then tensor cores (until 400 s) ------------
OURS=$LOG/ours.tsv
OURS_TC=$LOG/ours_tc.tsv
BENCH_CASES=$CASES
[ "$DRY" = 1 ] && BENCH_CASES=generic_tiny,tiny
run_bench() { # out file, phase end (s), env assignments...
    local out=$1 end=$2 rc deadline
    shift 2
    deadline=$(($(left "$end") - 10))
    [ "$deadline" -lt 5 ] && deadline=5
    timeout "$(left $((end + 10)))" env "$@" "$BUILD/bench/gpu-bench" --cases "$BENCH_CASES" \
        --reps 10 --budget 0.5 --deadline "$deadline" >"$out" 2>"$out.err"
    rc=$?
    if [ "$rc" = 77 ]; then
        say "gpu-bench: $(head -1 "$out")"
        [ "$DRY" = 0 ] && FAILED=1
    elif [ "$rc" != 0 ]; then
        say "gpu-bench exit $rc (see $out.err)"
        FAILED=1
    fi
}
say "gpu-bench, portable kernels (cases $BENCH_CASES)"
run_bench "$OURS" 350 MAMBA2C_CUDA_TC=0
say "gpu-bench, tensor-core forward (MAMBA2C_CUDA_TC=1)"
run_bench "$OURS_TC" 400 MAMBA2C_CUDA_TC=1

# ---- 3b. torch on the same GPU, the peak probe, the table (budget: until 470 s) -------------
TORCH_DEV=cuda
[ "$DRY" = 1 ] && TORCH_DEV=cpu
TDEADLINE=$(($(left 470) - 10))
[ "$TDEADLINE" -lt 5 ] && TDEADLINE=5
"$BUILD/bench/gpu-bench" --cases "$BENCH_CASES" --list >"$LOG/cases.tsv" 2>/dev/null || true
if [ ! -s "$LOG/cases.tsv" ]; then
    say "FAIL: gpu-bench --list gave nothing"
    exit 1
fi
say "torch side on $TORCH_DEV"
timeout "$(left 480)" "$PY" - "$ROOT" "$LOG/cases.tsv" "$OURS" "$TORCH_DEV" "$TDEADLINE" "$OURS_TC" <<'PYEOF' | tee "$LOG/table.txt"
import math, statistics, sys, time
root, cases_file, ours_file, dev, deadline, tc_file = sys.argv[1:7]
deadline = float(deadline)
t_start = time.time()
sys.path.insert(0, root + "/bench")
sys.path.insert(0, root + "/python")
import torch
try:  # the CPU side-by-side's torch peer: the Mamba-2 paper's minimal chunked SSD
    import side_by_side as sbs

    def _segsum_on_device(x):  # sbs._segsum, with its masks made on x's device
        T = x.size(-1)
        x = x[..., None].expand(*x.shape, T)
        x = x.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), -1), 0)
        x = torch.cumsum(x, dim=-2)
        return x.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), 0),
                             -math.inf)

    sbs._segsum = _segsum_on_device
    torch_ssd = sbs.ssd_minimal
    peer = "side_by_side.ssd_minimal"
except Exception as e:  # noqa: BLE001
    import importlib.util
    spec = importlib.util.spec_from_file_location("reference", root + "/python/mamba2c/reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    torch_ssd = lambda x, dt, A, B, C, Q, **kw: ref.ssd_chunked(x, dt, A, B, C, Q, **kw)
    peer = f"reference.ssd_chunked (side_by_side not importable: {e})"

device = torch.device(dev)
if dev == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

def sync():
    if dev == "cuda":
        torch.cuda.synchronize()

def timed(fn, reps=10, budget=0.5):
    """median ms of up to reps calls within budget s, after one warm-up call"""
    t0 = time.perf_counter(); fn(); sync(); warm = time.perf_counter() - t0
    ms, spent = [], 0.0
    while len(ms) < reps and (not ms or spent + warm <= budget):
        if dev == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); fn(); e1.record(); e1.synchronize(); ms.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter(); fn(); ms.append(1e3 * (time.perf_counter() - t0))
        spent += ms[-1] * 1e-3
    return statistics.median(ms), len(ms)

# ---- the device's peaks, measured now (float32 FMA matmul without TF32, then with TF32 for
# the tensor-core rows; a device copy) ----
peak_tf, peak_tf32, peak_gbs, probe = float("nan"), float("nan"), float("nan"), ""
try:
    n = 8192 if dev == "cuda" else 512
    a = torch.randn(n, n, device=device); b = torch.randn(n, n, device=device)
    ms, _ = timed(lambda: a @ b, reps=10, budget=2.0)
    peak_tf = 2 * n ** 3 / (ms * 1e-3) / 1e12
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        ms, _ = timed(lambda: a @ b, reps=10, budget=2.0)
        peak_tf32 = 2 * n ** 3 / (ms * 1e-3) / 1e12
        torch.backends.cuda.matmul.allow_tf32 = False
    m = (1 << 28) if dev == "cuda" else (1 << 22)
    x = torch.empty(m, device=device); y = torch.empty_like(x)
    ms, _ = timed(lambda: y.copy_(x), reps=10, budget=2.0)
    peak_gbs = 2 * 4 * m / (ms * 1e-3) / 1e9
    probe = (f"fp32 matmul {n}^3 (TF32 off) {peak_tf:.1f} TFLOP/s, (TF32 on) {peak_tf32:.1f} "
             f"TFLOP/s, copy of {4*m>>20} MiB {peak_gbs:.0f} GB/s")
    del a, b, x, y
except Exception as e:  # noqa: BLE001
    probe = f"probe failed: {e}"
name = torch.cuda.get_device_name(0) if dev == "cuda" else "CPU (dry run)"

# ---- ours (portable kernels, and the tensor-core forward) ----
notes = []
def read_ours(path, label):
    res = {}
    try:
        lines = open(path).readlines()
    except OSError:
        notes.append(f"{label}: no results ({path})")
        return res
    for line in lines:
        f = line.rstrip("\n").split("\t")
        if f[0] == "RESULT":
            res[(f[1], f[2])] = (float(f[3]), int(f[4]), float(f[5]), int(f[6]))
        elif f[0] == "SKIP":
            notes.append(f"{label} {f[1]} {f[2]}: skipped ({f[3]})")
        elif f[0] != "DEVICE" and line.strip():
            notes.append(f"{label}: " + line.strip())
    return res
ours = read_ours(ours_file, "ours")
ours_tc = read_ours(tc_file, "ours tc")
cases = []
for line in open(cases_file):
    nm, shp = line.split()
    cases.append((nm, [int(v) for v in shp.split(",")]))

def inputs(shape, bwd):
    Bz, L, H, P, N, Q, G = shape
    g = torch.Generator(device=device).manual_seed(20260801)
    def nrm(*s, scale=1.0): return torch.randn(*s, generator=g, device=device) * scale
    def uni(lo, hi, *s): return lo + (hi - lo) * torch.rand(*s, generator=g, device=device)
    t = dict(x=nrm(Bz, L, H, P), dt=uni(0.01, 0.11, Bz, L, H), A=-uni(0.1, 0.5, H),
             B=nrm(Bz, L, G, N, scale=0.2), C=nrm(Bz, L, G, N, scale=0.2), D=nrm(H, P),
             z=nrm(Bz, L, H, P), dt_bias=nrm(H, scale=0.1), init=nrm(Bz, H, P, N, scale=0.2))
    cot = None
    if bwd:
        for v in t.values(): v.requires_grad_(True)
        cot = (nrm(Bz, L, H, P), nrm(Bz, H, P, N, scale=0.2))
    return t, cot

def run(t, Q, cot):
    if cot is None:
        with torch.no_grad():
            return torch_ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"],
                             dt_bias=t["dt_bias"], initial_states=t["init"], dt_softplus=True)
    for v in t.values(): v.grad = None
    out, fin = torch_ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"],
                         dt_bias=t["dt_bias"], initial_states=t["init"], dt_softplus=True)
    torch.autograd.backward((out, fin), cot)

rows = []
for nm, shape in cases:
    for mode in ("fwd", "fwdbwd"):
        tm = "-"
        if time.time() - t_start > deadline:
            tm = "skip (time)"
        else:
            try:
                t, cot = inputs(shape, mode == "fwdbwd")
                ms, _ = timed(lambda: run(t, shape[5], cot))
                tm = ms
                del t, cot
            except torch.cuda.OutOfMemoryError if dev == "cuda" else MemoryError:
                tm = "OOM"
            except Exception as e:  # noqa: BLE001
                tm = "error"; notes.append(f"torch {nm} {mode}: {e}")
            if dev == "cuda":
                torch.cuda.empty_cache()
        rows.append((nm, shape, mode, ours.get((nm, mode)), tm, ours_tc.get((nm, mode))))

def fmt(v, spec):
    return format(v, spec) if isinstance(v, float) and not math.isnan(v) else "-"

print(f"\nGPU check: {name}; torch {torch.__version__}; torch peer {peer}")
print(f"peak (measured in this run): {probe}")
if "H200" in name:
    print("nominal (NVIDIA H200 SXM datasheet, not measured): FP32 67 TFLOP/s, HBM3e 4.8 TB/s")
print(("ms: CUDA-event medians" if dev == "cuda" else "ms: wall-clock medians (CPU dry run)") + "; TFLOP/s counts the recurrence (docs/flops.md: 4 BLHPN fwd, "
      "14 BLHPN fwd+bwd); GB/s the compulsory traffic of the calls; %pk: of the measured peaks "
      "(portable: fp32 TF32-off matmul; tc: TF32-on matmul); tc = MAMBA2C_CUDA_TC=1 (the "
      "tensor-core forward, tf32 here; fwdbwd: its forward + the portable backward)")
hdr = (f"{'case':18s} {'B,L,H,P,N,Q,G':28s} {'mode':6s} {'ours ms':>9s} {'tc ms':>9s} "
       f"{'torch ms':>9s} {'torch/ours':>10s} {'torch/tc':>8s} {'TFLOP/s':>8s} {'tc TF/s':>8s} "
       f"{'GB/s':>7s} {'tc GB/s':>7s} {'%pkF':>5s} {'%pkB':>5s} {'tc%pkF':>6s} {'tc%pkB':>6s}")
print(hdr); print("-" * len(hdr))
def rates(o):
    if not o:
        return float("nan"), float("nan"), float("nan")
    return o[0], o[2] / (o[0] * 1e-3) / 1e12, o[3] / (o[0] * 1e-3) / 1e9
for nm, shape, mode, o, tm, otc in rows:
    oms, tf, gbs = rates(o)
    cms, ctf, cgbs = rates(otc)
    tms = tm if isinstance(tm, float) else float("nan")
    ratio = tms / oms if o and isinstance(tm, float) else float("nan")
    ratio_tc = tms / cms if otc and isinstance(tm, float) else float("nan")
    tstr = fmt(tms, "9.3f") if isinstance(tm, float) else f"{tm:>9s}"
    print(f"{nm:18s} {','.join(map(str, shape)):28s} {mode:6s} {fmt(oms, '9.3f'):>9s} "
          f"{fmt(cms, '9.3f'):>9s} {tstr:>9s} {fmt(ratio, '10.2f'):>10s} {fmt(ratio_tc, '8.2f'):>8s} "
          f"{fmt(tf, '8.2f'):>8s} {fmt(ctf, '8.2f'):>8s} {fmt(gbs, '7.0f'):>7s} {fmt(cgbs, '7.0f'):>7s} "
          f"{fmt(100 * tf / peak_tf, '5.1f'):>5s} {fmt(100 * gbs / peak_gbs, '5.1f'):>5s} "
          f"{fmt(100 * ctf / peak_tf32, '6.1f'):>6s} {fmt(100 * cgbs / peak_gbs, '6.1f'):>6s}")
for n_ in notes:
    print("note:", n_)
print(f"torch side: {time.time() - t_start:.0f} s")
PYEOF
rc=$?
[ "$rc" = 0 ] || { say "torch side exit $rc"; FAILED=1; }
say "done in $(elapsed) s; logs in $LOG; $([ "$FAILED" = 0 ] && echo 'all phases passed' || echo 'SOME PHASES FAILED (above)')"
exit "$FAILED"
