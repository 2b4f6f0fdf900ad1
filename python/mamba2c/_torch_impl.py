"""_torch_impl.py — torch implementations of SPEC §4 (conv1d), §5 (rmsnorm_gated) and §6
(ssd_step, conv1d_step): the fallbacks ops.py uses where the C op does not serve a call
(no library loaded, non-CPU tensors, inputs that need gradients
for the decode steps, forms the C op does not take — per-(p,n) A, a circular conv
buffer, ...; each ops.py function lists its cases). Ordinary torch ops, differentiable with
torch autograd, exactly the C contract's semantics. Arithmetic is float32 (float64 for
float64 input), results are cast back to the input dtype, as the C ops do.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["conv1d", "rmsnorm_gated", "ssd_step", "conv1d_step"]


def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _seq_bounds(cu_seqlens: torch.Tensor):
    cu = [int(v) for v in cu_seqlens.tolist()]
    return list(zip(cu[:-1], cu[1:]))


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           activation: bool = False, initial_states: Optional[torch.Tensor] = None,
           cu_seqlens: Optional[torch.Tensor] = None, return_final_states: bool = False
           ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Causal depthwise conv1d, SPEC §4. x [B,L,D] (channel-last; any strides), weight
    [D,W], bias [D], initial_states [S,D,W-1] (S = B, or nseq with cu_seqlens and B == 1).
    Returns (out [B,L,D] in x.dtype, final_states [S,D,W-1] or None)."""
    Bsz, L, Dc = x.shape
    W = weight.shape[-1]
    acc = _acc_dtype(x)
    w = weight.reshape(Dc, W).to(acc)
    b = bias.to(acc) if bias is not None else None
    if cu_seqlens is not None:
        if Bsz != 1:
            raise ValueError(f"cu_seqlens is given but x has batch {Bsz}; packed sequences need batch 1")
        outs, finals = [], []
        for s, (t0, t1) in enumerate(_seq_bounds(cu_seqlens)):
            init = None if initial_states is None else initial_states[s:s + 1]
            o, f = conv1d(x[:, t0:t1], weight, bias, activation, init, None, return_final_states)
            outs.append(o)
            finals.append(f)
        out = torch.cat(outs, dim=1)
        return out, (torch.cat(finals, dim=0) if return_final_states else None)
    xc = x.to(acc).transpose(1, 2)                                   # [B,D,L] view
    if initial_states is None:
        xp = F.pad(xc, (W - 1, 0))
    else:
        xp = torch.cat([initial_states.to(acc), xc], dim=-1)         # [B,D,W-1+L]
    out = F.conv1d(xp, w.unsqueeze(1), b, groups=Dc)                 # [B,D,L]
    if activation:
        out = F.silu(out)
    out = out.transpose(1, 2).to(x.dtype)
    final = None
    if return_final_states:
        final = xp[:, :, xp.shape[-1] - (W - 1):].to(x.dtype)        # last W-1 inputs
    return out, final


def rmsnorm_gated(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                  z: Optional[torch.Tensor] = None, eps: float = 1e-6,
                  group_size: Optional[int] = None, norm_before_gate: bool = False) -> torch.Tensor:
    """Gated RMSNorm, SPEC §5 (and mamba_ssm's optional bias): statistics per group of
    group_size channels of the last dim; norm_before_gate=False normalises x * silu(z)."""
    Dc = x.shape[-1]
    gs = Dc if group_size is None else int(group_size)
    if Dc % gs:
        raise ValueError(f"group_size {gs} does not divide the last dimension {Dc}")
    acc = _acc_dtype(x)
    v = x.to(acc)
    zz = z.to(acc) if z is not None else None
    if zz is not None and not norm_before_gate:
        v = v * F.silu(zz)
    vg = v.unflatten(-1, (Dc // gs, gs))
    vg = vg * torch.rsqrt(vg.square().mean(-1, keepdim=True) + eps)
    out = vg.flatten(-2) * weight.to(acc)
    if bias is not None:
        out = out + bias.to(acc)
    if zz is not None and norm_before_gate:
        out = out * F.silu(zz)
    return out.to(x.dtype)


def _rows(n_batch: int, state_indices: Optional[torch.Tensor], device):
    if state_indices is None:
        return None, None
    idx = state_indices.to(device=device, dtype=torch.long)
    valid = idx >= 0
    return idx, valid


def ssd_step(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
             B: torch.Tensor, C: torch.Tensor, D: Optional[torch.Tensor] = None,
             z: Optional[torch.Tensor] = None, dt_bias: Optional[torch.Tensor] = None,
             dt_softplus: bool = False, dt_limit=(0.0, math.inf),
             state_indices: Optional[torch.Tensor] = None, return_all_states: bool = False):
    """Decode step, SPEC §6, updating `state` [S,H,P,N] in place.
    Generalised shapes (mamba_ssm's selective_state_update): x, z [B,H,P] or [B,T,H,P];
    dt [B,(T,)H] or [B,(T,)H,P]; A [H] or [H,P,N]; D [H] or [H,P]; dt_bias [H] or [H,P];
    B, C [B,(T,)G,N]. A negative state index marks a padding row: its state is untouched,
    its output 0. Returns out (or (out, all_states [B,(T,)H,P,N]))."""
    if x.dim() == 3:
        r = _ssd_step1(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit,
                       state_indices, return_all_states)
        return r
    T = x.shape[1]
    outs, alls = [], []
    for t in range(T):
        r = _ssd_step1(state, x[:, t], dt[:, t], A, B[:, t], C[:, t], D,
                       None if z is None else z[:, t], dt_bias, dt_softplus, dt_limit,
                       state_indices, return_all_states)
        if return_all_states:
            outs.append(r[0])
            alls.append(r[1])
        else:
            outs.append(r)
    Bsz, _, H, P = x.shape
    out = torch.stack(outs, 1) if T else x.new_zeros(x.shape)
    if not return_all_states:
        return out
    N = state.shape[-1]
    al = torch.stack(alls, 1) if T else state.new_zeros(Bsz, 0, H, P, N)
    return out, al


def _ssd_step1(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit, state_indices,
               return_all_states):
    Bsz, H, P = x.shape
    G = B.shape[1]
    acc = torch.float64 if torch.float64 in (x.dtype, state.dtype) else torch.float32
    idx, valid = _rows(Bsz, state_indices, x.device)
    if idx is None:
        S = state[:Bsz].to(acc, copy=True)  # a copy: state is overwritten below
    else:
        S = state[idx.clamp(min=0)].to(acc)                           # [B,H,P,N] gathered
    d = dt.to(acc)
    if dt_bias is not None:
        d = d + dt_bias.to(acc)
    if dt_softplus:
        d = F.softplus(d)
    d = d.clamp(min=dt_limit[0], max=dt_limit[1])
    if d.dim() == 2:
        d = d[..., None]                                              # [B,H,1] -> broadcast over P
    Af = A.to(acc)
    if Af.dim() == 1:
        dA = torch.exp(d[..., None] * Af[:, None, None])              # [B,H,P|1,1]
    else:
        dA = torch.exp(d[..., None] * Af)                             # [B,H,P,N]
    Bh = B.to(acc).repeat_interleave(H // G, dim=1)                   # [B,H,N]
    Ch = C.to(acc).repeat_interleave(H // G, dim=1)
    xf = x.to(acc)
    S = S * dA + (d * xf)[..., None] * Bh[:, :, None, :]
    out = torch.einsum("bhpn,bhn->bhp", S, Ch)
    if D is not None:
        Df = D.to(acc)
        out = out + (Df[:, None] if Df.dim() == 1 else Df) * xf
    if z is not None:
        out = out * F.silu(z.to(acc))
    if idx is None:
        state[:Bsz] = S.to(state.dtype)
    else:
        out = out * valid[:, None, None]
        if bool(valid.any()):
            state[idx[valid]] = S[valid].to(state.dtype)
        if return_all_states:
            S = S * valid[:, None, None, None]
    out = out.to(x.dtype)
    return (out, S.to(state.dtype)) if return_all_states else out


def conv1d_step(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor,
                bias: Optional[torch.Tensor] = None, activation: bool = False,
                state_indices: Optional[torch.Tensor] = None,
                cache_seqlens: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Causal conv decode, SPEC §6, causal_conv1d_update semantics: x [B,D] or [B,D,T]
    new inputs, conv_state [S,D,K] (K >= W-1 previous inputs, newest last; a circular
    buffer written at cache_seqlens % K when cache_seqlens is given), updated in place.
    Returns out with the shape of x. A negative state index is a padding row (output 0)."""
    squeeze = x.dim() == 2
    xs = x[..., None] if squeeze else x                               # [B,D,T]
    Bsz, Dc, T = xs.shape
    W = weight.shape[-1]
    K = conv_state.shape[-1]
    if K < W - 1:
        raise ValueError(f"conv_state keeps {K} inputs; the kernel width {W} needs at least {W - 1}")
    acc = _acc_dtype(x)
    idx, valid = _rows(Bsz, state_indices, x.device)
    rows = torch.arange(Bsz, device=x.device) if idx is None else idx.clamp(min=0)
    st = conv_state[rows]                                              # [B,D,K] copy
    if cache_seqlens is None:
        window = torch.cat([st.to(acc), xs.to(acc)], dim=-1)         # [B,D,K+T]
        new_state = window[..., -K:]
        hist = window[..., K - (W - 1):]                              # [B,D,W-1+T]
    else:
        pos = cache_seqlens.to(device=x.device, dtype=torch.long)[:, None]
        prev_idx = torch.remainder(pos + torch.arange(-(W - 1), 0, device=x.device), K)
        prev = st.gather(2, prev_idx[:, None, :].expand(Bsz, Dc, W - 1))
        hist = torch.cat([prev.to(acc), xs.to(acc)], dim=-1)
        new_state = st.clone()
        put = torch.remainder(pos + torch.arange(T, device=x.device), K)
        new_state.scatter_(2, put[:, None, :].expand(Bsz, Dc, T), xs.to(st.dtype))
    out = F.conv1d(hist, weight.reshape(Dc, 1, W).to(acc),
                   bias.to(acc) if bias is not None else None, groups=Dc)  # [B,D,T]
    if activation:
        out = F.silu(out)
    if idx is None:
        conv_state[:Bsz] = new_state.to(conv_state.dtype)
    else:
        out = out * valid[:, None, None]
        if bool(valid.any()):
            conv_state[idx[valid]] = new_state[valid].to(conv_state.dtype)
    out = out.to(x.dtype)
    return out[..., 0] if squeeze else out
