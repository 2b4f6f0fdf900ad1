"""py_common.py — shared helpers of the bench/py_*.py PyTorch benchmarks.

Timing rule (every script): the compared implementations run side by side in the same
process, alternating — round r runs column 1, column 2, ... once each — after a warm-up
round, and each cell is the MEDIAN over the rounds (a shared machine's noise hits all
columns alike). A "call" may be an inner loop of n calls (decode ops), reported per call.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))  # run from a checkout without installing

import torch  # noqa: E402


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=2,
                   help="torch intra-op threads = mamba2c context threads (default 2)")
    p.add_argument("--reps", type=int, default=None, help="timed rounds per cell (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    return p


def setup(args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    import mamba2c
    from mamba2c import _native
    print(f"# torch {torch.__version__}, {args.threads} threads, {platform.machine()} "
          f"({os.cpu_count()} CPUs), mamba2c {_native.version()} "
          f"[{_native.last_call_isa('cpu')}] {_native.library_path()}")
    del mamba2c


def compare(fns: dict, reps: int, warmup: int = 1, inner: int = 1) -> dict:
    """{name: fn} -> {name: median seconds per call}; alternating rounds (see module doc)."""
    names = list(fns)
    for _ in range(warmup):
        for n in names:
            for _ in range(inner):
                fns[n]()
    samples = {n: [] for n in names}
    pc = time.perf_counter
    for _ in range(reps):
        for n in names:
            f = fns[n]
            t0 = pc()
            for _ in range(inner):
                f()
            samples[n].append((pc() - t0) / inner)
    return {n: statistics.median(v) for n, v in samples.items()}


def fmt_time(s: float) -> str:
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def print_table(title: str, header, rows) -> None:
    """A Markdown table (pastes into the README as is)."""
    print(f"\n### {title}\n")
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    sys.stdout.flush()
