"""Context-parallel SSD (mamba2c.distributed.cp_mamba_chunk_scan_combined) on 2 and 4 gloo
ranks against the single-process op and the float64 reference (SPEC §8 tolerances).

Each case is a full problem drawn as SPEC §8 says, cut into per-rank slices of awkward
lengths (not multiples of the chunk, a 1-token rank, an empty rank), with every option.
The loss of rank r is <out_r, gy_r> + <final, gf_r> + <varlen, gv_r>; the single-process
loss with the same cotangents summed over ranks has the same gradients: slices' gradients
concatenate, replicated parameters' shares sum. Each case runs twice per rank (bitwise
identical) and, for one case, with both transports (bitwise identical).
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import mamba2c
from mamba2c import reference
from mamba2c.reference import normalized_error

from conftest import TOL_F32, TOL_LOWP_GRAD, TOL_LOWP_OUT, make_ssd_inputs
import test_distributed_harness as harness

ACT = ("x", "dt", "B", "C", "z")
H, P, N = 4, 8, 16

# name: (Ls per rank, dict of options)
CASES = {
    2: {
        "batch_f32": ([37, 28], dict(Bsz=2, G=2, Q=16, D="head")),
        "batch_p2p_dch_limit": ([21, 30], dict(Bsz=2, G=1, Q=8, D="channel", method="p2p",
                                               dt_limit=(0.0, 0.7))),
        "batch_no_options": ([13, 19], dict(Bsz=1, G=4, Q=16, D=None, z=False, dt_bias=False,
                                            init=False, softplus=False)),
        "varlen_f32": ([40, 25], dict(cu=[0, 10, 52, 53, 65], G=2, Q=16)),
        "batch_bf16": ([30, 21], dict(Bsz=2, G=2, Q=16, dtype=torch.bfloat16)),
    },
    4: {
        "batch_awkward": ([19, 1, 0, 33], dict(Bsz=2, G=1, Q=8)),
        "varlen_across": ([7, 1, 20, 12], dict(cu=[0, 5, 30, 30, 40], G=2, Q=8, method="p2p")),
        "varlen_first_init": ([0, 9, 1, 14], dict(cu=[0, 3, 24], G=1, Q=4, init_rows=1)),
        "batch_bf16_4": ([5, 16, 1, 20], dict(Bsz=1, G=2, Q=8, dtype=torch.bfloat16)),
        # a subgroup of global ranks 1 and 3 (group ranks 0 and 1): p2p needs the mapping
        "subgroup_p2p": ([12, 9], dict(Bsz=2, G=2, Q=8, method="p2p", subgroup=[1, 3])),
    },
}


def _problem(Ls, o):
    L = sum(Ls)
    cu = o.get("cu")
    Bsz = 1 if cu is not None else o["Bsz"]
    nseq = None
    if cu is not None:
        nseq = o.get("init_rows", len(cu) - 1)
    d = make_ssd_inputs(Bsz, L, H, P, N, o["G"], dtype=o.get("dtype", torch.float32),
                        D=o.get("D", "head"), z=o.get("z", True), dt_bias=o.get("dt_bias", True),
                        init=o.get("init", True), nseq=nseq, seed=len(Ls) * 100 + L)
    return d, Bsz, L, cu


def _kwargs(t, o, cu):
    kw = dict(D=t.get("D"), z=t.get("z"), dt_bias=t.get("dt_bias"),
              initial_states=t.get("initial_states"), dt_softplus=o.get("softplus", True),
              dt_limit=o.get("dt_limit", (0.0, float("inf"))), return_final_states=True)
    if cu is not None:
        kw["cu_seqlens"] = torch.tensor(cu)
        kw["return_varlen_states"] = True
    return kw


def _cotangents(Bsz, L, world, fin_shape, nvar):
    g = torch.Generator().manual_seed(7)
    gy = torch.randn(Bsz, L, H, P, generator=g, dtype=torch.float64)
    gf = torch.randn(world, *fin_shape, generator=g, dtype=torch.float64)
    gv = torch.randn(world, nvar, H, P, N, generator=g, dtype=torch.float64) if nvar else None
    return gy, gf, gv


def _loss(res, gy, gf, gv):
    out, fin = res[0], res[1]
    loss = (out.double() * gy).sum() + (fin.double() * gf).sum()
    if gv is not None:
        loss = loss + (res[2].double() * gv).sum()
    return loss


def _run_rank(rank, world, Ls, o, method, group=None):
    import mamba2c.distributed as md
    if group is not None:
        rank, world = dist.get_rank(group), dist.get_world_size(group)
    d, Bsz, L, cu = _problem(Ls, o)
    s = sum(Ls[:rank])
    e = s + Ls[rank]
    t = {k: (v[:, s:e] if k in ACT else v).detach().clone().requires_grad_(True)
         for k, v in d.items()}
    res = md.cp_mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"], o["Q"],
                                          process_group=group, method=method,
                                          **_kwargs(t, o, cu))
    nvar = len(cu) - 1 if cu is not None else 0
    gy, gf, gv = _cotangents(Bsz, L, world, tuple(res[1].shape), nvar)
    _loss(res, gy[:, s:e], gf[rank], None if gv is None else gv[rank]).backward()
    return dict(out=res[0].detach(), fin=res[1].detach(),
                varlen=res[2].detach() if cu is not None else None,
                grads={k: v.grad for k, v in t.items()})


def _case(Ls, o):
    def fn(rank, world):
        m = o.get("method", "all_gather")
        group = None
        if "subgroup" in o:
            members = o["subgroup"]
            group = dist.new_group(sorted(members))  # every rank of the world creates it
            if rank not in members:
                return None
        a = _run_rank(rank, world, Ls, o, m, group)
        b = _run_rank(rank, world, Ls, o, m, group)
        other = _run_rank(rank, world, Ls, o, "p2p" if m == "all_gather" else "all_gather",
                          group)
        a["same_twice"] = _bitwise(a, b)
        a["same_methods"] = _bitwise(a, other)
        return a
    return fn


def _bitwise(a, b):
    def eq(u, v):
        if u is None or v is None:
            return u is None and v is None
        return u.dtype == v.dtype and torch.equal(u, v) and bool(
            (torch.isnan(u) == torch.isnan(v)).all())
    ok = eq(a["out"], b["out"]) and eq(a["fin"], b["fin"]) and eq(a["varlen"], b["varlen"])
    return ok and all(eq(a["grads"][k], b["grads"][k]) for k in a["grads"])


def worker_cases(world):
    return {f"ssd/{name}": _case(Ls, o) for name, (Ls, o) in CASES.get(world, {}).items()}


def _single(d, Bsz, L, cu, o, world, ref: bool):
    """The single-process op (ref=False) or the float64 reference on the same rounded
    inputs (ref=True): (out, final, varlen, grads)."""
    t = {k: (v.detach().double() if ref else v.detach()).clone().requires_grad_(True)
         for k, v in d.items()}
    kw = _kwargs(t, o, cu)
    if ref:
        init = t.get("initial_states")
        if cu is not None and init is not None and init.shape[0] == 1 and len(cu) > 2:
            init = torch.cat([init, init.new_zeros(len(cu) - 2, H, P, N)])
        out, states = reference.ssd_chunked(
            t["x"], t["dt"], t["A"], t["B"], t["C"], o["Q"], D=t.get("D"), z=t.get("z"),
            dt_bias=t.get("dt_bias"), initial_states=init,
            cu_seqlens=kw.get("cu_seqlens"), dt_softplus=kw["dt_softplus"],
            dt_limit=kw["dt_limit"])
        res = (out, states[-1:] if cu is not None else states) + ((states,) if cu is not None
                                                                 else ())
    else:
        res = mamba2c.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"],
                                                o["Q"], **kw)
    nvar = len(cu) - 1 if cu is not None else 0
    gy, gf, gv = _cotangents(Bsz, L, world, tuple(res[1].shape), nvar)
    _loss(res, gy, gf.sum(0), None if gv is None else gv.sum(0)).backward()
    return res, {k: v.grad for k, v in t.items()}


def _assemble(outs, key, k=None):
    if k is None:
        return torch.cat([o[key] for o in outs], dim=1)
    if k in ACT:
        return torch.cat([o["grads"][k] for o in outs], dim=1)
    shares = [o["grads"][k] for o in outs if o["grads"][k] is not None]
    acc = shares[0].clone()
    for s in shares[1:]:
        acc += s
    return acc


@pytest.mark.parametrize("world,name", [(w, n) for w in CASES for n in CASES[w]])
def test_cp_ssd(world, name):
    Ls, o = CASES[world][name]
    outs = harness.case_results(world, f"ssd/{name}")
    if "subgroup" in o:  # group rank order = sorted global ranks
        outs = [outs[g] for g in sorted(o["subgroup"])]
        world = len(outs)
    assert all(r["same_twice"] for r in outs), "not bitwise identical run to run"
    assert all(r["same_methods"] for r in outs), "all_gather and p2p transports differ"
    d, Bsz, L, cu = _problem(Ls, o)
    low = o.get("dtype", torch.float32) != torch.float32
    single, g_single = _single(d, Bsz, L, cu, o, world, ref=False)
    ref, g_ref = _single(d, Bsz, L, cu, o, world, ref=True)
    tol_out = TOL_LOWP_OUT if low else TOL_F32
    tol_grad = TOL_LOWP_GRAD if low else TOL_F32
    out = _assemble(outs, "out")
    assert out.dtype == single[0].dtype and out.shape == single[0].shape
    errs = {"out": (normalized_error(out, ref[0]), normalized_error(out, single[0]), tol_out)}
    for r in outs[1:]:  # the whole sequence's final state, the same on every rank
        assert torch.equal(r["fin"], outs[0]["fin"])
        if cu is not None:
            assert torch.equal(r["varlen"], outs[0]["varlen"])
    errs["final"] = (normalized_error(outs[0]["fin"], ref[1]),
                     normalized_error(outs[0]["fin"], single[1]), tol_out)
    if cu is not None:
        errs["varlen"] = (normalized_error(outs[0]["varlen"], ref[2]),
                          normalized_error(outs[0]["varlen"], single[2]), tol_out)
    for k in d:
        g = _assemble(outs, None, k)
        errs["d" + k] = (normalized_error(g, g_ref[k]), normalized_error(g, g_single[k]), tol_grad)
    bad = {k: v for k, v in errs.items() if not (v[0] <= v[2] and v[1] <= v[2])}
    assert not bad, f"(vs float64 reference, vs single-process op, tolerance): {bad}"
    assert all(torch.isfinite(v).all() for v in [out] + [r["fin"] for r in outs])
    if o.get("init", True) and cu is None:  # initial_states: complete on rank 0
        assert all(r["grads"]["initial_states"] is None for r in outs[1:])
