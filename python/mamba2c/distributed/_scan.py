"""_scan.py — the exclusive scan over ranks of (state, decay) pairs, with its backward.

Rank r of R holds the state its slice produces from a zero incoming state, S_loc[r]
[B,H,P,N], and the slice's total decay a[r] = exp(Σ_t d_t·A) [B,H] (the factor the
incoming state is multiplied by on its way through the slice). A rank whose slice
contains a sequence start (varlen) has reset[r]: nothing passes through it. Then

    S_in[0] = 0,   S_out[r] = S_loc[r] + a[r]·S_in[r]   (S_loc[r] if reset[r]),
    S_in[r+1] = S_out[r],   S_final = S_out[R-1].

The forward returns (S_in[r], S_final) on rank r. The backward is the reverse scan:

    Gout[R-1] = Σ_q dS_final[q],   Gin[r] = dS_in[r] + a[r]·Gout[r]   (dS_in[r] if reset),
    Gout[r-1] = Gin[r],   dS_loc[r] = Gout[r],   d(log a[r]) = a[r]·Σ_{p,n} Gout[r]⊙S_in[r].

Two transports (bitwise identical results; the same additions in the same order):
  "all_gather": one all_gather of the packed (S_loc, a, reset) of every rank, every rank
                runs the whole recurrence (latency: one collective; volume R·|S| per rank);
  "p2p":        a pipeline of send/recv along the ranks (R-1 sequential hops of |S|).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from ._comm import all_gather_list, global_rank, group_info, ordered_sum

__all__ = ["StateScan", "state_scan"]


def _step(S_loc: Tensor, a: Tensor, reset: bool, S_in: Tensor) -> Tensor:
    if reset:
        return S_loc.clone()
    return S_loc + a[..., None, None] * S_in


class StateScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, S_loc, logdecay, dummy, reset, group, method, want_final):
        R, r = group_info(group)
        S_loc = S_loc.detach().contiguous()
        a = torch.exp(logdecay.detach().to(S_loc.dtype)).contiguous()
        shp, ashp = S_loc.shape, a.shape
        ctx.group, ctx.method, ctx.want_final, ctx.reset = group, method, want_final, reset
        ctx.shapes = (shp, ashp)
        if method == "all_gather":
            flag = S_loc.new_full((1,), 1.0 if reset else 0.0)
            packed = all_gather_list(torch.cat([S_loc.flatten(), a.flatten(), flag]), group)
            nS = S_loc.numel()
            S = torch.zeros_like(S_loc)
            S_in = S
            decays, resets = [], []
            for q in range(R):
                Sq = packed[q][:nS].view(shp)
                aq = packed[q][nS:nS + a.numel()].view(ashp)
                rq = bool(packed[q][-1] != 0)
                decays.append(aq)
                resets.append(rq)
                if q == r:
                    S_in = S
                S = _step(Sq, aq, rq, S)
            S_final = S
            ctx.decays, ctx.resets = decays, resets
        elif method == "p2p":
            S_in = torch.zeros_like(S_loc)
            if r > 0:
                dist.recv(S_in, src=global_rank(group, r - 1), group=group)
            S_out = _step(S_loc, a, reset, S_in)
            if r < R - 1:
                dist.send(S_out, dst=global_rank(group, r + 1), group=group)
            if want_final:
                S_final = S_out if r == R - 1 else torch.empty_like(S_out)
                dist.broadcast(S_final, src=global_rank(group, R - 1), group=group)
            else:
                S_final = torch.zeros_like(S_out)
        else:
            raise ValueError(f"method must be 'all_gather' or 'p2p', got {method!r}")
        ctx.save_for_backward(S_in, a)
        return S_in, S_final

    @staticmethod
    def backward(ctx, gS_in, gS_final):
        R, r = group_info(ctx.group)
        S_in, a = ctx.saved_tensors
        gS_in = gS_in.contiguous()
        group = ctx.group
        if ctx.method == "all_gather":
            mine = torch.cat([gS_in.flatten(), gS_final.contiguous().flatten()]) if ctx.want_final \
                else gS_in.flatten()
            parts = all_gather_list(mine, group)
            n = gS_in.numel()
            if ctx.want_final:
                G = ordered_sum([p[n:].view(gS_in.shape) for p in parts])
            else:
                G = torch.zeros_like(gS_in)
            for q in range(R - 1, r, -1):        # Gout[q-1] = Gin[q]
                gq = parts[q][:n].view(gS_in.shape)
                G = gq.clone() if ctx.resets[q] else gq + ctx.decays[q][..., None, None] * G
            Gout = G
        else:
            if ctx.want_final:
                G = ordered_sum(all_gather_list(gS_final.contiguous(), group))
            else:
                G = torch.zeros_like(gS_in)
            if r < R - 1:
                G = torch.empty_like(gS_in)
                dist.recv(G, src=global_rank(group, r + 1), group=group)
            Gout = G
            if r > 0:
                Gin = gS_in.clone() if ctx.reset else gS_in + a[..., None, None] * Gout
                dist.send(Gin.contiguous(), dst=global_rank(group, r - 1), group=group)
        dlog = None
        if not ctx.reset:
            dlog = (Gout * S_in).sum(dim=(-1, -2)) * a
        return Gout, dlog, None, None, None, None, None


def state_scan(S_loc: Tensor, logdecay: Tensor, reset: bool, group, method: str = "all_gather",
               want_final: bool = True, any_grad: bool = False):
    """(S_in, S_final) for this rank; see the module docstring. any_grad: some rank of
    the group needs gradients; the outputs are then part of the autograd graph even where
    this rank's inputs need none (an empty slice), so that the backward, which is
    collective, runs on every rank."""
    own = torch.is_grad_enabled() and (S_loc.requires_grad or logdecay.requires_grad)
    dummy = torch.zeros((), requires_grad=True) if (any_grad and not own) else None
    return StateScan.apply(S_loc, logdecay, dummy, bool(reset), group, method, bool(want_final))
