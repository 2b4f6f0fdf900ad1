"""interface.py — mamba_ssm / causal-conv1d names and signatures on top of mamba2c.ops.

Drop-in replacements for
  mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined
  mamba_ssm.ops.triton.ssd_combined.mamba_split_conv1d_scan_combined
  mamba_ssm.ops.triton.selective_state_update.selective_state_update
  mamba_ssm.ops.triton.layernorm_gated.rmsnorm_fn / RMSNorm (exported as RMSNormGated)
  causal_conv1d.causal_conv1d_fn / causal_conv1d_update / causal_conv1d_varlen_states
with the same argument names, defaults and return conventions. Where mamba2c's contract
(SPEC.md) says more than mamba_ssm, the differences are listed in each docstring.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _dispatch, ops
from ._checks import expect_rank

__all__ = ["mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined",
           "selective_state_update", "causal_conv1d_fn", "causal_conv1d_update",
           "causal_conv1d_varlen_states", "rmsnorm_fn",
           "RMSNormGated", "seq_idx_to_cu_seqlens"]


# ---------------------------------------------------------------------------------------
# seq_idx <-> cu_seqlens
# ---------------------------------------------------------------------------------------

def seq_idx_to_cu_seqlens(seq_idx: Tensor):
    """Convert mamba_ssm's seq_idx [B,L] into packed boundaries over the B*L tokens.

    A new sequence starts at every row start and wherever seq_idx changes. seq_idx must be
    non-decreasing along each row (for any other pattern mamba_ssm's kernels do not
    compute a recurrence with resets, and no cu_seqlens is equivalent): ValueError.
    Returns (cu_seqlens int64 [nseq+1], first [B], last [B], starts_at_zero [B]) where
    first[b]/last[b] index the first/last sequence of row b and starts_at_zero[b] says
    whether row b's first sequence has seq_idx 0 (only then does mamba_ssm feed it the
    row's initial state)."""
    if seq_idx.dim() != 2:
        raise ValueError(f"seq_idx has shape {tuple(seq_idx.shape)}; expected [batch, seqlen]")
    s = seq_idx.detach().to(device="cpu", dtype=torch.long)
    Bsz, L = s.shape
    if L == 0:
        raise ValueError("seq_idx has seqlen 0")
    if Bsz and L > 1 and bool((s[:, 1:] < s[:, :-1]).any()):
        raise ValueError("seq_idx must be non-decreasing along each row to be converted to "
                         "cu_seqlens (sequences packed one after another)")
    boundary = torch.ones(Bsz, L, dtype=torch.bool)
    if L > 1:
        boundary[:, 1:] = s[:, 1:] != s[:, :-1]
    starts = boundary.flatten().nonzero().squeeze(1)
    cu = torch.cat([starts, torch.tensor([Bsz * L])])
    counts = boundary.sum(1)
    ends = counts.cumsum(0)
    return cu, ends - counts, ends - 1, s[:, 0] == 0


def _flatten_rows(t: Optional[Tensor]) -> Optional[Tensor]:
    """[B,L,...] -> [1,B*L,...] (a view when the strides allow; reshape copies otherwise)."""
    if t is None or t.shape[0] == 1:
        return t
    return t.reshape(1, t.shape[0] * t.shape[1], *t.shape[2:])


# ---------------------------------------------------------------------------------------
# SSD
# ---------------------------------------------------------------------------------------

def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False,
                              state_dtype=None, return_states_at=None):
    """mamba_ssm's mamba_chunk_scan_combined, computed by the mamba2c C library.

    Arguments (PyTorch order): x [B,L,H,P], dt [B,L,H], A [H], B/C [B,L,G,N], D [H] or
    [H,P], z [B,L,H,P], dt_bias [H], initial_states [B,H,P,N], seq_idx [B,L],
    cu_seqlens [nseq+1].
    Returns, as mamba_ssm does:
        out                                  by default
        (out, final_states)                  return_final_states
        (out, varlen_states)                 return_varlen_states
        (out, final_states, varlen_states)   both
    out has x's dtype. States, as mamba_ssm allocates them: final_states [B,H,P,N] float32
    (float64 for float64 input; mamba_ssm's _state_passing_fwd keeps them float32 for
    bf16/f16 inputs too), varlen_states [nseq,H,P,N] in C's dtype (mamba_ssm's
    chunk_state_varlen writes them in the dtype of its chunk states, C.dtype); with
    state_dtype given, both (and return_states_at's position_states) are returned in
    state_dtype. The scan itself accumulates in float32 (float64) either way: state_dtype
    only sets the dtype the states are delivered in. Everything is differentiable (all
    of x, dt, A, B, C, D, z, dt_bias, initial_states), varlen_states included (mamba_ssm's
    backward refuses it).

    Sequences: seq_idx (non-decreasing per row) is converted to the equivalent packed
    cu_seqlens (rows become consecutive sequences); the state resets at every change,
    initial_states[b] feeds row b's first sequence when its seq_idx is 0 (mamba_ssm's
    rule), final_states[b] is the state after row b's last token. cu_seqlens needs batch 1
    and, unlike mamba_ssm (which only uses it for varlen_states and relies on seq_idx for
    the resets), always resets the state at its boundaries (SPEC §1); passing both is
    allowed when they agree. With cu_seqlens, initial_states may be [1,H,P,N] (first
    sequence only, mamba_ssm) or [nseq,H,P,N] (one per sequence).
    bf16/f16 inputs are computed in float32 and the output rounded to the input dtype.

    return_states_at (mamba2c extension, for prefix caching): strictly increasing flat
    token indices b*L + t (an int tensor or a sequence of ints; with cu_seqlens the packed
    index). position_states [npos,H,P,N] — the state of each token's sequence right after
    that token — is then appended as the LAST element of the result (out becomes
    (out, position_states), and so on). One prefill call, no extra pass
    (mamba2_ssd_forward_states); position_states carries no gradient.
    """
    if return_states_at is not None and not isinstance(return_states_at, torch.Tensor):
        return_states_at = torch.tensor(list(return_states_at), dtype=torch.int64)

    def scan(*args):
        if return_states_at is None:
            return ops.ssd(*args) + (None,)
        return ops.ssd_states(*args[:5], args[5], return_states_at, *args[6:])

    if state_dtype is not None and not (isinstance(state_dtype, torch.dtype)
                                        and state_dtype.is_floating_point):
        raise TypeError(f"state_dtype is {state_dtype!r}; expected a floating-point torch.dtype")

    def as_state(t, default=None):
        dt_ = state_dtype if state_dtype is not None else default
        return t if (t is None or dt_ is None or t.dtype == dt_) else t.to(dt_)

    def result(out, final=None, varlen=None):
        parts = tuple(p for p in (out, as_state(final), as_state(varlen, C.dtype))
                      if p is not None)
        if return_states_at is not None:
            parts = parts + (as_state(pos),)
        return parts[0] if len(parts) == 1 else parts

    if return_varlen_states and cu_seqlens is None:
        raise ValueError("cu_seqlens must be provided if return_varlen_states is True")
    expect_rank("x", x, "[B,L,H,P]")
    Bsz, L, H, P = x.shape
    cu = cu_seqlens
    rows = None
    if seq_idx is not None:
        if tuple(seq_idx.shape) != (Bsz, L):
            raise ValueError(f"seq_idx has shape {tuple(seq_idx.shape)}; expected {(Bsz, L)}")
        cu_s, first, last, at_zero = seq_idx_to_cu_seqlens(seq_idx)
        if cu is not None:
            same = cu.shape == cu_s.shape and bool((cu.detach().cpu().long() == cu_s).all())
            if Bsz != 1 or not same:
                raise ValueError("seq_idx and cu_seqlens describe different sequence boundaries")
        cu = cu_s
        rows = (first, last, at_zero)
    if cu is None:
        out, final, pos = scan(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, None,
                               dt_softplus, dt_limit)
        return result(out, final if return_final_states else None)
    if rows is None and Bsz != 1:
        raise ValueError(f"cu_seqlens is given but x has batch {Bsz}; packed (varlen) "
                         f"sequences need batch 1")
    nseq = cu.shape[0] - 1
    init = initial_states
    if init is not None:
        if rows is not None:
            first, _, at_zero = rows
            if init.shape[0] != Bsz:
                raise ValueError(f"initial_states has {init.shape[0]} rows; expected batch {Bsz}")
            src = init * at_zero.to(device=init.device, dtype=init.dtype)[:, None, None, None]
            init = init.new_zeros((nseq,) + tuple(init.shape[1:])).index_copy(
                0, first.to(init.device), src)
        elif init.shape[0] == nseq:
            pass  # one initial state per sequence
        elif init.shape[0] == 1:
            init = _first_only(init, nseq)
        else:
            raise ValueError(f"initial_states has {init.shape[0]} rows; with cu_seqlens of "
                             f"{nseq} sequences expected 1 (first sequence) or {nseq}")
    out, varlen, pos = scan(_flatten_rows(x), _flatten_rows(dt), A, _flatten_rows(B),
                            _flatten_rows(C), chunk_size, D, _flatten_rows(z), dt_bias, init,
                            cu, dt_softplus, dt_limit)
    if Bsz != 1:
        out = out.reshape(Bsz, L, H, P)
    if rows is not None:
        final = varlen.index_select(0, rows[1].to(varlen.device))
    else:
        final = varlen[nseq - 1:nseq]
    return result(out, final if return_final_states else None,
                  varlen if return_varlen_states else None)


def _first_only(init: Tensor, nseq: int) -> Tensor:
    if nseq == 1:
        return init
    return torch.cat([init, init.new_zeros((nseq - 1,) + tuple(init.shape[1:]))], dim=0)


# ---------------------------------------------------------------------------------------
# Decode step
# ---------------------------------------------------------------------------------------

def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None, *,
                           dt_limit=(0.0, float("inf")), return_all_states=False):
    """mamba_ssm's selective_state_update: one decode step, `state` updated in place.

    state [S,H,P,N] (or [S,P,N] without heads), x [B,H,P], dt [B,H,P], A [H,P,N],
    B/C [B,G,N], D [H,P], z [B,H,P], dt_bias [H,P]; the head-less forms of mamba_ssm
    and the compact forms dt [B,H], A [H], D [H], dt_bias [H] are accepted too.
    Multi-token form (T tokens per row, e.g. speculative decoding): x, z [B,T,H,P],
    dt [B,T,H] or [B,T,H,P], B/C [B,T,G,N] -> out [B,T,H,P].
    state_batch_indices [B]: the state row of each batch entry; a negative index is a
    padding entry (state untouched, output 0).
    Runs in C (mamba2_ssd_step) whenever A, dt and dt_bias are constant along P (and N):
    mamba_ssm's Mamba2.step passes them as stride-0 broadcast views, which are read
    zero-copy; see mamba2c.ops.ssd_step for the cases that fall back to torch.
    Differences from mamba_ssm: the processed dt is clamped to dt_limit (SPEC §6 = one
    step of §1; default (0, inf)), so a negative raw dt without softplus becomes 0 here;
    return_all_states=True returns (out, all_states [B,(T,)H,P,N]).
    """
    if state.dim() > 3:  # the decode hot path: straight to the decision, one frame less
        return _dispatch.ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                  dt_limit[0], dt_limit[1], state_batch_indices,
                                  return_all_states,
                                  torch.ops.mamba2c.ssd_step if torch.compiler.is_compiling()
                                  else None)
    # head-less (mamba-1 style) forms: one head of P = dim channels
    expect_rank("state", state, "[S,H,P,N]", "[S,P,N]")
    expect_rank("x", x, "[B,P]")
    state_ = state.unsqueeze(1)
    x, dt, z = x.unsqueeze(1), dt.unsqueeze(1), (z.unsqueeze(1) if z is not None else None)
    A = A.unsqueeze(0) if A.dim() == 2 else A
    B = B.unsqueeze(1) if B.dim() == 2 else B
    C = C.unsqueeze(1) if C.dim() == 2 else C
    D = D.unsqueeze(0) if D is not None and D.dim() == 1 else D
    dt_bias = dt_bias.unsqueeze(0) if dt_bias is not None and dt_bias.dim() == 1 else dt_bias
    r = ops.ssd_step(state_, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit,
                     state_batch_indices, return_all_states)
    if return_all_states:
        return r[0].squeeze(1), r[1].squeeze(1)
    return r.squeeze(1)


# ---------------------------------------------------------------------------------------
# Causal conv1d
# ---------------------------------------------------------------------------------------

def _act(activation) -> bool:
    if activation not in (None, "silu", "swish"):
        raise NotImplementedError("activation must be None, silu, or swish")
    return activation is not None


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None):
    """causal-conv1d's causal_conv1d_fn. x [B,D,L] (any strides; the channel-last layout
    x = xBC.transpose(1, 2) of Mamba-2 is what the op reads without a copy), weight [D,W],
    bias [D], seq_idx [B,L] (non-decreasing per row; resets the window at every change),
    initial_states [B,D,W-1]. Returns out [B,D,L] (a transposed view of channel-last
    memory), or (out, final_states [B,D,W-1]) with return_final_states."""
    act = _act(activation)
    if seq_idx is not None:
        if initial_states is not None:
            raise ValueError("initial_states must be None if seq_idx is not None")
        if return_final_states:
            raise ValueError("If seq_idx is not None, we don't return final_states_out")
    expect_rank("x", x, "[B,D,L]")
    Bsz, Dc, L = x.shape
    w = weight.reshape(Dc, -1)
    xl = x.transpose(1, 2)  # [B,L,D] view
    if seq_idx is not None:
        cu = seq_idx_to_cu_seqlens(seq_idx)[0]
        out, _ = ops.conv1d(_flatten_rows(xl), w, bias, act, None, cu, False)
        out = out.reshape(Bsz, L, Dc)
        return out.transpose(1, 2)
    out, final = ops.conv1d(xl, w, bias, act, initial_states, None, return_final_states)
    out = out.transpose(1, 2)
    if not return_final_states:
        return out
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return out, final


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """causal-conv1d's causal_conv1d_update: x [B,D] or [B,D,T], conv_state [S,D,K]
    (K >= W-1, newest input last; a circular buffer indexed by cache_seqlens when given),
    updated in place; conv_state_indices [B] picks state rows (negative: padding entry,
    output 0). Returns out shaped like x."""
    act = _act(activation)
    return ops.conv1d_step(x, conv_state, weight.reshape(weight.shape[0], -1), bias, act,
                           conv_state_indices, cache_seqlens)


def causal_conv1d_varlen_states(x: Tensor, cu_seqlens: Tensor, state_len: int) -> Tensor:
    """causal-conv1d's causal_conv1d_varlen_states: the conv cache of each packed sequence
    after its last token. x [total_tokens, dim], cu_seqlens [batch+1] (sorted, from 0).
    Returns states [batch, dim, state_len]: states[b, :, -k:] = x[end_b-k:end_b].T with
    k = min(state_len, seqlen_b), zeros before (elements of another sequence are never
    copied). Laid out channel-last ([batch, state_len, dim] memory seen transposed), as
    causal-conv1d allocates it. Forward only (no gradient), like causal-conv1d's."""
    expect_rank("x", x, "[total_tokens,dim]")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
        raise ValueError(f"cu_seqlens has shape {tuple(cu_seqlens.shape)}; expected [batch+1]")
    if state_len < 0:
        raise ValueError(f"state_len is {state_len}; expected >= 0")
    cu = cu_seqlens.to(device=x.device, dtype=torch.long)
    if cu.numel() > 1 and bool((cu[1:] < cu[:-1]).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    if cu.numel() and (int(cu[0]) < 0 or int(cu[-1]) > x.shape[0]):
        raise ValueError(f"cu_seqlens spans [{int(cu[0])}, {int(cu[-1])}]; x has "
                         f"{x.shape[0]} tokens")
    with torch.no_grad():
        starts, ends = cu[:-1], cu[1:]
        idx = ends[:, None] - state_len + torch.arange(state_len, device=x.device)  # [b, K]
        valid = idx >= starts[:, None]
        rows = x.detach()[idx.clamp(min=0).clamp(max=max(x.shape[0] - 1, 0))]   # [b, K, dim]
        if x.shape[0] == 0:
            rows = x.new_zeros(idx.shape + (x.shape[1],))
        states = torch.where(valid[..., None], rows, torch.zeros((), dtype=x.dtype,
                                                                   device=x.device))
    return states.transpose(1, 2)


# ---------------------------------------------------------------------------------------
# Gated RMSNorm
# ---------------------------------------------------------------------------------------

def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """mamba_ssm's layernorm_gated.rmsnorm_fn: RMSNorm over groups of group_size channels
    (None: the whole last dim); with z, norm(x) * silu(z) if norm_before_gate else
    norm(x * silu(z))."""
    return ops.rmsnorm_gated(x, weight, bias, z, eps, group_size, norm_before_gate)


class RMSNormGated(torch.nn.Module):
    """mamba_ssm's layernorm_gated.RMSNorm (imported as RMSNormGated by Mamba2)."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True,
                 device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.group_size = group_size
        self.norm_before_gate = norm_before_gate
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.ones_(self.weight)

    def forward(self, x, z=None):
        return rmsnorm_fn(x, self.weight, self.bias, z=z, eps=self.eps,
                          group_size=self.group_size, norm_before_gate=self.norm_before_gate)


# ---------------------------------------------------------------------------------------
# The fused Mamba-2 mixer path (conv + scan + norm + out_proj)
# ---------------------------------------------------------------------------------------

def mamba_split_conv1d_scan_combined(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D,
                                     chunk_size, initial_states=None, seq_idx=None,
                                     dt_limit=(0.0, float("inf")), return_final_states=False,
                                     activation="silu", rmsnorm_weight=None, rmsnorm_eps=1e-6,
                                     outproj_weight=None, outproj_bias=None, headdim=None,
                                     ngroups=1, norm_before_gate=True, state_dtype=None):
    """mamba_ssm's mamba_split_conv1d_scan_combined, composed from mamba2c ops:
    zxbcdt [B,L, 2*d_nonssm + 2*dim + 2*G*N + H] is split (views, no copy) into the gated
    MLP part, z, xBC and dt; xBC goes through the causal conv + activation, the SSD scan
    runs with dt_softplus=True (z gating inside the scan when rmsnorm_weight is None,
    else the gated RMSNorm with group_size dim/ngroups), then the output projection.
    state_dtype: the dtype of the returned final_states (float32 when None), as in
    mamba_chunk_scan_combined."""
    if D.dim() == 1:
        if headdim is None:
            raise ValueError("headdim must be given when D is [nheads]")
        nheads = D.shape[0]
    else:
        nheads, headdim = D.shape
    expect_rank("zxbcdt", zxbcdt, "[B,L,d_in_proj]")
    Bsz, L, _ = zxbcdt.shape
    dim = nheads * headdim
    dstate = (conv1d_weight.shape[0] - dim) // ngroups // 2
    d_nonssm = (zxbcdt.shape[-1] - 2 * dim - 2 * ngroups * dstate - nheads) // 2
    if d_nonssm < 0 or zxbcdt.shape[-1] != 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads:
        raise ValueError(f"zxbcdt has last dim {zxbcdt.shape[-1]}, inconsistent with "
                         f"nheads={nheads}, headdim={headdim}, ngroups={ngroups}")
    zx0, z, xBC, dt = torch.split(zxbcdt, [2 * d_nonssm, dim, dim + 2 * ngroups * dstate, nheads],
                                  dim=-1)
    xBC = causal_conv1d_fn(xBC.transpose(1, 2), conv1d_weight.reshape(conv1d_weight.shape[0], -1),
                           conv1d_bias, seq_idx=seq_idx, activation=activation).transpose(1, 2)
    x, Bm, Cm = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.unflatten(-1, (nheads, headdim))
    Bm = Bm.unflatten(-1, (ngroups, dstate))
    Cm = Cm.unflatten(-1, (ngroups, dstate))
    zh = z.unflatten(-1, (nheads, headdim))
    res = mamba_chunk_scan_combined(x, dt, A, Bm, Cm, chunk_size, D=D,
                                    z=zh if rmsnorm_weight is None else None, dt_bias=dt_bias,
                                    initial_states=initial_states, seq_idx=seq_idx,
                                    dt_softplus=True, dt_limit=dt_limit,
                                    return_final_states=return_final_states,
                                    state_dtype=state_dtype)
    y, final = (res if return_final_states else (res, None))
    y = y.flatten(-2)
    if rmsnorm_weight is not None:
        y = rmsnorm_fn(y, rmsnorm_weight, None, z=z, eps=rmsnorm_eps, group_size=dim // ngroups,
                       norm_before_gate=norm_before_gate)
    if d_nonssm > 0:
        z0, x0 = zx0.split([d_nonssm, d_nonssm], dim=-1)
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y
