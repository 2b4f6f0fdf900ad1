"""mamba_ssm / causal-conv1d names of issue 18 point 4, each against a float64 formula
written here from the math: state_dtype=, Mamba2(d_ssm=, use_mem_eff_path=, process_group=,
sequence_parallel=), forward(seqlen=), seq_idx with batch > 1, layer_norm_fn / rms_norm_fn /
RMSNorm / LayerNorm (residual, prenorm, residual_in_fp32), causal_conv1d_varlen_states,
InferenceParams.reset()."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import mamba2c
from mamba2c import reference as R
from mamba2c.nn import InferenceParams, Mamba2
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32, TOL_LOWP_OUT, make_ssd_inputs


# ---- state_dtype ----------------------------------------------------------------------------

def _scan_args(inp):
    return (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_state_dtype_of_final_and_varlen_states(dtype):
    inp = make_ssd_inputs(1, 29, 4, 8, 16, 2, dtype=dtype, init=False, seed=3)
    cu = torch.tensor([0, 11, 29])
    kw = dict(D=inp["D"], dt_bias=inp["dt_bias"], dt_softplus=True, cu_seqlens=cu,
              return_final_states=True, return_varlen_states=True)
    out, fin, var = mamba2c.mamba_chunk_scan_combined(*_scan_args(inp), 8, **kw)
    # mamba_ssm: final_states float32 (_state_passing_fwd), varlen_states in C's dtype
    assert fin.dtype == torch.float32 and var.dtype == inp["C"].dtype
    # float64 formula: the recurrence per sequence
    a64 = [t.double() for t in _scan_args(inp)]
    _, rfin = R.ssd_sequential(*a64, D=inp["D"].double(), dt_bias=inp["dt_bias"].double(),
                               cu_seqlens=cu, dt_softplus=True)
    tol = TOL_F32 if dtype == torch.float32 else TOL_LOWP_OUT
    assert nerr(fin, rfin[-1:]) <= tol and nerr(var, rfin) <= tol
    for sd in (torch.bfloat16, torch.float16, torch.float64):
        o2, f2, v2 = mamba2c.mamba_chunk_scan_combined(*_scan_args(inp), 8, state_dtype=sd, **kw)
        assert f2.dtype == sd and v2.dtype == sd
        assert torch.equal(o2, out)  # the scan itself does not change
        assert torch.equal(f2, fin.to(sd))
        assert nerr(v2, rfin) <= (TOL_LOWP_OUT if sd != torch.float64 else tol)
    with pytest.raises(TypeError):
        mamba2c.mamba_chunk_scan_combined(*_scan_args(inp), 8, state_dtype=torch.int32, **kw)


def test_state_dtype_position_states_and_split_conv_scan():
    inp = make_ssd_inputs(2, 17, 2, 4, 8, 1, init=False, seed=4)
    out, fin, pos = mamba2c.mamba_chunk_scan_combined(
        *_scan_args(inp), 8, dt_softplus=True, return_final_states=True,
        return_states_at=[3, 20], state_dtype=torch.bfloat16)
    assert fin.dtype == torch.bfloat16 and pos.dtype == torch.bfloat16
    # the fused mixer path: final states in state_dtype too
    torch.manual_seed(0)
    H, P, N, W = 2, 4, 8, 4
    dim = H * P
    zxbcdt = torch.randn(2, 13, 2 * dim + 2 * N + H)
    wconv, bconv = torch.randn(dim + 2 * N, W) / 2, torch.randn(dim + 2 * N) / 2
    dt_bias, A, D = torch.randn(H) / 5, -torch.rand(H) - 0.1, torch.randn(H)
    y, f = mamba2c.mamba_split_conv1d_scan_combined(zxbcdt, wconv, bconv, dt_bias, A, D, 8,
                                                    headdim=P, return_final_states=True,
                                                    state_dtype=torch.float64)
    y32, f32 = mamba2c.mamba_split_conv1d_scan_combined(zxbcdt, wconv, bconv, dt_bias, A, D, 8,
                                                        headdim=P, return_final_states=True)
    assert f.dtype == torch.float64 and f32.dtype == torch.float32
    assert torch.equal(f, f32.double()) and torch.equal(y, y32)


# ---- Mamba2: d_ssm, seqlen, seq_idx, process_group -------------------------------------------

def mamba2_formula(m: Mamba2, u: torch.Tensor) -> torch.Tensor:
    """mamba_ssm's Mamba2 forward in float64 reference ops, d_ssm < d_inner included:
    in_proj -> [z0, x0, z, xBC, dt]; conv + SiLU; SSD; gated RMSNorm over d_ssm;
    cat(silu(z0) * x0, y); out_proj."""
    zxbcdt = F.linear(u, m.in_proj.weight, m.in_proj.bias)
    d_mlp = (zxbcdt.shape[-1] - 2 * m.d_ssm - 2 * m.ngroups * m.d_state - m.nheads) // 2
    z0, x0, z, xBC, dt = torch.split(zxbcdt, [d_mlp, d_mlp, m.d_ssm,
                                              m.d_ssm + 2 * m.ngroups * m.d_state, m.nheads], -1)
    xBC, _ = R.conv1d(xBC, m.conv1d.weight[:, 0], m.conv1d.bias, True)
    x, Bm, Cm = torch.split(xBC, [m.d_ssm, m.ngroups * m.d_state, m.ngroups * m.d_state], -1)
    y, _ = R.ssd_sequential(x.unflatten(-1, (m.nheads, m.headdim)), dt, -torch.exp(m.A_log),
                            Bm.unflatten(-1, (m.ngroups, m.d_state)),
                            Cm.unflatten(-1, (m.ngroups, m.d_state)), m.D, None, m.dt_bias,
                            None, None, True)
    y = R.rmsnorm_gated(y.flatten(-2), m.norm.weight, None, z, m.norm.eps,
                        m.d_ssm // m.ngroups, False)
    if d_mlp:
        y = torch.cat([F.silu(z0) * x0, y], -1)
    return F.linear(y, m.out_proj.weight, m.out_proj.bias)


def test_mamba2_d_ssm_forward_step_and_names():
    torch.manual_seed(5)
    m = Mamba2(d_model=16, d_state=8, headdim=8, d_ssm=16, ngroups=2, chunk_size=8,
               layer_idx=0).eval()
    assert m.d_inner == 32 and m.d_ssm == 16 and m.nheads == 2 and m.conv_dim == 16 + 32
    assert m.in_proj.weight.shape == (2 * 32 + 2 * 2 * 8 + 2, 16)
    assert m.out_proj.weight.shape == (16, 32) and m.norm.weight.shape == (16,)
    with torch.no_grad():
        m.D.normal_()
        m.norm.weight.normal_()
    u = torch.randn(2, 13, 16)
    with torch.no_grad():
        y = m(u)
        assert nerr(y, mamba2_formula(copy.deepcopy(m).double(), u.double())) <= 1e-5
        conv_state, ssm_state = m.allocate_inference_cache(2)
        steps = torch.cat([m.step(u[:, t:t + 1], conv_state, ssm_state)[0] for t in range(13)], 1)
        assert nerr(steps, y) <= 1e-5
        # seqlen=: the flattened [B*L, d_model] form
        yf = m(u.reshape(26, 16), seqlen=13)
        assert yf.shape == (26, 16) and torch.equal(yf, y.reshape(26, 16))
    m2 = Mamba2(d_model=16, d_state=8, headdim=8, use_mem_eff_path=False, sequence_parallel=False)
    assert not m2.use_mem_eff_path and not m2.sequence_parallel


def test_mamba2_process_group_none():
    # process_group / sequence_parallel are mamba_ssm's tensor-parallel arguments; a real
    # group is tested in test_distributed_layers.py (the heads split over gloo ranks)
    torch.manual_seed(6)
    m1 = Mamba2(d_model=16, d_state=8, headdim=8, process_group=None, sequence_parallel=False)
    m0 = Mamba2(d_model=16, d_state=8, headdim=8)
    assert m1.world_size == 1 and set(m1.state_dict()) == set(m0.state_dict())


def test_mamba2_seq_idx_batch_rows_and_cache():
    torch.manual_seed(7)
    m = Mamba2(d_model=16, d_state=8, headdim=8, chunk_size=4, ngroups=2, layer_idx=3).eval()
    L = 12
    cuts = [[0, 5, 12], [0, 2, 9, 12]]  # row 0: two sequences, row 1: three
    seq_idx = torch.zeros(2, L, dtype=torch.int32)
    for b, c in enumerate(cuts):
        for i in range(len(c) - 1):
            seq_idx[b, c[i]:c[i + 1]] = i
    u = torch.randn(2, L, 16)
    with torch.no_grad():
        sep = torch.stack([torch.cat([m(u[b:b + 1, c[i]:c[i + 1]])[0] for i in range(len(c) - 1)])
                           for b, c in enumerate(cuts)])
        ip = InferenceParams(max_seqlen=32, max_batch_size=2)
        y = m(u, seq_idx=seq_idx, inference_params=ip)
        assert nerr(y, sep) <= 1e-5
        # the cache of each row: its last sequence's states; decoding continues it
        ip.seqlen_offset = L
        nxt = torch.randn(2, 1, 16)
        yd = m(nxt, inference_params=ip)
        for b, c in enumerate(cuts):
            tail = torch.cat([u[b:b + 1, c[-2]:], nxt[b:b + 1]], 1)
            assert nerr(yd[b], m(tail)[0, -1:]) <= 1e-5, b


def test_inference_params_reset():
    ip = InferenceParams(max_seqlen=8, max_batch_size=2, lengths_per_sample=torch.ones(2,
                                                                                      dtype=torch.int32))
    ip.seqlen_offset = 5
    ip.key_value_memory_dict[0] = "kept"
    ip.reset(16, 4)
    assert (ip.max_seqlen, ip.max_batch_size, ip.seqlen_offset, ip.batch_size_offset) == (16, 4, 0, 0)
    assert ip.lengths_per_sample.tolist() == [0, 0] and ip.key_value_memory_dict[0] == "kept"


# ---- layer_norm_fn / RMSNorm / LayerNorm ------------------------------------------------------

def _norm_formula(x, w, b, residual, eps, rms):
    """float64: s = x + residual; rms: s / sqrt(mean(s^2) + eps); else (s - mean) /
    sqrt(mean((s - mean)^2) + eps); times w plus b."""
    s = x.double() + (0 if residual is None else residual.double())
    if rms:
        n = s / torch.sqrt((s * s).mean(-1, keepdim=True) + eps)
    else:
        mu = s.mean(-1, keepdim=True)
        n = (s - mu) / torch.sqrt(((s - mu) ** 2).mean(-1, keepdim=True) + eps)
    n = n * w.double()
    return (n + b.double() if b is not None else n), s


@pytest.mark.parametrize("rms", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_fn_residual_prenorm(rms, dtype):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 5, 40, generator=g).to(dtype)
    r = torch.randn(3, 5, 40, generator=g).to(dtype)
    w = (1 + torch.randn(40, generator=g) / 3)
    b = None if rms else torch.randn(40, generator=g) / 3
    tol = TOL_F32 if dtype == torch.float32 else TOL_LOWP_OUT
    fn = mamba2c.rms_norm_fn if rms else mamba2c.layer_norm_fn
    extra = {} if rms else {"is_rms_norm": False}
    # plain
    y = fn(x, w, b, eps=1e-5, **extra)
    ref, _ = _norm_formula(x, w, b, None, 1e-5, rms)
    assert y.dtype == dtype and nerr(y, ref) <= tol
    # residual + prenorm: residual_out = x + residual in the residual's dtype
    y, res = fn(x, w, b, residual=r, eps=1e-5, prenorm=True, **extra)
    ref, s = _norm_formula(x, w, b, r, 1e-5, rms)
    assert y.dtype == dtype and res.dtype == dtype
    assert nerr(y, ref) <= tol and nerr(res, s) <= (1e-7 if dtype == torch.float32 else 1e-2)
    # residual_in_fp32 without a residual: residual_out is x in float32
    y, res = fn(x, w, b, eps=1e-5, prenorm=True, residual_in_fp32=True, **extra)
    assert res.dtype == torch.float32 and torch.equal(res, x.float())
    # a float32 residual with bf16 x: the sum is kept in float32
    y, res = fn(x, w, b, residual=r.float(), eps=1e-5, prenorm=True, **extra)
    assert res.dtype == torch.float32 and nerr(res, s) <= 1e-7
    # without a residual and in x's dtype, residual_out is x itself (mamba_ssm)
    _, res = fn(x, w, b, eps=1e-5, prenorm=True, **extra)
    assert res is x
    # out_dtype
    assert fn(x, w, b, eps=1e-5, out_dtype=torch.float64, **extra).dtype == torch.float64


def test_norm_modules_and_gradients():
    torch.manual_seed(9)
    n = mamba2c.RMSNorm(24)
    assert set(n.state_dict()) == {"weight"} and n.eps == 1e-5
    ln = mamba2c.LayerNorm(24, eps=1e-5)
    assert set(ln.state_dict()) == {"weight", "bias"}
    with torch.no_grad():
        n.weight.normal_()
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(4, 24, requires_grad=True)
    r = torch.randn(4, 24, requires_grad=True)
    y, res = n(x, residual=r, prenorm=True, residual_in_fp32=True)
    x64, r64 = x.detach().double().requires_grad_(), r.detach().double().requires_grad_()
    ref, s = _norm_formula(x64, n.weight.detach(), None, r64, 1e-5, True)
    assert nerr(y, ref) <= TOL_F32
    gy = torch.randn(4, 24, dtype=torch.float64)
    (y * gy.float()).sum().backward()
    (ref * gy).sum().backward()
    assert nerr(x.grad, x64.grad) <= 1e-5 and nerr(r.grad, r64.grad) <= 1e-5
    assert torch.allclose(ln(x), F.layer_norm(x, (24,), ln.weight, ln.bias, 1e-5), atol=1e-6)
    y2 = ln(x, residual=r)
    ref2, _ = _norm_formula(x, ln.weight.detach(), ln.bias.detach(), r, 1e-5, False)
    assert nerr(y2, ref2) <= TOL_F32
    with pytest.raises(NotImplementedError):
        mamba2c.layer_norm_fn(x, n.weight, None, x1=x)


# ---- causal_conv1d_varlen_states ---------------------------------------------------------------

def test_causal_conv1d_varlen_states():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(23, 6, generator=g)
    cu = torch.tensor([0, 2, 2, 9, 23], dtype=torch.int32)
    for K in (0, 1, 3, 5):
        st = mamba2c.causal_conv1d_varlen_states(x, cu, K)
        assert st.shape == (4, 6, K)
        if K:
            assert st.stride(1) == 1  # channel-last memory, as causal-conv1d allocates it
        for b in range(4):
            s0, s1 = int(cu[b]), int(cu[b + 1])
            exp = torch.zeros(6, K)
            for j in range(K):          # column j holds token s1 - K + j, if it is in [s0, s1)
                t = s1 - K + j
                if s0 <= t < s1:
                    exp[:, j] = x[t]
            assert torch.equal(st[b], exp), (K, b)
    # the state a conv over the sequence leaves equals the varlen state (width W: W-1 inputs)
    w = torch.randn(6, 4, generator=g)
    _, fin = mamba2c.ops.conv1d(x[None], w, None, cu_seqlens=cu.long(), return_final_states=True)
    assert torch.equal(fin, mamba2c.causal_conv1d_varlen_states(x, cu, 3))
