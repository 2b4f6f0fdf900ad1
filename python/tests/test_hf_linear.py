"""nn.Linear on the C GEMV inside use_mamba2c_in_transformers() (mamba2c/hf_linear.py):
decode-sized no-grad CPU products equal torch's within SPEC §8's tolerances (float32: 1e-5
normalised; bfloat16: one rounding of the float32 result), every other call left to
nn.Linear's own forward (gradients, more than 8 rows, other dtypes, devices, subclasses,
the reference backend), the class's forward restored on exit, and greedy decoding of the
hybrid families with their MLPs, projections and lm_head routed: the torch path's tokens."""
from __future__ import annotations

import collections

import pytest
import torch

import mamba2c
from mamba2c import hf, hf_linear
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32

pytest.importorskip("transformers")


@pytest.fixture
def routed(monkeypatch):
    """Every size routed (the tiny test weights are below the size threshold), calls counted."""
    monkeypatch.setattr(hf_linear, "_MIN_WEIGHT_BYTES", 0)
    calls = collections.Counter()
    gemv = hf_linear._gemv

    def counted(m, x):
        calls["gemv"] += 1
        return gemv(m, x)
    monkeypatch.setattr(hf_linear, "_gemv", counted)
    return calls


def _lin(i, o, bias=True, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(i, o, bias=bias).to(dtype)


def _ref64(lin, x):
    b = None if lin.bias is None else lin.bias.double()
    return torch.nn.functional.linear(x.double(), lin.weight.double(), b)


@pytest.mark.parametrize("shape", [(96,), (1, 1, 96), (3, 96), (2, 4, 96)],
                         ids=["vec", "1x1", "3rows", "8rows"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_linear_matches_torch(routed, dtype, bias, shape):
    lin = _lin(96, 40, bias, dtype)
    x = torch.randn(shape).to(dtype)
    with torch.no_grad():
        want = lin(x)
        with hf.use_mamba2c_in_transformers():
            got = lin(x)
    assert routed["gemv"] == 1
    assert got.shape == want.shape and got.dtype is dtype
    ref = _ref64(lin, x)
    if dtype is torch.float32:
        assert nerr(got, want) <= TOL_F32 and nerr(got, ref) <= TOL_F32
    else:  # the float32 result rounded once to bfloat16
        assert nerr(got, ref) <= 2.0 ** -8
        assert torch.equal(got, ref.float().to(torch.bfloat16)) or nerr(got, want) <= 2.0 ** -7


def test_strided_input_and_inference_mode(routed):
    lin = _lin(64, 48)
    x = torch.randn(64, 5)[:, 1:3].t()  # [2, 64], last stride 5
    with torch.inference_mode(), hf.use_mamba2c_in_transformers():
        got = lin(x)
    assert routed["gemv"] == 1 and nerr(got, _ref64(lin, x)) <= TOL_F32


class _Sub(torch.nn.Linear):
    pass


def _unrouted_cases():
    lin = _lin(32, 24)
    yield "9 rows", lin, torch.randn(9, 32), torch.no_grad
    yield "float64", _lin(32, 24, dtype=torch.float64), torch.randn(1, 32).double(), torch.no_grad
    yield "float16", _lin(32, 24, dtype=torch.float16), torch.randn(1, 32).half(), torch.no_grad
    yield "mixed dtypes", lin, torch.randn(1, 32).bfloat16(), torch.no_grad
    yield "subclass", _Sub(32, 24), torch.randn(1, 32), torch.no_grad
    yield "grad enabled, weight requires grad", lin, torch.randn(1, 32), torch.enable_grad
    t = _lin(32, 24)
    t.weight = torch.nn.Parameter(torch.randn(32, 24).t(), requires_grad=False)
    yield "transposed weight", t, torch.randn(1, 32), torch.no_grad
    meta = torch.nn.Linear(32, 24, device="meta")
    yield "meta device", meta, torch.randn(1, 32, device="meta"), torch.no_grad


@pytest.mark.parametrize("case", [c[0] for c in _unrouted_cases()])
def test_other_calls_stay_on_torch(routed, case):
    _, lin, x, mode = next(c for c in _unrouted_cases() if c[0] == case)
    with mode():
        if case == "mixed dtypes":  # torch's own error, raised by torch's own forward
            with pytest.raises(RuntimeError, match="dtype"):
                lin(x)
            with hf.use_mamba2c_in_transformers(), pytest.raises(RuntimeError, match="dtype"):
                lin(x)
            assert routed["gemv"] == 0
            return
        want = lin(x)
        with hf.use_mamba2c_in_transformers():
            got = lin(x)
    assert routed["gemv"] == 0, case
    if x.is_meta:
        assert got.is_meta and got.shape == want.shape
    else:
        assert torch.equal(got, want), case
    assert got.requires_grad == case.startswith("grad")


def test_size_threshold_and_reference_backend(monkeypatch):
    calls = collections.Counter()
    gemv = hf_linear._gemv
    monkeypatch.setattr(hf_linear, "_gemv", lambda m, x: calls.update(["gemv"]) or gemv(m, x))
    small = _lin(64, 64)  # 16 KiB: below _MIN_WEIGHT_BYTES
    with torch.no_grad(), hf.use_mamba2c_in_transformers():
        small(torch.randn(1, 64))
        assert calls["gemv"] == 0
        monkeypatch.setattr(hf_linear, "_MIN_WEIGHT_BYTES", 0)
        with mamba2c.use_backend("ref"):
            small(torch.randn(1, 64))
        assert calls["gemv"] == 0
        small(torch.randn(1, 64))
        assert calls["gemv"] == 1


def test_functorch_and_forward_ad_stay_on_torch(routed):
    import torch.autograd.forward_ad as fwad
    lin = _lin(32, 24)
    x = torch.randn(3, 1, 32)
    with torch.no_grad(), hf.use_mamba2c_in_transformers():
        got = torch.vmap(lin)(x)
        with fwad.dual_level():
            dual = fwad.make_dual(x[0], torch.ones_like(x[0]))
            tangent = fwad.unpack_dual(lin(dual)).tangent
    assert routed["gemv"] == 0
    assert nerr(got, _ref64(lin, x)) <= TOL_F32
    assert tangent is not None and nerr(tangent, torch.ones(1, 32) @ lin.weight.t()) <= TOL_F32


def test_gradients_untouched(routed):
    """Grad mode with trainable weights (training, or a plain forward of a model fresh from
    from_pretrained): nn.Linear's own forward, the same gradients."""
    lin = _lin(48, 40)
    x = torch.randn(1, 48, requires_grad=True)
    lin(x).square().sum().backward()
    want = (x.grad.clone(), lin.weight.grad.clone(), lin.bias.grad.clone())
    x.grad = lin.weight.grad = lin.bias.grad = None
    with hf.use_mamba2c_in_transformers():
        lin(x).square().sum().backward()
    assert routed["gemv"] == 0
    for g, w in zip((x.grad, lin.weight.grad, lin.bias.grad), want):
        assert torch.equal(g, w)


def test_forward_restored_on_exit():
    orig = torch.nn.Linear.forward
    with hf.use_mamba2c_in_transformers():
        inner = torch.nn.Linear.forward
        assert inner is not orig and inner.__wrapped_by_mamba2c__ is hf_linear._gemv
        with hf.use_mamba2c_in_transformers():
            assert torch.nn.Linear.forward is not inner
        assert torch.nn.Linear.forward is inner
    assert torch.nn.Linear.forward is orig
    with pytest.raises(KeyError):
        with hf.use_mamba2c_in_transformers():
            raise KeyError("inside")
    assert torch.nn.Linear.forward is orig


@pytest.mark.parametrize("case", ["bamba", "nemotron_h", "mamba2"])
def test_family_decode_with_routed_linears(routed, case):
    """Greedy generation (prefill on torch's Linear: more than 8 rows; every decode token's
    MLP, attention, Mamba projections and lm_head on the C GEMV): the torch path's tokens,
    logits within 1e-5."""
    from test_hf_families import _make
    cfg, a, b = _make(case, seed=3, use_cache=True)
    a.eval()
    b.eval()
    ids = torch.randint(3, cfg.vocab_size, (1, 11), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=5, do_sample=False, output_logits=True, return_dict_in_generate=True,
              pad_token_id=0)
    with torch.no_grad():
        ra = a.generate(ids, **kw)
        with hf.use_mamba2c_in_transformers():
            rb = b.generate(ids, **kw)
    n_lin = sum(type(m) is torch.nn.Linear for m in b.modules())
    assert routed["gemv"] >= 4 * n_lin > 0, (case, routed, n_lin)
    assert torch.equal(ra.sequences, rb.sequences), case
    for x, y in zip(ra.logits, rb.logits):
        assert nerr(y, x) <= TOL_F32, case
