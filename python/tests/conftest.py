"""Shared fixtures and problem generators for the mamba2c Python tests.

Inputs are drawn as SPEC §8 (and mamba_ssm's tests) draw them: x ~ N(0,1),
dt ~ U(0.01, 0.11) before bias, A ~ -U(0.1, 0.5), B, C ~ N(0,1)/5, D, z ~ N(0,1),
dt_bias ~ 0.1·N(0,1), initial_states ~ N(0,1)/5 — signed, not positive-only.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run without installing

from mamba2c import _native  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

# SPEC §8 tolerances (normalised error ‖out − ref‖/‖ref‖ against a float64 evaluation)
TOL_F32 = 1e-5
TOL_LOWP_OUT = 1e-2
TOL_LOWP_GRAD = 2e-2


def pytest_report_header(config):
    path = _native.library_path()
    if path is None:
        return "mamba2c: C library NOT FOUND (" + (_native._load_error or "") + ")"
    return (f"mamba2c: {path} (version {_native.version()}, CPU kernels "
            f"{_native.last_call_isa('cpu')}, torch {torch.__version__})")


@pytest.fixture(autouse=True, scope="session")
def _require_library():
    if not _native.available():
        pytest.fail("libmamba2c could not be loaded:\n" + (_native._load_error or ""), pytrace=False)


@pytest.fixture
def native_mode():
    """Restore _native.native_half and the probe cache after a test that changes them."""
    saved, cache = _native.native_half, dict(_native._half_ok)
    yield
    _native.native_half = saved
    _native._half_ok.clear()
    _native._half_ok.update(cache)


def check_compiled_against_eager(compiled, f, args, after_compiled=None):
    """Loss and gradients of args through `compiled` (torch.compile of f), then through f
    eagerly: equal to rounding. after_compiled() runs between the two (checks of the compiled
    run). Returns the eager loss."""
    loss_c = compiled(*args)
    loss_c.backward()
    if after_compiled is not None:
        after_compiled()
    gc = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    loss_e = f(*args)
    loss_e.backward()
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-6, atol=1e-7)
    for a, b in zip(gc, [a.grad for a in args]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    return loss_e


def make_ssd_inputs(B, L, H, P, N, G, *, dtype=torch.float32, D="head", z=True, dt_bias=True,
                    init=True, nseq=None, seed=0, requires_grad=False):
    """A dict of SSD inputs (float64 draws rounded to `dtype`, so a float64 reference on the
    same values measures only the op's own error)."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64

    def rn(*s):
        return torch.randn(*s, generator=g, dtype=f64)

    def ru(*s):
        return torch.rand(*s, generator=g, dtype=f64)

    d = dict(
        x=rn(B, L, H, P),
        dt=0.01 + 0.1 * ru(B, L, H),
        A=-(0.1 + 0.4 * ru(H)),
        B=rn(B, L, G, N) / 5,
        C=rn(B, L, G, N) / 5,
    )
    if D == "head":
        d["D"] = rn(H)
    elif D == "channel":
        d["D"] = rn(H, P)
    if z:
        d["z"] = rn(B, L, H, P)
    if dt_bias:
        d["dt_bias"] = 0.1 * rn(H)
    if init:
        d["initial_states"] = rn(nseq if nseq is not None else B, H, P, N) / 5
    act = ("x", "dt", "B", "C", "z")
    out = {}
    for k, v in d.items():
        # parameters and states stay float32 for low-precision activations (SPEC §7)
        t = v.to(dtype if (k in act or dtype == f64) else torch.float32)
        out[k] = t.requires_grad_(requires_grad)
    return out


def as64(d):
    """Detached float64 leaf copies (requires_grad) of a dict of inputs."""
    return {k: v.detach().double().requires_grad_(True) for k, v in d.items()}


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(1234)
