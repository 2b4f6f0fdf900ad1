"""gguf_io.py — llama.cpp's Mamba-2 GGUF files <-> MambaLMHeadModel, with the `gguf` package
from PyPI (gguf-py, llama.cpp's own reader/writer; imported on first use).

    from_gguf(path, dtype=None, device=None, chunk_size=None) -> MambaLMHeadModel
    save_gguf(model, path, dtype="f32", name=None)

The layout is the one llama.cpp's converter (convert_hf_to_gguf.py, Mamba2Model) writes and
its loader (llama_model_mamba2::load_arch_tensors; LLM_ARCH_MAMBA2 in src/llama-model.cpp
in older trees) reads. ggml lists dimensions fastest-first ("ne"); the numpy shape is the
reverse:

    metadata                                 from
    general.architecture = "mamba2"
    mamba2.embedding_length                  d_model
    mamba2.block_count                       n_layer
    mamba2.ssm.conv_kernel                   d_conv
    mamba2.ssm.inner_size                    d_inner = expand * d_model
    mamba2.ssm.state_size                    d_state
    mamba2.ssm.time_step_rank                nheads = d_inner / headdim
    mamba2.ssm.group_count                   ngroups
    mamba2.attention.layer_norm_rms_epsilon  the RMSNorm eps (block norms and gated norm)
    mamba2.context_length = 2**20, mamba2.feed_forward_length = 0, mamba2.head_count = 0
                                             (the converter's fixed values; unused)
    general.file_type, general.quantization_version
    tokenizer.ggml.model = "none", mamba2.vocab_size     (written; no tokenizer is stored)
    mamba2c.chunk_size                       ours, optional: the SSD chunk size (default 256)

    tensor (ggml ne)                                   from (mamba_ssm name, numpy shape)
    token_embd.weight         {d_model, n_vocab}       backbone.embedding.weight [V, d]
    output_norm.weight        {d_model}                backbone.norm_f.weight
    output.weight             {d_model, n_vocab}       lm_head.weight (absent when tied)
    blk.{i}.attn_norm.weight  {d_model}                layers.{i}.norm.weight
    blk.{i}.ssm_in.weight     {d_model, d_in_proj}     mixer.in_proj.weight
    blk.{i}.ssm_conv1d.weight {d_conv, conv_dim}       mixer.conv1d.weight [conv_dim,1,K] squeezed
    blk.{i}.ssm_conv1d.bias   {conv_dim}               mixer.conv1d.bias
    blk.{i}.ssm_dt.bias       {nheads}                 mixer.dt_bias
    blk.{i}.ssm_a             {1, nheads}              A = -exp(mixer.A_log)  (no ".weight")
    blk.{i}.ssm_d             {1, nheads}              mixer.D                (no ".weight")
    blk.{i}.ssm_norm.weight   {d_inner/ngroups, ngroups}  mixer.norm.weight regrouped
    blk.{i}.ssm_out.weight    {d_inner, d_model}       mixer.out_proj.weight

with d_in_proj = 2*d_inner + 2*ngroups*d_state + nheads and conv_dim = d_inner +
2*ngroups*d_state. As the converter does, only the four matrices (token_embd, output, ssm_in,
ssm_out) take the file's dtype; norms, conv1d, biases, A and D stay float32, and a Q8_0
matrix whose rows are not a multiple of 32 falls back to f16.

Reading accepts F32, F16, BF16 and Q8_0 tensors (all dequantized to float32, then cast to
`dtype`); a Q8_0 projection (ssm_in, ssm_out, output or a tied token_embd) also keeps the
file's bytes as its decode GEMV weight (`gemv_weight`), so the CPU decode streams Q8_0. Everything is read and checked before the model is built: a file that is not GGUF,
is truncated, is of another architecture, lacks a key or tensor, has an extra tensor, a shape
that disagrees with the metadata, or a tensor type outside those four raises ValueError (a
non-str path TypeError) naming it. A_log is recovered as log(-A), nudged by ulps so that
-exp(A_log) in float32 reproduces the stored A bit for bit.
"""
from __future__ import annotations

import math
import os
import tempfile
from typing import Dict, Optional, Tuple

import numpy as np
import torch

from .mamba_lm import MambaConfig, MambaLMHeadModel

__all__ = ["from_gguf", "save_gguf", "GGUF_DTYPES"]

ARCH = "mamba2"
DEFAULT_CHUNK_SIZE = 256
_CHUNK_KEY = "mamba2c.chunk_size"
# dtype name -> (GGMLQuantizationType name, LlamaFileType name)
GGUF_DTYPES = {"f32": ("F32", "ALL_F32"), "f16": ("F16", "MOSTLY_F16"),
               "bf16": ("BF16", "MOSTLY_BF16"), "q8_0": ("Q8_0", "MOSTLY_Q8_0")}
_TORCH_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_READ_TYPES = ("F32", "F16", "BF16", "Q8_0")


def _gguf():
    try:
        import gguf
    except ImportError as e:  # pragma: no cover - gguf is in requirements.txt
        raise ImportError("mamba2c GGUF support needs the `gguf` package (pip install gguf)") from e
    return gguf


def _check_path(path, fn: str) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"mamba2c.{fn}: path must be a str or os.PathLike, got "
                        f"{type(path).__name__}")
    return os.fspath(path)


# -- reading ------------------------------------------------------------------------------

def _field(reader, key: str, kind: type, path: str, required: bool = True):
    f = reader.fields.get(key)
    if f is None:
        if required:
            raise ValueError(f"mamba2c.from_gguf: {path!r} lacks the metadata key {key!r}")
        return None
    try:
        v = f.contents()
    except Exception as e:
        raise ValueError(f"mamba2c.from_gguf: {path!r}: metadata key {key!r} is unreadable "
                         f"({e})") from None
    if kind is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    else:
        ok = isinstance(v, kind)
    if not ok:
        raise ValueError(f"mamba2c.from_gguf: {path!r}: metadata key {key!r} is "
                         f"{type(v).__name__} {v!r}, expected {kind.__name__}")
    return kind(v)


def _a_log_from_a(A: torch.Tensor, path: str, name: str) -> torch.Tensor:
    """float32 A_log with -exp(A_log) == A exactly where a float32 A_log can do it."""
    if not bool(torch.isfinite(A).all()) or not bool((A < 0).all()):
        raise ValueError(f"mamba2c.from_gguf: {path!r}: {name} must be finite and < 0 "
                         f"(A = -exp(A_log)); got min {A.min().item()}, max {A.max().item()}")
    a = torch.log((-A).double()).float()
    for _ in range(8):
        e = -torch.exp(a)
        bad = e != A
        if not bool(bad.any()):
            break
        # exp(a) too large (e below A): step a down one ulp; too small: up
        toward = torch.where(e < A, torch.full_like(a, -math.inf), torch.full_like(a, math.inf))
        a = torch.where(bad, torch.nextafter(a, toward), a)
    return a


def _read(path: str):
    """(metadata dict, {name: float32 numpy array in numpy (reversed-ne) shape}, tied)."""
    gguf = _gguf()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"mamba2c.from_gguf: no such file {path!r}")
    size = os.path.getsize(path)
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as e:
        raise ValueError(f"mamba2c.from_gguf: {path!r} is not a readable GGUF file (truncated "
                         f"or corrupt? {size} bytes): {type(e).__name__}: {e}") from None
    try:
        arch = _field(reader, "general.architecture", str, path)
        if arch != ARCH:
            raise ValueError(f"mamba2c.from_gguf: {path!r} is a GGUF file of architecture "
                             f"{arch!r}; only {ARCH!r} (llama.cpp's Mamba-2) is supported")
        K = gguf.Keys
        meta = {
            "d_model": _field(reader, K.LLM.EMBEDDING_LENGTH.format(arch=arch), int, path),
            "n_layer": _field(reader, K.LLM.BLOCK_COUNT.format(arch=arch), int, path),
            "d_conv": _field(reader, K.SSM.CONV_KERNEL.format(arch=arch), int, path),
            "d_inner": _field(reader, K.SSM.INNER_SIZE.format(arch=arch), int, path),
            "d_state": _field(reader, K.SSM.STATE_SIZE.format(arch=arch), int, path),
            "nheads": _field(reader, K.SSM.TIME_STEP_RANK.format(arch=arch), int, path),
            "ngroups": _field(reader, K.SSM.GROUP_COUNT.format(arch=arch), int, path),
            "eps": _field(reader, K.Attention.LAYERNORM_RMS_EPS.format(arch=arch), float, path),
            "chunk_size": _field(reader, _CHUNK_KEY, int, path, required=False),
        }
        for k in ("d_model", "n_layer", "d_conv", "d_inner", "d_state", "nheads", "ngroups"):
            if meta[k] <= 0:
                raise ValueError(f"mamba2c.from_gguf: {path!r}: {k} = {meta[k]} must be > 0")
        d, di, N, H, G = (meta[k] for k in ("d_model", "d_inner", "d_state", "nheads",
                                           "ngroups"))
        if di % d or di % H or H % G or di % G:
            raise ValueError(f"mamba2c.from_gguf: {path!r}: inconsistent dimensions d_model="
                             f"{d}, ssm.inner_size={di}, ssm.time_step_rank={H}, "
                             f"ssm.group_count={G} (inner_size must be a multiple of "
                             f"embedding_length and of time_step_rank, heads of groups)")
        if not (meta["eps"] > 0 and math.isfinite(meta["eps"])):
            raise ValueError(f"mamba2c.from_gguf: {path!r}: rms eps {meta['eps']} must be > 0")
        # the shortest decimal with the same float32 value (1e-5, not 9.99999974738e-06)
        meta["eps"] = float(str(np.float32(meta["eps"])))

        tensors = {t.name: t for t in reader.tensors}
        tok = tensors.get("token_embd.weight")
        if tok is None:
            raise ValueError(f"mamba2c.from_gguf: {path!r} lacks the tensor 'token_embd.weight'")
        if len(tok.shape) != 2:
            raise ValueError(f"mamba2c.from_gguf: {path!r}: token_embd.weight has ggml shape "
                             f"{list(map(int, tok.shape))}, expected [{d}, n_vocab]")
        V = int(tok.shape[1])
        meta["vocab_size"] = V
        meta["tied"] = "output.weight" not in tensors
        conv_dim = di + 2 * G * N
        expect = {"token_embd.weight": (d, V), "output_norm.weight": (d,)}
        if not meta["tied"]:
            expect["output.weight"] = (d, V)
        for i in range(meta["n_layer"]):
            p = f"blk.{i}."
            expect.update({
                p + "attn_norm.weight": (d,), p + "ssm_in.weight": (d, 2 * di + 2 * G * N + H),
                p + "ssm_conv1d.weight": (meta["d_conv"], conv_dim),
                p + "ssm_conv1d.bias": (conv_dim,), p + "ssm_dt.bias": (H,),
                p + "ssm_a": (1, H), p + "ssm_d": (1, H),
                p + "ssm_norm.weight": (di // G, G), p + "ssm_out.weight": (di, d)})
        missing = [n for n in expect if n not in tensors]
        if missing:
            raise ValueError(f"mamba2c.from_gguf: {path!r} lacks the tensor(s) {missing[:8]}"
                             f"{' ...' if len(missing) > 8 else ''} (a Mamba-2 file with "
                             f"{meta['n_layer']} blocks needs them)")
        extra = [n for n in tensors if n not in expect]
        if extra:
            raise ValueError(f"mamba2c.from_gguf: {path!r} has tensor(s) a Mamba-2 model does "
                             f"not use: {extra[:8]}{' ...' if len(extra) > 8 else ''}")
        arrays = {}
        for name, ne in expect.items():
            t = tensors[name]
            ttype = t.tensor_type.name
            if ttype not in _READ_TYPES:
                raise ValueError(f"mamba2c.from_gguf: {path!r}: tensor {name!r} has type "
                                 f"{ttype}; supported: {', '.join(_READ_TYPES)}")
            got = tuple(int(x) for x in t.shape)
            if got != ne:
                raise ValueError(f"mamba2c.from_gguf: {path!r}: tensor {name!r} has ggml shape "
                                 f"{list(got)}, the metadata gives {list(ne)}")
            if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
                raise ValueError(f"mamba2c.from_gguf: {path!r} is truncated: tensor {name!r} "
                                 f"needs bytes up to {t.data_offset + t.n_bytes}, the file has "
                                 f"{size}")
            if ttype == "Q8_0" and len(ne) == 2:  # the bytes too, for the decode GEMV
                meta.setdefault("q8_0", {})[name] = np.array(t.data, dtype=np.uint8,
                                                             copy=True).reshape(ne[1], -1)
            a = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
            a = np.array(a, dtype=np.float32, copy=True).reshape(tuple(reversed(ne)))
            arrays[name] = a
        return meta, arrays
    except ValueError:
        raise
    except Exception as e:  # the reader's lazy views over a damaged file
        raise ValueError(f"mamba2c.from_gguf: {path!r} could not be read (truncated or "
                         f"corrupt? {size} bytes): {type(e).__name__}: {e}") from None
    finally:
        del reader


def _config(meta: dict, chunk_size: int) -> MambaConfig:
    ssm_cfg = {"layer": "Mamba2", "d_state": meta["d_state"], "d_conv": meta["d_conv"],
               "expand": meta["d_inner"] // meta["d_model"],
               "headdim": meta["d_inner"] // meta["nheads"], "ngroups": meta["ngroups"],
               "chunk_size": chunk_size, "bias": False, "conv_bias": True, "rmsnorm": True,
               "norm_before_gate": False}
    return MambaConfig(d_model=meta["d_model"], d_intermediate=0, n_layer=meta["n_layer"],
                       vocab_size=meta["vocab_size"], ssm_cfg=ssm_cfg, rms_norm=True,
                       residual_in_fp32=True, fused_add_norm=True, pad_vocab_size_multiple=1,
                       tie_embeddings=meta["tied"])


def from_gguf(path, dtype: Optional[torch.dtype] = None, device=None,
              chunk_size: Optional[int] = None, activations: str = "f32") -> MambaLMHeadModel:
    """A MambaLMHeadModel (eval mode) with the config and weights of a llama.cpp Mamba-2 GGUF
    file. dtype: the parameters' dtype (default float32; Q8_0/f16/bf16 tensors are
    dequantized to float32 first). chunk_size: the SSD chunk size (default: the file's
    mamba2c.chunk_size, else 256 — llama.cpp has none). The RMSNorm eps of the file is set
    on every norm (block norms, norm_f and the gated norms). activations: how the CPU
    decode multiplies by the file's Q8_0 matrices, "f32" (exact) or "q8_0" (x rounded to
    Q8_0 too, llama.cpp's arithmetic; MambaLMHeadModel.set_q8_activations). Nothing is
    downloaded."""
    from .quant import check_activations
    check_activations(activations, "mamba2c.from_gguf")
    path = _check_path(path, "from_gguf")
    meta, arrays = _read(path)
    cs = chunk_size if chunk_size is not None else (meta["chunk_size"] or DEFAULT_CHUNK_SIZE)
    if not isinstance(cs, int) or cs <= 0:
        raise ValueError(f"mamba2c.from_gguf: chunk_size {cs!r} must be a positive int")
    cfg = _config(meta, cs)
    di = meta["d_inner"]
    T = lambda n: torch.from_numpy(arrays[n])  # noqa: E731
    sd: Dict[str, torch.Tensor] = {"backbone.embedding.weight": T("token_embd.weight"),
                                   "backbone.norm_f.weight": T("output_norm.weight")}
    sd["lm_head.weight"] = sd["backbone.embedding.weight"] if meta["tied"] else T("output.weight")
    for i in range(meta["n_layer"]):
        p, q = f"blk.{i}.", f"backbone.layers.{i}."
        sd[q + "norm.weight"] = T(p + "attn_norm.weight")
        m = q + "mixer."
        sd[m + "in_proj.weight"] = T(p + "ssm_in.weight")
        sd[m + "conv1d.weight"] = T(p + "ssm_conv1d.weight").unsqueeze(1)
        sd[m + "conv1d.bias"] = T(p + "ssm_conv1d.bias")
        sd[m + "dt_bias"] = T(p + "ssm_dt.bias")
        sd[m + "A_log"] = _a_log_from_a(T(p + "ssm_a").reshape(-1), path, p + "ssm_a")
        sd[m + "D"] = T(p + "ssm_d").reshape(-1)
        sd[m + "norm.weight"] = T(p + "ssm_norm.weight").reshape(di)
        sd[m + "out_proj.weight"] = T(p + "ssm_out.weight")
    # built on meta and given the loaded tensors (assign): no second copy of the weights
    model = MambaLMHeadModel(cfg, device="meta")
    model.load_state_dict(sd, strict=True, assign=True)
    model.tie_weights()
    for blk in model.backbone.layers:  # the attributes Mamba2.__init__ sets on these
        for prm in (blk.mixer.dt_bias, blk.mixer.A_log, blk.mixer.D):
            prm._no_weight_decay = True
    eps = meta["eps"]
    for blk in model.backbone.layers:
        blk.norm.eps = eps
        blk.mixer.norm.eps = eps
    model.backbone.norm_f.eps = eps
    if dtype is not None or device is not None:
        model = model.to(device=device, dtype=dtype)
    _keep_q8_0(model, meta)
    return model.set_q8_activations(activations).eval()


def _keep_q8_0(model: MambaLMHeadModel, meta: dict) -> None:
    """The file's Q8_0 matrices stay Q8_0 for the CPU decode: each projection whose tensor
    is Q8_0 gets the file's bytes as its C GEMV weight (`gemv_weight`, as quantize() sets);
    its float weight holds their exact dequantized values for prefill."""
    from .quant import GemvWeight
    q = meta.get("q8_0", {})
    if not q:
        return
    mods = {"output.weight": model.lm_head}
    if meta["tied"]:
        mods["token_embd.weight"] = model.lm_head
    for i, blk in enumerate(model.backbone.layers):
        mods[f"blk.{i}.ssm_in.weight"] = blk.mixer.in_proj
        mods[f"blk.{i}.ssm_out.weight"] = blk.mixer.out_proj
    for name, mod in mods.items():
        if name in q and mod.weight.is_cpu:
            O, I = mod.weight.shape
            mod.gemv_weight = GemvWeight(torch.from_numpy(q[name]).contiguous(), "q8_0", O, I)


# -- writing ------------------------------------------------------------------------------

def _dtype_name(dtype) -> str:
    if isinstance(dtype, torch.dtype):
        if dtype not in _TORCH_DTYPES:
            raise TypeError(f"mamba2c.save_gguf: dtype {dtype} is not supported; use one of "
                            f"{sorted(GGUF_DTYPES)} or torch.float32/float16/bfloat16")
        return _TORCH_DTYPES[dtype]
    if not isinstance(dtype, str):
        raise TypeError(f"mamba2c.save_gguf: dtype must be a str or torch.dtype, got "
                        f"{type(dtype).__name__}")
    name = dtype.lower()
    if name not in GGUF_DTYPES:
        raise ValueError(f"mamba2c.save_gguf: dtype {dtype!r} is not supported; use one of "
                         f"{sorted(GGUF_DTYPES)}")
    return name


def _check_model(model) -> Tuple[float, int]:
    """(eps, chunk_size) of a model llama.cpp's mamba2 can run; else ValueError naming why."""
    if not isinstance(model, MambaLMHeadModel):
        raise TypeError(f"mamba2c.save_gguf: expected a MambaLMHeadModel, got "
                        f"{type(model).__name__}")
    c = model.config
    why = []
    if c.d_intermediate:
        why.append(f"d_intermediate={c.d_intermediate} (an MLP after each mixer)")
    if c.attn_layer_idx:
        why.append("attention layers")
    if not c.rms_norm:
        why.append("rms_norm=False (LayerNorm)")
    eps = float(model.backbone.norm_f.eps)
    chunk = None
    for i, blk in enumerate(model.backbone.layers):
        mx = blk.mixer
        bad = []
        if mx.d_ssm != mx.d_inner:
            bad.append("d_ssm < d_inner")
        if not mx.rmsnorm:
            bad.append("rmsnorm=False")
        elif mx.norm_before_gate:
            bad.append("norm_before_gate=True")
        if mx.in_proj.bias is not None or mx.out_proj_has_bias:
            bad.append("bias=True (in_proj/out_proj biases)")
        if mx.conv1d.bias is None:
            bad.append("conv_bias=False (llama.cpp requires ssm_conv1d.bias)")
        if mx.D_has_hdim:
            bad.append("D_has_hdim=True")
        if tuple(mx.dt_limit) != (0.0, float("inf")):
            bad.append(f"dt_limit={tuple(mx.dt_limit)}")
        if mx.tp_world_size != 1:
            bad.append("tensor-parallel shard")
        if mx.d_inner % mx.ngroups:
            bad.append("d_inner not a multiple of ngroups")
        for n in (blk.norm, mx.norm if mx.rmsnorm else None):
            if n is not None and float(n.eps) != eps:
                bad.append(f"norm eps {n.eps} != norm_f eps {eps} (llama.cpp has one eps)")
        if bad:
            why.append(f"layer {i}: " + ", ".join(bad))
        chunk = mx.chunk_size if chunk is None else chunk
    if why:
        raise ValueError("mamba2c.save_gguf: llama.cpp's mamba2 cannot represent this model: "
                         + "; ".join(why))
    return eps, int(chunk or DEFAULT_CHUNK_SIZE)


def save_gguf(model: MambaLMHeadModel, path, dtype="f32", name: Optional[str] = None) -> None:
    """Write model as a llama.cpp Mamba-2 GGUF file (the keys, tensor names and shapes of
    llama.cpp's convert_hf_to_gguf.py; see the module docstring). dtype: "f32", "f16",
    "bf16" or "q8_0" (or torch.float32/float16/bfloat16) for the four weight matrices;
    the rest stays float32, as the converter writes it. No tokenizer is stored
    (tokenizer.ggml.model = "none" with mamba2.vocab_size: llama.cpp runs token ids, e.g.
    llama-bench). The file is written to a temporary name and renamed, so a failure leaves
    no partial file at path."""
    gguf = _gguf()
    path = _check_path(path, "save_gguf")
    dname = _dtype_name(dtype)
    eps, chunk = _check_model(model)
    qname, ftname = GGUF_DTYPES[dname]
    QT = gguf.GGMLQuantizationType
    qmat = QT[qname]
    c = model.config
    bb = model.backbone
    mx0 = bb.layers[0].mixer if len(bb.layers) else None
    if mx0 is None:
        raise ValueError("mamba2c.save_gguf: the model has no layers")
    d, di, N, H, G = c.d_model, mx0.d_inner, mx0.d_state, mx0.nheads, mx0.ngroups
    tied = bool(c.tie_embeddings) or model.lm_head.weight is bb.embedding.weight

    def f32(t: torch.Tensor) -> np.ndarray:
        return t.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()

    tensors = []  # (name, float32 numpy array, is a weight matrix)
    tensors.append(("token_embd.weight", f32(bb.embedding.weight), True))
    tensors.append(("output_norm.weight", f32(bb.norm_f.weight), False))
    if not tied:
        tensors.append(("output.weight", f32(model.lm_head.weight), True))
    for i, blk in enumerate(bb.layers):
        mx, p = blk.mixer, f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", f32(blk.norm.weight), False),
            (p + "ssm_in.weight", f32(mx.in_proj.weight), True),
            (p + "ssm_conv1d.weight", f32(mx.conv1d.weight).reshape(mx.conv_dim, mx.d_conv),
             False),
            (p + "ssm_conv1d.bias", f32(mx.conv1d.bias), False),
            (p + "ssm_dt.bias", f32(mx.dt_bias), False),
            (p + "ssm_a", f32(-torch.exp(mx.A_log.detach().float())).reshape(H, 1), False),
            (p + "ssm_d", f32(mx.D).reshape(H, 1), False),
            (p + "ssm_norm.weight", f32(mx.norm.weight).reshape(G, di // G), False),
            (p + "ssm_out.weight", f32(mx.out_proj.weight), True)]

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".mamba2c-", suffix=".gguf.tmp", dir=directory)
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, ARCH)
        w.add_type(gguf.GGUFType.MODEL)
        w.add_name(name if name is not None else "mamba2c")
        w.add_context_length(2 ** 20)
        w.add_embedding_length(d)
        w.add_feed_forward_length(0)
        w.add_head_count(0)
        w.add_block_count(c.n_layer)
        w.add_ssm_conv_kernel(mx0.d_conv)
        w.add_ssm_inner_size(di)
        w.add_ssm_state_size(N)
        w.add_ssm_time_step_rank(H)
        w.add_ssm_group_count(G)
        w.add_layer_norm_rms_eps(eps)
        w.add_file_type(int(gguf.LlamaFileType[ftname]))
        w.add_vocab_size(int(bb.embedding.weight.shape[0]))
        w.add_tokenizer_model("none")
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        w.add_uint32(_CHUNK_KEY, chunk)
        for tname, arr, is_matrix in tensors:
            qt = qmat if is_matrix else QT.F32
            if qt == QT.Q8_0 and arr.shape[-1] % 32:
                qt = QT.F16  # the converter's fallback for rows that are not whole blocks
            data = gguf.quants.quantize(arr, qt)
            w.add_tensor(tname, data, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
