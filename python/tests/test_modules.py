"""mamba2c.nn.Mamba2 and mamba2c.models.VisionMamba2 against float64 compositions of the
pure-torch reference ops, decoding against scanning, and the tiny Vision-Mamba2 config."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from mamba2c import reference as R
from mamba2c.models import VisionMamba2, VisionMamba2Config
from mamba2c.models.vision_mamba2 import VisionMamba2Mixer, cross_merge, cross_scan
from mamba2c.nn import InferenceParams, Mamba2
from mamba2c.reference import normalized_error as nerr

TOL_MODULE = 1e-5


def mamba2_reference(m: Mamba2, u: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """The Mamba2 layer written with reference ops only (run it on a float64 copy)."""
    zxbcdt = F.linear(u, m.in_proj.weight, m.in_proj.bias)
    z, xBC, dt = torch.split(zxbcdt, [m.d_inner, m.conv_dim, m.nheads], dim=-1)
    xBC, _ = R.conv1d(xBC, m.conv1d.weight[:, 0], m.conv1d.bias, True, None, cu_seqlens)
    x, Bm, Cm = torch.split(xBC, [m.d_inner, m.ngroups * m.d_state, m.ngroups * m.d_state], -1)
    D = m.D.view(m.nheads, m.headdim) if m.D_has_hdim else m.D
    y, _ = R.ssd_chunked(x.unflatten(-1, (m.nheads, m.headdim)), dt, -torch.exp(m.A_log),
                         Bm.unflatten(-1, (m.ngroups, m.d_state)),
                         Cm.unflatten(-1, (m.ngroups, m.d_state)), 16, D,
                         None if m.rmsnorm else z.unflatten(-1, (m.nheads, m.headdim)),
                         m.dt_bias, None, cu_seqlens, True, m.dt_limit)
    y = y.flatten(-2)
    if m.rmsnorm:
        y = R.rmsnorm_gated(y, m.norm.weight, None, z, m.norm.eps, m.d_inner // m.ngroups, False)
    return F.linear(y, m.out_proj.weight, m.out_proj.bias)


CFGS = {
    "default": dict(),
    "groups_Dchan_dtlimit": dict(ngroups=2, D_has_hdim=True, dt_limit=(0.0, 0.05)),
    "no_rmsnorm_zgate": dict(rmsnorm=False, ngroups=2),
}


@pytest.mark.parametrize("name", list(CFGS))
def test_mamba2_forward_backward_vs_reference(name):
    torch.manual_seed(0)
    m = Mamba2(d_model=16, d_state=8, d_conv=4, expand=2, headdim=8, chunk_size=8, **CFGS[name])
    with torch.no_grad():  # non-trivial D, norm weight and conv bias
        m.D.normal_()
        if m.rmsnorm:
            m.norm.weight.normal_()
    m64 = copy.deepcopy(m).double()
    u = torch.randn(2, 21, 16)
    u64 = u.double().requires_grad_(True)
    u.requires_grad_(True)
    y = m(u)
    y64 = mamba2_reference(m64, u64)
    assert nerr(y, y64) <= TOL_MODULE
    gy = torch.randn_like(y64)
    (y * gy.float()).sum().backward()
    (y64 * gy).sum().backward()
    errs = {"u": nerr(u.grad, u64.grad)}
    for (n, p), (_, p64) in zip(m.named_parameters(), m64.named_parameters()):
        errs[n] = nerr(p.grad, p64.grad)
    assert max(errs.values()) <= TOL_MODULE, errs


def test_mamba2_varlen_equals_separate_sequences():
    torch.manual_seed(1)
    m = Mamba2(d_model=16, d_state=8, headdim=8, chunk_size=8, ngroups=2)
    lens = [5, 9, 3]
    seqs = [torch.randn(1, n, 16) for n in lens]
    cu = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    packed = m(torch.cat(seqs, 1), cu_seqlens=cu)
    separate = torch.cat([m(s) for s in seqs], 1)
    assert nerr(packed, separate) <= TOL_MODULE
    seq_idx = torch.repeat_interleave(torch.arange(3), torch.tensor(lens))[None]
    assert nerr(m(torch.cat(seqs, 1), seq_idx=seq_idx), separate) <= TOL_MODULE


@pytest.mark.parametrize("rmsnorm", [True, False])
def test_mamba2_prefill_then_step_equals_forward(rmsnorm):
    torch.manual_seed(2)
    m = Mamba2(d_model=16, d_state=8, headdim=8, chunk_size=4, ngroups=2, rmsnorm=rmsnorm,
               layer_idx=0).eval()
    u = torch.randn(2, 11, 16)
    with torch.no_grad():
        full = m(u)
        for L0 in (2, 6):  # prefill shorter and longer than d_conv
            ip = InferenceParams(max_seqlen=16, max_batch_size=2)
            outs = [m(u[:, :L0], inference_params=ip)]
            ip.seqlen_offset = L0
            for t in range(L0, 11):
                outs.append(m(u[:, t:t + 1], inference_params=ip))
                ip.seqlen_offset += 1
            assert nerr(torch.cat(outs, 1), full) <= TOL_MODULE, L0
        # pure decoding from an empty cache
        conv_state, ssm_state = m.allocate_inference_cache(2)
        outs = [m.step(u[:, t:t + 1], conv_state, ssm_state)[0] for t in range(11)]
        assert nerr(torch.cat(outs, 1), full) <= TOL_MODULE


def test_mamba2_state_dict_names_follow_mamba_ssm():
    m = Mamba2(d_model=16, d_state=8, headdim=8)
    names = set(m.state_dict())
    assert {"in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
            "norm.weight", "out_proj.weight"} == names
    assert m.in_proj.weight.shape == (2 * 32 + 2 * 8 + 4, 16)


# ---- Vision-Mamba2 --------------------------------------------------------------------------

def test_cross_scan_merge_roundtrip():
    t = torch.randn(2, 12, 3)
    s = cross_scan(t, 3, 4)
    assert s.shape == (8, 12, 3)
    col = t.view(2, 3, 4, 3).transpose(1, 2).reshape(2, 12, 3)
    assert torch.equal(s[4:6], col) and torch.equal(s[2:4], t.flip(1))
    torch.testing.assert_close(cross_merge(s, 3, 4), t)


def _mixer_reference(mx: VisionMamba2Mixer, u, h, w):
    """Four separate reference scans over the four orders, averaged (float64)."""
    B, L, _ = u.shape
    z, xBC, dt = torch.split(F.linear(u, mx.in_proj.weight), [mx.d_inner, mx.conv_dim, mx.nheads], -1)
    xBC = F.silu(mx.dwconv(xBC.reshape(B, h, w, -1).permute(0, 3, 1, 2))).permute(0, 2, 3, 1)
    xBC = xBC.reshape(B, L, -1)
    order_row = torch.arange(L)
    order_col = torch.arange(L).view(h, w).t().reshape(-1)
    acc = 0
    for order in (order_row, order_row.flip(0), order_col, order_col.flip(0)):
        x, Bm, Cm = torch.split(xBC[:, order], [mx.d_inner, mx.ngroups * mx.d_state,
                                                mx.ngroups * mx.d_state], -1)
        y, _ = R.ssd_sequential(x.unflatten(-1, (mx.nheads, mx.headdim)), dt[:, order],
                                -torch.exp(mx.A_log), Bm.unflatten(-1, (mx.ngroups, mx.d_state)),
                                Cm.unflatten(-1, (mx.ngroups, mx.d_state)), mx.D,
                                z[:, order].unflatten(-1, (mx.nheads, mx.headdim)), mx.dt_bias,
                                None, None, True)
        out = torch.empty_like(y)
        out[:, order] = y
        acc = acc + out
    return F.linear(F.layer_norm((acc / 4).flatten(-2), (mx.d_inner,), mx.out_norm.weight,
                                 mx.out_norm.bias), mx.out_proj.weight)


def test_vision_mixer_vs_reference():
    torch.manual_seed(3)
    mx = VisionMamba2Mixer(16, expand=2, headdim=8, d_state=8, ngroups=2, chunk_size=8)
    mx64 = copy.deepcopy(mx).double()
    u = torch.randn(2, 12, 16, requires_grad=True)
    u64 = u.detach().double().requires_grad_(True)
    y = mx(u, 3, 4)
    y64 = _mixer_reference(mx64, u64, 3, 4)
    assert nerr(y, y64) <= TOL_MODULE
    y.square().sum().backward()
    y64.square().sum().backward()
    assert nerr(u.grad, u64.grad) <= TOL_MODULE
    for p, p64 in zip(mx.parameters(), mx64.parameters()):
        assert nerr(p.grad, p64.grad) <= TOL_MODULE


def test_vision_mamba2_tiny_config():
    cfg = VisionMamba2Config(num_classes=10)
    assert cfg.dims == (96, 192, 384, 768) and cfg.depths == (2, 2, 6, 2)
    assert (cfg.headdim, cfg.d_state, cfg.expand, cfg.chunk_size, cfg.patch_size) == (64, 128, 2, 128, 4)
    torch.manual_seed(4)
    model = VisionMamba2(cfg)
    mixers = [m for m in model.modules() if isinstance(m, VisionMamba2Mixer)]
    assert len(mixers) == 12 and mixers[0].D.shape == (3, 64)  # D per head and channel
    img = torch.randn(1, 3, 32, 32)  # 8x8 tokens -> 4x4 -> 2x2 -> 1x1
    logits = model(img)
    assert logits.shape == (1, 10) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.parameters() if p.requires_grad)


def test_vision_mamba2_small_trains():
    torch.manual_seed(5)
    cfg = VisionMamba2Config(image_size=16, num_classes=3, dims=(16, 32), depths=(1, 1),
                             ngroups=(1, 2), headdim=8, d_state=8, chunk_size=8)
    model = VisionMamba2(cfg)
    imgs = torch.randn(6, 3, 16, 16)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    imgs += labels[:, None, None, None].float()  # separable
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = F.cross_entropy(model(imgs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
