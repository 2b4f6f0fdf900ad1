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
    .venv/bin/python bench/generate.py --plot docs/generate.png --json out.json --breakdown
    .venv/bin/python bench/generate.py --shape 370m --dtype float32,bfloat16,q8_0   # + Q8_0
    .venv/bin/python bench/generate.py --gguf model.gguf --paths mamba2c   # a GGUF file's model
    .venv/bin/python bench/generate.py --family mamba2,bamba,granitemoehybrid,falcon_h1,nemotron_h,zamba2

--family: each family's published small checkpoint's shapes (FAMILIES below: widths, heads,
state size, layer pattern, vocabulary; random weights, nothing downloaded), cut to a window
of its layer pattern that holds an attention (or MLP / hybrid) layer where the family has
one (--layers N: the first N layers of the window instead), paths hf and hf+mamba2c.
--family ... --profile: no timing; one decode token of each path (the second decode step of
a generate() call) under torch.profiler, its top ops by self CPU time (what dominates).

Per (model, dtype, prefill) the paths alternate in one process: after a short warm-up
(generate with 4 new tokens, each path), round r runs each path's generate(decode new
tokens) once. A streamer timestamps every new token: prefill tokens/s = prompt length /
time to the first new token; decode tokens/s = 1 / the median interval between consecutive
new tokens (over all rounds: robust to a shared machine's spikes; on an idle machine it
equals (n-1) / decode time). Medians over rounds. The greedy tokens of every path are
compared with transformers' (printed: equal, or the first differing position; mamba2c's
also with hf+mamba2c's when they differ). In bfloat16 a random-weight model's logits are
close to ties, so paths that round differently (all within bf16 accuracy) may pick another
token — compare the float32 rows for token equality.
The weight-streaming bound: bytes of all parameters (each read once per decoded token; a
tied embedding counted once) over a STREAM-triad bandwidth (torch, same threads) measured
right before each (model, dtype); decode is also reported as a fraction of it. The load
average (os.getloadavg) is printed with every table. --breakdown splits mamba2c's decode
token into the GEMVs (in_proj, out_proj, lm_head: torch), the C step ops (per layer
block norm, conv step, SSD step, gated norm: the replayed calls alone) and the rest (the
residual adds, dtype copies, embedding, final norm, sampling-free Python of the step).
--dtype q8_0: the float32 model after MambaLMHeadModel.quantize("q8_0") (in_proj / out_proj
Q8_0, embedding and lm_head bf16); only the mamba2c path runs it (transformers has no Q8_0),
its tokens are not compared. --dtype q8_0x: the same with quantize(..., activations="q8_0")
(x rounded to Q8_0 in the Q8_0 GEMVs: llama.cpp's arithmetic). --gguf FILE: the model of a
GGUF file (models.from_gguf; Q8_0 tensors of the file stay Q8_0 for the decode GEMV;
--gguf-activations q8_0 as q8_0x), mamba2c path only. The bound counts the
bytes a decode token reads: each projection's GEMV weight (Q8_0: 34 bytes per 32) and every
other parameter once.
"""
from __future__ import annotations

import json
import os
import statistics
import time

from py_common import compare, parser, print_table, setup

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mamba2c.hf import use_mamba2c_in_transformers  # noqa: E402
from mamba2c.models import from_transformers  # noqa: E402

SHAPES = {"370m": dict(layers=48, d_model=1024), "130m": dict(layers=24, d_model=768)}


def _pattern(n, attn, a="attention", m="mamba"):
    return [a if i in attn else m for i in range(n)]


# Each family's smallest published checkpoint with a Mamba-2 mixer, its config.json values
# (transformers config class, keyword arguments) and the window of its layer pattern the
# benchmark builds by default (start, count): the full models take minutes per token here.
FAMILIES = {
    # state-spaces/mamba2-370m
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", dict(
        vocab_size=50288, hidden_size=1024, num_hidden_layers=48, state_size=128, expand=2,
        head_dim=64, num_heads=32, n_groups=1, conv_kernel=4, chunk_size=256,
        tie_word_embeddings=True), (0, 8)),
    # ibm-fms/Bamba-9B (the only Bamba checkpoint): attention at layers 9, 18, 27
    "bamba": ("BambaConfig", "BambaForCausalLM", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        attn_layer_indices=[9, 18, 27], num_attention_heads=32, num_key_value_heads=8,
        mamba_n_heads=128, mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128,
        mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, tie_word_embeddings=False),
        (8, 3)),
    # ibm-granite/granite-4.0-h-micro (dense: no experts): attention at 5, 15, 25, 35
    "granitemoehybrid": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", dict(
        vocab_size=100352, hidden_size=2048, intermediate_size=8192,
        shared_intermediate_size=8192, num_hidden_layers=40,
        layer_types=_pattern(40, (5, 15, 25, 35)), num_attention_heads=32,
        num_key_value_heads=8, num_local_experts=0, num_experts_per_tok=0, mamba_n_heads=64,
        mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=256, embedding_multiplier=12, logits_scaling=8,
        attention_multiplier=0.015625, tie_word_embeddings=True), (2, 6)),
    # tiiuae/Falcon-H1-0.5B-Base: attention, Mamba and MLP in every layer
    "falcon_h1": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        vocab_size=32784, hidden_size=1024, intermediate_size=2048, num_hidden_layers=36,
        num_attention_heads=8, num_key_value_heads=2, mamba_d_ssm=1536, mamba_n_heads=24,
        mamba_d_head=64, mamba_n_groups=1, mamba_d_state=128, mamba_d_conv=4, mamba_expand=2,
        mamba_chunk_size=128, mamba_rms_norm=False, mamba_norm_before_gate=False,
        tie_word_embeddings=False), (0, 4)),
    # nvidia/Nemotron-H-8B-Base-8K (transformers' NemotronHConfig defaults): the pattern
    # M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- (M Mamba, * attention, - MLP)
    "nemotron_h": ("NemotronHConfig", "NemotronHForCausalLM", dict(
        vocab_size=131072, hidden_size=4096, intermediate_size=21504,
        layers_block_type=[{"M": "mamba", "*": "attention", "-": "mlp"}[c] for c in
                           "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"],
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, mamba_num_heads=128,
        mamba_head_dim=64, n_groups=8, ssm_state_size=128, conv_kernel=4, expand=2,
        chunk_size=128, tie_word_embeddings=False), (4, 5)),
    # Zyphra/Zamba2-2.7B: a shared attention block ("hybrid") after every 6 Mamba layers
    "zamba2": ("Zamba2Config", "Zamba2ForCausalLM", dict(
        vocab_size=32000, hidden_size=2560, intermediate_size=10240, num_hidden_layers=54,
        layers_block_type=_pattern(54, (6, 12, 18, 24, 30, 36, 42, 47, 51), "hybrid"),
        mamba_d_state=64, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=80,
        num_attention_heads=32, num_key_value_heads=32, num_mem_blocks=2, adapter_rank=128,
        chunk_size=256, tie_word_embeddings=True), (0, 7)),
}
_LAYER_KEYS = ("layer_types", "layers_block_type")


def build_family(name: str, dtype, layers=None):
    """A random-weight model of family `name` (FAMILIES), cut to its layer window; returns
    (model, description of the window)."""
    import transformers
    cfg_name, model_name, kw, (start, count) = FAMILIES[name]
    kw = dict(kw)
    total = kw.get("num_hidden_layers") or len(next(kw[k] for k in _LAYER_KEYS if k in kw))
    if layers:
        count = layers
    end = min(start + count, total)
    for k in _LAYER_KEYS:
        if k in kw:
            kw[k] = kw[k][start:end]
    if "attn_layer_indices" in kw:
        kw["attn_layer_indices"] = [i - start for i in kw["attn_layer_indices"] if start <= i < end]
    if "num_hidden_layers" in kw:
        kw["num_hidden_layers"] = end - start
    kw.update(use_cache=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg = getattr(transformers, cfg_name)(**kw)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(cfg).eval().to(dtype)
    model.generation_config.pad_token_id = 0
    return model, f"{name}[{start}:{end} of {total}]", kw["vocab_size"]
PATHS = ("hf", "hf+mamba2c", "mamba2c")


def load() -> str:
    return "load %.1f/%.1f/%.1f" % os.getloadavg()


def stream_triad_gbs(mb: int = 256, reps: int = 7) -> float:
    """a = b + s*c over three float32 arrays of `mb` MiB each (torch), median GB/s
    (bytes counted: 2 read + 1 written array, as STREAM does)."""
    n = mb * (1 << 20) // 4
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    torch.add(b, c, alpha=3.0, out=a)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        ts.append(time.perf_counter() - t0)
    return 3 * n * 4 / statistics.median(ts) / 1e9


class Clock:
    """A generate() streamer that timestamps each put (the prompt first, then each token)."""

    def __init__(self):
        self.t = []

    def put(self, value):
        self.t.append(time.perf_counter())

    def end(self):
        pass


def decode_bytes(model) -> int:
    """Bytes of weights a decode token reads: a Linear's C GEMV weight (gemv_weight, set by
    quantize / from_gguf) instead of its float weight, every other parameter once (a tied
    embedding / lm_head once)."""
    gemv = {}
    for mod in model.modules():
        g = getattr(mod, "gemv_weight", None)
        if g is not None:
            gemv[id(mod.weight)] = g.data.numel() * g.data.element_size()
    return sum(gemv.get(id(q), q.numel() * q.element_size()) for q in model.parameters())


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


def runners(hf, ours, ids):
    mask = torch.ones_like(ids)

    def hf_gen(k, streamer=None):
        return hf.generate(ids, attention_mask=mask, max_new_tokens=k, min_new_tokens=k,
                           do_sample=False, streamer=streamer)

    def hfm_gen(k, streamer=None):
        with use_mamba2c_in_transformers():
            return hf_gen(k, streamer)

    def ours_gen(k, streamer=None):
        return ours.generate(ids, max_length=ids.shape[1] + k, streamer=streamer)

    return {"hf": hf_gen, "hf+mamba2c": hfm_gen, "mamba2c": ours_gen}


def time_paths(gens, n, reps):
    """-> ({path: prefill seconds}, {path: decode seconds per token}, {path: tokens})."""
    pre = {k: [] for k in gens}
    gaps = {k: [] for k in gens}
    toks = {}
    for g in gens.values():  # warm-up
        g(4)
    for _ in range(reps):
        for k, g in gens.items():
            c = Clock()
            t0 = time.perf_counter()
            out = g(n, c)
            t = c.t[1:]  # the new tokens (c.t[0]: the prompt, put at once)
            if len(t) != n:
                raise RuntimeError(f"{k}: the streamer saw {len(t)} new tokens, expected {n}")
            pre[k].append(t[0] - t0)
            gaps[k] += [b - a for a, b in zip(t, t[1:])]
            toks.setdefault(k, out)
    return ({k: statistics.median(v) for k, v in pre.items()},
            {k: statistics.median(v) for k, v in gaps.items()}, toks)


def _same(a, b, L) -> str:
    diff = (a != b).nonzero()
    return "equal" if diff.numel() == 0 else f"differ at {int(diff[0, 1]) - L}"


def breakdown(ours, ids, n, reps):
    """mamba2c decode per token (seconds): total, the GEMVs alone (the plan's own in_proj /
    out_proj calls on its buffers + lm_head), the C step ops alone (the plan's replayed
    calls), on caches filled by a prefill of ids. Alternating rounds, medians."""
    from mamba2c._native.context import _context, _backend_code
    from mamba2c.models.generation import _Decoder
    from mamba2c.nn import InferenceParams
    with torch.inference_mode():
        caches = ours.allocate_inference_cache(1, ids.shape[1] + 1, dtype=torch.float32)
        ip = InferenceParams(ids.shape[1] + 1, 1, key_value_memory_dict=caches)
        ours(ids, inference_params=ip, num_last_tokens=1)
        dec = _Decoder(ours, caches)
        tok = ids[:, -1]
        dec.step(tok)
        pl = dec.plan
        if not pl:
            return None
        lm_w = dec.lm_w
        hf_ = torch.zeros(1, lm_w.shape[1], dtype=lm_w.dtype)
        from mamba2c._native.context import _state
        _state()

        ctx = _context(_backend_code())

        def gemv():
            for c, in_wt, in_b, out_wt, out_b, c_in, c_out in pl.calls:
                if c_in is not None:
                    c_in(ctx)
                else:
                    torch.mm(pl.nh, in_wt, out=pl.zx)
                if c_out is not None:
                    c_out(ctx)
                else:
                    torch.mm(pl.gin, out_wt, out=pl.h)
            if dec.lm_gemv:
                from mamba2c.models.quant import linear
                linear(hf_.float(), dec.lm_gemv)
            else:
                F.linear(hf_, lm_w)

        def cops():
            ctx = _context(_backend_code())
            for c, *_ in pl.calls:
                pl.f_norm(ctx, *c.args_norm)
                pl.f_conv(ctx, *c.args_conv)
                pl.f_ssd(ctx, *c.args_ssd)
                pl.f_norm(ctx, *c.args_gnorm)

        r = compare({"total": lambda: dec.step(tok), "gemv": gemv, "cops": cops}, reps,
                    warmup=1, inner=n)
    state_mb = sum(cs[1].numel() * 4 for cs in caches.values()) / 1e6
    return r["total"], r["gemv"], r["cops"], state_mb


def plot(rows, path, n_decode):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = []
    for r in rows:
        g = (r["model"], r["dtype"], r["prefill"])
        if g not in groups:
            groups.append(g)
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(groups) + 4), 4.8))
    w = 0.27
    for ax, key, title in ((axes[0], "prefill_tok_s", "prefill tokens/s"),
                           (axes[1], "decode_tok_s", f"decode tokens/s ({n_decode} greedy)")):
        for j, pth in enumerate(PATHS):
            xs, ys = [], []
            for i, g in enumerate(groups):
                for r in rows:
                    if (r["model"], r["dtype"], r["prefill"]) == g and r["path"] == pth:
                        xs.append(i + (j - 1) * w)
                        ys.append(r[key])
            if xs:
                ax.bar(xs, ys, w, label=pth)
        if key == "decode_tok_s":
            for i, g in enumerate(groups):
                b = [r["bound_tok_s"] for r in rows if (r["model"], r["dtype"], r["prefill"]) == g]
                ax.hlines(b[0], i - 1.5 * w, i + 1.5 * w, colors="k", linestyles="--",
                          label="weight-streaming bound" if i == 0 else None)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{m}\n{d.replace('bfloat16', 'bf16').replace('float32', 'f32')}"
                            f"\nL={p}" for m, d, p in groups], fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    hs, ls = axes[1].get_legend_handles_labels()
    fig.legend(hs, ls, loc="upper center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    print(f"# plot: {path}")


def main():
    p = parser(__doc__.split("\n")[1])
    p.add_argument("--shape", default="370m,130m", help="370m and/or 130m (comma-separated)")
    p.add_argument("--layers", type=int, default=None, help="override the layer count")
    p.add_argument("--dtype", default="float32,bfloat16")
    p.add_argument("--prefill", default="512,2048")
    p.add_argument("--decode", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50280)
    p.add_argument("--d-state", type=int, default=128)
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--gguf", default=None, help="run the model of this GGUF file instead")
    p.add_argument("--gguf-activations", default="f32", choices=("f32", "q8_0"),
                   help="with --gguf: activations of the Q8_0 products (q8_0: llama.cpp's "
                        "arithmetic; models.from_gguf)")
    p.add_argument("--gguf-dtype", default=None,
                   help="with --gguf: the model's dtype (e.g. bfloat16 for a bf16 file; "
                        "default float32, as models.from_gguf)")
    p.add_argument("--plot", default=None, help="write a bar chart (PNG) of the results")
    p.add_argument("--json", default=None, help="write the rows as JSON")
    p.add_argument("--family", default=None,
                   help="comma-separated families of FAMILIES (paths hf and hf+mamba2c)")
    p.add_argument("--profile", action="store_true",
                   help="with --family: profile one decode token per path instead of timing")
    a = p.parse_args()
    a.reps = a.reps or 1
    setup(a)
    import transformers
    transformers.logging.set_verbosity_error()
    if a.family:
        return families(a)
    rows = []
    hdr = ["model", "dtype", "prefill", "path", "prefill tok/s", "decode tok/s", "of bound",
           "x hf prefill", "x hf decode", "tokens vs hf"]
    tab = []
    t_start = time.perf_counter()
    shapes = ["gguf"] if a.gguf else a.shape.split(",")
    for sname in shapes:
        if a.gguf:
            mname = os.path.basename(a.gguf)
        else:
            shape = dict(SHAPES[sname])
            if a.layers:
                shape["layers"] = a.layers
            mname = f"{sname}" + (f"/{shape['layers']}L" if a.layers else "")
        for dname in (["gguf"] if a.gguf else a.dtype.split(",")):
            torch.manual_seed(0)
            if a.gguf:
                from mamba2c.models import from_gguf
                gdt = getattr(torch, a.gguf_dtype) if a.gguf_dtype else None
                hf, ours = None, from_gguf(a.gguf, dtype=gdt,
                                           activations=a.gguf_activations).eval()
            else:
                q8 = dname in ("q8_0", "q8_0x")
                hf, ours = build(shape, torch.float32 if q8 else getattr(torch, dname), a.vocab,
                                 a.d_state)
                if q8:
                    ours.quantize("q8_0", activations="q8_0" if dname == "q8_0x" else "f32")
                    hf = None
            wbytes = decode_bytes(ours)
            vocab = a.vocab if hf is not None else ours.backbone.embedding.weight.shape[0]
            bw = stream_triad_gbs()
            bound = bw * 1e9 / wbytes
            print(f"# {mname} {dname}: {wbytes / 1e6:.0f} MB of weights; STREAM triad "
                  f"{bw:.1f} GB/s -> bound {bound:.2f} tok/s; {load()}", flush=True)
            for L in (int(x) for x in a.prefill.split(",")):
                ids = torch.randint(0, vocab, (1, L), generator=torch.Generator().manual_seed(L))
                gens = {k: v for k, v in runners(hf, ours, ids).items()
                        if k in a.paths.split(",") and (hf is not None or k == "mamba2c")}
                pre, gap, toks = time_paths(gens, a.decode, a.reps)
                ref = toks.get("hf")
                for k in gens:
                    ptok, dtok = L / pre[k], 1.0 / gap[k]
                    same = "-" if ref is None or k == "hf" else _same(toks[k], ref, L)
                    if k == "mamba2c" and "hf+mamba2c" in toks and same != "equal":
                        same += f" (vs hf+mamba2c: {_same(toks[k], toks['hf+mamba2c'], L)})"
                    xp = f"{pre['hf'] / pre[k]:.2f}" if "hf" in gens else "-"
                    xd = f"{gap['hf'] / gap[k]:.2f}" if "hf" in gens else "-"
                    rows.append(dict(model=mname, dtype=dname, prefill=L, path=k,
                                     prefill_tok_s=ptok, decode_tok_s=dtok,
                                     bound_tok_s=bound, stream_gbs=bw, weight_mb=wbytes / 1e6,
                                     tokens=same, load=os.getloadavg()[0]))
                    tab.append([mname, dname, L, k, f"{ptok:.1f}", f"{dtok:.2f}",
                                f"{100 * dtok / bound:.0f}%", xp, xd, same])
                print_table(f"{mname} {dname} prefill {L} (bound {bound:.2f} tok/s: "
                            f"{wbytes / 1e6:.0f} MB at {bw:.1f} GB/s; {load()})", hdr,
                            tab[-len(gens):])
            if a.breakdown and "mamba2c" in a.paths.split(","):
                ids = torch.randint(0, vocab, (1, 16), generator=torch.Generator().manual_seed(1))
                b = breakdown(ours, ids, 8, max(a.reps, 3))
                if b is None:
                    print("# breakdown: the decode plan does not serve this model")
                else:
                    tot, lin, cops, smb = b
                    print(f"# mamba2c decode per token ({mname} {dname}, {load()}): "
                          f"{tot * 1e3:.2f} ms = GEMVs {lin * 1e3:.2f} ms "
                          f"({wbytes / lin / 1e9:.1f} GB/s of weights) + C step ops "
                          f"{cops * 1e3:.2f} ms (SSM state {smb:.0f} MB read+written: "
                          f"{2 * smb / 1e3 / cops:.1f} GB/s) + rest "
                          f"{(tot - lin - cops) * 1e3:.2f} ms",
                          flush=True)
            del hf, ours
    if tab:
        print_table(f"all ({a.threads} threads; {load()}; "
                    f"{time.perf_counter() - t_start:.0f} s)", hdr, tab)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if a.plot:
        plot(rows, a.plot, a.decode)


class ProfileOne:
    """A generate() streamer that profiles the interval between its 3rd and 4th put: the
    second decode step (puts: the prompt, then each new token)."""

    def __init__(self):
        self.n, self.prof, self.ms = 0, torch.profiler.profile(record_shapes=True), 0.0

    def put(self, value):
        self.n += 1
        if self.n == 3:
            self.prof.start()
            self.t0 = time.perf_counter()
        elif self.n == 4:
            self.prof.stop()
            self.ms = 1e3 * (time.perf_counter() - self.t0)

    def end(self):
        pass


def profile_token(model, ids, desc, rows=14):
    """--family --profile: one decode token of each path under torch.profiler (the second
    decode step of a generate() call), the top ops by self CPU time."""
    gens = runners(model, None, ids)
    for k in ("hf", "hf+mamba2c"):
        p = ProfileOne()
        gens[k](4, p)
        print(f"\n### {desc} {k}: one decode token, {p.ms:.0f} ms profiled ({load()})\n")
        print(p.prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=40,
            max_shapes_column_width=50))


def families(a):
    """--family: prefill and decode tokens/s of hf and hf+mamba2c per family and dtype."""
    hdr = ["family (layers)", "dtype", "prefill", "path", "prefill tok/s", "decode tok/s",
           "x hf prefill", "x hf decode", "tokens vs hf", "load"]
    tab, rows = [], []
    t_start = time.perf_counter()
    for fam in a.family.split(","):
        for dname in a.dtype.split(","):
            dtype = getattr(torch, dname)
            hf, desc, vocab = build_family(fam, dtype, a.layers)
            for L in (int(x) for x in a.prefill.split(",")):
                ids = torch.randint(3, vocab, (1, L), generator=torch.Generator().manual_seed(L))
                if a.profile:
                    profile_token(hf, ids, f"{desc} {dname} prefill {L}")
                    continue
                gens = {k: v for k, v in runners(hf, None, ids).items() if k != "mamba2c"}
                pre, gap, toks = time_paths(gens, a.decode, a.reps)
                for k in gens:
                    same = "-" if k == "hf" else _same(toks[k], toks["hf"], L)
                    ld = "%.1f" % os.getloadavg()[0]
                    rows.append(dict(family=desc, dtype=dname, prefill=L, path=k,
                                     prefill_tok_s=L / pre[k], decode_tok_s=1.0 / gap[k],
                                     x_prefill=pre["hf"] / pre[k], x_decode=gap["hf"] / gap[k],
                                     tokens=same, load=os.getloadavg()[0]))
                    tab.append([desc, dname, L, k, f"{L / pre[k]:.1f}", f"{1.0 / gap[k]:.2f}",
                                f"{pre['hf'] / pre[k]:.2f}", f"{gap['hf'] / gap[k]:.2f}", same, ld])
                print_table(f"{desc} {dname} prefill {L} ({load()})", hdr, tab[-len(gens):])
            del hf
    if tab:
        print_table(f"all ({a.threads} threads; {load()}; "
                    f"{time.perf_counter() - t_start:.0f} s)", hdr, tab)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
