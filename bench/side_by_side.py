#!/usr/bin/env python3
"""side_by_side.py — mamba2c's SSD scan against the chunked SSD written with PyTorch ops, on
the CPU, in one process, on the same threads.

    .venv/bin/python bench/side_by_side.py --suite smoke [--backward] [--threads N]
                                           [--reps N] [--peer minimal|reference] [--json FILE]

Per case (shared/bench_shapes.md; all options on: D [H,P], z, dt_bias, softplus, initial
state, final state returned; float32, seed 20260801) it times
  A  mamba2c.mamba_chunk_scan_combined   (the C library through its ctypes binding)
  B  the PyTorch chunked SSD             (--peer minimal: the Mamba-2 paper's ssd_minimal
                                          algorithm, vectorised over chunks, below;
                                          --peer reference: mamba2c.reference.ssd_chunked,
                                          one Python-level loop step per chunk)
forward only (under torch.no_grad), or with --backward forward + backward through torch
autograd (torch.autograd.backward((out, final_state), (dout, dfinal)): the gradients of
<out, dout> + <final_state, dfinal>, all nine inputs; no gradient copied). Runs
alternate A, B, A, B, ... after one warm-up call of each, so that drift of a shared machine
hits both alike; each is reported as its median. Both use torch.get_num_threads() threads
(mamba2c's binding follows torch's intra-op setting). `err` is ‖A − B‖/‖B‖ of out (and, with
--backward, the worst over the gradients), a check that both compute the same thing.
Unless --fresh-pages, the run first calls mamba2c.reuse_freed_memory() (glibc keeps freed
blocks for reuse instead of unmapping them): without it, page faults of freshly allocated
outputs cost both sides alike (mamba2c's forward of [4,2048,16,64,128]: 35 ms instead of 23).
Before each timed call the script waits 20 ms (busy, untimed), so that the other side's
threads are idle — torch's OpenMP workers spin for a few ms after each op — and then makes
one untimed call of the same side.

GFLOP/s count the recurrence's work (docs/flops.md): forward 4·B·L·H·P·N, forward +
backward 14·B·L·H·P·N.
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
sys.path.insert(0, str(ROOT / "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mamba2c  # noqa: E402
from mamba2c import reference  # noqa: E402

SEED = 20260801

# torch's OpenMP workers spin for a while after each parallel region (GNU libgomp's default)
# and, with the runs alternating, would take the cores from the mamba2c call that follows:
# measured on the dev VM, mamba2c's forward of [2,1024,16,64,64] 7.7 ms right after torch
# calls vs 4.1 ms. OMP_WAIT_POLICY=PASSIVE removes that but slows torch's small ops (waking
# sleeping workers: tiny's fwd+bwd 4.3 vs 2.6 ms). So before each timed call: a pause longer
# than the spin, then one untimed call of the same side (its threads, caches and the CPU
# clock warm), as when a model calls the op repeatedly.
PAUSE_S = 0.02


def pause():
    """Busy-wait PAUSE_S (a sleep would let the core clock down and the caches go cold)."""
    end = time.perf_counter() + PAUSE_S
    while time.perf_counter() < end:
        pass


# (name, [B, L, H, P, N, Q, G]) — the smoke suite of mamba2c-bench and the 31 `std` cases.
SMOKE = [
    ("tiny", [1, 128, 2, 64, 64, 64, 1]),
    ("generic_tiny", [1, 16, 1, 8, 8, 8, 1]),
    ("generic_tail_l65", [1, 65, 4, 16, 16, 32, 2]),
    ("cube_n128_c128", [1, 512, 8, 64, 128, 128, 2]),
]
STANDARD = [
    ("tiny", [1, 128, 2, 64, 64, 64, 1]),
    ("generic_tiny", [1, 16, 1, 8, 8, 8, 1]),
    ("generic_tail_l65", [1, 65, 4, 16, 16, 32, 2]),
    ("generic_tail_l513", [1, 513, 8, 32, 32, 64, 2]),
    ("aligned_p16_n32", [1, 256, 8, 16, 32, 64, 2]),
    ("aligned_p32_n64", [1, 256, 8, 32, 64, 64, 2]),
    ("cube_n64_c64", [1, 512, 8, 64, 64, 64, 2]),
    ("cube_n128_c128", [1, 512, 8, 64, 128, 128, 2]),
    ("logical_chunk256", [1, 1024, 16, 64, 128, 256, 4]),
    ("logical_chunk512", [1, 2048, 16, 64, 128, 512, 4]),
    ("seq_1024", [8, 1024, 32, 64, 128, 128, 8]),
    ("seq_4096", [8, 4096, 32, 64, 128, 128, 8]),
    ("batch_1", [1, 2048, 16, 64, 128, 128, 4]),
    ("batch_4", [4, 2048, 16, 64, 128, 128, 4]),
    ("batch_16", [16, 2048, 16, 64, 128, 128, 4]),
    ("head_4", [4, 2048, 4, 64, 128, 128, 4]),
    ("head_16", [4, 2048, 16, 64, 128, 128, 4]),
    ("head_64", [4, 2048, 64, 64, 128, 128, 4]),
    ("group_1", [4, 2048, 16, 64, 128, 128, 1]),
    ("group_4", [4, 2048, 16, 64, 128, 128, 4]),
    ("group_16", [4, 2048, 16, 64, 128, 128, 16]),
    ("headdim_16", [2, 1024, 16, 16, 64, 64, 4]),
    ("headdim_64", [2, 1024, 16, 64, 64, 64, 4]),
    ("headdim_128", [2, 1024, 16, 128, 64, 64, 4]),
    ("dstate_16", [2, 1024, 16, 64, 16, 64, 4]),
    ("dstate_64", [2, 1024, 16, 64, 64, 64, 4]),
    ("dstate_128", [2, 1024, 16, 64, 128, 64, 4]),
    ("chunk_16", [2, 2048, 16, 64, 128, 16, 4]),
    ("chunk_64", [2, 2048, 16, 64, 128, 64, 4]),
    ("chunk_128", [2, 2048, 16, 64, 128, 128, 4]),
    ("chunk_512", [2, 2048, 16, 64, 128, 512, 4]),
]
SUITES = {"smoke": SMOKE, "standard": STANDARD}


# ---------------------------------------------------------------------------------------
# The PyTorch peer: the Mamba-2 paper's minimal chunked SSD ("ssd_minimal_discrete",
# Listing 1 of Dao & Gu 2024), with the options a Mamba-2 block uses added around it.
# ---------------------------------------------------------------------------------------

def _segsum(x: torch.Tensor) -> torch.Tensor:
    """[..., T] -> [..., T, T]: out[i, j] = sum_{j < k <= i} x[k] (i >= j), -inf above the
    diagonal (the numerically stable form of the paper)."""
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)
    x = x.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1), 0)
    x = torch.cumsum(x, dim=-2)
    return x.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=0), -math.inf)


def ssd_minimal(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                initial_states=None, dt_softplus=False):
    """x [b,L,h,p], dt [b,L,h], A [h], B/C [b,L,g,n] -> (out [b,L,h,p], final [b,h,p,n]).
    L is padded to a multiple of chunk_size with zeros (no decay, no input: the padding
    changes neither the outputs kept nor the final state)."""
    b, L, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    Q = int(chunk_size)
    d = reference.process_dt(dt, dt_bias, dt_softplus)            # [b,L,h]
    X = x * d[..., None]                                            # discretised input
    Ad = A * d                                                      # [b,L,h]
    Bh = B.repeat_interleave(h // g, dim=2)                         # [b,L,h,n]
    Ch = C.repeat_interleave(h // g, dim=2)
    pad = (-L) % Q
    if pad:
        X = F.pad(X, (0, 0, 0, 0, 0, pad))
        Ad = F.pad(Ad, (0, 0, 0, pad))
        Bh = F.pad(Bh, (0, 0, 0, 0, 0, pad))
        Ch = F.pad(Ch, (0, 0, 0, 0, 0, pad))
    c = (L + pad) // Q
    X = X.reshape(b, c, Q, h, p)
    Bh = Bh.reshape(b, c, Q, h, n)
    Ch = Ch.reshape(b, c, Q, h, n)
    Ad = Ad.reshape(b, c, Q, h).permute(0, 3, 1, 2)                 # [b,h,c,l]
    A_cumsum = torch.cumsum(Ad, dim=-1)
    # 1. intra-chunk (diagonal blocks) output
    Lmat = torch.exp(_segsum(Ad))                                   # [b,h,c,l,s]
    Y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Ch, Bh, Lmat, X)
    # 2. each chunk's state from a zero start
    decay_states = torch.exp(A_cumsum[..., -1:] - A_cumsum)         # [b,h,c,l]
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bh, decay_states, X)
    # 3. inter-chunk recurrence
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    else:
        initial_states = initial_states[:, None].to(states.dtype)
    states = torch.cat([initial_states, states], dim=1)            # [b,c+1,h,p,n]
    decay_chunk = torch.exp(_segsum(F.pad(A_cumsum[..., -1], (1, 0))))  # [b,h,c+1,c+1]
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    # 4. state -> output
    Y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Ch, states, torch.exp(A_cumsum))
    y = (Y_diag + Y_off).reshape(b, c * Q, h, p)[:, :L]
    if D is not None:
        y = y + (D[:, None] if D.dim() == 1 else D) * x
    if z is not None:
        y = y * F.silu(z)
    return y, final_state


def run_mamba2c(t, Q):
    return mamba2c.mamba_chunk_scan_combined(
        t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size=Q, D=t["D"], z=t["z"],
        dt_bias=t["dt_bias"], initial_states=t["init"], dt_softplus=True,
        return_final_states=True)


def run_minimal(t, Q):
    return ssd_minimal(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"],
                       dt_bias=t["dt_bias"], initial_states=t["init"], dt_softplus=True)


def run_reference(t, Q):
    return reference.ssd_chunked(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"],
                                 z=t["z"], dt_bias=t["dt_bias"], initial_states=t["init"],
                                 dt_softplus=True)


GRAD_NAMES = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "init"]


def make_inputs(shape, backward):
    """SPEC §8's distributions (mamba_ssm's tests), float32, seed 20260801."""
    Bsz, L, H, P, N, Q, G = shape
    gen = torch.Generator().manual_seed(SEED)

    def normal(*s, scale=1.0):
        return torch.randn(*s, generator=gen) * scale

    def uniform(lo, hi, *s):
        return lo + (hi - lo) * torch.rand(*s, generator=gen)

    t = {
        "x": normal(Bsz, L, H, P),
        "dt": uniform(0.01, 0.11, Bsz, L, H),
        "A": -uniform(0.1, 0.5, H),
        "B": normal(Bsz, L, G, N, scale=0.2),
        "C": normal(Bsz, L, G, N, scale=0.2),
        "D": normal(H, P),
        "z": normal(Bsz, L, H, P),
        "dt_bias": normal(H, scale=0.1),
        "init": normal(Bsz, H, P, N, scale=0.2),
    }
    cot = None
    if backward:
        for k in GRAD_NAMES:
            t[k].requires_grad_(True)
        cot = (normal(Bsz, L, H, P), normal(Bsz, H, P, N, scale=0.2))
    return t, cot


def one_call(fn, t, Q, cot):
    """One timed unit: the forward (no autograd), or forward + backward."""
    if cot is None:
        with torch.no_grad():
            return fn(t, Q), None
    for k in GRAD_NAMES:
        t[k].grad = None
    out, final = fn(t, Q)
    # the gradient of <out, dout> + <final, dfinal>, without timing the products and sums
    torch.autograd.backward((out, final), cot)
    # the next call sets .grad to None instead of writing into these: no copy needed
    return (out.detach(), final.detach()), [t[k].grad for k in GRAD_NAMES]


def nerr(a, b):
    den = b.double().norm().item()
    num = (a.double() - b.double()).norm().item()
    return num / den if den > 0 else num


def bench_case(name, shape, peer_fn, reps, backward):
    Q = shape[5]
    t, cot = make_inputs(shape, backward)
    # warm-up of each, kept for the accuracy check
    (oa, ga) = one_call(run_mamba2c, t, Q, cot)
    (ob, gb) = one_call(peer_fn, t, Q, cot)
    err = max(nerr(oa[0], ob[0]), nerr(oa[1], ob[1]))
    if backward:
        err = max([err] + [nerr(x, y) for x, y in zip(ga, gb)])
    ta, tb = [], []
    for _ in range(reps):  # alternate A, B, A, B, ...
        for fn, times in ((run_mamba2c, ta), (peer_fn, tb)):
            # the other side's threads idle again, then this side's own steady state: the
            # timed call follows an untimed one of the same side
            pause()
            one_call(fn, t, Q, cot)
            t0 = time.perf_counter()
            one_call(fn, t, Q, cot)
            times.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb), err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", choices=sorted(SUITES), default="smoke")
    ap.add_argument("--case", help="comma-separated case names of the suite (default: all)")
    ap.add_argument("--backward", action="store_true", help="time forward + backward")
    ap.add_argument("--threads", type=int, default=0, help="torch (and mamba2c) threads; "
                    "0 = torch's default")
    ap.add_argument("--reps", type=int, default=5, help="timed runs of each (median)")
    ap.add_argument("--peer", choices=["minimal", "reference"], default="minimal")
    ap.add_argument("--json", help="write the results as a JSON list")
    ap.add_argument("--fresh-pages", action="store_true",
                    help="leave glibc's malloc as it is: every large output and gradient of "
                    "both sides is then mapped afresh, page faults included (default: "
                    "mamba2c.reuse_freed_memory(), for both sides alike)")
    args = ap.parse_args(argv)
    reuse = False if args.fresh_pages else mamba2c.reuse_freed_memory()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    nth = torch.get_num_threads()
    peer_fn = run_minimal if args.peer == "minimal" else run_reference
    peer_name = "torch-ssd-minimal" if args.peer == "minimal" else "torch-reference-chunked"
    cases = SUITES[args.suite]
    if args.case:
        want = args.case.split(",")
        unknown = [w for w in want if w not in dict(cases)]
        if unknown:
            ap.error(f"unknown case(s) for suite {args.suite}: {', '.join(unknown)}")
        cases = [c for c in cases if c[0] in want]
    pass_name = "fwd+bwd" if args.backward else "fwd"
    flop_mult = 14.0 if args.backward else 4.0

    print(f"mamba2c {mamba2c.__version__} vs {peer_name}, torch {torch.__version__}, CPU, "
          f"{nth} threads, {pass_name}, float32, all options on; median of {args.reps} "
          f"alternating runs, each after a {PAUSE_S * 1e3:.0f} ms pause and an untimed call "
          f"of its own; freed memory {'reused' if reuse else 'unmapped'} (malloc)")
    print(f"library: {mamba2c.library_path()}")
    hdr = (f"{'case':<18} {'shape [B,L,H,P,N,Q,G]':<28} {'pass':<7} {'mamba2c ms':>11} "
           f"{'GFLOP/s':>8} {'torch ms':>11} {'GFLOP/s':>8} {'speedup':>8} {'err':>9}")
    print(hdr)
    rows = []
    for name, shape in cases:
        ta, tb, err = bench_case(name, shape, peer_fn, args.reps, args.backward)
        Bsz, L, H, P, N, Q, G = shape
        flops = flop_mult * Bsz * L * H * P * N
        sh = "[" + ",".join(str(v) for v in shape) + "]"
        print(f"{name:<18} {sh:<28} {pass_name:<7} {ta * 1e3:>11.3f} {flops / ta * 1e-9:>8.1f} "
              f"{tb * 1e3:>11.3f} {flops / tb * 1e-9:>8.1f} {tb / ta:>7.1f}x {err:>9.1e}",
              flush=True)
        for impl, sec in (("mamba2c-cpu", ta), (peer_name, tb)):
            rows.append({"case": name, "shape": shape, "impl": impl, "pass": pass_name,
                         "dtype": "f32", "threads": nth, "ms": sec * 1e3,
                         "gflops": flops / sec * 1e-9, "speedup": tb / sec, "err": err})
    if rows:
        sp = [r["speedup"] for r in rows if r["impl"] == "mamba2c-cpu"]
        geo = math.exp(sum(math.log(s) for s in sp) / len(sp))
        print(f"geometric-mean speedup of mamba2c over {peer_name}: {geo:.1f}x "
              f"({len(sp)} cases)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r for r in rows if not (r["err"] <= 1e-4)]
    if bad:
        print("error: mamba2c and the torch peer disagree (err > 1e-4) on: "
              + ", ".join(sorted({r["case"] for r in bad})), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
