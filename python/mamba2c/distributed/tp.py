"""tp.py — tensor-parallel Mamba-2 (mamba_ssm's process_group / sequence_parallel).

`mamba2c.nn.Mamba2(..., process_group=g, sequence_parallel=sp)` splits the heads over the
R ranks of g (nheads and ngroups divisible by R): rank k holds heads [k·H/R, (k+1)·H/R)
and groups [k·G/R, (k+1)·G/R). Per rank:

    in_proj   column-parallel: the rows of z, x, B, C, dt of its heads/groups, in the
              layout [z_k | x_k | B_k | C_k | dt_k] (mamba_ssm's ColumnParallelLinear)
    conv1d, dt_bias, A_log, D, norm.weight: its slices (norm groups stay whole: one
              gated-RMSNorm group = d_inner/ngroups channels, never split)
    out_proj  row-parallel: its columns; the partial outputs are summed over ranks
              (all_reduce), the bias added once (rank 0 holds it)

sequence_parallel=True (mamba_ssm's default): the layer's input and output are this
rank's contiguous slice of the sequence dim (dim 1 of [B,L,d_model]; mamba_ssm shards
dim 0 of flattened (b l) tokens, the same thing for batch 1): the input is all_gathered
before in_proj and the output reduce_scattered (summed and split) after out_proj.
sequence_parallel=False: every rank takes and returns the whole [B,L,d_model].

shard_state_dict / gather_state_dict convert between the single-process layer's
state_dict and the per-rank ones.
"""
from __future__ import annotations

from typing import Dict, List

import torch
import torch.distributed as dist
from torch import Tensor

from ._comm import all_gather_list, global_rank, group_info, ordered_sum

__all__ = ["tp_local_dims", "tp_input", "tp_output", "shard_state_dict", "gather_state_dict"]


def tp_local_dims(nheads: int, ngroups: int, d_inner: int, group):
    R, _ = group_info(group)
    if nheads % R or ngroups % R:
        raise ValueError(f"tensor parallel over {R} ranks needs nheads ({nheads}) and ngroups "
                         f"({ngroups}) divisible by {R}")
    return nheads // R, ngroups // R, d_inner // R


def _gather_dim1(t: Tensor, lengths, group) -> Tensor:
    """cat over ranks along dim 1 of slices of different lengths (padded for the gather:
    gloo's all_gather takes equal sizes)."""
    m = max(lengths)
    if t.shape[1] < m:
        t = torch.cat([t, t.new_zeros((t.shape[0], m - t.shape[1]) + tuple(t.shape[2:]))], 1)
    parts = all_gather_list(t, group)
    return torch.cat([p[:, :n] for p, n in zip(parts, lengths)], dim=1)


class _Enter(torch.autograd.Function):
    """Before the column-parallel in_proj: identity (or all_gather along dim 1 with
    sequence parallelism); backward: sum of the ranks' input gradients (or its
    reduce_scatter: each rank's slice of the sum)."""

    @staticmethod
    def forward(ctx, u, group, sp, lengths):
        ctx.group, ctx.sp, ctx.lengths = group, sp, lengths
        if not sp:
            return u
        return _gather_dim1(u, lengths, group)

    @staticmethod
    def backward(ctx, g):
        R, r = group_info(ctx.group)
        total = ordered_sum(all_gather_list(g.contiguous(), ctx.group))
        if not ctx.sp:
            return total, None, None, None
        s = sum(ctx.lengths[:r])
        return total[:, s:s + ctx.lengths[r]].contiguous(), None, None, None


class _Exit(torch.autograd.Function):
    """After the row-parallel out_proj: the sum over ranks (in rank order), or with
    sequence parallelism this rank's slice of it; backward: identity (or all_gather)."""

    @staticmethod
    def forward(ctx, y, group, sp, lengths):
        R, r = group_info(group)
        ctx.group, ctx.sp, ctx.lengths = group, sp, lengths
        total = ordered_sum(all_gather_list(y, group))
        if not sp:
            return total
        s = sum(lengths[:r])
        return total[:, s:s + lengths[r]].contiguous()

    @staticmethod
    def backward(ctx, g):
        if not ctx.sp:
            return g, None, None, None
        return _gather_dim1(g.contiguous(), ctx.lengths, ctx.group), None, None, None


def tp_input(u: Tensor, group, sequence_parallel: bool):
    """(u_full, lengths): the layer input every rank computes on."""
    if sequence_parallel:
        n = torch.tensor([u.shape[1]])
        lengths = [int(t) for t in all_gather_list(n, group)]
    else:
        lengths = None
    return _Enter.apply(u, group, sequence_parallel, lengths), lengths


def tp_output(y: Tensor, group, sequence_parallel: bool, lengths):
    return _Exit.apply(y, group, sequence_parallel, lengths)


# ---------------------------------------------------------------------------------------
# state_dict sharding
# ---------------------------------------------------------------------------------------

def _layout(cfg):
    di, H, G, N = cfg["d_inner"], cfg["nheads"], cfg["ngroups"], cfg["d_state"]
    return di, H, G, N


def _rows(k: int, R: int, cfg, what: str) -> Tensor:
    """Indices of rank k's rows in the single-process in_proj ("in") / conv1d ("conv")."""
    di, H, G, N = _layout(cfg)
    dl, hl, gl = di // R, H // R, G // R
    seg = []
    off = 0
    if what == "in":
        seg.append(torch.arange(off + k * dl, off + (k + 1) * dl))              # z
        off += di
    seg.append(torch.arange(off + k * dl, off + (k + 1) * dl))                  # x
    off += di
    seg.append(torch.arange(off + k * gl * N, off + (k + 1) * gl * N))          # B
    off += G * N
    seg.append(torch.arange(off + k * gl * N, off + (k + 1) * gl * N))          # C
    off += G * N
    if what == "in":
        seg.append(torch.arange(off + k * hl, off + (k + 1) * hl))              # dt
    return torch.cat(seg)


def _cfg(layer) -> Dict[str, int]:
    R = layer.tp_world_size
    return dict(d_inner=layer.d_inner * R, nheads=layer.nheads * R, ngroups=layer.ngroups * R,
                d_state=layer.d_state, headdim=layer.headdim, D_has_hdim=layer.D_has_hdim)


def shard_state_dict(full: Dict[str, Tensor], layer) -> Dict[str, Tensor]:
    """The single-process Mamba2 state_dict `full` -> the one of the tensor-parallel
    `layer` (this rank's shard; its process group says which rank)."""
    R, k = group_info(layer.process_group)
    cfg = _cfg(layer)
    di, H = cfg["d_inner"], cfg["nheads"]
    dl, hl = di // R, H // R
    sd = {}
    for name, t in full.items():
        if name.startswith("in_proj."):
            v = t.index_select(0, _rows(k, R, cfg, "in"))
        elif name.startswith("conv1d."):
            v = t.index_select(0, _rows(k, R, cfg, "conv"))
        elif name in ("dt_bias", "A_log") or (name == "D" and not cfg["D_has_hdim"]):
            v = t[k * hl:(k + 1) * hl]
        elif name in ("D", "norm.weight"):
            v = t[k * dl:(k + 1) * dl]
        elif name == "out_proj.weight":
            v = t[:, k * dl:(k + 1) * dl]
        elif name == "out_proj.bias":
            if k != 0:
                continue
            v = t
        else:
            v = t
        sd[name] = v.clone()
    return sd


def gather_state_dict(layer, local: Dict[str, Tensor] = None) -> Dict[str, Tensor]:
    """Collective: the single-process state_dict assembled from every rank's shard of the
    tensor-parallel `layer` (returned on every rank). `local`: another dict keyed like
    the layer's state_dict (e.g. its parameters' gradients) to assemble instead."""
    R, k = group_info(layer.process_group)
    cfg = _cfg(layer)
    if local is None:
        local = layer.state_dict()
    full = {}
    for name, t in local.items():
        if name == "out_proj.bias":      # rank 0 only: broadcast below
            continue
        parts: List[Tensor] = all_gather_list(t.detach(), layer.process_group)
        if name.startswith("in_proj.") or name.startswith("conv1d."):
            what = "in" if name.startswith("in_proj.") else "conv"
            n = sum(p.shape[0] for p in parts)
            v = parts[0].new_empty((n,) + tuple(parts[0].shape[1:]))
            for q in range(R):
                v[_rows(q, R, cfg, what)] = parts[q]
        elif name == "out_proj.weight":
            v = torch.cat(parts, dim=1)
        elif name in ("dt_bias", "A_log", "D", "norm.weight"):
            v = torch.cat(parts, dim=0)
        else:
            v = parts[0]
        full[name] = v
    if layer.out_proj_has_bias:
        b = local["out_proj.bias"].detach().clone().contiguous() if k == 0 else \
            torch.empty(layer.d_model, dtype=layer.out_proj.weight.dtype)
        dist.broadcast(b, src=global_rank(layer.process_group, 0), group=layer.process_group)
        full["out_proj.bias"] = b
    return full
