"""launch.py — run a function on a local gloo process group (tests, benchmarks, examples).

    from mamba2c.distributed import launch
    outs = launch.run(fn, world_size=4, args=(...,), timeout=120)   # fn(rank, world, *args)

Each rank is a fresh process (torch.multiprocessing "spawn" context) that joins a gloo
group over loopback (tcp://127.0.0.1:<free port>, GLOO_SOCKET_IFNAME=lo unless set) with
the collective timeout `pg_timeout`, runs fn, and sends back its return value (serialised
with torch.save) or its traceback. The parent waits at most `timeout` seconds in all and
then terminates what is still running, so a hung rank fails the caller instead of hanging
it. fn must be importable by name (a module-level function).
"""
from __future__ import annotations

import datetime
import io
import os
import queue as _queue
import socket
import time
import traceback
from typing import Any, Callable, List, Sequence, Tuple

import torch
import torch.multiprocessing as mp

__all__ = ["free_port", "run", "run_outcomes", "RankFailed"]


class RankFailed(RuntimeError):
    """Some rank raised, died or did not finish in time; .outcomes has every rank's."""

    def __init__(self, msg, outcomes):
        super().__init__(msg)
        self.outcomes = outcomes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, pg_timeout, threads, fn, args, q):
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        res = fn(rank, world, *args)
        buf = io.BytesIO()
        torch.save(res, buf)
        q.put((rank, "ok", buf.getvalue()))
    except BaseException:  # noqa: BLE001 — reported to the parent, which raises
        q.put((rank, "error", traceback.format_exc()))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run_outcomes(fn: Callable, world_size: int, args: Sequence[Any] = (), timeout: float = 120.0,
                 pg_timeout: float = 60.0, threads: int = 1) -> List[Tuple[str, Any]]:
    """Run fn(rank, world_size, *args) on world_size processes; returns per rank
    ("ok", value) | ("error", traceback text) | ("timeout", None) | ("died", exitcode)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world_size, port, pg_timeout, threads, fn,
                                              tuple(args), q), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    outcomes: List[Tuple[str, Any]] = [("timeout", None)] * world_size
    got = set()
    deadline = time.monotonic() + timeout
    dead_since = {}
    while len(got) < world_size and time.monotonic() < deadline:
        try:
            rank, status, val = q.get(timeout=0.2)
        except _queue.Empty:
            now = time.monotonic()
            for r, p in enumerate(procs):  # a rank that died without reporting
                if r in got or p.is_alive():
                    continue
                if now - dead_since.setdefault(r, now) > 2.0:
                    outcomes[r] = ("died", p.exitcode)
                    got.add(r)
            continue
        if status == "ok":
            val = torch.load(io.BytesIO(val), weights_only=False)
        outcomes[rank] = (status, val)
        got.add(rank)
    for p in procs:
        p.join(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        if p.is_alive():
            p.terminate()
            p.join(5.0)
    q.close()
    return outcomes


def run(fn: Callable, world_size: int, args: Sequence[Any] = (), timeout: float = 120.0,
        pg_timeout: float = 60.0, threads: int = 1) -> List[Any]:
    """run_outcomes, raising RankFailed (with every rank's outcome) unless all ranks ok."""
    outs = run_outcomes(fn, world_size, args, timeout, pg_timeout, threads)
    if all(s == "ok" for s, _ in outs):
        return [v for _, v in outs]
    lines = [f"rank {r}: {s}" + (f"\n{v}" if s == "error" else "")
             for r, (s, v) in enumerate(outs) if s != "ok"]
    raise RankFailed("distributed run failed:\n" + "\n".join(lines), outs)
