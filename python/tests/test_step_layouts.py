"""The decode steps on the standard cache layouts, zero-copy in C (issue 18 item 2):

conv1d_step with conv_state [S,D,K] for K = W-1, W (transformers' / mamba_ssm's [B,D,d_conv]),
W+3, contiguous and channel-last (causal-conv1d's transposed caches), with cache_seqlens
(circular buffer, wrapping around); ssd_step with bf16/f16 states. Each against the torch
implementation (the same semantics), checked to run in C (backend_of and a call counter),
the cache updated in place (never copied). The fallback policy: a CPU call the C ops cannot
serve warns once per reason, and raises under mamba2c.set_strict(True) / MAMBA2C_STRICT=1.
HF transformers' Mamba-2 decode takes the C steps."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import mamba2c
from mamba2c import _dispatch, _native, _torch_impl, ops
from mamba2c.reference import normalized_error as nerr

TOL = 1e-5


@pytest.fixture
def counted(monkeypatch):
    """Counts of the C step bindings' calls."""
    n = {"conv1d_step": 0, "ssd_step": 0}
    conv, ssd = _native.conv1d_step, _dispatch._steps.ssd_step

    def c(*a, **k):
        n["conv1d_step"] += 1
        return conv(*a, **k)

    def s(*a, **k):
        n["ssd_step"] += 1
        return ssd(*a, **k)

    monkeypatch.setattr(_native, "conv1d_step", c)
    monkeypatch.setattr(_dispatch._steps, "ssd_step", s)
    return n


@pytest.fixture
def strict():
    saved = _dispatch._strict
    mamba2c.set_strict(True)
    yield
    _dispatch._strict = saved


def _cache(B, D, K, layout, g):
    if layout == "contig":
        return torch.randn(B, D, K, generator=g)
    if layout == "transposed":  # causal-conv1d's channel-last: [B,K,D] memory seen as [B,D,K]
        return torch.randn(B, K, D, generator=g).transpose(1, 2)
    return torch.randn(B + 1, D, 2 * K + 1, generator=g)[1:, :, 1::2]  # gaps everywhere


@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("extra", [0, 1, 3])  # K = W-1 + extra
@pytest.mark.parametrize("layout", ["contig", "transposed", "padded"])
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("circular", [False, True])
def test_conv1d_step_layouts_in_c(W, extra, layout, T, circular, counted, strict):
    g = torch.Generator().manual_seed(W * 100 + extra * 10 + T)
    B, D = 3, 13
    K = W - 1 + extra
    x = torch.randn(B, D, T, generator=g) if T > 1 else torch.randn(B, D, generator=g)
    w, b = torch.randn(D, W, generator=g), torch.randn(D, generator=g)
    cache = _cache(B, D, K, layout, g)
    ref_cache = cache.clone()
    seql = torch.tensor([0, K + 2, 5 * K + 1], dtype=torch.int32) if circular else None
    assert ops.backend_of("conv1d_step", x, cache, w, b, seql) == "C"
    ptr, strides = cache.data_ptr(), cache.stride()
    for step in range(3):  # the caller advances cache_seqlens
        out = ops.conv1d_step(x, cache, w, b, True, None, seql)
        ref = _torch_impl.conv1d_step(x, ref_cache, w, b, True, None, seql)
        assert nerr(out, ref) <= TOL and nerr(cache, ref_cache) <= TOL, step
        if circular:
            seql = seql + T
    assert counted["conv1d_step"] == 3
    assert cache.data_ptr() == ptr and cache.stride() == strides  # updated in place


def test_conv1d_step_slots_and_padding(counted, strict):
    g = torch.Generator().manual_seed(7)
    B, D, W, K, S = 3, 9, 4, 4, 5
    x, w = torch.randn(B, D, generator=g), torch.randn(D, W, generator=g)
    cache = torch.randn(S, D, K, generator=g)
    ref_cache = cache.clone()
    idx = torch.tensor([4, -1, 1])
    seql = torch.tensor([3, 0, 9])
    out = ops.conv1d_step(x, cache, w, None, False, idx, seql)
    ref = _torch_impl.conv1d_step(x, ref_cache, w, None, False, idx, seql)
    assert nerr(out, ref) <= TOL and torch.equal(out[1], torch.zeros(D))
    assert nerr(cache, ref_cache) <= TOL
    assert counted["conv1d_step"] == 1


@pytest.mark.parametrize("sdt", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("T", [1, 3])
def test_ssd_step_half_state_in_c(sdt, T, counted, strict):
    g = torch.Generator().manual_seed(11)
    B, H, P, N, G = 2, 4, 8, 16, 2
    state = (torch.randn(B, H, P, N, generator=g) / 5).to(sdt)
    ref_state = state.clone()
    xs = (B, T, H, P) if T > 1 else (B, H, P)
    x = torch.randn(*xs, generator=g)
    dt = torch.rand(*xs[:-1], generator=g) * 0.1 + 0.01
    A = -(torch.rand(H, generator=g) * 0.4 + 0.1)
    Bm = torch.randn(*xs[:-2], G, N, generator=g) / 5
    Cm = torch.randn(*xs[:-2], G, N, generator=g) / 5
    D, dtb = torch.randn(H, generator=g), 0.1 * torch.randn(H, generator=g)
    assert ops.backend_of("ssd_step", state, x, dt, A, Bm, Cm, D, None, dtb) == "C"
    ptr = state.data_ptr()
    out, alls = ops.ssd_step(state, x, dt, A, Bm, Cm, D=D, dt_bias=dtb, dt_softplus=True,
                             return_all_states=True)
    ro, ra = _torch_impl.ssd_step(ref_state, x, dt, A, Bm, Cm, D=D, dt_bias=dtb,
                                  dt_softplus=True, return_all_states=True)
    assert counted["ssd_step"] == 1 and state.data_ptr() == ptr and state.dtype == sdt
    assert alls.dtype == sdt
    assert nerr(out, ro) <= 1e-2 and nerr(state.float(), ref_state.float()) <= 1e-2
    assert nerr(alls.float(), ra.float()) <= 1e-2
    # the state is stored rounded once per token: one call of T tokens equals T calls
    if T > 1:
        s2 = (torch.randn(B, H, P, N, generator=g) / 5).to(sdt)
        s1 = s2.clone()
        ops.ssd_step(s2, x, dt, A, Bm, Cm, D=D, dt_bias=dtb, dt_softplus=True)
        for t in range(T):
            ops.ssd_step(s1, x[:, t:t + 1], dt[:, t:t + 1], A, Bm[:, t:t + 1], Cm[:, t:t + 1],
                         D=D, dt_bias=dtb, dt_softplus=True)
        assert torch.equal(s1, s2)


def test_hf_style_ssd_views_with_bf16_state(counted, strict):
    """transformers' recurrent step: stride-0 expanded A / dt / D / dt_bias, a bf16 state."""
    g = torch.Generator().manual_seed(5)
    B, H, P, N = 2, 4, 8, 16
    state = torch.randn(B, H, P, N, generator=g).bfloat16()
    ref_state = state.clone()
    x = torch.randn(B, H, P, generator=g)
    dt = (torch.rand(B, H, 1, generator=g) * 0.1).expand(-1, -1, P)
    A = (-torch.rand(H, generator=g))[:, None, None].expand(-1, P, N)
    D = torch.randn(H, generator=g)[:, None].expand(-1, P)
    dtb = torch.randn(H, generator=g)[:, None].expand(-1, P) * 0.1
    Bm, Cm = torch.randn(B, 1, N, generator=g), torch.randn(B, 1, N, generator=g)
    out = mamba2c.selective_state_update(state, x, dt, A, Bm, Cm, D=D, dt_bias=dtb,
                                         dt_softplus=True)
    ref = _torch_impl.ssd_step(ref_state, x, dt, A, Bm, Cm, D=D, dt_bias=dtb, dt_softplus=True)
    assert counted["ssd_step"] == 1
    assert nerr(out, ref) <= 1e-2 and nerr(state.float(), ref_state.float()) <= 1e-2


def test_backend_of_forms():
    assert ops.backend_of("conv1d_step") == "C"
    assert ops.backend_of("conv1d_step", "cpu") == "C"
    assert ops.backend_of("conv1d_step", device="meta") == "torch"
    x, w = torch.randn(2, 5), torch.randn(5, 4)
    assert ops.backend_of("conv1d_step", x, torch.randn(2, 5, 3), w) == "C"
    assert ops.backend_of("conv1d_step", x, torch.randn(2, 5, 3).bfloat16(), w) == "torch"
    assert ops.backend_of("conv1d_step", x, torch.randn(2, 5, 3), w.requires_grad_()) == "torch"
    st = torch.randn(2, 3, 4, 8)
    args = (torch.randn(2, 3, 4), torch.rand(2, 3), -torch.rand(3), torch.randn(2, 1, 8),
            torch.randn(2, 1, 8))
    assert ops.backend_of("ssd_step", st, *args) == "C"
    assert ops.backend_of("ssd_step", st.to(torch.int32), *args) == "torch"
    perp = -torch.rand(3, 4, 8)  # A varying along P, N: mamba-1 style
    assert ops.backend_of("ssd_step", st, args[0], args[1], perp, *args[3:]) == "torch"


def test_fallback_warns_once_then_strict_raises():
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(2, 5, generator=g), torch.randn(5, 4, generator=g)
    cache = torch.randn(2, 5, 3, generator=g).half()  # not a dtype the C step updates
    saved = _dispatch._strict
    _dispatch._warned.clear()
    try:
        mamba2c.set_strict(False)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            ops.conv1d_step(x, cache, w)
            ops.conv1d_step(x, cache, w)
        fw = [r for r in rec if issubclass(r.category, mamba2c.FallbackWarning)]
        assert len(fw) == 1 and "conv1d_step" in str(fw[0].message)
        mamba2c.set_strict(True)
        with pytest.raises(mamba2c.FallbackError, match="conv1d_step"):
            ops.conv1d_step(x, cache, w)
        # gradients: the C step has no backward
        w.requires_grad_()
        with pytest.raises(mamba2c.FallbackError, match="gradient"):
            ops.conv1d_step(x, torch.randn(2, 5, 3), w)
        # a call torch rejects too is not reported as a fallback
        with pytest.raises(ValueError):
            ops.conv1d_step(x, torch.randn(2, 5, 2), w.detach())
    finally:
        _dispatch._strict = saved


def test_strict_from_environment():
    code = ("import torch, mamba2c\n"
            "from mamba2c import ops\n"
            "try:\n"
            "    ops.conv1d_step(torch.randn(2, 5), torch.randn(2, 5, 3).half(), torch.randn(5, 4))\n"
            "except mamba2c.FallbackError:\n"
            "    print('raised')\n")
    env = dict(os.environ, MAMBA2C_STRICT="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.stdout.strip() == "raised", r.stderr


def test_hf_decode_takes_the_c_steps(counted, strict):
    """transformers' Mamba-2 generate: every decode step's conv (cache [B,conv_dim,d_conv])
    and SSM update run in C (strict: a fallback would raise), with HF's own results."""
    transformers = pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import Mamba2Config, Mamba2ForCausalLM
    from mamba2c.hf import use_mamba2c_in_transformers
    transformers.logging.set_verbosity_error()
    cfg = Mamba2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=16,
                       expand=2, head_dim=8, num_heads=8, n_groups=2, conv_kernel=4,
                       chunk_size=8, use_cache=True, tie_word_embeddings=False, pad_token_id=0,
                       bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = Mamba2ForCausalLM(cfg).eval()
    ids = torch.randint(3, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=4, do_sample=False, output_logits=True,
              return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        mamba2c.set_strict(False)
        ra = model.generate(ids, **kw)
        mamba2c.set_strict(True)
        with use_mamba2c_in_transformers():
            rb = model.generate(ids, **kw)
    assert torch.equal(ra.sequences, rb.sequences)
    for a, b in zip(ra.logits, rb.logits):
        assert nerr(b, a) <= TOL
    steps = 3 * cfg.num_hidden_layers  # 4 new tokens: 1 prefill + 3 decode steps per layer
    assert counted["conv1d_step"] == steps and counted["ssd_step"] == steps
