"""torch.library registration of the SSD op: opcheck, torch.compile without graph breaks,
and equality of the custom-op path with the eager autograd.Function path."""
from __future__ import annotations

import pytest
import torch

import mamba2c
from mamba2c import _custom_ops

from conftest import check_compiled_against_eager, make_ssd_inputs

OPTS = ("D", "z", "dt_bias", "initial_states")


def _args(inp, cu=None):
    return (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4, inp.get("D"), inp.get("z"),
            inp.get("dt_bias"), inp.get("initial_states"), cu, True, 0.0, float("inf"))


@pytest.mark.parametrize("variant", ["full", "varlen", "minimal"])
def test_opcheck_ssd_fwd(variant):
    if variant == "varlen":
        inp = make_ssd_inputs(1, 9, 2, 4, 4, 1, D="channel", nseq=3, requires_grad=True, seed=1)
        args = _args(inp, torch.tensor([0, 2, 5, 9], dtype=torch.int32))
    elif variant == "minimal":
        inp = make_ssd_inputs(2, 7, 2, 4, 4, 2, D=None, z=False, dt_bias=False, init=False,
                              requires_grad=True, seed=2)
        args = _args(inp)
    else:
        inp = make_ssd_inputs(2, 7, 4, 4, 4, 2, D="head", requires_grad=True, seed=3)
        args = _args(inp)
    torch.library.opcheck(torch.ops.mamba2c.ssd_fwd.default, args)


def test_opcheck_ssd_bwd():
    inp = make_ssd_inputs(2, 6, 2, 4, 4, 1, D="channel", seed=4)
    dout = torch.randn(inp["x"].shape)
    dfin = torch.randn(2, 2, 4, 4)
    a = _args(inp)
    args = (dout, dfin) + a[:5] + (a[5],) + a[6:] + ([True] * 9,)
    torch.library.opcheck(torch.ops.mamba2c.ssd_bwd.default, args)


def test_custom_op_path_equals_eager_function_path():
    inp = make_ssd_inputs(2, 11, 4, 4, 8, 2, D="channel", requires_grad=True, seed=5)
    grads = []
    outs = []
    for use in (False, True):
        for v in inp.values():
            v.grad = None
        out, fin = _custom_ops.ssd(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4,
                                   inp["D"], inp["z"], inp["dt_bias"], inp["initial_states"],
                                   None, True, (0.0, float("inf")), use_custom_op=use)
        (out.square().sum() + fin.sum()).backward()
        outs.append((out.detach(), fin.detach()))
        grads.append([v.grad.clone() for v in inp.values()])
    for a, b in zip(outs[0] + tuple(grads[0]), outs[1] + tuple(grads[1])):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(backend):
    """fullgraph=True fails on any graph break; forward and backward through the op."""
    torch._dynamo.reset()
    inp = make_ssd_inputs(2, 10, 2, 4, 8, 1, D="channel", requires_grad=True, seed=6)
    lin = torch.nn.Linear(4, 4).double().float()

    def f(x, dt, A, B, C, D, z, dt_bias, init):
        y, fin = mamba2c.mamba_chunk_scan_combined(
            lin(x), dt, A, B, C, 4, D=D, z=z, dt_bias=dt_bias, initial_states=init,
            dt_softplus=True, return_final_states=True)
        return (y.square().mean() + fin.abs().mean()) * 2.0

    args = [inp[k] for k in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")]
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    check_compiled_against_eager(compiled, f, args)


def test_torch_compile_varlen_cu_seqlens():
    torch._dynamo.reset()
    inp = make_ssd_inputs(1, 12, 2, 4, 8, 1, requires_grad=True, seed=7)
    cu = torch.tensor([0, 5, 12])

    def f(x, dt, A, B, C):
        y, var = mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 4, cu_seqlens=cu,
                                                   dt_softplus=True, return_varlen_states=True)
        return y.sum() + var.sum()

    args = [inp[k] for k in ("x", "dt", "A", "B", "C")]
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(*args)
    torch.testing.assert_close(out, f(*args), rtol=1e-6, atol=1e-6)


def test_fake_tensor_shapes_and_meta():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(3, 17, 4, 8)
        dt = torch.empty(3, 17, 4)
        A = torch.empty(4)
        B = torch.empty(3, 17, 2, 16)
        out, fin, out_x = torch.ops.mamba2c.ssd_fwd(x, dt, A, B, B, 8, None, None, None, None,
                                                   None, True, 0.0, float("inf"))
        assert out.shape == (3, 17, 4, 8) and fin.shape == (3, 4, 8, 16)
        assert out_x.shape == (0,)  # not requested: empty
        z = torch.empty(3, 17, 4, 8)
        out, fin, out_x = torch.ops.mamba2c.ssd_fwd(x, dt, A, B, B, 8, None, z, None, None,
                                                   None, True, 0.0, float("inf"), True)
        assert out_x.shape == (3, 17, 4, 8) and out_x.dtype == x.dtype
    meta = {"device": "meta"}
    out, fin, _ = torch.ops.mamba2c.ssd_fwd(
        torch.empty(3, 17, 4, 8, **meta), torch.empty(3, 17, 4, **meta), torch.empty(4, **meta),
        torch.empty(3, 17, 2, 16, **meta), torch.empty(3, 17, 2, 16, **meta), 8, None, None,
        None, None, None, True, 0.0, float("inf"))
    assert out.device.type == "meta" and fin.shape == (3, 4, 8, 16)


def test_torch_compile_mamba2_layer_fullgraph():
    """A whole Mamba2 layer (conv1d, SSD, gated norm: C ops or their torch fallbacks)
    compiles without graph breaks and matches eager, gradients included."""
    from mamba2c.nn import Mamba2
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = Mamba2(d_model=16, d_state=8, headdim=8, ngroups=2, chunk_size=8)
    u = torch.randn(2, 13, 16, requires_grad=True)
    cm = torch.compile(m, backend="aot_eager", fullgraph=True)
    yc = cm(u)
    yc.square().sum().backward()
    gc = [u.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    u.grad = None
    m.zero_grad()
    ye = m(u)
    ye.square().sum().backward()
    ge = [u.grad] + [p.grad for p in m.parameters()]
    torch.testing.assert_close(yc, ye, rtol=1e-5, atol=1e-6)
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


needs_c = pytest.mark.skipif(
    not all(mamba2c.ops.backend_of(n) == "C" for n in ("rmsnorm_gated", "conv1d", "conv1d_step")),
    reason="the loaded libmamba2c does not export the gated RMSNorm / conv1d entry points")


@needs_c
def test_opcheck_rmsnorm_and_conv1d_ops():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(6, 8, generator=g, requires_grad=True)
    z = torch.randn(6, 8, generator=g, requires_grad=True)
    w = torch.randn(8, generator=g, requires_grad=True)
    b = torch.randn(8, generator=g, requires_grad=True)
    torch.library.opcheck(torch.ops.mamba2c.rmsnorm_gated_fwd.default, (x, z, w, b, 1e-5, 4, False))
    torch.library.opcheck(torch.ops.mamba2c.rmsnorm_gated_fwd.default, (x, None, w, None, 1e-5, 0, True))
    xc = torch.randn(2, 7, 5, generator=g, requires_grad=True)
    wc = torch.randn(5, 4, generator=g, requires_grad=True)
    bc = torch.randn(5, generator=g, requires_grad=True)
    init = torch.randn(2, 5, 3, generator=g, requires_grad=True)
    torch.library.opcheck(torch.ops.mamba2c.conv1d_fwd.default, (xc, wc, bc, init, None, True))
    torch.library.opcheck(torch.ops.mamba2c.conv1d_fwd.default,
                          (xc[:1], wc, None, None, torch.tensor([0, 3, 7]), False))
    cache = torch.randn(3, 5, 3, generator=g)
    torch.library.opcheck(torch.ops.mamba2c.conv1d_step.default,
                          (torch.randn(2, 5, generator=g), cache, wc.detach(), bc.detach(), True,
                           torch.tensor([2, 0])))
