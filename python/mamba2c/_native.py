"""_native.py — the ctypes binding of libmamba2c (the C library), and nothing else.

This module knows the C ABI (include/mamba2c.h): the descriptor structs, the function
prototypes, the status codes. It turns torch tensors into descriptors and calls the
library; it does not know about autograd or torch.compile (see _custom_ops.py) nor about
mamba_ssm's calling conventions (see interface.py).

Why ctypes and not a C++ extension: the project's language is C, and a C ABI needs no
compiler at install time. The per-call cost is kept low by
  - binding every prototype once at load time (argtypes/restype cached on the CDLL),
  - packing descriptors with one precompiled struct.Struct.pack_into per tensor into a
    per-thread scratch buffer, whose address is computed once (no ctypes.Structure objects
    are built per call),
  - caching one context (thread pool) per (thread, backend, thread count),
  - passing workspace=NULL (the library allocates its scratch for the call).

Layout policy (what is passed zero-copy and what is not), for every tensor argument:
  - A CPU tensor whose last dimension is contiguous (stride 1, or size <= 1) and that has
    the dtype the op computes in is passed as data_ptr + shape + element strides: views
    (slices of Mamba-2's in_proj output, transposes of outer dims, expand()ed outer dims
    with stride 0) are never copied.
  - A last dimension with stride != 1 (e.g. x.transpose(-1, -2), or an expand()ed last
    dim) is copied with .contiguous() first.
  - torch tensors never have negative strides (torch.flip copies); numpy arrays with
    negative strides must be copied by the caller (torch.from_numpy refuses them).
  - Outputs are always allocated here (fresh, contiguous), so an output is never a
    stride-0 broadcast or an overlapping view.
  - dtypes: the C SSD op computes in float32 (CPU and REF backends) or float64 (REF
    backend only). bfloat16/float16 activations that all share one dtype (x, dt, B, C, z,
    and dout for the backward) are passed to the fused SSD op as they are when the backend
    accepts half storage (asked once per backend and dtype, see native_half); otherwise,
    and for every other op, they are converted to float32 for the call and the outputs
    converted back to the input dtype (one copy each way). Parameters (A, D, dt_bias,
    states) are converted to the compute dtype (float32 for half activations) when they
    differ.
  - Devices: only CPU tensors carry data this library can read. A CUDA (or any other
    non-CPU) tensor raises DeviceError (a NotImplementedError); a meta tensor raises
    DeviceError when real computation is requested (shape-only tracing goes through the
    fake implementations in _custom_ops.py instead and never reaches this module).
"""
from __future__ import annotations

import ctypes
import math
import os
import struct
import threading
from pathlib import Path
from typing import Optional, Sequence, Tuple

import torch

__all__ = [
    "Mamba2Error",
    "DeviceError",
    "LibraryNotFoundError",
    "library_path",
    "load",
    "available",
    "has_op",
    "version",
    "ssd_forward",
    "ssd_backward",
    "set_backend",
    "get_backend",
    "use_backend",
    "last_call_isa",
]

# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------

STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_OUT_OF_MEMORY = 3
STATUS_WORKSPACE_TOO_SMALL = 4
STATUS_BACKEND_UNAVAILABLE = 5
STATUS_INTERNAL_ERROR = 6


class Mamba2Error(Exception):
    """Base of every error raised for a failed C call; `.status` is the C status code."""

    status: int = -1


class Mamba2ValueError(Mamba2Error, ValueError):
    """MAMBA2_STATUS_INVALID_ARGUMENT: a shape, stride or value is wrong."""


class Mamba2TypeError(Mamba2Error, TypeError):
    """MAMBA2_STATUS_INVALID_ARGUMENT about a dtype."""


class Mamba2NotImplementedError(Mamba2Error, NotImplementedError):
    """MAMBA2_STATUS_UNSUPPORTED / BACKEND_UNAVAILABLE: valid, but not served here."""


class Mamba2MemoryError(Mamba2Error, MemoryError):
    """MAMBA2_STATUS_OUT_OF_MEMORY."""


class Mamba2RuntimeError(Mamba2Error, RuntimeError):
    """MAMBA2_STATUS_WORKSPACE_TOO_SMALL / INTERNAL_ERROR (a bug: please report)."""


class DeviceError(NotImplementedError):
    """A tensor lives on a device this build cannot compute on (anything but CPU)."""


class LibraryNotFoundError(OSError):
    """libmamba2c could not be located or loaded."""


def _raise_status(status: int, fn: str) -> None:
    msg = _lib.mamba2_last_error().decode("utf-8", "replace")
    text = f"{fn}: {msg}" if msg else f"{fn}: {_lib.mamba2_status_string(status).decode()}"
    if status == STATUS_INVALID_ARGUMENT:
        # The C API has one status for every invalid argument; a dtype complaint is
        # recognised by the message the validator writes ("x has dtype f16; expected ...").
        cls = Mamba2TypeError if " dtype " in msg else Mamba2ValueError
    elif status in (STATUS_UNSUPPORTED, STATUS_BACKEND_UNAVAILABLE):
        cls = Mamba2NotImplementedError
    elif status == STATUS_OUT_OF_MEMORY:
        cls = Mamba2MemoryError
    else:
        cls = Mamba2RuntimeError
    err = cls(text)
    err.status = status
    raise err


# ---------------------------------------------------------------------------------------
# Locating and loading the library
# ---------------------------------------------------------------------------------------

_PKG_DIR = Path(__file__).resolve().parent
_LIB_NAMES = ("libmamba2c.so", "libmamba2c.dylib", "mamba2c.dll")


def _candidates():
    env = os.environ.get("MAMBA2C_LIBRARY")
    if env:
        yield Path(env), "MAMBA2C_LIBRARY"
        return  # an explicit choice is never silently replaced by another library
    repo_build = _PKG_DIR.parent.parent / "build"  # <repo>/python/mamba2c -> <repo>/build
    for name in _LIB_NAMES:
        yield repo_build / name, "repository build/ directory"
    for name in _LIB_NAMES:
        yield _PKG_DIR / "lib" / name, "copy inside the package"


_lib = None
_lib_path: Optional[str] = None
_load_error: Optional[str] = None
_load_lock = threading.Lock()


def library_path() -> Optional[str]:
    """Path of the loaded library (loads it if needed); None when not found."""
    return _lib_path if load(raise_on_error=False) else None


def load(raise_on_error: bool = True):
    """Load libmamba2c once. Search order: $MAMBA2C_LIBRARY; <repo>/build/; mamba2c/lib/."""
    global _lib, _lib_path, _load_error
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is None and _load_error is None:
            tried = []
            for path, why in _candidates():
                if not path.is_file():
                    tried.append(f"{path} ({why}: not found)")
                    continue
                try:
                    lib = ctypes.CDLL(str(path))
                    _bind(lib)
                except (OSError, AttributeError) as e:
                    tried.append(f"{path} ({why}: {e})")
                    continue
                _HAS_OP.update({op: all(hasattr(lib, sym) for sym in syms)
                                for op, syms in _OPTIONAL_SYMBOLS.items()})
                _HAS_OP["ssd"] = True
                _lib, _lib_path = lib, str(path)
                break
            if _lib is None:
                _load_error = (
                    "libmamba2c was not found. Build it with\n"
                    "  cmake -S <repo> -B <repo>/build -DCMAKE_BUILD_TYPE=Release && "
                    "cmake --build <repo>/build\n"
                    "or point MAMBA2C_LIBRARY at the shared library. Tried:\n  "
                    + "\n  ".join(tried)
                )
    if _lib is None and raise_on_error:
        raise LibraryNotFoundError(_load_error)
    return _lib


def available() -> bool:
    """True when the C library can be loaded."""
    return load(raise_on_error=False) is not None


def version() -> str:
    return load().mamba2_version_string().decode()


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_reuse_applied = False


def reuse_freed_memory() -> bool:
    """Let freed large blocks be reused by the next allocation instead of being unmapped.

    torch allocates CPU tensors with the C heap. glibc serves blocks above its mmap threshold
    (at most 32 MiB, dynamic) with fresh mappings and unmaps them on free, so every call that
    allocates a large output pays the kernel's page faults again — zeroing each page and
    charging it — for every output and gradient. On the dev VM that is ~12 ms of the 35 ms a
    [4,2048,16,64,128] forward takes through the binding (23 ms in C), and 55 ms of the 165 ms
    of forward + backward through autograd (110 ms in C). This sets glibc's mmap threshold to
    1 GiB and its trim threshold to 2 GiB, the largest mallopt takes (process-wide, for every library in the process,
    and not undone): blocks up to 1 GiB stay in the heap after free and are handed out again
    without faults; the process keeps its peak heap instead of returning it to the OS.
    The same as starting Python with MALLOC_MMAP_THRESHOLD_=1073741824
    MALLOC_TRIM_THRESHOLD_=2147483647, or with jemalloc/tcmalloc preloaded. Also applied at
    import when the environment has MAMBA2C_REUSE_FREED_MEMORY=1.
    Returns True when applied (glibc), False otherwise (another C library: nothing changed)."""
    global _reuse_applied
    if _reuse_applied:
        return True
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        if not hasattr(libc, "gnu_get_libc_version"):
            return False
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _reuse_applied = (mallopt(_M_MMAP_THRESHOLD, 1 << 30) == 1
                      and mallopt(_M_TRIM_THRESHOLD, (1 << 31) - 1) == 1)
    return _reuse_applied


if os.environ.get("MAMBA2C_REUSE_FREED_MEMORY") == "1":
    reuse_freed_memory()


_VP = ctypes.c_void_p


def _bind(lib) -> None:
    """Set argtypes/restype of every entry point once (ctypes then converts cheaply)."""
    sz = ctypes.c_size_t
    i32 = ctypes.c_int32
    protos = {
        "mamba2_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "mamba2_last_error": (ctypes.c_char_p, []),
        "mamba2_version_string": (ctypes.c_char_p, []),
        "mamba2_context_create": (ctypes.c_int, [_VP, ctypes.c_int, i32]),
        "mamba2_context_destroy": (None, [_VP]),
        "mamba2_context_set_num_threads": (ctypes.c_int, [_VP, i32]),
        "mamba2_context_get_num_threads": (i32, [_VP]),
        "mamba2_context_get_isa": (ctypes.c_char_p, [_VP]),
        "mamba2_context_force_isa": (ctypes.c_int, [_VP, ctypes.c_char_p]),
        # ctx, out, final_state, x, dt, A, Bm, Cm, opts, workspace, workspace_size
        "mamba2_ssd_forward": (ctypes.c_int, [_VP] * 10 + [sz]),
        # ctx, grads, dout, dfinal_state, x, dt, A, Bm, Cm, opts, workspace, workspace_size
        "mamba2_ssd_backward": (ctypes.c_int, [_VP] * 11 + [sz]),
        # ctx, grads, dout, dfinal_state, x, dt, A, Bm, Cm, opts, size_t *workspace_size
        "mamba2_ssd_backward_workspace_size": (ctypes.c_int, [_VP] * 11),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    # Ops that newer libraries export (SPEC §4-§6): bound when present, see has_op().
    optional = {
        # ctx, out, rstd, x, z, weight, bias, opts, workspace, workspace_size
        "mamba2_rmsnorm_gated_forward": [_VP] * 9 + [sz],
        # ctx, grads, dout, x, z, weight, bias, rstd, opts, workspace, workspace_size
        "mamba2_rmsnorm_gated_backward": [_VP] * 10 + [sz],
        # ctx, out, final_conv_state, x, weight, opts
        "mamba2_conv1d_forward": [_VP] * 6,
        # ctx, grads, dout, dfinal_conv_state, x, weight, opts, workspace, workspace_size
        "mamba2_conv1d_backward": [_VP] * 8 + [sz],
        # ctx, out, conv_cache, x, weight, opts
        "mamba2_conv1d_step": [_VP] * 6,
        # ctx, state_cache, out, all_states, x, dt, A, Bm, Cm, opts
        "mamba2_ssd_step": [_VP] * 10,
        # ctx, out, final_state, position_states, x, dt, A, Bm, Cm, opts, workspace, size
        "mamba2_ssd_forward_states": [_VP] * 11 + [sz],
        # the staged pipeline (forward only): see chunked_* below
        "mamba2_ssd_chunk_cumsum": [_VP] * 6,      # ctx, dt_out, dA_cumsum, dt, A, opts
        "mamba2_ssd_bmm_chunk": [_VP] * 5,         # ctx, CB, Bm, Cm, opts
        "mamba2_ssd_chunk_state": [_VP] * 7,       # ctx, states, x, Bm, dt_out, dA_cumsum, opts
        "mamba2_ssd_state_passing": [_VP] * 6,     # ctx, states_start, final, states, dA_cs, opts
        # ctx, out, CB, x, dt_out, dA_cumsum, Cm, states_start, opts
        "mamba2_ssd_chunk_scan": [_VP] * 9,
    }
    for name, args in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = args
    _check_abi(lib)


# Optional C ops that do not exist yet (SPEC §3-§6). has_op() reports whether the loaded
# library exports them, so ops.py can switch from its torch implementation to the C op
# without any change to the public Python API.
_OPTIONAL_SYMBOLS = {
    "conv1d": ("mamba2_conv1d_forward", "mamba2_conv1d_backward"),
    "rmsnorm_gated": ("mamba2_rmsnorm_gated_forward", "mamba2_rmsnorm_gated_backward"),
    "ssd_step": ("mamba2_ssd_step",),
    "conv1d_step": ("mamba2_conv1d_step",),
    "ssd_states": ("mamba2_ssd_forward_states",),
    "ssd_chunked": ("mamba2_ssd_chunk_cumsum", "mamba2_ssd_bmm_chunk", "mamba2_ssd_chunk_state",
                    "mamba2_ssd_state_passing", "mamba2_ssd_chunk_scan"),
}


_HAS_OP: dict = {}  # filled once at load: a plain dict lookup is cheap and traceable


def has_op(name: str) -> bool:
    """Whether the loaded C library exports the op `name` (ssd, conv1d, rmsnorm_gated, ...)."""
    if _lib is None and load(raise_on_error=False) is None:
        return False
    return _HAS_OP.get(name, False)


# ---------------------------------------------------------------------------------------
# Descriptor layout (must match include/mamba2c.h; checked against ctypes.Structure once)
# ---------------------------------------------------------------------------------------

MAX_RANK = 6
DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_I64 = range(6)
_TORCH_DTYPE = {
    torch.float32: DT_F32,
    torch.float64: DT_F64,
    torch.bfloat16: DT_BF16,
    torch.float16: DT_F16,
    torch.int32: DT_I32,
    torch.int64: DT_I64,
}

BACKEND_CPU, BACKEND_REF, BACKEND_CUDA = 0, 1, 2
_BACKENDS = {"cpu": BACKEND_CPU, "ref": BACKEND_REF, "reference": BACKEND_REF, "cuda": BACKEND_CUDA}


class _TensorStruct(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_RANK),
        ("stride", ctypes.c_int64 * MAX_RANK),
    ]


class _OptionsStruct(ctypes.Structure):
    _fields_ = [
        ("chunk_size", ctypes.c_int64),
        ("D", ctypes.c_void_p),
        ("z", ctypes.c_void_p),
        ("dt_bias", ctypes.c_void_p),
        ("initial_state", ctypes.c_void_p),
        ("cu_seqlens", ctypes.c_void_p),
        ("state_positions", ctypes.c_void_p),
        ("dt_softplus", ctypes.c_int32),
        ("dt_limit_lo", ctypes.c_double),
        ("dt_limit_hi", ctypes.c_double),
        ("out_x", ctypes.c_void_p),
    ]


class _GradsStruct(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in
                ("dx", "ddt", "dA", "dBm", "dCm", "dD", "dz", "ddt_bias", "dinitial_state")]


# Native alignment ('@'), the same rules the C compiler applies to these structs.
_T = struct.Struct("@Pii6q6q")
_O = struct.Struct("@q6PiddP")  # chunk_size, D, z, dt_bias, initial_state, cu_seqlens,
#                                  state_positions, dt_softplus, dt_limit_lo, dt_limit_hi, out_x
_G = struct.Struct("@9P")
_SO = struct.Struct("@4Pidd")  # mamba2_ssd_step_options_t: D, z, dt_bias, state_indices,
#                                 dt_softplus, dt_limit_lo, dt_limit_hi
_TSZ = _T.size
_NSLOTS = 24  # tensor descriptor slots per call (the SSD backward uses 23)


def _check_abi(lib) -> None:
    if (_T.size, _O.size, _G.size) != (ctypes.sizeof(_TensorStruct), ctypes.sizeof(_OptionsStruct),
                                       ctypes.sizeof(_GradsStruct)):
        raise OSError("mamba2c: descriptor layout mismatch between struct and ctypes packing")
    # Cross-check our tensor packing against the library's own constructor.
    make = lib.mamba2_tensor_make_strided
    make.restype = _TensorStruct
    make.argtypes = [_VP, ctypes.c_int, ctypes.c_int32, _VP, _VP]
    shp = (ctypes.c_int64 * 2)(3, 5)
    std = (ctypes.c_int64 * 2)(7, 1)
    t = make(ctypes.c_void_p(0x1000), DT_F64, 2, ctypes.addressof(shp), ctypes.addressof(std))
    mine = _T.pack(0x1000, DT_F64, 2, 3, 5, 0, 0, 0, 0, 7, 1, 0, 0, 0, 0)
    if bytes(t) != mine:
        raise OSError("mamba2c: mamba2_tensor_t layout differs from the binding's packing")
    # Option structs: compare each library default against our packing of the same values.
    # The return buffer is 256 bytes whatever the struct's size, so a library whose struct
    # grew cannot write past it (structs over 16 bytes are returned through a caller-owned
    # buffer on the x86-64 and AArch64 ABIs); only the first bytes are compared. A field
    # appended at the end with an all-zero default would go unnoticed — see README
    # ("C API requests": a struct-size query).
    checks = [("mamba2_ssd_options_default", _O.pack(256, 0, 0, 0, 0, 0, 0, 0, 0.0, math.inf, 0)),
              ("mamba2_ssd_step_options_default", _SO.pack(0, 0, 0, 0, 0, 0.0, math.inf)),
              ("mamba2_conv1d_options_default", _CO.pack(0, 0, 0, 0)),
              ("mamba2_conv1d_step_options_default", _CS.pack(0, 0, 0)),
              ("mamba2_rmsnorm_gated_options_default", _RO.pack(1e-5, 0, 0))]
    for name, want in checks:
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = _Ret256
        fn.argtypes = []
        got = bytes(fn())[:len(want)]
        if got != want:
            raise OSError(f"mamba2c: the struct returned by {name} differs from the binding's "
                          f"packing (library and binding built from different headers)")


class _Ret256(ctypes.Structure):
    _fields_ = [("b", ctypes.c_ubyte * 256)]


class _Scratch:
    """Per-thread descriptor memory: tensor slots, one options struct, one grads struct."""

    __slots__ = ("buf", "base", "opt_off", "grd_off", "step_plans", "step_last", "step_args",
                 "ws", "ws_size", "ws_query")

    def __init__(self):
        self.ws = None  # the SSD backward's workspace, kept for the next call (see _workspace)
        self.ws_size = 0
        self.ws_query = ctypes.c_size_t(0)
        self.step_plans = {}  # decode-step descriptor templates (see ssd_step)
        self.step_last = (None, None)  # the last (key, plan) used: checked before the dict
        self.opt_off = _NSLOTS * _TSZ
        self.grd_off = self.opt_off + _O.size
        self.buf = ctypes.create_string_buffer(self.grd_off + _G.size + 16)
        self.base = ctypes.addressof(self.buf)
        b, t = self.base, _TSZ
        # mamba2_ssd_step's pointer arguments after ctx: fixed slots of this buffer
        self.step_args = (b, b + t, None, b + 3 * t, b + 4 * t, b + 5 * t, b + 6 * t, b + 7 * t,
                          b + 12 * t)


# ---------------------------------------------------------------------------------------
# Contexts and backend selection
# ---------------------------------------------------------------------------------------


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


def set_backend(name: str) -> None:
    """Process-wide default backend for the SSD op: "cpu" (optimized) or "ref" (float64
    accumulating reference, slow: the oracle). float64 inputs always use "ref"."""
    global _default_backend
    if name not in _BACKENDS:
        raise ValueError(f"backend is {name!r}; expected one of {sorted(_BACKENDS)}")
    _default_backend = name


def get_backend() -> str:
    return getattr(_tls, "backend", None) or _default_backend


class use_backend:
    """Context manager: `with mamba2c.use_backend("ref"): ...` (this thread only)."""

    def __init__(self, name: str):
        if name not in _BACKENDS:
            raise ValueError(f"backend is {name!r}; expected one of {sorted(_BACKENDS)}")
        self.name = name

    def __enter__(self):
        self.prev = getattr(_tls, "backend", None)
        _tls.backend = self.name
        return self

    def __exit__(self, *exc):
        _tls.backend = self.prev
        return False


def _workspace(s: "_Scratch", nbytes: int):
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


def _state():
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


def last_call_isa(backend: str = "cpu") -> str:
    """The kernel set this thread's context uses ("avx512", "avx2+fma", "scalar" or
    "reference"; at the avx512 level conv1d runs its AVX-512 kernels, the other ops their
    avx2 ones)."""
    _state()
    b = _BACKENDS[backend]
    return load().mamba2_context_get_isa(_context(b)).decode()


# ---------------------------------------------------------------------------------------
# Tensor preparation
# ---------------------------------------------------------------------------------------

_ZEROS = (0,) * MAX_RANK


def _check_device(name: str, t: torch.Tensor) -> None:
    dev = t.device.type
    if dev == "cpu":
        return
    if dev == "meta":
        raise DeviceError(
            f"mamba2c: {name} is a meta tensor; the C library needs real data. (Shape-only "
            f"tracing works through torch.compile / FakeTensor, which use the fake kernels.)")
    raise DeviceError(
        f"mamba2c: {name} is on device '{t.device}'; this build of mamba2c computes on CPU "
        f"tensors only (no {dev} backend is built in). Move the tensors to the CPU.")


def compute_dtype(*acts: Optional[torch.Tensor]) -> torch.dtype:
    """The dtype the SSD op computes in for these activations: float64 if any is float64
    (reference backend), else float32 (bfloat16/float16 compute in float32; the fused SSD
    op may still receive them as stored, see native_half)."""
    for a in acts:
        if a is not None and a.dtype == torch.float64:
            return torch.float64
    return torch.float32


# bfloat16/float16 activation storage for the fused SSD op. The C library decides which
# backends accept it (include/mamba2c.h); until one does, the binding widens to float32 as
# before. native_half: None = ask each backend once (a tiny call; UNSUPPORTED -> widen),
# False = always widen, True = pass half tensors without asking (errors surface as raised).
native_half: Optional[bool] = None
_HALF_CODES = {torch.bfloat16: DT_BF16, torch.float16: DT_F16}
_half_ok: dict = {}  # (backend, dtype code) -> bool, filled by _probe_half


def _probe_half(backend: int, code: int) -> bool:
    """Does `backend` run mamba2_ssd_forward on activations of dtype `code` (DT_BF16/DT_F16)?
    One [1,1,1,1] call, remembered per (backend, code) for the process."""
    key = (backend, code)
    ok = _half_ok.get(key)
    if ok is None:
        lib = load()
        s = _state()
        tdt = torch.bfloat16 if code == DT_BF16 else torch.float16
        t = {k: torch.zeros(1, 1, 1, 1, dtype=tdt) for k in ("out", "x", "B", "C")}
        t["dt"] = torch.full((1, 1, 1), 0.05, dtype=tdt)
        t["fin"] = torch.zeros(1, 1, 1, 1, dtype=torch.float32)
        t["A"] = torch.full((1,), -0.5, dtype=torch.float32)
        order = ("out", "fin", "x", "dt", "A", "B", "C")
        for i, k in enumerate(order):
            _out_desc(s.buf, i * _TSZ, t[k], _TORCH_DTYPE[t[k].dtype])
        popt = _options(s, [], 7, 1, None, None, None, None, None, False, 0.0, math.inf,
                        torch.float32, DT_F32)
        try:
            st = lib.mamba2_ssd_forward(_context(backend), *[s.base + i * _TSZ for i in range(7)],
                                        popt, None, 0)
        except Exception:  # e.g. a backend that cannot create a context
            st = -1
        ok = _half_ok[key] = st == STATUS_OK
    return ok


def _half_code(backend: int, *acts: Optional[torch.Tensor]) -> int:
    """DT_BF16/DT_F16 when every given activation has that one half dtype and the backend
    accepts it for the SSD op (see native_half); else 0 (widen to float32)."""
    if native_half is False:
        return 0
    dt = acts[0].dtype
    code = _HALF_CODES.get(dt)
    if code is None:
        return 0
    for a in acts[1:]:
        if a is not None and a.dtype is not dt:
            return 0
    if native_half is True or _probe_half(backend, code):
        return code
    return 0


def _backend_for(cdtype: torch.dtype) -> int:
    b = _BACKENDS[get_backend()]
    if cdtype == torch.float64 and b == BACKEND_CPU:
        return BACKEND_REF  # the CPU backend is float32 only; f64 is the reference's job
    return b


def _cu_prep(cu: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    if cu is None:
        return None
    if cu.device.type != "cpu":
        _check_device("cu_seqlens", cu)
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"mamba2c: cu_seqlens has dtype {cu.dtype}; expected int32 or int64")
    return cu.contiguous()


# ---------------------------------------------------------------------------------------
# SSD forward / backward
# ---------------------------------------------------------------------------------------


def _desc(buf, off: int, name: str, t: torch.Tensor, dtype: torch.dtype, code: int) -> torch.Tensor:
    """Pack the descriptor of `t` (converted per the layout policy) at byte offset `off`;
    return the tensor actually described, which the caller keeps alive over the C call."""
    if not t.is_cpu:
        _check_device(name, t)
    if t.dtype is not dtype:
        if not t.dtype.is_floating_point:
            raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected a floating-point tensor")
        t = t.to(dtype)
    sh = t.shape
    st = t.stride()
    r = len(sh)
    if r and sh[-1] > 1 and st[-1] != 1:
        t = t.contiguous()
        st = t.stride()
    _T.pack_into(buf, off, t.data_ptr(), code, r, *sh, *_ZEROS[r:], *st, *_ZEROS[r:])
    return t


def _out_desc(buf, off: int, t: torch.Tensor, code: int) -> None:
    """Descriptor of a fresh contiguous output allocated here."""
    sh = t.shape
    r = len(sh)
    _T.pack_into(buf, off, t.data_ptr(), code, r, *sh, *_ZEROS[r:], *t.stride(), *_ZEROS[r:])


def _options(s: "_Scratch", keep: list, slot: int, chunk_size, D, z, dt_bias, init, cu,
             dt_softplus, dt_lo, dt_hi, cdtype, code, positions=None, zdtype=None,
             zcode=None, out_x=None) -> int:
    """Pack the optional tensors (slots slot..slot+6) and the options struct. z and out_x,
    activations, are described in (zdtype, zcode) when given (half storage), else like the
    parameters in (cdtype, code)."""
    buf, base = s.buf, s.base
    pD = pz = pb = pi = pc = pp = px = 0
    if D is not None:
        keep.append(_desc(buf, slot * _TSZ, "D", D, cdtype, code))
        pD = base + slot * _TSZ
    if z is not None:
        keep.append(_desc(buf, (slot + 1) * _TSZ, "z", z, zdtype or cdtype,
                          code if zcode is None else zcode))
        pz = base + (slot + 1) * _TSZ
    if dt_bias is not None:
        keep.append(_desc(buf, (slot + 2) * _TSZ, "dt_bias", dt_bias, cdtype, code))
        pb = base + (slot + 2) * _TSZ
    if init is not None:
        keep.append(_desc(buf, (slot + 3) * _TSZ, "initial_states", init, cdtype, code))
        pi = base + (slot + 3) * _TSZ
    if cu is not None:
        cu = _cu_prep(cu)
        keep.append(cu)
        _out_desc(buf, (slot + 4) * _TSZ, cu, _TORCH_DTYPE[cu.dtype])
        pc = base + (slot + 4) * _TSZ
    if positions is not None:
        keep.append(_index_desc(buf, (slot + 5) * _TSZ, positions, "state_positions"))
        pp = base + (slot + 5) * _TSZ
    if out_x is not None:
        keep.append(_desc(buf, (slot + 6) * _TSZ, "out_x", out_x, zdtype or cdtype,
                          code if zcode is None else zcode))
        px = base + (slot + 6) * _TSZ
    _O.pack_into(buf, s.opt_off, int(chunk_size), pD, pz, pb, pi, pc, pp, 1 if dt_softplus else 0,
                 float(dt_lo), float(dt_hi), px)
    return base + s.opt_off


_F64 = torch.float64
_F32 = torch.float32


def _cdtype(x, dt, B, C, z) -> torch.dtype:
    if (x.dtype is _F64 or dt.dtype is _F64 or B.dtype is _F64 or C.dtype is _F64
            or (z is not None and z.dtype is _F64)):
        return _F64
    return _F32


def ssd_forward(x, dt, A, B, C, chunk_size: int, D=None, z=None, dt_bias=None,
                initial_states=None, cu_seqlens=None, dt_softplus: bool = False,
                dt_lo: float = 0.0, dt_hi: float = math.inf, return_out_x: bool = False):
    """One call of mamba2_ssd_forward. Returns (out [B,L,H,P] in x.dtype,
    final_state [S,H,P,N] in the parameter dtype: float32, or float64 for float64 input).
    return_out_x: also return out_x [B,L,H,P] in x.dtype, the output before the z gate
    (y + D x; options.out_x), which ssd_backward(out_x=...) takes instead of recomputing y
    for dz — (out, final_state, out_x); out_x is None (not allocated) without z.
    No autograd here (see _custom_ops.py)."""
    r = _ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                     dt_softplus, dt_lo, dt_hi, None, return_out_x)
    return (r[0], r[1], r[3]) if return_out_x else (r[0], r[1])


def ssd_forward_states(x, dt, A, B, C, chunk_size: int, positions: torch.Tensor, D=None, z=None,
                       dt_bias=None, initial_states=None, cu_seqlens=None,
                       dt_softplus: bool = False, dt_lo: float = 0.0, dt_hi: float = math.inf,
                       return_out_x: bool = False):
    """One call of mamba2_ssd_forward_states: ssd_forward plus position_states [npos,H,P,N]
    (parameter dtype), the state after each flat token index positions[i] (b*L + t; the
    packed index with cu_seqlens), strictly increasing, int32/int64. Returns
    (out, final_state, position_states), plus out_x (None without z) with return_out_x."""
    r = _ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                     dt_softplus, dt_lo, dt_hi, positions, return_out_x)
    return r if return_out_x else r[:3]


def _ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                 dt_softplus, dt_lo, dt_hi, positions, want_out_x=False):
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _cdtype(x, dt, B, C, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    backend = _backend_for(cdtype)
    buf, base = s.buf, s.base
    # activations: x's half dtype as is when the backend takes it, else the compute dtype
    acode = _half_code(backend, x, dt, B, C, z) if x.dtype in _HALF_CODES else 0
    adtype, acode = (x.dtype, acode) if acode else (cdtype, code)
    if x.dim() != 4 or B.dim() != 4:
        raise Mamba2ValueError(f"mamba2c: x must be [B,L,H,P] and B [B,L,G,N]; got x "
                               f"{tuple(x.shape)}, B {tuple(B.shape)}")
    Bsz, L, H, P = x.shape
    N = B.shape[3]
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    out = torch.empty(Bsz, L, H, P, dtype=adtype)
    final = torch.empty(S, H, P, N, dtype=cdtype)
    _out_desc(buf, 0, out, acode)
    _out_desc(buf, _TSZ, final, code)
    # out_x (the output before the gate) only helps the backward with z: else not allocated
    out_x = torch.empty(Bsz, L, H, P, dtype=adtype) if want_out_x and z is not None else None
    keep = [_desc(buf, 2 * _TSZ, "x", x, adtype, acode),
            _desc(buf, 3 * _TSZ, "dt", dt, adtype, acode),
            _desc(buf, 4 * _TSZ, "A", A, cdtype, code),
            _desc(buf, 5 * _TSZ, "B", B, adtype, acode),
            _desc(buf, 6 * _TSZ, "C", C, adtype, acode)]
    p_o = _options(s, keep, 7, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                   dt_softplus, dt_lo, dt_hi, cdtype, code, positions, adtype, acode, out_x)
    ctx = _context(backend)
    pos_states = None
    if positions is None:
        st = lib.mamba2_ssd_forward(ctx, base, base + _TSZ, base + 2 * _TSZ,
                                    base + 3 * _TSZ, base + 4 * _TSZ, base + 5 * _TSZ,
                                    base + 6 * _TSZ, p_o, None, 0)
        fname = "mamba2_ssd_forward"
    else:
        if not has_op("ssd_states"):
            raise Mamba2NotImplementedError("mamba2c: the loaded library has no "
                                            "mamba2_ssd_forward_states")
        pos_states = torch.empty(positions.shape[0], H, P, N, dtype=cdtype)
        _out_desc(buf, 14 * _TSZ, pos_states, code)  # 7..13: the options' tensors
        st = lib.mamba2_ssd_forward_states(ctx, base, base + _TSZ, base + 14 * _TSZ,
                                           base + 2 * _TSZ, base + 3 * _TSZ, base + 4 * _TSZ,
                                           base + 5 * _TSZ, base + 6 * _TSZ, p_o, None, 0)
        fname = "mamba2_ssd_forward_states"
    if st:
        _raise_status(st, fname)
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)  # bf16/f16 storage: computed in f32, rounded once here
        if out_x is not None:
            out_x = out_x.to(x.dtype)  # like out (mamba_ssm saves it in x.dtype too)
    return out, final, pos_states, out_x


# Gradient order everywhere in the package (matches mamba2_ssd_grads_t).
GRAD_NAMES = ("dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states")
_ACT_GRADS = frozenset((0, 1, 3, 4, 6))  # dx, ddt, dB, dC, dz: stored like the activations


def ssd_backward(dout, dfinal, x, dt, A, B, C, chunk_size: int, D=None, z=None, dt_bias=None,
                 initial_states=None, cu_seqlens=None, dt_softplus: bool = False,
                 dt_lo: float = 0.0, dt_hi: float = math.inf,
                 needs: Sequence[bool] = (True,) * 9,
                 out_x: Optional[torch.Tensor] = None) -> Tuple[Optional[torch.Tensor], ...]:
    """One call of mamba2_ssd_backward. `needs` selects gradients in GRAD_NAMES order (a
    gradient of an absent optional input is never computed). Returns 9 entries, None where
    not computed; each gradient has the dtype of its input. out_x: the forward's out_x for
    the same inputs (ssd_forward(return_out_x=True)); with z, the C backward reads it
    instead of recomputing y for dz (ignored without z)."""
    if z is None:
        out_x = None
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _cdtype(x, dt, B, C, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    backend = _backend_for(cdtype)
    buf, base = s.buf, s.base
    acode = _half_code(backend, x, dt, B, C, z, dout) if x.dtype in _HALF_CODES else 0
    adtype, acode = (x.dtype, acode) if acode else (cdtype, code)
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    grads = [None] * 9
    ptrs = [0] * 9
    for i in range(9):
        t = inputs[i]
        if needs[i] and t is not None:
            act = i in _ACT_GRADS  # dx, ddt, dB, dC, dz: the activation dtype
            g = torch.empty(t.shape, dtype=adtype if act else cdtype)
            grads[i] = g
            _out_desc(buf, i * _TSZ, g, acode if act else code)
            ptrs[i] = base + i * _TSZ
    _G.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, 9 * _TSZ, "dout", dout, adtype, acode)]
    p_df = 0
    if dfinal is not None:
        keep.append(_desc(buf, 10 * _TSZ, "dfinal_states", dfinal, cdtype, code))
        p_df = base + 10 * _TSZ
    keep += [_desc(buf, 11 * _TSZ, "x", x, adtype, acode),
             _desc(buf, 12 * _TSZ, "dt", dt, adtype, acode),
             _desc(buf, 13 * _TSZ, "A", A, cdtype, code),
             _desc(buf, 14 * _TSZ, "B", B, adtype, acode),
             _desc(buf, 15 * _TSZ, "C", C, adtype, acode)]
    p_o = _options(s, keep, 16, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                   dt_softplus, dt_lo, dt_hi, cdtype, code, None, adtype, acode, out_x)
    ctx = _context(backend)
    args = (ctx, base + s.grd_off, base + 9 * _TSZ, p_df, base + 11 * _TSZ, base + 12 * _TSZ,
            base + 13 * _TSZ, base + 14 * _TSZ, base + 15 * _TSZ, p_o)
    st = lib.mamba2_ssd_backward_workspace_size(*args, ctypes.addressof(s.ws_query))
    if st:
        _raise_status(st, "mamba2_ssd_backward")
    ws, ws_size = _workspace(s, s.ws_query.value)
    st = lib.mamba2_ssd_backward(*args, ws, ws_size)
    if st:
        _raise_status(st, "mamba2_ssd_backward")
    for i in range(9):
        g = grads[i]
        if g is not None and g.dtype is not inputs[i].dtype:
            grads[i] = g.to(inputs[i].dtype)
    return tuple(grads)


# ---------------------------------------------------------------------------------------
# Gated RMSNorm (SPEC §5) — mamba2_rmsnorm_gated_forward / _backward
# ---------------------------------------------------------------------------------------

_RO = struct.Struct("@dqi")   # mamba2_rmsnorm_gated_options_t: eps, group_size, norm_before_gate
_G4 = struct.Struct("@4P")    # the 4-pointer grads structs of rmsnorm and conv1d


def _act_dtype(*ts) -> torch.dtype:
    for t in ts:
        if t is not None and t.dtype is _F64:
            return _F64
    return _F32


def rmsnorm_gated_forward(x, z, weight, bias, eps: float, group_size: int,
                          norm_before_gate: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """x, z [M,D] (row stride free); returns (out [M,D] in x.dtype, rstd [M,D/group_size])."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _act_dtype(x, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    M, D = x.shape
    gs = D if not group_size else int(group_size)
    out = torch.empty(M, D, dtype=cdtype)
    rstd = torch.empty(M, D // gs if gs and D % gs == 0 else 1, dtype=cdtype)
    _out_desc(buf, 0, out, code)
    _out_desc(buf, _TSZ, rstd, code)
    keep = [_desc(buf, 2 * _TSZ, "x", x, cdtype, code),
            _desc(buf, 4 * _TSZ, "weight", weight, cdtype, code)]
    pz = pb = 0
    if z is not None:
        keep.append(_desc(buf, 3 * _TSZ, "z", z, cdtype, code))
        pz = base + 3 * _TSZ
    if bias is not None:
        keep.append(_desc(buf, 5 * _TSZ, "bias", bias, cdtype, code))
        pb = base + 5 * _TSZ
    _RO.pack_into(buf, s.opt_off, float(eps), int(group_size or 0), 1 if norm_before_gate else 0)
    st = lib.mamba2_rmsnorm_gated_forward(_context(_backend_for(cdtype)), base, base + _TSZ,
                                          base + 2 * _TSZ, pz, base + 4 * _TSZ, pb,
                                          base + s.opt_off, None, 0)
    if st:
        _raise_status(st, "mamba2_rmsnorm_gated_forward")
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)
    return out, rstd


def rmsnorm_gated_backward(dout, x, z, weight, bias, rstd, eps: float, group_size: int,
                           norm_before_gate: bool, needs=(True, True, True, True)):
    """Returns (dx, dz, dweight, dbias), None where not requested / not applicable."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _act_dtype(x, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    inputs = (x, z, weight, bias)
    grads = [None] * 4
    ptrs = [0] * 4
    for i in range(4):
        t = inputs[i]
        if needs[i] and t is not None:
            grads[i] = torch.empty(t.shape, dtype=cdtype)
            _out_desc(buf, i * _TSZ, grads[i], code)
            ptrs[i] = base + i * _TSZ
    _G4.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, 4 * _TSZ, "dout", dout, cdtype, code),
            _desc(buf, 5 * _TSZ, "x", x, cdtype, code),
            _desc(buf, 7 * _TSZ, "weight", weight, cdtype, code)]
    pz = pb = pr = 0
    if z is not None:
        keep.append(_desc(buf, 6 * _TSZ, "z", z, cdtype, code))
        pz = base + 6 * _TSZ
    if bias is not None:
        keep.append(_desc(buf, 8 * _TSZ, "bias", bias, cdtype, code))
        pb = base + 8 * _TSZ
    if rstd is not None:
        keep.append(_desc(buf, 9 * _TSZ, "rstd", rstd, cdtype, code))
        pr = base + 9 * _TSZ
    _RO.pack_into(buf, s.opt_off, float(eps), int(group_size or 0), 1 if norm_before_gate else 0)
    st = lib.mamba2_rmsnorm_gated_backward(_context(_backend_for(cdtype)), base + s.grd_off,
                                           base + 4 * _TSZ, base + 5 * _TSZ, pz, base + 7 * _TSZ,
                                           pb, pr, base + s.opt_off, None, 0)
    if st:
        _raise_status(st, "mamba2_rmsnorm_gated_backward")
    for i in range(4):
        g = grads[i]
        if g is not None and g.dtype is not inputs[i].dtype:
            grads[i] = g.to(inputs[i].dtype)
    return tuple(grads)


# ---------------------------------------------------------------------------------------
# Causal conv1d (SPEC §4) and its decode step (SPEC §6)
# ---------------------------------------------------------------------------------------

_CO = struct.Struct("@3Pi")   # mamba2_conv1d_options_t: bias, initial_conv_state, cu_seqlens, activation
_CS = struct.Struct("@2Pi")   # mamba2_conv1d_step_options_t: bias, state_indices, activation


def _index_desc(buf, off, t, name):
    if not t.is_cpu:
        _check_device(name, t)
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected int32 or int64")
    t = t.contiguous()
    _out_desc(buf, off, t, _TORCH_DTYPE[t.dtype])
    return t


def conv1d_forward(x, weight, bias=None, initial_states=None, cu_seqlens=None,
                   activation: bool = False, return_final_states: bool = False):
    """x [B,L,C] (channel-last; row stride free), weight [C,W], bias [C], initial_states
    [S,C,W-1]. Returns (out [B,L,C] in x.dtype, final_states [S,C,W-1] or None)."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _act_dtype(x)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, C = x.shape
    W = weight.shape[-1]
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    out = torch.empty(Bsz, L, C, dtype=cdtype)
    _out_desc(buf, 0, out, code)
    final = None
    pf = 0
    if return_final_states:
        final = torch.empty(S, C, W - 1, dtype=cdtype)
        _out_desc(buf, _TSZ, final, code)
        pf = base + _TSZ
    keep = [_desc(buf, 2 * _TSZ, "x", x, cdtype, code),
            _desc(buf, 3 * _TSZ, "weight", weight, cdtype, code)]
    pb = pi = pc = 0
    if bias is not None:
        keep.append(_desc(buf, 4 * _TSZ, "bias", bias, cdtype, code))
        pb = base + 4 * _TSZ
    if initial_states is not None:
        keep.append(_desc(buf, 5 * _TSZ, "initial_states", initial_states, cdtype, code))
        pi = base + 5 * _TSZ
    if cu_seqlens is not None:
        keep.append(_index_desc(buf, 6 * _TSZ, cu_seqlens, "cu_seqlens"))
        pc = base + 6 * _TSZ
    _CO.pack_into(buf, s.opt_off, pb, pi, pc, 1 if activation else 0)
    st = lib.mamba2_conv1d_forward(_context(_backend_for(cdtype)), base, pf, base + 2 * _TSZ,
                                   base + 3 * _TSZ, base + s.opt_off)
    if st:
        _raise_status(st, "mamba2_conv1d_forward")
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)
        final = final.to(x.dtype) if final is not None else None
    return out, final


def conv1d_backward(dout, dfinal, x, weight, bias=None, initial_states=None, cu_seqlens=None,
                    activation: bool = False, needs=(True, True, True, True)):
    """Returns (dx, dweight, dbias, dinitial_states), None where not requested."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _act_dtype(x)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    inputs = (x, weight, bias, initial_states)
    grads = [None] * 4
    ptrs = [0] * 4
    for i in range(4):
        t = inputs[i]
        if needs[i] and t is not None:
            grads[i] = torch.empty(t.shape, dtype=cdtype)
            _out_desc(buf, i * _TSZ, grads[i], code)
            ptrs[i] = base + i * _TSZ
    _G4.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, 4 * _TSZ, "dout", dout, cdtype, code),
            _desc(buf, 6 * _TSZ, "x", x, cdtype, code),
            _desc(buf, 7 * _TSZ, "weight", weight, cdtype, code)]
    pdf = pb = pi = pc = 0
    if dfinal is not None:
        keep.append(_desc(buf, 5 * _TSZ, "dfinal_states", dfinal, cdtype, code))
        pdf = base + 5 * _TSZ
    if bias is not None:
        keep.append(_desc(buf, 8 * _TSZ, "bias", bias, cdtype, code))
        pb = base + 8 * _TSZ
    if initial_states is not None:
        keep.append(_desc(buf, 9 * _TSZ, "initial_states", initial_states, cdtype, code))
        pi = base + 9 * _TSZ
    if cu_seqlens is not None:
        keep.append(_index_desc(buf, 10 * _TSZ, cu_seqlens, "cu_seqlens"))
        pc = base + 10 * _TSZ
    _CO.pack_into(buf, s.opt_off, pb, pi, pc, 1 if activation else 0)
    st = lib.mamba2_conv1d_backward(_context(_backend_for(cdtype)), base + s.grd_off,
                                    base + 4 * _TSZ, pdf, base + 6 * _TSZ, base + 7 * _TSZ,
                                    base + s.opt_off, None, 0)
    if st:
        _raise_status(st, "mamba2_conv1d_backward")
    for i in range(4):
        g = grads[i]
        if g is not None and g.dtype is not inputs[i].dtype:
            grads[i] = g.to(inputs[i].dtype)
    return tuple(grads)


def conv1d_step(x, conv_cache, weight, bias=None, activation: bool = False, state_indices=None):
    """x [B,C] or [B,T,C]; conv_cache [S,C,W-1] (float32/float64 as the computation, last
    dim contiguous: it is updated IN PLACE, so it is never copied — the caller checks).
    Padding rows (negative index) get a zero output."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = conv_cache.dtype
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    out = (torch.zeros if state_indices is not None else torch.empty)(x.shape, dtype=cdtype)
    _out_desc(buf, 0, out, code)
    _out_desc(buf, _TSZ, conv_cache, code)
    keep = [_desc(buf, 2 * _TSZ, "x", x, cdtype, code),
            _desc(buf, 3 * _TSZ, "weight", weight, cdtype, code)]
    pb = pi = 0
    if bias is not None:
        keep.append(_desc(buf, 4 * _TSZ, "bias", bias, cdtype, code))
        pb = base + 4 * _TSZ
    if state_indices is not None:
        keep.append(_index_desc(buf, 5 * _TSZ, state_indices, "state_indices"))
        pi = base + 5 * _TSZ
    _CS.pack_into(buf, s.opt_off, pb, pi, 1 if activation else 0)
    st = lib.mamba2_conv1d_step(_context(_backend_for(cdtype)), base, base + _TSZ,
                                base + 2 * _TSZ, base + 3 * _TSZ, base + s.opt_off)
    if st:
        _raise_status(st, "mamba2_conv1d_step")
    return out.to(x.dtype) if out.dtype is not x.dtype else out


# ---------------------------------------------------------------------------------------
# SSD decode step (SPEC §6) — mamba2_ssd_step: the low-overhead path
# ---------------------------------------------------------------------------------------
#
# A decode step moves little data (batch 1: one [H,P,N] state), so the binding's own cost
# matters. This path differs from the generic _desc/_out_desc packing above in that it
#   - packs each descriptor with a per-rank Struct (3 + 2*rank values, no zero padding
#     tuples; the bytes after `rank` are not read by the library),
#   - takes mamba_ssm's broadcast parameter views (A [H,P,N], dt [B,H,P], dt_bias [H,P],
#     D [H,P] expanded with stride 0) as the [H] / [B,H] descriptors of the memory they
#     view — no torch slicing, no copy,
#   - allocates the output with positional sizes (torch.empty(*sizes) is ~1 us cheaper than
#     passing a torch.Size),
#   - returns NotImplemented, before anything is written, for a case the C op cannot serve,
#     so the caller can fall back to torch.

_TR = tuple(struct.Struct(f"@Pii{r}q{(MAX_RANK - r) * 8}x{r}q") for r in range(MAX_RANK + 1))


def _bc_desc(buf, off, name, t, k, sdt, code):
    """Pack the first k dims of t when its dims after k are broadcast (stride 0 or size 1);
    otherwise (values genuinely vary along them) return NotImplemented — unless the values
    are equal along those dims anyway (a materialised repeat), checked with torch.equal and
    then passed as a compact copy. Returns the tensor to keep alive over the call."""
    if not t.is_cpu:
        _check_device(name, t)
    sh = t.shape
    st = t.stride()
    r = len(sh)
    if r != k:
        if r < k:
            return NotImplemented
        for i in range(k, r):
            if st[i] and sh[i] != 1:
                c = t[(Ellipsis,) + (0,) * (r - k)]
                if not torch.equal(t, c.reshape(tuple(sh[:k]) + (1,) * (r - k)).expand(sh)):
                    return NotImplemented
                t = c
                sh = c.shape
                st = c.stride()
                break
        else:
            sh = sh[:k]
            st = st[:k]
    if t.dtype is not sdt or (k and sh[k - 1] > 1 and st[k - 1] != 1):
        if not t.dtype.is_floating_point:
            raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected a floating-point tensor")
        t = t.as_strided(sh, st).to(sdt).contiguous()
        sh = t.shape
        st = t.stride()
    _TR[k].pack_into(buf, off, t.data_ptr(), code, k, *sh, *st)
    return t


def _act_desc(buf, off, name, t, sdt, code):
    """An activation (x, B, C, z): converted to the state's dtype if needed (bf16/f16 -> f32),
    copied only when its last dim is not contiguous."""
    if not t.is_cpu:
        _check_device(name, t)
    sh = t.shape
    st = t.stride()
    r = len(sh)
    if t.dtype is not sdt or (r and sh[r - 1] > 1 and st[r - 1] != 1):
        if not t.dtype.is_floating_point:
            raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected a floating-point tensor")
        t = t.to(sdt).contiguous()
        st = t.stride()
    _TR[r].pack_into(buf, off, t.data_ptr(), code, r, *sh, *st)
    return t


_TSZ2, _TSZ3, _TSZ4, _TSZ5, _TSZ6, _TSZ7, _TSZ8, _TSZ9, _TSZ10, _TSZ11, _TSZ12 = (
    _TSZ * i for i in range(2, 13))
# The decode step's descriptor block: 12 slots (state, out, all_states, x, dt, A, B, C, D, z,
# dt_bias, state_indices) followed by the options struct, written by ONE pack_into from a
# cached template (the data pointers change per call, nothing else does).
_STEP_BLOCK = struct.Struct("@" + f"P{_TSZ - 8}s" * 12 + f"{_SO.size}s")
_NO_DESC = bytes(_TSZ - 8)
_STEP_PLANS_MAX = 256


def ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
             dt_lo=0.0, dt_hi=math.inf, state_indices=None, want_all=False):
    """One call of mamba2_ssd_step; `state` [S,H,P,N] is updated in place.

    x [B,H,P] (one token) or [B,T,H,P]; B, C [B,(T,)G,N]; z like x;
    dt [B,(T,)H] or mamba_ssm's [B,(T,)H,P] broadcast over P;
    A [H] or [H,P,N] broadcast over P and N; dt_bias [H] or [H,P] broadcast over P;
    D [H] or [H,P] (per channel, or broadcast over P).
    The state's dtype (float32, or float64 on the reference backend) is the compute dtype:
    it is updated in place, so it is never converted; activations of another floating
    dtype (bf16/f16) are converted to it. Returns out in x.dtype — or (out, all_states
    [B,(T,)H,P,N]) with want_all — or NotImplemented (nothing written) when the C op cannot
    serve the call: a state that is not float32/float64 or whose last dim is strided,
    float64 activations with a float32 state, per-(p,n) A, per-p dt or dt_bias.
    Padding rows (negative state index) get a zero output (and zero all_states).

    Fast path: the descriptors of a call depend only on the shapes, strides, dtypes and
    devices of its tensors (and the scalar options), so they are packed once per such
    signature (with the generic code below) and kept as a template; a later call with the
    same signature builds the key, allocates out and writes every descriptor plus the
    options with one pack_into that patches in the data pointers."""
    s = getattr(_tls, "scratch", None)
    if s is not None and not want_all:
        key = (state.shape, state.stride(), state.dtype, state.is_cpu,
               x.shape, x.stride(), x.dtype, x.is_cpu,
               dt.shape, dt.stride(), dt.dtype, dt.is_cpu,
               A.shape, A.stride(), A.dtype, A.is_cpu,
               B.shape, B.stride(), B.dtype, B.is_cpu,
               C.shape, C.stride(), C.dtype, C.is_cpu,
               None if D is None else (D.shape, D.stride(), D.dtype, D.is_cpu),
               None if z is None else (z.shape, z.stride(), z.dtype, z.is_cpu),
               None if dt_bias is None else (dt_bias.shape, dt_bias.stride(), dt_bias.dtype,
                                             dt_bias.is_cpu),
               None if state_indices is None else (state_indices.shape, state_indices.stride(),
                                                   state_indices.dtype, state_indices.is_cpu),
               dt_softplus, dt_lo, dt_hi)
        last = s.step_last
        if key == last[0]:  # a decode loop repeats one signature: no hashing
            plan = last[1]
        else:
            plan = s.step_plans.get(key)
            if plan is not None:
                s.step_last = (key, plan)
        if plan is not None:
            tmpl, xs, sdt, ref = plan
            if sdt is torch.get_default_dtype():  # positional sizes, no dtype: the cheapest
                out = (torch.empty if state_indices is None else torch.zeros)(*xs)
            else:
                out = (torch.empty if state_indices is None else torch.zeros)(*xs, dtype=sdt)
            _STEP_BLOCK.pack_into(
                s.buf, 0, state.data_ptr(), tmpl[0], out.data_ptr(), tmpl[1], 0, _NO_DESC,
                x.data_ptr(), tmpl[3], dt.data_ptr(), tmpl[4], A.data_ptr(), tmpl[5],
                B.data_ptr(), tmpl[6], C.data_ptr(), tmpl[7],
                0 if D is None else D.data_ptr(), tmpl[8],
                0 if z is None else z.data_ptr(), tmpl[9],
                0 if dt_bias is None else dt_bias.data_ptr(), tmpl[10],
                0 if state_indices is None else state_indices.data_ptr(), tmpl[11], tmpl[12])
            b = getattr(_tls, "backend", None) or _default_backend
            st = _lib.mamba2_ssd_step(_context(BACKEND_REF if ref else _BACKENDS[b]),
                                      *s.step_args)
            if st:
                _raise_status(st, "mamba2_ssd_step")
            return out
    else:
        key = None
    return _ssd_step_general(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                             state_indices, want_all, key)


def _ssd_step_general(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                      state_indices, want_all, key):
    """ssd_step's packing code (every case); stores a template under `key` when the call
    used every tensor as is (no dtype conversion, no copy)."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    sdt = state.dtype
    if sdt is _F32:
        code = DT_F32
        if x.dtype is _F64:
            return NotImplemented
    elif sdt is _F64:
        code = DT_F64
    else:
        return NotImplemented
    if not state.is_cpu:
        _check_device("state", state)
    ssh = state.shape
    sst = state.stride()
    if len(ssh) != 4 or (ssh[3] > 1 and sst[3] != 1):
        return NotImplemented
    buf, base = s.buf, s.base
    xs = x.shape
    xr = len(xs)
    # parameters first: any of them may turn the call down before anything is allocated
    kdt = _bc_desc(buf, _TSZ4, "dt", dt, xr - 1, sdt, code)
    kA = _bc_desc(buf, _TSZ5, "A", A, 1, sdt, code)
    kD = kb = None
    pD = pb = pi = 0
    if dt_bias is not None:
        kb = _bc_desc(buf, _TSZ10, "dt_bias", dt_bias, 1, sdt, code)
        pb = base + _TSZ10
    if D is not None:
        # [H,P] per channel is served as is; broadcast over P it becomes [H]
        kD = _bc_desc(buf, _TSZ8, "D", D, 1 if D.dim() == 1 or D.stride(1) == 0 else 2,
                      sdt, code)
        pD = base + _TSZ8
    if kdt is NotImplemented or kA is NotImplemented or kb is NotImplemented \
            or kD is NotImplemented:
        return NotImplemented
    _TR[4].pack_into(buf, 0, state.data_ptr(), code, 4, *ssh, *sst)
    kx = _act_desc(buf, _TSZ3, "x", x, sdt, code)
    kB = _act_desc(buf, _TSZ6, "B", B, sdt, code)
    kC = _act_desc(buf, _TSZ7, "C", C, sdt, code)
    kz = ki = None
    pz = 0
    if z is not None:
        kz = _act_desc(buf, _TSZ9, "z", z, sdt, code)
        pz = base + _TSZ9
    if state_indices is None:
        out = torch.empty(*xs, dtype=sdt)
    else:
        ki = _index_desc(buf, _TSZ11, state_indices, "state_indices")
        pi = base + _TSZ11
        out = torch.zeros(*xs, dtype=sdt)  # padding rows are left untouched by the C op
    _TR[xr].pack_into(buf, _TSZ, out.data_ptr(), code, xr, *xs, *out.stride())
    pall = 0
    alls = None
    if want_all:
        alls = (torch.zeros if state_indices is not None else torch.empty)(*xs, ssh[3], dtype=sdt)
        _TR[xr + 1].pack_into(buf, _TSZ2, alls.data_ptr(), code, xr + 1, *alls.shape,
                              *alls.stride())
        pall = base + _TSZ2
    _SO.pack_into(buf, _TSZ12, pD, pz, pb, pi, 1 if dt_softplus else 0, dt_lo, dt_hi)
    ref = code == DT_F64
    b = getattr(_tls, "backend", None) or _default_backend
    st = lib.mamba2_ssd_step(_context(BACKEND_REF if ref else _BACKENDS[b]), base,
                             base + _TSZ, pall, base + _TSZ3, base + _TSZ4, base + _TSZ5,
                             base + _TSZ6, base + _TSZ7, base + _TSZ12)
    if st:
        _raise_status(st, "mamba2_ssd_step")
    if (key is not None and kx is x and kdt is dt and kA is A and kB is B and kC is C
            and kD is D and kz is z and kb is dt_bias and ki is state_indices):
        # every tensor was described as is: remember the descriptors (all but the pointers)
        raw = buf.raw
        tmpl = [raw[i * _TSZ + 8:(i + 1) * _TSZ] for i in range(12)]
        for i, t in ((8, D), (9, z), (10, dt_bias), (11, state_indices)):
            if t is None:
                tmpl[i] = _NO_DESC
        tmpl.append(raw[_TSZ12:_TSZ12 + _SO.size])
        plans = s.step_plans
        if len(plans) >= _STEP_PLANS_MAX:
            plans.clear()
        plans[key] = (tuple(tmpl), tuple(xs), sdt, ref)
    if x.dtype is not sdt:
        out = out.to(x.dtype)
    return (out, alls) if want_all else out


# ---------------------------------------------------------------------------------------
# The staged SSD pipeline (SPEC §3), forward only — mamba2_ssd_chunk_cumsum / bmm_chunk /
# chunk_state / state_passing / chunk_scan. Q = chunk_size, K = ceil(L/Q). Staged tensors
# are float32 (float64 for float64 activations); outputs are allocated here.
# ---------------------------------------------------------------------------------------

def _staged_call(fname, *ptrs):
    if not has_op("ssd_chunked"):
        raise Mamba2NotImplementedError(f"mamba2c: the loaded library has no {fname}")
    st = getattr(_lib, fname)(*ptrs)
    if st:
        _raise_status(st, fname)


def _f64_if(*ts) -> torch.dtype:
    for t in ts:
        if t is not None and t.dtype is _F64:
            return _F64
    return _F32


def chunk_cumsum(dt, A, chunk_size: int, dt_bias=None, dt_softplus: bool = False,
                 dt_lo: float = 0.0, dt_hi: float = math.inf):
    """dt [B,L,H], A [H] -> (dt_out [B,H,K,Q], dA_cumsum [B,H,K,Q])."""
    load()
    s = _state()
    cd = _f64_if(dt)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, H = dt.shape
    Q = int(chunk_size)
    K = -(-L // Q) if Q > 0 else 0
    dt_out = torch.empty(Bsz, H, K, Q, dtype=cd)
    dA_cs = torch.empty(Bsz, H, K, Q, dtype=cd)
    _out_desc(buf, 0, dt_out, code)
    _out_desc(buf, _TSZ, dA_cs, code)
    keep = [_desc(buf, _TSZ2, "dt", dt, cd, code), _desc(buf, _TSZ3, "A", A, cd, code)]
    p_o = _options(s, keep, 4, Q, None, None, dt_bias, None, None, dt_softplus, dt_lo, dt_hi,
                   cd, code)
    _staged_call("mamba2_ssd_chunk_cumsum", _context(_backend_for(cd)), base, base + _TSZ,
                 base + _TSZ2, base + _TSZ3, p_o)
    return dt_out, dA_cs


def bmm_chunk(B, C, chunk_size: int):
    """B, C [B,L,G,N] -> CB [B,K,G,Q,Q] (CB[i,j] = C_i . B_j within each chunk)."""
    load()
    s = _state()
    cd = _f64_if(B, C)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, G, _ = B.shape
    Q = int(chunk_size)
    K = -(-L // Q) if Q > 0 else 0
    CB = torch.empty(Bsz, K, G, Q, Q, dtype=cd)
    _out_desc(buf, 0, CB, code)
    keep = [_desc(buf, _TSZ, "B", B, cd, code), _desc(buf, _TSZ2, "C", C, cd, code)]
    p_o = _options(s, keep, 4, Q, None, None, None, None, None, False, 0.0, math.inf, cd, code)
    _staged_call("mamba2_ssd_bmm_chunk", _context(_backend_for(cd)), base, base + _TSZ,
                 base + _TSZ2, p_o)
    return CB


def chunk_state(x, B, dt_out, dA_cumsum):
    """x [B,L,H,P], B [B,L,G,N], dt_out/dA_cumsum [B,H,K,Q] -> states [B,K,H,P,N]
    (each chunk's state from a zero initial state)."""
    load()
    s = _state()
    cd = _f64_if(x, B)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, H, P = x.shape
    N = B.shape[3]
    K, Q = dA_cumsum.shape[2], dA_cumsum.shape[3]
    states = torch.empty(Bsz, K, H, P, N, dtype=cd)
    _out_desc(buf, 0, states, code)
    keep = [_desc(buf, _TSZ, "x", x, cd, code), _desc(buf, _TSZ2, "B", B, cd, code),
            _desc(buf, _TSZ3, "dt_out", dt_out, cd, code),
            _desc(buf, _TSZ4, "dA_cumsum", dA_cumsum, cd, code)]
    p_o = _options(s, keep, 5, Q, None, None, None, None, None, False, 0.0, math.inf, cd, code)
    _staged_call("mamba2_ssd_chunk_state", _context(_backend_for(cd)), base, base + _TSZ,
                 base + _TSZ2, base + _TSZ3, base + _TSZ4, p_o)
    return states


def state_passing(states, dA_cumsum, initial_states=None):
    """states [B,K,H,P,N], dA_cumsum [B,H,K,Q] -> (states_start [B,K,H,P,N]: the state
    entering each chunk, final_state [B,H,P,N])."""
    load()
    s = _state()
    cd = _f64_if(states)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, K, H, P, N = states.shape
    Q = dA_cumsum.shape[3]
    start = torch.empty(Bsz, K, H, P, N, dtype=cd)
    final = torch.empty(Bsz, H, P, N, dtype=cd)
    _out_desc(buf, 0, start, code)
    _out_desc(buf, _TSZ, final, code)
    keep = [_desc(buf, _TSZ2, "states", states, cd, code),
            _desc(buf, _TSZ3, "dA_cumsum", dA_cumsum, cd, code)]
    p_o = _options(s, keep, 4, Q, None, None, None, initial_states, None, False, 0.0,
                   math.inf, cd, code)
    _staged_call("mamba2_ssd_state_passing", _context(_backend_for(cd)), base, base + _TSZ,
                 base + _TSZ2, base + _TSZ3, p_o)
    return start, final


def chunk_scan(CB, x, dt_out, dA_cumsum, C, states_start, D=None, z=None):
    """-> out [B,L,H,P] in x.dtype (y = intra-chunk part + the states_start part + D x,
    gated by silu(z) when z is given)."""
    load()
    s = _state()
    cd = _f64_if(x, C, z)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, H, P = x.shape
    Q = dA_cumsum.shape[3]
    out = torch.empty(Bsz, L, H, P, dtype=cd)
    _out_desc(buf, 0, out, code)
    keep = [_desc(buf, _TSZ, "CB", CB, cd, code), _desc(buf, _TSZ2, "x", x, cd, code),
            _desc(buf, _TSZ3, "dt_out", dt_out, cd, code),
            _desc(buf, _TSZ4, "dA_cumsum", dA_cumsum, cd, code),
            _desc(buf, _TSZ5, "C", C, cd, code),
            _desc(buf, _TSZ6, "states_start", states_start, cd, code)]
    p_o = _options(s, keep, 7, Q, D, z, None, None, None, False, 0.0, math.inf, cd, code)
    _staged_call("mamba2_ssd_chunk_scan", _context(_backend_for(cd)), base, base + _TSZ,
                 base + _TSZ2, base + _TSZ3, base + _TSZ4, base + _TSZ5, base + _TSZ6, p_o)
    return out.to(x.dtype) if out.dtype is not x.dtype else out
