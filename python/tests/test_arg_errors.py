"""Clear errors for wrong arguments (issue 16): a wrong rank names the tensor and the shape
expected (not "not enough values to unpack"), a non-floating decode state is a dtype error
on every path, an unavailable backend fails where it is chosen."""
from __future__ import annotations

import pytest
import torch

import mamba2c
from mamba2c import _native, chunked, ops


def _ssd_inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 3, 4, generator=g)
    dt = torch.rand(2, 8, 3, generator=g)
    A = -torch.rand(3, generator=g)
    B = torch.randn(2, 8, 1, 5, generator=g)
    C = torch.randn(2, 8, 1, 5, generator=g)
    return x, dt, A, B, C


def _rank_cases():
    x, dt, A, B, C = _ssd_inputs()
    state = torch.zeros(2, 3, 4, 5)
    w = torch.randn(4, 4)
    return [
        ("x", "[B,L,H,P]", lambda: mamba2c.mamba_chunk_scan_combined(x[0], dt, A, B, C, 4)),
        ("x", "[B,H,P]", lambda: mamba2c.selective_state_update(state, x[:, 0, 0], dt[:, 0], A,
                                                                B[:, 0], C[:, 0])),
        ("B", "[B,G,N]", lambda: ops.ssd_step(state, x[:, 0], dt[:, 0], A, B[:, 0, 0], C[:, 0])),
        ("state", "[S,H,P,N]", lambda: mamba2c.selective_state_update(
            torch.zeros(2, 3, 4, 5, 1), x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0])),
        ("x", "[B,P]", lambda: mamba2c.selective_state_update(torch.zeros(2, 4, 5), x[:, 0],
                                                              dt[:, 0], A, B[:, 0], C[:, 0])),
        ("x", "[B,D,L]", lambda: mamba2c.causal_conv1d_fn(torch.randn(4, 8), w)),
        ("x", "[B,L,D]", lambda: ops.conv1d(torch.randn(8, 4), w)),
        ("x", "[B,D]", lambda: mamba2c.causal_conv1d_update(torch.randn(4), torch.zeros(1, 4, 3),
                                                            w)),
        ("conv_state", "[S,D,K]", lambda: mamba2c.causal_conv1d_update(
            torch.randn(1, 4), torch.zeros(4, 3), w)),
        ("x", "[..., D]", lambda: mamba2c.rmsnorm_fn(torch.tensor(1.0), torch.randn(1), None)),
        ("zxbcdt", "[B,L,d_in_proj]", lambda: mamba2c.mamba_split_conv1d_scan_combined(
            torch.randn(8, 40), torch.randn(16, 4), None, torch.zeros(2), -torch.rand(2),
            torch.ones(2), 4, headdim=4)),
        ("dt", "[B,L,H]", lambda: chunked.chunk_cumsum(dt[0], A, 4)),
        ("B", "[B,L,G,N]", lambda: chunked.bmm_chunk(B[0], C[0], 4)),
        ("x", "[B,L,H,P]", lambda: chunked.forward(x[0], dt, A, B, C, 4)),
        ("states", "[B,K,H,P,N]", lambda: chunked.state_passing(torch.zeros(2, 3, 4, 5),
                                                                torch.zeros(2, 3, 2, 4))),
    ]


@pytest.mark.parametrize("i", range(len(_rank_cases())))
def test_rank_error_names_tensor_and_shape(i):
    name, shape, call = _rank_cases()[i]
    with pytest.raises(ValueError) as e:
        call()
    msg = str(e.value)
    assert "unpack" not in msg
    assert msg.startswith(f"mamba2c: {name} has shape ") and shape in msg, msg


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
@pytest.mark.parametrize("grad", [False, True])
def test_integer_state_is_a_dtype_error(dtype, grad):
    """Neither the C step nor the torch fallback computes in an integer state: TypeError
    before anything is written, with or without autograd (which takes the torch path)."""
    x, dt, A, B, C = _ssd_inputs()
    state = torch.zeros(2, 3, 4, 5, dtype=dtype)
    xs = x[:, 0].clone().requires_grad_(grad)
    with pytest.raises(TypeError, match="state has dtype"):
        mamba2c.selective_state_update(state, xs, dt[:, 0], A, B[:, 0], C[:, 0])
    with pytest.raises(TypeError, match="state has dtype"):
        ops.ssd_step(state, xs, dt[:, 0], A, B[:, 0], C[:, 0])
    assert not state.any()


def test_set_backend_unavailable_fails_at_once():
    if torch.cuda.is_available() and _native.context.cuda_backend_ok():
        pytest.skip("the CUDA backend runs here: set_backend('cuda') succeeds")
    before = mamba2c.get_backend()
    with pytest.raises(NotImplementedError, match="backend 'cuda' is not available"):
        mamba2c.set_backend("cuda")
    with pytest.raises(NotImplementedError):
        mamba2c.use_backend("cuda")
    assert mamba2c.get_backend() == before
    mamba2c.set_backend("ref")
    try:
        assert mamba2c.get_backend() == "ref"
    finally:
        mamba2c.set_backend(before)


@pytest.mark.parametrize("gs", [-2, -1, 3])
@pytest.mark.parametrize("device_path", ["C", "torch"])
def test_rmsnorm_bad_group_size_is_our_error(gs, device_path, monkeypatch):
    """A negative group size, or one that does not divide D, is mamba2c's ValueError on the C
    path and on the torch path alike (not torch's "negative dimension" from sizing rstd)."""
    x, z, w = torch.randn(3, 10), torch.randn(3, 10), torch.ones(10)
    if device_path == "torch":
        monkeypatch.setattr("mamba2c._dispatch.rmsnorm_gated", lambda x: False)
    with pytest.raises(ValueError, match=r"mamba2c: group_size is " + str(gs)):
        ops.rmsnorm_gated(x, w, None, z, 1e-6, group_size=gs)
    with pytest.raises(ValueError, match=r"mamba2c: group_size is " + str(gs)):
        mamba2c.rmsnorm_fn(x, w, None, z=z, group_size=gs)


@pytest.mark.parametrize("name", ["cache_seqlens", "state_indices"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_conv1d_step_float_index_is_a_type_error(name, dtype):
    """A non-integer cache_seqlens is a TypeError naming it, as a float state_indices or
    cu_seqlens is (it used to take the torch path and succeed, silently)."""
    x, st, w = torch.randn(2, 4), torch.zeros(2, 4, 3), torch.randn(4, 4)
    idx = torch.zeros(2, dtype=dtype)
    with pytest.raises(TypeError, match=rf"mamba2c: {name} has dtype {dtype}; expected int32"):
        mamba2c.causal_conv1d_update(x, st, w, None, None, **{
            "cache_seqlens" if name == "cache_seqlens" else "conv_state_indices": idx})
    with pytest.raises(TypeError, match=rf"mamba2c: {name} has dtype"):
        ops.conv1d_step(x, st, w, **{name: idx})
