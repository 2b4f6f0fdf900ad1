"""torch.compile(fullgraph=True) from a cold start (issue 18 item 3): the compiled region
makes the process's first mamba2c call, so tracing must not reach the library loader
(its lock is an unsupported context manager for dynamo). Runs in a fresh interpreter:
conftest has already loaded the library in this one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import torch
import torch._dynamo
from torch._dynamo.utils import counters
import mamba2c.nn                      # imports only: no op has run, the library is not loaded
from mamba2c._native import loader
assert loader._lib is None, "the library was loaded before the compiled region"
torch.manual_seed(0)
m = mamba2c.nn.Mamba2(d_model=16, d_state=8, headdim=8, ngroups=2, chunk_size=8)
u = torch.randn(2, 13, 16, requires_grad=True)
cm = torch.compile(m, backend="aot_eager", fullgraph=True)
y = cm(u)
y.square().sum().backward()
assert u.grad is not None and all(p.grad is not None for p in m.parameters())
graphs = counters["stats"]["unique_graphs"]
breaks = sum(counters["graph_break"].values())
ye = m(u.detach())
torch.testing.assert_close(y, ye, rtol=1e-5, atol=1e-6)
print("GRAPHS", graphs, "BREAKS", breaks, "BACKEND", mamba2c.ops.backend_of("conv1d"))
"""


def test_compile_fullgraph_from_cold_start():
    env = dict(os.environ)
    pkg = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("GRAPHS")][-1].split()
    assert (int(line[1]), int(line[3])) == (1, 0), line
    assert line[5] == "C", line  # the C ops ran (the library was found inside the region)
