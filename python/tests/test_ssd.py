"""The SSD op through the C library: accuracy against the float64 torch reference (SPEC §8),
gradients (C backward vs autograd of the reference; gradcheck in float64 on the REF
backend), varlen / seq_idx handling, mamba_ssm return conventions, dtypes and layouts."""
from __future__ import annotations

import math

import pytest
import torch

import mamba2c
from mamba2c import _native, reference as R
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32, TOL_LOWP_GRAD, TOL_LOWP_OUT, as64, make_ssd_inputs

INF = math.inf
KEYS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")

# B, L, H, P, N, G, Q, D, z, dt_bias, init, softplus, dt_limit
CASES = [
    (1, 1, 1, 1, 1, 1, 1, "head", True, True, True, True, (0.0, INF)),
    (2, 37, 4, 8, 16, 2, 16, "channel", True, True, True, True, (0.0, INF)),
    (2, 64, 4, 8, 16, 1, 64, "head", False, True, False, True, (0.0, INF)),
    (1, 50, 6, 4, 8, 3, 7, None, True, False, True, False, (0.0, INF)),
    (2, 20, 2, 4, 4, 2, 8, "head", True, True, True, True, (0.6, 0.75)),
    (1, 130, 2, 16, 32, 1, 32, "channel", True, True, True, True, (0.0, INF)),
]
IDS = ["tiny", "grouped_Dchan", "L_eq_Q_noz", "oddQ_noD_nosoftplus", "dtlimit", "longer"]


def _run(inp, Q, softplus, lim, fn=None):
    fn = fn or mamba2c.mamba_chunk_scan_combined
    return fn(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], Q, D=inp.get("D"),
              z=inp.get("z"), dt_bias=inp.get("dt_bias"),
              initial_states=inp.get("initial_states"), dt_softplus=softplus, dt_limit=lim,
              return_final_states=True)


def _ref(inp, softplus, lim, cu=None):
    return R.ssd_sequential(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp.get("D"),
                            inp.get("z"), inp.get("dt_bias"), inp.get("initial_states"), cu,
                            softplus, lim)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_backward_f32_vs_f64_reference(case):
    B, L, H, P, N, G, Q, D, z, bias, init, sp, lim = case
    inp = make_ssd_inputs(B, L, H, P, N, G, D=D, z=z, dt_bias=bias, init=init,
                          requires_grad=True, seed=L)
    out, final = _run(inp, Q, sp, lim)
    assert out.dtype == torch.float32 and final.dtype == torch.float32
    ref_in = as64(inp)
    rout, rfinal = _ref(ref_in, sp, lim)
    worst = {"out": nerr(out, rout), "final": nerr(final, rfinal)}
    g = torch.Generator().manual_seed(7)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    dfin = torch.randn(final.shape, generator=g, dtype=torch.float64)
    ((out * dout.float()).sum() + (final * dfin.float()).sum()).backward()
    ((rout * dout).sum() + (rfinal * dfin).sum()).backward()
    for k, v in inp.items():
        worst["d" + k] = nerr(v.grad, ref_in[k].grad)
    bad = {k: e for k, e in worst.items() if not e <= TOL_F32}
    assert not bad, f"normalised errors above {TOL_F32}: {bad} (all: {worst})"


def test_chunked_reference_equals_sequential():
    inp = as64(make_ssd_inputs(2, 45, 4, 4, 8, 2, D="channel", seed=3))
    o1, f1 = _ref(inp, True, (0.0, INF))
    for Q in (1, 8, 45, 64):
        o2, f2 = R.ssd_chunked(inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], Q, inp["D"],
                               inp["z"], inp["dt_bias"], inp["initial_states"], None, True)
        assert nerr(o2, o1) < 1e-13 and nerr(f2, f1) < 1e-13


def test_result_independent_of_chunk_size():
    inp = make_ssd_inputs(1, 70, 2, 8, 16, 1, seed=11)
    ref, rfin = _ref(as64(inp), True, (0.0, INF))
    for Q in (1, 16, 64, 70, 256):
        o, f = _run(inp, Q, True, (0.0, INF))
        assert nerr(o, ref) <= TOL_F32 and nerr(f, rfin) <= TOL_F32, Q


def test_empty_sequence_length():
    inp = make_ssd_inputs(2, 0, 2, 4, 8, 1, seed=1)
    out, final = _run(inp, 16, True, (0.0, INF))
    assert out.shape == (2, 0, 2, 4)
    torch.testing.assert_close(final, inp["initial_states"], rtol=0, atol=0)


def test_return_conventions():
    inp = make_ssd_inputs(1, 12, 2, 4, 8, 1, seed=2)
    a = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4)
    out = mamba2c.mamba_chunk_scan_combined(*a)
    assert isinstance(out, torch.Tensor) and out.shape == inp["x"].shape
    res = mamba2c.mamba_chunk_scan_combined(*a, return_final_states=True)
    assert isinstance(res, tuple) and len(res) == 2 and res[1].shape == (1, 2, 4, 8)
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    res = mamba2c.mamba_chunk_scan_combined(*a, cu_seqlens=cu, return_varlen_states=True)
    assert len(res) == 2 and res[1].shape == (2, 2, 4, 8)
    res = mamba2c.mamba_chunk_scan_combined(*a, cu_seqlens=cu, return_final_states=True,
                                            return_varlen_states=True)
    assert len(res) == 3 and res[1].shape == (1, 2, 4, 8) and res[2].shape == (2, 2, 4, 8)
    torch.testing.assert_close(res[1], res[2][-1:], rtol=0, atol=0)
    with pytest.raises(ValueError, match="cu_seqlens must be provided"):
        mamba2c.mamba_chunk_scan_combined(*a, return_varlen_states=True)


# ---- packed sequences -------------------------------------------------------------------

@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
def test_varlen_states_and_grads(cu_dtype):
    cu = torch.tensor([0, 3, 3, 10, 23], dtype=cu_dtype)  # includes an empty sequence
    nseq = 4
    inp = make_ssd_inputs(1, 23, 4, 4, 8, 2, D="channel", nseq=nseq, requires_grad=True, seed=5)
    out, final, varlen = mamba2c.mamba_chunk_scan_combined(
        inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4, D=inp["D"], z=inp["z"],
        dt_bias=inp["dt_bias"], initial_states=inp["initial_states"], cu_seqlens=cu,
        dt_softplus=True, return_final_states=True, return_varlen_states=True)
    ref_in = as64(inp)
    rout, rvar = _ref(ref_in, True, (0.0, INF), cu)
    assert nerr(out, rout) <= TOL_F32 and nerr(varlen, rvar) <= TOL_F32
    # an empty sequence passes its initial state through unchanged
    torch.testing.assert_close(varlen[1], inp["initial_states"][1].detach(), rtol=0, atol=0)
    g = torch.Generator().manual_seed(3)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    dvar = torch.randn(varlen.shape, generator=g, dtype=torch.float64)
    ((out * dout.float()).sum() + (varlen * dvar.float()).sum()).backward()
    ((rout * dout).sum() + (rvar * dvar).sum()).backward()
    for k, v in inp.items():
        assert nerr(v.grad, ref_in[k].grad) <= TOL_F32, k


def test_seq_idx_equals_cu_seqlens_and_mamba_ssm_initial_state_rule():
    L = 17
    seq_idx = torch.tensor([[0] * 5 + [1] * 8 + [2] * 4], dtype=torch.int32)
    cu = torch.tensor([0, 5, 13, 17])
    inp = make_ssd_inputs(1, L, 2, 4, 8, 1, seed=9)
    a = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4)
    kw = dict(D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"], dt_softplus=True,
              initial_states=inp["initial_states"], return_final_states=True)
    o1, f1 = mamba2c.mamba_chunk_scan_combined(*a, seq_idx=seq_idx, **kw)
    o2, f2, v2 = mamba2c.mamba_chunk_scan_combined(*a, cu_seqlens=cu, return_varlen_states=True, **kw)
    o3, f3 = mamba2c.mamba_chunk_scan_combined(*a, seq_idx=seq_idx, cu_seqlens=cu, **kw)
    torch.testing.assert_close(o1, o2, rtol=0, atol=0)
    torch.testing.assert_close(o1, o3, rtol=0, atol=0)
    torch.testing.assert_close(f1, f2, rtol=0, atol=0)
    # the initial state feeds the first sequence only
    init_seq = torch.cat([inp["initial_states"], torch.zeros(2, 2, 4, 8)])
    ro, rf = R.ssd_sequential(*(inp[k].double() for k in ("x", "dt", "A", "B", "C")),
                              inp["D"].double(), inp["z"].double(), inp["dt_bias"].double(),
                              init_seq.double(), cu, True)
    assert nerr(o1, ro) <= TOL_F32 and nerr(v2, rf) <= TOL_F32
    # mamba_ssm: a row whose first seq_idx is not 0 does not see the initial state
    o4 = mamba2c.mamba_chunk_scan_combined(*a, seq_idx=seq_idx + 1, **kw)[0]
    o5 = mamba2c.mamba_chunk_scan_combined(*a, seq_idx=seq_idx + 1,
                                           **{**kw, "initial_states": None})[0]
    torch.testing.assert_close(o4, o5, rtol=0, atol=0)
    with pytest.raises(ValueError, match="different sequence boundaries"):
        mamba2c.mamba_chunk_scan_combined(*a, seq_idx=seq_idx, cu_seqlens=torch.tensor([0, 4, 17]))


def test_seq_idx_batch_rows_flattened():
    """seq_idx with batch > 1: every row is packed after the previous one."""
    B, L = 3, 11
    seq_idx = torch.tensor([[0] * 11, [0] * 4 + [1] * 7, [0] * 2 + [1] * 2 + [2] * 7])
    inp = make_ssd_inputs(B, L, 2, 4, 8, 2, seed=13, requires_grad=True)
    out, final = mamba2c.mamba_chunk_scan_combined(
        inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4, D=inp["D"], z=inp["z"],
        dt_bias=inp["dt_bias"], initial_states=inp["initial_states"], seq_idx=seq_idx,
        dt_softplus=True, return_final_states=True)
    r = as64(inp)
    outs, finals = [], []
    for b in range(B):
        cu_b = mamba2c.seq_idx_to_cu_seqlens(seq_idx[b:b + 1])[0]
        nb = cu_b.shape[0] - 1
        init_b = torch.cat([r["initial_states"][b:b + 1], r["initial_states"].new_zeros(nb - 1, 2, 4, 8)])
        o, f = R.ssd_sequential(r["x"][b:b + 1], r["dt"][b:b + 1], r["A"], r["B"][b:b + 1],
                                r["C"][b:b + 1], r["D"], r["z"][b:b + 1], r["dt_bias"], init_b,
                                cu_b, True)
        outs.append(o)
        finals.append(f[-1:])
    rout, rfin = torch.cat(outs), torch.cat(finals)
    assert nerr(out, rout) <= TOL_F32 and nerr(final, rfin) <= TOL_F32
    (out.sum() + final.sum()).backward()
    (rout.sum() + rfin.sum()).backward()
    for k in KEYS:
        assert nerr(inp[k].grad, r[k].grad) <= TOL_F32, k


def test_seq_idx_errors():
    inp = make_ssd_inputs(1, 6, 1, 2, 2, 1, seed=1)
    a = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4)
    with pytest.raises(ValueError, match="non-decreasing"):
        mamba2c.mamba_chunk_scan_combined(*a, seq_idx=torch.tensor([[0, 0, 1, 1, 0, 0]]))
    inp2 = make_ssd_inputs(2, 6, 1, 2, 2, 1, seed=1)
    with pytest.raises(ValueError, match="batch 1"):
        mamba2c.mamba_chunk_scan_combined(inp2["x"], inp2["dt"], inp2["A"], inp2["B"], inp2["C"],
                                          4, cu_seqlens=torch.tensor([0, 3, 6]))


# ---- gradcheck in float64 through the C reference backend --------------------------------

@pytest.mark.parametrize("variant", ["full", "varlen", "seq_idx_batched", "plain"])
def test_gradcheck_f64_ref_backend(variant):
    if variant == "varlen":
        inp = make_ssd_inputs(1, 7, 2, 2, 3, 2, dtype=torch.float64, D="channel", nseq=3,
                              requires_grad=True, seed=21)
        extra = dict(cu_seqlens=torch.tensor([0, 2, 2, 7]), return_varlen_states=True)
    elif variant == "seq_idx_batched":
        inp = make_ssd_inputs(2, 5, 2, 2, 3, 1, dtype=torch.float64, requires_grad=True, seed=22)
        extra = dict(seq_idx=torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]]))
    elif variant == "plain":
        inp = make_ssd_inputs(2, 6, 2, 2, 3, 1, dtype=torch.float64, D=None, z=False,
                              dt_bias=False, init=False, requires_grad=True, seed=23)
        extra = {}
    else:
        inp = make_ssd_inputs(2, 6, 4, 2, 3, 2, dtype=torch.float64, D="channel",
                              requires_grad=True, seed=24)
        extra = {}
    names = [k for k in KEYS if k in inp]

    def f(*ts):
        d = dict(zip(names, ts))
        return mamba2c.mamba_chunk_scan_combined(
            d["x"], d["dt"], d["A"], d["B"], d["C"], 3, D=d.get("D"), z=d.get("z"),
            dt_bias=d.get("dt_bias"), initial_states=d.get("initial_states"), dt_softplus=True,
            return_final_states=True, **extra)

    with mamba2c.use_backend("ref"):
        assert torch.autograd.gradcheck(f, tuple(inp[k] for k in names), eps=1e-6, atol=1e-7,
                                        rtol=1e-5)


def test_f64_defaults_to_ref_backend_and_matches_reference():
    inp = make_ssd_inputs(2, 9, 2, 4, 4, 1, dtype=torch.float64, seed=4)
    out, fin = _run(inp, 4, True, (0.0, INF))
    rout, rfin = _ref(inp, True, (0.0, INF))
    assert out.dtype == torch.float64 and fin.dtype == torch.float64
    assert nerr(out, rout) < 1e-13 and nerr(fin, rfin) < 1e-13


def test_cpu_backend_close_to_ref_backend_f32():
    inp = make_ssd_inputs(2, 40, 4, 8, 16, 2, D="channel", seed=8)
    o1, f1 = _run(inp, 16, True, (0.0, INF))
    with mamba2c.use_backend("ref"):
        o2, f2 = _run(inp, 16, True, (0.0, INF))
    assert nerr(o1, o2) <= TOL_F32 and nerr(f1, f2) <= TOL_F32


def test_deterministic_across_thread_counts():
    inp = make_ssd_inputs(2, 64, 4, 8, 16, 2, D="channel", requires_grad=True, seed=10)
    prev = torch.get_num_threads()
    res = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for v in inp.values():
                v.grad = None
            out, fin = _run(inp, 16, True, (0.0, INF))
            (out.square().sum() + fin.sum()).backward()
            res.append([out.detach(), fin.detach()] + [v.grad.clone() for v in inp.values()])
    finally:
        torch.set_num_threads(prev)
    for a, b in zip(*res):
        assert torch.equal(a, b)


# ---- dtypes -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_storage(dtype):
    inp = make_ssd_inputs(2, 33, 4, 8, 16, 2, dtype=dtype, D="channel", requires_grad=True, seed=6)
    out, final = _run(inp, 16, True, (0.0, INF))
    assert out.dtype == dtype and final.dtype == torch.float32
    ref_in = as64(inp)  # the float64 reference on the rounded inputs
    rout, rfin = _ref(ref_in, True, (0.0, INF))
    assert nerr(out, rout) <= TOL_LOWP_OUT and nerr(final, rfin) <= TOL_LOWP_OUT
    g = torch.Generator().manual_seed(1)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64).to(dtype)
    (out * dout).sum().backward()
    (rout * dout.double()).sum().backward()
    for k, v in inp.items():
        assert v.grad.dtype == v.dtype, k
        assert nerr(v.grad, ref_in[k].grad) <= TOL_LOWP_GRAD, k


def test_mixed_dtypes_follow_mamba_ssm_usage():
    """x in bf16 with dt, D, dt_bias in float32 (Mamba-2's usual mix)."""
    inp = make_ssd_inputs(1, 20, 2, 8, 8, 1, seed=12, requires_grad=True)
    x16 = inp["x"].detach().bfloat16().requires_grad_(True)
    out = mamba2c.mamba_chunk_scan_combined(x16, inp["dt"], inp["A"], inp["B"], inp["C"], 8,
                                            D=inp["D"], dt_bias=inp["dt_bias"], dt_softplus=True)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert x16.grad.dtype == torch.bfloat16 and inp["dt"].grad.dtype == torch.float32


# ---- layouts ------------------------------------------------------------------------------

def test_in_proj_views_are_zero_copy_and_correct():
    B, L, H, P, G, N = 2, 19, 4, 8, 2, 16
    d_inner = H * P
    width = 2 * d_inner + 2 * G * N + H
    buf = torch.randn(B, L, width)
    z, x, Bm, Cm, dt = torch.split(buf, [d_inner, d_inner, G * N, G * N, H], dim=-1)
    x4, z4 = x.unflatten(-1, (H, P)), z.unflatten(-1, (H, P))
    B4, C4 = Bm.unflatten(-1, (G, N)), Cm.unflatten(-1, (G, N))
    s = _native._state()
    for t in (x4, z4, B4, C4, dt):  # accepted as is: the C call reads the view in place
        assert _native._desc(s.buf, 0, "t", t, torch.float32, 0) is t
    dt = 0.05 + 0.05 * torch.tanh(dt)
    A = -torch.linspace(0.1, 0.5, H)
    o1 = mamba2c.mamba_chunk_scan_combined(x4, dt, A, B4, C4, 8, z=z4, dt_softplus=True)
    o2 = mamba2c.mamba_chunk_scan_combined(x4.contiguous(), dt.contiguous(), A, B4.contiguous(),
                                           C4.contiguous(), 8, z=z4.contiguous(), dt_softplus=True)
    torch.testing.assert_close(o1, o2, rtol=0, atol=0)


def test_noncontiguous_last_dim_and_broadcast_inputs():
    inp = make_ssd_inputs(2, 12, 2, 4, 8, 1, seed=14)
    ref, _ = _run(inp, 4, True, (0.0, INF))
    xt = inp["x"].transpose(-1, -2).contiguous().transpose(-1, -2)  # last-dim stride != 1
    assert xt.stride(-1) != 1
    s = _native._state()
    assert _native._desc(s.buf, 0, "x", xt, torch.float32, 0) is not xt  # copied
    out, _ = _run({**inp, "x": xt}, 4, True, (0.0, INF))
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    # stride-0 broadcast of an outer dim is read in place; of the last dim is copied
    Bb = inp["B"][:1].expand(2, -1, -1, -1)
    assert Bb.stride(0) == 0 and _native._desc(s.buf, 0, "B", Bb, torch.float32, 0) is Bb
    Ab = torch.tensor(-0.3).expand(2)
    out1, _ = _run({**inp, "B": Bb, "A": Ab}, 4, True, (0.0, INF))
    out2, _ = _run({**inp, "B": Bb.contiguous(), "A": Ab.contiguous()}, 4, True, (0.0, INF))
    torch.testing.assert_close(out1, out2, rtol=0, atol=0)


def test_gradient_of_expanded_dout():
    """out.sum().backward() sends a stride-0 dout; it must be handled (copied)."""
    inp = make_ssd_inputs(1, 9, 2, 4, 4, 1, requires_grad=True, seed=15)
    out, _ = _run(inp, 4, True, (0.0, INF))
    out.sum().backward()
    r = as64(inp)
    _ref(r, True, (0.0, INF))[0].sum().backward()
    for k in inp:
        assert nerr(inp[k].grad, r[k].grad) <= TOL_F32, k


def test_final_state_only_loss():
    inp = make_ssd_inputs(2, 10, 2, 4, 4, 2, requires_grad=True, seed=16)
    _, fin = _run(inp, 4, True, (0.0, INF))
    fin.square().sum().backward()
    r = as64(inp)
    _ref(r, True, (0.0, INF))[1].square().sum().backward()
    for k in inp:
        rg = r[k].grad if r[k].grad is not None else torch.zeros_like(r[k])  # D, z: no path
        assert nerr(inp[k].grad, rg) <= TOL_F32, k
