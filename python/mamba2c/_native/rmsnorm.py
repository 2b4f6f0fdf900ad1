"""rmsnorm.py — gated RMSNorm (SPEC §5): mamba2_rmsnorm_gated_forward / _backward.

x, z [M,D] (row stride free); computed in float32 (float64 on the reference backend),
half activations widened for the call (policy.py)."""
from __future__ import annotations

from typing import Tuple

import torch

from . import abi, context, loader
from .abi import DT_F32, DT_F64
from .context import _tls, device_call
from .._checks import expect_rank
from .loader import _raise_status
from .policy import _F64, _act_dtype, _backend_for, _ctx
from .tensors import _desc, _out_desc

_FWD = abi.SLOT["rmsnorm_forward"]
_BWD = abi.SLOT["rmsnorm_backward"]
_RO = abi.RMSNORM_OPTIONS


@device_call
def rmsnorm_gated_forward(x, z, weight, bias, eps: float, group_size: int,
                          norm_before_gate: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """x, z [M,D] (row stride free); returns (out [M,D] in x.dtype, rstd [M,D/group_size])."""
    expect_rank("x", x, "[M,D]")
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = _act_dtype(x, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    F = _FWD
    M, D = x.shape
    gs = D if not group_size else int(group_size)
    out = torch.empty(M, D, dtype=cdtype, device=x.device)
    rstd = torch.empty(M, D // gs if gs > 0 and D % gs == 0 else 1, dtype=cdtype, device=x.device)
    _out_desc(buf, F.out, out, code)
    _out_desc(buf, F.rstd, rstd, code)
    keep = [_desc(buf, F.x, "x", x, cdtype, code),
            _desc(buf, F.weight, "weight", weight, cdtype, code)]
    pz = pb = 0
    if z is not None:
        keep.append(_desc(buf, F.z, "z", z, cdtype, code))
        pz = base + F.z
    if bias is not None:
        keep.append(_desc(buf, F.bias, "bias", bias, cdtype, code))
        pb = base + F.bias
    _RO.pack_into(buf, s.opt_off, float(eps), int(group_size or 0), 1 if norm_before_gate else 0)
    st = lib.mamba2_rmsnorm_gated_forward(_ctx(_backend_for(cdtype)), base + F.out,
                                          base + F.rstd, base + F.x, pz, base + F.weight, pb,
                                          base + s.opt_off, None, 0)
    if st:
        _raise_status(st, "mamba2_rmsnorm_gated_forward")
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)
    return out, rstd


@device_call
def rmsnorm_gated_backward(dout, x, z, weight, bias, rstd, eps: float, group_size: int,
                           norm_before_gate: bool, needs=(True, True, True, True)):
    """Returns (dx, dz, dweight, dbias), None where not requested / not applicable."""
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = _act_dtype(x, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    buf, base = s.buf, s.base
    Sl = _BWD
    inputs = (x, z, weight, bias)
    grads = [None] * 4
    ptrs = [0] * 4
    for i in range(4):
        t = inputs[i]
        if needs[i] and t is not None:
            grads[i] = torch.empty(t.shape, dtype=cdtype, device=x.device)
            _out_desc(buf, Sl[i], grads[i], code)  # dx, dz, dweight, dbias: slots 0..3
            ptrs[i] = base + Sl[i]
    abi.RMSNORM_GRADS.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, Sl.dout, "dout", dout, cdtype, code),
            _desc(buf, Sl.x, "x", x, cdtype, code),
            _desc(buf, Sl.weight, "weight", weight, cdtype, code)]
    pz = pb = pr = 0
    if z is not None:
        keep.append(_desc(buf, Sl.z, "z", z, cdtype, code))
        pz = base + Sl.z
    if bias is not None:
        keep.append(_desc(buf, Sl.bias, "bias", bias, cdtype, code))
        pb = base + Sl.bias
    if rstd is not None:
        keep.append(_desc(buf, Sl.rstd, "rstd", rstd, cdtype, code))
        pr = base + Sl.rstd
    _RO.pack_into(buf, s.opt_off, float(eps), int(group_size or 0), 1 if norm_before_gate else 0)
    st = lib.mamba2_rmsnorm_gated_backward(_ctx(_backend_for(cdtype)), base + s.grd_off,
                                           base + Sl.dout, base + Sl.x, pz, base + Sl.weight,
                                           pb, pr, base + s.opt_off, None, 0)
    if st:
        _raise_status(st, "mamba2_rmsnorm_gated_backward")
    for i in range(4):
        g = grads[i]
        if g is not None and g.dtype is not inputs[i].dtype:
            grads[i] = g.to(inputs[i].dtype)
    return tuple(grads)
