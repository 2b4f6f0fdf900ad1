#!/usr/bin/env python3
"""plot.py — a bar chart (log-scale milliseconds, one row per case) of a benchmark JSON.

    .venv/bin/python bench/plot.py RESULTS.json [-o docs/bench_standard.png] [--title TEXT]

Reads either JSON the benchmarks write:
  - mamba2c-bench --json: one bar per case and pass (fwd, and bwd when timed), labelled
    with GFLOP/s and the percentage of the FMA peak measured in that run;
  - bench/side_by_side.py --json: mamba2c and the PyTorch peer side by side per case,
    labelled with mamba2c's speedup.
Unsupported or failed entries (ms null) are left out. Needs matplotlib
(.venv/bin/pip install matplotlib).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="results of mamba2c-bench --json or side_by_side.py --json")
    ap.add_argument("-o", "--output", default="docs/bench_standard.png")
    ap.add_argument("--title", default=None)
    args = ap.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py needs matplotlib: .venv/bin/pip install matplotlib", file=sys.stderr)
        return 2

    rows = [r for r in json.loads(Path(args.json).read_text()) if r.get("ms") is not None]
    if not rows:
        print(f"{args.json}: no timed entries", file=sys.stderr)
        return 1
    cases = list(dict.fromkeys(r["case"] for r in rows))          # run order
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    passes = list(dict.fromkeys(r["pass"] for r in rows))
    side_by_side = len(impls) > 1
    series = ([(i, p) for p in passes for i in impls] if side_by_side
              else [(impls[0], p) for p in passes])
    by_key = {(r["case"], r["impl"], r["pass"]): r for r in rows}

    n, k = len(cases), len(series)
    bar_h = 0.8 / k
    fig, ax = plt.subplots(figsize=(10, 0.26 * n * max(1, k * 0.7) + 1.4))
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    for si, (impl, pss) in enumerate(series):
        ys, ms, labels = [], [], []
        for ci, case in enumerate(cases):
            r = by_key.get((case, impl, pss))
            if r is None:
                continue
            ys.append(ci + (si - (k - 1) / 2) * bar_h)
            ms.append(r["ms"])
            if side_by_side:
                labels.append(f"{r['speedup']:.1f}x" if impl.startswith("mamba2c") else "")
            elif r.get("pct_peak") is not None:
                labels.append(f"{r['gflops']:.0f} GFLOP/s, {r['pct_peak']:.0f}%")
            else:
                labels.append("")
        name = f"{impl} {pss}" if side_by_side else pss
        ax.barh(ys, ms, height=bar_h * 0.9, color=colors[si % len(colors)], label=name)
        for y, m, lab in zip(ys, ms, labels):
            if lab:
                ax.text(m * 1.08, y, lab, va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_yticks(range(n))
    ax.set_yticklabels(cases, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds (median, log scale)")
    xmin = min(r["ms"] for r in rows)
    xmax = max(r["ms"] for r in rows)
    ax.set_xlim(xmin / 2, xmax * 20)
    ax.grid(axis="x", which="both", alpha=0.3)
    if args.title:
        title = args.title
    elif side_by_side:
        title = f"mamba2c vs {', '.join(i for i in impls if not i.startswith('mamba2c'))} (CPU)"
    else:
        peak = rows[0].get("peak_gflops")
        title = (f"mamba2c CPU SSD, {rows[0]['dtype']}"
                 + (f" (FMA peak of the run: {peak:.0f} GFLOP/s)" if peak else ""))
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output} ({n} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
