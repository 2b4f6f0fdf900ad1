"""hf_linear.py — torch.nn.Linear on the C GEMV (mamba2_linear_forward) for decode-sized
products, installed by mamba2c.hf.use_mamba2c_in_transformers() for the block.

A decode token of a transformers hybrid reads every weight once: the MLPs, the attention
projections, the Mamba in/out projections and a large untied lm_head are matrix-vector
products, and they take most of the token's time (docs/decode.md has the measurements). The
hook swaps nn.Linear.forward (the class's, restored on exit) for one that sends a call to the
C GEMV when all of these hold, and to the original forward otherwise:

    the module is exactly nn.Linear (a subclass — parametrized, quantized, LoRA — may give
        its weight another meaning),
    input, weight (and bias) are plain CPU tensors of one dtype, float32 or bfloat16, the
        weight 2-D and contiguous,
    at most _MAX_ROWS rows (the input's elements / in_features): decode, not prefill,
    the weight holds more than _MIN_WEIGHT_BYTES (below, the binding's fixed cost per call
        is no longer small beside the product),
    nothing needs a gradient (no-grad / inference mode, or no tensor requires grad; no
        forward-mode AD level open), no torch.compile / tracing / vmap / TorchDispatchMode is
        active, and the mamba2c backend of this thread is "cpu".

The result follows torch's: float32 sums over the input features (in the C kernel's fixed
order, so the last bits differ from MKL's), the bias added in float32, a bfloat16 output
rounded once from the float32 result.
"""
from __future__ import annotations

import ctypes

import torch

from ._native import abi, context, loader
from ._native.abi import BACKEND_CPU, DT_BF16, DT_F32, TENSOR_R, TSZ

__all__ = ["linear_forward", "served"]

_MAX_ROWS = 8
_MIN_WEIGHT_BYTES = 8 << 20
_DT = {torch.float32: DT_F32, torch.bfloat16: DT_BF16}
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_OPT_OFF = 4 * TSZ  # the options struct after the four descriptors out, x, weight, bias
_T2 = TENSOR_R[2]
_T1 = TENSOR_R[1]

try:  # private, but the only cheap query for an active TorchDispatchMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode as _dispatch_mode
except ImportError:  # pragma: no cover - older torch
    def _dispatch_mode():
        return None

try:  # vmap / grad transforms wrap their tensors (the wrapper's data is not the batch's)
    _wrapped = torch._C._functorch.is_functorch_wrapped_tensor
except AttributeError:  # pragma: no cover - older torch
    def _wrapped(t):
        return False
from torch.autograd import forward_ad as _fwad  # noqa: E402


def _block():
    """This thread's descriptor block for one call (out, x, weight, bias, options)."""
    b = getattr(context._tls, "linear_block", None)
    if b is None:
        b = context._tls.linear_block = ctypes.create_string_buffer(
            _OPT_OFF + abi.LINEAR_OPTIONS.size + 16)
    return b


def served(module, x) -> bool:
    """Whether the hook's forward sends this call of `module` (an nn.Linear) to the C GEMV."""
    if (torch.compiler.is_compiling() or type(module) is not torch.nn.Linear
            or type(x) is not torch.Tensor or not x.is_cpu):
        return False
    w, b = module.weight, module.bias
    dt = x.dtype
    if (dt not in _DT or type(w) not in _PLAIN or w.dtype is not dt or w.dim() != 2
            or not w.is_cpu or not w.is_contiguous()
            or w.numel() * w.element_size() <= _MIN_WEIGHT_BYTES):
        return False
    I = w.shape[1]
    if x.dim() == 0 or x.shape[-1] != I or not 0 < x.numel() <= _MAX_ROWS * I:
        return False
    if b is not None and (type(b) not in _PLAIN or b.dtype is not dt or not b.is_cpu
                          or b.shape != w.shape[:1]):
        return False
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                    or (b is not None and b.requires_grad)):
        return False
    if _fwad._current_level >= 0 or _wrapped(x):  # forward-mode AD, functorch transforms
        return False
    if torch.jit.is_tracing() or torch.jit.is_scripting() or _dispatch_mode() is not None:
        return False
    return context._backend_code() == BACKEND_CPU


def _gemv(module, x):
    w, b = module.weight, module.bias
    O, I = w.shape
    M = x.numel() // I
    x2 = x.reshape(M, I).to(torch.float32).contiguous()
    out = torch.empty(M, O, dtype=torch.float32)
    blk = _block()
    base = ctypes.addressof(blk)
    _T2.pack_into(blk, 0, out.data_ptr(), DT_F32, 2, M, O, O, 1)
    _T2.pack_into(blk, TSZ, x2.data_ptr(), DT_F32, 2, M, I, I, 1)
    _T2.pack_into(blk, 2 * TSZ, w.data_ptr(), _DT[w.dtype], 2, O, I, I, 1)
    pb = 0
    if b is not None:
        b32 = b.to(torch.float32).contiguous()
        _T1.pack_into(blk, 3 * TSZ, b32.data_ptr(), DT_F32, 1, O, 1)
        pb = base + 3 * TSZ
    abi.LINEAR_OPTIONS.pack_into(blk, _OPT_OFF, pb, 0, 0)  # no accumulate, exact Q8_0
    context._state()
    ctx = context._context(BACKEND_CPU)
    st = loader._lib.mamba2_linear_forward(ctx, base, base + TSZ, base + 2 * TSZ,
                                           base + _OPT_OFF)
    if st:
        loader._raise_status(st, "mamba2_linear_forward")
    out = out.view(*x.shape[:-1], O)
    return out if x.dtype is torch.float32 else out.to(x.dtype)


def linear_forward(theirs):
    """The nn.Linear.forward to install (theirs: the one it replaces)."""

    def forward(self, input):
        if served(self, input):
            return _gemv(self, input)
        return theirs(self, input)

    forward.__wrapped_by_mamba2c__ = _gemv
    forward.__doc__ = theirs.__doc__
    return forward
