"""_comm.py — the collectives the context- and tensor-parallel ops are built on.

Everything here goes through torch.distributed (gloo on CPU, NCCL on GPUs); nothing is a
transport of its own. Two rules hold throughout:

* Determinism: a sum over ranks is an all_gather followed by an addition in rank order
  (0, 1, ..., R-1), computed identically on every rank, so results are bitwise identical
  run to run and equal on all ranks. (An all_reduce's order is the backend's business.)
* No hang on a local error: a rank that finds its arguments invalid still takes part in
  the next collective with an error flag, and every rank then raises. A rank that dies or
  stalls mid-collective is caught by the process group's timeout (init_process_group's
  `timeout=`), which raises in the ranks that wait.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["group_info", "gather_meta", "all_gather_list", "ordered_sum", "AllSum",
           "all_sum", "CPError", "link"]


class CPError(RuntimeError):
    """Raised on every rank when some rank of the group failed a check or a local op."""


def group_info(group) -> Tuple[int, int]:
    """(world size, this rank's index) in `group` (None: the default group)."""
    return dist.get_world_size(group), dist.get_rank(group)


def global_rank(group, r: int) -> int:
    """The global rank of group rank r (for point-to-point ops)."""
    if group is None or group is dist.group.WORLD:
        return r
    return dist.get_global_rank(group, r)


def all_gather_list(t: Tensor, group) -> List[Tensor]:
    """all_gather of a same-shaped tensor from every rank, as a list in rank order."""
    R, _ = group_info(group)
    t = t.contiguous()
    parts = [torch.empty_like(t) for _ in range(R)]
    dist.all_gather(parts, t, group=group)
    return parts


def ordered_sum(parts: Sequence[Tensor]) -> Tensor:
    """parts[0] + parts[1] + ... in this order (the deterministic reduction)."""
    acc = parts[0].clone()
    for p in parts[1:]:
        acc += p
    return acc


def gather_meta(values: Sequence[int], group, what: str) -> Tensor:
    """all_gather of a small int64 vector per rank -> [R, K]. values[0] is the rank's
    status (1 ok, 0 failed); if any rank failed, every rank raises CPError."""
    t = torch.tensor([int(v) for v in values], dtype=torch.int64)
    meta = torch.stack(all_gather_list(t, group))
    bad = (meta[:, 0] != 1).nonzero().flatten().tolist()
    if bad:
        raise CPError(f"{what}: rank(s) {bad} of the group failed (see the error raised on "
                      f"{'that rank' if len(bad) == 1 else 'those ranks'})")
    return meta


def check_status(ok: bool, group, what: str) -> None:
    """A tiny status all_gather: every rank raises if any rank's `ok` is False."""
    gather_meta([1 if ok else 0], group, what)


class AllSum(torch.autograd.Function):
    """y = Σ_r t_r (rank order) on every rank. The loss of a distributed program is the
    sum of the ranks' losses, so the gradient of t_r is Σ_q dL_q/dy: the same ordered sum
    of the incoming gradients."""

    @staticmethod
    def forward(ctx, t, group):
        ctx.group = group
        return ordered_sum(all_gather_list(t, group))

    @staticmethod
    def backward(ctx, g):
        return ordered_sum(all_gather_list(g, ctx.group)), None


def all_sum(t: Tensor, group) -> Tensor:
    return AllSum.apply(t, group)


def needs_grad(*ts: Optional[Tensor]) -> bool:
    if not torch.is_grad_enabled():
        return False
    return any(t is not None and isinstance(t, Tensor) and t.requires_grad for t in ts)


def link(*ts: Tensor) -> Tensor:
    """An exact 0 that depends on ts in the autograd graph (a sum over zero elements).
    Collective autograd nodes must run their backwards in the same order on every rank;
    these links make that order a data dependency on every rank, empty slices included."""
    acc = None
    for t in ts:
        v = t.flatten()[:0].sum()
        acc = v if acc is None else acc + v
    return acc
