"""ops.py — one function per mamba2c operator, in the C contract's form (SPEC.md).

Who computes each op — the C library (through _custom_ops / _native) or the torch
implementation in _torch_impl.py (same semantics) — is decided in _dispatch.py, the one
place that knows what the C ops serve; each function below lists its torch cases.
The SSD scan has no torch fallback: a non-CPU tensor raises _native.DeviceError.
ssd_states (the scan plus the states after chosen tokens) is C only too; the staged
pipeline is in mamba2c.chunked.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _checks, _custom_ops, _dispatch, _torch_impl
from ._checks import expect_min_rank, expect_rank
from ._custom_ops import ssd as _ssd_c
from ._dispatch import NATIVE_OPS, FallbackError, FallbackWarning, backend_of, set_strict

__all__ = ["ssd", "ssd_states", "conv1d", "rmsnorm_gated", "ssd_step", "conv1d_step",
           "backend_of", "NATIVE_OPS", "set_strict", "FallbackWarning", "FallbackError"]


def ssd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
        D: Optional[Tensor] = None, z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None,
        initial_states: Optional[Tensor] = None, cu_seqlens: Optional[Tensor] = None,
        dt_softplus: bool = False, dt_limit=(0.0, math.inf)) -> Tuple[Tensor, Tensor]:
    """SSD chunked scan, SPEC §1-2 (C library; differentiable; torch.compile-able).
    x [B,L,H,P], dt [B,L,H], A [H], B/C [B,L,G,N], D [H] or [H,P], z [B,L,H,P],
    dt_bias [H], initial_states [S,H,P,N], cu_seqlens [nseq+1] (B == 1, S = nseq).
    Returns (out [B,L,H,P] in x.dtype, final_state [S,H,P,N] float32 — float64 for
    float64 input)."""
    return _ssd_c(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                  dt_softplus, dt_limit)


def ssd_states(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
               positions, D: Optional[Tensor] = None, z: Optional[Tensor] = None,
               dt_bias: Optional[Tensor] = None, initial_states: Optional[Tensor] = None,
               cu_seqlens: Optional[Tensor] = None, dt_softplus: bool = False,
               dt_limit=(0.0, math.inf)) -> Tuple[Tensor, Tensor, Tensor]:
    """ssd() plus the states after chosen tokens, in one prefill call
    (mamba2_ssd_forward_states; for prefix caching at arbitrary boundaries).
    positions: strictly increasing flat token indices (int tensor or sequence of ints) into
    the B x L token grid, b*L + t (with cu_seqlens, B == 1: the packed index t).
    Returns (out, final_state, position_states [npos,H,P,N]) where position_states[i] is
    the state of that token's sequence after token positions[i] (token included), float32
    (float64 for float64 input). out and final_state are differentiable as in ssd();
    position_states is not."""
    if not isinstance(positions, Tensor):
        positions = torch.tensor(list(positions), dtype=torch.int64)
    return _custom_ops.ssd_states(x, dt, A, B, C, chunk_size, positions, D, z, dt_bias,
                                  initial_states, cu_seqlens, dt_softplus, dt_limit)


def conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, activation: bool = False,
           initial_states: Optional[Tensor] = None, cu_seqlens: Optional[Tensor] = None,
           return_final_states: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """Causal depthwise conv1d, SPEC §4. x [B,L,D] channel-last (row stride free),
    weight [D,W], bias [D], initial_states [S,D,W-1]. Returns (out [B,L,D],
    final_states [S,D,W-1] or None). C op for CPU tensors and 1 <= W <= 8; torch otherwise."""
    expect_rank("x", x, "[B,L,D]")
    if _dispatch.conv1d(x, weight):
        return _custom_ops.conv1d(x, weight.reshape(weight.shape[0], -1), bias, initial_states,
                                  cu_seqlens, activation, return_final_states)
    return _torch_impl.conv1d(x, weight, bias, activation, initial_states, cu_seqlens,
                              return_final_states)


def rmsnorm_gated(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                  z: Optional[Tensor] = None, eps: float = 1e-6, group_size: Optional[int] = None,
                  norm_before_gate: bool = False) -> Tensor:
    """Gated RMSNorm, SPEC §5 (statistics per group of group_size channels of the last
    dim; None = the whole dim). Any leading shape; C op on CPU tensors."""
    expect_min_rank("x", x, 1, "[..., D]")
    D = x.shape[-1]
    _checks.group_size(D, group_size)
    if _dispatch.rmsnorm_gated(x):
        x2 = x.reshape(-1, D)
        z2 = z.reshape(-1, D) if z is not None else None
        out = _custom_ops.rmsnorm_gated(x2, z2, weight, bias, eps,
                                        0 if group_size is None else int(group_size),
                                        norm_before_gate)
        return out.reshape(x.shape)
    return _torch_impl.rmsnorm_gated(x, weight, bias, z, eps, group_size, norm_before_gate)


def ssd_step(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
             D: Optional[Tensor] = None, z: Optional[Tensor] = None,
             dt_bias: Optional[Tensor] = None, dt_softplus: bool = False,
             dt_limit=(0.0, math.inf), state_indices: Optional[Tensor] = None,
             return_all_states: bool = False):
    """SSD decode step, SPEC §6: T new tokens per sequence against `state` [S,H,P,N],
    updated in place (row b uses slot state_indices[b], or b; a negative index is a padding
    row: state untouched, output 0).

    x [B,H,P] (one token) or [B,T,H,P] (T tokens, e.g. speculative verification); B, C
    [B,(T,)G,N]; z like x; dt [B,(T,)H] or [B,(T,)H,P]; A [H] or [H,P,N]; D [H] or [H,P];
    dt_bias [H] or [H,P]. Returns out (x's shape and dtype), or (out, all_states
    [B,(T,)H,P,N]: the state after every token) with return_all_states.

    C op (mamba2_ssd_step) for CPU tensors, a float32, bf16 or f16 state (float64 state: the
    reference backend; a bf16/f16 state is computed in float32 and stored rounded once per
    token, as mamba_ssm's selective_state_update does; activations are converted to float32),
    no gradient needed, and A / dt / dt_bias constant along P (and N) — as mamba_ssm's
    broadcast views (stride 0) are, which are read zero-copy. torch otherwise: per-(p,n) A,
    per-p dt or dt_bias (mamba-1 style), a state of another dtype or with a strided last
    dim, float64 activations with a non-float64 state, non-CPU tensors, and inputs that need
    gradients (the C step has no backward; the torch path is differentiable). A CPU call
    that goes to torch warns once per reason (FallbackWarning; FallbackError under
    mamba2c.set_strict(True)); backend_of("ssd_step", state, x, dt, A, B, C, ...) tells."""
    compiled = torch.ops.mamba2c.ssd_step if _custom_ops._is_compiling() else None
    return _dispatch.ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit[0],
                              dt_limit[1], state_indices, return_all_states, compiled)


def conv1d_step(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                activation: bool = False, state_indices: Optional[Tensor] = None,
                cache_seqlens: Optional[Tensor] = None) -> Tensor:
    """One causal-conv decode step, SPEC §6 / causal_conv1d_update: x [B,D] or [B,D,T]
    (channel-first, as causal-conv1d), conv_state [S,D,K] (K >= W-1) updated in place: K
    > W-1 shifts the whole K-long window, as causal-conv1d does; cache_seqlens [B] makes it
    a circular buffer written at (cache_seqlens + t) % K (the caller advances it).
    C op, zero-copy, for any K >= W-1 and any conv_state strides (the [S,D,W-1] cache,
    mamba_ssm's / transformers' [B,D,d_conv], causal-conv1d's channel-last views) in the
    compute dtype (float32; float64 with float64 x; on the CPU bf16/f16 with x of that dtype),
    with or without cache_seqlens (int32 /
    int64, values >= 0), W <= 8, no gradient needed. torch otherwise — for CPU tensors with
    a FallbackWarning once per reason (FallbackError under mamba2c.set_strict(True));
    backend_of("conv1d_step", x, conv_state, weight, ...) tells beforehand."""
    expect_rank("x", x, "[B,D]", "[B,D,T]")
    expect_rank("conv_state", conv_state, "[S,D,K]")
    _checks.index_dtype("cache_seqlens", cache_seqlens)
    _checks.index_dtype("state_indices", state_indices)
    if _dispatch.conv1d_step(x, conv_state, weight, bias, cache_seqlens):
        xs = x if x.dim() == 2 else x.transpose(1, 2)      # C takes [B,C] or [B,T,C]
        out = _custom_ops.conv1d_step(xs, conv_state, weight.reshape(weight.shape[0], -1), bias,
                                      activation, state_indices, cache_seqlens)
        return out if x.dim() == 2 else out.transpose(1, 2)
    return _torch_impl.conv1d_step(x, conv_state, weight, bias, activation, state_indices,
                                   cache_seqlens)
