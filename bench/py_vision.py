#!/usr/bin/env python3
"""py_vision.py — VisionMamba2 (tiny: dims 96-768, depths 2-2-6-2, four scan directions) at
224x224 on the CPU: images/s of the forward pass and of a training step's forward+backward,
with mamba2c's C SSD op vs the same model on the pure-torch reference op
(mamba2c.reference.ssd_chunked) — same weights, same inputs.

    .venv/bin/python bench/py_vision.py                 # batch 8, one round (~1-2 minutes)
    .venv/bin/python bench/py_vision.py --reps 3 --warmup 1 --batch 32 --threads 16

Only the SSD scan differs between the columns (the mixer's other layers are torch in both:
linear, depthwise conv2d, LayerNorm, GELU MLP). fwd: eval mode under torch.no_grad();
fwd+bwd: train mode, cross-entropy on random labels, gradients of every parameter.
By default one timed round and no full-size warm-up round (a batch-1 forward and training
step per column warms up instead, and gives the logits check), to stay near 2 minutes on
2 cores; use --reps/--warmup for more.
Timing: see py_common.py (alternating columns, medians).
"""
from __future__ import annotations

import types

from py_common import compare, fmt_time, parser, print_table, setup

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mamba2c import ops  # noqa: E402
from mamba2c import reference as R  # noqa: E402
from mamba2c.models import VisionMamba2, VisionMamba2Config  # noqa: E402
from mamba2c.models import vision_mamba2 as vm  # noqa: E402
from mamba2c.reference import normalized_error as nerr  # noqa: E402


def _ref_ssd(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
             cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    return R.ssd_chunked(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                         dt_softplus, dt_limit)


REF_OPS = types.SimpleNamespace(ssd=_ref_ssd)


class use_ops:
    """Run the model's mixers on `which` ("mamba2c" or "reference")."""

    def __init__(self, which):
        self.which = which

    def __enter__(self):
        vm.ops = ops if self.which == "mamba2c" else REF_OPS

    def __exit__(self, *exc):
        vm.ops = ops
        return False


def main():
    p = parser(__doc__.split("\n")[1])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.set_defaults(warmup=0)
    a = p.parse_args()
    a.reps = a.reps or 1
    setup(a)
    cfg = VisionMamba2Config(image_size=a.image_size)
    model = VisionMamba2(cfg)
    nparam = sum(p_.numel() for p_ in model.parameters())
    img = torch.randn(a.batch, 3, a.image_size, a.image_size)
    labels = torch.randint(0, cfg.num_classes, (a.batch,))

    def fwd(which):
        def run():
            with use_ops(which):
                return model(img)
        return run

    def train_step(which):
        def run():
            with use_ops(which):
                loss = F.cross_entropy(model(img), labels)
                return torch.autograd.grad(loss, list(model.parameters()))
        return run

    rows = []
    # warm-up on one image per column (allocator, oneDNN primitives) + the logits check
    model.eval()
    with torch.no_grad():
        outs = []
        for which in ("mamba2c", "reference"):
            with use_ops(which):
                outs.append(model(img[:1]))
        err = nerr(outs[0], outs[1])
    model.train()
    for which in ("mamba2c", "reference"):
        with use_ops(which):
            torch.autograd.grad(F.cross_entropy(model(img[:1]), labels[:1]),
                                list(model.parameters()))
    model.eval()
    with torch.no_grad():
        t = compare({"mamba2c": fwd("mamba2c"), "reference": fwd("reference")}, a.reps, a.warmup)
    rows.append(["fwd", fmt_time(t["mamba2c"]), f"{a.batch / t['mamba2c']:.1f}",
                 fmt_time(t["reference"]), f"{a.batch / t['reference']:.1f}",
                 f"{t['reference'] / t['mamba2c']:.2f}x"])
    model.train()
    t = compare({"mamba2c": train_step("mamba2c"), "reference": train_step("reference")},
                a.reps, a.warmup)
    rows.append(["fwd+bwd", fmt_time(t["mamba2c"]), f"{a.batch / t['mamba2c']:.1f}",
                 fmt_time(t["reference"]), f"{a.batch / t['reference']:.1f}",
                 f"{t['reference'] / t['mamba2c']:.2f}x"])
    print_table(f"VisionMamba2 tiny ({nparam / 1e6:.1f} M parameters), {a.image_size}x"
                f"{a.image_size}, batch {a.batch}, median per batch",
                ["pass", "mamba2c ops", "images/s", "reference ops", "images/s", "speedup"], rows)
    print(f"\nlogits, mamba2c vs reference ops: normalised difference {err:.1e}")


if __name__ == "__main__":
    main()
