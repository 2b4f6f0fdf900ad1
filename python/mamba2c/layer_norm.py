"""layer_norm.py — mamba_ssm.ops.triton.layer_norm's names: layer_norm_fn, rms_norm_fn,
RMSNorm (and LayerNorm), the fused residual-add + norm of mamba_ssm's Block.

    y = norm(s) * weight + bias,  s = dropout(x * rowscale) + residual

computed in float32 (float64 for float64 input) on the unrounded sum s; norm is
(s - mean(s)) / sqrt(var(s) + eps) (LayerNorm, biased variance) or s / sqrt(mean(s^2) + eps)
(RMSNorm), over the last dimension. y has x's dtype (out_dtype when given). With
prenorm=True the result is (y, residual_out): s rounded to the residual dtype —
residual.dtype when a residual is given, else float32 with residual_in_fp32, else x.dtype
(and then, with nothing to add, x itself, as mamba_ssm returns it). The RMSNorm of a CPU
tensor runs in the C library (mamba2_rmsnorm_gated_forward without a gate); the rest is
torch. Differentiable. Not implemented: mamba_ssm's second input (x1, weight1, bias1) and
return_dropout_mask (NotImplementedError).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _dispatch, ops

__all__ = ["layer_norm_fn", "layernorm_fn", "rms_norm_fn", "RMSNorm", "LayerNorm"]


def _compute_dtype(x: Tensor):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def layer_norm_fn(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor] = None,
                  x1=None, weight1=None, bias1=None, eps: float = 1e-6, dropout_p: float = 0.0,
                  rowscale: Optional[Tensor] = None, prenorm: bool = False,
                  residual_in_fp32: bool = False, is_rms_norm: bool = False,
                  return_dropout_mask: bool = False, out_dtype=None):
    """mamba_ssm's layer_norm_fn (see the module docstring for the math)."""
    if x1 is not None or weight1 is not None or bias1 is not None or return_dropout_mask:
        raise NotImplementedError("mamba2c.layer_norm_fn: x1/weight1/bias1 and "
                                  "return_dropout_mask are not implemented")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual has shape {tuple(residual.shape)}; expected {tuple(x.shape)}")
    residual_dtype = (residual.dtype if residual is not None
                      else (torch.float32 if residual_in_fp32 else None))
    cd = _compute_dtype(x)
    s = x.to(cd)
    if rowscale is not None:
        s = s * rowscale.reshape(x.shape[:-1] + (1,)).to(cd)
    if dropout_p > 0.0:
        s = F.dropout(s, p=dropout_p, training=True)
    if residual is not None:
        s = s + residual.to(cd)
    stored = (residual is not None or (residual_dtype is not None and residual_dtype != x.dtype)
              or dropout_p > 0.0 or rowscale is not None)
    if is_rms_norm and _dispatch.rmsnorm_gated(s) and s.dtype == torch.float32:
        y = ops.rmsnorm_gated(s, weight, bias, None, eps)
    elif is_rms_norm:
        y = s * torch.rsqrt(s.square().mean(-1, keepdim=True) + eps) * weight.to(cd)
        if bias is not None:
            y = y + bias.to(cd)
    else:
        y = F.layer_norm(s, s.shape[-1:], weight.to(cd), None if bias is None else bias.to(cd), eps)
    y = y.to(x.dtype if out_dtype is None else out_dtype)
    if not prenorm:
        return y
    res_out = s.to(residual_dtype if residual_dtype is not None else x.dtype) if stored else x
    return y, res_out


layernorm_fn = layer_norm_fn  # the spelling of the issue / older code


def rms_norm_fn(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor] = None,
                x1=None, weight1=None, bias1=None, eps: float = 1e-6, dropout_p: float = 0.0,
                rowscale: Optional[Tensor] = None, prenorm: bool = False,
                residual_in_fp32: bool = False, return_dropout_mask: bool = False, out_dtype=None):
    """mamba_ssm's rms_norm_fn: layer_norm_fn(..., is_rms_norm=True)."""
    return layer_norm_fn(x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale,
                         prenorm, residual_in_fp32, True, return_dropout_mask, out_dtype)


class RMSNorm(torch.nn.Module):
    """mamba_ssm.ops.triton.layer_norm.RMSNorm: weight (ones), no bias, eps=1e-5;
    forward(x, residual=None, prenorm=False, residual_in_fp32=False)."""

    def __init__(self, hidden_size: int, eps: float = 1e-5, dropout_p: float = 0.0,
                 device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.drop = torch.nn.Dropout(dropout_p) if dropout_p > 0.0 else None
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.ones_(self.weight)

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        p = self.drop.p if (self.drop is not None and self.training) else 0.0
        return rms_norm_fn(x, self.weight, self.bias, residual=residual, eps=self.eps,
                           dropout_p=p, prenorm=prenorm, residual_in_fp32=residual_in_fp32)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm (same parameters and state-dict keys: weight, bias) whose forward
    also takes mamba_ssm's residual / prenorm / residual_in_fp32 (layer_norm_fn)."""

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        if self.weight is None or len(self.normalized_shape) != 1:
            if residual is not None or prenorm:
                raise NotImplementedError("mamba2c.LayerNorm: residual/prenorm need an affine "
                                          "norm over the last dimension")
            return super().forward(x)
        return layer_norm_fn(x, self.weight, self.bias, residual=residual, eps=self.eps,
                             prenorm=prenorm, residual_in_fp32=residual_in_fp32)
