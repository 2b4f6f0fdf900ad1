"""generation.py — generate() for mamba2c.models.MambaLMHeadModel (mamba_ssm's
GenerationMixin.generate signature), with a decode loop that calls the C step ops directly.

Prefill is the model's forward with an InferenceParams (one call over the prompt, which fills
every layer's conv and SSM cache). Each decode token then runs `_Decoder.step`. In the common
case (Mamba-2 mixers with the gated norm, RMSNorm blocks, no MLP, residual in float32: every
transformers Mamba2 checkpoint) that is a replayed plan (decode_plan.py: every C call's
descriptors packed once, every intermediate in a buffer reused across tokens, no per-op
dispatch). Otherwise the generic per-op path: per layer the
residual add + norm, in_proj (torch Linear), mamba2_conv1d_step and mamba2_ssd_step straight
through the binding (`mamba2c._native`: no dispatch, autograd or custom-op layers), the gated
RMSNorm (C), out_proj; then the final norm and lm_head. Everything that does not change
between tokens — the float32 conv weights, A = -exp(A_log), D, dt_bias, split sizes, the
caches — is prepared once per generate() call, and the SSD step's descriptors are cached by
the binding (one template for all layers of a model). Numerically it is Mamba2.step (the
same ops, the same roundings to the model dtype), so greedy decoding equals the argmax of a
full forward over the growing sequence to rounding (tests/test_mamba_lm.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _native, ops

__all__ = ["GenerationMixin", "GenerateOutput", "sample"]


@dataclass
class GenerateOutput:
    sequences: Tensor
    scores: Optional[Tuple[Tensor, ...]] = None


def sample(logits: Tensor, top_k: int = 1, top_p: float = 0.0, min_p: float = 0.0,
           temperature: float = 1.0, generator: Optional[torch.Generator] = None) -> Tensor:
    """One token per row of logits [B,V]. top_k == 1: argmax (greedy). Otherwise the logits
    are divided by temperature and filtered — top_k > 0 keeps the k largest; min_p > 0 keeps
    tokens whose probability is >= min_p times the largest; 0 < top_p < 1 keeps the smallest
    set of most likely tokens whose probability mass reaches top_p (drops every token whose
    ascending cumulative probability is <= 1 - top_p) — and a token is drawn from the
    softmax of what is left."""
    if top_k == 1:
        return logits.argmax(dim=-1)
    if not 0.0 <= top_p <= 1.0:
        raise ValueError(f"top_p is {top_p}; expected 0 <= top_p <= 1")
    lg = logits.float() / temperature if temperature != 1.0 else logits.float().clone()
    if top_k > 0:
        k = min(top_k, lg.shape[-1])
        kth = torch.topk(lg, k, dim=-1).values[..., -1:]
        lg = lg.masked_fill(lg < kth, float("-inf"))
    if min_p > 0.0:
        p = torch.softmax(lg, dim=-1)
        lg = lg.masked_fill(p < min_p * p.max(dim=-1, keepdim=True).values, float("-inf"))
    if 0.0 < top_p < 1.0:
        srt, idx = torch.sort(lg, dim=-1)                       # ascending
        cum = torch.softmax(srt, dim=-1).cumsum(dim=-1)
        drop = (cum <= 1.0 - top_p).scatter(-1, idx, cum <= 1.0 - top_p)
        lg = lg.masked_fill(drop, float("-inf"))
    return torch.multinomial(torch.softmax(lg, dim=-1), 1, generator=generator).squeeze(-1)


class _Layer:
    __slots__ = ("blk", "mixer", "in_w", "in_b", "split", "xbc_split", "conv_w", "conv_b",
                 "A", "D", "dt_bias", "dt_lo", "dt_hi", "conv_state", "ssm_state", "H", "P",
                 "G", "N", "gnorm_w", "gnorm_eps", "gsize", "nbg", "z_in_scan", "out_w", "out_b",
                 "d_mlp", "dtype", "in_g", "out_g")


# torch's internal GRAIN_SIZE: an elementwise op on fewer elements runs on the calling thread
_GRAIN = 32768


def _narrow(y: Tensor, dtype) -> Tensor:
    """y.to(dtype), the same bits, as copies of at most _GRAIN elements: a larger copy (the
    [B, vocab] logits) goes to torch's thread pool, whose wake-up on a loaded machine cost
    ~8 ms per token with 2 threads (docs/decode.md), for ~25 us of work."""
    if y.dtype is dtype or y.numel() <= _GRAIN:
        return y.to(dtype)
    out = torch.empty(y.shape, dtype=dtype)
    fo, fi = out.view(-1), y.reshape(-1)
    for s in range(0, fi.numel(), _GRAIN):
        fo[s:s + _GRAIN].copy_(fi[s:s + _GRAIN])
    return out


def _proj(x: Tensor, w: Tensor, b: Optional[Tensor], g) -> Tensor:
    """A decode projection: the C GEMV on CPU activations when the weight has a GemvWeight
    g (float32 in and out: a half input widened exactly, the result rounded to its dtype, as
    the decode plan does), else F.linear."""
    if g is None or not x.is_cpu:
        return F.linear(x, w, b)
    from .quant import linear
    y = linear(x.reshape(-1, x.shape[-1]).to(torch.float32), g, b)
    return _narrow(y.view(*x.shape[:-1], g.O), x.dtype)


class _Decoder:
    """The per-token decode of a MambaLMHeadModel over caches filled by a prefill."""

    def __init__(self, model, caches):
        from .decode_plan import gemv_weight
        from .mamba_lm import add_norm
        self.add_norm = add_norm
        bb = model.backbone
        self.model = model
        self.emb = bb.embedding.weight
        self.norm_f = bb.norm_f
        self.fused = bb.fused_add_norm
        self.r32 = bb.residual_in_fp32
        self.lm_w = model.lm_head.weight
        self.lm_gemv = None   # the lm_head's C GEMV weight (decode plan only; False: none)
        f32 = torch.float32
        self.layers = []
        self.plan = None      # decode_plan.DecodePlan, built at the first step (False: none)
        for i, blk in enumerate(bb.layers):
            m = blk.mixer
            p = _Layer()
            p.blk, p.mixer = blk, m
            p.in_w, p.in_b = m.in_proj.weight, m.in_proj.bias
            p.split = [m.d_mlp, m.d_mlp, m.d_ssm, m.conv_dim, m.nheads]
            p.xbc_split = [m.d_ssm, m.ngroups * m.d_state, m.ngroups * m.d_state]
            p.conv_w = m.conv1d.weight.detach().reshape(m.conv_dim, m.d_conv).to(f32).contiguous()
            p.conv_b = None if m.conv1d.bias is None else m.conv1d.bias.detach().to(f32)
            p.A = (-torch.exp(m.A_log.detach().float())).contiguous()
            p.D = m._D().detach().to(f32).contiguous()
            p.dt_bias = m.dt_bias.detach().to(f32).contiguous()
            p.dt_lo, p.dt_hi = float(m.dt_limit[0]), float(m.dt_limit[1])
            p.conv_state, p.ssm_state = caches[i]
            p.H, p.P, p.G, p.N = m.nheads, m.headdim, m.ngroups, m.d_state
            p.z_in_scan = not m.rmsnorm
            if m.rmsnorm:
                p.gnorm_w = m.norm.weight.detach().to(f32)
                p.gnorm_eps, p.gsize, p.nbg = m.norm.eps, m.d_ssm // m.ngroups, m.norm.norm_before_gate
            p.out_w, p.out_b = m.out_proj.weight, m.out_proj.bias
            p.d_mlp = m.d_mlp
            p.dtype = m.in_proj.weight.dtype
            p.in_g = gemv_weight(p.in_w, m.in_proj)     # the C GEMV's weights (CPU; None:
            p.out_g = gemv_weight(p.out_w, m.out_proj)  # F.linear), as the decode plan's
            self.layers.append(p)

    def _mixer(self, p: _Layer, h: Tensor) -> Tensor:
        Bsz = h.shape[0]
        zx = _proj(h, p.in_w, p.in_b, p.in_g)                       # [B, d_in_proj]
        z0, x0, z, xBC, dt = torch.split(zx, p.split, dim=-1)
        if p.conv_state.dtype == torch.float32 and p.conv_state.stride(-1) == 1:
            xBC = _native.conv1d_step(xBC, p.conv_state, p.conv_w, p.conv_b, True)
        else:
            xBC = ops.conv1d_step(xBC, p.conv_state, p.conv_w, p.conv_b, True)
        if xBC.dtype != p.dtype:
            xBC = xBC.to(p.dtype)                                   # as Mamba2.step rounds it
        x, Bm, Cm = torch.split(xBC, p.xbc_split, dim=-1)
        x = x.view(Bsz, p.H, p.P)
        Bm = Bm.view(Bsz, p.G, p.N)
        Cm = Cm.view(Bsz, p.G, p.N)
        zz = z.view(Bsz, p.H, p.P) if p.z_in_scan else None
        y = _native.ssd_step(p.ssm_state, x, dt, p.A, Bm, Cm, p.D, zz, p.dt_bias, True,
                             p.dt_lo, p.dt_hi)
        if y is NotImplemented:
            y = ops.ssd_step(p.ssm_state, x, dt, p.A, Bm, Cm, p.D, zz, p.dt_bias, True,
                             (p.dt_lo, p.dt_hi))
        y = y.view(Bsz, p.H * p.P)
        if not p.z_in_scan:
            y = _native.rmsnorm_gated_forward(y, z, p.gnorm_w, None, p.gnorm_eps, p.gsize,
                                              p.nbg)[0]
        if p.d_mlp:
            y = torch.cat([F.silu(z0) * x0, y], dim=-1)
        if y.dtype != p.dtype:
            y = y.to(p.dtype)
        return _proj(y, p.out_w, p.out_b, p.out_g)

    def step(self, tokens: Tensor) -> Tensor:
        """tokens [B] -> logits [B, vocab] for the next position; caches advance by one."""
        h = F.embedding(tokens, self.emb)
        if self.plan is None:
            from .decode_plan import plan_for
            self.plan = plan_for(self, tokens.shape[0]) or False
        fused, r32 = self.fused, self.r32
        if self.plan:
            h, residual = self.plan.step(h, fused)
            return self._final(h, residual)
        residual = None
        add_norm = self.add_norm
        for p in self.layers:
            blk = p.blk
            h, residual = add_norm(blk.norm, h, residual, fused, r32)
            h = self._mixer(p, h)
            if blk.mlp is not None:
                h, residual = add_norm(blk.norm2, h, residual, fused, r32)
                h = blk.mlp(h)
        return self._final(h, residual)

    def _final(self, h: Tensor, residual: Optional[Tensor]) -> Tensor:
        fused, r32 = self.fused, self.r32
        nf = self.norm_f
        if fused:
            from ..layer_norm import RMSNorm, layer_norm_fn
            h = layer_norm_fn(h, nf.weight, nf.bias, eps=nf.eps, residual=residual,
                              residual_in_fp32=r32, is_rms_norm=isinstance(nf, RMSNorm))
        else:
            residual = (h + residual) if residual is not None else h
            h = nf(residual.to(dtype=nf.weight.dtype))
        if self.lm_gemv is None:
            from .decode_plan import gemv_weight
            self.lm_gemv = gemv_weight(self.lm_w, self.model.lm_head)
        return _proj(h, self.lm_w, None, self.lm_gemv)


class GenerationMixin:
    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        raise NotImplementedError

    @torch.inference_mode()
    def generate(self, input_ids: Tensor, max_length: int, top_k: int = 1, top_p: float = 0.0,
                 min_p: float = 0.0, temperature: float = 1.0,
                 return_dict_in_generate: bool = False, output_scores: bool = False,
                 eos_token_id: Optional[int] = None, vocab_size: Optional[int] = None,
                 repetition_penalty: float = 1.0, generator: Optional[torch.Generator] = None,
                 cg: bool = False, streamer=None, **kwargs):
        """mamba_ssm's generate: input_ids [B,L] -> sequences [B, L + n] with
        n = max(1, max_length - L) new tokens (fewer when every row samples eos_token_id at
        the same step). top_k=1 is greedy; see `sample` for top_k / top_p / min_p /
        temperature. vocab_size trims the logits (padded vocabularies); repetition_penalty
        > 1 divides the positive and multiplies the negative logits of tokens already in
        the row. cg (CUDA graphs) is accepted and ignored. return_dict_in_generate gives a
        GenerateOutput(sequences, scores) (scores: one [B,V] tensor per new token, with
        output_scores). streamer (mamba_ssm's / transformers' TextStreamer interface): put(
        input_ids) first, put(tokens [B]) after each new token, end() at the finish."""
        from ..nn.mamba2 import InferenceParams
        Bsz, L = input_ids.shape
        if streamer is not None:
            streamer.put(input_ids)
        caches = self.allocate_inference_cache(Bsz, max_length, dtype=torch.float32)
        ip = InferenceParams(max_seqlen=max_length, max_batch_size=Bsz,
                             key_value_memory_dict=caches)
        logits = self(input_ids, inference_params=ip, num_last_tokens=1).logits[:, -1]
        ip.seqlen_offset = L
        dec = _Decoder(self, caches)
        seqs = [input_ids]
        scores = []
        while True:
            if vocab_size is not None:
                logits = logits[:, :vocab_size]
            if repetition_penalty != 1.0:
                prev = torch.cat(seqs, 1)
                g = logits.gather(1, prev)
                g = torch.where(g > 0, g / repetition_penalty, g * repetition_penalty)
                logits = logits.scatter(1, prev, g)
            if output_scores:
                scores.append(logits)
            tok = sample(logits, top_k, top_p, min_p, temperature, generator)
            seqs.append(tok[:, None])
            if streamer is not None:
                streamer.put(tok)
            if ip.seqlen_offset >= max_length - 1:
                break
            if eos_token_id is not None and bool((tok == eos_token_id).all()):
                break
            logits = dec.step(tok)
            ip.seqlen_offset += 1
        if streamer is not None:
            streamer.end()
        sequences = torch.cat(seqs, 1)
        if return_dict_in_generate:
            return GenerateOutput(sequences, tuple(scores) if output_scores else None)
        return sequences
