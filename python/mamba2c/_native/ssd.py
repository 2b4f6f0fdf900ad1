"""ssd.py — the fused SSD op: mamba2_ssd_forward / _forward_states / _backward (SPEC §1-2).

No autograd here (see _custom_ops.py). The dtype policy is policy.py's; descriptor slots
are abi.SLOT["ssd_forward"] / ["ssd_backward"].
"""
from __future__ import annotations

import ctypes
import math
from typing import Optional, Sequence, Tuple

import torch

from . import abi, context, loader
from .abi import DT_F32, DT_F64
from .context import _tls, _workspace, device_call
from .loader import Mamba2ValueError, _raise_status
from .policy import _F64, _HALF_CODES, _backend_for, _cdtype, _ctx, _half_code
from .tensors import _desc, _options, _out_desc

_FWD = abi.SLOT["ssd_forward"]
_BWD = abi.SLOT["ssd_backward"]


def ssd_forward(x, dt, A, B, C, chunk_size: int, D=None, z=None, dt_bias=None,
                initial_states=None, cu_seqlens=None, dt_softplus: bool = False,
                dt_lo: float = 0.0, dt_hi: float = math.inf, return_out_x: bool = False):
    """One call of mamba2_ssd_forward. Returns (out [B,L,H,P] in x.dtype,
    final_state [S,H,P,N] in the parameter dtype: float32, or float64 for float64 input).
    return_out_x: also return out_x [B,L,H,P] in x.dtype, the output before the z gate
    (y + D x; the C call's out_x output), which ssd_backward(out_x=...) takes instead of recomputing y
    for dz — (out, final_state, out_x); out_x is None (not allocated) without z.
    No autograd here (see _custom_ops.py)."""
    r = _ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                     dt_softplus, dt_lo, dt_hi, None, return_out_x)
    return (r[0], r[1], r[3]) if return_out_x else (r[0], r[1])


def ssd_forward_states(x, dt, A, B, C, chunk_size: int, positions: torch.Tensor, D=None, z=None,
                       dt_bias=None, initial_states=None, cu_seqlens=None,
                       dt_softplus: bool = False, dt_lo: float = 0.0, dt_hi: float = math.inf,
                       return_out_x: bool = False):
    """One call of mamba2_ssd_forward_states: ssd_forward plus position_states [npos,H,P,N]
    (parameter dtype), the state after each flat token index positions[i] (b*L + t; the
    packed index with cu_seqlens), strictly increasing, int32/int64. Returns
    (out, final_state, position_states), plus out_x (None without z) with return_out_x."""
    r = _ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                     dt_softplus, dt_lo, dt_hi, positions, return_out_x)
    return r if return_out_x else r[:3]


@device_call
def _ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                 dt_softplus, dt_lo, dt_hi, positions, want_out_x=False):
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = _cdtype(x, dt, B, C, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    backend = _backend_for(cdtype)
    buf, base = s.buf, s.base
    # activations: x's half dtype as is when the backend takes it, else the compute dtype
    acode = _half_code(backend, x, dt, B, C, z) if x.dtype in _HALF_CODES else 0
    adtype, acode = (x.dtype, acode) if acode else (cdtype, code)
    if x.dim() != 4 or B.dim() != 4:
        raise Mamba2ValueError(f"mamba2c: x must be [B,L,H,P] and B [B,L,G,N]; got x "
                               f"{tuple(x.shape)}, B {tuple(B.shape)}")
    Bsz, L, H, P = x.shape
    N = B.shape[3]
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    F = _FWD
    dev = x.device
    out = torch.empty(Bsz, L, H, P, dtype=adtype, device=dev)
    final = torch.empty(S, H, P, N, dtype=cdtype, device=dev)
    _out_desc(buf, F.out, out, acode)
    _out_desc(buf, F.final_state, final, code)
    # out_x (the output before the gate) only helps the backward with z: else not allocated
    out_x = (torch.empty(Bsz, L, H, P, dtype=adtype, device=dev)
             if want_out_x and z is not None else None)
    p_ox = 0
    if out_x is not None:
        _out_desc(buf, F.out_x, out_x, acode)
        p_ox = base + F.out_x
    keep = [_desc(buf, F.x, "x", x, adtype, acode),
            _desc(buf, F.dt, "dt", dt, adtype, acode),
            _desc(buf, F.A, "A", A, cdtype, code),
            _desc(buf, F.B, "B", B, adtype, acode),
            _desc(buf, F.C, "C", C, adtype, acode)]
    p_o = _options(s, keep, F, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                   dt_softplus, dt_lo, dt_hi, cdtype, code, positions, adtype, acode)
    ctx = _ctx(backend)
    pos_states = None
    if positions is None:
        st = lib.mamba2_ssd_forward(ctx, base + F.out, p_ox, base + F.final_state, base + F.x,
                                    base + F.dt, base + F.A, base + F.B, base + F.C, p_o,
                                    None, 0)
        fname = "mamba2_ssd_forward"
    else:
        pos_states = torch.empty(positions.shape[0], H, P, N, dtype=cdtype, device=dev)
        _out_desc(buf, F.position_states, pos_states, code)
        st = lib.mamba2_ssd_forward_states(ctx, base + F.out, p_ox, base + F.final_state,
                                           base + F.position_states, base + F.x, base + F.dt,
                                           base + F.A, base + F.B, base + F.C, p_o, None, 0)
        fname = "mamba2_ssd_forward_states"
    if st:
        _raise_status(st, fname)
    if out.dtype is not x.dtype:
        out = out.to(x.dtype)  # bf16/f16 storage: computed in f32, rounded once here
        if out_x is not None:
            out_x = out_x.to(x.dtype)  # like out (mamba_ssm saves it in x.dtype too)
    return out, final, pos_states, out_x


# Gradient order everywhere in the package (matches mamba2_ssd_grads_t).
GRAD_NAMES = ("dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_states")
_ACT_GRADS = frozenset((0, 1, 3, 4, 6))  # dx, ddt, dB, dC, dz: stored like the activations
_GRAD_SLOTS = tuple(_BWD[i] for i in range(9))  # the grads' slots, in GRAD_NAMES order


@device_call
def ssd_backward(dout, dfinal, x, dt, A, B, C, chunk_size: int, D=None, z=None, dt_bias=None,
                 initial_states=None, cu_seqlens=None, dt_softplus: bool = False,
                 dt_lo: float = 0.0, dt_hi: float = math.inf,
                 needs: Sequence[bool] = (True,) * 9,
                 out_x: Optional[torch.Tensor] = None) -> Tuple[Optional[torch.Tensor], ...]:
    """One call of mamba2_ssd_backward. `needs` selects gradients in GRAD_NAMES order (a
    gradient of an absent optional input is never computed). Returns 9 entries, None where
    not computed; each gradient has the dtype of its input. out_x: the forward's out_x for
    the same inputs (ssd_forward(return_out_x=True)); with z, the C backward reads it
    instead of recomputing y for dz (ignored without z)."""
    if z is None:
        out_x = None
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = _cdtype(x, dt, B, C, z)
    code = DT_F64 if cdtype is _F64 else DT_F32
    backend = _backend_for(cdtype)
    buf, base = s.buf, s.base
    acode = _half_code(backend, x, dt, B, C, z, dout) if x.dtype in _HALF_CODES else 0
    adtype, acode = (x.dtype, acode) if acode else (cdtype, code)
    Sl = _BWD
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    grads = [None] * 9
    ptrs = [0] * 9
    for i in range(9):
        t = inputs[i]
        if needs[i] and t is not None:
            act = i in _ACT_GRADS  # dx, ddt, dB, dC, dz: the activation dtype
            g = torch.empty(t.shape, dtype=adtype if act else cdtype, device=x.device)
            grads[i] = g
            _out_desc(buf, _GRAD_SLOTS[i], g, acode if act else code)
            ptrs[i] = base + _GRAD_SLOTS[i]
    abi.SSD_GRADS.pack_into(buf, s.grd_off, *ptrs)
    keep = [_desc(buf, Sl.dout, "dout", dout, adtype, acode)]
    p_df = 0
    if dfinal is not None:
        keep.append(_desc(buf, Sl.dfinal_state, "dfinal_states", dfinal, cdtype, code))
        p_df = base + Sl.dfinal_state
    keep += [_desc(buf, Sl.x, "x", x, adtype, acode),
             _desc(buf, Sl.dt, "dt", dt, adtype, acode),
             _desc(buf, Sl.A, "A", A, cdtype, code),
             _desc(buf, Sl.B, "B", B, adtype, acode),
             _desc(buf, Sl.C, "C", C, adtype, acode)]
    p_ox = 0
    if out_x is not None:  # an input here: the forward's out_x
        keep.append(_desc(buf, Sl.out_x, "out_x", out_x, adtype, acode))
        p_ox = base + Sl.out_x
    p_o = _options(s, keep, Sl, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                   dt_softplus, dt_lo, dt_hi, cdtype, code, None, adtype, acode)
    ctx = _ctx(backend)
    args = (ctx, base + s.grd_off, base + Sl.dout, p_df, base + Sl.x, base + Sl.dt,
            base + Sl.A, base + Sl.B, base + Sl.C, p_ox, p_o)
    st = lib.mamba2_ssd_backward_workspace_size(*args, ctypes.addressof(s.ws_query))
    if st:
        _raise_status(st, "mamba2_ssd_backward")
    ws, ws_size = _workspace(s, s.ws_query.value)
    st = lib.mamba2_ssd_backward(*args, ws, ws_size)
    if st:
        _raise_status(st, "mamba2_ssd_backward")
    for i in range(9):
        g = grads[i]
        if g is not None and g.dtype is not inputs[i].dtype:
            grads[i] = g.to(inputs[i].dtype)
    return tuple(grads)
