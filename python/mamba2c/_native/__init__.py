"""mamba2c._native — the ctypes binding of libmamba2c (the C library), and nothing else.

This package knows the C ABI (include/mamba2c.h): the descriptor structs, the function
prototypes, the status codes. It turns torch tensors into descriptors and calls the
library; it does not know about autograd or torch.compile (see _custom_ops.py), about
which ops the C library serves (see _dispatch.py) nor about mamba_ssm's calling
conventions (see interface.py).

  abi.py          the ABI as data: the struct layouts, prototypes and per-call descriptor
                  slots (one table each; every packer and offset derives from them)
  loader.py       locating and loading the library; errors and status -> exception
  context.py      per-thread scratch, contexts (thread pools; CUDA device-mode contexts per
                  device and stream), backend selection, workspace, device_call
  tensors.py      tensor -> descriptor packing (the layout policy)
  policy.py       the dtype policy (compute dtype, half storage) and the backend per call
  ssd.py          mamba2_ssd_forward / _forward_states / _backward
  ssd_chunked.py  the staged pipeline (chunk_cumsum, bmm_chunk, chunk_state, ...)
  conv1d.py       mamba2_conv1d_forward / _backward
  rmsnorm.py      mamba2_rmsnorm_gated_forward / _backward
  steps.py        the decode steps: mamba2_ssd_step (low-overhead path), mamba2_conv1d_step

Why ctypes and not a C++ extension: the project's language is C, and a C ABI needs no
compiler at install time. The per-call cost is kept low by
  - binding every prototype once at load time (argtypes/restype cached on the CDLL),
  - packing descriptors with one precompiled struct.Struct.pack_into per tensor into a
    per-thread scratch buffer, whose address is computed once (no ctypes.Structure objects
    are built per call),
  - caching one context (thread pool) per (thread, backend, thread count),
  - passing workspace=NULL (the library allocates its scratch for the call), except for
    the SSD backward, whose workspace is cached per thread.

`mamba2c._native.X` names every function, constant and setting of the submodules, as the
single module did before the split. Assigning one (`_native.native_half = False`, or a
test's monkeypatch) assigns it in the submodule that owns it, so the binding sees it.
"""
from __future__ import annotations

import sys
import types

from . import abi, context, conv1d, loader, policy, rmsnorm, ssd, ssd_chunked, steps, tensors
from .abi import (BACKEND_CPU, BACKEND_CUDA, BACKEND_OPENCL, BACKEND_REF, DT_BF16, DT_F16,
                  DT_F32, DT_F64,
                  DT_I32, DT_I64, MAX_RANK, STATUS_BACKEND_UNAVAILABLE, STATUS_BUSY,
                  STATUS_INTERNAL_ERROR,
                  STATUS_INVALID_ARGUMENT, STATUS_OK, STATUS_OUT_OF_MEMORY, STATUS_UNSUPPORTED,
                  STATUS_WORKSPACE_TOO_SMALL)
from .context import (_context, _cuda_context, _state, _tls, _workspace, call_device,
                      device_call, get_backend, last_call_isa, release_cuda_contexts,
                      release_workspace, set_backend, use_backend)
from .conv1d import conv1d_backward, conv1d_forward
from .loader import (DeviceError, LibraryNotFoundError, Mamba2BusyError, Mamba2Error,
                     Mamba2MemoryError,
                     Mamba2NotImplementedError, Mamba2RuntimeError, Mamba2TypeError,
                     Mamba2ValueError, _raise_status, available, library_path, load,
                     reuse_freed_memory, version)
from .policy import (_HALF_CODES, _act_dtype, _backend_for, _cdtype, _ctx, _f64_if, _half_code,
                     _half_ok, _probe_half, compute_dtype)
from .rmsnorm import rmsnorm_gated_backward, rmsnorm_gated_forward
from .ssd import GRAD_NAMES, _ssd_forward, ssd_backward, ssd_forward, ssd_forward_states
from .ssd_chunked import bmm_chunk, chunk_cumsum, chunk_scan, chunk_state, state_passing
from .steps import _ssd_step_general, conv1d_step, ssd_step
from .tensors import (_act_desc, _bc_desc, _check_device, _cu_prep, _desc, _index_desc,
                      _options, _out_desc)

_BACKENDS = abi.BACKENDS
_TORCH_DTYPE = abi.TORCH_DTYPE
_TSZ = abi.TSZ                  # bytes of one tensor descriptor slot
_SO = abi.SSD_STEP_OPTIONS      # the decode step's options packer (tests, bench/; fills struct_size)
_T = abi.TENSOR.st
_TR = abi.TENSOR_R

__all__ = [
    "Mamba2Error",
    "DeviceError",
    "LibraryNotFoundError",
    "library_path",
    "load",
    "available",
    "version",
    "ssd_forward",
    "ssd_backward",
    "set_backend",
    "get_backend",
    "use_backend",
    "last_call_isa",
    "release_cuda_contexts",
]

# Module state owned by a submodule, read and written through this package (never copied
# here, so a read always sees the owner's current value).
_STATE = {"native_half": policy, "_lib": loader, "_lib_path": loader, "_load_error": loader,
          "_reuse_applied": loader, "_default_backend": context}
_SUBMODULES = (loader, abi, context, tensors, policy, ssd, ssd_chunked, conv1d, rmsnorm, steps)


def __getattr__(name):
    owner = _STATE.get(name)
    if owner is not None:
        return getattr(owner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        owner = _STATE.get(name)
        if owner is not None:
            setattr(owner, name, value)
            return
        for m in _SUBMODULES:  # e.g. a test's monkeypatch of ssd._ssd_forward
            if name in vars(m):
                setattr(m, name, value)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
