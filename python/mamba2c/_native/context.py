"""context.py — per-thread scratch memory, C contexts (thread pools) and backend selection.

Each host thread has one _Scratch (descriptor slots, one options struct, one grads struct,
the SSD backward's cached workspace, the decode step's templates) and one context per
(backend, thread count) — per backend for the GPU backends in host mode, whose results
and costs do not depend on a thread count — created on first use and destroyed with the
thread's state.

CUDA tensors (device mode, see _cuda_context and device_call): one context per (thread,
device index, CUDA stream), bound with mamba2_context_create_cuda to the stream that is
torch's current stream when the call is made.
"""
from __future__ import annotations

import ctypes
import functools
import inspect
import threading

import torch

from . import abi, loader
from .abi import BACKENDS, GPU_BACKENDS, NSLOTS, STATUS_OK, TSZ
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
    """Process-wide default backend of the C calls made for CPU tensors: "cpu" (optimized),
    "ref" (float64 accumulating reference, slow: the oracle), or a GPU backend in host mode,
    "opencl" or "cuda" (each call copies its CPU tensors to the device and the results
    back). float64 inputs always use "ref" (the other backends compute in float32).
    CUDA tensors are not affected: they always run on the CUDA backend's device mode.
    Raises at once when the backend is not available (see _require_backend), e.g.
    "opencl" without an OpenCL driver or device."""
    global _default_backend
    _require_backend(name)
    _default_backend = name


def get_backend() -> str:
    return getattr(_tls, "backend", None) or _default_backend


class use_backend:
    """Context manager: `with mamba2c.use_backend("opencl"): ...` — set_backend for this
    thread only, for the block."""

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
        _tls.cuda_contexts = {}
    return s


def _context(backend: int) -> int:
    nthreads = torch.get_num_threads()  # follow torch's intra-op setting
    # a GPU context is kept whatever the thread count: the OpenCL one compiles its
    # kernels when created (PoCL: seconds), and results never depend on the count
    key = (backend, 0 if backend in GPU_BACKENDS else nthreads)
    ctxs = _tls.contexts
    c = ctxs.get(key)
    if c is None:
        c = ctxs[key] = _Context(backend, nthreads)
    return c.ptr


# ---------------------------------------------------------------------------------------
# CUDA tensors: device-mode contexts and the device of the call being packed
# ---------------------------------------------------------------------------------------
#
# Why a context per (device, stream) and no per-call stream setter in the C API: a CUDA
# context of the library keeps a cache of device buffers whose reuse is safe because every
# call of the context queues on one stream (include/mamba2c.h, "CUDA device mode"); a stream
# that changed between calls would need the library to wait for the old one. torch's own
# streams (the default stream and the per-device pools behind torch.cuda.Stream) live for
# the process, so the keys are few and the handles never dangle. A
# torch.cuda.ExternalStream that its owner destroys is the exception: call
# release_cuda_contexts() before destroying it (the context waits for its stream when it is
# destroyed). At most _CUDA_CONTEXTS_MAX contexts are kept per thread (then all are
# released and the cache starts over).
_CUDA_CONTEXTS_MAX = 64


# The library's scratch of a CUDA call comes from torch's caching allocator, on the
# context's stream (mamba2_context_set_device_allocator): no cache of the library's own per
# (thread, stream) context, and inside torch.cuda.graph the allocations go to the graph's
# pool. The allocator is stream-ordered, so the free at the end of a call is safe for the work
# still queued on that stream. user = the device index. A failing allocation returns NULL:
# the C call then fails with OUT_OF_MEMORY (ctypes callbacks must not raise).
_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_FREE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


def _torch_alloc(user, nbytes, stream):
    try:
        return torch.cuda.caching_allocator_alloc(int(nbytes), device=int(user or 0),
                                                  stream=int(stream or 0))
    except Exception:  # out of memory: the library reports it
        return None


def _torch_free(user, ptr, stream):
    try:
        torch.cuda.caching_allocator_delete(int(ptr))
    except Exception:
        pass


_ALLOC_CB = _ALLOC_FN(_torch_alloc)  # module-level: the C side keeps these pointers
_FREE_CB = _FREE_FN(_torch_free)


class _CudaContext(_Context):
    __slots__ = ()

    def __init__(self, device: int, stream: int):  # noqa: super().__init__ not wanted
        lib = load()
        p = ctypes.c_void_p()
        st = lib.mamba2_context_create_cuda(ctypes.byref(p), int(device), stream or None)
        if st != STATUS_OK:
            _raise_status(st, "mamba2_context_create_cuda")
        self.ptr = p.value
        self.lib = lib
        # index tensors stay on the device (no .cpu() per call, no sync) and scratch comes
        # from torch: together, nothing in a call allocates, copies to / from the host or
        # synchronises, so the call can be captured in a CUDA graph (untested on a GPU)
        st = lib.mamba2_context_set_device_indices(p, 1)
        if st == STATUS_OK:
            st = lib.mamba2_context_set_device_allocator(
                p, ctypes.cast(_ALLOC_CB, ctypes.c_void_p), ctypes.cast(_FREE_CB, ctypes.c_void_p),
                ctypes.c_void_p(int(device) or None))
        if st != STATUS_OK:
            lib.mamba2_context_destroy(p)
            self.ptr = None
            _raise_status(st, "mamba2_context_set_device_allocator")


def _current_stream(index: int) -> int:
    """The CUstream handle of torch's current stream on CUDA device `index` (0: the
    default stream). A function of its own so that tests without a GPU can replace it."""
    return torch.cuda.current_stream(index).cuda_stream


def _device_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _cuda_context(dev: torch.device) -> int:
    """This thread's context for CUDA device `dev` on torch's current stream of it."""
    index = _device_index(dev)
    key = (index, _current_stream(index))
    ctxs = _tls.cuda_contexts
    c = ctxs.get(key)
    if c is None:
        if len(ctxs) >= _CUDA_CONTEXTS_MAX:
            ctxs.clear()
        c = ctxs[key] = _CudaContext(*key)
    return c.ptr


def cuda_backend_ok() -> bool:
    """Whether the library's CUDA backend opens a device-mode context on torch's current
    CUDA device (one is created and destroyed at once); False on any failure."""
    try:
        lib = load()
        p = ctypes.c_void_p()
        st = lib.mamba2_context_create_cuda(ctypes.byref(p), torch.cuda.current_device(),
                                            None)
    except Exception:  # no library, no torch CUDA runtime
        return False
    if st != STATUS_OK:
        return False
    lib.mamba2_context_destroy(p)
    return True


def release_cuda_contexts() -> None:
    """Destroy this thread's CUDA device-mode contexts (each waits for its stream first) and
    the device memory they cache; the next call on a CUDA tensor creates one again."""
    ctxs = getattr(_tls, "cuda_contexts", None)
    if ctxs:
        ctxs.clear()


# the index tensors of the C calls: in a CUDA call, arrays on the call's device (the device
# contexts take device indices; a CPU one is copied to the device by the packer,
# tensors._index_tensor); in a CPU call host arrays (a CUDA one copied to the host)
_INDEX_ARGS = frozenset(("cu_seqlens", "positions", "state_indices", "cache_seqlens"))


def device_call(fn):
    """Decorator of a binding function whose first argument is a tensor: when that tensor
    is on a CUDA device, check that every other tensor argument is on the same device (the
    index tensors may also be on the CPU), and make that device the call's device
    (_tls.device) while fn runs, so that the packers accept its tensors, outputs are
    allocated on it and the call uses its device-mode context (policy._ctx). CPU calls go
    straight to fn: one attribute test."""
    sig = inspect.signature(fn)
    first = next(iter(sig.parameters))

    @functools.wraps(fn)
    def call(*args, **kw):
        t0 = args[0] if args else kw[first]
        if t0.is_cpu or t0.device.type != "cuda":
            return fn(*args, **kw)  # CPU; meta and others: the packers raise DeviceError
        dev = torch.device("cuda", _device_index(t0.device))
        for name, v in sig.bind(*args, **kw).arguments.items():
            if isinstance(v, torch.Tensor) and v.device != dev and not (
                    name in _INDEX_ARGS and v.is_cpu):
                raise loader.DeviceError(
                    f"mamba2c: {name} is on device '{v.device}' but the call's tensors are on "
                    f"'{dev}'; every tensor of a call must be on one device")
        prev = getattr(_tls, "device", None)
        _tls.device = dev
        try:
            return fn(*args, **kw)
        finally:
            _tls.device = prev

    return call


def call_device():
    """The CUDA device of the call being packed on this thread, or None (a CPU call)."""
    return getattr(_tls, "device", None)


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


__all__ = ["set_backend", "get_backend", "use_backend", "release_workspace", "last_call_isa",
           "release_cuda_contexts"]
