"""steps.py — the decode steps (SPEC §6): mamba2_ssd_step (the low-overhead path) and
mamba2_conv1d_step.

A decode step moves little data (batch 1: one [H,P,N] state), so the binding's own cost
matters. The SSD step differs from the generic packing of tensors.py in that it
  - packs each descriptor with a per-rank Struct (3 + 2*rank values, no zero padding
    tuples; the bytes after `rank` are not read by the library),
  - takes mamba_ssm's broadcast parameter views (A [H,P,N], dt [B,H,P], dt_bias [H,P],
    D [H,P] expanded with stride 0) as the [H] / [B,H] descriptors of the memory they
    view — no torch slicing, no copy,
  - allocates the output with positional sizes (torch.empty(*sizes) is cheaper than
    passing a torch.Size),
  - returns NotImplemented, before anything is written, for a case the C op cannot serve,
    so the caller can fall back to torch (which cases: mamba2c._dispatch),
  - caches the descriptors of a call signature as a template (see ssd_step).
"""
from __future__ import annotations

import struct

import torch

from . import abi, context, loader
from .abi import BACKEND_REF, BACKENDS, DT_BF16, DT_F16, DT_F32, DT_F64, TENSOR_R, TSZ
from .context import _context, _tls, device_call
from .._checks import step_ranks
from .loader import _raise_status
from .policy import _F32, _F64, _backend_for, _ctx
from .tensors import _act_desc, _bc_desc, _check_device, _desc, _index_desc, _out_desc

_TR = TENSOR_R
_SO = abi.SSD_STEP_OPTIONS
_S = abi.SLOT["ssd_step"]
_CS = abi.CONV1D_STEP_OPTIONS
_C = abi.SLOT["conv1d_step"]
_NDESC = _S.options // TSZ  # descriptors before the options in the step block (12)

# The decode step's descriptor block: the 12 slots of abi.SLOTS["ssd_step"] followed by the
# options struct, written by ONE pack_into from a cached template (the data pointers change
# per call, nothing else does).
_STEP_BLOCK = struct.Struct("@" + f"P{TSZ - 8}s" * _NDESC + f"{_SO.st.size}s")
_NO_DESC = bytes(TSZ - 8)
# ssd_step's fast path packs the block positionally, in this slot order
if abi.SLOTS["ssd_step"] != ("state", "out", "all_states", "x", "dt", "A", "B", "C", "D", "z",
                             "dt_bias", "state_indices", "options"):
    raise ImportError("mamba2c: steps.ssd_step's block order differs from abi.SLOTS")
_STEP_PLANS_MAX = 256
# state storage dtypes the C step takes beside the compute dtype (float32 compute)
_HALF_STATE = {torch.bfloat16: DT_BF16, torch.float16: DT_F16}


def ssd_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
             dt_lo=0.0, dt_hi=float("inf"), state_indices=None, want_all=False):
    """One call of mamba2_ssd_step; `state` [S,H,P,N] is updated in place.

    x [B,H,P] (one token) or [B,T,H,P]; B, C [B,(T,)G,N]; z like x;
    dt [B,(T,)H] or mamba_ssm's [B,(T,)H,P] broadcast over P;
    A [H] or [H,P,N] broadcast over P and N; dt_bias [H] or [H,P] broadcast over P;
    D [H] or [H,P] (per channel, or broadcast over P).
    The state's dtype (float32, or float64 on the reference backend) is the compute dtype;
    a bf16/f16 state is computed in float32 and stored rounded once per token (as mamba_ssm
    does). The state is updated in place, so it is never converted; bf16/f16 activations (x,
    dt, B, C, z all of one half dtype, CPU tensors) are read as they are and out comes back in
    that dtype (float32 arithmetic, rounded once); activations of another floating dtype are
    converted to the compute dtype. Returns out in x.dtype — or (out, all_states
    [B,(T,)H,P,N]) with want_all — or NotImplemented (nothing written) when the C op cannot
    serve the call: a state that is not float32/float64/bf16/f16 or whose last dim is
    strided, float64 activations with a non-float64 state, per-(p,n) A, per-p dt or dt_bias.
    Padding rows (negative state index) get a zero output (and zero all_states).

    Fast path: the descriptors of a call depend only on the shapes, strides, dtypes and
    devices of its tensors (and the scalar options), so they are packed once per such
    signature (with the generic code below) and kept as a template; a later call with the
    same signature builds the key, allocates out and writes every descriptor plus the
    options with one pack_into that patches in the data pointers."""
    s = getattr(_tls, "scratch", None)
    if s is not None and not want_all:
        key = (state.shape, state.stride(), state.dtype, state.is_cpu,
               x.shape, x.stride(), x.dtype, x.is_cpu,
               dt.shape, dt.stride(), dt.dtype, dt.is_cpu,
               A.shape, A.stride(), A.dtype, A.is_cpu,
               B.shape, B.stride(), B.dtype, B.is_cpu,
               C.shape, C.stride(), C.dtype, C.is_cpu,
               None if D is None else (D.shape, D.stride(), D.dtype, D.is_cpu),
               None if z is None else (z.shape, z.stride(), z.dtype, z.is_cpu),
               None if dt_bias is None else (dt_bias.shape, dt_bias.stride(), dt_bias.dtype,
                                             dt_bias.is_cpu),
               None if state_indices is None else (state_indices.shape, state_indices.stride(),
                                                   state_indices.dtype, state_indices.is_cpu),
               dt_softplus, dt_lo, dt_hi)
        last = s.step_last
        if key == last[0]:  # a decode loop repeats one signature: no hashing
            plan = last[1]
        else:
            plan = s.step_plans.get(key)
            if plan is not None:
                s.step_last = (key, plan)
        if plan is not None:
            tmpl, xs, sdt, ref = plan
            if sdt is torch.get_default_dtype():  # positional sizes, no dtype: the cheapest
                out = (torch.empty if state_indices is None else torch.zeros)(*xs)
            else:
                out = (torch.empty if state_indices is None else torch.zeros)(*xs, dtype=sdt)
            _STEP_BLOCK.pack_into(
                s.buf, 0, state.data_ptr(), tmpl[0], out.data_ptr(), tmpl[1], 0, _NO_DESC,
                x.data_ptr(), tmpl[3], dt.data_ptr(), tmpl[4], A.data_ptr(), tmpl[5],
                B.data_ptr(), tmpl[6], C.data_ptr(), tmpl[7],
                0 if D is None else D.data_ptr(), tmpl[8],
                0 if z is None else z.data_ptr(), tmpl[9],
                0 if dt_bias is None else dt_bias.data_ptr(), tmpl[10],
                0 if state_indices is None else state_indices.data_ptr(), tmpl[11], tmpl[12])
            b = getattr(_tls, "backend", None) or context._default_backend
            st = loader._lib.mamba2_ssd_step(_context(BACKEND_REF if ref else BACKENDS[b]),
                                             *s.step_args)
            if st:
                _raise_status(st, "mamba2_ssd_step")
            return out
    else:
        key = None
    return _ssd_step_general(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                             state_indices, want_all, key)


@device_call
def _ssd_step_general(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                      state_indices, want_all, key):
    """ssd_step's packing code (every case); stores a template under `key` when the call
    used every tensor as is (no dtype conversion, no copy) — a CPU call: a call on CUDA
    tensors (device_call; computed in float32 only) never is a template."""
    step_ranks(state, x, B, C)
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    # sdt / code: the compute dtype (activations and parameters); stc: the state's storage,
    # which may also be bf16 / f16 with float32 compute (the C op rounds it once per token)
    sdt = state.dtype
    if sdt is _F32:
        code = DT_F32
        if x.dtype is _F64:
            return NotImplemented
    elif sdt is _F64 and state.is_cpu:
        code = DT_F64
    elif sdt in _HALF_STATE:
        if x.dtype is _F64:
            return NotImplemented
        sdt, code = _F32, DT_F32
    else:
        return NotImplemented
    stc = _HALF_STATE.get(state.dtype, code)
    # activations: bf16/f16 ones (x, dt, B, C, z of one half dtype, CPU tensors) are described
    # as they are (the C step widens them and rounds out once); otherwise the compute dtype
    adt, acode = sdt, code
    if (code == DT_F32 and x.dtype in _HALF_STATE and state.is_cpu and dt.dtype is x.dtype
            and B.dtype is x.dtype and C.dtype is x.dtype and (z is None or z.dtype is x.dtype)):
        adt, acode = x.dtype, _HALF_STATE[x.dtype]
    if not state.is_cpu:
        _check_device("state", state)
    ssh = state.shape
    sst = state.stride()
    if len(ssh) != 4 or (ssh[3] > 1 and sst[3] != 1):
        return NotImplemented
    S = _S
    buf, base = s.buf, s.base
    xs = x.shape
    xr = len(xs)
    # parameters first: any of them may turn the call down before anything is allocated
    kdt = _bc_desc(buf, S.dt, "dt", dt, xr - 1, adt, acode)
    kA = _bc_desc(buf, S.A, "A", A, 1, sdt, code)
    kD = kb = None
    pD = pb = pi = 0
    if dt_bias is not None:
        kb = _bc_desc(buf, S.dt_bias, "dt_bias", dt_bias, 1, sdt, code)
        pb = base + S.dt_bias
    if D is not None:
        # [H,P] per channel is served as is; broadcast over P it becomes [H]
        kD = _bc_desc(buf, S.D, "D", D, 1 if D.dim() == 1 or D.stride(1) == 0 else 2,
                      sdt, code)
        pD = base + S.D
    if kdt is NotImplemented or kA is NotImplemented or kb is NotImplemented \
            or kD is NotImplemented:
        return NotImplemented
    _TR[4].pack_into(buf, S.state, state.data_ptr(), stc, 4, *ssh, *sst)
    kx = _act_desc(buf, S.x, "x", x, adt, acode)
    kB = _act_desc(buf, S.B, "B", B, adt, acode)
    kC = _act_desc(buf, S.C, "C", C, adt, acode)
    kz = ki = None
    pz = 0
    if z is not None:
        kz = _act_desc(buf, S.z, "z", z, adt, acode)
        pz = base + S.z
    if state_indices is None:
        out = torch.empty(*xs, dtype=adt, device=state.device)
    else:
        ki = _index_desc(buf, S.state_indices, state_indices, "state_indices")
        pi = base + S.state_indices
        # padding rows are left untouched by the C op
        out = torch.zeros(*xs, dtype=adt, device=state.device)
    _TR[xr].pack_into(buf, S.out, out.data_ptr(), acode, xr, *xs, *out.stride())
    pall = 0
    alls = None
    if want_all:
        alls = (torch.zeros if state_indices is not None else torch.empty)(
            *xs, ssh[3], dtype=state.dtype, device=state.device)  # the state's storage dtype
        _TR[xr + 1].pack_into(buf, S.all_states, alls.data_ptr(), stc, xr + 1, *alls.shape,
                              *alls.stride())
        pall = base + S.all_states
    _SO.pack_into(buf, S.options, pD, pz, pb, pi, 1 if dt_softplus else 0, dt_lo, dt_hi)
    ref = code == DT_F64
    b = getattr(_tls, "backend", None) or context._default_backend
    st = lib.mamba2_ssd_step(_ctx(BACKEND_REF if ref else BACKENDS[b]), base + S.state,
                             base + S.out, pall, base + S.x, base + S.dt, base + S.A,
                             base + S.B, base + S.C, base + S.options)
    if st:
        _raise_status(st, "mamba2_ssd_step")
    if (key is not None and state.is_cpu and kx is x and kdt is dt and kA is A and kB is B
            and kC is C
            and kD is D and kz is z and kb is dt_bias and ki is state_indices):
        # every tensor was described as is: remember the descriptors (all but the pointers)
        raw = buf.raw
        tmpl = [raw[i * TSZ + 8:(i + 1) * TSZ] for i in range(_NDESC)]
        for t, off in ((D, S.D), (z, S.z), (dt_bias, S.dt_bias), (state_indices, S.state_indices)):
            if t is None:
                tmpl[off // TSZ] = _NO_DESC
        tmpl.append(raw[S.options:S.options + _SO.st.size])
        plans = s.step_plans
        if len(plans) >= _STEP_PLANS_MAX:
            plans.clear()
        plans[key] = (tuple(tmpl), tuple(xs), adt, ref)
    if x.dtype is not adt:
        out = out.to(x.dtype)
    return (out, alls) if want_all else out


def conv1d_step(x, conv_cache, weight, bias=None, activation: bool = False, state_indices=None,
                cache_seqlens=None):
    """x [B,C] or [B,T,C]; conv_cache [S,C,K] with K >= W-1 and any strides (mamba_ssm's and
    transformers' [B,C,d_conv], causal-conv1d's channel-last views), float32/float64 as the
    computation, or on the CPU bf16/f16 (x and out in its dtype, float32 arithmetic): it is
    updated IN PLACE and described with its own strides, so it is never copied (the caller
    checks the dtype). cache_seqlens [B] (int32/int64): circular-buffer
    mode. Padding rows (negative index) get a zero output."""
    if x.is_cuda and _tls.__dict__.get("device") is None:
        # a CUDA call: through device_call (checked inline rather than by decorating this
        # function: a decode step is called per token, and the decorator's frame costs more
        # than this test)
        return _conv1d_step_device(x, conv_cache, weight, bias, activation, state_indices,
                                   cache_seqlens)
    lib = loader._lib if loader._lib is not None else loader.load()
    s = getattr(_tls, "scratch", None) or context._state()
    cdtype = conv_cache.dtype
    if cdtype is _F32 or cdtype is _F64:
        code = DT_F64 if cdtype is _F64 else DT_F32
        wdt, wcode = cdtype, code
    elif cdtype in _HALF_STATE and conv_cache.is_cpu:
        # a bf16/f16 cache (CPU): x and out in its dtype; weight and bias as they are when
        # they share it, else float32
        code = _HALF_STATE[cdtype]
        wdt, wcode = (cdtype, code) if weight.dtype is cdtype else (_F32, DT_F32)
    else:
        raise TypeError(f"mamba2c: conv_cache has dtype {cdtype}; the C step updates a float32 "
                        f"(or float64, or on the CPU bf16/f16) cache in place (use "
                        f"mamba2c.ops.conv1d_step)")
    buf, base = s.buf, s.base
    S = _C
    out = (torch.zeros if state_indices is not None else torch.empty)(x.shape, dtype=cdtype,
                                                                      device=x.device)
    _out_desc(buf, S.out, out, code)
    _out_desc(buf, S.conv_cache, conv_cache, code)  # its own strides, whatever they are
    keep = [_desc(buf, S.x, "x", x, cdtype, code),
            _desc(buf, S.weight, "weight", weight, wdt, wcode)]
    pb = pi = ps = 0
    if bias is not None:
        keep.append(_desc(buf, S.bias, "bias", bias, wdt, wcode))
        pb = base + S.bias
    if state_indices is not None:
        keep.append(_index_desc(buf, S.state_indices, state_indices, "state_indices"))
        pi = base + S.state_indices
    if cache_seqlens is not None:
        keep.append(_index_desc(buf, S.cache_seqlens, cache_seqlens, "cache_seqlens"))
        ps = base + S.cache_seqlens
    _CS.pack_into(buf, s.opt_off, pb, pi, 1 if activation else 0, ps)
    st = lib.mamba2_conv1d_step(_ctx(_backend_for(cdtype)), base + S.out,
                                base + S.conv_cache, base + S.x, base + S.weight,
                                base + s.opt_off)
    if st:
        _raise_status(st, "mamba2_conv1d_step")
    return out.to(x.dtype) if out.dtype is not x.dtype else out


_conv1d_step_device = device_call(conv1d_step)
