"""conv1d.py — causal depthwise conv1d (SPEC §4): mamba2_conv1d_forward / _backward.

x [B,L,C] channel-last (row stride free); computed in float32 (float64 on the reference
backend), half activations widened for the call (policy.py). The decode step is in
steps.py."""
from __future__ import annotations

import torch

from . import abi, context, loader
from .abi import DT_F32, DT_F64
from .context import _tls, device_call
from .._checks import expect_rank
from .loader import _raise_status
from .policy import _F64, _act_dtype, _backend_for, _ctx
from .tensors import _desc, _index_desc, _out_desc

_FWD = abi.SLOT["conv1d_forward"]
_BWD = abi.SLOT["conv1d_backward"]
_CO = abi.CONV1D_OPTIONS


@device_call
def conv1d_forward(x, weight, bias=None, initial_states=None, cu_seqlens=None,
                   activation: bool = False, return_final_states: bool = False):
    """x [B,L,C] (channel-last; row stride free), weight [C,W], bias [C], initial_states
    [S,C,W-1]. Returns (out [B,L,C] in x.dtype, final_states [S,C,W-1] or None)."""
    expect_rank("x", x, "[B,L,C]")
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = _act_dtype(x)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    F = _FWD
    Bsz, L, C = x.shape
    W = weight.shape[-1]
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    out = torch.empty(Bsz, L, C, dtype=cdtype, device=x.device)
    _out_desc(buf, F.out, out, code)
    final = None
    pf = 0
    if return_final_states:
        final = torch.empty(S, C, W - 1, dtype=cdtype, device=x.device)
        _out_desc(buf, F.final_state, final, code)
        pf = base + F.final_state
    keep = [_desc(buf, F.x, "x", x, cdtype, code),
            _desc(buf, F.weight, "weight", weight, cdtype, code)]
    pb = pi = pc = 0
    if bias is not None:
        keep.append(_desc(buf, F.bias, "bias", bias, cdtype, code))
        pb = base + F.bias
    if initial_states is not None:
        keep.append(_desc(buf, F.initial_state, "initial_states", initial_states, cdtype, code))
        pi = base + F.initial_state
    if cu_seqlens is not None:
        keep.append(_index_desc(buf, F.cu_seqlens, cu_seqlens, "cu_seqlens"))
        pc = base + F.cu_seqlens
    _CO.pack_into(buf, s.opt_off, pb, pi, pc, 1 if activation else 0)
    st = lib.mamba2_conv1d_forward(_ctx(_backend_for(cdtype)), base + F.out, pf,
                                   base + F.x, base + F.weight, base + s.opt_off)
    if st:
        _raise_status(st, "mamba2_conv1d_forward")
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)
        final = final.to(x.dtype) if final is not None else None
    return out, final


@device_call
def conv1d_backward(dout, dfinal, x, weight, bias=None, initial_states=None, cu_seqlens=None,
                    activation: bool = False, needs=(True, True, True, True)):
    """Returns (dx, dweight, dbias, dinitial_states), None where not requested."""
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = _act_dtype(x)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    Sl = _BWD
    inputs = (x, weight, bias, initial_states)
    grads = [None] * 4
    ptrs = [0] * 4
    for i in range(4):
        t = inputs[i]
        if needs[i] and t is not None:
            grads[i] = torch.empty(t.shape, dtype=cdtype, device=x.device)
            _out_desc(buf, Sl[i], grads[i], code)  # dx, dweight, dbias, dinitial: slots 0..3
            ptrs[i] = base + Sl[i]
    abi.CONV1D_GRADS.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, Sl.dout, "dout", dout, cdtype, code),
            _desc(buf, Sl.x, "x", x, cdtype, code),
            _desc(buf, Sl.weight, "weight", weight, cdtype, code)]
    pdf = pb = pi = pc = 0
    if dfinal is not None:
        keep.append(_desc(buf, Sl.dfinal_state, "dfinal_states", dfinal, cdtype, code))
        pdf = base + Sl.dfinal_state
    if bias is not None:
        keep.append(_desc(buf, Sl.bias, "bias", bias, cdtype, code))
        pb = base + Sl.bias
    if initial_states is not None:
        keep.append(_desc(buf, Sl.initial_state, "initial_states", initial_states, cdtype, code))
        pi = base + Sl.initial_state
    if cu_seqlens is not None:
        keep.append(_index_desc(buf, Sl.cu_seqlens, cu_seqlens, "cu_seqlens"))
        pc = base + Sl.cu_seqlens
    _CO.pack_into(buf, s.opt_off, pb, pi, pc, 1 if activation else 0)
    st = lib.mamba2_conv1d_backward(_ctx(_backend_for(cdtype)), base + s.grd_off,
                                    base + Sl.dout, pdf, base + Sl.x, base + Sl.weight,
                                    base + s.opt_off, None, 0)
    if st:
        _raise_status(st, "mamba2_conv1d_backward")
    for i in range(4):
        g = grads[i]
        if g is not None and g.dtype is not inputs[i].dtype:
            grads[i] = g.to(inputs[i].dtype)
    return tuple(grads)
