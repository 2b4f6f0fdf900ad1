#!/usr/bin/env python3
"""py_block.py — one whole Mamba-2 block (mixer) on the CPU: mamba2c.nn.Mamba2 vs HuggingFace
transformers' Mamba2Mixer on its own torch path, with the same weights; forward and
forward+backward. A third column runs transformers' mixer with mamba2c's kernels swapped in
(mamba2c.hf.use_mamba2c_in_transformers).

    .venv/bin/python bench/py_block.py                 # d_model 768, L 1024, B 2 (~1 minute)
    .venv/bin/python bench/py_block.py --reps 5 --seqlen 2048 --threads 8

fwd: eval mode under torch.no_grad(). fwd+bwd: train mode, gradients of <out, g> w.r.t. the
input and every parameter (transformers then takes its fused
mamba_split_conv1d_scan_combined path, which is mamba2c's in the third column).
Also: the decode step of mamba2c.nn.Mamba2 (one token, batch 1, under no_grad).
--z-in-scan adds a column: mamba2c.nn.Mamba2(rmsnorm=False), whose z gates inside the SSD
scan (the training forward then saves options.out_x for the backward, as mamba_ssm does);
same weights but the norm, so it is not compared with transformers' outputs.
Timing: see py_common.py (alternating columns, medians).
"""
from __future__ import annotations

import os

from py_common import compare, fmt_time, parser, print_table, setup

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from mamba2c.hf import use_mamba2c_in_transformers  # noqa: E402
from mamba2c.nn import Mamba2  # noqa: E402
from mamba2c.reference import normalized_error as nerr  # noqa: E402


def main():
    p = parser(__doc__.split("\n")[1])
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--seqlen", type=int, default=1024)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--d-state", type=int, default=128)
    p.add_argument("--headdim", type=int, default=64)
    p.add_argument("--ngroups", type=int, default=1)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--z-in-scan", action="store_true",
                   help="also time mamba2c.nn.Mamba2(rmsnorm=False) (z gates in the scan)")
    a = p.parse_args()
    a.reps = a.reps or 3
    setup(a)
    import transformers
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer
    transformers.logging.set_verbosity_error()

    d, L, B = a.d_model, a.seqlen, a.batch
    H = 2 * d // a.headdim
    cfg = Mamba2Config(hidden_size=d, num_heads=H, head_dim=a.headdim, state_size=a.d_state,
                       n_groups=a.ngroups, expand=2, conv_kernel=4, chunk_size=a.chunk,
                       num_hidden_layers=1, vocab_size=16, use_cache=False)
    hf = Mamba2Mixer(cfg, layer_idx=0)
    ours = Mamba2(d_model=d, d_state=a.d_state, d_conv=4, expand=2, headdim=a.headdim,
                  ngroups=a.ngroups, chunk_size=a.chunk)
    with torch.no_grad():
        hf.D.normal_(1.0, 0.3)
        hf.norm.weight.normal_(1.0, 0.2)
    missing = ours.load_state_dict(hf.state_dict(), strict=False)
    assert not missing.missing_keys, missing
    hf_ours = lambda u: _with_ours(hf, u)  # noqa: E731
    u = torch.randn(B, L, d)
    cols = {"mamba2c.nn.Mamba2": ours, "transformers (torch path)": hf,
            "transformers + mamba2c kernels": None}
    call = {"mamba2c.nn.Mamba2": lambda x: ours(x), "transformers (torch path)": lambda x: hf(x),
            "transformers + mamba2c kernels": hf_ours}
    zcol = "mamba2c.nn.Mamba2 (rmsnorm=False)"
    ours_z = None
    if a.z_in_scan:
        ours_z = Mamba2(d_model=d, d_state=a.d_state, d_conv=4, expand=2, headdim=a.headdim,
                        ngroups=a.ngroups, chunk_size=a.chunk, rmsnorm=False)
        ours_z.load_state_dict({k: v for k, v in hf.state_dict().items()
                                if not k.startswith("norm.")}, strict=False)
        cols[zcol] = ours_z
        call[zcol] = lambda x: ours_z(x)
    rows = []
    # forward
    for m in (ours, hf, ours_z):
        if m is not None:
            m.eval()
    with torch.no_grad():
        outs = {k: f(u) for k, f in call.items()}
        ref = outs["transformers (torch path)"]
        errs = {k: nerr(v, ref) for k, v in outs.items()}
        t = compare({k: (lambda f=f: f(u)) for k, f in call.items()}, a.reps, a.warmup)
    rows.append(["fwd"] + [fmt_time(t[k]) for k in cols] +
                [f"{t['transformers (torch path)'] / t['mamba2c.nn.Mamba2']:.1f}x"])
    # forward + backward
    for m in (ours, hf, ours_z):
        if m is not None:
            m.train()
    ug = u.clone().requires_grad_(True)
    g = torch.randn(B, L, d)

    names = sorted(n for n, _ in ours.named_parameters())

    def fb(f, mod):  # parameters in one (name) order for both modules
        ps = dict(mod.named_parameters())
        params = [ps[n] for n in names if n in ps]
        return lambda: torch.autograd.grad(f(ug), [ug] + params, g)
    fbs = {"mamba2c.nn.Mamba2": fb(call["mamba2c.nn.Mamba2"], ours),
           "transformers (torch path)": fb(call["transformers (torch path)"], hf),
           "transformers + mamba2c kernels": fb(hf_ours, hf)}
    if ours_z is not None:
        fbs[zcol] = fb(call[zcol], ours_z)
    gr = {k: f() for k, f in fbs.items()}
    gref = gr["transformers (torch path)"]
    gerr = {k: max(nerr(x, y) for x, y in zip(v, gref)) for k, v in gr.items() if k != zcol}
    t = compare(fbs, a.reps, a.warmup)
    rows.append(["fwd+bwd"] + [fmt_time(t[k]) for k in cols] +
                [f"{t['transformers (torch path)'] / t['mamba2c.nn.Mamba2']:.1f}x"])
    print_table(f"Mamba-2 block, d_model {d}, L {L}, B {B} (H {H}, P {a.headdim}, "
                f"N {a.d_state}, G {a.ngroups}, chunk {a.chunk}), median per call",
                ["pass"] + list(cols) + ["speedup vs transformers"], rows)
    print("\nmax normalised error vs transformers' torch path: fwd " +
          ", ".join(f"{k} {v:.1e}" for k, v in errs.items()
                    if k not in ("transformers (torch path)", zcol)) +
          "; grads " + ", ".join(f"{k} {v:.1e}" for k, v in gerr.items()
                                 if k != "transformers (torch path)"))
    # decode: one token at batch 1 through mamba2c.nn.Mamba2.step
    ours.eval()
    with torch.no_grad():
        conv_state, ssm_state = ours.allocate_inference_cache(1)
        tok = torch.randn(1, 1, d)
        t = compare({"step": lambda: ours.step(tok, conv_state, ssm_state)},
                    max(10, a.reps * 3), a.warmup, inner=20)
    print(f"\nmamba2c.nn.Mamba2.step, one token, batch 1: {fmt_time(t['step'])} per token "
          f"(in_proj, conv1d_step, ssd_step, gated norm, out_proj)")


def _with_ours(mod, u):
    with use_mamba2c_in_transformers():
        return mod(u)


if __name__ == "__main__":
    main()
