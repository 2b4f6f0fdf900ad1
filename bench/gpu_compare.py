#!/usr/bin/env python3
"""gpu_compare.py — the SSD side by side on one device: mamba2c's Python op, mamba_ssm's
Triton `mamba_chunk_scan_combined` and the chunked SSD in PyTorch ops, same inputs.

    python bench/gpu_compare.py --mamba-ssm DIR [--cases std|all|a,b,...] [--cases-file F]
                                [--dtypes f32,bf16] [--modes fwd,fwdbwd] [--varlen]
                                [--deadline S] [--reps N] [--out DIR]
    python bench/gpu_compare.py --cpu-dry-run [--mamba-ssm DIR]

Per case ([B,L,H,P,N,Q,G]; all options on: D [H,P], z, dt_bias, softplus, initial state,
final state returned; seed 20260801, the distributions of bench/gpu_check.sh) and dtype it
times the forward (no_grad) and forward + backward (autograd with cotangents for out and
the final state) of
  ours      mamba2c.mamba_chunk_scan_combined   (the CUDA backend on CUDA tensors)
  mamba_ssm its Triton kernels, imported from the copy at DIR (bench/mamba_ssm_loader.py:
            mamba_ssm is not installed; its autotuning is bounded and cached)
  torch     bench/side_by_side.ssd_minimal      (the Mamba-2 paper's chunked listing)
as CUDA-event medians (wall-clock medians in the dry run), after one untimed call (Triton's
compile and autotuning land there). Outputs are compared: `err` is the largest normalised
difference ‖ours − mamba_ssm‖/‖mamba_ssm‖ over out, the final state and (fwdbwd) the nine
gradients. Ratio columns are peer ms / ours ms (> 1: ours faster); %roof is the roofline
time (max of compulsory bytes / measured copy bandwidth, recurrence flops / measured matmul
peak; docs/flops.md) over the measured time. The last lines give geometric means of the
ratios per mode. --varlen adds packed rows (four sequences in each row by seq_idx, starting from a zero
state; the torch peer has no varlen).

--cpu-dry-run: the CPU, two tiny cases, f32 and bf16, and varlen; mamba_ssm (if DIR is
given) through Triton's interpreter (TRITON_INTERPRET=1). It checks the plumbing and the
agreement, never a speed. Everything goes to stdout and, with --out, to DIR/compare.txt
and DIR/compare.json. Exit status 1 when a compared output disagrees beyond the tier's
tolerance (f32: 1e-3 fwd, 1e-2 fwdbwd, as Triton's tf32 dot; bf16: 5e-2) or a side failed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))

DRY_CASES = [("generic_tail_l65", [1, 65, 4, 16, 16, 32, 2]), ("tiny_g2", [2, 40, 4, 8, 8, 16, 2])]
TOL = {("f32", "fwd"): 1e-3, ("f32", "fwdbwd"): 1e-2, ("bf16", "fwd"): 5e-2,
       ("bf16", "fwdbwd"): 5e-2}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mamba-ssm", default=os.environ.get("MAMBA_SSM_PATH"),
                    help="a copy of mamba_ssm (repository, package dir or flat ssd_*.py copy)")
    ap.add_argument("--cases", default="std", help="std | all | comma-separated names")
    ap.add_argument("--cases-file", help="'name B,L,H,P,N,Q,G' lines (gpu-bench --list)")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--modes", default="fwd,fwdbwd")
    ap.add_argument("--varlen", action="store_true")
    ap.add_argument("--deadline", type=float, default=240.0, help="seconds for the whole run")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds of repeats per timing")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--cpu-dry-run", action="store_true")
    return ap.parse_args(argv)


def case_list(args):
    import side_by_side as sbs
    if args.cpu_dry_run:
        return DRY_CASES
    if args.cases_file:
        rows = []
        for line in open(args.cases_file):
            if line.strip():
                nm, shp = line.split()[:2]
                rows.append((nm, [int(v) for v in shp.split(",")]))
    else:
        rows = list(sbs.STANDARD)
    if args.cases not in ("std", "all"):
        want = args.cases.split(",")
        rows = [r for r in rows if r[0] in want]
    return rows


class Side:
    """One implementation: name, fn(t, Q, seq_idx) -> (out, final), and whether it serves
    bf16, varlen and the backward."""

    def __init__(self, name, fn, bf16=True, varlen=True, bwd=True):
        self.name, self.fn, self.bf16, self.varlen, self.bwd = name, fn, bf16, varlen, bwd


def sides(args, device):
    import torch
    import mamba2c
    import side_by_side as sbs

    def ours(t, Q, seq_idx):
        return mamba2c.mamba_chunk_scan_combined(
            t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"],
            dt_bias=t["dt_bias"], initial_states=t.get("init"), seq_idx=seq_idx,
            dt_softplus=True, return_final_states=True)

    if device.type == "cuda":
        def _segsum(x):  # sbs._segsum with its masks on x's device
            T = x.size(-1)
            x = x[..., None].expand(*x.shape, T)
            m1 = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), -1)
            x = torch.cumsum(x.masked_fill(~m1, 0), dim=-2)
            m0 = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device), 0)
            return x.masked_fill(~m0, -math.inf)
        sbs._segsum = _segsum

    def torch_peer(t, Q, seq_idx):
        return sbs.ssd_minimal(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"],
                               dt_bias=t["dt_bias"], initial_states=t.get("init"),
                               dt_softplus=True)

    out = [Side("ours", ours)]
    notes = []
    if args.mamba_ssm:
        try:
            import mamba_ssm_loader
            if device.type != "cuda":
                import contextlib
                torch.cuda.device = lambda i: contextlib.nullcontext()  # CPU tensors: index None
            fn = mamba_ssm_loader.load(args.mamba_ssm)
            n = mamba_ssm_loader.bound_autotuning()
            notes.append(f"mamba_ssm from {args.mamba_ssm}: {n} autotuned kernels bounded"
                         + (" (Triton interpreter)" if device.type != "cuda" else ""))

            def mssm(t, Q, seq_idx):
                return fn(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"],
                          dt_bias=t["dt_bias"], initial_states=t.get("init"), seq_idx=seq_idx,
                          dt_softplus=True, return_final_states=True)
            if device.type == "cuda":
                out.append(Side("mamba_ssm", mssm))
            else:  # its backward is a custom_bwd for device "cuda"; the interpreter's bf16
                # loads/stores are not mamba_ssm's (numbers off by ~1e10 in a check)
                out.append(Side("mamba_ssm", mssm, bf16=False, bwd=False))
                notes.append("mamba_ssm in the dry run: float32 forward only (its backward "
                             "needs CUDA; bf16 under Triton's interpreter is not its GPU path)")
        except Exception as e:  # noqa: BLE001 - report and go on without it
            notes.append(f"mamba_ssm not loaded: {type(e).__name__}: {e}")
    else:
        notes.append("mamba_ssm: no copy given (--mamba-ssm DIR or MAMBA_SSM_PATH): not compared")
    out.append(Side("torch", torch_peer, bf16=False, varlen=False))
    return out, notes


def make_inputs(shape, dtype, varlen, bwd, device):
    import torch
    Bz, L, H, P, N, Q, G = shape
    g = torch.Generator(device=device).manual_seed(20260801)

    def nrm(*s, scale=1.0):
        return torch.randn(*s, generator=g, device=device) * scale

    def uni(lo, hi, *s):
        return lo + (hi - lo) * torch.rand(*s, generator=g, device=device)
    act = torch.bfloat16 if dtype == "bf16" else torch.float32
    t = dict(x=nrm(Bz, L, H, P).to(act), dt=uni(0.01, 0.11, Bz, L, H).to(act), A=-uni(0.1, 0.5, H),
             B=nrm(Bz, L, G, N, scale=0.2).to(act), C=nrm(Bz, L, G, N, scale=0.2).to(act),
             D=nrm(H, P), z=nrm(Bz, L, H, P).to(act), dt_bias=nrm(H, scale=0.1))
    seq_idx = None
    if varlen:  # four sequences, of lengths 3:1:2:2 (rounded), in each row
        cuts = [0, (3 * L) // 8, L // 2, (3 * L) // 4]
        seq_idx = torch.zeros(Bz, L, dtype=torch.int32, device=device)
        for k, c in enumerate(cuts):
            seq_idx[:, c:] = k
    else:
        t["init"] = nrm(Bz, H, P, N, scale=0.2)
    cot = None
    if bwd:
        for v in t.values():
            v.requires_grad_(True)
        cot = (nrm(Bz, L, H, P).to(act), nrm(Bz, H, P, N, scale=0.2))
    return t, seq_idx, cot


def call(side, t, Q, seq_idx, cot):
    """One call; returns the tensors to compare (out, final, and the gradients)."""
    import torch
    if cot is None:
        with torch.no_grad():
            out, fin = side.fn(t, Q, seq_idx)
        return [out, fin]
    for v in t.values():
        v.grad = None
    out, fin = side.fn(t, Q, seq_idx)
    torch.autograd.backward((out, fin), cot)
    return [out.detach(), fin.detach()] + [t[k].grad for k in sorted(t)]


def timed(fn, device, reps, budget):
    """(median ms, n, seconds of the untimed first call) of up to reps calls within budget
    seconds, after one untimed call."""
    import torch
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    warm = time.perf_counter() - t0
    ms = []
    while len(ms) < reps and (not ms or sum(ms) * 1e-3 + warm <= budget):
        if device.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1))
        else:
            t0 = time.perf_counter()
            fn()
            ms.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ms), len(ms), warm


def nerr(a, b):
    import torch
    if a is None or b is None:
        return float("nan") if (a is None) != (b is None) else 0.0
    a, b = a.double(), b.double()
    den = b.norm().item()
    return (a - b).norm().item() / (den if den > 0 else 1.0)


def peaks(device):
    """(matmul TFLOP/s: fp32 with TF32 off, bf16; copy GB/s), measured now."""
    import torch
    n = 8192 if device.type == "cuda" else 512
    res = {}
    for label, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        a = torch.randn(n, n, device=device, dtype=dt)
        b = torch.randn(n, n, device=device, dtype=dt)
        ms, _, _ = timed(lambda: a @ b, device, 10, 2.0)
        res[label] = 2 * n ** 3 / (ms * 1e-3) / 1e12
    m = (1 << 28) if device.type == "cuda" else (1 << 22)
    x = torch.empty(m, device=device)
    y = torch.empty_like(x)
    ms, _, _ = timed(lambda: y.copy_(x), device, 10, 2.0)
    res["gbs"] = 8 * m / (ms * 1e-3) / 1e9
    return res


def work(shape, dtype, mode):
    """(recurrence flops, compulsory bytes) of one call (docs/flops.md)."""
    Bz, L, H, P, N, Q, G = shape
    e = 2 if dtype == "bf16" else 4
    flops = (4 if mode == "fwd" else 14) * Bz * L * H * P * N
    io = Bz * L * (3 * H * P * e + H * e + 2 * G * N * e) + 2 * Bz * H * P * N * 4
    return flops, io * (1 if mode == "fwd" else 3)


def main(argv=None):
    args = parse_args(argv)
    if args.cpu_dry_run and args.mamba_ssm:  # before triton is first imported (torch may)
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    device = torch.device("cpu" if args.cpu_dry_run else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_compare: torch sees no CUDA device (use --cpu-dry-run on a CPU)")
        return 2
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    t_start = time.time()
    impls, notes = sides(args, device)
    pk = peaks(device)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU (dry run)"
    dtypes, modes = args.dtypes.split(","), args.modes.split(",")
    rows, bad = [], []
    cases = list(case_list(args))
    # variant by variant (float32, then bf16, then their varlen rows), every case within each:
    # each new variant costs mamba_ssm a round of Triton compiles and autotuning, so a run cut
    # short by its deadline still has the first variants of every case (the report sorts the
    # rows back by case)
    variants = [(varlen, dtype) for varlen in
                ([False, True] if args.varlen or args.cpu_dry_run else [False]) for dtype in dtypes]
    for varlen, dtype in variants:
        for nm, shape in cases:
            for mode in modes:
                if time.time() - t_start > args.deadline:
                    notes.append(f"{nm} {dtype} {mode}{' varlen' if varlen else ''}: "
                                 "skipped (deadline)")
                    continue
                row = dict(case=nm + ("/varlen" if varlen else ""), shape=shape,
                           dtype=dtype, mode=mode, ms={}, err=None)
                got = {}
                for s in impls:
                    if ((dtype == "bf16" and not s.bf16) or (varlen and not s.varlen)
                            or (mode == "fwdbwd" and not s.bwd)):
                        continue
                    try:
                        t0 = time.time()
                        t, sq, cot = make_inputs(shape, dtype, varlen, mode == "fwdbwd", device)
                        got[s.name] = call(s, t, shape[5], sq, cot)
                        first = time.time() - t0  # compiles and autotuning land here
                        row["ms"][s.name], n, _ = timed(lambda: call(s, t, shape[5], sq, cot),
                                                        device, args.reps, args.budget)
                        del t, cot
                        # where the run's time goes, on stderr as it happens (the log)
                        print(f"[{time.time() - t_start:6.1f} s] {row['case']} {dtype} {mode} "
                              f"{s.name}: first call {first:.2f} s, {n} timed, "
                              f"{time.time() - t0:.2f} s in all", file=sys.stderr, flush=True)
                    except Exception as e:  # noqa: BLE001 - one failed side, one note
                        if device.type == "cuda" and isinstance(e, torch.cuda.OutOfMemoryError):
                            row["ms"][s.name] = "OOM"
                        else:
                            row["ms"][s.name] = "error"
                            bad.append(f"{row['case']} {dtype} {mode} {s.name}: {e}")
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                peer = "mamba_ssm" if "mamba_ssm" in got else "torch" if "torch" in got else None
                if "ours" in got and peer:
                    row["err"] = max(nerr(a, b) for a, b in zip(got["ours"], got[peer]))
                    row["err_vs"] = peer
                    if not row["err"] <= TOL[(dtype, mode)]:
                        bad.append(f"{row['case']} {dtype} {mode}: ours vs {peer} "
                                   f"{row['err']:.2e} > {TOL[(dtype, mode)]:.0e}")
                fl, by = work(shape, dtype, mode)
                roof = max(by / (pk["gbs"] * 1e9), fl / (pk[dtype] * 1e12)) * 1e3
                o = row["ms"].get("ours")
                row["roof_frac"] = roof / o if isinstance(o, float) else None
                rows.append(row)
    order = {nm: k for k, (nm, _) in enumerate(cases)}
    rows.sort(key=lambda r: (order[r["case"].split("/")[0]], "/" in r["case"],
                             dtypes.index(r["dtype"]), modes.index(r["mode"])))
    lines = report(rows, notes + [f"run: {time.time() - t_start:.0f} s"], pk, name, device)
    if bad:
        lines += ["FAILED: " + b for b in bad]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.out, "compare.txt").write_text(text + "\n")
        Path(args.out, "compare.json").write_text(json.dumps(dict(device=name, peaks=pk, rows=rows),
                                                             indent=1, default=str))
    return 1 if bad else 0


def report(rows, notes, pk, name, device):
    def f(v, spec):
        return format(v, spec) if isinstance(v, float) and not math.isnan(v) else (
            v if isinstance(v, str) else "-")
    import torch
    out = [f"gpu_compare: {name}; torch {torch.__version__}",
           f"peaks measured now: matmul fp32 (TF32 off) {pk['f32']:.1f} TFLOP/s, bf16 "
           f"{pk['bf16']:.1f} TFLOP/s, copy {pk['gbs']:.0f} GB/s",
           ("ms: CUDA-event medians" if device.type == "cuda" else
            "ms: wall-clock medians (CPU dry run: plumbing and agreement, not speed)")]
    hdr = (f"{'case':24s} {'B,L,H,P,N,Q,G':26s} {'dtype':5s} {'mode':6s} {'ours':>9s} "
           f"{'mamba_ssm':>9s} {'torch':>9s} {'mssm/ours':>9s} {'torch/ours':>10s} "
           f"{'%roof':>6s} {'err':>8s}")
    out += [hdr, "-" * len(hdr)]
    ratios = {}
    for r in rows:
        ms = r["ms"]
        o, m, t = ms.get("ours"), ms.get("mamba_ssm"), ms.get("torch")
        rm = m / o if isinstance(o, float) and isinstance(m, float) else float("nan")
        rt = t / o if isinstance(o, float) and isinstance(t, float) else float("nan")
        for k, v in (("mamba_ssm", rm), ("torch", rt)):
            if not math.isnan(v):
                ratios.setdefault((k, r["mode"]), []).append(v)
        rf = 100 * r["roof_frac"] if r.get("roof_frac") else float("nan")
        out.append(f"{r['case']:24s} {','.join(map(str, r['shape'])):26s} {r['dtype']:5s} "
                   f"{r['mode']:6s} {f(o, '9.3f'):>9s} {f(m, '9.3f'):>9s} {f(t, '9.3f'):>9s} "
                   f"{f(rm, '9.2f'):>9s} {f(rt, '10.2f'):>10s} {f(rf, '6.1f'):>6s} "
                   f"{f(r['err'], '8.1e'):>8s}")
    for (k, mode), v in sorted(ratios.items()):
        gm = math.exp(sum(math.log(x) for x in v) / len(v))
        out.append(f"geometric mean {k}/ours, {mode}: {gm:.2f} over {len(v)} rows")
    return out + ["note: " + n for n in notes]


if __name__ == "__main__":
    sys.exit(main())
