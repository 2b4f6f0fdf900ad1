"""_info.py — mamba2c.info(): what this installation runs (`python -m mamba2c` prints it)."""
from __future__ import annotations

import sys


def info(file=None) -> dict:
    """Print and return the package and library versions, the library's path, the default
    backend, the kernel set (ISA) its CPU context picked and the thread count of a call.
    Without the library, says so (with the places the loader tried) instead of raising."""
    import torch

    from . import __version__, _native
    from ._native import loader
    d = {"version": __version__, "torch": torch.__version__}
    if _native.available():
        d["library"] = loader._lib_path
        d["library_version"] = _native.version()
        d["backend"] = _native.get_backend()
        d["isa"] = _native.last_call_isa("cpu")
        d["threads"] = torch.get_num_threads()
    else:
        d["library"] = None
        d["error"] = loader._load_error
    out = file if file is not None else sys.stdout
    print(f"mamba2c {d['version']} (torch {d['torch']})", file=out)
    if d["library"] is None:
        print(f"library: not found\n{d['error']}", file=out)
    else:
        print(f"library: {d['library']} (version {d['library_version']})", file=out)
        print(f"backend: {d['backend']}  isa: {d['isa']}  threads: {d['threads']}", file=out)
    return d
