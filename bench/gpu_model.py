#!/usr/bin/env python3
"""gpu_model.py — a per-kernel traffic and time model of the SSD on an H200: mamba2c's CUDA
kernels (the portable default and the tensor-core forward) and mamba_ssm's Triton kernels,
forward and forward + backward, over the 52 cases of shared/bench_shapes.md. A prediction
for bench/gpu_check.sh to confirm or refute (docs/gpu.md §4a), never a measurement.

    python3 bench/gpu_model.py [--cases all|a,b] [--kernels] [--markdown]

Per kernel: flops (the kernel's own arithmetic, not the recurrence count of docs/flops.md),
DRAM bytes (every tensor it reads or writes once: unique traffic, L2 reuse assumed for what
several blocks share), a class, and a time
    t = max(bytes / BW, flops / (peak x eff[class]), serial) + LAUNCH,
with serial the latency chain of the kernels that walk a sequence's chunks in order (blocks
beyond one wave queue behind it). The constants below are the model's whole input: H200
figures from shared/GPU_NOTES.md (4.3 TB/s measured copy, 67 TFLOP/s FP32, 495 / 989 TFLOP/s
dense TF32 / bf16 datasheet, 132 SMs at 1.98 GHz) and efficiencies that are guesses to be
fitted to the device run, except the bandwidth fraction and mamba_ssm's fixed host cost,
fitted to the only published GPU timings we have (shared/bench_shapes.md: mamba_ssm on an
A100, full features, seq_512 .. seq_16384 and heavy_h256 forward): `--device a100` prints that
fit: published / model 0.86-1.06 over the seq series and heavy_h256, except seq_512 at
1.24 (the published seq_512 and seq_1024 differ by only 0.12 ms: a fixed cost no single
host constant fits).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

DEVICES = {  # copy bandwidth (measured on the H200; A100 80GB PCIe: 1.7 TB/s), peaks, SMs, clock
    "h200": dict(copy=4.3e12, fp32=67e12, tf32=495e12, bf16=989e12, sms=132, clock=1.98e9),
    "a100": dict(copy=1.7e12, fp32=19.5e12, tf32=156e12, bf16=312e12, sms=108, clock=1.41e9)}
BW_FRACTION = 0.55  # of the copy: what mamba_ssm's forward reached in the A100 figures
MSSM_HOST = 0.2e-3  # s per mamba_ssm call (Python + Triton launches + torch glue): the A100 fit
OURS_HOST = 0.1e-3  # s per call of mamba2c's Python op (ctypes, checks): the CPU dry run's
                    # whole tiny-case calls take 0.11-0.18 ms, compute included: an upper bound
PUBLISHED_A100 = {"seq_512": 0.827, "seq_1024": 0.949, "seq_2048": 1.879, "seq_4096": 3.758,
                  "seq_8192": 7.485, "seq_16384": 15.041, "heavy_h256": 22.583}
BW = 4.3e12 * BW_FRACTION
PEAK = {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12}
EFF = {"tc": 0.30,                   # tensor-core tiles (Triton's tl.dot; our wmma)
       "simt_tile": 0.25,            # 16x16 shared-memory FP32 tiles, 2 loads per FMA
       "simt_loop": 0.08,            # one work-item per output, serial loop, coalesced
       "stream": 1.0}                # elementwise / scans: memory only
SMS, CLOCK = 132, 1.98e9
LAUNCH = 3e-6                        # s per launch (launch + tail)
CHUNK_STEP = {"portable": 3.0e-6,    # s per chunk of a sequence walk: loads, ~10 barriers,
              "tc": 2.5e-6}          # the chunk's matmuls at one block's share of an SM
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
        comp = self.flops / (PEAK[self.peak] * EFF[self.cls]) if self.cls != "stream" else 0.0
        # uncoalesced loads: one L1 wavefront per thread of the warp, ~1 wavefront per SM clock
        unc = self.unc / (SMS * CLOCK)
        return max(self.bytes / BW, comp, self.serial, unc) + LAUNCH


def dims(shape, Q=None):
    Bz, L, H, P, N, Qc, G = shape
    Q = Q or Qc
    Kc = -(-L // Q)
    return Bz, L, H, P, N, Q, G, Kc, Bz * Kc


def walk(blocks, chunks, kind):
    waves = math.ceil(blocks / (SMS * RESIDENT[kind]))
    return waves * chunks * CHUNK_STEP[kind]


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


def ours_portable(shape, e, bwd):
    """mamba2c's CUDA default: chunk_cumsum, bmm_chunk, then the on-chip sequence walk
    (scan_seq: chunk_state + state_passing + chunk_scan with the state in shared memory) at the
    fused ops' Q = 64; half storage widened to float32 copies first (m2_cvt)."""
    Bz, L, H, P, N, Q, G, Kc, nc = dims(shape, 64)
    n_act = Bz * L * (3 * H * P + H + 2 * G * N)
    f = []
    if e == 2:
        f.append(K("cvt to/from f32", 0, 6 * n_act + 6 * Bz * L * H * P, "stream"))
    f += [K("chunk_cumsum", 10 * Bz * L * H, 4 * Bz * L * H + 8 * H * nc * Q, "stream"),
          K("bmm_chunk CB", 2 * nc * G * Q * Q * N, 8 * Bz * L * G * N + 4 * nc * G * Q * Q, "simt_tile")]
    blocks = Bz * H * math.ceil(P / 16)
    sflops = 2 * nc * H * Q * P * N + 2 * nc * H * P * N + nc * H * (Q * Q * P + 2 * Q * N * P)
    f.append(K("scan_seq (walk)", sflops,
               4 * (3 * Bz * L * H * P + nc * G * Q * Q + 2 * Bz * L * G * N + 2 * H * nc * Q
                    + 2 * Bz * H * P * N), "simt_tile", serial=walk(blocks, Kc, "portable")))
    if not bwd:
        return f
    # the backward recomputes the staged forward (states to DRAM), then ssd_bwd.c's launches
    act = 4 * Bz * L * H * P
    st = 4 * nc * H * P * N
    b = [K("re: chunk_state", 2 * nc * H * Q * P * N, act + 4 * Bz * L * G * N + st, "simt_tile"),
         K("re: state_passing", 2 * nc * H * P * N, 2 * st, "stream"),
         K("bwd_gate", 6 * Bz * L * H * P, 5 * act, "stream"),
         K("chunk_state mode 1", 2 * nc * H * Q * P * N, act + 4 * Bz * L * G * N + st, "simt_tile"),
         K("bwd_state_passing", 2 * nc * H * P * N, 3 * st, "stream"),
         K("bwd_dx_16x16", nc * H * (Q * Q * P + 2 * Q * N * P),
           3 * act + 4 * nc * G * Q * Q + 4 * Bz * L * G * N + st, "simt_tile"),
         K("bwd_E_16x16", nc * H * Q * Q * P, 2 * act + 4 * nc * H * Q * Q, "simt_tile"),
         K("bwd_dcb", nc * G * Q * Q * (H // G), 4 * nc * H * Q * Q + 4 * nc * G * Q * Q, "simt_loop"),
         K("bwd_rq", nc * H * Q ** 3 // 2, 4 * nc * H * Q * Q + 4 * nc * G * Q * Q, "simt_loop"),
         K("bwd_dbc x2", 4 * nc * G * (Q * Q * N + (H // G) * Q * P * N),
           2 * (4 * nc * G * Q * Q + 8 * Bz * L * G * N + act + st), "simt_tile"),
         # u, g: (16 x P)(P x 16) tiles (before 091e511 a work-item per token whose warp loads
         # were H.P floats apart: uncoalesced=2 B L H P N wavefronts, 65.7 ms at seq_4096)
         K("bwd_tok_16x16", 4 * nc * H * Q * P * N, 2 * act + 8 * Bz * L * G * N + 2 * st,
           "simt_tile"),
         K("bwd_dt, dD, params", 20 * Bz * L * H * P, 3 * act, "stream")]
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
           + 8 * H * nc * Q + 8 * Bz * H * P * N, "tc", peak=pk, serial=walk(blocks, Kc, "tc"))]
    if e == 2:
        f.insert(0, K("cvt to/from f32", 0, 6 * Bz * L * (3 * H * P + H + 2 * G * N), "stream"))
    if not bwd:
        return f
    return f + [k for k in ours_portable(shape, e, True) if k.name not in
                ("chunk_cumsum", "bmm_chunk CB", "scan_seq (walk)", "cvt to/from f32")]


MODELS = {"mamba_ssm": mamba_ssm, "ours": ours_portable, "ours_tc": ours_tc}


def use_device(name):
    global BW, SMS, CLOCK
    d = DEVICES[name]
    BW, SMS, CLOCK = d["copy"] * BW_FRACTION, d["sms"], d["clock"]
    PEAK.update(fp32=d["fp32"], tf32=d["tf32"], bf16=d["bf16"])


def total(ks, host=0.0):
    return sum(k.time() for k in ks) + host


def times(shape, e):
    """{model: (fwd s, fwd + bwd s)}; mamba_ssm pays its host cost once per call."""
    out = {}
    for m, fn in MODELS.items():
        h = MSSM_HOST if m == "mamba_ssm" else OURS_HOST
        out[m] = (total(fn(shape, e, False), h), total(fn(shape, e, True), 2 * h))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="all")
    ap.add_argument("--kernels", action="store_true", help="per-kernel rows")
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    ap.add_argument("--device", default="h200", choices=sorted(DEVICES))
    a = ap.parse_args(argv)
    e = 2 if a.dtype == "bf16" else 4
    use_device(a.device)
    if a.device == "a100":
        print("the fit: mamba_ssm forward, f32, model vs published A100 ms")
        for nm, shape in cases(",".join(PUBLISHED_A100)):
            t = times(shape, 4)["mamba_ssm"][0] * 1e3
            print(f"  {nm:12s} model {t:7.3f}  published {PUBLISHED_A100[nm]:7.3f}  "
                  f"published/model {PUBLISHED_A100[nm] / t:.2f}")
        return
    print(f"predicted ms on an H200, {a.dtype} (bench/gpu_model.py; a model, not a measurement)")
    print("| case | [B,L,H,P,N,Q,G] | mamba_ssm fwd | ours fwd | ours tc fwd | mamba_ssm f+b "
          "| ours f+b | ours tc f+b | mssm/best fwd | mssm/best f+b | ours bound |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    logs = {"fwd": [], "fb": []}
    for nm, shape in cases(a.cases):
        t = times(shape, e)
        best_f = min(t["ours"][0], t["ours_tc"][0])
        best_b = min(t["ours"][1], t["ours_tc"][1])
        rf, rb = t["mamba_ssm"][0] / best_f, t["mamba_ssm"][1] / best_b
        logs["fwd"].append(math.log(rf))
        logs["fb"].append(math.log(rb))
        walk_k = [k for k in ours_tc(shape, e, False) if "walk" in k.name][0]
        bound = ("latency (walk)" if walk_k.serial >= max(walk_k.bytes / BW, 1e-12)
                 and walk_k.serial > walk_k.flops / (PEAK["tf32"] * EFF["tc"]) else "memory")
        print(f"| {nm} | {','.join(map(str, shape))} | {1e3 * t['mamba_ssm'][0]:.3f} | "
              f"{1e3 * t['ours'][0]:.3f} | {1e3 * t['ours_tc'][0]:.3f} | {1e3 * t['mamba_ssm'][1]:.3f} | "
              f"{1e3 * t['ours'][1]:.3f} | {1e3 * t['ours_tc'][1]:.3f} | {rf:.2f} | {rb:.2f} | {bound} |")
        if a.kernels:
            for m, fn in MODELS.items():
                for k in fn(shape, e, True):
                    print(f"|  | {m}: {k.name} | {k.flops / 1e9:.3f} GFLOP | {k.bytes / 1e9:.4f} GB | "
                          f"{1e3 * k.time():.4f} ms | {k.cls} |  |  |  |  |  |")
    gm = {k: math.exp(sum(v) / len(v)) for k, v in logs.items() if v}
    print(f"\ngeometric mean mamba_ssm / best of ours: forward {gm['fwd']:.2f}, forward + backward "
          f"{gm['fb']:.2f} over {len(logs['fwd'])} cases")


if __name__ == "__main__":
    main()
