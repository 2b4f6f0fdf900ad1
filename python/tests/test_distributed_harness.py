"""Shared process groups for the distributed tests, and the failure-propagation tests.

Spawning a rank (a fresh interpreter importing torch) takes seconds, so every distributed
case of every test_distributed_*.py module runs inside ONE spawn per world size:
results(world) runs each module's worker_cases(rank, world) on a gloo group over loopback
(mamba2c.distributed.launch: free port, collective timeout, hard overall timeout, so a hung
rank fails the tests instead of hanging them) and caches every rank's returned tensors;
the test functions then compare them with the single-process op and the float64
reference in this process.
"""
from __future__ import annotations

import importlib
import os
import time
import traceback

import pytest
import torch
import torch.distributed as dist

from mamba2c.distributed import launch

MODULES = ["test_distributed_ssd", "test_distributed_layers", "test_distributed_train"]
WORLD_TIMEOUT = 300.0   # the whole spawn, all cases (a hung rank fails, never hangs CI)
PG_TIMEOUT = 60.0       # one collective

_cache = {}


def _worker(rank, world, modules):
    out = {}
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for case, fn in mod.worker_cases(world).items():
            try:
                out[case] = ("ok", fn(rank, world))
            except Exception:  # noqa: BLE001 — reported per case; the group may be broken
                out[case] = ("error", traceback.format_exc())
    return out


def results(world: int):
    """{case: [rank 0 result, rank 1 result, ...]} of every module's cases for `world`."""
    if world not in _cache:
        try:
            mods = os.environ.get("MAMBA2C_DIST_MODULES")  # a subset, when developing
            mods = mods.split(",") if mods else MODULES
            per_rank = launch.run(_worker, world, args=(mods,), timeout=WORLD_TIMEOUT,
                                  pg_timeout=PG_TIMEOUT)
            _cache[world] = ("ok", per_rank)
        except launch.RankFailed as e:
            _cache[world] = ("failed", str(e))
    status, per_rank = _cache[world]
    if status != "ok":
        pytest.fail(f"the world-{world} spawn failed:\n{per_rank}", pytrace=False)
    return per_rank


def case_results(world: int, case: str):
    per_rank = results(world)
    outs = []
    for r, d in enumerate(per_rank):
        status, val = d[case]
        if status != "ok":
            pytest.fail(f"{case}, world {world}, rank {r} raised:\n{val}", pytrace=False)
        outs.append(val)
    return outs


# ---------------------------------------------------------------------------------------
# A rank failing mid-collective: an error in every rank within the timeout, not a hang
# ---------------------------------------------------------------------------------------

def _step(rank, world, bad_rank_H=None):
    import mamba2c.distributed as md
    H = bad_rank_H if (bad_rank_H is not None and rank == 1) else 4
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(1, 9, H, 4, generator=g, requires_grad=True)
    dt = torch.rand(1, 9, H, generator=g) * 0.1
    A = -torch.rand(H, generator=g)
    Bm = torch.randn(1, 9, 1, 8, generator=g)
    return md.cp_mamba_chunk_scan_combined(x, dt, A, Bm, Bm.clone(), 4, return_final_states=True)


def _fail_worker(rank, world, mode, pg_timeout):
    if mode == "bad_args":      # rank 1 passes a head count that disagrees with rank 0's
        try:
            _step(rank, world, bad_rank_H=3)
        except Exception as e:  # noqa: BLE001
            return {"raised": type(e).__name__, "msg": str(e)}
        return {"raised": None}
    out, fin = _step(rank, world)
    loss = out.sum() + fin.sum()
    if rank == 1:
        if mode == "stall":     # stops taking part (alive, silent) past the group's timeout
            time.sleep(pg_timeout + 4)
        raise RuntimeError("rank 1 fails between the forward and the backward")
    t0 = time.monotonic()
    try:
        loss.backward()         # collective: waits for rank 1, which never comes
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e)[:300], "after_s": time.monotonic() - t0}
    return {"raised": None}


@pytest.mark.parametrize("mode", ["bad_args", "crash", "stall"])
def test_failing_rank_is_an_error_everywhere(mode):
    pg_timeout = 4.0
    t0 = time.monotonic()
    outs = launch.run_outcomes(_fail_worker, 2, args=(mode, pg_timeout), timeout=90,
                               pg_timeout=pg_timeout)
    wall = time.monotonic() - t0
    assert wall < 80, f"the failure took {wall:.0f} s to surface"
    s0, v0 = outs[0]
    assert s0 == "ok" and v0["raised"] is not None, outs
    if mode == "bad_args":
        s1, v1 = outs[1]
        assert s1 == "ok" and v1["raised"] is not None, outs
        assert v0["raised"] == "CPError", v0
        assert "rank(s) [1]" in v0["msg"] or "disagree" in v0["msg"], v0
    else:
        assert outs[1][0] == "error" and "rank 1 fails" in outs[1][1], outs[1]
        # a dead peer is noticed at once; a silent one after the collective timeout
        assert v0["after_s"] < pg_timeout + 3.0, v0


def test_launcher_reports_a_hung_rank():
    t0 = time.monotonic()
    outs = launch.run_outcomes(_sleeper, 2, timeout=12, pg_timeout=60)
    assert outs[1][0] == "timeout", outs          # killed by the launcher's overall timeout
    assert time.monotonic() - t0 < 25


def _sleeper(rank, world):
    if rank == 1:
        time.sleep(60)
    return rank
