#!/usr/bin/env python3
"""generate.py — end-to-end generation: a random-weight transformers Mamba2ForCausalLM shaped
like mamba2-370m (48 layers, d_model 1024, N 128) or mamba2-130m (24 layers, 768), prefill
and greedy decode, tokens/s, three paths with the same weights:

  hf          transformers alone (its torch path)
  hf+mamba2c  transformers inside mamba2c.hf.use_mamba2c_in_transformers()
  mamba2c     mamba2c.models.MambaLMHeadModel (from_transformers: the same weights)

    .venv/bin/python bench/generate.py                                   # both shapes, f32+bf16
    .venv/bin/python bench/generate.py --shape 370m --dtype float32 --prefill 512,2048 --decode 128
    .venv/bin/python bench/generate.py --layers 4 --prefill 128 --decode 16   # a quick check

Per (dtype, prefill) the paths alternate in one process (round r runs each once; medians).
prefill tokens/s = prompt length / time of generate(max_new_tokens=1); decode tokens/s =
(n-1) / (time of generate(n new) - time of generate(1 new)). The greedy tokens of every path
are compared with transformers' (printed: equal or the first differing position).
The weight-streaming bound: bytes of all parameters (read once per decoded token) over a
STREAM-triad bandwidth measured in the same run (torch, same threads); decode is also
reported as a fraction of it. --breakdown splits mamba2c's decode step into the Linear
GEMVs, the C step ops and the rest (glue / per-token Python).
"""
from __future__ import annotations

import os
import statistics
import time

from py_common import parser, print_table, setup

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mamba2c.hf import use_mamba2c_in_transformers  # noqa: E402
from mamba2c.models import from_transformers  # noqa: E402

SHAPES = {"370m": dict(layers=48, d_model=1024), "130m": dict(layers=24, d_model=768)}


def stream_triad_gbs(threads: int, mb: int = 256, reps: int = 7) -> float:
    """a = b + s*c over three float32 arrays of `mb` MiB each (torch), median GB/s."""
    n = mb * (1 << 20) // 4
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    torch.add(b, c, alpha=3.0, out=a)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        ts.append(time.perf_counter() - t0)
    return 3 * n * 4 / statistics.median(ts) / 1e9


def build(shape: dict, dtype, vocab: int, d_state: int):
    import transformers
    cfg = transformers.Mamba2Config(
        vocab_size=vocab, hidden_size=shape["d_model"], num_hidden_layers=shape["layers"],
        state_size=d_state, expand=2, head_dim=64, num_heads=2 * shape["d_model"] // 64,
        n_groups=1, chunk_size=256, conv_kernel=4, tie_word_embeddings=True,
        rescale_prenorm_residual=False, use_cache=True)
    hf = transformers.Mamba2ForCausalLM(cfg).eval().to(dtype)
    hf.generation_config.pad_token_id = 0
    return hf, from_transformers(hf)


def runners(hf, ours, ids, n):
    mask = torch.ones_like(ids)

    def hf_gen(k):
        return hf.generate(ids, attention_mask=mask, max_new_tokens=k, min_new_tokens=k,
                           do_sample=False)

    def hfm_gen(k):
        with use_mamba2c_in_transformers():
            return hf_gen(k)

    def ours_gen(k):
        return ours.generate(ids, max_length=ids.shape[1] + k)

    return {"hf": hf_gen, "hf+mamba2c": hfm_gen, "mamba2c": ours_gen}


def time_paths(gens, n, reps):
    pc = time.perf_counter
    t1 = {k: [] for k in gens}
    tn = {k: [] for k in gens}
    toks = {}
    for k, g in gens.items():  # warm-up (also the tokens)
        g(1)
        toks[k] = g(n)
    for _ in range(reps):
        for k, g in gens.items():
            t0 = pc()
            g(1)
            t1[k].append(pc() - t0)
            t0 = pc()
            g(n)
            tn[k].append(pc() - t0)
    return ({k: statistics.median(v) for k, v in t1.items()},
            {k: statistics.median(v) for k, v in tn.items()}, toks)


def breakdown(ours, ids, n):
    """mamba2c decode per token: total, the Linear GEMVs alone (same shapes, same weights),
    the C step ops alone (conv + SSD + gated norm per layer), and the rest."""
    from mamba2c import _native
    from mamba2c.models.generation import _Decoder
    pc = time.perf_counter
    with torch.inference_mode():
        caches = ours.allocate_inference_cache(1, ids.shape[1] + n, dtype=torch.float32)
        from mamba2c.nn import InferenceParams
        ip = InferenceParams(ids.shape[1] + n, 1, key_value_memory_dict=caches)
        ours(ids, inference_params=ip, num_last_tokens=1)
        dec = _Decoder(ours, caches)
        tok = ids[:, -1]
        dec.step(tok)
        t0 = pc()
        for _ in range(n):
            dec.step(tok)
        total = (pc() - t0) / n
        h = torch.randn(1, ours.config.d_model, dtype=dec.lm_w.dtype)
        t0 = pc()
        for _ in range(n):
            for p in dec.layers:
                y = F.linear(h, p.in_w, p.in_b)
                F.linear(y[:, :p.out_w.shape[1]], p.out_w, p.out_b)
            F.linear(h, dec.lm_w)
        lin = (pc() - t0) / n
        p0 = dec.layers[0]
        xBC = torch.randn(1, p0.conv_w.shape[0])
        dt = torch.rand(1, p0.H)
        z = torch.randn(1, p0.H * p0.P)
        t0 = pc()
        for _ in range(n):
            for p in dec.layers:
                xo = _native.conv1d_step(xBC, p.conv_state, p.conv_w, p.conv_b, True)
                x, Bm, Cm = torch.split(xo, p.xbc_split, dim=-1)
                y = _native.ssd_step(p.ssm_state, x.view(1, p.H, p.P), dt, p.A,
                                     Bm.view(1, p.G, p.N), Cm.view(1, p.G, p.N), p.D, None,
                                     p.dt_bias, True)
                _native.rmsnorm_gated_forward(y.view(1, -1), z, p.gnorm_w, None, p.gnorm_eps,
                                              p.gsize, p.nbg)
        cops = (pc() - t0) / n
    return total, lin, cops


def main():
    p = parser(__doc__.split("\n")[1])
    p.add_argument("--shape", default="370m,130m", help="370m and/or 130m (comma-separated)")
    p.add_argument("--layers", type=int, default=None, help="override the layer count")
    p.add_argument("--dtype", default="float32,bfloat16")
    p.add_argument("--prefill", default="512,2048")
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50280)
    p.add_argument("--d-state", type=int, default=128)
    p.add_argument("--paths", default="hf,hf+mamba2c,mamba2c")
    p.add_argument("--breakdown", action="store_true")
    a = p.parse_args()
    a.reps = a.reps or 1
    setup(a)
    import transformers
    transformers.logging.set_verbosity_error()
    bw = stream_triad_gbs(a.threads)
    print(f"# STREAM triad (torch, {a.threads} threads): {bw:.1f} GB/s")
    rows = []
    for sname in a.shape.split(","):
        shape = dict(SHAPES[sname])
        if a.layers:
            shape["layers"] = a.layers
        for dname in a.dtype.split(","):
            dtype = getattr(torch, dname)
            torch.manual_seed(0)
            hf, ours = build(shape, dtype, a.vocab, a.d_state)
            wbytes = sum(q.numel() * q.element_size() for q in ours.parameters())
            bound = bw * 1e9 / wbytes
            for L in (int(x) for x in a.prefill.split(",")):
                ids = torch.randint(0, a.vocab, (1, L), generator=torch.Generator().manual_seed(L))
                gens = {k: v for k, v in runners(hf, ours, ids, a.decode).items()
                        if k in a.paths.split(",")}
                t1, tn, toks = time_paths(gens, a.decode, a.reps)
                ref = toks.get("hf")
                for k in gens:
                    pre = L / t1[k]
                    dec = (a.decode - 1) / max(tn[k] - t1[k], 1e-9)
                    if ref is None or k == "hf":
                        same = "-"
                    else:
                        diff = (toks[k] != ref).nonzero()
                        same = "equal" if diff.numel() == 0 else f"differ at {int(diff[0, 1]) - L}"
                    rows.append([f"{sname}/{shape['layers']}L", dname, L, k, f"{pre:.1f}",
                                 f"{dec:.2f}", f"{100 * dec / bound:.0f}%", same])
                print_table(f"tokens/s (bound {bound:.1f} tok/s: {wbytes / 1e6:.0f} MB of "
                            f"weights at {bw:.1f} GB/s)",
                            ["model", "dtype", "prefill", "path", "prefill tok/s",
                             "decode tok/s", "of bound", "tokens vs hf"], rows[-len(gens):])
                if a.breakdown:
                    tot, lin, cops = breakdown(ours, ids, max(a.decode, 4))
                    print(f"# mamba2c decode per token: {tot * 1e3:.2f} ms = Linear GEMVs "
                          f"{lin * 1e3:.2f} ms + C step ops {cops * 1e3:.2f} ms + rest "
                          f"{(tot - lin - cops) * 1e3:.2f} ms")
    print_table("all", ["model", "dtype", "prefill", "path", "prefill tok/s", "decode tok/s",
                        "of bound", "tokens vs hf"], rows)


if __name__ == "__main__":
    main()
