"""mamba_ssm_loader.py — import mamba_ssm's Triton SSD from a copy of its files, without
installing mamba_ssm (bench/gpu_compare.py's peer on a machine that cannot install it).

    fn = load(path)   # -> mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined

path is a checkout of the mamba repository, its mamba_ssm/ package directory, or a flat
directory holding copies of ops/triton/ssd_*.py with the helpers they import (the other
ops/triton files, utils/torch.py, utils/determinism.py). The package __init__ files are
not run (they import mamba_ssm's compiled CUDA extensions): the packages mamba_ssm,
mamba_ssm.ops, mamba_ssm.ops.triton and mamba_ssm.utils are stand-ins whose module search
path is the directory that holds the files. Where einops is not installed, a minimal
einops (rearrange / repeat over named axes, parenthesised groups, "...", and "1") stands in.

bound_autotuning(warmup_ms, rep_ms) shortens Triton's autotuning benchmark of every
autotuned kernel mamba_ssm defines, so that the first call of a new shape costs seconds,
and asks Triton to cache the chosen configurations on disk (TRITON_CACHE_DIR). Under
Triton's CPU interpreter (TRITON_INTERPRET=1, a dry run that checks the plumbing and the
numbers, not the speed) each kernel keeps its first configuration only.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
import types
from pathlib import Path

SUBMODULES = ("ssd_combined", "ssd_bmm", "ssd_chunk_state", "ssd_state_passing", "ssd_chunk_scan")


def _find(path: Path):
    """(directory of ssd_combined.py, directory of utils/torch.py) under path."""
    hits = sorted(path.rglob("ssd_combined.py")) if path.is_dir() else []
    hits = [h for h in hits if "mamba3" not in h.parts]
    if not hits:
        raise FileNotFoundError(f"no ssd_combined.py under {path}")
    triton_dir = hits[0].parent
    for cand in (triton_dir.parent.parent / "utils", triton_dir / "utils", triton_dir):
        if (cand / "torch.py").exists():
            return triton_dir, cand
    raise FileNotFoundError(f"no utils/torch.py beside {triton_dir} (mamba_ssm.utils.torch)")


def _stub_package(name: str, where: Path):
    mod = types.ModuleType(name)
    mod.__path__ = [str(where)]
    mod.__package__ = name
    sys.modules[name] = mod
    return mod


# ---- a minimal einops, used only where the real one is not installed ------------------------

def _parse(side: str):
    """'b (c l) h ...' -> list of groups, each a list of axis names ('...' and '1' kept)."""
    out, group = [], None
    for tok in side.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            group = []
        elif tok == ")":
            out.append(group)
            group = None
        elif group is not None:
            group.append(tok)
        else:
            out.append([tok])
    return out


def _rearrange(t, pattern: str, **sizes):
    lhs, rhs = (_parse(s) for s in pattern.split("->"))
    ell = next((i for i, g in enumerate(lhs) if g == ["..."]), None)
    n_ell = t.dim() - (len(lhs) - (1 if ell is not None else 0))
    known, names = dict(sizes), []
    dim = 0
    for g in lhs:  # split the input's dims into elementary axes
        if g == ["..."]:
            for k in range(n_ell):
                known[f"...{k}"] = t.shape[dim + k]
                names.append(f"...{k}")
            dim += n_ell
            continue
        total, unknown = t.shape[dim], [a for a in g if a != "1" and a not in known]
        rest = math.prod(known[a] for a in g if a != "1" and a in known)
        if len(unknown) > 1:
            raise ValueError(f"einops stand-in: cannot infer {unknown} in {pattern}")
        if unknown:
            known[unknown[0]] = total // rest
        names += [a for a in g if a != "1"]
        dim += 1
    t = t.reshape([known[a] for a in names])
    order, shape = [], []
    for g in rhs:
        if g == ["..."]:
            g = [f"...{k}" for k in range(n_ell)]
            order += [names.index(a) for a in g]
            shape += [known[a] for a in g]
            continue
        order += [names.index(a) for a in g if a != "1" and a in names]
        shape.append(math.prod(known[a] if a != "1" else 1 for a in g))
    new = [a for g in rhs for a in (g if g != ["..."] else []) if a not in names and a != "1"]
    if new:  # repeat: axes only on the right are broadcast
        base = [known[names[i]] for i in order]
        t = t.permute(order)
        idx, exp = 0, []
        for g in rhs:
            for a in (g if g != ["..."] else [f"...{k}" for k in range(n_ell)]):
                if a == "1":
                    continue
                if a in names:
                    exp.append(base[idx])
                    idx += 1
                else:
                    t = t.unsqueeze(len(exp))
                    exp.append(known[a])
        return t.expand(exp).reshape(shape)
    return t.permute(order).reshape(shape)


def _einops_stand_in():
    mod = types.ModuleType("einops")
    mod.rearrange = _rearrange
    mod.repeat = _rearrange
    mod.__stand_in__ = True
    sys.modules["einops"] = mod


def load(path):
    """mamba_ssm's mamba_chunk_scan_combined from the files under path (see the module doc)."""
    triton_dir, utils_dir = _find(Path(path).resolve())
    try:
        importlib.import_module("einops")
    except ImportError:
        _einops_stand_in()
    for name in [m for m in sys.modules if m == "mamba_ssm" or m.startswith("mamba_ssm.")]:
        del sys.modules[name]
    root = triton_dir.parent.parent if triton_dir.parent.name == "ops" else triton_dir
    _stub_package("mamba_ssm", root)
    _stub_package("mamba_ssm.ops", triton_dir.parent)
    _stub_package("mamba_ssm.ops.triton", triton_dir)
    _stub_package("mamba_ssm.utils", utils_dir)
    mod = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    return mod.mamba_chunk_scan_combined


def bound_autotuning(warmup_ms: float = 5.0, rep_ms: float = 20.0) -> int:
    """Shorter autotuning benchmarks for every autotuned kernel mamba_ssm's SSD modules
    define (Triton's default is 25 ms warm-up, 100 ms of repeats per configuration), and
    the chosen configurations cached on disk. Returns the number of kernels bounded."""
    import triton
    from triton.runtime.autotuner import Autotuner

    def bench(kernel_call, quantiles):
        return triton.testing.do_bench(kernel_call, warmup=warmup_ms, rep=rep_ms,
                                       quantiles=quantiles)

    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    n = 0
    for name in SUBMODULES:
        mod = sys.modules.get(f"mamba_ssm.ops.triton.{name}")
        for obj in vars(mod).values() if mod else ():
            if isinstance(obj, Autotuner):
                if interpret:  # Triton's CPU interpreter (a dry run): one config, no timing
                    obj.configs = obj.configs[:1]
                else:
                    obj._do_bench = bench
                    if hasattr(obj, "cache_results"):
                        obj.cache_results = True
                n += 1
    return n
