"""The ctypes binding itself: library discovery, ABI, error mapping, devices, contexts,
and the per-call overhead of the binding."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import mamba2c
from mamba2c import _native

from conftest import make_ssd_inputs

PKG_ROOT = str(Path(__file__).resolve().parents[1])


def _tiny():
    d = make_ssd_inputs(1, 1, 1, 1, 1, 1, D=None, z=False, dt_bias=False, init=False, seed=0)
    return d["x"], d["dt"], d["A"], d["B"], d["C"]


def test_library_loads_and_reports():
    assert mamba2c.available()
    assert Path(mamba2c.library_path()).is_file()
    assert _native.version().count(".") == 2
    assert _native.last_call_isa("cpu") in ("avx512", "avx2+fma", "scalar")
    assert _native.last_call_isa("ref") == "reference"


def test_missing_library_is_a_clear_error():
    code = ("import mamba2c, sys\n"
            "import torch\nt = torch.zeros(1, 1, 1, 1)\n"
            "try:\n    mamba2c.mamba_chunk_scan_combined(t, t[..., 0], t[0, 0, 0], t, t, 4)\n"
            "except mamba2c.LibraryNotFoundError as e:\n    print('LNF', str(e).splitlines()[0])\n")
    env = dict(os.environ, MAMBA2C_LIBRARY="/nonexistent/libmamba2c.so", PYTHONPATH=PKG_ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert "LNF libmamba2c was not found" in r.stdout, r.stdout + r.stderr
    assert mamba2c.available() is True  # this process is unaffected


@pytest.mark.parametrize("how", ["env", "call", "off"])
def test_reuse_freed_memory_removes_page_faults_of_fresh_outputs(how):
    """mamba2c.reuse_freed_memory (or MAMBA2C_REUSE_FREED_MEMORY=1 at import): a 48 MiB tensor
    allocated, written and freed in a loop reuses a heap block (no page faults once warm:
    torch's 64-byte-aligned request is a little larger than the block it freed, so glibc
    settles on blocks it alternates between after 1-4 rounds; the least of rounds 7-10
    counts); without it glibc maps fresh pages each time (~12k faults). Counted, not timed;
    in a subprocess, since the setting is process-wide."""
    code = ("import resource, sys, torch, mamba2c\n"
            "ok = mamba2c.reuse_freed_memory() if sys.argv[1] == 'call' else None\n"
            "def faults():\n"
            "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "x = torch.randn(1, 512, 32, 64)\n"
            "d = mamba2c.ops.ssd(x, torch.rand(1, 512, 32) * 0.1, -torch.rand(32),\n"
            "                    torch.randn(1, 512, 1, 16), torch.randn(1, 512, 1, 16), 64)[0]\n"
            "del d\n"
            "seen = []\n"
            "for i in range(10):\n"
            "    f0 = faults(); t = torch.empty(12 << 20); t.fill_(2.0); seen.append(faults() - f0)\n"
            "    del t\n"
            "f1, f0 = min(seen[6:]), 0\n"
            "print('APPLIED', mamba2c.reuse_freed_memory() if sys.argv[1] != 'off' else ok,\n"
            "      'FAULTS', f1 - f0)\n")
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    env.pop("MAMBA2C_REUSE_FREED_MEMORY", None)
    if how == "env":
        env["MAMBA2C_REUSE_FREED_MEMORY"] = "1"
    r = subprocess.run([sys.executable, "-c", code, how], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    applied, faults = words[words.index("APPLIED") + 1], int(words[words.index("FAULTS") + 1])
    import platform
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("reuse_freed_memory acts on glibc's malloc only")
    if how == "off":
        try:
            thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        except OSError:
            thp = ""
        if "[always]" in thp:
            pytest.skip("transparent huge pages always on: fresh blocks fault per 2 MiB page")
        assert faults > 6000, r.stdout  # 12k 4 KiB pages mapped afresh
    else:
        assert applied == "True" and faults < 1000, r.stdout


def test_invalid_argument_is_value_error_with_c_message():
    x, dt, A, B, C = _tiny()
    Bbad = torch.randn(1, 2, 1, 1)  # L=2 where x has L=1
    with pytest.raises(ValueError, match=r"Bm has shape \[1,2,1,1\]") as ei:
        mamba2c.mamba_chunk_scan_combined(x, dt, A, Bbad, C, 1)
    assert isinstance(ei.value, mamba2c.Mamba2Error) and ei.value.status == 1
    with pytest.raises(ValueError, match="chunk_size"):
        mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 0)
    with pytest.raises(ValueError, match="multiple of G"):
        xx = torch.randn(1, 3, 3, 2)
        mamba2c.mamba_chunk_scan_combined(xx, torch.rand(1, 3, 3), -torch.rand(3),
                                          torch.randn(1, 3, 2, 4), torch.randn(1, 3, 2, 4), 2)


def test_non_float_input_is_type_error():
    x, dt, A, B, C = _tiny()
    with pytest.raises(TypeError, match="floating-point"):
        mamba2c.mamba_chunk_scan_combined(x.long(), dt, A, B, C, 1)
    with pytest.raises(TypeError, match="cu_seqlens has dtype"):
        mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 1, cu_seqlens=torch.tensor([0.0, 1.0]),
                                          return_varlen_states=True)


def _raw_forward(dtypes):
    """Call mamba2_ssd_forward with hand-made descriptors (bypassing the dtype policy)."""
    s = _native._state()
    t = {k: torch.zeros(1, 1, 1, 1, dtype=torch.float64) for k in ("out", "fin", "x", "B", "C")}
    t["dt"] = torch.zeros(1, 1, 1, dtype=torch.float64)
    t["A"] = torch.zeros(1, dtype=torch.float64)
    order = ("out", "fin", "x", "dt", "A", "B", "C")
    for i, k in enumerate(order):
        _native._out_desc(s.buf, i * _native._TSZ, t[k], dtypes.get(k, _native.DT_F32))
    popt = _native._options(s, [], _native.abi.SLOT["ssd_probe"], 1, None, None, None, None,
                            None, False, 0.0, float("inf"), torch.float32, _native.DT_F32)
    st = _native.load().mamba2_ssd_forward(_native._context(_native.BACKEND_CPU),
                                           s.base, None,  # out, out_x
                                           *[s.base + i * _native._TSZ for i in range(1, 7)],
                                           popt, None, 0)
    return st


def test_c_dtype_error_maps_to_type_error():
    st = _raw_forward({"A": _native.DT_F64})
    assert st == _native.STATUS_INVALID_ARGUMENT
    with pytest.raises(TypeError, match="A has dtype f64"):
        _native._raise_status(st, "mamba2_ssd_forward")


def test_c_unsupported_maps_to_not_implemented():
    # float64 is the reference backend's dtype; the CPU backend reports UNSUPPORTED
    st = _raw_forward({k: _native.DT_F64 for k in ("out", "fin", "x", "dt", "A", "B", "C")})
    assert st == _native.STATUS_UNSUPPORTED
    with pytest.raises(NotImplementedError, match="does not support"):
        _native._raise_status(st, "mamba2_ssd_forward")


def test_unavailable_backend_is_not_implemented():
    if torch.cuda.is_available() and _native.context.cuda_backend_ok():
        pytest.skip("the CUDA backend runs here: use_backend('cuda') succeeds")
    x, dt, A, B, C = _tiny()
    # an unavailable backend fails where it is chosen, not at the next op (issue 16)
    # (the C message: "not built" without the CUDA backend, "no driver" / "no device" with it)
    with pytest.raises(NotImplementedError, match="backend 'cuda' is not available"):
        with mamba2c.use_backend("cuda"):
            pytest.fail("use_backend('cuda') entered")
    with pytest.raises(NotImplementedError, match="backend 'cuda' is not available"):
        mamba2c.set_backend("cuda")
    assert mamba2c.get_backend() == "cpu"  # unchanged by the failed calls
    mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 1)  # still runs on the CPU backend
    with pytest.raises(ValueError):
        mamba2c.set_backend("tpu")
    with pytest.raises(ValueError):
        mamba2c.use_backend("tpu")


def test_status_mapping_table():
    expect = {1: ValueError, 2: NotImplementedError, 3: MemoryError, 4: RuntimeError,
              5: NotImplementedError, 6: RuntimeError}
    for st, cls in expect.items():
        with pytest.raises(cls) as ei:
            _native._raise_status(st, "f")
        assert isinstance(ei.value, mamba2c.Mamba2Error) and ei.value.status == st


def test_meta_tensor_eager_raises_device_error():
    x, dt, A, B, C = (t.to("meta") for t in _tiny())
    with pytest.raises(mamba2c.DeviceError, match="meta tensor"):
        mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_raises_device_error():
    from mamba2c import _dispatch
    if _dispatch.cuda_library():
        pytest.skip("the library's CUDA backend serves CUDA tensors (test_cuda_tensors.py)")
    x, dt, A, B, C = (t.cuda() for t in _tiny())
    with pytest.raises(mamba2c.DeviceError, match="cuda"):
        mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 1)
    assert isinstance(mamba2c.DeviceError("x"), NotImplementedError)


def test_threads_use_their_own_contexts():
    inp = make_ssd_inputs(2, 30, 2, 8, 16, 1, seed=3)
    ref = mamba2c.mamba_chunk_scan_combined(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 8)
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(mamba2c.mamba_chunk_scan_combined(
                    inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 8))
        except Exception as e:  # pragma: no cover
            errors.append(e)

    ths = [threading.Thread(target=work) for _ in range(3)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errors and len(results) == 15
    for r in results:
        assert torch.equal(r, ref)


def _bench(f, n=2000, reps=5):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def test_binding_overhead_report(capsys):
    """Per-call cost of the binding on the smallest problem (B=L=H=P=N=1): the Python
    call minus the bare C call (descriptors pre-packed, one ctypes call)."""
    x, dt, A, B, C = _tiny()
    for _ in range(100):
        _native.ssd_forward(x, dt, A, B, C, 1)
    s = _native._state()
    out, fin = torch.empty(1, 1, 1, 1), torch.empty(1, 1, 1, 1)
    for i, t in enumerate((out, fin, x, dt, A, B, C)):
        _native._out_desc(s.buf, i * _native._TSZ, t, _native.DT_F32)
    popt = _native._options(s, [], _native.abi.SLOT["ssd_probe"], 1, None, None, None, None,
                            None, False, 0.0, float("inf"), torch.float32, _native.DT_F32)
    fn = _native.load().mamba2_ssd_forward
    ctx = _native._context(_native.BACKEND_CPU)
    ptrs = [s.base + i * _native._TSZ for i in range(7)]
    ptrs.insert(1, None)  # out_x
    bare = _bench(lambda: fn(ctx, *ptrs, popt, None, 0))
    raw = _bench(lambda: _native.ssd_forward(x, dt, A, B, C, 1))
    api = _bench(lambda: mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, 1))
    xg, dtg, Ag, Bg, Cg = (t.clone().requires_grad_(True) for t in (x, dt, A, B, C))
    api_g = _bench(lambda: mamba2c.mamba_chunk_scan_combined(xg, dtg, Ag, Bg, Cg, 1))
    op = _bench(lambda: torch.ops.mamba2c.ssd_fwd(x, dt, A, B, C, 1, None, None, None, None,
                                                   None, False, 0.0, float("inf")), n=500)
    with capsys.disabled():
        print(f"\n[binding overhead] bare C call {bare:.2f} us | _native.ssd_forward {raw:.2f} us "
              f"(+{raw - bare:.2f}) | mamba_chunk_scan_combined {api:.2f} us (+{api - bare:.2f}), "
              f"with autograd {api_g:.2f} us | torch.ops.mamba2c.ssd_fwd {op:.2f} us")
    assert raw > 0 and api > 0  # a report (bench/py_ops.py is the benchmark): no timing threshold


def test_decode_step_overhead_report(capsys):
    """Per-call cost of selective_state_update at batch 1 on the smallest problem
    (H=P=N=1: the C kernel itself is ~0) with mamba_ssm's stride-0 parameter views, against
    the bare C call (descriptors pre-packed, one ctypes call). bench/py_ops.py measures the
    same at the mamba2-2.7b decode shape."""
    import ctypes
    import math
    T = _native._TSZ
    state = torch.randn(1, 1, 1, 1)
    x, dt, A, D, db = torch.randn(1, 1, 1), torch.rand(1, 1), -torch.rand(1), torch.randn(1), \
        torch.randn(1)
    Bm, Cm = torch.randn(1, 1, 1), torch.randn(1, 1, 1)
    out = torch.empty(1, 1, 1)
    blk = torch.zeros(10 * T + _native._SO.size, dtype=torch.uint8)
    base = blk.data_ptr()
    buf = (ctypes.c_char * blk.numel()).from_address(base)
    for i, t in enumerate((state, out, x, dt, A, Bm, Cm, D, db)):
        _native._out_desc(buf, i * T, t, _native.DT_F32)
    _native._SO.pack_into(buf, 10 * T, base + 7 * T, 0, base + 8 * T, 0, 1, 0.0, math.inf)
    _native._state()
    fn = _native.load().mamba2_ssd_step
    args = (_native._context(_native.BACKEND_CPU), base, base + T, None, base + 2 * T,
            base + 3 * T, base + 4 * T, base + 5 * T, base + 6 * T, base + 10 * T)
    assert fn(*args) == 0
    dte, Ae, De, dbe = dt[:, :, None], A[:, None, None], D[:, None], db[:, None]
    with torch.no_grad():
        bare = _bench(lambda: fn(*args))
        api = _bench(lambda: mamba2c.selective_state_update(state, x, dte, Ae, Bm, Cm, De,
                                                            dt_bias=dbe, dt_softplus=True))
    with capsys.disabled():
        print(f"\n[decode step overhead] bare C call {bare:.2f} us | selective_state_update "
              f"{api:.2f} us (+{api - bare:.2f})")
    assert api > 0  # a report (bench/py_ops.py is the benchmark): no timing threshold
