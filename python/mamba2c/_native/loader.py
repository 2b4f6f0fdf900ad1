"""loader.py — locating and loading libmamba2c, and the errors of a failed C call.

load() finds the library once (search order in _candidates), binds every prototype of
abi.PROTOTYPES and checks the layouts (abi.check_abi). `lib()` is the loaded CDLL for the
op wrappers; a wrapper module reads the module global `_lib` directly on its hot path.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Optional

from . import abi
from .abi import (STATUS_BACKEND_UNAVAILABLE, STATUS_INVALID_ARGUMENT, STATUS_OUT_OF_MEMORY,
                  STATUS_UNSUPPORTED)

# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


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

_PKG_DIR = Path(__file__).resolve().parent.parent  # the mamba2c package directory
_LIB_NAMES = ("libmamba2c.so", "libmamba2c.dylib", "mamba2c.dll")


def _pkg_config_libdir() -> Optional[str]:
    """The libdir pkg-config reports for mamba2c (an installed library's prefix), or None
    (no pkg-config, or no mamba2c.pc on its search path)."""
    exe = shutil.which("pkg-config")
    if exe is None:
        return None
    try:
        r = subprocess.run([exe, "--variable=libdir", "mamba2c"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def _candidates():
    """(path, where it came from), in search order. A path is a Path, or a str naming a
    library (what ctypes.util.find_library returns) that the dynamic loader resolves with
    its own search, or None: the place was asked and had none (`where` says why)."""
    env = os.environ.get("MAMBA2C_LIBRARY")
    if env:
        yield Path(env), "MAMBA2C_LIBRARY"
        return  # an explicit choice is never silently replaced by another library
    repo_build = _PKG_DIR.parent.parent / "build"  # <repo>/python/mamba2c -> <repo>/build
    for name in _LIB_NAMES:
        yield repo_build / name, "repository build/ directory"
    for name in _LIB_NAMES:
        yield _PKG_DIR / "lib" / name, "copy inside the package"
    found = ctypes.util.find_library("mamba2c")
    if found:
        yield found, "ctypes.util.find_library"
    else:
        yield None, ("ctypes.util.find_library('mamba2c'): none in the ldconfig cache or on "
                     "LD_LIBRARY_PATH")
    libdir = _pkg_config_libdir()
    if libdir is None:
        yield None, ("pkg-config --variable=libdir mamba2c: no pkg-config, or no mamba2c.pc "
                     "on PKG_CONFIG_PATH")
    else:
        for name in _LIB_NAMES:
            yield Path(libdir) / name, "pkg-config --variable=libdir mamba2c"


def _loaded_path(name: str) -> str:
    """The file the dynamic loader opened for `name` (Linux: /proc/self/maps), else name."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path) == name or (
                        os.path.basename(path).startswith(name + ".")):
                    return path
    except OSError:
        pass
    return name


_lib = None
_lib_path: Optional[str] = None
_load_error: Optional[str] = None
_load_lock = threading.Lock()


def library_path() -> Optional[str]:
    """Path of the loaded library (loads it if needed); None when not found."""
    return _lib_path if load(raise_on_error=False) else None


def _try(path, why: str, tried: list):
    """The bound CDLL for one candidate, or None (the reason appended to `tried`)."""
    if path is None:
        tried.append(why)
        return None
    if isinstance(path, Path) and not path.is_file():
        tried.append(f"{path} ({why}: not found)")
        return None
    target = str(path)
    try:
        lib = ctypes.CDLL(target)
        abi.bind(lib)
    except (OSError, AttributeError) as e:
        tried.append(f"{target} ({why}: {e})")
        return None
    return lib, (target if isinstance(path, Path) else _loaded_path(target))


def load(raise_on_error: bool = True):
    """Load libmamba2c once. Search order: $MAMBA2C_LIBRARY (alone, when set); <repo>/build/;
    mamba2c/lib/; an installed library (ctypes.util.find_library: the ldconfig cache and
    LD_LIBRARY_PATH); pkg-config's libdir for mamba2c."""
    global _lib, _lib_path, _load_error
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is None and _load_error is None:
            tried = []
            for path, why in _candidates():
                r = _try(path, why, tried)
                if r is not None:
                    _lib, _lib_path = r
                    break
            if _lib is None:
                _load_error = (
                    "libmamba2c was not found. Build it with\n"
                    "  cmake -S <repo> -B <repo>/build -DCMAKE_BUILD_TYPE=Release && "
                    "cmake --build <repo>/build\n"
                    "install it (cmake --install <repo>/build, then LD_LIBRARY_PATH or "
                    "ldconfig), or point MAMBA2C_LIBRARY at the shared library. Tried:\n  "
                    + "\n  ".join(tried)
                )
    if _lib is None and raise_on_error:
        raise LibraryNotFoundError(_load_error)
    return _lib


def lib():
    """The loaded library (loads it on first use; LibraryNotFoundError when absent)."""
    return _lib if _lib is not None else load()


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
    charging it — for every output and gradient (python/README.md gives the measured cost).
    This sets glibc's mmap threshold to 1 GiB and its trim threshold to 2 GiB, the largest
    mallopt takes (process-wide, for every library in the process, and not undone): blocks
    up to 1 GiB stay in the heap after free and are handed out again without faults; the
    process keeps its peak heap instead of returning it to the OS.
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
