"""The Python ops on the OpenCL backend (host mode): mamba2c.use_backend("opencl") runs CPU
tensors through the OpenCL kernels (PoCL in CI: `make test` installs it), each op against
the float64 torch reference (SPEC §8: 1e-5 for float32 outputs and gradients, 1e-2 / 2e-2 for
bf16 storage), autograd against the reference's autograd, bitwise run-to-run determinism and
agreement with the CPU backend within the same tolerance. A spy on the context lookup checks
that each op really ran on an OpenCL context. Skipped only when no OpenCL device exists.

One OpenCL context serves the whole module (the binding caches it per thread; PoCL compiles
the kernels when it is created), so the sizes are small: the cost is the kernel compile.
"""
from __future__ import annotations

import math

import pytest
import torch

import mamba2c
from mamba2c import _native, chunked, ops, reference as R
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32, TOL_LOWP_GRAD, TOL_LOWP_OUT, as64, make_ssd_inputs

INF = math.inf
F64 = torch.float64
OPENCL = _native.BACKEND_OPENCL


@pytest.fixture(scope="module")
def _opencl_available():
    try:
        mamba2c.use_backend("opencl")  # creates (and keeps) this thread's OpenCL context
    except mamba2c.Mamba2Error as e:
        if getattr(e, "status", None) == _native.STATUS_BACKEND_UNAVAILABLE:
            pytest.skip(f"no OpenCL device: {e}")
        raise


@pytest.fixture
def ocl(_opencl_available, monkeypatch):
    """Run the test under use_backend("opencl"); yields the list of backend codes of the
    contexts the calls used (every op must have used OpenCL, or REF for float64)."""
    block = mamba2c.use_backend("opencl")  # (its check makes a context lookup of its own)
    used = []
    real = _native.context._context

    def spy(backend):
        used.append(backend)
        return real(backend)

    monkeypatch.setattr(_native.context, "_context", spy)
    monkeypatch.setattr(_native.steps, "_context", spy)  # the decode step's fast path
    with block:
        yield used


def _both(fn, used):
    """fn() on OpenCL twice (bitwise equal; every C call on an OpenCL context, per the spy
    list `used`) and on the CPU backend: (ocl, cpu) results."""
    n0 = len(used)
    a = fn()
    b = fn()
    assert used[n0:] and set(used[n0:]) == {OPENCL}, used[n0:]
    for u, v in zip(_flat(a), _flat(b)):
        assert torch.equal(u, v), "OpenCL results differ run to run"
    with mamba2c.use_backend("cpu"):
        c = fn()
    return a, c


def _flat(r):
    if isinstance(r, torch.Tensor):
        return [r]
    out = []
    for t in r:
        out += _flat(t) if isinstance(t, (tuple, list)) else ([] if t is None else [t])
    return out


def _ssd_args(inp):
    return (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"])


def _ssd_ref(inp, sp=True, lim=(0.0, INF), cu=None):
    return R.ssd_sequential(*_ssd_args(inp), inp.get("D"), inp.get("z"), inp.get("dt_bias"),
                            inp.get("initial_states"), cu, sp, lim)


# ---- fused SSD --------------------------------------------------------------------------

@pytest.mark.parametrize("case", [
    (2, 45, 4, 12, 20, 2, 16, "channel", True, True, True, (0.0, INF)),
    (1, 33, 3, 5, 7, 3, 7, "head", False, False, False, (0.02, 0.09)),
], ids=["all_options", "odd_sizes_dtlimit"])
def test_ssd_forward_backward(ocl, case):
    B, L, H, P, N, G, Q, D, z, bias, init, lim = case
    inp = make_ssd_inputs(B, L, H, P, N, G, D=D, z=z, dt_bias=bias, init=init,
                          requires_grad=True, seed=L)
    g = torch.Generator().manual_seed(5)
    dout = torch.randn(B, L, H, P, generator=g, dtype=F64)
    dfin = torch.randn(B, H, P, N, generator=g, dtype=F64)

    def run():
        for v in inp.values():
            v.grad = None
        out, fin = ops.ssd(*_ssd_args(inp), Q, inp.get("D"), inp.get("z"), inp.get("dt_bias"),
                           inp.get("initial_states"), None, True, lim)
        ((out * dout.float()).sum() + (fin * dfin.float()).sum()).backward()
        return [out.detach(), fin.detach()] + [inp[k].grad for k in inp]

    (o, c) = _both(run, ocl)
    r64 = as64(inp)
    rout, rfin = _ssd_ref(r64, lim=lim)
    ((rout * dout).sum() + (rfin * dfin).sum()).backward()
    ref = [rout, rfin] + [r64[k].grad for k in inp]
    names = ["out", "final"] + ["d" + k for k in inp]
    err = {n: nerr(a, r) for n, a, r in zip(names, o, ref)}
    assert all(e <= TOL_F32 for e in err.values()), err
    cpu = {n: nerr(a, b) for n, a, b in zip(names, o, c)}
    assert all(e <= TOL_F32 for e in cpu.values()), cpu


def test_ssd_varlen_states_and_custom_op(ocl):
    cu = torch.tensor([0, 4, 4, 19, 26], dtype=torch.int32)  # an empty sequence
    inp = make_ssd_inputs(1, 26, 4, 8, 16, 2, D="head", nseq=4, requires_grad=True, seed=2)
    pos = torch.tensor([0, 3, 10, 25])

    def run():
        for v in inp.values():
            v.grad = None
        out, fin = ops.ssd(*_ssd_args(inp), 8, inp["D"], inp["z"], inp["dt_bias"],
                           inp["initial_states"], cu, True)
        (out.sum() + (fin * fin).sum()).backward()
        # the custom op (the torch.compile path) and the positions form, forward only
        o2, f2 = mamba2c._custom_ops.ssd(*_ssd_args(inp), 8, inp["D"], inp["z"],
                                         inp["dt_bias"], inp["initial_states"], cu, True,
                                         use_custom_op=True)
        _, _, ps = ops.ssd_states(*_ssd_args(inp), 8, pos, inp["D"], inp["z"], inp["dt_bias"],
                                  inp["initial_states"], cu, True)
        assert torch.equal(o2, out) and torch.equal(f2, fin)
        return [out.detach(), fin.detach(), ps] + [inp[k].grad for k in inp]

    o, c = _both(run, ocl)
    r64 = as64(inp)
    rout, rvar = _ssd_ref(r64, cu=cu)
    (rout.sum() + (rvar * rvar).sum()).backward()
    ref = [rout, rvar, None] + [r64[k].grad for k in inp]
    for i, (a, r, b) in enumerate(zip(o, ref, c)):
        if r is not None:
            assert nerr(a, r) <= TOL_F32, i
        assert nerr(a, b) <= TOL_F32, i
    # the position states against per-prefix final states of the reference
    for j, p in enumerate(pos.tolist()):
        s = int(torch.searchsorted(cu[1:], p, right=True))
        t0 = int(cu[s])
        sub = {k: (v[:, t0:p + 1] if k in ("x", "dt", "B", "C", "z") else v)
               for k, v in as64(inp).items()}
        sub["initial_states"] = sub["initial_states"][s:s + 1]
        _, f = _ssd_ref(sub)
        assert nerr(o[2][j], f[0]) <= TOL_F32, p
    torch.testing.assert_close(o[1][1], inp["initial_states"][1].detach(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ssd_half_storage(ocl, dtype):
    inp = make_ssd_inputs(2, 30, 2, 8, 16, 1, dtype=dtype, requires_grad=True, seed=9)

    def run():
        for v in inp.values():
            v.grad = None
        out, fin = ops.ssd(*_ssd_args(inp), 16, inp["D"], inp["z"], inp["dt_bias"],
                           inp["initial_states"], None, True)
        (out.float().sum() + fin.sum()).backward()
        return [out.detach(), fin.detach()] + [inp[k].grad for k in inp]

    o, c = _both(run, ocl)
    assert o[0].dtype == dtype
    r64 = as64(inp)
    rout, rfin = _ssd_ref(r64)
    (rout.sum() + rfin.sum()).backward()
    assert nerr(o[0], rout) <= TOL_LOWP_OUT and nerr(o[1], rfin) <= TOL_LOWP_OUT
    for k, gr in zip(inp, o[2:]):
        assert nerr(gr, r64[k].grad) <= TOL_LOWP_GRAD, k


def test_staged_pipeline(ocl):
    inp = make_ssd_inputs(2, 29, 4, 8, 12, 2, D="channel", seed=4)
    x, dt, A, B, C = _ssd_args(inp)

    def run():
        dto, dAc = chunked.chunk_cumsum(dt, A, 8, inp["dt_bias"], True)
        CB = chunked.bmm_chunk(B, C, 8)
        st = chunked.chunk_state(x, B, dto, dAc)
        start, fin = chunked.state_passing(st, dAc, inp["initial_states"])
        out = chunked.chunk_scan(CB, x, dto, dAc, C, start, inp["D"], inp["z"])
        return out, fin, dto, dAc, CB, st, start

    o, c = _both(run, ocl)
    rout, rfin = _ssd_ref(as64(inp))
    assert nerr(o[0], rout) <= TOL_F32 and nerr(o[1], rfin) <= TOL_F32
    for a, b in zip(o, c):
        assert nerr(a, b) <= TOL_F32


def test_float64_runs_on_the_reference_backend(ocl):
    inp = make_ssd_inputs(1, 20, 2, 4, 8, 1, dtype=F64, seed=1)
    out, fin = ops.ssd(*_ssd_args(inp), 8, inp["D"], inp["z"], inp["dt_bias"],
                       inp["initial_states"], None, True)
    assert ocl == [_native.BACKEND_REF]  # the GPU kernels are float32 only
    with mamba2c.use_backend("ref"):
        o2, f2 = ops.ssd(*_ssd_args(inp), 8, inp["D"], inp["z"], inp["dt_bias"],
                         inp["initial_states"], None, True)
    assert torch.equal(out, o2) and torch.equal(fin, f2)


# ---- conv1d, gated RMSNorm --------------------------------------------------------------

@pytest.mark.parametrize("W,cu", [(4, None), (3, [0, 2, 2, 13])], ids=["batched", "varlen"])
def test_conv1d_forward_backward(ocl, W, cu):
    g = torch.Generator().manual_seed(W)
    Bsz, L, Cc = (2, 23, 70) if cu is None else (1, 13, 70)
    S = Bsz if cu is None else len(cu) - 1
    cu = None if cu is None else torch.tensor(cu, dtype=torch.int64)
    xb = torch.randn(Bsz, L, 2 * Cc, generator=g)
    ts = dict(x=xb[..., :Cc],  # a view with a row stride of 2*Cc
              weight=torch.randn(Cc, W, generator=g), bias=torch.randn(Cc, generator=g),
              initial_states=torch.randn(S, Cc, W - 1, generator=g))
    for t in ts.values():
        t.requires_grad_(True)
    dout = torch.randn(Bsz, L, Cc, generator=g, dtype=F64)
    dfin = torch.randn(S, Cc, W - 1, generator=g, dtype=F64)

    def run():
        for t in ts.values():
            t.grad = None
        out, fin = ops.conv1d(ts["x"], ts["weight"], ts["bias"], True, ts["initial_states"],
                              cu, True)
        ((out * dout.float()).sum() + (fin * dfin.float()).sum()).backward()
        return [out.detach(), fin.detach()] + [t.grad for t in ts.values()]

    o, c = _both(run, ocl)
    r = {k: v.detach().double().requires_grad_(True) for k, v in ts.items()}
    rout, rfin = R.conv1d(r["x"], r["weight"], r["bias"], True, r["initial_states"], cu)
    ((rout * dout).sum() + (rfin * dfin).sum()).backward()
    ref = [rout, rfin] + [v.grad for v in r.values()]
    for i, (a, rr, b) in enumerate(zip(o, ref, c)):
        assert nerr(a, rr) <= TOL_F32 and nerr(a, b) <= TOL_F32, i


@pytest.mark.parametrize("gs,nbg", [(None, False), (20, True)])
def test_rmsnorm_gated_forward_backward(ocl, gs, nbg):
    g = torch.Generator().manual_seed(3)
    M, D = 37, 60
    ts = dict(x=torch.randn(M, D, generator=g), z=torch.randn(M, D, generator=g),
              weight=1 + 0.1 * torch.randn(D, generator=g), bias=torch.randn(D, generator=g))
    for t in ts.values():
        t.requires_grad_(True)
    dout = torch.randn(M, D, generator=g, dtype=F64)

    def run():
        for t in ts.values():
            t.grad = None
        out = ops.rmsnorm_gated(ts["x"], ts["weight"], ts["bias"], ts["z"], 1e-5, gs, nbg)
        (out * dout.float()).sum().backward()
        return [out.detach()] + [t.grad for t in ts.values()]

    o, c = _both(run, ocl)
    r = {k: v.detach().double().requires_grad_(True) for k, v in ts.items()}
    rout = R.rmsnorm_gated(r["x"], r["weight"], r["bias"], r["z"], 1e-5, gs, nbg)
    (rout * dout).sum().backward()
    ref = [rout] + [v.grad for v in r.values()]
    for i, (a, rr, b) in enumerate(zip(o, ref, c)):
        assert nerr(a, rr) <= TOL_F32 and nerr(a, b) <= TOL_F32, i


# ---- decode steps -----------------------------------------------------------------------

def test_conv1d_step(ocl):
    g = torch.Generator().manual_seed(8)
    Bsz, Cc, W = 3, 50, 4
    x = torch.randn(Bsz, Cc, generator=g)
    w = torch.randn(Cc, W, generator=g)
    b = torch.randn(Cc, generator=g)
    state0 = torch.randn(5, Cc, W - 1, generator=g)
    idx = torch.tensor([4, -1, 0], dtype=torch.int32)

    def run():
        st = state0.clone()
        return ops.conv1d_step(x, st, w, b, True, idx), st

    o, c = _both(run, ocl)
    rst = state0.double().clone()
    rout = R.conv1d_step(x.double(), rst, w.double(), b.double(), True, idx)
    assert nerr(o[0], rout) <= TOL_F32 and nerr(o[1], rst) <= TOL_F32
    assert nerr(o[0], c[0]) <= TOL_F32 and torch.equal(o[1], c[1])


@pytest.mark.parametrize("T", [None, 3], ids=["one_token", "three_tokens"])
def test_ssd_step(ocl, T):
    inp = make_ssd_inputs(3, 1 if T is None else T, 4, 8, 16, 2, D="channel", seed=6)
    sq = (lambda t: t[:, 0]) if T is None else (lambda t: t)
    x, dt, Bm, Cm, z = (sq(inp[k]) for k in ("x", "dt", "B", "C", "z"))
    state0 = torch.randn(5, 4, 8, 16, generator=torch.Generator().manual_seed(1)) / 5
    idx = torch.tensor([2, -1, 4])

    def run():
        st = state0.clone()
        return ops.ssd_step(st, x, dt, inp["A"], Bm, Cm, inp["D"], z, inp["dt_bias"], True,
                            state_indices=idx), st

    o, c = _both(run, ocl)
    rst = state0.double().clone()
    rin = as64({k: v for k, v in inp.items()})
    for b, s in enumerate(idx.tolist()):
        if s < 0:
            continue
        sub = {k: (v[b:b + 1] if k in ("x", "dt", "B", "C", "z") else v) for k, v in rin.items()}
        sub["initial_states"] = rst[s:s + 1]
        ro, rf = _ssd_ref(sub)
        assert nerr(o[0][b], sq(ro)[0]) <= TOL_F32, b
        rst[s] = rf[0]
    assert not o[0][1].any()
    assert nerr(o[1], rst) <= TOL_F32
    assert nerr(o[0], c[0]) <= TOL_F32 and nerr(o[1], c[1]) <= TOL_F32


def test_backend_names_and_errors(_opencl_available):
    assert "opencl" in _native.abi.BACKENDS
    before = mamba2c.get_backend()
    mamba2c.set_backend("opencl")
    try:
        assert mamba2c.get_backend() == "opencl"
    finally:
        mamba2c.set_backend(before)
    with mamba2c.use_backend("opencl"):
        assert mamba2c.get_backend() == "opencl"
        assert _native.last_call_isa("opencl") == "gpu"
    assert mamba2c.get_backend() == before


def test_no_such_device_is_a_clear_error_at_once(_opencl_available, monkeypatch):
    """Without a usable OpenCL device use_backend / set_backend raise at once, with the
    library's reason (here: MAMBA2C_OPENCL_DEVICE names no device; a new thread, so no
    cached context)."""
    import threading

    monkeypatch.setenv("MAMBA2C_OPENCL_DEVICE", "no-such-opencl-device")
    errors = []

    def body():
        for make in (lambda: mamba2c.use_backend("opencl"),
                     lambda: mamba2c.set_backend("opencl")):
            try:
                make()
                errors.append(None)
            except NotImplementedError as e:
                errors.append(e)

    th = threading.Thread(target=body)
    th.start()
    th.join()
    assert len(errors) == 2 and all(e is not None for e in errors), errors
    for e in errors:
        assert "backend 'opencl' is not available" in str(e)
        assert "no-such-opencl-device" in str(e) or "OpenCL" in str(e), str(e)
        assert e.status == _native.STATUS_BACKEND_UNAVAILABLE
    assert mamba2c.get_backend() != "opencl"


# ---- a subset of the suite's own op tests, run as they are under use_backend("opencl") ----

import test_modules  # noqa: E402
import test_ops  # noqa: E402
import test_ssd  # noqa: E402


@pytest.mark.parametrize("case", test_ssd.CASES, ids=test_ssd.IDS)
def test_suite_ssd_cases(ocl, case):
    test_ssd.test_forward_backward_f32_vs_f64_reference(case)
    assert OPENCL in ocl


@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
def test_suite_ssd_varlen(ocl, cu_dtype):
    test_ssd.test_varlen_states_and_grads(cu_dtype)
    assert OPENCL in ocl


def test_suite_ssd_chunk_size_independence(ocl):
    test_ssd.test_result_independent_of_chunk_size()
    assert OPENCL in ocl


@pytest.mark.parametrize("W,act", [(2, None), (4, "silu")])
def test_suite_causal_conv1d_fn(ocl, W, act):
    test_ops.test_causal_conv1d_fn_vs_reference(W, act)
    assert OPENCL in ocl


@pytest.mark.parametrize("nbg,gs", [(False, None), (True, 4)])
def test_suite_rmsnorm_fn(ocl, nbg, gs):
    test_ops.test_rmsnorm_fn_vs_reference(nbg, gs)
    assert OPENCL in ocl


def test_suite_decode_steps(ocl):
    test_ops.test_selective_state_update_steps_equal_scan()
    test_ops.test_causal_conv1d_update_matches_full_conv()
    assert OPENCL in ocl


@pytest.mark.parametrize("name", list(test_modules.CFGS))
def test_suite_mamba2_layer(ocl, name):
    test_modules.test_mamba2_forward_backward_vs_reference(name)
    assert OPENCL in ocl


def test_suite_mamba2_prefill_then_step(ocl):
    test_modules.test_mamba2_prefill_then_step_equals_forward(True)
    assert OPENCL in ocl
