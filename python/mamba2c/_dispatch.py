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

from typing import Optional

import torch
from torch import Tensor

from . import _torch_impl
from ._checks import step_ranks
from . import _native
from ._native import loader
from ._native import steps as _steps

__all__ = ["NATIVE_OPS", "c_library", "cuda_library", "backend_of", "conv1d", "rmsnorm_gated",
           "conv1d_step",
           "ssd_step"]

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


def backend_of(name: str, device: str = "cpu") -> str:
    """"C" or "torch": who computes op `name` for tensors on `device` (the shape and
    dtype cases each ops.py function lists aside; on "cuda", float32 / bf16 / f16)."""
    dev = torch.device(device).type
    ok = dev == "cpu" or (dev == "cuda" and cuda_library())
    return "C" if (name in NATIVE_OPS and ok and c_library()) else "torch"


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


def conv1d_step(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Optional[Tensor],
                cache_seqlens: Optional[Tensor]) -> bool:
    """mamba2_conv1d_step serves a conv_state exactly [S,D,W-1] with a contiguous last dim
    and the compute dtype (float32, float64 for float64 x: the cache is updated in place,
    so it is never copied), no circular buffer (cache_seqlens), no gradient needed."""
    W = weight.shape[-1]
    return (_c_device(x) and cache_seqlens is None and conv_state.device == x.device
            and conv_state.dim() == 3 and conv_state.shape[-1] == W - 1
            and (W - 1 <= 1 or conv_state.stride(-1) == 1)
            and conv_state.dtype == (torch.float64 if x.dtype == torch.float64 else torch.float32)
            and not _needs_grad(x, weight, bias)
            and c_library())


def ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi, state_indices,
             return_all_states=False, compiled_op=None):
    """Run the SSD decode step: in C when mamba2_ssd_step serves the call, in torch
    otherwise. C serves CPU tensors needing no gradient (the C step has no backward) with a
    float32 state (float64: the reference backend) of rank 4 and a contiguous last dim, no
    float64 activations with a float32 state, and A / dt / dt_bias constant along P (and N),
    as mamba_ssm's stride-0 broadcast views are; the binding declines (NotImplemented,
    nothing written) the layouts it cannot describe, and torch runs them.
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
    step_ranks(state, x, B, C)  # the C path checked them (steps.py), the torch one does not
    return _torch_impl.ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                (dt_lo, dt_hi), state_indices, return_all_states)

