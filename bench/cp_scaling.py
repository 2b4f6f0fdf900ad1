#!/usr/bin/env python3
"""cp_scaling.py — context parallelism of one Mamba-2 layer: measured on 1, 2, 4 local
gloo processes, and modelled (communication volume and time) for 8..1024 ranks.

    .venv/bin/python bench/cp_scaling.py                        # measure (defaults below)
    .venv/bin/python bench/cp_scaling.py --seqlens 65536,262144 --ranks 1,2,4 --reps 2
    .venv/bin/python bench/cp_scaling.py --model-only --plot docs/distributed_scaling.png

Measure: forward+backward of mamba2c.nn.Mamba2 (gradients of <out, g> w.r.t. the input and
every parameter) with the sequence [1, L, d_model] split evenly over R processes
(context_parallel_group; R = 1 is the plain layer). Per rank: the median step time, and the
peak resident memory the step adds (the kernel's peak-RSS mark VmHWM, reset just before
the inputs are made, minus the resident size then: inputs, activations, gradients,
workspaces; imports, the weights and a first small step's one-time set-up do not count;
MALLOC_MMAP_THRESHOLD_=1 MiB, so freed blocks leave the resident set). Threads per rank:
cores // R (at least 1). The table prints the slowest rank's time and the largest rank's memory.

Model: bytes each rank sends per layer (forward + backward) in the collectives of
mamba2c.distributed, and their time under a latency/bandwidth (alpha/beta) model for two
networks, against the layer's compute time per rank (measured per token here, scaled).
See docs/distributed.md for the formulas.
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import torch  # noqa: E402


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so that imports do not count."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _bench_rank(rank, world, cfg):
    import torch.distributed as dist
    import mamba2c
    torch.manual_seed(0)
    group = dist.group.WORLD if world > 1 else None
    layer = mamba2c.nn.Mamba2(d_model=cfg["d_model"], d_state=cfg["d_state"],
                              headdim=cfg["headdim"], chunk_size=cfg["chunk"],
                              context_parallel_group=group)
    L = cfg["L"]
    n = L // world + (1 if rank < L % world else 0)
    w = torch.randn(1, 2 * cfg["chunk"], cfg["d_model"], requires_grad=True)
    layer(w).sum().backward()       # one-time set-up (thread pools, contexts) before `base`
    layer.zero_grad(set_to_none=True)
    del w
    base = _rss_mib()
    _reset_peak()
    g = torch.Generator().manual_seed(rank + 1)
    u = torch.randn(1, n, cfg["d_model"], generator=g).requires_grad_(True)
    gy = torch.randn(1, n, cfg["d_model"], generator=g)
    times = []
    for it in range(cfg["warmup"] + cfg["reps"]):
        if group is not None:
            dist.barrier()
        t0 = time.perf_counter()
        out = layer(u)
        (out * gy).sum().backward()
        t = time.perf_counter() - t0
        layer.zero_grad(set_to_none=True)
        u.grad = None
        del out
        if it >= cfg["warmup"]:
            times.append(t)
    peak = _peak_mib()
    return dict(time=statistics.median(times), peak_add=peak - base, tokens=n,
                threads=torch.get_num_threads())


def _transport_rank(rank, world, cfg):
    """Median time of one CP SSD call (forward + backward) on a short slice, where the
    exchange of [B,H,P,N] states dominates, for each transport."""
    import mamba2c.distributed as md
    import torch.distributed as dist
    H, P, N, n = cfg["H"], cfg["P"], cfg["N"], cfg["tokens"]
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(1, n, H, P, generator=g, requires_grad=True)
    dt = (torch.rand(1, n, H, generator=g) * 0.1).requires_grad_(True)
    A = -torch.rand(H, generator=g)
    Bm = (torch.randn(1, n, 1, N, generator=g) / 5).requires_grad_(True)
    Cm = (torch.randn(1, n, 1, N, generator=g) / 5).requires_grad_(True)
    res = {}
    for method in ("all_gather", "p2p"):
        ts = []
        for it in range(cfg["reps"] + 2):
            dist.barrier()
            t0 = time.perf_counter()
            y = md.cp_mamba_chunk_scan_combined(x, dt, A, Bm, Cm, 64, method=method)
            y.sum().backward()
            ts.append(time.perf_counter() - t0)
        res[method] = statistics.median(ts[2:])
    return res


def transports(args):
    from mamba2c.distributed import launch
    cfg = dict(H=24, P=64, N=128, tokens=64, reps=args.transport_reps)
    print(f"\nCP SSD call, fwd+bwd, {cfg['tokens']} tokens per rank, state [1,{cfg['H']},"
          f"{cfg['P']},{cfg['N']}] (0.75 MiB), median of {cfg['reps']}:\n")
    print("| ranks | all_gather | p2p |")
    print("|---:|---:|---:|")
    for R in [r for r in args.ranks if r > 1]:
        res = launch.run(_transport_rank, R, args=(cfg,), timeout=args.timeout, threads=1)
        ag = max(r["all_gather"] for r in res)
        pp = max(r["p2p"] for r in res)
        print(f"| {R} | {ag * 1e3:.1f} ms | {pp * 1e3:.1f} ms |")


def measure(args):
    from mamba2c.distributed import launch
    # a fixed mmap threshold: big blocks are mapped and unmapped, so the resident size
    # follows the live tensors (glibc's sliding threshold would keep freed blocks in the
    # heap and make the peak depend on the allocation history); read at process start
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 20))
    cores = os.cpu_count() or 1
    rows = []
    for L in args.seqlens:
        base_mem = None
        for R in args.ranks:
            cfg = dict(d_model=args.d_model, d_state=args.d_state, headdim=args.headdim,
                       chunk=args.chunk, L=L, warmup=args.warmup, reps=args.reps)
            res = launch.run(_bench_rank, R, args=(cfg,), timeout=args.timeout,
                             pg_timeout=args.timeout, threads=max(1, cores // R))
            t = max(r["time"] for r in res)
            mem = max(r["peak_add"] for r in res)
            base_mem = mem if R == 1 else base_mem
            rows.append((L, R, res[0]["threads"], res[0]["tokens"], t, mem,
                         (mem / base_mem) if base_mem else float("nan")))
            print(f"  L={L} R={R}: {t:.3f} s, {mem:.0f} MiB per rank", file=sys.stderr)
    print(f"\nMamba2(d_model={args.d_model}, d_state={args.d_state}, headdim={args.headdim}, "
          f"chunk={args.chunk}), batch 1, float32, forward+backward; {cores} cores\n")
    print("| L | ranks | threads/rank | tokens/rank | fwd+bwd (slowest rank) | peak added memory "
          "per rank | memory vs 1 rank |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for L, R, th, n, t, mem, ratio in rows:
        print(f"| {L} | {R} | {th} | {n} | {t:.3f} s | {mem:.0f} MiB | {ratio:.2f} |")
    return rows


# ---------------------------------------------------------------------------------------
# Communication model
# ---------------------------------------------------------------------------------------

NETS = {  # alpha: per-message latency (s), beta: bandwidth (bytes/s)
    "NVLink/InfiniBand-class (alpha 5 us, 25 GB/s)": (5e-6, 25e9),
    "10 GbE TCP (alpha 50 us, 1.25 GB/s)": (50e-6, 1.25e9),
}


def layer_bytes(d_model=768, d_state=128, headdim=64, ngroups=1, d_conv=4, batch=1):
    """Per-rank message sizes (bytes, float32) of one CP layer."""
    d_inner = 2 * d_model
    H = d_inner // headdim
    conv_dim = d_inner + 2 * ngroups * d_state
    S = batch * H * headdim * d_state * 4                  # one [B,H,P,N] state
    halo = batch * (d_conv - 1) * conv_dim * 4             # the W-1 tail tokens
    return dict(state=S + (batch * H + 1) * 4, halo=halo, meta=8 * 8, H=H)


def comm_time(R, net, sizes, method):
    """Seconds of communication per layer (forward + backward) on R ranks.
    all_gather: the collective as recursive doubling (log2 R latencies, (R-1)·m bytes in).
    p2p: the send/recv pipeline (R-1 sequential hops of one state, forward and backward).
    scan: NOT implemented, the design to aim for at large R: a log-depth parallel prefix of
    (state, decay) pairs (log2 R hops of one state) and the halo from the left neighbour
    only (one send/recv)."""
    a, b = net
    lg = math.ceil(math.log2(R)) if R > 1 else 0

    def allgather(m):
        return lg * a + (R - 1) * m / b

    S, halo, meta = sizes["state"], sizes["halo"], sizes["meta"]
    small = 2 * allgather(meta) + allgather(meta)           # meta (ssd, conv) + halo lengths
    conv = 2 * allgather(halo)                              # forward and backward
    if method == "scan":
        conv = 2 * (a + halo / b)
    if method == "all_gather":
        ssd = 2 * allgather(S)
    elif method == "p2p":
        ssd = 2 * (R - 1) * (a + S / b)
    else:
        ssd = 2 * lg * (a + S / b)
    return small + conv + ssd


def model(args, compute_per_token=None):
    sizes = layer_bytes(args.model_d_model, args.model_d_state, args.model_headdim)
    Rs = [8, 16, 32, 64, 128, 256, 512, 1024]
    print(f"\nModel: d_model {args.model_d_model} (H {sizes['H']}, P {args.model_headdim}, "
          f"N {args.model_d_state}), batch 1, float32. Per rank per layer: state message "
          f"{sizes['state'] / 2**20:.3f} MiB, halo {sizes['halo'] / 2**10:.1f} KiB.")
    print("\n| network | method | " + " | ".join(f"R={R}" for R in Rs) + " |")
    print("|---|---|" + "---:|" * len(Rs))
    curves = {}
    for net_name, net in NETS.items():
        for method in ("all_gather", "p2p", "scan"):  # scan: modelled only
            ts = [comm_time(R, net, sizes, method) for R in Rs]
            curves[(net_name, method)] = ts
            cells = " | ".join(f"{t * 1e3:.2f} ms" for t in ts)
            print(f"| {net_name} | {method} | {cells} |")
    recv = [(R - 1) * sizes["state"] * 2 / 2**20 for R in Rs]
    print("\nall_gather: MiB received per rank per layer (fwd+bwd states): "
          + ", ".join(f"R={R}: {v:.0f}" for R, v in zip(Rs, recv)))
    comp = None
    if compute_per_token is not None:
        comp = [compute_per_token * args.model_seqlen / R for R in Rs]
        print(f"\ncompute per rank at L={args.model_seqlen} = {compute_per_token * 1e6:.2f} "
              f"us/token (given: --compute-us-per-token) x L/R: "
              + ", ".join(f"R={R}: {c:.3f} s" for R, c in zip(Rs, comp)))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(10, 4.8))
        for (net_name, method), ts in curves.items():
            ls = {"all_gather": "-", "p2p": "--", "scan": ":"}[method]
            col = "C0" if net_name.startswith("NV") else "C3"
            tag = " (not implemented)" if method == "scan" else ""
            ax.plot(Rs, [t * 1e3 for t in ts], ls, color=col, marker="o", ms=3,
                    label=f"{method}{tag}, {net_name}")
        if comp is not None:
            ax.plot(Rs, [c * 1e3 for c in comp], "k-", lw=2,
                    label=f"compute per rank, L={args.model_seqlen}, "
                          f"{compute_per_token * 1e6:.0f} us/token")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (context parallel)")
        ax.set_ylabel("ms per layer (fwd+bwd)")
        ax.set_title(f"CP Mamba-2 layer communication, d_model {args.model_d_model}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"\nplot: {args.plot}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--seqlens", type=lambda s: [int(v) for v in s.split(",")], default=[16384])
    p.add_argument("--ranks", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2, 4])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--d-state", type=int, default=64)
    p.add_argument("--headdim", type=int, default=32)
    p.add_argument("--chunk", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--model-only", action="store_true")
    p.add_argument("--transport", action="store_true",
                   help="also time the two state-exchange transports on short slices")
    p.add_argument("--transport-reps", type=int, default=20)
    p.add_argument("--model-d-model", type=int, default=768)
    p.add_argument("--model-d-state", type=int, default=128)
    p.add_argument("--model-headdim", type=int, default=64)
    p.add_argument("--model-seqlen", type=int, default=1 << 20)
    p.add_argument("--compute-us-per-token", type=float, default=None,
                   help="layer fwd+bwd compute per token (us) for the model's compute line")
    p.add_argument("--plot", default=None)
    args = p.parse_args()
    if not args.model_only:
        measure(args)
    if args.transport:
        transports(args)
    cpt = args.compute_us_per_token * 1e-6 if args.compute_us_per_token else None
    model(args, cpt)


if __name__ == "__main__":
    main()
