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

MODULES = ["test_distributed_ssd", "test_distributed_layers", "test_distributed_train",
           "test_distributed_harness"]  # last: its "stall" case leaves a subgroup timed out
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


def _bad_args_case(rank, world):
    """Rank 1 passes a head count that disagrees with rank 0's: every rank raises."""
    try:
        _step(rank, world, bad_rank_H=3)
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e)}
    return {"raised": None}


STALL_TIMEOUT = 3.0


def _stall_case(rank, world):
    """Rank 1 stops taking part (alive, silent) in a 2-rank subgroup with a short
    collective timeout: rank 0 raises once that timeout has passed."""
    import datetime
    import mamba2c.distributed as md
    g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=STALL_TIMEOUT))
    if rank == 1:
        time.sleep(STALL_TIMEOUT + 3)
        return {"raised": None}
    if rank != 0:
        return {"raised": None}
    x = torch.randn(1, 9, 4, 4)
    t0 = time.monotonic()
    try:
        md.cp_mamba_chunk_scan_combined(x, torch.rand(1, 9, 4), -torch.rand(4),
                                        torch.randn(1, 9, 1, 8), torch.randn(1, 9, 1, 8), 4,
                                        process_group=g)
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e)[:300], "after_s": time.monotonic() - t0}
    return {"raised": None}


def worker_cases(world):
    return {"fail/bad_args": _bad_args_case, "fail/stall": _stall_case} if world == 2 else {}


def test_bad_arguments_on_one_rank_raise_on_every_rank():
    v0, v1 = case_results(2, "fail/bad_args")
    assert v0["raised"] == "CPError" and v1["raised"] is not None, (v0, v1)
    assert "disagree" in v0["msg"] or "rank(s) [1]" in v0["msg"], v0


def test_silent_rank_times_out():
    v0 = case_results(2, "fail/stall")[0]
    assert v0["raised"] is not None, v0
    assert v0["after_s"] < STALL_TIMEOUT + 3.0, v0


def _crash_worker(rank, world, pg_timeout):
    out, fin = _step(rank, world)
    loss = out.sum() + fin.sum()
    if rank == 1:
        raise RuntimeError("rank 1 fails between the forward and the backward")
    t0 = time.monotonic()
    try:
        loss.backward()         # collective: waits for rank 1, whose process has ended
    except Exception as e:  # noqa: BLE001
        return {"raised": type(e).__name__, "msg": str(e)[:300], "after_s": time.monotonic() - t0}
    return {"raised": None}


def test_crashing_rank_is_an_error_everywhere():
    pg_timeout = 4.0
    t0 = time.monotonic()
    outs = launch.run_outcomes(_crash_worker, 2, args=(pg_timeout,), timeout=90,
                               pg_timeout=pg_timeout)
    assert time.monotonic() - t0 < 80
    s0, v0 = outs[0]
    assert s0 == "ok" and v0["raised"] is not None, outs
    assert v0["after_s"] < pg_timeout + 3.0, v0
    assert outs[1][0] == "error" and "rank 1 fails" in outs[1][1], outs[1]


def test_launcher_reports_a_hung_rank():
    t0 = time.monotonic()
    outs = launch.run_outcomes(_sleeper, 1, timeout=8, pg_timeout=60)
    assert outs[0][0] == "timeout", outs          # killed by the launcher's overall timeout
    assert time.monotonic() - t0 < 20


def _sleeper(rank, world):
    time.sleep(600)
    return rank
