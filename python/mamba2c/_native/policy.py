"""policy.py — the dtype policy of the C calls and the backend each call runs on.

  - The C SSD op computes in float32 (CPU and REF backends) or float64 (REF backend only).
  - bfloat16/float16 activations that all share one dtype (x, dt, B, C, z, and dout for the
    backward) are passed to the fused SSD op as they are when the backend accepts half
    storage (asked once per backend and dtype, see native_half); otherwise, and for every
    other op, they are converted to float32 for the call and the outputs converted back to
    the input dtype (one copy each way).
  - Parameters (A, D, dt_bias, states) are converted to the compute dtype (float32 for half
    activations) when they differ.
  - float64 calls run on the reference backend (the CPU and GPU backends are float32
    only) — for CPU tensors; CUDA tensors run on the CUDA backend (device mode) whatever
    their dtype, which refuses float64 (UNSUPPORTED; _dispatch sends the ops that have a
    torch implementation there first).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import abi, context, loader
from .abi import (BACKEND_CUDA, BACKEND_REF, DT_BF16, DT_F16, DT_F32, STATUS_OK,
                  TORCH_DTYPE)
from .tensors import _options, _out_desc

_F64 = torch.float64
_F32 = torch.float32


def compute_dtype(*acts: Optional[torch.Tensor]) -> torch.dtype:
    """The dtype the SSD op computes in for these activations: float64 if any is float64
    (reference backend), else float32 (bfloat16/float16 compute in float32; the fused SSD
    op may still receive them as stored, see native_half)."""
    for a in acts:
        if a is not None and a.dtype == torch.float64:
            return torch.float64
    return torch.float32


def _cdtype(x, dt, B, C, z) -> torch.dtype:
    if (x.dtype is _F64 or dt.dtype is _F64 or B.dtype is _F64 or C.dtype is _F64
            or (z is not None and z.dtype is _F64)):
        return _F64
    return _F32


def _act_dtype(*ts) -> torch.dtype:
    """float64 when any given tensor is float64, else float32: the compute dtype of the
    ops that widen half activations (rmsnorm, conv1d, the staged pipeline)."""
    for t in ts:
        if t is not None and t.dtype is _F64:
            return _F64
    return _F32


_f64_if = _act_dtype


def _backend_for(cdtype: torch.dtype) -> int:
    """The backend of a call computing in `cdtype`: CUDA for a call on CUDA tensors (see
    context.device_call), else this thread's (use_backend / set_backend), except that
    float64 runs on the reference backend (the others are float32 only)."""
    if context._tls.__dict__.get("device") is not None:
        return BACKEND_CUDA
    b = context._backend_code()
    if cdtype is torch.float64 and b != BACKEND_REF:
        return BACKEND_REF  # float64 is the reference's job
    return b


def _ctx(backend: int) -> int:
    """The context pointer a call on `backend` (from _backend_for) runs on: the device-mode
    context of the call's CUDA device and torch's current stream, or this thread's context
    of the backend (host pointers)."""
    dev = context._tls.__dict__.get("device")
    return context._context(backend) if dev is None else context._cuda_context(dev)


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
        lib = loader.load()
        s = context._state()
        S = abi.SLOT["ssd_probe"]
        tdt = torch.bfloat16 if code == DT_BF16 else torch.float16
        t = {k: torch.zeros(1, 1, 1, 1, dtype=tdt) for k in ("out", "x", "B", "C")}
        t["dt"] = torch.full((1, 1, 1), 0.05, dtype=tdt)
        t["final_state"] = torch.zeros(1, 1, 1, 1, dtype=torch.float32)
        t["A"] = torch.full((1,), -0.5, dtype=torch.float32)
        order = ("out", "final_state", "x", "dt", "A", "B", "C")
        for k in order:
            _out_desc(s.buf, getattr(S, k), t[k], TORCH_DTYPE[t[k].dtype])
        popt = _options(s, [], S, 1, None, None, None, None, None, False, 0.0, math.inf,
                        torch.float32, DT_F32)
        try:
            st = lib.mamba2_ssd_forward(context._context(backend), s.base + S.out, None,
                                        *[s.base + getattr(S, k) for k in order[1:]], popt,
                                        None, 0)
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
