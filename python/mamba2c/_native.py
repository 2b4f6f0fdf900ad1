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
    backend only). bfloat16/float16 activations are converted to float32 for the call and
    the outputs converted back to the input dtype (one copy each way, documented in the
    functions below). Parameters (A, D, dt_bias, states) are converted to the compute
    dtype when they differ.
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
        ("dt_softplus", ctypes.c_int32),
        ("dt_limit_lo", ctypes.c_double),
        ("dt_limit_hi", ctypes.c_double),
    ]


class _GradsStruct(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in
                ("dx", "ddt", "dA", "dBm", "dCm", "dD", "dz", "ddt_bias", "dinitial_state")]


# Native alignment ('@'), the same rules the C compiler applies to these structs.
_T = struct.Struct("@Pii6q6q")
_O = struct.Struct("@q5Pidd")
_G = struct.Struct("@9P")
_TSZ = _T.size
_NSLOTS = 24  # tensor descriptor slots per call (the SSD backward uses 21)


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
    opts = lib.mamba2_ssd_options_default
    opts.restype = _OptionsStruct
    opts.argtypes = []
    o = opts()
    if bytes(o) != _O.pack(256, 0, 0, 0, 0, 0, 0, 0.0, math.inf):
        raise OSError("mamba2c: mamba2_ssd_options_t layout differs from the binding's packing")


class _Scratch:
    """Per-thread descriptor memory: tensor slots, one options struct, one grads struct."""

    __slots__ = ("buf", "base", "opt_off", "grd_off")

    def __init__(self):
        self.opt_off = _NSLOTS * _TSZ
        self.grd_off = self.opt_off + _O.size
        self.buf = ctypes.create_string_buffer(self.grd_off + _G.size + 16)
        self.base = ctypes.addressof(self.buf)


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
    """The kernel set this thread's context uses ("avx2+fma", "scalar", "reference")."""
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
    (reference backend), else float32 (bfloat16/float16 are widened to float32)."""
    for a in acts:
        if a is not None and a.dtype == torch.float64:
            return torch.float64
    return torch.float32


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
             dt_softplus, dt_lo, dt_hi, cdtype, code) -> int:
    """Pack the optional tensors (slots slot..slot+4) and the options struct."""
    buf, base = s.buf, s.base
    pD = pz = pb = pi = pc = 0
    if D is not None:
        keep.append(_desc(buf, slot * _TSZ, "D", D, cdtype, code))
        pD = base + slot * _TSZ
    if z is not None:
        keep.append(_desc(buf, (slot + 1) * _TSZ, "z", z, cdtype, code))
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
    _O.pack_into(buf, s.opt_off, int(chunk_size), pD, pz, pb, pi, pc, 1 if dt_softplus else 0,
                 float(dt_lo), float(dt_hi))
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
                dt_lo: float = 0.0, dt_hi: float = math.inf) -> Tuple[torch.Tensor, torch.Tensor]:
    """One call of mamba2_ssd_forward. Returns (out [B,L,H,P] in x.dtype,
    final_state [S,H,P,N] in the parameter dtype: float32, or float64 for float64 input).
    No autograd here (see _custom_ops.py)."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _cdtype(x, dt, B, C, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    backend = _backend_for(cdtype)
    buf, base = s.buf, s.base
    if x.dim() != 4 or B.dim() != 4:
        raise Mamba2ValueError(f"mamba2c: x must be [B,L,H,P] and B [B,L,G,N]; got x "
                               f"{tuple(x.shape)}, B {tuple(B.shape)}")
    Bsz, L, H, P = x.shape
    N = B.shape[3]
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    out = torch.empty(Bsz, L, H, P, dtype=cdtype)
    final = torch.empty(S, H, P, N, dtype=cdtype)
    _out_desc(buf, 0, out, code)
    _out_desc(buf, _TSZ, final, code)
    keep = [_desc(buf, 2 * _TSZ, "x", x, cdtype, code),
            _desc(buf, 3 * _TSZ, "dt", dt, cdtype, code),
            _desc(buf, 4 * _TSZ, "A", A, cdtype, code),
            _desc(buf, 5 * _TSZ, "B", B, cdtype, code),
            _desc(buf, 6 * _TSZ, "C", C, cdtype, code)]
    p_o = _options(s, keep, 7, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                   dt_softplus, dt_lo, dt_hi, cdtype, code)
    st = lib.mamba2_ssd_forward(_context(backend), base, base + _TSZ, base + 2 * _TSZ,
                                base + 3 * _TSZ, base + 4 * _TSZ, base + 5 * _TSZ,
                                base + 6 * _TSZ, p_o, None, 0)
    if st:
        _raise_status(st, "mamba2_ssd_forward")
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)  # bf16/f16 storage: computed in f32, rounded once here
    return out, final


# Gradient order everywhere in the package (matches mamba2_ssd_grads_t).
GRAD_NAMES = ("dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states")


def ssd_backward(dout, dfinal, x, dt, A, B, C, chunk_size: int, D=None, z=None, dt_bias=None,
                 initial_states=None, cu_seqlens=None, dt_softplus: bool = False,
                 dt_lo: float = 0.0, dt_hi: float = math.inf,
                 needs: Sequence[bool] = (True,) * 9) -> Tuple[Optional[torch.Tensor], ...]:
    """One call of mamba2_ssd_backward. `needs` selects gradients in GRAD_NAMES order (a
    gradient of an absent optional input is never computed). Returns 9 entries, None where
    not computed; each gradient has the dtype of its input."""
    lib = _lib if _lib is not None else load()
    s = getattr(_tls, "scratch", None) or _state()
    cdtype = _cdtype(x, dt, B, C, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    backend = _backend_for(cdtype)
    buf, base = s.buf, s.base
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    grads = [None] * 9
    ptrs = [0] * 9
    for i in range(9):
        t = inputs[i]
        if needs[i] and t is not None:
            g = torch.empty(t.shape, dtype=cdtype)
            grads[i] = g
            _out_desc(buf, i * _TSZ, g, code)
            ptrs[i] = base + i * _TSZ
    _G.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, 9 * _TSZ, "dout", dout, cdtype, code)]
    p_df = 0
    if dfinal is not None:
        keep.append(_desc(buf, 10 * _TSZ, "dfinal_states", dfinal, cdtype, code))
        p_df = base + 10 * _TSZ
    keep += [_desc(buf, 11 * _TSZ, "x", x, cdtype, code),
             _desc(buf, 12 * _TSZ, "dt", dt, cdtype, code),
             _desc(buf, 13 * _TSZ, "A", A, cdtype, code),
             _desc(buf, 14 * _TSZ, "B", B, cdtype, code),
             _desc(buf, 15 * _TSZ, "C", C, cdtype, code)]
    p_o = _options(s, keep, 16, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                   dt_softplus, dt_lo, dt_hi, cdtype, code)
    st = lib.mamba2_ssd_backward(_context(backend), base + s.grd_off, base + 9 * _TSZ, p_df,
                                 base + 11 * _TSZ, base + 12 * _TSZ, base + 13 * _TSZ,
                                 base + 14 * _TSZ, base + 15 * _TSZ, p_o, None, 0)
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
