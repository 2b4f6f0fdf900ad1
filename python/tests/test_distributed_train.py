"""Data-parallel training of a small model of mamba2c.nn.Mamba2 blocks under
DistributedDataParallel and FSDP (fully_shard) on 2 and 4 gloo ranks: 20 SGD steps, the
global batch split over the ranks, losses equal to the single-process run's to float32
rounding.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import mamba2c

import test_distributed_harness as harness

STEPS, GLOBAL_BATCH, L, D_IN = 20, 4, 16, 12
LOSS_RTOL = 1e-5


class TinyMamba(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(D_IN, 32)
        self.blocks = nn.ModuleList(
            [mamba2c.nn.Mamba2(d_model=32, d_state=16, headdim=8, ngroups=2, chunk_size=8)
             for _ in range(2)])
        self.norms = nn.ModuleList([nn.LayerNorm(32) for _ in range(2)])
        self.head = nn.Linear(32, 4)

    def forward(self, u):
        h = self.inp(u)
        for blk, nrm in zip(self.blocks, self.norms):
            h = h + blk(nrm(h))
        return self.head(h)


def _model():
    torch.manual_seed(0)
    return TinyMamba()


def _batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    u = torch.randn(GLOBAL_BATCH, L, D_IN, generator=g)
    y = torch.randn(GLOBAL_BATCH, L, 4, generator=g)
    return u, y


def _train(model, rank=0, world=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    per = GLOBAL_BATCH // world
    losses = []
    for step in range(STEPS):
        u, y = _batch(step)
        u, y = u[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        loss = ((model(u) - y) ** 2).mean()        # the local mean; DP averages the grads
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tot = loss.detach().clone()
        if world > 1:
            dist.all_reduce(tot)
            tot /= world
        losses.append(float(tot))
    return losses


def _ddp(rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP
    return _train(DDP(_model()), rank, world)


def _fsdp(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = _model()
    mesh = init_device_mesh("cpu", (world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train(model, rank, world)


def worker_cases(world):
    if world not in (2, 4):
        return {}
    return {"train/ddp": _ddp, "train/fsdp": _fsdp}


_single = []


def _single_losses():
    if not _single:
        _single.extend(_train(_model()))
    return _single


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_data_parallel_training(world, kind):
    outs = harness.case_results(world, f"train/{kind}")
    want = torch.tensor(_single_losses(), dtype=torch.float64)
    for r, losses in enumerate(outs):
        got = torch.tensor(losses, dtype=torch.float64)
        rel = ((got - want).abs() / want.abs()).max().item()
        assert rel <= LOSS_RTOL, (kind, world, r, rel, losses, want.tolist())
    assert want[-1] < want[0]  # it trains
