"""mamba_lm.py — a Mamba-2 language model with mamba_ssm's MambaLMHeadModel structure,
config and state-dict keys (mamba_ssm.models.mixer_seq_simple), on mamba2c ops.

    backbone.embedding.weight
    backbone.layers.{i}.norm.weight            (.bias with rms_norm=False)
    backbone.layers.{i}.mixer.{in_proj.weight, conv1d.weight, conv1d.bias, dt_bias, A_log, D,
                               norm.weight, out_proj.weight}
    backbone.layers.{i}.norm2.weight, .mlp.fc1.weight, .mlp.fc2.weight   (d_intermediate > 0)
    backbone.norm_f.weight
    lm_head.weight                              (the embedding's, with tie_embeddings)

forward(input_ids) -> CausalLMOutput(logits); generate() (models/generation.py) decodes with
the C step ops; save_pretrained / from_pretrained use a local directory (config.json +
model.safetensors, or mamba_ssm's pytorch_model.bin). Only Mamba-2 mixers: an ssm_cfg
without "layer": "Mamba2" (mamba_ssm's Mamba-1 default) and attention layers raise
NotImplementedError. Difference: MambaConfig's default ssm_cfg is {"layer": "Mamba2"}.
"""
from __future__ import annotations

import json
import math
import os
from collections import namedtuple
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..layer_norm import LayerNorm, RMSNorm, layer_norm_fn
from ..nn.mamba2 import Mamba2
from .generation import GenerationMixin

__all__ = ["MambaConfig", "MambaLMHeadModel", "MixerModel", "Block", "GatedMLP"]

CausalLMOutput = namedtuple("CausalLMOutput", ["logits"])


@dataclass
class MambaConfig:
    d_model: int = 2560
    d_intermediate: int = 0
    n_layer: int = 64
    vocab_size: int = 50277
    ssm_cfg: dict = field(default_factory=lambda: {"layer": "Mamba2"})
    attn_layer_idx: list = field(default_factory=list)
    attn_cfg: dict = field(default_factory=dict)
    rms_norm: bool = True
    residual_in_fp32: bool = True
    fused_add_norm: bool = True
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True


class GatedMLP(nn.Module):
    """mamba_ssm's GatedMLP: fc1 -> (y, gate); y * silu(gate) -> fc2; hidden rounded up to a
    multiple of multiple_of."""

    def __init__(self, in_features, hidden_features=None, out_features=None, activation=F.silu,
                 bias=False, multiple_of=128, device=None, dtype=None):
        super().__init__()
        fk = {"device": device, "dtype": dtype}
        out_features = out_features if out_features is not None else in_features
        hidden = hidden_features if hidden_features is not None else int(8 * in_features / 3)
        hidden = (hidden + multiple_of - 1) // multiple_of * multiple_of
        self.fc1 = nn.Linear(in_features, 2 * hidden, bias=bias, **fk)
        self.activation = activation
        self.fc2 = nn.Linear(hidden, out_features, bias=bias, **fk)

    def forward(self, x):
        y, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(y * self.activation(gate))


def add_norm(norm, hidden, residual, fused: bool, residual_in_fp32: bool):
    """mamba_ssm's Block prologue: (norm(hidden + residual), new residual). fused: one
    layer_norm_fn on the unrounded float32 sum; else the sum in torch, the norm of it in the
    norm's dtype."""
    if fused:
        return layer_norm_fn(hidden, norm.weight, norm.bias, residual=residual, prenorm=True,
                             residual_in_fp32=residual_in_fp32, eps=norm.eps,
                             is_rms_norm=isinstance(norm, RMSNorm))
    residual = (hidden + residual) if residual is not None else hidden
    hidden = norm(residual.to(dtype=norm.weight.dtype))
    if residual_in_fp32:
        residual = residual.to(torch.float32)
    return hidden, residual


class Block(nn.Module):
    """mamba_ssm's Block: (norm -> mixer) [-> norm2 -> mlp], residual kept apart."""

    def __init__(self, dim, mixer_cls, mlp_cls, norm_cls, fused_add_norm=False,
                 residual_in_fp32=False):
        super().__init__()
        self.residual_in_fp32 = residual_in_fp32
        self.fused_add_norm = fused_add_norm
        self.norm = norm_cls(dim)
        self.mixer = mixer_cls(dim)
        if mlp_cls is not None:
            self.norm2 = norm_cls(dim)
            self.mlp = mlp_cls(dim)
        else:
            self.mlp = None

    def forward(self, hidden_states, residual=None, inference_params=None, **mixer_kwargs):
        hidden_states, residual = add_norm(self.norm, hidden_states, residual,
                                           self.fused_add_norm, self.residual_in_fp32)
        hidden_states = self.mixer(hidden_states, inference_params=inference_params,
                                   **mixer_kwargs)
        if self.mlp is not None:
            hidden_states, residual = add_norm(self.norm2, hidden_states, residual,
                                               self.fused_add_norm, self.residual_in_fp32)
            hidden_states = self.mlp(hidden_states)
        return hidden_states, residual

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        return self.mixer.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)


def _init_weights(module, n_layer, initializer_range=0.02, rescale_prenorm_residual=True,
                  n_residuals_per_layer=1):
    """mamba_ssm's initialisation: Linear biases 0, embeddings N(0, 0.02), out_proj / fc2
    Kaiming-uniform scaled by 1/sqrt(n_residuals_per_layer * n_layer)."""
    if isinstance(module, nn.Linear):
        if module.bias is not None and not getattr(module.bias, "_no_reinit", False):
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=initializer_range)
    if rescale_prenorm_residual:
        for name, p in module.named_parameters():
            if name in ("out_proj.weight", "fc2.weight"):
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                with torch.no_grad():
                    p /= math.sqrt(n_residuals_per_layer * n_layer)


def _mixer_cls(ssm_cfg, layer_idx, fk):
    cfg = dict(ssm_cfg or {})
    layer = cfg.pop("layer", "Mamba1")
    if layer != "Mamba2":
        raise NotImplementedError(f"mamba2c.models.MambaLMHeadModel: ssm_cfg layer {layer!r}; "
                                  f"only 'Mamba2' mixers are implemented")
    return partial(Mamba2, layer_idx=layer_idx, **cfg, **fk)


class MixerModel(nn.Module):
    def __init__(self, d_model, n_layer, d_intermediate, vocab_size, ssm_cfg=None,
                 attn_layer_idx=None, attn_cfg=None, norm_epsilon=1e-5, rms_norm=False,
                 initializer_cfg=None, fused_add_norm=False, residual_in_fp32=False,
                 device=None, dtype=None):
        super().__init__()
        fk = {"device": device, "dtype": dtype}
        if attn_layer_idx:
            raise NotImplementedError("mamba2c.models.MambaLMHeadModel: attention layers "
                                      "(attn_layer_idx) are not implemented")
        self.residual_in_fp32 = residual_in_fp32
        self.fused_add_norm = fused_add_norm
        self.embedding = nn.Embedding(vocab_size, d_model, **fk)
        norm_cls = partial(RMSNorm if rms_norm else LayerNorm, eps=norm_epsilon, **fk)
        mlp_cls = (None if d_intermediate == 0 else
                   partial(GatedMLP, hidden_features=d_intermediate, out_features=d_model, **fk))
        self.layers = nn.ModuleList([
            Block(d_model, _mixer_cls(ssm_cfg, i, fk), mlp_cls, norm_cls,
                  fused_add_norm=fused_add_norm, residual_in_fp32=residual_in_fp32)
            for i in range(n_layer)])
        for i, layer in enumerate(self.layers):
            layer.layer_idx = i
        self.norm_f = norm_cls(d_model)
        self.apply(partial(_init_weights, n_layer=n_layer, **(initializer_cfg or {}),
                           n_residuals_per_layer=1 if d_intermediate == 0 else 2))

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        return {i: layer.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)
                for i, layer in enumerate(self.layers)}

    def forward(self, input_ids, inference_params=None, **mixer_kwargs):
        hidden_states = self.embedding(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(hidden_states, residual,
                                            inference_params=inference_params, **mixer_kwargs)
        if not self.fused_add_norm:
            residual = (hidden_states + residual) if residual is not None else hidden_states
            return self.norm_f(residual.to(dtype=self.norm_f.weight.dtype))
        return layer_norm_fn(hidden_states, self.norm_f.weight, self.norm_f.bias, eps=self.norm_f.eps,
                             residual=residual, prenorm=False,
                             residual_in_fp32=self.residual_in_fp32,
                             is_rms_norm=isinstance(self.norm_f, RMSNorm))


_CONFIG_NAME, _ST_NAME, _BIN_NAME = "config.json", "model.safetensors", "pytorch_model.bin"


class MambaLMHeadModel(nn.Module, GenerationMixin):
    def __init__(self, config: MambaConfig, initializer_cfg=None, device=None, dtype=None):
        super().__init__()
        self.config = config
        fk = {"device": device, "dtype": dtype}
        vocab_size = config.vocab_size
        m = config.pad_vocab_size_multiple
        if vocab_size % m:
            vocab_size += m - vocab_size % m
        self.backbone = MixerModel(d_model=config.d_model, n_layer=config.n_layer,
                                   d_intermediate=config.d_intermediate, vocab_size=vocab_size,
                                   ssm_cfg=config.ssm_cfg, attn_layer_idx=config.attn_layer_idx,
                                   attn_cfg=config.attn_cfg, rms_norm=config.rms_norm,
                                   initializer_cfg=initializer_cfg,
                                   fused_add_norm=config.fused_add_norm,
                                   residual_in_fp32=config.residual_in_fp32, **fk)
        self.lm_head = nn.Linear(config.d_model, vocab_size, bias=False, **fk)
        self.apply(partial(_init_weights, n_layer=config.n_layer, **(initializer_cfg or {})))
        self.tie_weights()

    def tie_weights(self):
        if self.config.tie_embeddings:
            self.lm_head.weight = self.backbone.embedding.weight

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        return self.backbone.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)

    def forward(self, input_ids, position_ids=None, inference_params=None, num_last_tokens=0,
                **mixer_kwargs):
        """input_ids [B,L] -> CausalLMOutput(logits [B,L,vocab]) (the last num_last_tokens
        positions only when > 0). position_ids is ignored, as in mamba_ssm."""
        hidden_states = self.backbone(input_ids, inference_params=inference_params, **mixer_kwargs)
        if num_last_tokens > 0:
            hidden_states = hidden_states[:, -num_last_tokens:]
        return CausalLMOutput(logits=self.lm_head(hidden_states))

    # -- weight formats of the CPU decode ---------------------------------------------------

    def quantize(self, fmt: str = "q8_0", embedding: Optional[str] = "bf16",
                 lm_head: Optional[str] = "bf16",
                 activations: str = "f32") -> "MambaLMHeadModel":
        """Quantize the mixers' in_proj / out_proj weights to GGUF's Q8_0 (fmt "q8_0"; or
        "bf16") for the CPU decode, in place; returns self.

        Each Linear keeps a float weight holding the quantized values (d * q, rounded to the
        model dtype: exact in float32), which prefill and every non-decode path use, and gets
        the packed weight (models.quant.GemvWeight, attribute `gemv_weight`) that the decode
        step's C GEMV (mamba2_linear_forward) streams instead. embedding: "bf16" rounds the
        embedding table to bfloat16 values (None: unchanged). lm_head: "bf16" (default),
        "q8_0" or None (float as is) for its decode GEMV, its float weight rounded the same
        way; a tied lm_head / embedding is rounded by embedding's choice, then
        lm_head's. The packed weights add to the float ones in memory (the float copies
        serve prefill). activations: "f32" (default) keeps the decode's Q8_0 products exact
        in float32; "q8_0" rounds x to Q8_0 blocks too and takes integer dot products
        (llama.cpp's Q8_0 arithmetic, mamba2_linear_options_t.quantize_x): faster where
        instructions bind (batches, weights in cache), not on a single-thread weight stream,
        with a little more rounding error (docs/decode.md). Also settable later with
        set_q8_activations().
        """
        from .quant import GemvWeight, check_activations
        fmts = ("q8_0", "bf16", "f32", None)
        for name, f in (("fmt", fmt), ("embedding", embedding), ("lm_head", lm_head)):
            if f not in fmts or (name == "fmt" and f is None):
                raise ValueError(f"quantize: {name}={f!r}; expected one of {fmts}")
        check_activations(activations, "quantize")  # before any weight changes

        @torch.no_grad()
        def convert(lin: nn.Linear, f: Optional[str]):
            w = lin.weight
            if f is None:
                return
            if f == "q8_0" and w.shape[1] % 32:
                raise ValueError(f"quantize: a weight of shape {list(w.shape)} has rows that "
                                 f"are not a multiple of Q8_0's 32-element block")
            g = GemvWeight.of(w.detach().cpu(), f)
            w.copy_(g.dequantized().to(w.dtype))
            lin.gemv_weight = g

        for blk in self.backbone.layers:
            m = blk.mixer
            for lin in (m.in_proj, m.out_proj):
                convert(lin, fmt)
        emb = self.backbone.embedding.weight
        if embedding == "bf16":
            with torch.no_grad():
                emb.copy_(emb.to(torch.bfloat16).to(emb.dtype))
        elif embedding == "q8_0":
            with torch.no_grad():
                emb.copy_(GemvWeight.of(emb.detach().cpu(), "q8_0").dequantized().to(emb.dtype))
        convert(self.lm_head, lm_head)
        return self.set_q8_activations(activations)

    def set_q8_activations(self, activations: str = "q8_0") -> "MambaLMHeadModel":
        """How the CPU decode multiplies by the Q8_0 weights (quantize() or a Q8_0 GGUF
        file): "q8_0" rounds x to Q8_0 blocks and takes integer dot products (llama.cpp's
        arithmetic), "f32" the exact float32 product. Weights of other formats are
        unaffected. Returns self."""
        from .quant import check_activations
        qx = check_activations(activations, "set_q8_activations")
        for mod in self.modules():
            g = getattr(mod, "gemv_weight", None)
            if g is not None and g.fmt == "q8_0":
                g.quantize_x = qx
        return self

    # -- local save / load ------------------------------------------------------------------

    def save_pretrained(self, save_directory: str, safe_serialization: Optional[bool] = None):
        """config.json (the MambaConfig fields) + model.safetensors (when the safetensors
        package is installed and safe_serialization is not False) or pytorch_model.bin
        (torch.save, mamba_ssm's file). A tied lm_head.weight is stored once."""
        os.makedirs(save_directory, exist_ok=True)
        with open(os.path.join(save_directory, _CONFIG_NAME), "w") as f:
            json.dump(asdict(self.config), f, indent=4)
        sd = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_embeddings:
            sd.pop("lm_head.weight", None)
        if safe_serialization is None:
            try:
                import safetensors.torch  # noqa: F401
                safe_serialization = True
            except ImportError:
                safe_serialization = False
        if safe_serialization:
            from safetensors.torch import save_file
            save_file(sd, os.path.join(save_directory, _ST_NAME), metadata={"format": "pt"})
        else:
            torch.save(sd, os.path.join(save_directory, _BIN_NAME))

    @classmethod
    def from_pretrained(cls, pretrained_model_name: str, device=None, dtype=None, **kwargs):
        """Load a local directory written by save_pretrained (or a mamba_ssm checkpoint
        directory: config.json + pytorch_model.bin). Nothing is downloaded."""
        d = pretrained_model_name
        if not os.path.isdir(d):
            raise FileNotFoundError(f"mamba2c: {d!r} is not a local directory (mamba2c loads "
                                    f"local checkpoints only; nothing is downloaded)")
        with open(os.path.join(d, _CONFIG_NAME)) as f:
            config = MambaConfig(**json.load(f))
        model = cls(config, device=device, dtype=dtype, **kwargs)
        st, bn = os.path.join(d, _ST_NAME), os.path.join(d, _BIN_NAME)
        if os.path.exists(st):
            from safetensors.torch import load_file
            sd = load_file(st)
        elif os.path.exists(bn):
            sd = torch.load(bn, map_location="cpu", weights_only=True)
        else:
            raise FileNotFoundError(f"mamba2c: neither {_ST_NAME} nor {_BIN_NAME} in {d!r}")
        if config.tie_embeddings and "lm_head.weight" not in sd:
            sd["lm_head.weight"] = sd["backbone.embedding.weight"]
        model.load_state_dict(sd)
        if dtype is not None or device is not None:
            model.to(device=device, dtype=dtype)
        return model


def from_transformers(hf_model, dtype=None) -> MambaLMHeadModel:
    """A MambaLMHeadModel with the weights of a transformers Mamba2ForCausalLM (copied).
    HF's block is mamba_ssm's unfused one (residual = hidden + residual; norm of the sum in
    the norm's dtype), so the model is built with fused_add_norm=False and HF's
    residual_in_fp32. Needs HF's norm eps 1e-5 (mamba_ssm's fixed value)."""
    c = hf_model.config
    eps = getattr(c, "layer_norm_epsilon", 1e-5)
    if abs(eps - 1e-5) > 1e-12:
        raise NotImplementedError(f"layer_norm_epsilon={eps}; mamba_ssm's layers use 1e-5")
    lim = tuple(getattr(c, "time_step_limit", (0.0, float("inf"))))
    ssm_cfg = {"layer": "Mamba2", "d_state": c.state_size, "d_conv": c.conv_kernel,
               "expand": c.expand, "headdim": c.head_dim, "ngroups": c.n_groups,
               "chunk_size": c.chunk_size, "bias": c.use_bias, "conv_bias": c.use_conv_bias,
               "dt_limit": lim, "rmsnorm": True, "norm_before_gate": False}
    d_inner = int(c.expand * c.hidden_size)
    if getattr(c, "num_heads", d_inner // c.head_dim) * c.head_dim != d_inner:
        ssm_cfg["d_ssm"] = c.num_heads * c.head_dim
    cfg = MambaConfig(d_model=c.hidden_size, d_intermediate=0, n_layer=c.num_hidden_layers,
                      vocab_size=c.vocab_size, ssm_cfg=ssm_cfg, rms_norm=True,
                      residual_in_fp32=bool(getattr(c, "residual_in_fp32", True)),
                      fused_add_norm=False, pad_vocab_size_multiple=1,
                      tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)))
    hsd = hf_model.state_dict()
    sd = {}
    for k, v in hsd.items():
        k2 = k.replace("backbone.embeddings.", "backbone.embedding.")
        sd[k2] = v
    if cfg.tie_embeddings:
        sd.setdefault("lm_head.weight", sd["backbone.embedding.weight"])
    p = next(hf_model.parameters())
    model = MambaLMHeadModel(cfg, device="meta")
    model = model.to_empty(device=p.device)
    model.load_state_dict(sd)
    model.tie_weights()
    return model.to(dtype=dtype if dtype is not None else p.dtype).eval()
