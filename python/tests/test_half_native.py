"""bfloat16/float16 activations handed to the C SSD op as they are (no float32 copy) when the
backend accepts half storage, and the float32 widening otherwise (_native.native_half).

Whichever path a call takes, the results must meet SPEC §8 against the float64 reference on
the rounded inputs, and have the same dtypes (out and activation gradients in the half dtype,
final_state float32, every other gradient in its input's dtype)."""
from __future__ import annotations

import math

import pytest
import torch

import mamba2c
from mamba2c import _native, reference as R
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_LOWP_GRAD, TOL_LOWP_OUT, as64, make_ssd_inputs

INF = math.inf
HALF = [torch.bfloat16, torch.float16]
HALF_IDS = ["bf16", "f16"]


def _run_fb(inp, backend, Q=8, lim=(0.0, INF)):
    with mamba2c.use_backend(backend):
        out, final = mamba2c.mamba_chunk_scan_combined(
            inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], Q, D=inp.get("D"),
            z=inp.get("z"), dt_bias=inp.get("dt_bias"), initial_states=inp.get("initial_states"),
            dt_softplus=True, dt_limit=lim, return_final_states=True)
        g = torch.Generator().manual_seed(3)
        dout = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
        (out * dout).sum().backward()
    return out, final, dout


def _check_against_f64(inp, out, final, dout, lim=(0.0, INF)):
    ref_in = as64(inp)
    rout, rfin = R.ssd_sequential(ref_in["x"], ref_in["dt"], ref_in["A"], ref_in["B"],
                                  ref_in["C"], ref_in.get("D"), ref_in.get("z"),
                                  ref_in.get("dt_bias"), ref_in.get("initial_states"), None,
                                  True, lim)
    assert out.dtype == inp["x"].dtype and final.dtype == torch.float32
    assert nerr(out, rout) <= TOL_LOWP_OUT and nerr(final, rfin) <= TOL_LOWP_OUT
    (rout * dout.double()).sum().backward()
    for k, v in inp.items():
        assert v.grad.dtype == v.dtype, k
        assert torch.isfinite(v.grad).all(), k
        assert nerr(v.grad, ref_in[k].grad) <= TOL_LOWP_GRAD, k


def test_reference_backend_accepts_half_natively(native_mode):
    _native.native_half = None
    _native._half_ok.clear()
    assert _native._probe_half(_native.BACKEND_REF, _native.DT_BF16)
    assert _native._probe_half(_native.BACKEND_REF, _native.DT_F16)
    x = torch.zeros(1, 2, 1, 1, dtype=torch.bfloat16)
    assert _native._half_code(_native.BACKEND_REF, x, x[..., 0], x, x, None) == _native.DT_BF16
    # mixed activation dtypes, or the float32 policy forced: widen
    assert _native._half_code(_native.BACKEND_REF, x, x[..., 0].float(), x, x, None) == 0
    assert _native._half_code(_native.BACKEND_REF, x, x[..., 0], x, x, x.half()) == 0
    _native.native_half = False
    assert _native._half_code(_native.BACKEND_REF, x, x[..., 0], x, x, None) == 0


def test_probe_matches_the_c_library(native_mode):
    """The probe is a real call: its answer is what the library says for a [1,1,1,1] problem
    (the CPU backend gets half storage in a later change; until then it widens)."""
    _native._half_ok.clear()
    for b in (_native.BACKEND_CPU, _native.BACKEND_REF):
        for code in (_native.DT_BF16, _native.DT_F16):
            assert isinstance(_native._probe_half(b, code), bool)
    assert (_native.BACKEND_REF, _native.DT_BF16) in _native._half_ok


@pytest.mark.parametrize("backend", ["ref", "cpu"])
@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("mode", [None, False], ids=["auto", "widen"])
def test_half_storage_meets_spec(native_mode, backend, dtype, mode):
    _native.native_half = mode
    inp = make_ssd_inputs(2, 27, 4, 5, 7, 2, dtype=dtype, D="channel", requires_grad=True, seed=21)
    out, final, dout = _run_fb(inp, backend)
    _check_against_f64(inp, out, final, dout)


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
def test_native_and_widened_paths_agree(native_mode, dtype):
    """On the reference backend both paths compute in double from the same rounded values and
    round once: the outputs are identical, the gradients too."""
    res = {}
    for mode in (None, False):
        _native.native_half = mode
        inp = make_ssd_inputs(1, 19, 2, 4, 8, 1, dtype=dtype, requires_grad=True, seed=5)
        out, final, _ = _run_fb(inp, "ref", Q=4)
        res[mode] = (out, final, {k: v.grad for k, v in inp.items()})
    assert torch.equal(res[None][0], res[False][0])
    assert torch.allclose(res[None][1], res[False][1], rtol=1e-6, atol=1e-7)
    for k, g in res[None][2].items():
        assert g.dtype == res[False][2][k].dtype, k
        # widened: float32 compute of a value rounded once more; at most 1 half ulp apart
        assert nerr(g, res[False][2][k]) <= 1e-2, k


def test_native_half_views_are_passed_without_copy(native_mode):
    """A bf16 column slice of the in_proj output goes to the C call as a view (the native path
    keeps the layout policy: only a strided last dim is copied)."""
    _native.native_half = None
    B, L, H, P, G, N = 1, 9, 2, 4, 1, 8
    width = 2 * H * P + 2 * G * N + H + 3
    buf = torch.randn(B, L, width).bfloat16()
    z, x, Bm, Cm, dt, _ = torch.split(buf, [H * P, H * P, G * N, G * N, H, 3], dim=-1)
    x4, z4 = x.unflatten(-1, (H, P)), z.unflatten(-1, (H, P))
    B4, C4 = Bm.unflatten(-1, (G, N)), Cm.unflatten(-1, (G, N))
    dt = (dt.float().abs() * 0.05 + 0.01).bfloat16()
    A = -torch.rand(H) * 0.4 - 0.1
    with mamba2c.use_backend("ref"):
        assert _native._half_code(_native.BACKEND_REF, x4, dt, B4, C4, z4) == _native.DT_BF16
        s = _native._state()
        for t in (x4, z4, B4, C4):
            assert _native._desc(s.buf, 0, "t", t, torch.bfloat16, _native.DT_BF16) is t
        out = mamba2c.mamba_chunk_scan_combined(x4, dt, A, B4, C4, 4, z=z4)
    ref = R.ssd_sequential(x4.double(), dt.double(), A.double(), B4.double(), C4.double(), None,
                           z4.double(), None, None, None, False, (0.0, INF))[0]
    assert out.dtype == torch.bfloat16 and nerr(out, ref) <= TOL_LOWP_OUT


def test_forced_native_on_a_backend_without_half_raises(native_mode):
    """native_half = True skips the probe: a backend that refuses half says so clearly."""
    _native._half_ok.clear()
    if _native._probe_half(_native.BACKEND_CPU, _native.DT_BF16):
        pytest.skip("the CPU backend accepts bf16 storage")
    _native.native_half = True
    inp = make_ssd_inputs(1, 4, 1, 2, 2, 1, dtype=torch.bfloat16, D=None, z=False,
                          dt_bias=False, init=False, seed=2)
    with mamba2c.use_backend("cpu"), pytest.raises(NotImplementedError, match="bf16"):
        mamba2c.mamba_chunk_scan_combined(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 2)
