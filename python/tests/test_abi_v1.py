"""ABI v1 as the binding sees it: the library's ABI version and every struct's size are
checked at load (a mismatch is refused, not silently mis-packed), every options and grads
struct carries struct_size = sizeof, and MAMBA2_STATUS_BUSY becomes Mamba2BusyError."""
from __future__ import annotations

import ctypes
import threading

import pytest
import torch

from mamba2c import _native
from mamba2c._native import abi, loader


def test_library_abi_version_and_struct_sizes():
    lib = _native.load()
    assert lib.mamba2_abi_version() == abi.ABI_VERSION == 1
    for name, sid in abi.STRUCT_IDS.items():
        assert lib.mamba2_struct_size(sid) == abi.LAYOUTS[name].size, name
    assert lib.mamba2_struct_size(99) == 0


def test_every_options_and_grads_struct_starts_with_struct_size():
    for name, lay in abi.LAYOUTS.items():
        if name == "tensor":
            continue
        assert lay.names[0] == "struct_size" and lay.offset["struct_size"] == 0, name
        buf = ctypes.create_string_buffer(lay.size)
        lay.pack_into(buf, 0, *lay.defaults)
        assert int.from_bytes(buf.raw[:4], "little") == lay.size, name


class _FakeLib:
    """A library with the given ABI version (None: a pre-v1 library without the symbol)."""

    def __init__(self, version):
        if version is not None:
            self.mamba2_abi_version = lambda: version


@pytest.mark.parametrize("version", [None, 0, 2])
def test_a_library_of_another_abi_is_refused(version):
    fake = _FakeLib(version)
    with pytest.raises(OSError, match="ABI"):
        abi.bind(fake)


def test_busy_status_is_a_busy_error():
    _native.load()
    with pytest.raises(_native.Mamba2BusyError) as e:
        loader._raise_status(abi.STATUS_BUSY, "mamba2_ssd_forward")
    assert e.value.status == abi.STATUS_BUSY and isinstance(e.value, RuntimeError)


def test_a_shared_context_reports_busy_not_a_deadlock():
    """The binding keeps one context per thread; a context shared by hand across two
    threads must give BUSY (or succeed), never hang."""
    lib = _native.load()
    _native._state()  # this thread's scratch and context table
    ctx = _native._context(abi.BACKEND_CPU)
    x = torch.randn(2, 256, 8, 32)
    dt = torch.rand(2, 256, 8) * 0.1
    A = -torch.rand(8)
    B = torch.randn(2, 256, 1, 32)
    out = torch.empty_like(x)
    T = abi.TENSOR

    def desc(t):
        buf = ctypes.create_string_buffer(T.size)
        sh = list(t.shape) + [0] * (abi.MAX_RANK - t.dim())
        st = list(t.stride()) + [0] * (abi.MAX_RANK - t.dim())
        T.pack_into(buf, 0, t.data_ptr(), abi.DT_F32, t.dim(), *sh, *st)
        return buf

    d = [desc(t) for t in (out, x, dt, A, B)]
    stats = []

    def run(n):
        for _ in range(n):
            stats.append(lib.mamba2_ssd_forward(ctx, d[0], None, None, d[1], d[2], d[3], d[4],
                                                d[4], None, None, 0))

    th = threading.Thread(target=run, args=(20,))
    th.start()
    run(20)
    th.join(timeout=120)
    assert not th.is_alive()
    assert set(stats) <= {abi.STATUS_OK, abi.STATUS_BUSY}
    assert abi.STATUS_OK in stats
