#!/usr/bin/env python3
"""gpu_model.py — a per-kernel traffic and time model of the SSD on an H200: mamba2c's CUDA
kernels (the portable default and the tensor-core forward) and mamba_ssm's Triton kernels,
forward and forward + backward, over the 52 cases of shared/bench_shapes.md, fitted to the
first H200 run (2026-12-04, bench/gpu_check.sh; docs/gpu_model.md). Outside the measured rows
its numbers are predictions, never measurements.

    python3 bench/gpu_model.py [--cases all|a,b] [--kernels] [--dtype bf16] [--old]
    python3 bench/gpu_model.py --fit        # measured vs the pre-run and the fitted model
    python3 bench/gpu_model.py --solve      # re-run the fit (FIT holds its rounded result)
    python3 bench/gpu_model.py --designs    # unwritten designs, predicted
    python3 bench/gpu_model.py --device a100 --old   # the pre-run fit to published A100 rows

Per kernel: flops (the kernel's own arithmetic, not the recurrence count of docs/flops.md),
DRAM bytes (every tensor it reads or writes once: unique traffic, L2 reuse assumed for what
several blocks share), a class, and a time
    t = max(bytes / BW, flops / (peak x eff[class]), serial) + launch,
with serial the latency chain of the kernels that walk a sequence's chunks in order (blocks
beyond one wave queue behind it). mamba_ssm's call costs max(host, kernels): its Python and
Triton launch work overlaps the kernels it has queued. H200 figures from shared/GPU_NOTES.md
(4.3 TB/s measured copy, 67 TFLOP/s FP32, 495 / 989 TFLOP/s dense TF32 / bf16 datasheet, 132
SMs at 1.98 GHz). OLD holds the constants of the prediction made before the run (efficiencies
guessed; the bandwidth fraction and mamba_ssm's host cost fitted to published A100 timings,
`--device a100`), FIT the same model's constants fitted to the measured rows (MEASURED_*):
least squares in log(measured / model) by coordinate descent, 11 constants, 56 rows.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

DEVICES = {  # copy bandwidth (measured on the H200; A100 80GB PCIe: 1.7 TB/s), peaks, SMs, clock
    "h200": dict(copy=4.3e12, fp32=67e12, tf32=495e12, bf16=989e12, sms=132, clock=1.98e9),
    "a100": dict(copy=1.7e12, fp32=19.5e12, tf32=156e12, bf16=312e12, sms=108, clock=1.41e9)}
PUBLISHED_A100 = {"seq_512": 0.827, "seq_1024": 0.949, "seq_2048": 1.879, "seq_4096": 3.758,
                  "seq_8192": 7.485, "seq_16384": 15.041, "heavy_h256": 22.583}
# The constants: OLD is the prediction made before any device run (efficiencies guessed; the
# bandwidth fraction and mamba_ssm's host cost fitted to the A100 figures); FIT is the same
# model fitted to the 2026-12-04 H200 run (MEASURED below; `--fit` prints the residuals,
# `--solve` re-runs the fit from OLD). eff_*: fraction of the peak a kernel class reaches
# when it is throughput-bound; step_*: seconds per chunk of a sequence walk for one wave of
# resident blocks (a lone block's serial chain); hosts: seconds per call.
OLD = dict(bw_fraction=0.55,     # of the copy bandwidth, every memory-bound kernel
           launch=3e-6,          # s per launch (launch + tail)
           eff_tc=0.30,          # Triton's tl.dot tiles, of the dense TF32 / bf16 peak
           eff_wmma=0.30,        # our tensor-core sequence walk (scan_seq_tc128)
           eff_walk=0.25,        # our portable sequence walk (scan_seq_16x16), of FP32
           eff_simt_tile=0.25,   # 16x16 shared-memory FP32 tiles (bmm_chunk, backward)
           eff_simt_loop=0.08,   # one work-item per output, serial loop
           step_portable=3.0e-6, step_tc=2.5e-6,
           cvt=1.0,              # half <-> float32 copies, of the memory-bound rate
           mssm_host_fwd=0.2e-3, mssm_host_fb=0.4e-3,
           mssm_overlap=0,       # 0: host + device; 1: max(host, device) (async launches)
           ours_host=0.1e-3)     # mamba2c's Python op per call, over the C API
FIT = dict(OLD,                  # `--solve` gives these (rounded); eff_tc is not fitted: no
           bw_fraction=0.48,     # measured row has Triton's tiles compute-bound
           launch=14e-6,         # per launch, the C API's per-call work spread over them
           eff_wmma=0.018,       # 1.8 % of dense TF32: the walk is throughput-bound at 1.8 %
           eff_walk=0.064,       # 6.4 % of FP32
           eff_simt_tile=0.044,  # 4.4 % of FP32: the backward's tiles
           step_portable=24.5e-6, step_tc=30.6e-6,
           cvt=0.45,
           mssm_host_fwd=0.86e-3, mssm_host_fb=5.07e-3, mssm_overlap=1,
           ours_host=0.31e-3)
C = dict(FIT)
BW = 4.3e12 * C["bw_fraction"]
PEAK = {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12}
SMS, CLOCK = 132, 1.98e9
RESIDENT = {"portable": 8, "tc": 3}  # blocks per SM of the sequence walks (smem-limited for tc)


def cases(sel="all"):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    rows = []
    src = (Path(__file__).resolve().parent / "gpu_bench.c").read_text()
    import re
    for m in re.finditer(r'\{"(\w+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)',
                         src):
        nm, *v = m.groups()
        rows.append((nm, [int(x) for x in v]))
    if sel != "all":
        rows = [r for r in rows if r[0] in sel.split(",")]
    return rows


class K:
    """One kernel launch: name, flops, DRAM bytes, class, extra serial seconds."""

    def __init__(self, name, flops, bytes_, cls, serial=0.0, peak="fp32", uncoalesced=0.0):
        self.name, self.flops, self.bytes, self.cls = name, flops, bytes_, cls
        self.serial, self.peak, self.unc = serial, peak, uncoalesced

    def time(self):
        mem = self.cls in ("stream", "cvt")
        comp = 0.0 if mem else self.flops / (PEAK[self.peak] * C["eff_" + self.cls])
        bw = BW * (C["cvt"] if self.cls == "cvt" else 1.0)
        # uncoalesced loads: one L1 wavefront per thread of the warp, ~1 wavefront per SM clock
        unc = self.unc / (SMS * CLOCK)
        return max(self.bytes / bw, comp, self.serial, unc) + C["launch"]


def dims(shape, Q=None):
    Bz, L, H, P, N, Qc, G = shape
    Q = Q or Qc
    Kc = -(-L // Q)
    return Bz, L, H, P, N, Q, G, Kc, Bz * Kc


def walk(blocks, chunks, kind):
    waves = math.ceil(blocks / (SMS * RESIDENT[kind]))
    return waves * chunks * C["step_" + kind]


def mamba_ssm(shape, e, bwd):
    """mamba_ssm's five forward kernels (tf32 / bf16 tl.dot) and its backward's ten, at the
    caller's chunk size; float32 intermediates (CB, states), activations in e bytes."""
    Bz, L, H, P, N, Q, G, Kc, nc = dims(shape)
    pk = "bf16" if e == 2 else "tf32"
    f = [K("chunk_cumsum", 10 * Bz * L * H, e * Bz * L * H + 8 * H * nc * Q, "stream"),
         K("bmm_chunk CB", 2 * nc * G * Q * Q * N, 2 * e * Bz * L * G * N + 4 * nc * G * Q * Q, "tc", peak=pk),
         K("chunk_state", 2 * nc * H * Q * P * N,
           e * (Bz * L * H * P + Bz * L * G * N) + 8 * H * nc * Q + 4 * nc * H * P * N, "tc", peak=pk),
         K("state_passing", 2 * nc * H * P * N, 8 * nc * H * P * N + 8 * Bz * H * P * N, "stream"),
         K("chunk_scan", nc * H * (Q * Q * P + 2 * Q * N * P),
           4 * nc * G * Q * Q + e * (4 * Bz * L * H * P + Bz * L * G * N) + 4 * nc * H * P * N
           + 8 * H * nc * Q, "tc", peak=pk)]
    if not bwd:
        return f
    act = e * Bz * L * H * P
    b = [K("chunk_scan_bwd_dz", 4 * Bz * L * H * P, 4 * act, "stream"),
         K("chunk_scan_bwd_dstates", 2 * nc * H * Q * P * N,
           act + e * Bz * L * G * N + 4 * nc * H * P * N, "tc", peak=pk),
         K("state_passing_bwd", 4 * nc * H * P * N, 16 * nc * H * P * N, "stream"),
         K("chunk_scan_chunk_state_bwd_dx", nc * H * (2 * Q * Q * P + 2 * Q * N * P),
           3 * act + e * Bz * L * G * N + 4 * nc * G * Q * Q + 4 * nc * H * P * N, "tc", peak=pk),
         K("chunk_scan_bwd_dC", 2 * nc * H * Q * P * N,
           act + 4 * nc * H * P * N + e * Bz * L * G * N, "tc", peak=pk),
         K("chunk_state_bwd_db", 2 * nc * H * Q * P * N,
           act + 4 * nc * H * P * N + e * Bz * L * G * N, "tc", peak=pk),
         K("chunk_scan_bwd_dcb", 2 * nc * H * Q * Q * P, 2 * act + 4 * nc * G * Q * Q, "tc", peak=pk),
         K("bmm_chunk_bwd dB, dC", 4 * nc * G * Q * Q * N, 4 * e * Bz * L * G * N + 4 * nc * G * Q * Q,
           "tc", peak=pk),
         K("ddAcs_stable x2", 2 * nc * H * Q * Q * P, 2 * act + 8 * nc * G * Q * Q, "tc", peak=pk),
         K("chunk_cumsum_bwd", 10 * Bz * L * H, 3 * 4 * Bz * L * H, "stream")]
    return f + b


def ours_portable(shape, e, bwd, ea=4):
    """mamba2c's CUDA default: chunk_cumsum, bmm_chunk, then the on-chip sequence walk
    (scan_seq: chunk_state + state_passing + chunk_scan with the state in shared memory) at the
    fused ops' Q = 64; half storage widened to float32 copies first (m2_cvt)."""
    Bz, L, H, P, N, Q, G, Kc, nc = dims(shape, 64)
    n_act = Bz * L * (3 * H * P + H + 2 * G * N)
    f = []
    if e == 2:
        f.append(K("cvt to/from f32", 0, 6 * n_act + 6 * Bz * L * H * P, "cvt"))
    f += [K("chunk_cumsum", 10 * Bz * L * H, 4 * Bz * L * H + 8 * H * nc * Q, "stream"),
          K("bmm_chunk CB", 2 * nc * G * Q * Q * N, 8 * Bz * L * G * N + 4 * nc * G * Q * Q, "simt_tile")]
    blocks = Bz * H * math.ceil(P / 16)
    sflops = 2 * nc * H * Q * P * N + 2 * nc * H * P * N + nc * H * (Q * Q * P + 2 * Q * N * P)
    f.append(K("scan_seq (walk)", sflops,
               4 * (3 * Bz * L * H * P + nc * G * Q * Q + 2 * Bz * L * G * N + 2 * H * nc * Q
                    + 2 * Bz * H * P * N), "walk", serial=walk(blocks, Kc, "portable")))
    if not bwd:
        return f
    # the backward recomputes the staged forward (states to DRAM), then ssd_bwd.c's launches;
    # ea: bytes per activation element in DRAM (4: float32 or widened; 2: half read natively)
    act = ea * Bz * L * H * P
    st = 4 * nc * H * P * N
    b = [K("re: chunk_state", 2 * nc * H * Q * P * N, act + ea * Bz * L * G * N + st, "simt_tile"),
         K("re: state_passing", 2 * nc * H * P * N, 2 * st, "stream"),
         K("bwd_gate", 6 * Bz * L * H * P, 5 * act, "stream"),
         K("chunk_state mode 1", 2 * nc * H * Q * P * N, act + ea * Bz * L * G * N + st, "simt_tile"),
         K("bwd_state_passing", 2 * nc * H * P * N, 3 * st, "stream"),
         K("bwd_dx_16x16", nc * H * (Q * Q * P + 2 * Q * N * P),
           3 * act + 4 * nc * G * Q * Q + ea * Bz * L * G * N + st, "simt_tile"),
         K("bwd_E_16x16", nc * H * Q * Q * P, 2 * act + 4 * nc * H * Q * Q, "simt_tile"),
         K("bwd_dcb", nc * G * Q * Q * (H // G), 4 * nc * H * Q * Q + 4 * nc * G * Q * Q, "simt_loop"),
         K("bwd_rq", nc * H * Q ** 3 // 2, 4 * nc * H * Q * Q + 4 * nc * G * Q * Q, "simt_loop"),
         K("bwd_dbc x2", 4 * nc * G * (Q * Q * N + (H // G) * Q * P * N),
           2 * (4 * nc * G * Q * Q + 2 * ea * Bz * L * G * N + act + st), "simt_tile"),
         # u, g: (16 x P)(P x 16) tiles (before 091e511 a work-item per token whose warp loads
         # were H.P floats apart: uncoalesced=2 B L H P N wavefronts, 65.7 ms at seq_4096)
         K("bwd_tok_16x16", 4 * nc * H * Q * P * N, 2 * act + 2 * ea * Bz * L * G * N + 2 * st,
           "simt_tile"),
         K("bwd_dt, dD, params", 20 * Bz * L * H * P, 3 * act, "stream")]
    if e == 2 and ea == 4:  # the inputs widened again, dy widened, the gradients narrowed
        b.insert(0, K("cvt to/from f32 (bwd)", 0, 6 * n_act + 6 * Bz * L * H * P, "cvt"))
    return f + b


def ours_tc(shape, e, bwd):
    """The tensor-core forward (MAMBA2C_CUDA_TC=1): chunk_cumsum, then one sequence walk per
    (32 channels, head, sequence) with CB on chip; the backward is the portable one."""
    Bz, L, H, P, N, Q, G, Kc, nc = dims(shape, 64)
    pk = "bf16" if e == 2 else "tf32"
    blocks = Bz * H * math.ceil(P / 32)
    fl = (2 * nc * H * Q * P * N + nc * H * (Q * Q * P + 2 * Q * N * P)
          + 2 * nc * H * Q * Q * N * math.ceil(P / 32) * 10 // 16)
    f = [K("chunk_cumsum", 10 * Bz * L * H, 4 * Bz * L * H + 8 * H * nc * Q, "stream"),
         K("scan_seq_tc128 (walk)", fl, e * (3 * Bz * L * H * P + 2 * Bz * L * G * N)
           + 8 * H * nc * Q + 8 * Bz * H * P * N, "wmma", peak=pk, serial=walk(blocks, Kc, "tc"))]
    if e == 2:
        f.insert(0, K("cvt to/from f32", 0, 6 * Bz * L * (3 * H * P + H + 2 * G * N), "cvt"))
    if not bwd:
        return f
    return f + [k for k in ours_portable(shape, e, True) if k.name not in
                ("chunk_cumsum", "bmm_chunk CB", "scan_seq (walk)", "cvt to/from f32")]


MODELS = {"mamba_ssm": mamba_ssm, "ours": ours_portable, "ours_tc": ours_tc}

# the backward's tensor-core twins as written (src/cuda/ssd_tc_bwd.cuh, docs/gpu.md §3b): tf32
# (bf16) MMA, or split tf32 at 3x the MMA work; dcb and rq stay SIMT loops
TC_BWD = {"re: chunk_state": 3, "chunk_state mode 1": 3, "bwd_dx_16x16": 1, "bwd_E_16x16": 3,
          "bwd_dbc x2": 1, "bwd_tok_16x16": 3}


def ours_tc_bwd(shape, e, bwd):
    """The tensor-core forward walk and the backward with its tensor-core twins (not yet run on
    a GPU: their efficiency is eff_tc, Triton's tiles, unfitted; a prediction). Bytes are the
    portable kernels' (the twins read and write the same tensors)."""
    f = ours_tc(shape, e, bwd)
    for k in f:
        if k.name in TC_BWD:
            split = TC_BWD[k.name] == 3 or k.name == "bwd_tok_16x16"
            k.cls, k.peak = "tc", ("bf16" if e == 2 and not split else "tf32")
            k.flops *= TC_BWD[k.name]
    return f




def design(shape, e, bwd, tc_fwd=True, tc_bwd=True, native=True):
    """Not written: a chunk-parallel tensor-core forward (chunk_state, state_passing,
    chunk_scan with CB formed in chunk_scan: a block per chunk, so every case fills the chip),
    the backward's SIMT tiles on tensor cores, and half storage read natively (no widening
    copies). Its tensor-core kernels are given Triton's fitted efficiency: a prediction."""
    Bz, L, H, P, N, Q, G, Kc, nc = dims(shape, 64)
    pk = ("bf16" if e == 2 else "tf32")
    ea = e if native else 4
    f = [k for k in ours_portable(shape, e, bwd, ea) if not (native and k.name.startswith("cvt"))]
    if tc_fwd:
        f = [k for k in f if k.name not in ("bmm_chunk CB", "scan_seq (walk)")]
        f[1:1] = [K("chunk_state tc", 2 * nc * H * Q * P * N,
                    ea * (Bz * L * H * P + Bz * L * G * N) + 4 * nc * H * P * N, "tc", peak=pk),
                  K("state_passing", 2 * nc * H * P * N, 8 * nc * H * P * N, "stream"),
                  K("chunk_scan tc", nc * H * (Q * Q * P + 2 * Q * N * P) + 2 * nc * H * Q * Q * N,
                    ea * (4 * Bz * L * H * P + 2 * Bz * L * G * N) + 4 * nc * H * P * N, "tc",
                    peak=pk)]
    if tc_bwd:
        for k in f:
            if k.cls in ("simt_tile", "simt_loop"):
                k.cls, k.peak = "tc", pk
    return f


def use_device(name):
    global BW, SMS, CLOCK
    d = DEVICES[name]
    BW, SMS, CLOCK = d["copy"] * C["bw_fraction"], d["sms"], d["clock"]
    PEAK.update(fp32=d["fp32"], tf32=d["tf32"], bf16=d["bf16"])


def use_constants(consts, device="h200"):
    C.clear()
    C.update(consts)
    use_device(device)


def total(ks):
    return sum(k.time() for k in ks)


def call_time(model, shape, e, bwd):
    """Seconds per call as the benches time it: gpu-bench's C API for ours / ours_tc (the
    kernels), gpu_compare's Python op for ours_py (plus its host cost, twice for fwd + bwd) and
    for mamba_ssm (its host cost added, or overlapping the kernels when C says so)."""
    n = 2 if bwd else 1
    if model == "ours_py":
        return total(ours_portable(shape, e, bwd)) + n * C["ours_host"]
    if model == "design":
        return total(design(shape, e, bwd)) + n * C["ours_host"]
    dev = total(MODELS[model](shape, e, bwd))
    if model != "mamba_ssm":
        return dev
    host = C["mssm_host_fb" if bwd else "mssm_host_fwd"]
    return max(host, dev) if C["mssm_overlap"] else host + dev


def times(shape, e):
    """{model: (fwd s, fwd + bwd s)}"""
    return {m: (call_time(m, shape, e, False), call_time(m, shape, e, True))
            for m in ("mamba_ssm", "ours", "ours_tc", "ours_py", "design")}


# The 2026-12-04 H200 run (bench/gpu_check.sh; docs/gpu_model.md), ms, CUDA-event medians.
# gpu-bench, float32, the C API: fwd, fwd + bwd (portable); fwd, fwd + bwd (MAMBA2C_CUDA_TC=1)
MEASURED_BENCH = {
    "tiny": (0.083, 0.282, 0.087, 0.287),
    "generic_tail_l513": (0.181, 0.430, 0.206, 0.454),
    "seq_1024": (2.685, 14.811, 1.835, 13.892),
    "seq_4096": (10.404, 58.094, 6.960, 54.612),
    "batch_1": (1.150, 2.736, 1.272, 3.173),
    "head_64": (4.731, 27.645, 3.444, 26.395),
    "headdim_128": (0.556, 2.223, 0.610, 2.246),
    "heavy_h256": (48.441, 286.019, 26.487, 263.686)}
# gpu_compare (torch 2.11, Triton 3.6): ours (the Python op, portable) fwd, fwd + bwd;
# mamba_ssm (mamba_chunk_scan_combined) fwd, fwd + bwd
MEASURED_COMPARE = {
    ("tiny", "f32"): (0.321, 1.047, 0.834, 5.393),
    ("tiny", "bf16"): (0.321, 1.301, 0.633, 5.494),
    ("seq_1024", "f32"): (3.156, 15.227, 1.160, 4.752),
    ("seq_1024", "bf16"): (3.485, 17.099, 0.895, 5.122),
    ("seq_4096", "f32"): (10.724, 58.663, 1.773, 6.074),
    ("seq_4096", "bf16"): (13.188, 66.366, 0.994, 4.576)}


def measured_rows():
    """(label, model, case shape, element bytes, bwd, measured s)"""
    shapes = dict(cases())
    rows = []
    for nm, ms in MEASURED_BENCH.items():
        for i, (m, bwd) in enumerate((("ours", 0), ("ours", 1), ("ours_tc", 0), ("ours_tc", 1))):
            rows.append((nm, m, shapes[nm], 4, bwd, ms[i] * 1e-3))
    for (nm, dt), ms in MEASURED_COMPARE.items():
        e = 2 if dt == "bf16" else 4
        for i, (m, bwd) in enumerate((("ours_py", 0), ("ours_py", 1), ("mamba_ssm", 0),
                                      ("mamba_ssm", 1))):
            rows.append((f"{nm} {dt}", m, shapes[nm], e, bwd, ms[i] * 1e-3))
    return rows


def sq_log_error(consts, rows):
    use_constants(consts)
    return sum(math.log(t / call_time(m, sh, e, b)) ** 2 for _, m, sh, e, b, t in rows)


FREE = ("bw_fraction", "launch", "eff_wmma", "eff_walk", "eff_simt_tile",
        "step_portable", "step_tc", "cvt", "mssm_host_fwd", "mssm_host_fb", "ours_host")


def solve():
    """Least squares in log(measured / model) over MEASURED, by coordinate descent on the FREE
    constants (multiplicative steps), from OLD with mamba_ssm's host overlapping its kernels."""
    rows = measured_rows()
    c = dict(OLD, mssm_overlap=1)
    best = sq_log_error(c, rows)
    for step in (2.0, 1.25, 1.05, 1.01):
        improved = True
        while improved:
            improved = False
            for k in FREE:
                for f in (step, 1 / step):
                    trial = dict(c, **{k: c[k] * f})
                    if k in ("bw_fraction", "cvt") or k.startswith("eff"):
                        trial[k] = min(trial[k], 1.0)
                    err = sq_log_error(trial, rows)
                    if err < best - 1e-12:
                        c, best, improved = trial, err, True
    use_constants(FIT)
    return c, best


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def print_fit():
    rows = measured_rows()
    print("| row | kind | mode | measured ms | old model | fitted model | measured / old "
          "| measured / fit |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    res = []
    for lab, m, sh, e, b, t in rows:
        use_constants(OLD)
        old = call_time(m, sh, e, b)
        if m in ("ours", "ours_tc"):  # the old table added its 0.1 ms Python host cost
            old += (1 + b) * OLD["ours_host"]
        use_constants(FIT)
        new = call_time(m, sh, e, b)
        res.append(t / new)
        kind = {"ours": "gpu-bench", "ours_tc": "gpu-bench tc", "ours_py": "ours (Python)",
                "mamba_ssm": "mamba_ssm"}[m]
        print(f"| {lab} | {kind} | {'fwd+bwd' if b else 'fwd'} | {1e3 * t:.3f} | {1e3 * old:.3f} | "
              f"{1e3 * new:.3f} | {t / old:.2f} | {t / new:.2f} |")
    lg = [abs(math.log(r)) for r in res]
    print(f"\n{len(res)} rows; measured / fit {min(res):.2f} .. {max(res):.2f}, rms of "
          f"log(measured / fit) {math.sqrt(sum(x * x for x in lg) / len(lg)):.3f}; "
          f"{sum(x < math.log(1.25) for x in lg)} rows within 25 %")


def print_designs(sel, e):
    """Predictions for designs not written yet, against the fitted mamba_ssm."""
    print(f"predicted ms, {'bf16' if e == 2 else 'f32'}, Python calls (mamba2c's host cost "
          "included); designs not written: predictions")
    variants = (("now (best of portable, tc)", None), ("tc fwd", dict(tc_bwd=False, native=False)),
                ("tc fwd + tc bwd", dict(native=False)), ("+ native half", dict()))
    print("| case | mamba_ssm fwd | mamba_ssm f+b | " + " | ".join(
        f"{v} fwd | {v} f+b" for v, _ in variants) + " |")
    print("|---|" + "---:|" * (2 + 2 * len(variants)))
    logs = {v: ([], []) for v, _ in variants}
    for nm, shape in cases(sel):
        t = times(shape, e)
        cells = [f"{1e3 * t['mamba_ssm'][0]:.3f}", f"{1e3 * t['mamba_ssm'][1]:.3f}"]
        for v, kw in variants:
            if kw is None:
                d = [min(t["ours"][i], t["ours_tc"][i]) + (1 + i) * C["ours_host"] for i in (0, 1)]
            else:
                d = [total(design(shape, e, i, **kw)) + (1 + i) * C["ours_host"] for i in (0, 1)]
            for i in (0, 1):
                logs[v][i].append(t["mamba_ssm"][i] / d[i])
            cells += [f"{1e3 * d[0]:.3f} ({t['mamba_ssm'][0] / d[0]:.2f}x)",
                      f"{1e3 * d[1]:.3f} ({t['mamba_ssm'][1] / d[1]:.2f}x)"]
        print(f"| {nm} | " + " | ".join(cells) + " |")
    print("\ngeometric mean mamba_ssm / ours over these cases: " + "; ".join(
        f"{v}: fwd {gmean(a):.2f}, f+b {gmean(b):.2f}" for v, (a, b) in logs.items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="all")
    ap.add_argument("--kernels", action="store_true", help="per-kernel rows")
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--device", default="h200", choices=sorted(DEVICES))
    ap.add_argument("--old", action="store_true", help="the pre-run constants (OLD)")
    ap.add_argument("--fit", action="store_true", help="measured vs old and fitted model")
    ap.add_argument("--solve", action="store_true", help="re-run the fit, print the constants")
    ap.add_argument("--designs", action="store_true", help="predictions for unwritten designs")
    ap.add_argument("--tc-bwd", action="store_true",
                    help="prediction for the tensor-core backward as written (per kernel)")
    a = ap.parse_args(argv)
    e = 2 if a.dtype == "bf16" else 4
    use_constants(OLD if a.old or a.device == "a100" else FIT, a.device)
    if a.solve:
        c, err = solve()
        n = len(measured_rows())
        for k in FREE:
            print(f"{k:14s} {c[k]:.4g}  (old {OLD[k]:.4g}, FIT {FIT[k]:.4g})")
        print(f"rms of log(measured / model) {math.sqrt(err / n):.3f} over {n} rows")
        return
    if a.fit:
        print_fit()
        return
    if a.designs:
        print_designs(a.cases, e)
        return
    if a.tc_bwd:
        print("prediction (not a measurement): ms on an H200, the C API, forward + backward, "
              f"{a.dtype}; the written tc backward at eff_tc = {C['eff_tc']} (unfitted)")
        for nm, shape in cases(a.cases):
            now, tcb = ours_tc(shape, e, True), ours_tc_bwd(shape, e, True)
            ms = times(shape, e)["mamba_ssm"][1]
            print(f"{nm}: ours tc now {1e3 * total(now):.2f}, with the tc backward "
                  f"{1e3 * total(tcb):.2f}; mamba_ssm (fit) {1e3 * ms:.2f}")
            for k0, k1 in zip(now, tcb):
                if k1.name in TC_BWD:
                    print(f"   {k1.name:22s} {1e3 * k0.time():7.3f} -> {1e3 * k1.time():7.3f} ms"
                          f"  ({k1.bytes / 1e9:.2f} GB, {k1.flops / 1e9:.1f} GFLOP issued)")
        return
    if a.device == "a100":
        print("the fit: mamba_ssm forward, f32, model vs published A100 ms")
        for nm, shape in cases(",".join(PUBLISHED_A100)):
            t = times(shape, 4)["mamba_ssm"][0] * 1e3
            print(f"  {nm:12s} model {t:7.3f}  published {PUBLISHED_A100[nm]:7.3f}  "
                  f"published/model {PUBLISHED_A100[nm] / t:.2f}")
        return
    print(f"{'predicted (pre-run constants)' if a.old else 'model fitted to the 2026-12-04 run'}"
          f": ms on an H200, {a.dtype} (bench/gpu_model.py; not a measurement)")
    print("| case | [B,L,H,P,N,Q,G] | mamba_ssm fwd | ours fwd | ours tc fwd | mamba_ssm f+b "
          "| ours f+b | ours tc f+b | mssm/best fwd | mssm/best f+b | tc walk bound |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    logs = {"fwd": [], "fb": []}
    for nm, shape in cases(a.cases):
        t = times(shape, e)
        h = C["ours_host"]
        best_f = min(t["ours"][0], t["ours_tc"][0]) + h
        best_b = min(t["ours"][1], t["ours_tc"][1]) + 2 * h
        rf, rb = t["mamba_ssm"][0] / best_f, t["mamba_ssm"][1] / best_b
        logs["fwd"].append(rf)
        logs["fb"].append(rb)
        wk = [k for k in ours_tc(shape, e, False) if "walk" in k.name][0]
        comp = wk.flops / (PEAK["bf16" if e == 2 else "tf32"] * C["eff_wmma"])
        bound = max((wk.serial, "latency"), (comp, "throughput"), (wk.bytes / BW, "memory"))[1]
        print(f"| {nm} | {','.join(map(str, shape))} | {1e3 * t['mamba_ssm'][0]:.3f} | "
              f"{1e3 * t['ours'][0]:.3f} | {1e3 * t['ours_tc'][0]:.3f} | {1e3 * t['mamba_ssm'][1]:.3f} | "
              f"{1e3 * t['ours'][1]:.3f} | {1e3 * t['ours_tc'][1]:.3f} | {rf:.2f} | {rb:.2f} | {bound} |")
        if a.kernels:
            for m, fn in MODELS.items():
                for k in fn(shape, e, True):
                    print(f"|  | {m}: {k.name} | {k.flops / 1e9:.3f} GFLOP | {k.bytes / 1e9:.4f} GB | "
                          f"{1e3 * k.time():.4f} ms | {k.cls} |  |  |  |  |  |")
    print(f"\ngeometric mean mamba_ssm / best of ours (Python calls): forward {gmean(logs['fwd']):.2f}, "
          f"forward + backward {gmean(logs['fb']):.2f} over {len(logs['fwd'])} cases")


if __name__ == "__main__":
    main()
