"""bfloat16/float16 decode steps in C (issue 28 item 3): causal_conv1d_update on a half conv
cache and selective_state_update with half activations run mamba2_conv1d_step /
mamba2_ssd_step on the tensors as they are — no FallbackWarning (strict mode turns one into an
error), the cache and state updated in place — and give the float32 step's results on the
same (rounded) inputs, rounded once, bit for bit."""
from __future__ import annotations

import pytest
import torch

import mamba2c
from mamba2c import interface

HALF = [torch.bfloat16, torch.float16]
HALF_IDS = ["bf16", "f16"]


@pytest.fixture
def strict():
    mamba2c.set_strict(True)
    yield
    mamba2c.set_strict(False)


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("K", [3, 4, 6])
@pytest.mark.parametrize("wdtype", ["half", "f32"])
def test_conv_update_half_cache(dtype, K, wdtype, strict):
    """transformers' [B,D,K] cache (K = W and longer), bias, SiLU, D not a multiple of any
    vector width; weight and bias in the half dtype or float32."""
    g = torch.Generator().manual_seed(K)
    B, D, W = 3, 37, 3 if K == 3 else 4
    wd = dtype if wdtype == "half" else torch.float32
    w = torch.randn(D, W, generator=g).to(wd)
    b = torch.randn(D, generator=g).to(wd)
    cache = torch.randn(B, D, K, generator=g).to(dtype)
    cache32 = cache.float()
    for step in range(3):
        x = torch.randn(B, D, generator=g).to(dtype)
        ptr = cache.data_ptr()
        y = interface.causal_conv1d_update(x, cache, w, b, "silu")
        y32 = interface.causal_conv1d_update(x.float(), cache32, w.float(), b.float(), "silu")
        assert y.dtype is dtype and cache.data_ptr() == ptr
        assert torch.equal(y, y32.to(dtype)), step
        assert torch.equal(cache.float(), cache32), step


@pytest.mark.parametrize("dtype", HALF, ids=HALF_IDS)
@pytest.mark.parametrize("sdtype", [torch.float32, torch.bfloat16], ids=["state_f32", "state_bf16"])
def test_state_update_half_activations(dtype, sdtype, strict):
    """mamba_ssm's broadcast forms (dt [B,H,P], A [H,P,N], D / dt_bias [H,P], all stride-0
    views) with z, state float32 or bf16: out in the half dtype, equal to the float32 step's
    rounded once; the state equal to the float32 step's."""
    g = torch.Generator().manual_seed(1)
    B, H, P, G, N = 2, 4, 8, 2, 16
    state = (torch.randn(B, H, P, N, generator=g) / 5).to(sdtype)
    state32 = state.clone()
    A = -(torch.rand(H, generator=g) * 0.4 + 0.1)
    D = torch.randn(H, generator=g)
    dt_bias = 0.1 * torch.randn(H, generator=g)
    for step in range(3):
        x = torch.randn(B, H, P, generator=g).to(dtype)
        dt = (torch.rand(B, H, generator=g) * 0.1 + 0.01).to(dtype)
        Bm = (torch.randn(B, G, N, generator=g) / 5).to(dtype)
        Cm = (torch.randn(B, G, N, generator=g) / 5).to(dtype)
        z = torch.randn(B, H, P, generator=g).to(dtype)
        ptr = state.data_ptr()
        args = dict(D=D[:, None].expand(H, P), dt_bias=dt_bias[:, None].expand(H, P),
                    dt_softplus=True)
        y = interface.selective_state_update(
            state, x, dt[..., None].expand(B, H, P), A[:, None, None].expand(H, P, N), Bm, Cm,
            z=z, **args)
        y32 = interface.selective_state_update(
            state32, x.float(), dt.float()[..., None].expand(B, H, P),
            A[:, None, None].expand(H, P, N), Bm.float(), Cm.float(), z=z.float(), **args)
        assert y.dtype is dtype and state.data_ptr() == ptr
        assert torch.equal(y, y32.to(dtype)), step
        assert torch.equal(state, state32), step
