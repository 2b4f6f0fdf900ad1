"""torch.compile(fullgraph=True) from a cold start (issue 18 items 3 and 4): the compiled
region makes the process's first mamba2c call, so tracing must not reach the library loader
(its lock is an unsupported context manager for dynamo). Each case runs in a fresh
interpreter: conftest has already loaded the library in this one. Cases: mamba2c.nn.Mamba2
forward + backward; transformers' Mamba2ForCausalLM inside use_mamba2c_in_transformers()
(eval forward: the chunk-scan path; train forward + backward: the fused split-conv1d-scan
path), each compiled function one graph with no break, equal to transformers' own torch path."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


_HF_SCRIPT = r"""
import torch
from torch._dynamo.utils import counters
import transformers
import mamba2c.hf                      # imports only: no op has run, the library is not loaded
from mamba2c._native import loader
assert loader._lib is None, "the library was loaded before the compiled region"
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
cfg = transformers.Mamba2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=8,
                                expand=2, head_dim=8, num_heads=8, n_groups=2, chunk_size=8,
                                conv_kernel=4, use_cache=False)
m = transformers.Mamba2ForCausalLM(cfg)
ids = torch.randint(0, 64, (2, 13))
with mamba2c.hf.use_mamba2c_in_transformers():
    m.eval()
    ev = torch.compile(lambda i: m(i, use_cache=False).logits, backend="aot_eager",
                       fullgraph=True)
    y = ev(ids)
    g_eval = counters["stats"]["unique_graphs"]
    b_eval = sum(counters["graph_break"].values())
    m.train()
    tr = torch.compile(lambda i: m(i, use_cache=False).logits, backend="aot_eager",
                       fullgraph=True)
    yt = tr(ids)
    yt.square().sum().backward()
graphs = counters["stats"]["unique_graphs"]
breaks = sum(counters["graph_break"].values())
assert all(p.grad is not None for p in m.parameters())
g_c = {n: p.grad.clone() for n, p in m.named_parameters()}
m.zero_grad()
with torch.no_grad():                   # transformers' own torch path (outside the context)
    m.eval()
    ye = m(ids, use_cache=False).logits
torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-5)
m.train()
yte = m(ids, use_cache=False).logits
yte.square().sum().backward()
torch.testing.assert_close(yt, yte, rtol=1e-4, atol=1e-5)
for n, p in m.named_parameters():
    torch.testing.assert_close(g_c[n], p.grad, rtol=1e-3, atol=1e-5, msg=n)
print("GRAPHS", g_eval, graphs, "BREAKS", b_eval, breaks, "BACKEND",
      mamba2c.ops.backend_of("conv1d"))
"""


def _run(script: str):
    env = dict(os.environ)
    pkg = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return [ln for ln in r.stdout.splitlines() if ln.startswith("GRAPHS")][-1].split()


def test_compile_fullgraph_from_cold_start():
    line = _run(_SCRIPT)
    assert (int(line[1]), int(line[3])) == (1, 0), line
    assert line[5] == "C", line  # the C ops ran (the library was found inside the region)


def test_compile_hf_model_fullgraph_from_cold_start():
    pytest.importorskip("transformers")
    line = _run(_HF_SCRIPT)
    # eval: 1 graph; + the train function: 2 in all; no break in either
    assert (int(line[1]), int(line[2]), int(line[4]), int(line[5])) == (1, 2, 0, 0), line
    assert line[7] == "C", line
