"""conv.py — context-parallel causal depthwise conv1d: the W-1 halo tokens.

Output token t reads inputs t-W+1 .. t, so the first W-1 outputs of rank r's slice need
the W-1 inputs before it, which live on earlier ranks (more than one when those slices are
shorter than W-1). Every rank contributes the last W-1 inputs of its slice (zero-padded
in front) to one all_gather; rank r picks global tokens s_r-W+1 .. s_r-1 from their owners
and runs the single-process op (mamba2c.ops.conv1d, C kernels) with them as its initial
conv state. The backward all_gathers the initial-state gradients and each rank adds, in
rank order, the pieces that belong to its own tail tokens. With cu_seqlens (global, batch
1) the halo tokens of an earlier sequence are dropped (the window resets at a sequence
start).
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor

from .. import ops
from ._comm import CPError, all_gather_list, gather_meta, group_info, link, needs_grad

__all__ = ["cp_conv1d", "HaloExchange"]


def _halo_sources(lengths: List[int], r: int, K: int):
    """For halo position j of rank r (global token s_r-K+j): (rank q, index in q's padded
    tail) or None before the sequence start."""
    ends, acc = [], 0
    for n in lengths:
        acc += n
        ends.append(acc)
    s = ends[r] - lengths[r]
    src = []
    for j in range(K):
        t = s - K + j
        if t < 0:
            src.append(None)
            continue
        q = next(q for q in range(r) if ends[q] - lengths[q] <= t < ends[q])
        src.append((q, t - ends[q] + K))
    return src


class HaloExchange(torch.autograd.Function):
    """tail [B,K,D] (this rank's last K inputs, zero-padded in front) -> halo [B,K,D]
    (the K inputs before this rank's slice, zeros before token 0)."""

    @staticmethod
    def forward(ctx, tail, lengths, group):
        R, r = group_info(group)
        K = tail.shape[1]
        tails = all_gather_list(tail.detach(), group)
        halo = torch.zeros_like(tail)
        for j, sq in enumerate(_halo_sources(lengths, r, K)):
            if sq is not None:
                halo[:, j] = tails[sq[0]][:, sq[1]]
        ctx.lengths, ctx.group = lengths, group
        return halo

    @staticmethod
    def backward(ctx, g):
        R, r = group_info(ctx.group)
        K = g.shape[1]
        gs = all_gather_list(g, ctx.group)
        dtail = torch.zeros_like(g)
        for q in range(r + 1, R):                   # rank order: deterministic
            for j, sq in enumerate(_halo_sources(ctx.lengths, q, K)):
                if sq is not None and sq[0] == r:
                    dtail[:, sq[1]] += gs[q][:, j]
        return dtail, None, None


def _seq_start(cu: List[int], s: int) -> int:
    """Start of the sequence containing global token s (s itself when none does)."""
    start = 0
    for c in cu:
        if c <= s:
            start = c
    return start


def cp_conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, activation: bool = False,
              cu_seqlens: Optional[Tensor] = None, process_group=None) -> Tensor:
    """Causal depthwise conv1d (SPEC §4, mamba2c.ops.conv1d's form) over a sequence split
    across the ranks of process_group. x [B,L_r,D] channel-last (any row stride), this
    rank's contiguous slice; weight [D,W], bias [D] replicated (gradients: each rank's
    share). cu_seqlens: the global packed boundaries (batch 1), the same on every rank.
    Returns out [B,L_r,D]. Collective (forward and backward) like
    cp_mamba_chunk_scan_combined."""
    group = process_group
    what = "cp_conv1d"
    R, r = group_info(group)
    W = weight.shape[-1]
    K = W - 1
    err = None
    try:
        if x.dim() != 3:
            raise ValueError(f"{what}: x must be [B,L,D]; got {tuple(x.shape)}")
        if cu_seqlens is not None and x.shape[0] != 1:
            raise ValueError(f"{what}: cu_seqlens needs batch 1; x has {x.shape[0]}")
    except Exception as e:  # noqa: BLE001 — re-raised after the other ranks know
        err = e
    shape = list(x.shape) if err is None else [0, 0, 0]
    grad = needs_grad(x)
    try:
        meta = gather_meta([1 if err is None else 0, shape[1], grad, shape[0], shape[2], K],
                           group, what)
    except CPError:
        if err is not None:
            raise err
        raise
    if bool((meta[:, 3:] != meta[0, 3:]).any()):
        raise CPError(f"{what}: the ranks disagree on B, D or W: {meta[:, 3:].tolist()}")
    lengths = meta[:, 1].tolist()
    Bsz, L, Dc = x.shape
    if K == 0:
        return ops.conv1d(x, weight, bias, activation, None, None if cu_seqlens is None else
                          _local_cu(cu_seqlens, lengths, r), False)[0]
    n = min(L, K)
    tail = x[:, L - n:]
    if n < K:  # zero-padded in front; linked to x so that the graph orders the backward
        tail = torch.cat([x.new_zeros(Bsz, K - n, Dc), tail], dim=1)
    if bool(meta[:, 2].any()) and not grad:  # the backward is collective: join it here too
        tail = tail + torch.zeros((), dtype=tail.dtype, requires_grad=True)
    halo = HaloExchange.apply(tail.contiguous(), lengths, group)          # [B,K,D]
    s = sum(lengths[:r])
    cu_local = None
    if cu_seqlens is not None:
        cu = [int(v) for v in cu_seqlens.detach().cpu().tolist()]
        start = _seq_start(cu, s)
        keep = torch.tensor([s - K + j >= start for j in range(K)]).view(1, K, 1)
        halo = torch.where(keep, halo, torch.zeros((), dtype=halo.dtype))
        cu_local = _local_cu(cu_seqlens, lengths, r)
    if L == 0:  # nothing to compute; linked to the halo so its backward runs here too
        return x.new_zeros(Bsz, 0, Dc) + link(halo)
    init = halo.transpose(1, 2)                                          # [B,D,K]
    if cu_local is not None and cu_local.shape[0] > 2:  # only the first sequence continues
        init = torch.cat([init, init.new_zeros(cu_local.shape[0] - 2, Dc, K)])
    return ops.conv1d(x, weight, bias, activation, init, cu_local, False)[0]


def _local_cu(cu_seqlens: Tensor, lengths: List[int], r: int) -> Tensor:
    cu = [int(v) for v in cu_seqlens.detach().cpu().tolist()]
    s = sum(lengths[:r])
    e = s + lengths[r]
    if e == s:
        return torch.tensor([0], dtype=torch.int64)
    idx = [i for i in range(len(cu) - 1) if cu[i] < e and cu[i + 1] > s and cu[i] < cu[i + 1]]
    return torch.tensor([max(cu[i], s) - s for i in idx] + [e - s], dtype=torch.int64)
