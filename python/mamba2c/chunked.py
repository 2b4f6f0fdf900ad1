"""chunked.py — the staged SSD pipeline (SPEC §3) as thin wrappers of the C entry points.

mamba2c.mamba_chunk_scan_combined runs the fused mamba2_ssd_forward. These five functions
run the same computation one stage at a time — the split mamba_ssm's Triton kernels and
CANN ops-transformer use — so that an engine can keep, inspect or reuse the staged tensors
(e.g. the per-chunk states for prefix caching):

    dt_out, dA_cumsum = chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit)
    CB                = bmm_chunk(B, C, chunk_size)
    states            = chunk_state(x, B, dt_out, dA_cumsum)
    states_start, fin = state_passing(states, dA_cumsum, initial_states)
    out               = chunk_scan(CB, x, dt_out, dA_cumsum, C, states_start, D, z)

`forward(...)` composes them; it equals mamba_chunk_scan_combined (SPEC §8 tolerance).

Shapes (Q = chunk_size, K = ceil(L/Q); the last chunk may be shorter, its padding
positions hold 0, except dA_cumsum, which stays flat there so dA_cumsum[..., Q-1] is always
the chunk total):
    dt_out, dA_cumsum [B,H,K,Q]   CB [B,K,G,Q,Q]   states, states_start [B,K,H,P,N]
    final_state [B,H,P,N]          out [B,L,H,P]
mamba_ssm equivalents (ssd_chunk_state / ssd_bmm / ssd_state_passing / ssd_chunk_scan):
_chunk_cumsum_fwd returns (dA_cumsum, dt_out) — the other order; _bmm_chunk_fwd(C, B);
_state_passing_fwd takes [B,K,H,P*N] states and dA_cumsum[..., -1].

Differences from the fused op: forward only (no autograd: the outputs never require
grad), batch form only (no cu_seqlens / seq_idx: run packed sequences through
mamba_chunk_scan_combined), CPU tensors. Activations (x, dt, B, C, z) are float32 — or
float64 on the reference backend; bf16/f16 are converted to float32 — and every staged
tensor is float32 (float64 for float64 activations). The same chunk_size must be used in
every stage (chunk_state, state_passing and chunk_scan read it from dA_cumsum's last dim).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _native

__all__ = ["chunk_cumsum", "bmm_chunk", "chunk_state", "state_passing", "chunk_scan",
           "forward"]


def chunk_cumsum(dt: Tensor, A: Tensor, chunk_size: int, dt_bias: Optional[Tensor] = None,
                 dt_softplus: bool = False, dt_limit=(0.0, math.inf)) -> Tuple[Tensor, Tensor]:
    """Stage 1. dt [B,L,H], A [H], dt_bias [H] -> (dt_out, dA_cumsum) [B,H,K,Q]:
    dt_out = clamp(softplus(dt + dt_bias)) (0 in padding), dA_cumsum = inclusive cumsum of
    dt_out * A within each chunk."""
    with torch.no_grad():
        return _native.chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus,
                                    float(dt_limit[0]), float(dt_limit[1]))


def bmm_chunk(B: Tensor, C: Tensor, chunk_size: int) -> Tensor:
    """Stage 2. B, C [B,L,G,N] -> CB [B,K,G,Q,Q], CB[b,k,g,i,j] = C_{kQ+i} . B_{kQ+j}."""
    with torch.no_grad():
        return _native.bmm_chunk(B, C, chunk_size)


def chunk_state(x: Tensor, B: Tensor, dt_out: Tensor, dA_cumsum: Tensor) -> Tensor:
    """Stage 3. -> states [B,K,H,P,N]: each chunk's final state from a zero initial state,
    sum_j exp(cs_last - cs_j) dt_j x_j (x) B_j."""
    with torch.no_grad():
        return _native.chunk_state(x, B, dt_out, dA_cumsum)


def state_passing(states: Tensor, dA_cumsum: Tensor,
                  initial_states: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Stage 4. -> (states_start [B,K,H,P,N], final_state [B,H,P,N]): states_start[:,0] =
    initial_states (or 0), states_start[:,k+1] = exp(cs_last[k]) states_start[:,k] +
    states[:,k]; final_state = the state after the last chunk."""
    with torch.no_grad():
        return _native.state_passing(states, dA_cumsum, initial_states)


def chunk_scan(CB: Tensor, x: Tensor, dt_out: Tensor, dA_cumsum: Tensor, C: Tensor,
               states_start: Tensor, D: Optional[Tensor] = None,
               z: Optional[Tensor] = None) -> Tensor:
    """Stage 5. -> out [B,L,H,P] (x's dtype): the intra-chunk part through CB, plus
    exp(cs_i) C_i . states_start[k], plus D x; times silu(z) when z is given."""
    with torch.no_grad():
        return _native.chunk_scan(CB, x, dt_out, dA_cumsum, C, states_start, D, z)


def forward(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
            D: Optional[Tensor] = None, z: Optional[Tensor] = None,
            dt_bias: Optional[Tensor] = None, initial_states: Optional[Tensor] = None,
            dt_softplus: bool = False, dt_limit=(0.0, math.inf), return_staged: bool = False):
    """The five stages composed: (out, final_state), the fused op's result; with
    return_staged also a dict of every staged tensor (dt_out, dA_cumsum, CB, states,
    states_start)."""
    dt_out, dA_cs = chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit)
    CB = bmm_chunk(B, C, chunk_size)
    states = chunk_state(x, B, dt_out, dA_cs)
    start, final = state_passing(states, dA_cs, initial_states)
    out = chunk_scan(CB, x, dt_out, dA_cs, C, start, D, z)
    if return_staged:
        return out, final, dict(dt_out=dt_out, dA_cumsum=dA_cs, CB=CB, states=states,
                                states_start=start)
    return out, final
