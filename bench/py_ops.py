#!/usr/bin/env python3
"""py_ops.py — each mamba2c op from PyTorch against the pure-torch oracle (mamba2c.reference),
forward and forward+backward where the op has a backward, plus the binding's per-call
overhead on the decode step.

    .venv/bin/python bench/py_ops.py                  # default: ~1 minute on 2 cores
    .venv/bin/python bench/py_ops.py --reps 10 --threads 8
    .venv/bin/python bench/py_ops.py --ops ssd_step,conv1d_step --decode-batch 8

Ops and default shapes (a Mamba-2 layer of d_model 768 — d_inner 1536, H 24, P 64, N 128,
G 1, d_conv 4 — at B 2, L 1024; decode shapes of mamba2-2.7b: H 80, P 64, N 128, batch 1):
  ssd          mamba_chunk_scan_combined (D, dt_bias, softplus)  vs reference.ssd_chunked
  conv1d       causal_conv1d_fn (SiLU; x channel-last)            vs reference.conv1d
  rmsnorm      rmsnorm_fn (gated, norm_before_gate=False)         vs reference.rmsnorm_gated
  ssd_step     selective_state_update (mamba_ssm's views)         vs reference.ssd_step
  conv1d_step  causal_conv1d_update (SiLU)                        vs reference.conv1d_step
Timing: see py_common.py (alternating columns, medians).
"""
from __future__ import annotations

import ctypes
import math

from py_common import compare, fmt_time, parser, print_table, setup

import torch  # noqa: E402

import mamba2c  # noqa: E402
from mamba2c import _native  # noqa: E402
from mamba2c import reference as R  # noqa: E402


def _grad_fn(fwd, inputs):
    """forward + backward: the gradients of <out, g> w.r.t. inputs (no accumulation)."""
    out0 = fwd()
    g = torch.randn_like(out0)

    def run():
        out = fwd()
        return torch.autograd.grad(out, inputs, g)
    return run


def bench_ssd(a, rows):
    B, L, H, P, N, G, Q = a.batch, a.seqlen, a.nheads, a.headdim, a.d_state, a.ngroups, a.chunk
    x = torch.randn(B, L, H, P)
    dt = torch.rand(B, L, H) * 0.1
    A = -torch.rand(H) * 0.5 - 0.1
    Bm = torch.randn(B, L, G, N) / 5
    Cm = torch.randn(B, L, G, N) / 5
    D = torch.randn(H)
    db = torch.randn(H) * 0.1
    ins = [x, dt, A, Bm, Cm, D, db]
    ours = lambda: mamba2c.mamba_chunk_scan_combined(x, dt, A, Bm, Cm, Q, D=D, dt_bias=db,  # noqa: E731
                                                     dt_softplus=True)
    ref = lambda: R.ssd_chunked(x, dt, A, Bm, Cm, Q, D=D, dt_bias=db, dt_softplus=True)[0]  # noqa: E731
    shape = f"B{B} L{L} H{H} P{P} N{N} G{G} Q{Q}"
    with torch.no_grad():
        t = compare({"ours": ours, "ref": ref}, a.reps, a.warmup)
    rows.append(["ssd (fused scan)", shape, "fwd", fmt_time(t["ours"]), fmt_time(t["ref"]),
                 f"{t['ref'] / t['ours']:.1f}x"])
    for v in ins:
        v.requires_grad_(True)
    t = compare({"ours": _grad_fn(ours, ins), "ref": _grad_fn(ref, ins)}, a.reps, a.warmup)
    rows.append(["ssd (fused scan)", shape, "fwd+bwd", fmt_time(t["ours"]), fmt_time(t["ref"]),
                 f"{t['ref'] / t['ours']:.1f}x"])


def bench_conv1d(a, rows):
    B, L = a.batch, a.seqlen
    Cc = a.nheads * a.headdim + 2 * a.ngroups * a.d_state
    W = 4
    x = torch.randn(B, L, Cc)
    w = torch.randn(Cc, W) / 2
    b = torch.randn(Cc)
    ours = lambda: mamba2c.causal_conv1d_fn(x.transpose(1, 2), w, b, activation="silu")  # noqa: E731
    ref = lambda: R.conv1d(x, w, b, True)[0]  # noqa: E731
    shape = f"B{B} L{L} C{Cc} W{W}"
    with torch.no_grad():
        t = compare({"ours": ours, "ref": ref}, a.reps, a.warmup)
    rows.append(["conv1d (causal, SiLU)", shape, "fwd", fmt_time(t["ours"]), fmt_time(t["ref"]),
                 f"{t['ref'] / t['ours']:.1f}x"])
    for v in (x, w, b):
        v.requires_grad_(True)
    # the reference returns [B,L,C], ours a [B,C,L] view of channel-last memory: same values
    t = compare({"ours": _grad_fn(ours, [x, w, b]), "ref": _grad_fn(ref, [x, w, b])},
                a.reps, a.warmup)
    rows.append(["conv1d (causal, SiLU)", shape, "fwd+bwd", fmt_time(t["ours"]),
                 fmt_time(t["ref"]), f"{t['ref'] / t['ours']:.1f}x"])


def bench_rmsnorm(a, rows):
    M = a.batch * a.seqlen
    Dd = a.nheads * a.headdim
    gs = Dd // a.ngroups
    x = torch.randn(M, Dd)
    z = torch.randn(M, Dd)
    w = torch.rand(Dd) + 0.5
    ours = lambda: mamba2c.rmsnorm_fn(x, w, None, z=z, eps=1e-5, group_size=gs,  # noqa: E731
                                      norm_before_gate=False)
    ref = lambda: R.rmsnorm_gated(x, w, None, z, 1e-5, gs, False)  # noqa: E731
    shape = f"M{M} D{Dd} group {gs}"
    with torch.no_grad():
        t = compare({"ours": ours, "ref": ref}, a.reps, a.warmup)
    rows.append(["rmsnorm (gated)", shape, "fwd", fmt_time(t["ours"]), fmt_time(t["ref"]),
                 f"{t['ref'] / t['ours']:.1f}x"])
    for v in (x, z, w):
        v.requires_grad_(True)
    t = compare({"ours": _grad_fn(ours, [x, z, w]), "ref": _grad_fn(ref, [x, z, w])},
                a.reps, a.warmup)
    rows.append(["rmsnorm (gated)", shape, "fwd+bwd", fmt_time(t["ours"]), fmt_time(t["ref"]),
                 f"{t['ref'] / t['ours']:.1f}x"])


def _step_inputs(B, H, P, N, G):
    return dict(state=torch.randn(B, H, P, N) / 5, x=torch.randn(B, H, P),
                dt=torch.rand(B, H) * 0.1, A=-torch.rand(H) * 0.5 - 0.1,
                B=torch.randn(B, G, N) / 5, C=torch.randn(B, G, N) / 5, D=torch.randn(H),
                dt_bias=torch.randn(H) * 0.1)


def bench_ssd_step(a, rows):
    B, H, P, N, G = a.decode_batch, a.decode_heads, a.headdim, a.d_state, 1
    s = _step_inputs(B, H, P, N, G)
    st_ref = s["state"].clone()
    # the forms mamba_ssm's Mamba2.step passes: stride-0 expand views
    dte = s["dt"][:, :, None].expand(B, H, P)
    Ae = s["A"][:, None, None].expand(H, P, N)
    De = s["D"][:, None].expand(H, P)
    dbe = s["dt_bias"][:, None].expand(H, P)
    ours = lambda: mamba2c.selective_state_update(s["state"], s["x"], dte, Ae, s["B"], s["C"],  # noqa: E731
                                                  De, dt_bias=dbe, dt_softplus=True)
    ref = lambda: R.ssd_step(st_ref, s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], None,  # noqa: E731
                             s["dt_bias"], True)
    with torch.no_grad():
        t = compare({"ours": ours, "ref": ref}, a.reps_decode, a.warmup, inner=a.inner)
    rows.append(["ssd_step (decode)", f"B{B} H{H} P{P} N{N} G{G}", "fwd", fmt_time(t["ours"]),
                 fmt_time(t["ref"]), f"{t['ref'] / t['ours']:.1f}x"])


def bench_conv1d_step(a, rows):
    B = a.decode_batch
    Cc = a.decode_heads * a.headdim + 2 * a.d_state
    W = 4
    x = torch.randn(B, Cc)
    w = torch.randn(Cc, W) / 2
    b = torch.randn(Cc)
    st1 = torch.randn(B, Cc, W - 1)
    st2 = st1.clone()
    ours = lambda: mamba2c.causal_conv1d_update(x, st1, w, b, "silu")  # noqa: E731
    ref = lambda: R.conv1d_step(x, st2, w, b, True)  # noqa: E731
    with torch.no_grad():
        t = compare({"ours": ours, "ref": ref}, a.reps_decode, a.warmup, inner=a.inner)
    rows.append(["conv1d_step (decode)", f"B{B} C{Cc} W{W}", "fwd", fmt_time(t["ours"]),
                 fmt_time(t["ref"]), f"{t['ref'] / t['ours']:.1f}x"])


def overhead(a):
    """Per-call cost of selective_state_update vs the C call alone (descriptors pre-packed,
    one ctypes call), interleaved, medians of per-call times."""
    rows = []
    T = _native._TSZ
    fn = _native.load().mamba2_ssd_step
    for (B, H, P, N, G) in ((1, 1, 1, 1, 1), (1, a.decode_heads, a.headdim, a.d_state, 1)):
        s = _step_inputs(B, H, P, N, G)
        out = torch.empty(B, H, P)
        # a private descriptor block for the bare call (the binding's scratch is rewritten
        # by every binding call)
        blk = torch.zeros(10 * T + _native._SO.size, dtype=torch.uint8)
        base = blk.data_ptr()
        buf = (ctypes.c_char * blk.numel()).from_address(base)
        slots = {}
        for i, (k, t) in enumerate((("state", s["state"]), ("out", out), ("x", s["x"]),
                                    ("dt", s["dt"]), ("A", s["A"]), ("B", s["B"]),
                                    ("C", s["C"]), ("D", s["D"]), ("dt_bias", s["dt_bias"]))):
            _native._out_desc(buf, i * T, t, _native.DT_F32)
            slots[k] = base + i * T
        _native._SO.pack_into(buf, 10 * T, slots["D"], 0, slots["dt_bias"], 0, 1, 0.0, math.inf)
        _native._state()
        ctx = _native._context(_native.BACKEND_CPU)
        bare_args = (ctx, slots["state"], slots["out"], None, slots["x"], slots["dt"],
                     slots["A"], slots["B"], slots["C"], base + 10 * T)
        if fn(*bare_args) != 0:
            raise RuntimeError(_native._lib.mamba2_last_error().decode())
        dte = s["dt"][:, :, None].expand(B, H, P)
        Ae = s["A"][:, None, None].expand(H, P, N)
        De = s["D"][:, None].expand(H, P)
        dbe = s["dt_bias"][:, None].expand(H, P)
        fns = {
            "bare": lambda: fn(*bare_args),
            "compact": lambda: mamba2c.selective_state_update(
                s["state"], s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"],
                dt_bias=s["dt_bias"], dt_softplus=True),
            "views": lambda: mamba2c.selective_state_update(
                s["state"], s["x"], dte, Ae, s["B"], s["C"], De, dt_bias=dbe, dt_softplus=True),
        }
        inner = 200 if H == 1 else max(1, a.inner)
        with torch.no_grad():
            t = compare(fns, a.reps_overhead, 2, inner=inner)
        us = {k: v * 1e6 for k, v in t.items()}
        rows.append([f"B{B} H{H} P{P} N{N} G{G}", f"{us['bare']:.2f} us",
                     f"{us['compact']:.2f} us (+{us['compact'] - us['bare']:.2f})",
                     f"{us['views']:.2f} us (+{us['views'] - us['bare']:.2f})"])
    print_table("decode step: C call vs Python call (median per call)",
                ["shape", "C call alone (ctypes, pre-packed)",
                 "selective_state_update, [H]/[B,H] params",
                 "selective_state_update, mamba_ssm's stride-0 views"], rows)


def main():
    p = parser(__doc__.split("\n")[1])
    p.add_argument("--ops", default="ssd,conv1d,rmsnorm,ssd_step,conv1d_step")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--nheads", type=int, default=24)
    p.add_argument("--headdim", type=int, default=64)
    p.add_argument("--d-state", type=int, default=128)
    p.add_argument("--ngroups", type=int, default=1)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--decode-batch", type=int, default=1)
    p.add_argument("--decode-heads", type=int, default=80)
    p.add_argument("--inner", type=int, default=20, help="decode calls per timing sample")
    p.add_argument("--no-overhead", action="store_true")
    a = p.parse_args()
    a.reps = a.reps or 3
    a.reps_decode = max(5, a.reps * 3)
    a.reps_overhead = max(15, a.reps * 5)
    setup(a)
    rows = []
    for op in a.ops.split(","):
        {"ssd": bench_ssd, "conv1d": bench_conv1d, "rmsnorm": bench_rmsnorm,
         "ssd_step": bench_ssd_step, "conv1d_step": bench_conv1d_step}[op.strip()](a, rows)
    print_table("ops: mamba2c vs mamba2c.reference (pure torch), median time per call",
                ["op", "shape", "pass", "mamba2c", "reference", "speedup"], rows)
    if not a.no_overhead:
        overhead(a)


if __name__ == "__main__":
    main()
