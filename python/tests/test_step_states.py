"""The C decode step (mamba2_ssd_step) through selective_state_update / ops.ssd_step /
Mamba2.step, the states-at-positions forward (mamba2_ssd_forward_states) and the staged
pipeline (mamba2c.chunked), against the pure-torch reference."""
from __future__ import annotations

import pytest
import torch

import mamba2c
from mamba2c import _native, _torch_impl, chunked, ops
from mamba2c import reference as R
from mamba2c.nn import InferenceParams, Mamba2
from mamba2c.reference import normalized_error as nerr

from conftest import TOL_F32, make_ssd_inputs

f64 = torch.float64


@pytest.fixture
def c_only(monkeypatch):
    """Fail if the torch implementation of the step is used (the call must run in C)."""
    def boom(*a, **k):
        raise AssertionError("the torch fallback ran; the C op was expected")
    monkeypatch.setattr(_torch_impl, "ssd_step", boom)


def _step_inputs(B, H, P, N, G, S=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=g, dtype=f64)  # noqa: E731
    d = dict(state=rn(S or B, H, P, N) / 5, x=rn(B, H, P),
             dt=0.01 + 0.1 * torch.rand(B, H, generator=g, dtype=f64),
             A=-(0.1 + 0.4 * torch.rand(H, generator=g, dtype=f64)), B=rn(B, G, N) / 5,
             C=rn(B, G, N) / 5, D=rn(H), Dc=rn(H, P), z=rn(B, H, P), dt_bias=0.1 * rn(H))
    return {k: v.to(dtype) for k, v in d.items()}


def _ref_step(inp, D, z, idx=None, dt_limit=(0.0, float("inf")), softplus=True):
    st = inp["state"].double().clone()
    out = R.ssd_step(st, inp["x"].double(), inp["dt"].double(), inp["A"].double(),
                     inp["B"].double(), inp["C"].double(),
                     None if D is None else D.double(), None if z is None else z.double(),
                     inp["dt_bias"].double(), softplus, dt_limit, idx)
    return out, st


@pytest.mark.parametrize("G,Dkind,use_z,dt_limit", [
    (1, "head", True, (0.0, float("inf"))),
    (2, "channel", False, (0.0, float("inf"))),
    (4, None, True, (0.02, 0.08)),
])
def test_ssd_step_c_vs_reference(c_only, G, Dkind, use_z, dt_limit):
    B, H, P, N = 3, 4, 8, 16
    inp = _step_inputs(B, H, P, N, G, seed=G)
    D = {"head": inp["D"], "channel": inp["Dc"], None: None}[Dkind]
    z = inp["z"] if use_z else None
    out_ref, st_ref = _ref_step(inp, D, z, dt_limit=dt_limit)
    state = inp["state"].clone()
    with torch.no_grad():
        out = mamba2c.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"],
                                             inp["C"], D, z=z, dt_bias=inp["dt_bias"],
                                             dt_softplus=True, dt_limit=dt_limit)
    assert nerr(out, out_ref) <= TOL_F32 and nerr(state, st_ref) <= TOL_F32


def test_ssd_step_mamba_ssm_broadcast_views_are_zero_copy(c_only):
    """Mamba2.step of mamba_ssm passes A [H,P,N], dt [B,H,P], dt_bias [H,P], D [H,P] as
    stride-0 expand views: they run in C and no tensor is copied (a descriptor template is
    only kept when every tensor was described as is)."""
    B, H, P, N, G = 2, 4, 8, 16, 2
    inp = _step_inputs(B, H, P, N, G, seed=3)
    out_ref, st_ref = _ref_step(inp, inp["D"], None)
    # x, B, C as views into one in_proj-like buffer (row stride > width)
    buf = torch.zeros(B, H * P + 2 * G * N + 7)
    buf[:, :H * P] = inp["x"].flatten(1)
    buf[:, H * P:H * P + G * N] = inp["B"].flatten(1)
    buf[:, H * P + G * N:H * P + 2 * G * N] = inp["C"].flatten(1)
    x = buf[:, :H * P].unflatten(-1, (H, P))
    Bm = buf[:, H * P:H * P + G * N].unflatten(-1, (G, N))
    Cm = buf[:, H * P + G * N:H * P + 2 * G * N].unflatten(-1, (G, N))
    args = dict(dt=inp["dt"][:, :, None].expand(B, H, P),
                A=inp["A"][:, None, None].expand(H, P, N),
                D=inp["D"][:, None].expand(H, P), dt_bias=inp["dt_bias"][:, None].expand(H, P))
    plans = _native._state().step_plans
    plans.clear()
    state = inp["state"].clone()
    with torch.no_grad():
        for _ in range(2):  # the second call takes the template path
            state.copy_(inp["state"])
            out = mamba2c.selective_state_update(state, x, args["dt"], args["A"], Bm, Cm,
                                                 args["D"], dt_bias=args["dt_bias"],
                                                 dt_softplus=True)
            assert nerr(out, out_ref) <= TOL_F32 and nerr(state, st_ref) <= TOL_F32
    assert len(plans) == 1


def test_ssd_step_indices_padding_and_duplicates(c_only):
    S, B, H, P, N = 6, 4, 2, 4, 8
    inp = _step_inputs(B, H, P, N, 1, S=S, seed=5)
    idx = torch.tensor([5, -1, 0, 3], dtype=torch.int32)
    out_ref, st_ref = _ref_step(inp, inp["D"], inp["z"], idx)
    state = inp["state"].clone()
    with torch.no_grad():
        out = mamba2c.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"],
                                             inp["C"], inp["D"], inp["z"], inp["dt_bias"], True,
                                             state_batch_indices=idx)
    assert nerr(out, out_ref) <= TOL_F32 and nerr(state, st_ref) <= TOL_F32
    assert torch.equal(out[1], torch.zeros(H, P))
    assert torch.equal(state[[1, 2, 4]], inp["state"][[1, 2, 4]])  # untouched slots
    with pytest.raises(ValueError, match="distinct"), torch.no_grad():
        mamba2c.selective_state_update(state, inp["x"], inp["dt"], inp["A"], inp["B"],
                                       inp["C"], state_batch_indices=torch.tensor([1, 2, 1, 0]))


def test_ssd_step_multi_token_equals_steps_and_scan(c_only):
    B, T, H, P, N, G = 2, 5, 4, 4, 8, 2
    inp = make_ssd_inputs(B, T, H, P, N, G, D="channel", seed=11)
    args = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"])
    kw = dict(D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"], dt_softplus=True)
    with torch.no_grad():
        st1 = inp["initial_states"].clone()
        out1, alls = mamba2c.selective_state_update(st1, *args, **kw, return_all_states=True)
        st2 = inp["initial_states"].clone()
        outs = [mamba2c.selective_state_update(st2, inp["x"][:, t], inp["dt"][:, t], inp["A"],
                                               inp["B"][:, t], inp["C"][:, t], inp["D"],
                                               inp["z"][:, t], inp["dt_bias"], True)
                for t in range(T)]
    ref_out, ref_fin = R.ssd_sequential(*(a.double() for a in args), D=inp["D"].double(),
                                        z=inp["z"].double(), dt_bias=inp["dt_bias"].double(),
                                        initial_states=inp["initial_states"].double(),
                                        dt_softplus=True)
    assert nerr(out1, ref_out) <= TOL_F32 and nerr(st1, ref_fin) <= TOL_F32
    assert nerr(torch.stack(outs, 1), ref_out) <= TOL_F32 and nerr(st2, ref_fin) <= TOL_F32
    assert alls.shape == (B, T, H, P, N) and torch.equal(alls[:, -1], st1)


def test_ssd_step_float64_state_bf16_and_fallbacks():
    B, H, P, N = 2, 2, 4, 8
    inp = _step_inputs(B, H, P, N, 1, seed=6)
    out_ref, st_ref = _ref_step(inp, inp["D"], inp["z"])
    base = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], inp["z"],
            inp["dt_bias"], True)
    with torch.no_grad():
        # float64 state: the reference backend in C, float64 throughout
        st = inp["state"].double()
        out = ops.ssd_step(st, *(t.double() if isinstance(t, torch.Tensor) else t for t in base))
        assert nerr(out, out_ref) <= 1e-12 and nerr(st, st_ref) <= 1e-12
        # bf16 activations with a float32 state: computed in float32, out rounded to bf16
        st = inp["state"].clone()
        xb = tuple(t.bfloat16() if k in ("x", "z") else t
                   for k, t in zip(("x", "dt", "A", "B", "C", "D", "z", "dt_bias"), base[:8]))
        out = ops.ssd_step(st, *xb, True)
        assert out.dtype == torch.bfloat16 and nerr(out, out_ref) <= 1e-2
        # per-(p,n) A and per-p dt are not C forms: the torch fallback, same math
        A3 = inp["A"][:, None, None] * (1 + 0.1 * torch.rand(H, P, N))
        st_a, st_b = inp["state"].clone(), inp["state"].clone()
        o_t = ops.ssd_step(st_a, inp["x"], inp["dt"], A3, inp["B"], inp["C"])
        o_ref = _torch_impl.ssd_step(st_b, inp["x"].double(), inp["dt"].double(), A3.double(),
                                     inp["B"].double(), inp["C"].double())
        assert nerr(o_t, o_ref) <= TOL_F32 and nerr(st_a, st_b) <= TOL_F32
        # a materialised (contiguous) repeat of A is recognised as constant along P, N: C
        Arep = inp["A"][:, None, None].expand(H, P, N).contiguous()
        st_c = inp["state"].clone()
        o_c = ops.ssd_step(st_c, inp["x"], inp["dt"], Arep, inp["B"], inp["C"], inp["D"],
                           inp["z"], inp["dt_bias"], True)
        assert nerr(o_c, out_ref) <= TOL_F32 and nerr(st_c, st_ref) <= TOL_F32


def test_ssd_step_opcheck():
    B, H, P, N = 2, 2, 4, 8
    inp = _step_inputs(B, H, P, N, 1, seed=7)
    args = (inp["state"].clone(), inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"],
            inp["z"], inp["dt_bias"], True, 0.0, float("inf"), None)
    torch.library.opcheck(torch.ops.mamba2c.ssd_step.default, args,
                          test_utils=("test_schema", "test_faketensor"))


def test_ssd_step_torch_compile_fullgraph():
    """Under torch.compile the step is the custom op mamba2c::ssd_step (state mutated in
    place by the compiled graph too)."""
    B, H, P, N = 2, 2, 4, 8
    inp = _step_inputs(B, H, P, N, 1, seed=8)

    def f(state, x, dt, A, Bm, Cm, D, db):
        y = mamba2c.selective_state_update(state, x, dt[:, :, None].expand(B, H, P),
                                           A[:, None, None].expand(H, P, N), Bm, Cm, D,
                                           dt_bias=db, dt_softplus=True)
        return y * 2

    args = [inp[k] for k in ("x", "dt", "A", "B", "C", "D", "dt_bias")]
    st_e, st_c = inp["state"].clone(), inp["state"].clone()
    with torch.no_grad():
        ye = f(st_e, *args)
        yc = torch.compile(f, backend="aot_eager", fullgraph=True)(st_c, *args)
    assert torch.allclose(yc, ye) and torch.allclose(st_c, st_e)


# ---- module level: decoding == prefill ----------------------------------------------------

@pytest.mark.parametrize("rmsnorm", [True, False])
def test_mamba2_decode_steps_equal_prefill_in_c(c_only, rmsnorm):
    """L decode steps (one token each, and T tokens per call) give the prefill's outputs
    and final states; the SSD step runs in C."""
    torch.manual_seed(3)
    m = Mamba2(d_model=32, d_state=16, headdim=8, chunk_size=8, ngroups=2, rmsnorm=rmsnorm,
               D_has_hdim=not rmsnorm, layer_idx=0).eval()
    L = 13
    u = torch.randn(2, L, 32)
    with torch.no_grad():
        ip = InferenceParams(max_seqlen=L, max_batch_size=2)
        full = m(u, inference_params=ip)
        conv_full, ssm_full = (t.clone() for t in ip.key_value_memory_dict[0])
        conv_state, ssm_state = m.allocate_inference_cache(2)
        outs = [m.step(u[:, t:t + 1], conv_state, ssm_state)[0] for t in range(L)]
        assert nerr(torch.cat(outs, 1), full) <= 1e-5
        assert nerr(ssm_state, ssm_full) <= 1e-5 and nerr(conv_state, conv_full) <= 1e-6
        # prefill 4, then the remaining tokens in calls of 1, 5 and 3 tokens
        ip = InferenceParams(max_seqlen=L, max_batch_size=2)
        outs = [m(u[:, :4], inference_params=ip)]
        ip.seqlen_offset = 4
        for t0, t1 in ((4, 5), (5, 10), (10, 13)):
            outs.append(m(u[:, t0:t1], inference_params=ip))
            ip.seqlen_offset = t1
        assert nerr(torch.cat(outs, 1), full) <= 1e-5
        assert nerr(ip.key_value_memory_dict[0][1], ssm_full) <= 1e-5


# ---- states at positions ----------------------------------------------------------------

def test_states_at_positions_equal_prefix_runs():
    B, L, H, P, N, G = 2, 23, 2, 4, 8, 1
    inp = make_ssd_inputs(B, L, H, P, N, G, seed=12)
    kw = dict(D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"], dt_softplus=True,
              initial_states=inp["initial_states"])
    args = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 8)
    want = [(0, 0), (0, 7), (0, 8), (0, 22), (1, 3), (1, 15), (1, 22)]
    pos = [b * L + t for b, t in want]
    out, fin, ps = mamba2c.mamba_chunk_scan_combined(*args, **kw, return_final_states=True,
                                                     return_states_at=pos)
    out0, fin0 = mamba2c.mamba_chunk_scan_combined(*args, **kw, return_final_states=True)
    assert torch.equal(out, out0) and torch.equal(fin, fin0)
    assert ps.shape == (len(pos), H, P, N)
    for i, (b, t) in enumerate(want):
        sl = slice(b, b + 1)
        _, f = mamba2c.mamba_chunk_scan_combined(
            inp["x"][sl, :t + 1], inp["dt"][sl, :t + 1], inp["A"], inp["B"][sl, :t + 1],
            inp["C"][sl, :t + 1], 8, D=inp["D"], z=inp["z"][sl, :t + 1],
            dt_bias=inp["dt_bias"], dt_softplus=True, initial_states=inp["initial_states"][sl],
            return_final_states=True)
        assert nerr(ps[i], f[0]) <= TOL_F32, (b, t)


def test_states_at_positions_varlen_and_grad():
    lens = [6, 11, 4]
    L = sum(lens)
    inp = make_ssd_inputs(1, L, 2, 4, 8, 1, init=False, seed=13, requires_grad=True)
    cu = torch.tensor([0, 6, 17, 21])
    pos = torch.tensor([2, 5, 6, 16, 20])
    out, varlen, ps = mamba2c.mamba_chunk_scan_combined(
        inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 4, D=inp["D"], cu_seqlens=cu,
        dt_softplus=True, return_varlen_states=True, return_states_at=pos)
    # the state after a sequence's last token is its varlen state
    assert nerr(ps[1], varlen[0]) <= TOL_F32 and nerr(ps[3], varlen[1]) <= TOL_F32
    assert nerr(ps[4], varlen[2]) <= TOL_F32
    # token 6 opens sequence 1: its state starts from zero
    _, f = mamba2c.mamba_chunk_scan_combined(
        inp["x"][:, 6:7], inp["dt"][:, 6:7], inp["A"], inp["B"][:, 6:7], inp["C"][:, 6:7], 4,
        D=inp["D"], dt_softplus=True, return_final_states=True)
    assert nerr(ps[2], f[0]) <= TOL_F32
    assert not ps.requires_grad and out.requires_grad
    (out.sum() + varlen.sum()).backward()
    assert inp["x"].grad is not None and inp["A"].grad is not None
    with pytest.raises(ValueError):  # not strictly increasing: the C library's message
        mamba2c.mamba_chunk_scan_combined(inp["x"].detach(), inp["dt"].detach(),
                                          inp["A"].detach(), inp["B"].detach(),
                                          inp["C"].detach(), 4, return_states_at=[3, 3])


# ---- the staged pipeline ------------------------------------------------------------------

def test_chunked_stages_compose_to_the_fused_op():
    B, L, H, P, N, G = 2, 29, 4, 4, 8, 2
    inp = make_ssd_inputs(B, L, H, P, N, G, D="channel", seed=14)
    args = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], 8)
    kw = dict(D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"],
              initial_states=inp["initial_states"], dt_softplus=True)
    out0, fin0 = mamba2c.mamba_chunk_scan_combined(*args, **kw, return_final_states=True)
    dt_out, dA = chunked.chunk_cumsum(inp["dt"], inp["A"], 8, inp["dt_bias"], True)
    CB = chunked.bmm_chunk(inp["B"], inp["C"], 8)
    states = chunked.chunk_state(inp["x"], inp["B"], dt_out, dA)
    start, fin = chunked.state_passing(states, dA, inp["initial_states"])
    out = chunked.chunk_scan(CB, inp["x"], dt_out, dA, inp["C"], start, inp["D"], inp["z"])
    K = 4
    assert dt_out.shape == dA.shape == (B, H, K, 8) and CB.shape == (B, K, G, 8, 8)
    assert states.shape == start.shape == (B, K, H, P, N)
    assert nerr(out, out0) <= TOL_F32 and nerr(fin, fin0) <= TOL_F32
    # staged values: states_start of chunk k is the state after token 8k-1
    ps = mamba2c.mamba_chunk_scan_combined(*args, **kw, return_states_at=[7, 15, 23])[1]
    assert nerr(start[0, 1:], ps) <= TOL_F32
    assert torch.equal(start[:, 0], inp["initial_states"])
    out2, fin2 = chunked.forward(*args, **kw)
    assert torch.equal(out2, out) and torch.equal(fin2, fin)
