"""_dispatch.py — the one place that decides who computes an op: the C library or torch.

ops.py, interface.py and _custom_ops.py ask here and nowhere else. An op runs in C when the
library is loaded and the call is one the C op serves (the predicates below: device,
dtypes, shapes, layout, gradients); otherwise its torch implementation (_torch_impl.py,
the same semantics) runs. The SSD scans (ops.ssd, ops.ssd_states, mamba2c.chunked) have no
torch implementation: they always call C, which raises DeviceError for tensors on a device
it has no backend for.

Devices (_c_device): CPU tensors run on this thread's backend (use_backend / set_backend:
"cpu", "ref", or "opencl" / "cuda" in host mode). CUDA tensors run on the CUDA backend in
device mode (zero-copy, torch's current stream) when the library has one with a device
(cuda_library) and the call computes in float32 (float32, or bf16/f16 widened or stored as
is): the GPU kernels have no float64, so a float64 CUDA call of an op with a torch
implementation runs in torch. Any other device: torch.

torch.compile: c_library() is marked assume_constant_result, so a compiled region that
makes the process's first mamba2c call does not trace into the loader (its lock is a
context manager dynamo cannot trace): dynamo runs it once, eagerly, and keeps the answer
as a constant. The other predicates read only tensor metadata, which dynamo traces.
"""
from __future__ import annotations

import os
import warnings
from typing import Optional

import torch
from torch import Tensor

from . import _torch_impl
from ._checks import step_ranks
from . import _native
from ._native import loader
from ._native import steps as _steps

__all__ = ["NATIVE_OPS", "c_library", "cuda_library", "backend_of", "conv1d", "rmsnorm_gated",
           "conv1d_step", "ssd_step", "FallbackWarning", "FallbackError", "set_strict", "is_strict"]

# Ops with a C implementation; ssd and ssd_states have no other.
NATIVE_OPS = frozenset({"ssd", "ssd_states", "rmsnorm_gated", "conv1d", "conv1d_step",
                        "ssd_step"})

_loaded: Optional[bool] = None  # None: not asked yet; then whether libmamba2c loaded


@torch.compiler.assume_constant_result
def c_library() -> bool:
    """Whether libmamba2c is loaded (loads it on the first call; a plain flag after)."""
    global _loaded
    if _loaded is None:
        _loaded = loader.load(raise_on_error=False) is not None
    return _loaded


_cuda_loaded: Optional[bool] = None  # None: not asked yet


@torch.compiler.assume_constant_result
def cuda_library() -> bool:
    """Whether CUDA tensors can run in the C library: torch sees a CUDA device, libmamba2c
    is loaded and its CUDA backend opens a device-mode context on torch's current device
    (asked once: one context created and destroyed; a plain flag after)."""
    global _cuda_loaded
    if _cuda_loaded is None:
        _cuda_loaded = bool(torch.cuda.is_available() and c_library()
                            and _native.context.cuda_backend_ok())
    return _cuda_loaded


def _c_device(t: Tensor) -> bool:
    """Whether the C library can compute on t's device for t's dtype (see the top)."""
    return t.is_cpu or (t.is_cuda and t.dtype is not torch.float64 and cuda_library())


def backend_of(name: str, *args, **kwargs) -> str:
    """"C" or "torch": who computes op `name`.

    backend_of(name) / backend_of(name, "cpu") / backend_of(name, device="cpu"): for tensors
    on that device in general (on "cuda": float32 / bf16 / f16, when cuda_library()) (the shape and dtype cases each ops.py function lists aside).
    backend_of(name, *tensors, **options): for that concrete call, with the op's arguments as
    mamba2c.ops takes them (tensors only are read, never written):
      conv1d_step(x, conv_state, weight, bias=None, cache_seqlens=None)
      ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None)
      conv1d(x, weight), rmsnorm_gated(x), ssd / ssd_states(x, ...)."""
    if not args or isinstance(args[0], str):
        dev = torch.device(args[0] if args else kwargs.get("device", "cpu")).type
        ok = dev == "cpu" or (dev == "cuda" and cuda_library())
        return "C" if (name in NATIVE_OPS and ok and c_library()) else "torch"
    if name not in NATIVE_OPS or not c_library():
        return "torch"
    if name == "conv1d_step":
        x, conv_state, weight = args[:3]
        bias = args[3] if len(args) > 3 else kwargs.get("bias")
        seql = args[4] if len(args) > 4 else kwargs.get("cache_seqlens")
        ok = _c_device(x) and _conv1d_step_reason(x, conv_state, weight, bias,
                                                            seql) is None
    elif name == "ssd_step":
        names = ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias")
        a = dict(zip(names, args))
        for n in names[6:]:
            a.setdefault(n, kwargs.get(n))
        ok = _c_device(a["x"]) and _ssd_step_reason(**a, check_values=True) is None
    elif name == "conv1d":
        ok = conv1d(args[0], args[1])
    elif name == "rmsnorm_gated":
        ok = rmsnorm_gated(args[0])
    else:  # ssd, ssd_states: C only
        ok = _c_device(args[0])
    return "C" if ok else "torch"


def _needs_grad(*ts) -> bool:
    if not torch.is_grad_enabled():
        return False
    for t in ts:
        if t is not None and t.requires_grad:
            return True
    return False


def conv1d(x: Tensor, weight: Tensor) -> bool:
    """mamba2_conv1d_forward serves CPU (and CUDA, _c_device) tensors with a kernel width
    1 <= W <= 8."""
    return _c_device(x) and 1 <= weight.shape[-1] <= 8 and c_library()


def rmsnorm_gated(x: Tensor) -> bool:
    """mamba2_rmsnorm_gated_forward serves CPU (and CUDA, _c_device) tensors of any leading
    shape."""
    return _c_device(x) and x.dim() >= 1 and c_library()


_COMPUTE = (torch.float32, torch.float64)


def _conv1d_step_reason(x, conv_state, weight, bias, cache_seqlens) -> Optional[str]:
    """None when mamba2_conv1d_step serves the call (x on the CPU, library loaded), else why
    not — "" for a call torch rejects too (conv_state keeps fewer than W-1 inputs). Reads
    metadata only; the reasons are constant strings (traceable by torch.compile)."""
    W = weight.shape[-1]
    if conv_state.dim() != 3 or conv_state.shape[-1] < W - 1:
        return ""
    if conv_state.device != x.device:
        return "conv_state is not on x's device"
    if W > 8:
        return "kernel width W > 8"
    want = torch.float64 if x.dtype == torch.float64 else torch.float32
    if conv_state.dtype != want and not (
            conv_state.dtype in (torch.bfloat16, torch.float16) and x.dtype == conv_state.dtype
            and x.is_cpu):
        return ("conv_state is not in the compute dtype (the C step updates a float32 cache in "
                "place, float64 only with float64 x, bf16/f16 with x of that dtype on the CPU)")
    if any(s < 0 for s in conv_state.stride()):
        return "conv_state has a negative stride"
    if cache_seqlens is not None and (
            not (cache_seqlens.is_cpu or cache_seqlens.device == x.device)
            or cache_seqlens.dtype not in (torch.int32, torch.int64)
            or cache_seqlens.dim() != 1 or cache_seqlens.shape[0] != x.shape[0]):
        return "cache_seqlens is not an int32/int64 [B] tensor on the CPU or x's device"
    if _needs_grad(x, weight, bias):
        return "a gradient is needed (the C step has no backward)"
    return None


def conv1d_step(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Optional[Tensor],
                cache_seqlens: Optional[Tensor]) -> bool:
    """mamba2_conv1d_step serves a conv_state [S,D,K] with K >= W-1 and any strides (the
    [S,D,W-1] cache, mamba_ssm's and transformers' [B,D,d_conv], causal-conv1d's channel-last
    views; it is updated in place, zero-copy) in the compute dtype (float32; float64 for
    float64 x; on the CPU also bf16/f16 with x of that dtype), with or without cache_seqlens (circular buffer: int32/int64 [B], values
    >= 0), W <= 8, no gradient needed. A CPU call it cannot serve goes to torch with a
    FallbackWarning (once per reason), or FallbackError under set_strict(True)."""
    if not _c_device(x) or not c_library():
        return False
    why = _conv1d_step_reason(x, conv_state, weight, bias, cache_seqlens)
    if why is None:
        return True
    if why:
        _fallback("conv1d_step", why)
    return False


def _bc_ok(t, k: int, check_values: bool) -> bool:
    """The binding describes t by its first k dims when the rest is broadcast (stride 0 or
    size 1) — or, checking values, equal along them (steps.py, tensors._bc_desc)."""
    if t.dim() < k:
        return False
    sh, st = t.shape, t.stride()
    if all(st[i] == 0 or sh[i] == 1 for i in range(k, t.dim())):
        return True
    if not check_values:
        return False
    c = t[(Ellipsis,) + (0,) * (t.dim() - k)]
    return torch.equal(t, c.reshape(tuple(sh[:k]) + (1,) * (t.dim() - k)).expand(sh))


def _ssd_step_reason(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                     check_values=False) -> Optional[str]:
    """None when mamba2_ssd_step serves the call (x on the CPU, library loaded), else why
    not. Without check_values, a per-channel A / dt / dt_bias (which the binding still serves
    when its values are a materialised repeat) counts as not served."""
    if state.device != x.device:
        return "state is not on x's device"
    if state.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        return "state dtype is not float32, bf16, f16 or float64"
    if state.dim() != 4 or (state.shape[3] > 1 and state.stride(3) != 1):
        return "state is not [S,H,P,N] with a contiguous last dim"
    if x.dtype == torch.float64 and state.dtype != torch.float64:
        return "float64 activations with a non-float64 state"
    if _needs_grad(x, dt, A, B, C, D, z, dt_bias, state):
        return "a gradient is needed (the C step has no backward)"
    if not (_bc_ok(A, 1, check_values) and _bc_ok(dt, x.dim() - 1, check_values)
            and (dt_bias is None or _bc_ok(dt_bias, 1, check_values))):
        return "A / dt / dt_bias vary along P or N (per-channel parameters)"
    return None


def ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi, state_indices,
             return_all_states=False, compiled_op=None):
    """Run the SSD decode step: in C when mamba2_ssd_step serves the call, in torch
    otherwise. C serves CPU tensors needing no gradient (the C step has no backward) with a
    float32, bf16 or f16 state (float64: the reference backend) of rank 4 and a contiguous
    last dim, no float64 activations with a non-float64 state, and A / dt / dt_bias constant along P (and N),
    as mamba_ssm's stride-0 broadcast views are; the binding declines (NotImplemented,
    nothing written) the layouts it cannot describe, and torch runs them — with a
    FallbackWarning once per reason (FallbackError under set_strict(True)).
    compiled_op: the custom op to call instead of the binding while torch.compile traces."""
    if not state.dtype.is_floating_point:
        raise TypeError(f"mamba2c: state has dtype {state.dtype}; expected a floating-point "
                        f"tensor (float32, or float64)")
    if (_c_device(x) and c_library()
            and not (torch.is_grad_enabled()
                     and _needs_grad(x, dt, A, B, C, D, z, dt_bias, state))):
        if compiled_op is not None and not return_all_states:
            return compiled_op(state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus),
                               float(dt_lo), float(dt_hi), state_indices)
        r = _steps.ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                            state_indices, return_all_states)
        if r is not NotImplemented:
            return r
        _fallback("ssd_step", _ssd_step_reason(state, x, dt, A, B, C, D, z, dt_bias)
                  or "a layout the binding cannot describe")
    elif x.is_cpu and c_library():
        _fallback("ssd_step", "a gradient is needed (the C step has no backward)")
    step_ranks(state, x, B, C)  # the C path checked them (steps.py), the torch one does not
    return _torch_impl.ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                (dt_lo, dt_hi), state_indices, return_all_states)



# ---- fallback policy: a CPU call the C library could not serve ----------------------------
# The step predicates above report such a call here: a FallbackWarning once per (op,
# reason), or a FallbackError when strict (set_strict(True), or MAMBA2C_STRICT=1 in the
# environment). Under torch.compile tracing nothing is reported (is_compiling() is a
# constant there, so the branch is not traced and fullgraph compiles stay whole); the eager
# calls of the same code report it.

class FallbackWarning(UserWarning):
    """An op ran in torch for CPU tensors although libmamba2c is loaded."""


class FallbackError(RuntimeError):
    """Raised instead of FallbackWarning under mamba2c.set_strict(True)."""


_strict: Optional[bool] = None  # None: MAMBA2C_STRICT decides on first use
_warned: set = set()


def set_strict(flag: bool = True) -> None:
    """Strict mode: a CPU call that falls back to torch although the library is loaded
    raises FallbackError instead of warning (default: MAMBA2C_STRICT=1 in the environment)."""
    global _strict
    _strict = bool(flag)


def is_strict() -> bool:
    global _strict
    if _strict is None:
        _strict = os.environ.get("MAMBA2C_STRICT", "") not in ("", "0")
    return _strict


def _fallback(op: str, reason: str) -> None:
    if torch.compiler.is_compiling():
        return
    if is_strict():
        raise FallbackError(f"mamba2c: {op} would run in torch: {reason} (strict mode; "
                            f"mamba2c.set_strict(False) or MAMBA2C_STRICT=0 allows it)")
    key = (op, reason)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"mamba2c: {op} runs in torch, not in the C library: {reason} (warned "
                      f"once; mamba2c.ops.backend_of tells per call)", FallbackWarning,
                      stacklevel=4)
