"""CUDA tensors through the C library's CUDA backend (device mode).

Two halves:
  - Without a GPU (every machine): the routing and the marshalling, on FakeTensorMode CUDA
    tensors (metadata only) against a mock of the library: the dispatch decisions, one
    context per (thread, device, stream) bound to torch's current stream, outputs
    allocated on the device, descriptors of the device tensors passed as they are (no
    copy), index tensors kept on the device, mixed devices refused, the CPU path untouched.
  - With a GPU (torch.cuda.is_available(); skipped elsewhere): the real thing — every op on
    CUDA tensors against the float64 reference (SPEC §8), autograd, the torch.compile
    custom ops, a non-default stream, determinism and agreement with the CPU backend.
    It needs a library built with the CUDA backend (nvcc) and fails, rather than skips, when
    the library cannot open a CUDA context on a machine that has a GPU.
"""
from __future__ import annotations

import ctypes
import math
import warnings

import pytest
import torch

import mamba2c
from mamba2c import _dispatch, _native, ops, reference as R
from mamba2c._native import abi, context, loader
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32, TOL_LOWP_GRAD, TOL_LOWP_OUT, as64, make_ssd_inputs

INF = math.inf
F64 = torch.float64
HAVE_GPU = torch.cuda.is_available()


# =========================================================================================
# Without a GPU: fake CUDA tensors, a mock library
# =========================================================================================

class _MockFn:
    def __init__(self, lib, name):
        self.lib, self.name = lib, name

    def __call__(self, *args):
        self.lib.calls.append((self.name, args))
        return 0


class _MockLib:
    """Records every C call (name, args); each returns MAMBA2_STATUS_OK."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name.startswith("mamba2_"):
            return _MockFn(self, name)
        raise AttributeError(name)


def _tensor_at(addr):
    """Decode the mamba2_tensor_t at `addr`: (data, dtype, shape, strides)."""
    raw = ctypes.string_at(addr, abi.TSZ)
    v = abi.TENSOR.st.unpack(raw)
    r = v[2]
    return v[0], v[1], tuple(v[3:3 + r]), tuple(v[3 + abi.MAX_RANK:3 + abi.MAX_RANK + r])


class _FakeCudaContext:
    made = []

    def __init__(self, device, stream):
        self.ptr = 0x5000 + len(_FakeCudaContext.made)
        _FakeCudaContext.made.append((device, stream))


@pytest.fixture
def fake_cuda(monkeypatch):
    """FakeTensorMode (CUDA tensors without a GPU), a mock library, fake device-mode
    contexts and a settable current stream. Yields (mode, lib, streams) where streams[0]
    is the current stream handle."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    lib = _MockLib()
    streams = [0]
    _FakeCudaContext.made = []
    context._state()
    monkeypatch.setattr(context._tls, "cuda_contexts", {})
    monkeypatch.setattr(loader, "_lib", lib)
    monkeypatch.setattr(context, "_CudaContext", _FakeCudaContext)
    monkeypatch.setattr(context, "_current_stream", lambda index: streams[0])
    monkeypatch.setattr(_dispatch, "_cuda_loaded", True)
    monkeypatch.setattr(_dispatch, "_loaded", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FakeTensor.data_ptr() is deprecated (returns 0)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            yield mode, lib, streams


def _fake_ssd_inputs(requires_grad=False, dtype=torch.float32):
    B, L, H, P, N, G = 2, 12, 4, 8, 16, 2
    t = dict(x=torch.empty(B, L, H, P, device="cuda", dtype=dtype),
             dt=torch.empty(B, L, H, device="cuda", dtype=dtype),
             A=torch.empty(H, device="cuda"),
             B=torch.empty(B, L, G, N, device="cuda", dtype=dtype),
             C=torch.empty(B, L, G, N, device="cuda", dtype=dtype),
             D=torch.empty(H, device="cuda"),
             z=torch.empty(B, L, H, P, device="cuda", dtype=dtype),
             dt_bias=torch.empty(H, device="cuda"),
             initial_states=torch.empty(B, H, P, N, device="cuda"))
    for v in t.values():
        v.requires_grad_(requires_grad)
    return t


def test_dispatch_decisions_follow_the_cuda_backend(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with FakeTensorMode():
            x = torch.empty(2, 5, 8, device="cuda")
            x64 = torch.empty(2, 5, 8, device="cuda", dtype=F64)
            w = torch.empty(8, 4, device="cuda")
            st = torch.empty(2, 8, 3, device="cuda")
            for have in (False, True):
                monkeypatch.setattr(_dispatch, "_cuda_loaded", have)
                assert _dispatch.conv1d(x, w) is have
                assert _dispatch.rmsnorm_gated(x) is have
                assert _dispatch.conv1d_step(x[:, 0], st, w, None, None) is have
                assert not _dispatch.conv1d(x64, w)  # no float64 GPU kernels: torch
                assert not _dispatch.rmsnorm_gated(x64)
                assert _dispatch.conv1d_step(x[:, 0], st.cpu(), w, None, None) is False
                assert (ops.backend_of("ssd", "cuda") == "C") is have
                assert (ops.backend_of("conv1d", "cuda:0") == "C") is have
                assert ops.backend_of("ssd", "cpu") == "C"
                assert ops.backend_of("ssd", "mps") == "torch"


def test_cuda_library_is_false_without_a_gpu():
    if HAVE_GPU:
        pytest.skip("this machine has a GPU (the GPU half below covers it)")
    assert context.cuda_backend_ok() in (False, True)  # never raises
    saved = _dispatch._cuda_loaded
    try:
        _dispatch._cuda_loaded = None
        assert _dispatch.cuda_library() is False
    finally:
        _dispatch._cuda_loaded = saved


def test_ssd_forward_marshalling_and_context_per_stream(fake_cuda):
    mode, lib, streams = fake_cuda
    t = _fake_ssd_inputs()
    args = (t["x"], t["dt"], t["A"], t["B"], t["C"], 8, t["D"], t["z"], t["dt_bias"],
            t["initial_states"], None, True)
    out, fin = ops.ssd(*args)
    assert out.device.type == "cuda" and fin.device.type == "cuda"
    assert out.shape == t["x"].shape and fin.shape == t["initial_states"].shape
    name, a = lib.calls[-1]
    assert name == "mamba2_ssd_forward"
    assert a[0] == 0x5000 and _FakeCudaContext.made == [(0, 0)]
    # out, out_x (none), final, x, dt, A, B, C: descriptors of the tensors as they are
    assert _tensor_at(a[1])[1:] == (abi.DT_F32, (2, 12, 4, 8), (384, 32, 8, 1))
    assert a[2] in (0, None)
    assert _tensor_at(a[4])[2:] == ((2, 12, 4, 8), t["x"].stride())
    assert _tensor_at(a[7])[2:] == ((2, 12, 2, 16), t["B"].stride())
    assert a[10] is None and a[11] == 0  # no workspace: a GPU context owns its scratch
    # the same stream: the same context; another stream: its own context
    ops.ssd(*args)
    assert lib.calls[-1][1][0] == 0x5000 and len(_FakeCudaContext.made) == 1
    streams[0] = 0xABC
    ops.ssd(*args)
    assert lib.calls[-1][1][0] == 0x5001 and _FakeCudaContext.made[-1] == (0, 0xABC)
    streams[0] = 0
    ops.ssd(*args)
    assert lib.calls[-1][1][0] == 0x5000 and len(_FakeCudaContext.made) == 2
    context.release_cuda_contexts()
    ops.ssd(*args)
    assert len(_FakeCudaContext.made) == 3


def test_ssd_backward_marshalling(fake_cuda):
    # (autograd itself cannot run on fake CUDA tensors without a GPU: its engine asks the
    # CUDA runtime for the device. SSDFunction and the custom ops call exactly these
    # _native functions; the GPU half below runs them through autograd and torch.compile.)
    mode, lib, streams = fake_cuda
    t = _fake_ssd_inputs()
    dout = torch.empty(2, 12, 4, 8, device="cuda")
    dfin = torch.empty(2, 4, 8, 16, device="cuda")
    ox = torch.empty(2, 12, 4, 8, device="cuda")
    g = _native.ssd_backward(dout, dfin, t["x"], t["dt"], t["A"], t["B"], t["C"], 8, t["D"],
                             t["z"], t["dt_bias"], t["initial_states"], None, True,
                             needs=(True,) * 9, out_x=ox)
    names = [n for n, _ in lib.calls]
    assert names == ["mamba2_ssd_backward_workspace_size", "mamba2_ssd_backward"], names
    assert all(a[0] == 0x5000 for _, a in lib.calls)
    for k, v in zip(_native.GRAD_NAMES, g):
        assert v is not None and v.device.type == "cuda", k
    assert [v.shape for v in g] == [v.shape for v in t.values()]
    # no workspace is passed: the size query of a GPU context reports 0 bytes
    assert lib.calls[-1][1][-2:] == (None, 0)
    # the forward's out_x reaches the C backward as an input descriptor
    assert _tensor_at(lib.calls[-1][1][9])[2] == (2, 12, 4, 8)


def test_index_tensors_stay_on_the_device_and_devices_must_match(fake_cuda, monkeypatch):
    mode, lib, streams = fake_cuda
    moved = []
    real = _native.tensors._index_tensor

    def spy(name, v):
        r = real(name, v)
        moved.append((name, v.device.type, r.device.type))
        return r

    monkeypatch.setattr(_native.tensors, "_index_tensor", spy)
    t = _fake_ssd_inputs()
    x1 = {k: (v[:1] if k in ("x", "dt", "B", "C", "z") else v) for k, v in t.items()}
    cu = torch.tensor([0, 5, 12], device="cuda", dtype=torch.int32)
    out, fin = ops.ssd(x1["x"], x1["dt"], x1["A"], x1["B"], x1["C"], 8, cu_seqlens=cu)
    assert fin.shape[0] == 2 and fin.device.type == "cuda"
    # device contexts take device index tensors: a CUDA one is not copied to the host, a CPU
    # one of a CUDA call goes to the device
    assert moved == [("cu_seqlens", "cuda", "cuda")]
    ops.ssd(x1["x"], x1["dt"], x1["A"], x1["B"], x1["C"], 8, cu_seqlens=cu.cpu())
    assert moved[-1] == ("cu_seqlens", "cpu", "cuda")
    opts = abi.SSD_OPTIONS.st.unpack(ctypes.string_at(lib.calls[-1][1][9],
                                                      abi.SSD_OPTIONS.st.size))
    cu_desc = opts[abi.SSD_OPTIONS.names.index("cu_seqlens")]
    assert _tensor_at(cu_desc)[1:] == (abi.DT_I32, (3,), (1,))
    with pytest.raises(mamba2c.DeviceError, match="one device"):
        ops.ssd(t["x"], t["dt"], t["A"].cpu(), t["B"], t["C"], 8)
    # a fake tensor on cuda:1 initialises that device's context where torch sees a GPU, so a
    # machine with one GPU (the H200 of bench/gpu_check.sh) cannot make one
    if not torch.cuda.is_available() or torch.cuda.device_count() > 1:
        with pytest.raises(mamba2c.DeviceError, match="one device"):
            ops.ssd(t["x"], t["dt"], torch.empty(4, device="cuda:1"), t["B"], t["C"], 8)


def test_cuda_context_takes_device_indices_and_torch_allocator(monkeypatch):
    """A device-mode context of the binding sets device index tensors and torch's caching
    allocator (mamba2_context_set_device_indices / _set_device_allocator) when created."""
    lib = _MockLib()
    monkeypatch.setattr(loader, "_lib", lib)
    context._CudaContext(0, 0)
    names = [c[0] for c in lib.calls]
    assert names[:3] == ["mamba2_context_create_cuda", "mamba2_context_set_device_indices",
                         "mamba2_context_set_device_allocator"]
    assert lib.calls[1][1][1] == 1
    alloc, free = lib.calls[2][1][1:3]
    assert alloc.value and free.value  # the two ctypes callbacks (torch's allocator)


def test_conv1d_rmsnorm_steps_on_the_device_context(fake_cuda):
    mode, lib, streams = fake_cuda
    x = torch.empty(2, 9, 16, device="cuda")
    w = torch.empty(16, 4, device="cuda")
    out, fin = ops.conv1d(x, w, torch.empty(16, device="cuda"), True, return_final_states=True)
    assert lib.calls[-1][0] == "mamba2_conv1d_forward" and lib.calls[-1][1][0] == 0x5000
    assert out.device.type == "cuda" and fin.shape == (2, 16, 3)
    y = ops.rmsnorm_gated(torch.empty(5, 16, device="cuda"), torch.empty(16, device="cuda"),
                          z=torch.empty(5, 16, device="cuda"), group_size=8)
    assert lib.calls[-1][0] == "mamba2_rmsnorm_gated_forward" and y.device.type == "cuda"
    cs = torch.empty(3, 16, 3, device="cuda")
    ops.conv1d_step(torch.empty(2, 16, device="cuda"), cs, w, state_indices=torch.tensor(
        [2, 0], device="cuda"))
    assert lib.calls[-1][0] == "mamba2_conv1d_step" and lib.calls[-1][1][0] == 0x5000
    state = torch.empty(2, 4, 8, 16, device="cuda")
    o = ops.ssd_step(state, torch.empty(2, 4, 8, device="cuda"), torch.empty(2, 4, device="cuda"),
                     torch.empty(4, device="cuda"), torch.empty(2, 2, 16, device="cuda"),
                     torch.empty(2, 2, 16, device="cuda"))
    assert lib.calls[-1][0] == "mamba2_ssd_step" and lib.calls[-1][1][0] == 0x5000
    assert o.device.type == "cuda" and o.shape == (2, 4, 8)
    # a float64 state: the GPU kernels are float32 only, so torch computes the step
    n = len(lib.calls)
    s64 = torch.empty(2, 4, 8, 16, device="cuda", dtype=F64)
    ops.ssd_step(s64, torch.empty(2, 4, 8, device="cuda", dtype=F64),
                 torch.empty(2, 4, device="cuda", dtype=F64),
                 torch.empty(4, device="cuda", dtype=F64),
                 torch.empty(2, 2, 16, device="cuda", dtype=F64),
                 torch.empty(2, 2, 16, device="cuda", dtype=F64))
    assert len(lib.calls) == n


def test_cpu_calls_never_touch_the_cuda_contexts(monkeypatch):
    def boom(dev):
        raise AssertionError("a CPU call looked up a CUDA context")

    monkeypatch.setattr(context, "_cuda_context", boom)
    inp = make_ssd_inputs(1, 10, 2, 4, 8, 1, seed=1)
    out, _ = ops.ssd(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4)
    assert out.is_cpu and context.call_device() is None


# =========================================================================================
# With a GPU: the real CUDA backend
# =========================================================================================

gpu = pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA device (torch.cuda.is_available())")


@pytest.fixture
def cuda_spy(monkeypatch):
    if not _dispatch.cuda_library():
        pytest.fail(f"torch sees a GPU but {_native.library_path()} cannot open a CUDA "
                    f"device-mode context (built without nvcc, or the driver is missing)")
    keys = []
    real = context._cuda_context

    def spy(dev):
        keys.append((context._device_index(dev), context._current_stream(dev.index or 0)))
        return real(dev)

    monkeypatch.setattr(context, "_cuda_context", spy)
    return keys


def _cuda(d):
    return {k: v.detach().cuda().requires_grad_(v.requires_grad) for k, v in d.items()}


def _ssd_call(t, cu=None, Q=16):
    return ops.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], Q, t.get("D"), t.get("z"),
                   t.get("dt_bias"), t.get("initial_states"), cu, True)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_ssd_forward_backward(cuda_spy, dtype):
    inp = make_ssd_inputs(2, 77, 4, 24, 40, 2, D="channel", dtype=dtype, requires_grad=True,
                          seed=3)
    t = _cuda(inp)
    g = torch.Generator().manual_seed(1)
    dout = torch.randn(2, 77, 4, 24, generator=g, dtype=F64)
    dfin = torch.randn(2, 4, 24, 40, generator=g, dtype=F64)

    def run(ts):
        for v in ts.values():
            v.grad = None
        out, fin = _ssd_call(ts)
        dev = ts["x"].device
        ((out.float() * dout.float().to(dev)).sum()
         + (fin * dfin.float().to(dev)).sum()).backward()
        return [out.detach(), fin.detach()] + [ts[k].grad for k in ts]

    a = run(t)
    b = run(t)
    torch.cuda.synchronize()
    assert cuda_spy and all(k[0] == t["x"].device.index for k in cuda_spy)
    for u, v in zip(a, b):
        assert u.is_cuda and torch.equal(u, v)  # bitwise run to run
    r = as64(inp)
    rout, rfin = R.ssd_sequential(r["x"], r["dt"], r["A"], r["B"], r["C"], r["D"], r["z"],
                                  r["dt_bias"], r["initial_states"], None, True)
    ((rout * dout).sum() + (rfin * dfin).sum()).backward()
    ref = [rout, rfin] + [r[k].grad for k in inp]
    cpu = run(inp)
    lo = dtype != torch.float32
    for i, (u, rr, c) in enumerate(zip(a, ref, cpu)):
        tol = TOL_F32 if not lo else (TOL_LOWP_OUT if i < 2 else TOL_LOWP_GRAD)
        assert nerr(u.cpu(), rr) <= tol, i
        assert nerr(u.cpu(), c) <= tol, i


@gpu
def test_gpu_varlen_and_non_default_stream(cuda_spy):
    cu = torch.tensor([0, 9, 9, 40], dtype=torch.int32)
    inp = make_ssd_inputs(1, 40, 2, 16, 16, 1, nseq=3, seed=5)
    t = _cuda(inp)
    o0, f0 = _ssd_call(t, cu.cuda(), Q=8)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o1, f1 = _ssd_call(t, cu, Q=8)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert torch.equal(o0, o1) and torch.equal(f0, f1)
    assert len({k[1] for k in cuda_spy}) == 2 and s.cuda_stream in {k[1] for k in cuda_spy}
    rout, rfin = R.ssd_sequential(*(as64(inp)[k] for k in ("x", "dt", "A", "B", "C")),
                                  inp["D"].double(), inp["z"].double(),
                                  inp["dt_bias"].double(), inp["initial_states"].double(),
                                  cu, True)
    assert nerr(o0.cpu(), rout) <= TOL_F32 and nerr(f0.cpu(), rfin) <= TOL_F32


@gpu
def test_gpu_conv1d_rmsnorm_and_steps(cuda_spy):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 50, 96, generator=g, requires_grad=True)
    w = torch.randn(96, 4, generator=g, requires_grad=True)
    xc, wc = (v.detach().cuda().requires_grad_(True) for v in (x, w))
    out, _ = ops.conv1d(xc, wc, None, True)
    out.sum().backward()
    rx, rw = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    ro, _ = R.conv1d(rx, rw, None, True)
    ro.sum().backward()
    assert nerr(out.detach().cpu(), ro) <= TOL_F32 and nerr(xc.grad.cpu(), rx.grad) <= TOL_F32
    assert nerr(wc.grad.cpu(), rw.grad) <= TOL_F32
    n = len(cuda_spy)
    xr = torch.randn(33, 64, generator=g)
    z = torch.randn(33, 64, generator=g)
    wr = torch.randn(64, generator=g)
    y = ops.rmsnorm_gated(xr.cuda(), wr.cuda(), z=z.cuda(), group_size=16)
    assert len(cuda_spy) > n
    assert nerr(y.cpu(), R.rmsnorm_gated(xr.double(), wr.double(), None, z.double(), 1e-6, 16)) \
        <= TOL_F32
    st0 = torch.randn(3, 4, 8, 16, generator=g) / 5
    st = st0.cuda()
    xs, dts = torch.randn(3, 4, 8, generator=g), 0.05 + 0.05 * torch.rand(3, 4, generator=g)
    A = -(0.1 + 0.4 * torch.rand(4, generator=g))
    Bm, Cm = torch.randn(3, 2, 16, generator=g) / 5, torch.randn(3, 2, 16, generator=g) / 5
    n = len(cuda_spy)
    yo = ops.ssd_step(st, xs.cuda(), dts.cuda(), A.cuda(), Bm.cuda(), Cm.cuda())
    assert len(cuda_spy) > n
    rst = st0.double().clone()
    ry = R.ssd_step(rst, xs.double(), dts.double(), A.double(), Bm.double(), Cm.double())
    assert nerr(yo.cpu(), ry) <= TOL_F32 and nerr(st.cpu(), rst) <= TOL_F32
    cs0 = torch.randn(2, 96, 3, generator=g)
    cs = cs0.cuda()
    xo = torch.randn(2, 96, generator=g)
    yc = ops.conv1d_step(xo.cuda(), cs, w.detach().cuda(), None, True)
    rcs = cs0.double().clone()
    ryc = R.conv1d_step(xo.double(), rcs, w.detach().double(), None, True)
    assert nerr(yc.cpu(), ryc) <= TOL_F32 and nerr(cs.cpu(), rcs) <= TOL_F32


@gpu
def test_gpu_cuda_graph_capture_forward_backward(cuda_spy):
    """A varlen forward + backward (cu_seqlens on the device) captured in a CUDA graph: the
    library's contexts take device index tensors and torch's allocator, so its calls make no
    allocation, host copy or sync (docs/gpu_capture.md). The context of a stream is made on
    its first call, which allocates: warm up on the stream the capture then uses."""
    cu = torch.tensor([0, 9, 9, 40], dtype=torch.int32, device="cuda")
    inp = make_ssd_inputs(1, 40, 2, 16, 16, 1, nseq=3, requires_grad=True, seed=6)
    t = _cuda(inp)
    keys = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
    args = [t[k] for k in keys]
    g = torch.Generator().manual_seed(4)
    dout = torch.randn(1, 40, 2, 16, generator=g).cuda()
    dfin = torch.randn(3, 2, 16, 16, generator=g).cuda()

    def fb():
        out, fin = ops.ssd(*args[:5], 8, *args[5:], cu, True)
        loss = (out * dout).sum() + (fin * dfin).sum()
        return (out, fin) + torch.autograd.grad(loss, args)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fb()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        static = fb()
    for scale in (1.0, 0.5):
        with torch.no_grad():
            t["x"].mul_(scale)  # new values in the captured input buffer
        eager = fb()
        graph.replay()
        torch.cuda.synchronize()
        for a, b in zip(eager, static):
            assert torch.equal(a, b)


@gpu
def test_gpu_torch_compile_custom_ops(cuda_spy):
    inp = make_ssd_inputs(1, 40, 2, 16, 16, 1, requires_grad=True, seed=8)
    t = _cuda(inp)
    args = [t[k] for k in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")]

    def f(x, dt, A, B, C, D, z, dt_bias, init):
        out, fin = ops.ssd(x, dt, A, B, C, 16, D, z, dt_bias, init, None, True)
        return (out * out).sum() + fin.sum()

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    lc = cf(*args)
    lc.backward()
    gc = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    le = f(*args)
    le.backward()
    torch.testing.assert_close(lc, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(gc, args):
        torch.testing.assert_close(a, b.grad, rtol=1e-5, atol=1e-6)


@gpu
def test_gpu_float64_and_mixed_devices(cuda_spy):
    x = torch.randn(2, 10, 8, dtype=F64, device="cuda")
    w = torch.randn(8, 3, dtype=F64, device="cuda")
    assert not _dispatch.conv1d(x, w)  # float64: torch computes it
    ops.conv1d(x, w)
    inp = make_ssd_inputs(1, 10, 2, 4, 8, 1, dtype=F64, seed=1)
    t = _cuda(inp)
    with pytest.raises(mamba2c.Mamba2Error, match="f64"):
        _ssd_call(t)
    t32 = _cuda(make_ssd_inputs(1, 10, 2, 4, 8, 1, seed=1))
    with pytest.raises(mamba2c.DeviceError):
        ops.ssd(t32["x"], t32["dt"], t32["A"].cpu(), t32["B"], t32["C"], 4)


@gpu
def test_gpu_mamba2_module_forward_backward_and_decode(cuda_spy):
    import copy

    from mamba2c.nn import InferenceParams, Mamba2
    from test_modules import TOL_MODULE, mamba2_reference

    torch.manual_seed(0)
    m = Mamba2(d_model=32, d_state=16, d_conv=4, expand=2, headdim=16, chunk_size=8,
               ngroups=2, layer_idx=0)
    with torch.no_grad():
        m.D.normal_()
        m.norm.weight.normal_()
    m64 = copy.deepcopy(m).double()
    mc = copy.deepcopy(m).cuda()
    u = torch.randn(2, 37, 32)
    u64 = u.double().requires_grad_(True)
    uc = u.cuda().requires_grad_(True)
    y = mc(uc)
    assert cuda_spy  # the layer's ops ran on the CUDA backend
    y64 = mamba2_reference(m64, u64)
    assert nerr(y.detach().cpu(), y64) <= TOL_MODULE
    gy = torch.randn_like(y64)
    (y * gy.float().cuda()).sum().backward()
    (y64 * gy).sum().backward()
    errs = {"u": nerr(uc.grad.cpu(), u64.grad)}
    for (n, p), (_, p64) in zip(mc.named_parameters(), m64.named_parameters()):
        errs[n] = nerr(p.grad.cpu(), p64.grad)
    assert max(errs.values()) <= TOL_MODULE, errs
    # prefill then decode on the device equals the full forward
    mc.eval()
    with torch.no_grad():
        full = mc(uc)
        ip = InferenceParams(max_seqlen=40, max_batch_size=2)
        outs = [mc(uc[:, :6], inference_params=ip)]
        ip.seqlen_offset = 6
        for t in range(6, 37):
            outs.append(mc(uc[:, t:t + 1], inference_params=ip))
            ip.seqlen_offset += 1
    assert nerr(torch.cat(outs, 1).cpu(), full.cpu()) <= TOL_MODULE
