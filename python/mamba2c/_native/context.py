"""context.py — per-thread scratch memory, C contexts (thread pools) and backend selection.

Each host thread has one _Scratch (descriptor slots, one options struct, one grads struct,
the SSD backward's cached workspace, the decode step's templates) and one context per
(backend, thread count), created on first use and destroyed with the thread's state.
"""
from __future__ import annotations

import ctypes
import threading

import torch

from . import abi, loader
from .abi import BACKENDS, NSLOTS, STATUS_OK, TSZ
from .loader import _raise_status, load

# the largest options and grads structs share one place after the descriptor slots
_OPT_BYTES = max(lay.size for n, lay in abi.LAYOUTS.items() if n.endswith("_options"))
_GRD_BYTES = max(lay.size for n, lay in abi.LAYOUTS.items() if n.endswith("_grads"))


class _Scratch:
    """Per-thread descriptor memory: tensor slots, one options struct, one grads struct."""

    __slots__ = ("buf", "base", "opt_off", "grd_off", "step_plans", "step_last", "step_args",
                 "ws", "ws_size", "ws_query")

    def __init__(self):
        self.ws = None  # the SSD backward's workspace, kept for the next call (see _workspace)
        self.ws_size = 0
        self.ws_query = ctypes.c_size_t(0)
        self.step_plans = {}  # decode-step descriptor templates (see steps.ssd_step)
        self.step_last = (None, None)  # the last (key, plan) used: checked before the dict
        self.opt_off = NSLOTS * TSZ
        self.grd_off = self.opt_off + _OPT_BYTES
        self.buf = ctypes.create_string_buffer(self.grd_off + _GRD_BYTES + 16)
        self.base = ctypes.addressof(self.buf)
        b, S = self.base, abi.SLOT["ssd_step"]
        # mamba2_ssd_step's pointer arguments after ctx: fixed slots of this buffer
        self.step_args = (b + S.state, b + S.out, None, b + S.x, b + S.dt, b + S.A, b + S.B,
                          b + S.C, b + S.options)


class _Context:
    __slots__ = ("ptr", "lib")

    def __init__(self, backend: int, nthreads: int):
        lib = load()
        p = ctypes.c_void_p()
        st = lib.mamba2_context_create(ctypes.byref(p), backend, nthreads)
        if st != STATUS_OK:
            _raise_status(st, "mamba2_context_create")
        self.ptr = p.value
        self.lib = lib

    def __del__(self):
        try:
            if self.ptr:
                self.lib.mamba2_context_destroy(self.ptr)
                self.ptr = None
        except Exception:  # interpreter shutdown
            pass


_tls = threading.local()
_default_backend = "cpu"


def _require_backend(name: str) -> None:
    """Fail now, not at the next op, when `name` is unknown or the loaded library cannot
    run it: ValueError for a name that is no backend, LibraryNotFoundError without the
    library, Mamba2NotImplementedError (a NotImplementedError) for a backend not built in.
    Creates (and keeps) this thread's context for the backend, which its first op uses."""
    if name not in BACKENDS:
        raise ValueError(f"backend is {name!r}; expected one of {sorted(BACKENDS)}")
    load()
    _state()
    try:
        _context(BACKENDS[name])
    except loader.Mamba2Error as e:
        err = type(e)(f"mamba2c: backend {name!r} is not available in {loader._lib_path}: "
                      f"{e}")
        err.status = e.status
        raise err from None


def set_backend(name: str) -> None:
    """Process-wide default backend for the SSD op: "cpu" (optimized) or "ref" (float64
    accumulating reference, slow: the oracle). float64 inputs always use "ref".
    Raises at once when the backend is not available (see _require_backend)."""
    global _default_backend
    _require_backend(name)
    _default_backend = name


def get_backend() -> str:
    return getattr(_tls, "backend", None) or _default_backend


class use_backend:
    """Context manager: `with mamba2c.use_backend("ref"): ...` (this thread only)."""

    def __init__(self, name: str):
        _require_backend(name)  # fails here, not at the first op inside the block
        self.name = name

    def __enter__(self):
        self.prev = getattr(_tls, "backend", None)
        _tls.backend = self.name
        return self

    def __exit__(self, *exc):
        _tls.backend = self.prev
        return False


def _workspace(s: _Scratch, nbytes: int):
    """(pointer, size) of this thread's cached workspace, grown to nbytes: the SSD backward
    needs tens of MiB, which the library would otherwise allocate (and page-fault in) on every
    call. release_workspace() frees it."""
    if nbytes <= 0:
        return None, 0
    if s.ws is None or s.ws_size < nbytes:
        s.ws = None
        s.ws = torch.empty(nbytes, dtype=torch.uint8)
        s.ws_size = nbytes
    return s.ws.data_ptr(), s.ws_size


def release_workspace() -> None:
    """Free this thread's cached SSD workspace (the next backward allocates it again)."""
    s = getattr(_tls, "scratch", None)
    if s is not None:
        s.ws = None
        s.ws_size = 0


def _state() -> _Scratch:
    """This thread's scratch buffer and context cache."""
    s = getattr(_tls, "scratch", None)
    if s is None:
        s = _tls.scratch = _Scratch()
        _tls.contexts = {}
    return s


def _context(backend: int) -> int:
    nthreads = torch.get_num_threads()  # follow torch's intra-op setting
    key = (backend, nthreads)
    ctxs = _tls.contexts
    c = ctxs.get(key)
    if c is None:
        c = ctxs[key] = _Context(backend, nthreads)
    return c.ptr


def _backend_code() -> int:
    """The backend code this thread's calls use (use_backend, else set_backend's)."""
    return BACKENDS[getattr(_tls, "backend", None) or _default_backend]


def last_call_isa(backend: str = "cpu") -> str:
    """The kernel set this thread's context uses ("avx512", "avx2+fma", "scalar" or
    "reference"; at the avx512 level conv1d runs its AVX-512 kernels, the other ops their
    avx2 ones)."""
    _state()
    b = BACKENDS[backend]
    return load().mamba2_context_get_isa(_context(b)).decode()


__all__ = ["set_backend", "get_backend", "use_backend", "release_workspace", "last_call_isa"]
