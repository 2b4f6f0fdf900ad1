"""ssd.py — context-parallel SSD: mamba_chunk_scan_combined over a sequence split across ranks.

Rank r of the process group holds the contiguous slice [s_r, e_r) of the sequence (ranks
in order, any lengths, empty included). Per call:

1. each rank scans its slice from a zero incoming state with the single-process op
   (mamba2c.mamba_chunk_scan_combined: C kernels, its own autograd), which gives its
   outputs without the incoming state, y_loc, and the state its slice leaves, S_loc;
2. the ranks combine (S_loc, total decay) pairs with an exclusive scan over ranks
   (_scan.py), which gives each rank its incoming state S_in;
3. each rank adds what S_in contributes to its outputs — SPEC §1's y_off term carried
   through the whole slice, not a rescan:
       y_t += exp(cs_t) · (C_t · S_in)          (cs_t = Σ_{s<=t} d_s·A, inside the slice)
   and, with z, times silu(z_t) (the gate is linear in y, so the gated local output plus
   the gated correction is the gated sum).

Everything but the scan over ranks is torch autograd on local tensors; the scan's
backward is the reverse scan of the state gradients. With cu_seqlens (packed sequences,
batch 1; the GLOBAL boundaries, the same tensor on every rank) the correction only
reaches the tokens of the sequence that continues from the previous rank, and a slice
containing a sequence start passes nothing through.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from .. import interface
from ._comm import (CPError, all_sum, check_status, gather_meta, group_info, link as _link,
                    needs_grad)
from ._scan import state_scan

__all__ = ["cp_mamba_chunk_scan_combined"]

_DTYPES = {torch.float32: 1, torch.float64: 2, torch.bfloat16: 3, torch.float16: 4}


def _process_dt(dt: Tensor, dt_bias, softplus: bool, limit, cdtype) -> Tensor:
    """SPEC §1 step 1 in the compute dtype (what the C op does to dt)."""
    d = dt.to(cdtype)
    if dt_bias is not None:
        d = d + dt_bias.to(cdtype)
    if softplus:
        d = F.softplus(d)
    return d.clamp(min=float(limit[0]), max=float(limit[1]))


def _correction(C: Tensor, S_in: Tensor, ecs: Tensor, z: Optional[Tensor], cdtype) -> Tensor:
    """exp(cs_t)·(C_t·S_in) [B,n,H,P] (gated by silu(z_t) when z is given)."""
    Bsz, n, G, N = C.shape
    H, P = S_in.shape[1], S_in.shape[2]
    Sg = S_in.to(cdtype).reshape(Bsz, G, H // G, P, N)
    y = torch.einsum("blgn,bgkpn->blgkp", C.to(cdtype), Sg).reshape(Bsz, n, H, P)
    y = y * ecs[..., None]
    if z is not None:
        y = y * F.silu(z.to(cdtype))
    return y


def _add(out_loc: Tensor, corr: Tensor, n: int) -> Tensor:
    """out_loc with corr added to its first n tokens (the graph always links corr, so the
    collective backward runs on this rank even when n == 0)."""
    head = (out_loc[:, :n].to(corr.dtype) + corr).to(out_loc.dtype)
    if n == out_loc.shape[1]:
        return head
    return torch.cat([head, out_loc[:, n:]], dim=1)


def cp_mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                                 initial_states=None, seq_idx=None, cu_seqlens=None,
                                 dt_softplus=False, dt_limit=(0.0, float("inf")),
                                 return_final_states=False, return_varlen_states=False,
                                 process_group=None, method: str = "all_gather"):
    """mamba_chunk_scan_combined over a sequence split across the ranks of process_group.

    x [B,L_r,H,P], dt [B,L_r,H], B/C [B,L_r,G,N], z [B,L_r,H,P]: this rank's contiguous
    slice (rank order = sequence order; any L_r >= 0, the same B,H,P,G,N everywhere).
    A, D, dt_bias: replicated; their gradients are this rank's share (the sum over ranks
    is the single-process gradient, as for any data-parallel parameter).
    initial_states [B,H,P,N]: read on rank 0 only (its gradient is complete there).
    cu_seqlens: the GLOBAL packed boundaries over Σ L_r tokens (batch 1), the same tensor
    on every rank; sequences may cross ranks. initial_states with cu_seqlens is
    [nseq,H,P,N] or [1,H,P,N] (first sequence), passed identically on every rank; each
    rank uses the rows of the sequences that start in its slice (its gradient is that
    share). seq_idx: not supported (use cu_seqlens).
    Returns as mamba_chunk_scan_combined: out (this rank's slice) and, as asked, the
    whole sequence's final_states [B,H,P,N] and varlen_states [nseq,H,P,N] on every rank.
    method: "all_gather" (one collective of the [B,H,P,N] states) or "p2p" (a send/recv
    pipeline); the results are bitwise identical.

    Every rank must call this with the same options, and (training) must backpropagate
    through what it returns: the backward is collective. A rank whose arguments are
    invalid raises its error and every other rank raises CPError (no hang).
    """
    group = process_group
    if group is None and not dist.is_initialized():
        return interface.mamba_chunk_scan_combined(
            x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states,
            seq_idx=seq_idx, cu_seqlens=cu_seqlens, dt_softplus=dt_softplus, dt_limit=dt_limit,
            return_final_states=return_final_states, return_varlen_states=return_varlen_states)
    R, r = group_info(group)
    what = "cp_mamba_chunk_scan_combined"
    if cu_seqlens is not None:
        return _varlen(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                       dt_softplus, dt_limit, return_final_states, return_varlen_states, group,
                       method, R, r, what)
    err = None
    out_loc = S_loc = None
    try:
        if seq_idx is not None:
            raise NotImplementedError(f"{what}: seq_idx is not supported; pass the global "
                                      f"cu_seqlens (batch 1) instead")
        if return_varlen_states:
            raise ValueError("cu_seqlens must be provided if return_varlen_states is True")
        if x.dim() != 4 or B.dim() != 4:
            raise ValueError(f"{what}: x must be [B,L,H,P] and B/C [B,L,G,N]; got x "
                             f"{tuple(x.shape)}, B {tuple(B.shape)}")
        out_loc, S_loc = interface.mamba_chunk_scan_combined(
            x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias,
            initial_states=initial_states if r == 0 else None, dt_softplus=dt_softplus,
            dt_limit=dt_limit, return_final_states=True)
    except Exception as e:  # noqa: BLE001 — re-raised below, after the other ranks know
        err = e
    shape = tuple(x.shape) + tuple(B.shape[2:]) if err is None else (0,) * 6
    grad = needs_grad(x, dt, A, B, C, D, z, dt_bias, initial_states if r == 0 else None)
    try:
        meta = gather_meta([0 if err is not None else 1, grad, _DTYPES.get(x.dtype, 0)]
                           + [shape[0]] + list(shape[2:]), group, what)
    except CPError:
        if err is not None:
            raise err
        raise
    if bool((meta[:, 3:] != meta[0, 3:]).any()) or bool((meta[:, 2] != meta[0, 2]).any()):
        raise CPError(f"{what}: the ranks disagree on B,H,P,G,N or the dtype: "
                      f"{meta[:, 2:].tolist()}")
    any_grad = bool(meta[:, 1].any())
    Lr = x.shape[1]
    cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    d = _process_dt(dt, dt_bias, dt_softplus, dt_limit, cdtype)              # [B,L,H]
    cs = torch.cumsum(d * A.to(cdtype), dim=1, dtype=torch.float64)          # [B,L,H]
    logdecay = cs[:, -1] if Lr > 0 else cs.new_zeros(x.shape[0], x.shape[2])
    S_in, S_final = state_scan(S_loc, logdecay, False, group, method,
                               want_final=return_final_states,
                               any_grad=any_grad)
    corr = _correction(C, S_in, torch.exp(cs).to(cdtype), z, cdtype)
    out = _add(out_loc, corr, Lr)
    if return_final_states:
        return out, S_final
    return out


def _seq_layout(cu: Tensor, s: int, e: int):
    """The global sequences meeting [s, e): (indices, local cu_seqlens, continuing, owned)."""
    cu = [int(v) for v in cu.detach().cpu().tolist()]
    idx = ([i for i in range(len(cu) - 1) if cu[i] < e and cu[i + 1] > s and cu[i] < cu[i + 1]]
           if e > s else [])
    local = [max(cu[i], s) - s for i in idx] + [e - s]
    continuing = bool(idx) and cu[idx[0]] < s
    owned = [j for j, i in enumerate(idx) if cu[i + 1] <= e]
    return idx, local, continuing, owned, cu


def _varlen(x, dt, A, B, C, chunk_size, D, z, dt_bias, init, cu_seqlens, dt_softplus, dt_limit,
            return_final, return_varlen, group, method, R, r, what):
    err = None
    try:
        if x.dim() != 4 or x.shape[0] != 1:
            raise ValueError(f"{what}: cu_seqlens needs x [1,L_r,H,P]; got {tuple(x.shape)}")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
            raise ValueError(f"{what}: cu_seqlens must be [nseq+1]; got {tuple(cu_seqlens.shape)}")
    except Exception as e:  # noqa: BLE001 — re-raised below, after the other ranks know
        err = e
    Lr = x.shape[1] if err is None else 0
    grad = needs_grad(x, dt, A, B, C, D, z, dt_bias, init)
    try:
        meta = gather_meta([1 if err is None else 0, Lr, grad, init is not None], group, what)
    except CPError:
        if err is not None:
            raise err
        raise
    lengths = meta[:, 1].tolist()
    if len(set(meta[:, 3].tolist())) != 1:
        raise CPError(f"{what}: with cu_seqlens every rank passes initial_states (or none does)")
    any_grad = bool(meta[:, 2].any())
    s = sum(lengths[:r])
    e = s + Lr
    total = sum(lengths)
    err = None
    try:
        if int(cu_seqlens[0]) != 0 or int(cu_seqlens[-1]) != total:
            raise ValueError(f"{what}: cu_seqlens must run from 0 to the total length {total} "
                             f"(the global boundaries); got {cu_seqlens.tolist()}")
        idx, local, continuing, owned, cul = _seq_layout(cu_seqlens, s, e)
        nseq = len(cul) - 1
        init_rows = None
        if init is not None:
            if init.shape[0] not in (1, nseq):
                raise ValueError(f"{what}: initial_states has {init.shape[0]} rows; expected 1 or "
                                 f"{nseq}")
            full = torch.cat([init, init.new_zeros((nseq + 1 - init.shape[0],) + init.shape[1:])])
            pick = [nseq if (j == 0 and continuing) else i for j, i in enumerate(idx)]
            init_rows = full.index_select(0, torch.tensor(pick, dtype=torch.long))
        if idx:
            out_loc, st_loc = interface.mamba_chunk_scan_combined(
                x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=init_rows,
                cu_seqlens=torch.tensor(local, dtype=torch.int64), dt_softplus=dt_softplus,
                dt_limit=dt_limit, return_varlen_states=True)
        else:
            out_loc = interface.mamba_chunk_scan_combined(
                x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                dt_limit=dt_limit)
            st_loc = None
    except Exception as e2:  # noqa: BLE001
        err = e2
    try:
        check_status(err is None, group, what)
    except CPError:
        if err is not None:
            raise err
        raise
    H, P, N = x.shape[2], x.shape[3], B.shape[3]
    sdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    cdtype = sdtype
    n = (local[1] if continuing else 0) if idx else 0        # tokens of the continuing sequence
    reset = bool(idx) and (not continuing or len(idx) > 1)
    d = _process_dt(dt[:, :n], dt_bias, dt_softplus, dt_limit, cdtype)
    cs = torch.cumsum(d * A.to(cdtype), dim=1, dtype=torch.float64)          # [1,n,H]
    if idx and not reset:
        logdecay = cs[:, -1]
    else:
        logdecay = cs.new_zeros(1, H)
    if idx:
        S_loc = st_loc[-1:]
    else:  # an empty slice: linked to the inputs (exactly 0), which orders the collective
        S_loc = x.new_zeros(1, H, P, N, dtype=sdtype) + _link(x, dt, B, C)  # backwards
    S_in, S_final = state_scan(S_loc, logdecay, reset, group, method,
                               want_final=return_final,
                               any_grad=any_grad)
    ecs = torch.exp(cs).to(cdtype)
    corr = _correction(C[:, :n], S_in, ecs, None if z is None else z[:, :n], cdtype)
    out = _add(out_loc, corr, n)
    res = [out]
    last_empty = cul[-2] == cul[-1]
    if return_varlen or (return_final and last_empty):
        rows = torch.zeros(nseq, H, P, N, dtype=sdtype)
        if idx:
            states = st_loc
            if continuing and 0 in owned:
                first = st_loc[0:1] + ecs[:, -1, :, None, None].to(sdtype) * S_in
                states = torch.cat([first, st_loc[1:]])
            sel = torch.tensor([idx[j] for j in owned], dtype=torch.long)
            rows = rows.index_copy(0, sel, states[owned])
        if r == 0:  # empty sequences: their initial state (or zero), from rank 0
            empty = [i for i in range(nseq) if cul[i] == cul[i + 1]]
            if empty and init is not None:
                full = torch.cat([init, init.new_zeros((nseq - init.shape[0],) + init.shape[1:])])
                sel = torch.tensor(empty, dtype=torch.long)
                rows = rows.index_copy(0, sel, full.index_select(0, sel).to(sdtype))
        varlen = all_sum(rows + _link(S_in), group)  # S_in linked: backward after this one
        if return_final:
            res.append(varlen[nseq - 1:nseq])
        if return_varlen:
            res.append(varlen)
    elif return_final:
        res.append(S_final)
    return res[0] if len(res) == 1 else tuple(res)
