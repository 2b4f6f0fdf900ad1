"""quant.py — weights for the C decode GEMV (mamba2_linear_forward): GGUF's Q8_0 layout in
torch, and the call itself.

Q8_0 (the layout of GGUF / llama.cpp): a row of I weights (I a multiple of 32) is I/32
blocks of 34 bytes, an f16 scale d then 32 int8 q; the weight is d * q. Quantizing a block
takes d = max|w| / 127 and q = w / d rounded half away from zero (C's roundf), the scale
stored as f16 (round to nearest even), as GGUF's reference quantizer does; the
dequantized value d_f16 * q is exact in float32.

`GemvWeight` is what a decode GEMV reads: a float32 or bfloat16 [O, I] tensor as is, or a
Q8_0 byte tensor [O, I/32*34]. `linear(x, w, bias)` runs mamba2_linear_forward on float32
CPU activations (x [M, I] -> [M, O]); the decode plan (decode_plan.py) packs the same
descriptors once per layer instead.
"""
from __future__ import annotations

import ctypes
from typing import Optional

import torch

from .._native import abi, loader
from .._native.abi import DT_BF16, DT_F32, DT_Q8_0, TENSOR_R
from .._native.context import _context, _state
from .._native import context

QK = 32          # weights per Q8_0 block
QBYTES = 34      # bytes per Q8_0 block (f16 scale + 32 int8)


def quantize_q8_0(w: torch.Tensor) -> torch.Tensor:
    """[O, I] floating weights -> uint8 [O, I/32*34] in GGUF's Q8_0 layout."""
    w = w.detach().to(torch.float32).cpu().contiguous()
    if w.dim() != 2 or w.shape[1] % QK:
        raise ValueError(f"quantize_q8_0: weight has shape {list(w.shape)}; expected [O, I] "
                         f"with I a multiple of {QK}")
    O, I = w.shape
    b = w.view(O, I // QK, QK)
    d = b.abs().amax(-1, keepdim=True) / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    v = b * inv
    q = (v.sign() * torch.floor(v.abs() + 0.5)).clamp_(-127, 127).to(torch.int8)
    out = torch.empty(O, I // QK, QBYTES, dtype=torch.uint8)
    out[..., :2] = d.to(torch.float16).view(torch.uint8)
    out[..., 2:] = q.view(torch.uint8)
    return out.view(O, (I // QK) * QBYTES)


def dequantize_q8_0(q: torch.Tensor, I: int) -> torch.Tensor:
    """uint8 [O, I/32*34] Q8_0 -> float32 [O, I] (exact)."""
    O = q.shape[0]
    b = q.view(O, I // QK, QBYTES)
    d = b[..., :2].contiguous().view(torch.float16).to(torch.float32)
    qq = b[..., 2:].contiguous().view(torch.int8).to(torch.float32)
    return (d * qq).view(O, I)


ACTIVATIONS = ("f32", "q8_0")


def check_activations(activations: str, who: str) -> bool:
    """activations "f32" (exact float32 products) or "q8_0" (x rounded to Q8_0 blocks and
    integer dot products, llama.cpp's Q8_0 arithmetic: mamba2_linear_options_t.quantize_x)
    -> whether x is quantized."""
    if activations not in ACTIVATIONS:
        raise ValueError(f"{who}: activations={activations!r}; expected one of {ACTIVATIONS}")
    return activations == "q8_0"


class GemvWeight:
    """The weight of one linear layer as mamba2_linear_forward reads it. quantize_x (Q8_0
    only): the product rounds x to Q8_0 blocks and takes integer dot products (llama.cpp's
    Q8_0 arithmetic) instead of the exact float32 one."""

    __slots__ = ("data", "code", "O", "I", "fmt", "quantize_x")

    def __init__(self, data: torch.Tensor, fmt: str, O: int, I: int, quantize_x: bool = False):
        if not data.is_cpu or not data.is_contiguous():
            raise ValueError("GemvWeight: the data must be a contiguous CPU tensor")
        if quantize_x and fmt != "q8_0":
            raise ValueError(f"GemvWeight: quantize_x needs a q8_0 weight, not {fmt}")
        self.data, self.fmt, self.O, self.I = data, fmt, O, I
        self.code = {"f32": DT_F32, "bf16": DT_BF16, "q8_0": DT_Q8_0}[fmt]
        self.quantize_x = bool(quantize_x)

    @classmethod
    def of(cls, w: torch.Tensor, fmt: Optional[str] = None) -> "GemvWeight":
        """From a float [O, I] weight: fmt None keeps float32 / bfloat16 as they are (other
        dtypes become float32); "f32", "bf16" convert; "q8_0" quantizes."""
        w = w.detach()
        O, I = w.shape
        if fmt is None:
            fmt = "bf16" if w.dtype is torch.bfloat16 else "f32"
        if fmt == "q8_0":
            return cls(quantize_q8_0(w), "q8_0", O, I)
        dt = torch.bfloat16 if fmt == "bf16" else torch.float32
        return cls(w.to(dt).cpu().contiguous(), fmt, O, I)

    def dequantized(self) -> torch.Tensor:
        if self.fmt == "q8_0":
            return dequantize_q8_0(self.data, self.I)
        return self.data.to(torch.float32)

    def pack(self, buf, off: int) -> None:
        """This weight's mamba2_tensor_t at byte offset off of buf."""
        TENSOR_R[2].pack_into(buf, off, self.data.data_ptr(), self.code, 2, self.O, self.I,
                              self.I, 1)


def pack_linear(buf, base: int, off_out: int, off_x: int, off_w: int, off_b: int,
                off_opt: int, out: torch.Tensor, x: torch.Tensor, w: GemvWeight,
                bias: Optional[torch.Tensor]) -> tuple:
    """Pack one mamba2_linear_forward call (out, x float32 [M, *] with unit last stride; bias
    float32 contiguous or None) into buf; returns the pointer arguments after ctx."""
    for name, t in (("out", out), ("x", x)):
        if t.dtype is not torch.float32 or t.dim() != 2 or t.stride(1) != 1 or not t.is_cpu:
            raise ValueError(f"linear: {name} must be a float32 CPU [M, n] view with unit "
                             f"last stride")
    TENSOR_R[2].pack_into(buf, off_out, out.data_ptr(), DT_F32, 2, *out.shape, *out.stride())
    TENSOR_R[2].pack_into(buf, off_x, x.data_ptr(), DT_F32, 2, *x.shape, *x.stride())
    w.pack(buf, off_w)
    pb = 0
    if bias is not None:
        if bias.dtype is not torch.float32 or not bias.is_contiguous():
            raise ValueError("linear: bias must be a contiguous float32 tensor")
        TENSOR_R[1].pack_into(buf, off_b, bias.data_ptr(), DT_F32, 1, bias.shape[0], 1)
        pb = base + off_b
    abi.LINEAR_OPTIONS.pack_into(buf, off_opt, pb, 0, int(w.quantize_x))  # no accumulate
    return (base + off_out, base + off_x, base + off_w, base + off_opt)


class LinearCall:
    """One packed mamba2_linear_forward call over fixed tensors (replayed per token)."""

    __slots__ = ("buf", "args", "keep", "fn")
    _L = abi.SLOT["linear"]

    def __init__(self, out, x, w: GemvWeight, bias=None):
        L = self._L
        nbytes = L.bias + abi.TSZ
        opt = (nbytes + 15) // 16 * 16
        self.buf = ctypes.create_string_buffer(opt + abi.LINEAR_OPTIONS.size + 16)
        base = ctypes.addressof(self.buf)
        b32 = None if bias is None else bias.detach().to(torch.float32).contiguous()
        self.args = pack_linear(self.buf, base, L.out, L.x, L.weight, L.bias, opt, out, x, w,
                                b32)
        self.keep = (out, x, w, b32)
        lib = loader._lib if loader._lib is not None else loader.load()
        self.fn = lib.mamba2_linear_forward

    def __call__(self, ctx) -> None:
        st = self.fn(ctx, *self.args)
        if st:
            loader._raise_status(st, "mamba2_linear_forward")


def linear(x: torch.Tensor, w: GemvWeight, bias: Optional[torch.Tensor] = None,
           out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x float32 [M, I] (CPU) -> x · Wᵀ (+ bias) float32 [M, O] with the C GEMV."""
    x = x.to(torch.float32)
    if x.stride(-1) != 1:
        x = x.contiguous()
    if out is None:
        out = torch.empty(x.shape[0], w.O, dtype=torch.float32)
    _state()
    LinearCall(out, x, w, bias)(_context(context._backend_code()))
    return out
