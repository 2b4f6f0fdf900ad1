"""reference.py — pure-torch oracles for every mamba2c op (SPEC.md §1-§6).

Written for clarity, not speed: they are what the Python tests compare against, and they
are differentiable with torch autograd (float64 in, float64 out gives the "float64
evaluation of the recurrence" SPEC §8 measures against). Nothing here calls the C library
or the torch implementations in _torch_impl.py.

  ssd_sequential   the plain recurrence, one time step at a time (SPEC §1 steps 1-5)
  ssd_chunked      the chunked SSD "duality" algorithm with torch ops (SPEC §1, §3)
  conv1d           causal depthwise conv1d, one tap at a time (SPEC §4)
  rmsnorm_gated    gated RMSNorm with group statistics (SPEC §5)
  ssd_step         one decode step of the SSD recurrence (SPEC §6)
  conv1d_step      one decode step of the causal conv (SPEC §6)
All take and return PyTorch-order tensors; `cu_seqlens` (packed sequences, B == 1) resets
the state at every boundary, with initial/final states of shape [nseq, ...].
"""
from __future__ import annotations

import math
from typing import Tuple

import torch
import torch.nn.functional as F

__all__ = ["process_dt", "ssd_sequential", "ssd_chunked", "conv1d", "rmsnorm_gated",
           "ssd_step", "conv1d_step", "normalized_error"]


def normalized_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """SPEC §8's ‖out − ref‖ / ‖ref‖, computed in float64 (0 when both are zero)."""
    o = out.detach().double()
    r = ref.detach().double()
    den = r.norm().item()
    num = (o - r).norm().item()
    if den == 0.0:
        return num
    return num / den


def process_dt(dt, dt_bias=None, dt_softplus=False, dt_limit=(0.0, math.inf)):
    """SPEC §1 step 1: d = clamp(softplus(dt + dt_bias), lo, hi) (softplus only if asked;
    softplus(v) = v above 20, as torch's threshold; the clamp is always applied)."""
    d = dt if dt_bias is None else dt + dt_bias
    if dt_softplus:
        d = F.softplus(d)  # threshold=20: v for v > 20, else log1p(exp(v))
    return d.clamp(min=dt_limit[0], max=dt_limit[1])


def _sequences(L: int, cu_seqlens):
    if cu_seqlens is None:
        return None
    cu = [int(v) for v in cu_seqlens.tolist()]
    return list(zip(cu[:-1], cu[1:]))


def _expand_groups(M: torch.Tensor, H: int) -> torch.Tensor:
    """[B,L,G,N] -> [B,L,H,N]: head h reads group h // (H/G)."""
    G = M.shape[2]
    return M.repeat_interleave(H // G, dim=2)


def _D_full(D, H, P, like):
    if D is None:
        return None
    return D.reshape(H, 1).expand(H, P) if D.dim() == 1 else D


def ssd_sequential(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_states=None,
                   cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, math.inf)
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The plain recurrence (SPEC §1). Returns (out [B,L,H,P], final_state [S,H,P,N]).
    Computes in the dtype of x (use float64 for an oracle)."""
    Bsz, L, H, P = x.shape
    N = B.shape[-1]
    seqs = _sequences(L, cu_seqlens)
    if seqs is not None:
        if Bsz != 1:
            raise ValueError("cu_seqlens needs batch 1")
        outs, finals = [], []
        for s, (t0, t1) in enumerate(seqs):
            init = None if initial_states is None else initial_states[s:s + 1]
            o, f = ssd_sequential(x[:, t0:t1], dt[:, t0:t1], A, B[:, t0:t1], C[:, t0:t1], D,
                                  None if z is None else z[:, t0:t1], dt_bias, init, None,
                                  dt_softplus, dt_limit)
            outs.append(o)
            finals.append(f)
        return torch.cat(outs, dim=1), torch.cat(finals, dim=0)
    d = process_dt(dt, dt_bias, dt_softplus, dt_limit)          # [B,L,H]
    Bh = _expand_groups(B, H)                                     # [B,L,H,N]
    Ch = _expand_groups(C, H)
    S = (x.new_zeros(Bsz, H, P, N) if initial_states is None
         else initial_states.to(x.dtype))                          # [B,H,P,N]
    ys = []
    for t in range(L):
        decay = torch.exp(d[:, t] * A)                             # [B,H]
        S = decay[..., None, None] * S + (d[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        y = torch.einsum("bhpn,bhn->bhp", S, Ch[:, t])
        if D is not None:
            y = y + _D_full(D, H, P, x) * x[:, t]
        if z is not None:
            y = y * F.silu(z[:, t])
        ys.append(y)
    out = torch.stack(ys, dim=1) if ys else x.new_zeros(Bsz, 0, H, P)
    return out, S


def ssd_chunked(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None,
                cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, math.inf)
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The chunked SSD algorithm of SPEC §1 with torch ops: per chunk of Q steps,
    CB = C·B, W = CB ⊙ exp(cs_i − cs_j) (j <= i), y_diag = W·(d⊙x); chunk states; state
    passing across chunks; y_off = exp(cs_i)·(C_i·S_start). The tail chunk is shorter."""
    Bsz, L, H, P = x.shape
    N = B.shape[-1]
    seqs = _sequences(L, cu_seqlens)
    if seqs is not None:
        if Bsz != 1:
            raise ValueError("cu_seqlens needs batch 1")
        outs, finals = [], []
        for s, (t0, t1) in enumerate(seqs):
            init = None if initial_states is None else initial_states[s:s + 1]
            o, f = ssd_chunked(x[:, t0:t1], dt[:, t0:t1], A, B[:, t0:t1], C[:, t0:t1], chunk_size,
                               D, None if z is None else z[:, t0:t1], dt_bias, init, None,
                               dt_softplus, dt_limit)
            outs.append(o)
            finals.append(f)
        return torch.cat(outs, dim=1), torch.cat(finals, dim=0)
    Q = int(chunk_size)
    d = process_dt(dt, dt_bias, dt_softplus, dt_limit)          # [B,L,H]
    Bh = _expand_groups(B, H)                                     # [B,L,H,N]
    Ch = _expand_groups(C, H)
    S = (x.new_zeros(Bsz, H, P, N) if initial_states is None
         else initial_states.to(x.dtype))                          # S_start of the chunk
    ys = []
    for c0 in range(0, L, Q):
        c1 = min(c0 + Q, L)
        dc = d[:, c0:c1]                                           # [B,q,H]
        a = dc * A                                                 # [B,q,H]
        cs = torch.cumsum(a, dim=1)                                # [B,q,H]
        xc, Bc, Cc = x[:, c0:c1], Bh[:, c0:c1], Ch[:, c0:c1]
        q = c1 - c0
        CB = torch.einsum("bihn,bjhn->bhij", Cc, Bc)               # [B,H,q,q]
        seg = cs.permute(0, 2, 1)[..., :, None] - cs.permute(0, 2, 1)[..., None, :]  # cs_i - cs_j
        mask = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
        Wm = CB * torch.exp(seg.masked_fill(~mask, -math.inf))     # [B,H,q,q]
        dx = dc[..., None] * xc                                    # [B,q,H,P]
        y_diag = torch.einsum("bhij,bjhp->bihp", Wm, dx)
        y_off = torch.exp(cs)[..., None] * torch.einsum("bihn,bhpn->bihp", Cc, S)
        y = y_diag + y_off
        if D is not None:
            y = y + _D_full(D, H, P, x) * xc
        if z is not None:
            y = y * F.silu(z[:, c0:c1])
        ys.append(y)
        decay_to_end = torch.exp(cs[:, -1:] - cs)                  # [B,q,H]
        chunk_state = torch.einsum("bjh,bjhp,bjhn->bhpn", decay_to_end, dx, Bc)
        S = torch.exp(cs[:, -1])[..., None, None] * S + chunk_state
    out = torch.cat(ys, dim=1) if ys else x.new_zeros(Bsz, 0, H, P)
    return out, S


def conv1d(x, weight, bias=None, activation=False, initial_states=None, cu_seqlens=None
           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """SPEC §4, one tap at a time. x [B,L,D] channel-last, weight [D,W], initial_states
    [S,D,W-1]. Returns (out [B,L,D], final_states [S,D,W-1]: the last W-1 inputs)."""
    Bsz, L, Dc = x.shape
    W = weight.shape[1]
    seqs = _sequences(L, cu_seqlens)
    if seqs is not None:
        outs, finals = [], []
        for s, (t0, t1) in enumerate(seqs):
            init = None if initial_states is None else initial_states[s:s + 1]
            o, f = conv1d(x[:, t0:t1], weight, bias, activation, init, None)
            outs.append(o)
            finals.append(f)
        return torch.cat(outs, dim=1), torch.cat(finals, dim=0)
    prev = (x.new_zeros(Bsz, W - 1, Dc) if initial_states is None
            else initial_states.transpose(1, 2).to(x.dtype))       # [B,W-1,D]
    xx = torch.cat([prev, x], dim=1)                               # [B,W-1+L,D]
    out = x.new_zeros(Bsz, L, Dc) if bias is None else bias.to(x.dtype).expand(Bsz, L, Dc).clone()
    for k in range(W):
        out = out + weight[:, k] * xx[:, k:k + L]
    if activation:
        out = F.silu(out)
    final = xx[:, xx.shape[1] - (W - 1):].transpose(1, 2)          # [B,D,W-1]
    return out, final


def rmsnorm_gated(x, weight, bias=None, z=None, eps=1e-6, group_size=None, norm_before_gate=False):
    """SPEC §5 (plus mamba_ssm's optional bias). Statistics per group of `group_size`."""
    Dc = x.shape[-1]
    gs = Dc if group_size is None else group_size
    v = x
    if z is not None and not norm_before_gate:
        v = v * F.silu(z)
    vg = v.reshape(*v.shape[:-1], Dc // gs, gs)
    rstd = torch.rsqrt(vg.pow(2).mean(-1, keepdim=True) + eps)
    out = (vg * rstd).reshape(v.shape) * weight
    if bias is not None:
        out = out + bias
    if z is not None and norm_before_gate:
        out = out * F.silu(z)
    return out


def ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
             dt_limit=(0.0, math.inf), state_indices=None):
    """SPEC §6: x [B,H,P], dt [B,H], A [H], B/C [B,G,N], state [S,H,P,N] updated in place
    (rows chosen by state_indices; a negative index is a padding row: skipped, output 0).
    Returns out [B,H,P]."""
    Bsz, H, P = x.shape
    out = x.new_zeros(Bsz, H, P)
    for b in range(Bsz):
        s = b if state_indices is None else int(state_indices[b])
        if s < 0:
            continue
        o, f = ssd_sequential(x[b:b + 1, None], dt[b:b + 1, None], A, B[b:b + 1, None],
                              C[b:b + 1, None], D, None if z is None else z[b:b + 1, None],
                              dt_bias, state[s:s + 1], None, dt_softplus, dt_limit)
        out[b] = o[0, 0]
        state[s] = f[0].to(state.dtype)
    return out


def conv1d_step(x, conv_state, weight, bias=None, activation=False, state_indices=None):
    """SPEC §6: x [B,D], conv_state [S,D,K] (K >= W-1 previous inputs, newest last),
    updated in place. Returns out [B,D]."""
    Bsz, Dc = x.shape
    W = weight.shape[1]
    out = x.new_zeros(Bsz, Dc)
    for b in range(Bsz):
        s = b if state_indices is None else int(state_indices[b])
        if s < 0:
            continue
        K = conv_state.shape[-1]
        window = torch.cat([conv_state[s, :, K - (W - 1):].to(x.dtype), x[b, :, None]], dim=-1)
        o = (window * weight).sum(-1)
        if bias is not None:
            o = o + bias
        if activation:
            o = F.silu(o)
        out[b] = o
        conv_state[s] = torch.cat([conv_state[s, :, 1:], x[b, :, None].to(conv_state.dtype)], dim=-1)
    return out
