"""hf_decode.py — the single-token decode path of transformers' Mamba-2 mixers on mamba2c,
used by mamba2c.hf.use_mamba2c_in_transformers().

A transformers mixer decodes one token (cache present, seq_len 1) through a dozen torch
operations around two kernel calls, and transformers 5.25 also clones the layer's whole
recurrent state every step (and copies it back into the cache). Inside the hook the mixer's
forward takes that case here instead, one C call sequence per layer on the cache's own
tensors:

    in_proj                                       (nn.Linear, which the hook routes to the
                                                   C GEMV, hf_linear.py; Falcon-H1: its input
                                                   multiplier and mup vector, as the family does)
    mamba2_conv1d_step  on cache.get_conv_state   (B, conv_dim, K) time-last, newest last:
                                                   the C step's shift layout with Lc = K,
                                                   updated in place (f32 / bf16 / f16)
    mamba2_ssd_step     on cache.get_recurrent_state (B, H, P, N), updated in place: no
                                                   clone, no copy back
    the family's gated norm (itself swapped for mamba2c's by the hook), out_proj (nn.Linear)

Everything else goes to the family's own forward: prefill, training, a cache recording its
past (assisted decoding keeps the states it may roll back to, so the state must not change
in place), gradients, tensors off the CPU, cache dtypes the C steps do not take. The
roundings follow the torch path's (a half model: conv and SSD outputs in the model dtype),
and the bookkeeping that release's decode does (5.25: the cache's token count).
"""
from __future__ import annotations

import inspect

import torch

from ._native import steps as _steps

__all__ = ["mixer_classes", "decode_forward"]

_CONV_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_STATE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# the attributes the decode reads from a mixer (every family's Mamba-2 mixer has them)
_ATTRS = ("in_proj", "out_proj", "conv1d", "norm", "A_log", "D", "dt_bias", "intermediate_size",
          "conv_dim", "num_heads", "head_dim", "n_groups", "ssm_state_size", "layer_idx",
          "activation")


def _code_names(cls):
    """The global and attribute names cls.forward's own body uses (under its decorators)."""
    code = getattr(inspect.unwrap(getattr(cls, "forward", None)), "__code__", None)
    return set(code.co_names) if code is not None else set()


def mixer_classes(mod):
    """The Mamba-2 mixer classes a transformers modeling module defines: nn.Modules whose
    forward projects with in_proj and scans with the module's functions."""
    out = []
    for v in vars(mod).values():
        if not (isinstance(v, type) and issubclass(v, torch.nn.Module)
                and v.__module__ == mod.__name__):
            continue
        names = _code_names(v)
        if "in_proj" in names and ({"mamba2_scan_forward", "mamba2_selective_state_update"}
                                   & names):
            out.append(v)
    return out


def _decode(self, fam, hidden_states, cache, attention_mask):
    """One token through the mixer `self` on the C steps; None when this call is not the
    decode case the fast path serves (the caller then runs the family's forward)."""
    if (cache is None or hidden_states.dim() != 3 or hidden_states.shape[1] != 1
            or not hidden_states.is_cpu or self.activation not in ("silu", "swish")
            or (attention_mask is not None and attention_mask.shape[-1] != 1)):
        return None
    idx = self.layer_idx
    conv_state = cache.get_conv_state(idx, state_idx=0)
    state = cache.get_recurrent_state(idx, state_idx=0)
    if conv_state is None or state is None or cache.is_recording_past(idx):
        return None
    dtype = hidden_states.dtype
    w = self.conv1d.weight
    if (conv_state.dtype not in _CONV_DTYPES or state.dtype not in _STATE_DTYPES
            or conv_state.dtype is not dtype or not conv_state.is_cpu or not state.is_cpu
            or not w.is_cpu
            or state.dim() != 4 or state.stride(3) != 1 or w.shape[-1] > 8
            or conv_state.shape[-1] < w.shape[-1] - 1
            or (torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()))):
        return None
    Bsz = hidden_states.shape[0]
    inter, cdim, H, P = self.intermediate_size, self.conv_dim, self.num_heads, self.head_dim
    G, N = self.n_groups, self.ssm_state_size
    h = fam.mask(hidden_states, attention_mask)
    if fam.falcon:
        h = h * self.ssm_in_multiplier
    zxbcdt = self.in_proj(h)
    if fam.falcon:
        zxbcdt = zxbcdt * self.mup_vector
    flat = zxbcdt.view(Bsz, -1)
    gate = zxbcdt[:, :, :inter]
    xbc = flat[:, inter:inter + cdim]
    dt = flat[:, inter + cdim:inter + cdim + H]
    if fam.counts:  # 5.25's causal_conv1d_forward counts the token before its update
        cache.increase_count(idx, 0)
    # the conv step on the cache's [B, conv_dim, K] tensor in place (shift mode, Lc = K)
    xbc = _steps.conv1d_step(xbc, conv_state, w.view(w.shape[0], w.shape[-1]), self.conv1d.bias,
                             True)
    xbc = fam.mask(xbc.view(Bsz, 1, cdim), attention_mask).view(Bsz, cdim)
    x = xbc[:, :inter].view(Bsz, H, P)
    Bm = xbc[:, inter:inter + G * N].view(Bsz, G, N)
    Cm = xbc[:, inter + G * N:].view(Bsz, G, N)
    A = -torch.exp(self.A_log.float())
    # transformers' decode calls the state update without dt_limit: (0, inf) here too
    z_in = fam.falcon and not self.mamba_rms_norm and not fam.counts
    y = _steps.ssd_step(state, x, dt, A, Bm, Cm, self.D.float(),
                        gate.view(Bsz, H, P) if z_in else None, self.dt_bias.float(), True)
    if y is NotImplemented:  # not reached: every case the binding declines is excluded above
        raise RuntimeError(f"mamba2c.hf: layer {idx}: the C SSD step declined a decode step "
                           f"after the conv state had advanced (state {tuple(state.shape)} "
                           f"{state.dtype}, x {x.dtype})")
    y = y.view(Bsz, 1, H * P)
    if not fam.falcon or self.mamba_rms_norm:
        y = self.norm(y, gate)
    elif not z_in:  # Falcon-H1 without its norm, 5.25: the gate after the scan, in torch
        y = y * torch.nn.functional.silu(gate)
    return self.out_proj(y.to(dtype))


class _Family:
    """What a family's decode does beyond the common steps."""
    __slots__ = ("mask", "falcon", "counts")

    def __init__(self, mod, cls):
        self.mask = mod.apply_mask_to_padding_states
        self.falcon = "ssm_in_multiplier" in _code_names(cls)
        self.counts = callable(getattr(mod, "causal_conv1d_forward", None))


def decode_forward(mod, cls, theirs):
    """The forward to install on mixer class `cls` of module `mod` (theirs: its own): the
    C decode for the single-token cached case, theirs otherwise. None when `mod` lacks
    something the decode needs (then the class keeps its forward)."""
    if not callable(getattr(mod, "apply_mask_to_padding_states", None)):
        return None
    fam = _Family(mod, cls)

    def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
        if all(hasattr(self, a) for a in _ATTRS):
            out = _decode(self, fam, hidden_states, cache, attention_mask)
            if out is not None:
                return out
        return theirs(self, hidden_states, cache=cache, attention_mask=attention_mask, **kwargs)

    forward.__wrapped_by_mamba2c__ = _decode
    forward.__doc__ = theirs.__doc__
    return forward
