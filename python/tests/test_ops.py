"""conv1d, gated RMSNorm and the decode steps (C ops when the library exports them, torch
implementations otherwise; mamba2c.ops dispatches), through their mamba_ssm /
causal-conv1d names: against the loop-based oracles in mamba2c.reference, gradcheck in
float64, and decoding = scanning."""
from __future__ import annotations

import pytest
import torch

import mamba2c
from mamba2c import ops, reference as R
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32, make_ssd_inputs

f64 = torch.float64


# ---- causal conv1d ------------------------------------------------------------------------

@pytest.mark.parametrize("W", [2, 3, 4])
@pytest.mark.parametrize("act", [None, "silu"])
def test_causal_conv1d_fn_vs_reference(W, act):
    g = torch.Generator().manual_seed(W)
    B, L, Dc = 2, 11, 6
    buf = torch.randn(B, L, Dc + 5, generator=g)
    xl = buf[..., 2:2 + Dc]                      # channel-last view, row stride Dc+5
    w = torch.randn(Dc, W, generator=g)
    b = torch.randn(Dc, generator=g)
    init = torch.randn(B, Dc, W - 1, generator=g)
    out, fin = mamba2c.causal_conv1d_fn(xl.transpose(1, 2), w, b, initial_states=init,
                                        return_final_states=True, activation=act)
    assert out.shape == (B, Dc, L) and fin.shape == (B, Dc, W - 1)
    rout, rfin = R.conv1d(xl.double(), w.double(), b.double(), act is not None, init.double())
    assert nerr(out.transpose(1, 2), rout) <= TOL_F32 and nerr(fin, rfin) == 0.0
    # without initial states
    out2 = mamba2c.causal_conv1d_fn(xl.transpose(1, 2), w, b, activation=act)
    rout2, _ = R.conv1d(xl.double(), w.double(), b.double(), act is not None)
    assert nerr(out2.transpose(1, 2), rout2) <= TOL_F32


def test_causal_conv1d_seq_idx_resets_and_final_states_out():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 5, 9, generator=g)
    w = torch.randn(5, 4, generator=g)
    seq_idx = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2]])
    out = mamba2c.causal_conv1d_fn(x, w, None, seq_idx=seq_idx, activation="silu")
    cu = torch.tensor([0, 3, 5, 9])
    rout, _ = R.conv1d(x.transpose(1, 2).double(), w.double(), None, True, None, cu)
    assert nerr(out.transpose(1, 2), rout) <= TOL_F32
    fso = torch.empty(1, 5, 3)
    _, fin = mamba2c.causal_conv1d_fn(x, w, return_final_states=True, final_states_out=fso)
    assert fin is fso and torch.equal(fso, x[..., -3:])
    with pytest.raises(NotImplementedError):
        mamba2c.causal_conv1d_fn(x, w, activation="gelu")


def test_conv1d_short_sequence_final_state_includes_initial():
    x = torch.randn(1, 1, 3)   # [B,L=1,D]
    w = torch.randn(3, 4)
    init = torch.randn(1, 3, 3)
    _, fin = ops.conv1d(x, w, None, False, init, None, True)
    expect = torch.cat([init[..., 1:], x.transpose(1, 2)], dim=-1)
    assert torch.equal(fin, expect)


def test_conv1d_gradcheck_f64():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 3, generator=g, dtype=f64, requires_grad=True)
    w = torch.randn(3, 4, generator=g, dtype=f64, requires_grad=True)
    b = torch.randn(3, generator=g, dtype=f64, requires_grad=True)
    init = torch.randn(2, 3, 3, generator=g, dtype=f64, requires_grad=True)

    def f(x, w, b, init):
        return ops.conv1d(x, w, b, True, init, None, True)

    assert torch.autograd.gradcheck(f, (x, w, b, init))
    x1 = x[:1].detach().requires_grad_(True)
    cu = torch.tensor([0, 2, 6])
    assert torch.autograd.gradcheck(lambda x, w, b: ops.conv1d(x, w, b, True, None, cu, True),
                                    (x1, w, b))


# ---- gated RMSNorm ------------------------------------------------------------------------

@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("group_size", [None, 4, 12])
def test_rmsnorm_fn_vs_reference(norm_before_gate, group_size):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 5, 12, generator=g)
    z = torch.randn(3, 5, 12, generator=g)
    w = torch.randn(12, generator=g)
    b = torch.randn(12, generator=g)
    out = mamba2c.rmsnorm_fn(x, w, b, z=z, eps=1e-5, group_size=group_size,
                             norm_before_gate=norm_before_gate)
    ref = R.rmsnorm_gated(x.double(), w.double(), b.double(), z.double(), 1e-5, group_size,
                          norm_before_gate)
    assert nerr(out, ref) <= TOL_F32
    out_nz = mamba2c.rmsnorm_fn(x, w, None, eps=1e-5, group_size=group_size)
    assert nerr(out_nz, R.rmsnorm_gated(x.double(), w.double(), None, None, 1e-5, group_size)) <= TOL_F32


def test_rmsnorm_gated_module_and_bf16():
    m = mamba2c.RMSNormGated(16, eps=1e-5, group_size=8, norm_before_gate=False)
    assert m.bias is None and torch.equal(m.weight, torch.ones(16))
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    z = torch.randn(4, 16, dtype=torch.bfloat16)
    y = m(x, z)
    assert y.dtype == torch.bfloat16
    ref = R.rmsnorm_gated(x.double(), m.weight.double(), None, z.double(), 1e-5, 8, False)
    assert nerr(y, ref) <= 1e-2


def test_rmsnorm_gradcheck_f64():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, generator=g, dtype=f64, requires_grad=True)
    z = torch.randn(4, 8, generator=g, dtype=f64, requires_grad=True)
    w = torch.randn(8, generator=g, dtype=f64, requires_grad=True)
    b = torch.randn(8, generator=g, dtype=f64, requires_grad=True)
    for nbg in (False, True):
        assert torch.autograd.gradcheck(
            lambda x, z, w, b: mamba2c.rmsnorm_fn(x, w, b, z, 1e-6, 4, nbg), (x, z, w, b))


# ---- decode steps --------------------------------------------------------------------------

def test_selective_state_update_steps_equal_scan():
    """Running the step L times equals one scan over L tokens (SPEC §6)."""
    B, L, H, P, N, G = 2, 9, 4, 4, 8, 2
    inp = make_ssd_inputs(B, L, H, P, N, G, D="channel", seed=4)
    out, fin = mamba2c.mamba_chunk_scan_combined(
        inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4, D=inp["D"], z=inp["z"],
        dt_bias=inp["dt_bias"], initial_states=inp["initial_states"], dt_softplus=True,
        return_final_states=True)
    state = inp["initial_states"].clone()
    ys = []
    for t in range(L):
        # mamba_ssm's Mamba2.step shapes: dt, dt_bias, A expanded over P (and N)
        dt_t = inp["dt"][:, t, :, None].expand(B, H, P)
        A_t = inp["A"][:, None, None].expand(H, P, N)
        ys.append(mamba2c.selective_state_update(
            state, inp["x"][:, t], dt_t, A_t, inp["B"][:, t], inp["C"][:, t], inp["D"],
            z=inp["z"][:, t], dt_bias=inp["dt_bias"][:, None].expand(H, P), dt_softplus=True))
    assert nerr(torch.stack(ys, 1), out) <= TOL_F32 and nerr(state, fin) <= TOL_F32


def test_selective_state_update_indices_padding_and_headless():
    S, B, H, P, N = 5, 3, 2, 4, 4
    g = torch.Generator().manual_seed(5)
    state = torch.randn(S, H, P, N, generator=g)
    x = torch.randn(B, H, P, generator=g)
    dt = torch.rand(B, H, generator=g)
    A = -torch.rand(H, generator=g)
    Bm = torch.randn(B, 1, N, generator=g)
    Cm = torch.randn(B, 1, N, generator=g)
    idx = torch.tensor([4, -1, 1], dtype=torch.int32)
    st_ref = state.clone()
    out_ref = R.ssd_step(st_ref, x, dt, A, Bm, Cm, state_indices=idx)
    out = mamba2c.selective_state_update(state, x, dt, A, Bm, Cm, state_batch_indices=idx)
    assert torch.allclose(out, out_ref, atol=1e-6) and torch.allclose(state, st_ref, atol=1e-6)
    assert torch.equal(out[1], torch.zeros(H, P))
    # head-less mamba_ssm form: state [B,dim,N], x [B,dim], A [dim,N], B [B,N]
    st3 = torch.randn(2, 6, 4, generator=g)
    x3 = torch.randn(2, 6, generator=g)
    dt3 = torch.rand(2, 6, generator=g)
    A3 = -torch.rand(6, 4, generator=g)
    B3 = torch.randn(2, 4, generator=g)
    C3 = torch.randn(2, 4, generator=g)
    st_copy = st3.clone()
    o3 = mamba2c.selective_state_update(st3, x3, dt3, A3, B3, C3)
    new = st_copy * torch.exp(dt3[..., None] * A3) + (dt3 * x3)[..., None] * B3[:, None]
    assert torch.allclose(st3, new, atol=1e-6)
    assert torch.allclose(o3, (new * C3[:, None]).sum(-1), atol=1e-6)


def test_causal_conv1d_update_matches_full_conv():
    g = torch.Generator().manual_seed(6)
    B, Dc, L, W = 2, 5, 7, 4
    x = torch.randn(B, Dc, L, generator=g)
    w = torch.randn(Dc, W, generator=g)
    b = torch.randn(Dc, generator=g)
    full = mamba2c.causal_conv1d_fn(x, w, b, activation="silu")
    for K in (W - 1, W, W + 2):  # state_len >= W-1 (mamba_ssm keeps W)
        st = torch.zeros(B, Dc, K)
        outs = [mamba2c.causal_conv1d_update(x[..., t], st, w, b, "silu") for t in range(L)]
        assert nerr(torch.stack(outs, -1), full) <= TOL_F32
        assert torch.equal(st[..., -min(K, L):], x[..., L - min(K, L):])
    # several tokens per call, and a circular buffer
    st = torch.zeros(B, Dc, W - 1)
    o1 = mamba2c.causal_conv1d_update(x[..., :3], st, w, b, "silu")
    o2 = mamba2c.causal_conv1d_update(x[..., 3:], st, w, b, "silu")
    assert nerr(torch.cat([o1, o2], -1), full) <= TOL_F32
    K = 5
    st = torch.zeros(B, Dc, K)
    seqlens = torch.zeros(B, dtype=torch.int32)
    outs = []
    for t in range(L):
        outs.append(mamba2c.causal_conv1d_update(x[..., t], st, w, b, "silu", cache_seqlens=seqlens))
        seqlens += 1
    assert nerr(torch.stack(outs, -1), full) <= TOL_F32


def test_conv1d_step_indices_vs_reference():
    g = torch.Generator().manual_seed(7)
    cache = torch.randn(4, 3, 3, generator=g)
    x = torch.randn(3, 3, generator=g)
    w = torch.randn(3, 4, generator=g)
    idx = torch.tensor([2, -1, 0])
    c_ref = cache.clone()
    o_ref = R.conv1d_step(x, c_ref, w, None, True, idx)
    o = mamba2c.causal_conv1d_update(x, cache, w, None, "silu", conv_state_indices=idx)
    assert torch.allclose(o, o_ref, atol=1e-6) and torch.allclose(cache, c_ref, atol=1e-6)


def test_ssd_step_gradcheck_f64():
    """The decode step is differentiable w.r.t. its inputs (the cache itself is mutated)."""
    g = torch.Generator().manual_seed(8)
    B, H, P, N = 2, 2, 2, 3
    ts = [torch.randn(B, H, P, generator=g, dtype=f64), torch.rand(B, H, generator=g, dtype=f64),
          -torch.rand(H, generator=g, dtype=f64), torch.randn(B, 1, N, generator=g, dtype=f64),
          torch.randn(B, 1, N, generator=g, dtype=f64), torch.randn(H, P, generator=g, dtype=f64),
          torch.randn(B, H, P, generator=g, dtype=f64), torch.randn(H, generator=g, dtype=f64)]
    state0 = torch.randn(B, H, P, N, generator=g, dtype=f64, requires_grad=True)
    for t in ts:
        t.requires_grad_(True)

    def f(state0, x, dt, A, Bm, Cm, D, z, db):
        st = state0.clone()
        y = ops.ssd_step(st, x, dt, A, Bm, Cm, D, z, db, True)
        return y, st

    assert torch.autograd.gradcheck(f, (state0, *ts))


def test_backend_of():
    assert ops.backend_of("ssd") == "C"
    assert ops.backend_of("ssd", "cuda") == "torch"
    for name in ("conv1d", "rmsnorm_gated", "ssd_step", "conv1d_step"):
        assert ops.backend_of(name) in ("C", "torch")


def test_conv1d_update_gradcheck_f64():
    """With inputs that need gradients the decode step takes the differentiable path."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, generator=g, dtype=f64, requires_grad=True)
    w = torch.randn(3, 4, generator=g, dtype=f64, requires_grad=True)
    b = torch.randn(3, generator=g, dtype=f64, requires_grad=True)
    st0 = torch.randn(2, 3, 3, generator=g, dtype=f64, requires_grad=True)

    def f(x, w, b, st0):
        st = st0.clone()
        return mamba2c.causal_conv1d_update(x, st, w, b, "silu"), st

    assert torch.autograd.gradcheck(f, (x, w, b, st0))
