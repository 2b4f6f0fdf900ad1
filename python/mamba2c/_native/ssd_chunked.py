"""ssd_chunked.py — the staged SSD pipeline (SPEC §3), forward only:
mamba2_ssd_chunk_cumsum / bmm_chunk / chunk_state / state_passing / chunk_scan.

Q = chunk_size, K = ceil(L/Q). Staged tensors are float32 (float64 for float64
activations); outputs are allocated here. Every stage takes mamba2_ssd_chunked_options_t,
packed by tensors._options at the stage's own slots (abi.SLOT)."""
from __future__ import annotations

import math

import torch

from . import abi, context, loader
from .abi import DT_F32, DT_F64
from .context import device_call
from .._checks import expect_rank
from .loader import _raise_status
from .policy import _F64, _backend_for, _ctx, _f64_if
from .tensors import _desc, _options, _out_desc

_SL = abi.SLOT


def _staged_call(fname, *ptrs):
    st = getattr(loader._lib, fname)(*ptrs)
    if st:
        _raise_status(st, fname)


@device_call
def chunk_cumsum(dt, A, chunk_size: int, dt_bias=None, dt_softplus: bool = False,
                 dt_lo: float = 0.0, dt_hi: float = math.inf):
    """dt [B,L,H], A [H] -> (dt_out [B,H,K,Q], dA_cumsum [B,H,K,Q])."""
    expect_rank("dt", dt, "[B,L,H]")
    loader.load()
    s = context._state()
    S = _SL["chunk_cumsum"]
    cd = _f64_if(dt)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, H = dt.shape
    Q = int(chunk_size)
    K = -(-L // Q) if Q > 0 else 0
    dt_out = torch.empty(Bsz, H, K, Q, dtype=cd, device=dt.device)
    dA_cs = torch.empty(Bsz, H, K, Q, dtype=cd, device=dt.device)
    _out_desc(buf, S.dt_out, dt_out, code)
    _out_desc(buf, S.dA_cumsum, dA_cs, code)
    keep = [_desc(buf, S.dt, "dt", dt, cd, code), _desc(buf, S.A, "A", A, cd, code)]
    p_o = _options(s, keep, S, Q, None, None, dt_bias, None, None, dt_softplus, dt_lo, dt_hi,
                   cd, code)
    _staged_call("mamba2_ssd_chunk_cumsum", _ctx(_backend_for(cd)), base + S.dt_out,
                 base + S.dA_cumsum, base + S.dt, base + S.A, p_o)
    return dt_out, dA_cs


@device_call
def bmm_chunk(B, C, chunk_size: int):
    """B, C [B,L,G,N] -> CB [B,K,G,Q,Q] (CB[i,j] = C_i . B_j within each chunk)."""
    expect_rank("B", B, "[B,L,G,N]")
    loader.load()
    s = context._state()
    S = _SL["bmm_chunk"]
    cd = _f64_if(B, C)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, G, _ = B.shape
    Q = int(chunk_size)
    K = -(-L // Q) if Q > 0 else 0
    CB = torch.empty(Bsz, K, G, Q, Q, dtype=cd, device=B.device)
    _out_desc(buf, S.CB, CB, code)
    keep = [_desc(buf, S.B, "B", B, cd, code), _desc(buf, S.C, "C", C, cd, code)]
    p_o = _options(s, keep, S, Q, None, None, None, None, None, False, 0.0, math.inf, cd, code)
    _staged_call("mamba2_ssd_bmm_chunk", _ctx(_backend_for(cd)), base + S.CB, base + S.B,
                 base + S.C, p_o)
    return CB


@device_call
def chunk_state(x, B, dt_out, dA_cumsum):
    """x [B,L,H,P], B [B,L,G,N], dt_out/dA_cumsum [B,H,K,Q] -> states [B,K,H,P,N]
    (each chunk's state from a zero initial state)."""
    expect_rank("x", x, "[B,L,H,P]")
    expect_rank("B", B, "[B,L,G,N]")
    expect_rank("dA_cumsum", dA_cumsum, "[B,H,K,Q]")
    loader.load()
    s = context._state()
    S = _SL["chunk_state"]
    cd = _f64_if(x, B)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, H, P = x.shape
    N = B.shape[3]
    K, Q = dA_cumsum.shape[2], dA_cumsum.shape[3]
    states = torch.empty(Bsz, K, H, P, N, dtype=cd, device=x.device)
    _out_desc(buf, S.states, states, code)
    keep = [_desc(buf, S.x, "x", x, cd, code), _desc(buf, S.B, "B", B, cd, code),
            _desc(buf, S.dt_out, "dt_out", dt_out, cd, code),
            _desc(buf, S.dA_cumsum, "dA_cumsum", dA_cumsum, cd, code)]
    p_o = _options(s, keep, S, Q, None, None, None, None, None, False, 0.0, math.inf, cd, code)
    _staged_call("mamba2_ssd_chunk_state", _ctx(_backend_for(cd)), base + S.states,
                 base + S.x, base + S.B, base + S.dt_out, base + S.dA_cumsum, p_o)
    return states


@device_call
def state_passing(states, dA_cumsum, initial_states=None):
    """states [B,K,H,P,N], dA_cumsum [B,H,K,Q] -> (states_start [B,K,H,P,N]: the state
    entering each chunk, final_state [B,H,P,N])."""
    expect_rank("states", states, "[B,K,H,P,N]")
    expect_rank("dA_cumsum", dA_cumsum, "[B,H,K,Q]")
    loader.load()
    s = context._state()
    S = _SL["state_passing"]
    cd = _f64_if(states)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, K, H, P, N = states.shape
    Q = dA_cumsum.shape[3]
    start = torch.empty(Bsz, K, H, P, N, dtype=cd, device=states.device)
    final = torch.empty(Bsz, H, P, N, dtype=cd, device=states.device)
    _out_desc(buf, S.states_start, start, code)
    _out_desc(buf, S.final_state, final, code)
    keep = [_desc(buf, S.states, "states", states, cd, code),
            _desc(buf, S.dA_cumsum, "dA_cumsum", dA_cumsum, cd, code)]
    p_o = _options(s, keep, S, Q, None, None, None, initial_states, None, False, 0.0,
                   math.inf, cd, code)
    _staged_call("mamba2_ssd_state_passing", _ctx(_backend_for(cd)), base + S.states_start,
                 base + S.final_state, base + S.states, base + S.dA_cumsum, p_o)
    return start, final


@device_call
def chunk_scan(CB, x, dt_out, dA_cumsum, C, states_start, D=None, z=None):
    """-> out [B,L,H,P] in x.dtype (y = intra-chunk part + the states_start part + D x,
    gated by silu(z) when z is given)."""
    expect_rank("x", x, "[B,L,H,P]")
    expect_rank("dA_cumsum", dA_cumsum, "[B,H,K,Q]")
    loader.load()
    s = context._state()
    S = _SL["chunk_scan"]
    cd = _f64_if(x, C, z)
    code = DT_F64 if cd is _F64 else DT_F32
    buf, base = s.buf, s.base
    Bsz, L, H, P = x.shape
    Q = dA_cumsum.shape[3]
    out = torch.empty(Bsz, L, H, P, dtype=cd, device=CB.device)
    _out_desc(buf, S.out, out, code)
    keep = [_desc(buf, S.CB, "CB", CB, cd, code), _desc(buf, S.x, "x", x, cd, code),
            _desc(buf, S.dt_out, "dt_out", dt_out, cd, code),
            _desc(buf, S.dA_cumsum, "dA_cumsum", dA_cumsum, cd, code),
            _desc(buf, S.C, "C", C, cd, code),
            _desc(buf, S.states_start, "states_start", states_start, cd, code)]
    p_o = _options(s, keep, S, Q, D, z, None, None, None, False, 0.0, math.inf, cd, code)
    _staged_call("mamba2_ssd_chunk_scan", _ctx(_backend_for(cd)), base + S.out,
                 base + S.CB, base + S.x, base + S.dt_out, base + S.dA_cumsum, base + S.C,
                 base + S.states_start, p_o)
    return out.to(x.dtype) if out.dtype is not x.dtype else out
