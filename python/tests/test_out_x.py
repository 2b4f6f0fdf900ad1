"""options.out_x in the PyTorch training path: with z and a gradient for z, the forward also
writes out_x (the output before the z gate, y + D x), saves it, and the backward passes it to
the C backward (which then skips recomputing y for dz). Without z, without a gradient for z,
or in inference, out_x is never allocated.

Checked here: gradients of the out_x path against the float64 reference (SPEC §8) and against
the path without out_x; when out_x is (not) allocated, in eager mode, through the custom op
and under torch.compile; opcheck with out_x; half precision (native and widened); float64 on
the reference backend; the binding's out_x value itself."""
from __future__ import annotations

import math

import pytest
import torch

import mamba2c
from mamba2c import _custom_ops, _native, reference as R
from mamba2c.reference import normalized_error as nerr

from conftest import (TOL_F32, TOL_LOWP_GRAD, TOL_LOWP_OUT, as64, check_compiled_against_eager,
                      make_ssd_inputs)

INF = math.inf
KEYS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


class Spy:
    """Records, per C forward, whether an out_x was allocated, and per C backward, whether
    one was passed (monkeypatches the two _native functions every path goes through)."""

    def __init__(self, monkeypatch):
        self.fwd, self.bwd = [], []
        fwd, bwd = _native._ssd_forward, _native.ssd_backward

        def spy_fwd(*a, **k):
            r = fwd(*a, **k)
            self.fwd.append(r[3])
            return r

        def spy_bwd(*a, **k):
            ox = a[17] if len(a) > 17 else k.get("out_x")
            self.bwd.append(ox)
            return bwd(*a, **k)

        monkeypatch.setattr(_native, "_ssd_forward", spy_fwd)
        monkeypatch.setattr(_native, "ssd_backward", spy_bwd)

    def allocated(self):
        return [t is not None for t in self.fwd]

    def passed(self):
        return [t is not None for t in self.bwd]


def _call(inp, Q=8, use_custom_op=None, cu=None, want=None):
    """ssd() on a dict of inputs; want forces the out_x decision (None: ssd()'s own)."""
    args = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], Q, inp.get("D"), inp.get("z"),
            inp.get("dt_bias"), inp.get("initial_states"), cu, True, 0.0, INF)
    if want is None:
        return _custom_ops.ssd(*args[:11], True, (0.0, INF), use_custom_op=use_custom_op)
    if use_custom_op:
        return torch.ops.mamba2c.ssd_fwd(*args, want)[:2]
    return _custom_ops.SSDFunction.apply(*args, want)


def _fb(inp, **kw):
    for v in inp.values():
        v.grad = None
    out, fin = _call(inp, **kw)
    g = torch.Generator().manual_seed(7)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
    dfin = torch.randn(fin.shape, generator=g, dtype=torch.float64).to(fin.dtype)
    ((out * dout).sum() + (fin * dfin).sum()).backward()
    return out.detach(), fin.detach(), {k: v.grad.clone() for k, v in inp.items()}, dout, dfin


# (B, L, H, P, N, G, Q, D, nseq) — every case has z
CASES = [(2, 37, 4, 8, 16, 2, 16, "channel", None), (1, 50, 6, 4, 8, 3, 7, None, None),
         (1, 130, 2, 16, 32, 1, 32, "head", None), (1, 23, 4, 4, 8, 2, 4, "channel", 4)]
IDS = ["grouped_Dchan", "oddQ_noD", "longer", "varlen"]


@pytest.mark.parametrize("use_custom_op", [False, True], ids=["eager", "custom_op"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_out_x_gradients_vs_f64_reference_and_no_out_x(monkeypatch, case, use_custom_op):
    B, L, H, P, N, G, Q, D, nseq = case
    cu = torch.tensor([0, 3, 3, 10, 23]) if nseq else None
    inp = make_ssd_inputs(B, L, H, P, N, G, D=D, nseq=nseq, requires_grad=True, seed=L)
    spy = Spy(monkeypatch)
    out, fin, grads, dout, dfin = _fb(inp, Q=Q, cu=cu, use_custom_op=use_custom_op)
    assert spy.allocated() == [True] and spy.passed() == [True]
    assert spy.fwd[0].shape == inp["x"].shape and spy.fwd[0].dtype == torch.float32
    assert spy.bwd[0] is spy.fwd[0]  # the very tensor the forward wrote
    # float64 reference
    r = as64(inp)
    rout, rfin = R.ssd_sequential(r["x"], r["dt"], r["A"], r["B"], r["C"], r.get("D"), r["z"],
                                  r["dt_bias"], r["initial_states"], cu, True)
    ((rout * dout.double()).sum() + (rfin * dfin.double()).sum()).backward()
    errs = {k: nerr(g, r[k].grad) for k, g in grads.items()}
    errs.update(out=nerr(out, rout), final=nerr(fin, rfin))
    assert all(e <= TOL_F32 for e in errs.values()), errs
    # the same call without out_x (y recomputed in the C backward)
    out2, fin2, grads2, _, _ = _fb(inp, Q=Q, cu=cu, use_custom_op=use_custom_op, want=False)
    assert spy.allocated()[-1] is False and spy.passed()[-1] is False
    assert torch.equal(out, out2) and torch.equal(fin, fin2)
    # (not bitwise: the C backward's passes are arranged differently with out_x)
    diff = {k: nerr(grads[k], grads2[k]) for k in grads}
    assert all(e <= TOL_F32 for e in diff.values()), diff


def test_out_x_not_allocated_without_need(monkeypatch):
    spy = Spy(monkeypatch)
    inp = make_ssd_inputs(1, 12, 2, 4, 8, 1, requires_grad=True, seed=3)
    a = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4)
    kw = dict(D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"], dt_softplus=True)
    with torch.no_grad():
        mamba2c.mamba_chunk_scan_combined(*a, **kw)
    with torch.inference_mode():
        mamba2c.mamba_chunk_scan_combined(*a, **kw)
        mamba2c.mamba_chunk_scan_combined(*a, return_states_at=[5], **kw)
    # no z: nothing to save, whatever needs a gradient
    mamba2c.mamba_chunk_scan_combined(*a, D=inp["D"], dt_softplus=True).sum().backward()
    # z given but not requiring a gradient: the C backward would not use out_x
    zc = inp["z"].detach()
    mamba2c.mamba_chunk_scan_combined(*a, **{**kw, "z": zc}).sum().backward()
    # inputs that need no gradient at all, grad mode on
    d = {k: v.detach() for k, v in inp.items()}
    mamba2c.mamba_chunk_scan_combined(d["x"], d["dt"], d["A"], d["B"], d["C"], 4, z=d["z"])
    # the custom op path decides the same way
    with torch.no_grad():
        _custom_ops.ssd(*a, inp["D"], inp["z"], use_custom_op=True)
    assert spy.allocated() == [False] * 7
    assert spy.passed() == [False] * 2
    # training with z: allocated, and used by the backward (eager, custom op, states)
    mamba2c.mamba_chunk_scan_combined(*a, **kw).sum().backward()
    _custom_ops.ssd(*a, inp["D"], inp["z"], use_custom_op=True)[0].sum().backward()
    mamba2c.mamba_chunk_scan_combined(*a, return_states_at=[5], **kw)[0].sum().backward()
    assert spy.allocated()[7:] == [True] * 3 and spy.passed()[2:] == [True] * 3


def test_states_path_with_out_x_matches_plain_path():
    """ssd_states (mamba2_ssd_forward_states) with out_x: the same out, states and
    gradients as ssd() — out_x and position_states use different descriptor slots."""
    inp = make_ssd_inputs(2, 19, 2, 4, 8, 1, D="channel", requires_grad=True, seed=4)
    a = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4)
    kw = dict(D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"], dt_softplus=True,
              initial_states=inp["initial_states"], return_final_states=True)
    res = []
    for at in (None, [3, 18, 30]):
        for v in inp.values():
            v.grad = None
        r = mamba2c.mamba_chunk_scan_combined(*a, return_states_at=at, **kw)
        (r[0].square().sum() + r[1].sum()).backward()
        res.append((r[0].detach(), r[1].detach(), [inp[k].grad.clone() for k in KEYS]))
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])
    for g0, g1 in zip(res[0][2], res[1][2]):
        assert torch.equal(g0, g1)


def test_out_x_value_is_the_ungated_output():
    """The binding's out_x equals the output of the same call without z (y + D x)."""
    inp = make_ssd_inputs(2, 21, 3, 4, 8, 1, D="channel", seed=6)
    args = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 8, inp["D"])
    rest = (inp["dt_bias"], inp["initial_states"], None, True)
    out, fin, out_x = _native.ssd_forward(*args, inp["z"], *rest, return_out_x=True)
    plain, fin2 = _native.ssd_forward(*args, None, *rest)
    assert out_x is not None and out_x.shape == out.shape
    assert nerr(out_x, plain) <= TOL_F32 and torch.equal(fin, fin2)
    torch.testing.assert_close(out, out_x * torch.nn.functional.silu(inp["z"]), rtol=1e-5,
                               atol=1e-6)
    assert _native.ssd_forward(*args, None, *rest, return_out_x=True)[2] is None


def test_float64_reference_backend_with_out_x():
    """float64 runs on the reference backend: it writes out_x and ignores it in the
    backward, so the gradients are those of the path without out_x, exactly."""
    inp = make_ssd_inputs(1, 17, 2, 4, 8, 1, D="channel", dtype=torch.float64,
                          requires_grad=True, seed=8)
    o1, f1, g1, dout, dfin = _fb(inp, Q=4, want=True)
    o2, f2, g2, _, _ = _fb(inp, Q=4, want=False)
    assert torch.equal(o1, o2) and torch.equal(f1, f2)
    for k in g1:
        assert torch.equal(g1[k], g2[k]), k
    out, _, out_x = _native.ssd_forward(inp["x"].detach(), inp["dt"].detach(),
                                        inp["A"].detach(), inp["B"].detach(),
                                        inp["C"].detach(), 4, inp["D"].detach(),
                                        inp["z"].detach(), return_out_x=True)
    assert out_x.dtype == torch.float64
    plain = _native.ssd_forward(inp["x"].detach(), inp["dt"].detach(), inp["A"].detach(),
                                inp["B"].detach(), inp["C"].detach(), 4, inp["D"].detach())[0]
    assert nerr(out_x, plain) < 1e-13


@pytest.mark.parametrize("backend", ["cpu", "ref"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("mode", [None, False], ids=["auto", "widen"])
def test_half_out_x(monkeypatch, native_mode, backend, dtype, mode):
    """bf16/f16, passed natively or through the float32 copy: out_x is kept in the half
    dtype (as mamba_ssm does), the gradients meet SPEC §8 against float64 and stay close
    to those without out_x (dz differs by at most the rounding of out_x)."""
    _native.native_half = mode
    spy = Spy(monkeypatch)
    inp = make_ssd_inputs(2, 27, 4, 5, 7, 2, dtype=dtype, D="channel", requires_grad=True,
                          seed=21)
    with mamba2c.use_backend(backend):
        out, fin, grads, dout, dfin = _fb(inp)
        _, _, grads2, _, _ = _fb(inp, want=False)
    assert spy.allocated() == [True, False] and spy.passed() == [True, False]
    assert spy.fwd[0].dtype == dtype and out.dtype == dtype
    r = as64(inp)
    rout, rfin = R.ssd_sequential(r["x"], r["dt"], r["A"], r["B"], r["C"], r["D"], r["z"],
                                  r["dt_bias"], r["initial_states"], None, True)
    assert nerr(out, rout) <= TOL_LOWP_OUT
    ((rout * dout.double()).sum() + (rfin * dfin.double()).sum()).backward()
    for k, g in grads.items():
        assert g.dtype == inp[k].dtype, k
        assert nerr(g, r[k].grad) <= TOL_LOWP_GRAD, k
        assert nerr(g, grads2[k]) <= 1e-2, k


@pytest.mark.parametrize("variant", ["full", "varlen"])
def test_opcheck_with_out_x(variant):
    if variant == "varlen":
        inp = make_ssd_inputs(1, 9, 2, 4, 4, 1, D="channel", nseq=3, requires_grad=True, seed=1)
        cu = torch.tensor([0, 2, 5, 9], dtype=torch.int32)
    else:
        inp = make_ssd_inputs(2, 7, 4, 4, 4, 2, D="head", requires_grad=True, seed=3)
        cu = None
    args = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4, inp["D"], inp["z"],
            inp["dt_bias"], inp["initial_states"], cu, True, 0.0, INF)
    torch.library.opcheck(torch.ops.mamba2c.ssd_fwd.default, args + (True,))
    # z absent: want_out_x=True gives an empty out_x
    torch.library.opcheck(torch.ops.mamba2c.ssd_fwd.default,
                          args[:7] + (None,) + args[8:] + (True,))
    pos = torch.tensor([1, 6])
    torch.library.opcheck(torch.ops.mamba2c.ssd_fwd_states.default, args + (pos, True))
    d = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    out_x = torch.ops.mamba2c.ssd_fwd(*d, True)[2]
    dout = torch.randn(inp["x"].shape)
    bargs = (dout, None) + tuple(d[:5]) + (4,) + tuple(d[6:]) + ([True] * 9, out_x)
    torch.library.opcheck(torch.ops.mamba2c.ssd_bwd.default, bargs)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_uses_out_x_in_training_only(monkeypatch, backend):
    torch._dynamo.reset()
    spy = Spy(monkeypatch)
    inp = make_ssd_inputs(2, 10, 2, 4, 8, 1, D="channel", requires_grad=True, seed=6)
    keys = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
    args = [inp[k] for k in keys]

    def f(x, dt, A, B, C, D, z, dt_bias, init):
        y, fin = mamba2c.mamba_chunk_scan_combined(
            x, dt, A, B, C, 4, D=D, z=z * 1.5, dt_bias=dt_bias, initial_states=init,
            dt_softplus=True, return_final_states=True)
        return y.square().mean() + fin.abs().mean()

    compiled = torch.compile(f, backend=backend, fullgraph=True)

    def compiled_checks():
        assert spy.allocated() == [True] and spy.passed() == [True]

    loss_e = check_compiled_against_eager(compiled, f, args, compiled_checks)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), loss_e.detach(), rtol=1e-6, atol=1e-7)
    assert spy.allocated() == [True, True, False]


def test_mamba2_layer_gate_in_scan_uses_out_x(monkeypatch):
    """mamba2c.nn.Mamba2(rmsnorm=False) gates inside the scan: training saves out_x, eval
    under no_grad does not; the gradients equal the ones without out_x."""
    from mamba2c.nn import Mamba2
    torch.manual_seed(0)
    m = Mamba2(d_model=16, d_state=8, headdim=8, ngroups=2, chunk_size=8, rmsnorm=False)
    u = torch.randn(2, 13, 16, requires_grad=True)
    spy = Spy(monkeypatch)
    m(u).square().sum().backward()
    g1 = [u.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    assert spy.allocated() == [True] and spy.passed() == [True]
    with torch.no_grad():
        m(u)
    assert spy.allocated()[-1] is False
    u.grad = None
    m.zero_grad()
    monkeypatch.setattr(_custom_ops, "_want_out_x", lambda z: False)
    m(u).square().sum().backward()
    assert spy.passed()[-1] is False
    g2 = [u.grad] + [p.grad for p in m.parameters()]
    for a, b in zip(g1, g2):
        assert nerr(a, b) <= TOL_F32
