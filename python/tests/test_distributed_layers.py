"""Context-parallel conv1d, a context-parallel Mamba2 layer and a tensor-parallel Mamba2
layer on 2 and 4 gloo ranks, against the single-process op / layer (same weights).

Losses as in test_distributed_ssd: rank r's loss is <out_r, gy_r> on its slice, so the
single-process gradients are the concatenated slice gradients and the summed parameter
shares. Tensor parallel without sequence parallelism is Megatron's convention instead:
every rank computes the same loss on the replicated output, which counts once.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import mamba2c
from mamba2c import ops, reference
from mamba2c.reference import normalized_error

from conftest import TOL_F32
import test_distributed_harness as harness

# ---------------------------------------------------------------------------------------
# conv1d
# ---------------------------------------------------------------------------------------

CONV = {
    2: {"w4": ([9, 14], dict(Bsz=2, D=12, W=4, cu=None)),
        "varlen_w3": ([11, 6], dict(Bsz=1, D=10, W=3, cu=[0, 4, 12, 17]))},
    4: {"short_slices": ([1, 2, 0, 9], dict(Bsz=2, D=12, W=4, cu=None)),
        "varlen_short": ([2, 1, 7, 5], dict(Bsz=1, D=8, W=4, cu=[0, 2, 3, 10, 15]))},
}


def _conv_problem(Ls, o):
    g = torch.Generator().manual_seed(11 + sum(Ls))
    L = sum(Ls)
    x = torch.randn(o["Bsz"], L, o["D"], generator=g)
    w = torch.randn(o["D"], o["W"], generator=g) / 2
    b = torch.randn(o["D"], generator=g)
    gy = torch.randn(o["Bsz"], L, o["D"], generator=g)
    return x, w, b, gy


def _conv_case(Ls, o):
    def fn(rank, world):
        from mamba2c.distributed import cp_conv1d
        x, w, b, gy = _conv_problem(Ls, o)
        s = sum(Ls[:rank])
        e = s + Ls[rank]
        xs = x[:, s:e].clone().requires_grad_(True)
        w, b = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
        cu = torch.tensor(o["cu"]) if o["cu"] is not None else None
        out = cp_conv1d(xs, w, b, activation=True, cu_seqlens=cu)
        (out * gy[:, s:e]).sum().backward()
        return dict(out=out.detach(), dx=xs.grad, dw=w.grad, db=b.grad)
    return fn


@pytest.mark.parametrize("world,name", [(w, n) for w in CONV for n in CONV[w]])
def test_cp_conv1d(world, name):
    Ls, o = CONV[world][name]
    outs = harness.case_results(world, f"conv/{name}")
    x, w, b, gy = _conv_problem(Ls, o)
    cu = torch.tensor(o["cu"]) if o["cu"] is not None else None
    t = [v.double().requires_grad_(True) for v in (x, w, b)]
    ref, _ = reference.conv1d(t[0], t[1], t[2], True, None, cu)
    (ref * gy.double()).sum().backward()
    single = ops.conv1d(x, w, b, True, None, cu, False)[0]
    out = torch.cat([r["out"] for r in outs], dim=1)
    assert normalized_error(out, ref) <= TOL_F32 and normalized_error(out, single) <= TOL_F32
    dx = torch.cat([r["dx"] for r in outs], dim=1)
    dw = harness_sum([r["dw"] for r in outs])
    db = harness_sum([r["db"] for r in outs])
    for got, want, k in ((dx, t[0].grad, "dx"), (dw, t[1].grad, "dw"), (db, t[2].grad, "db")):
        assert normalized_error(got, want) <= TOL_F32, (k, normalized_error(got, want))


def harness_sum(parts):
    """Σ of the ranks' shares in rank order (None: a rank with no share, e.g. empty)."""
    parts = [p for p in parts if p is not None]
    acc = parts[0].clone()
    for p in parts[1:]:
        acc += p
    return acc


# ---------------------------------------------------------------------------------------
# Mamba2 layers: context parallel and tensor parallel
# ---------------------------------------------------------------------------------------

LAYER = dict(d_model=32, d_state=16, headdim=8, ngroups=4, chunk_size=8)  # 8 heads, 4 groups
CP_LAYER = {
    2: {"cp_rmsnorm": ([23, 18], dict(Bsz=2, cu=None, kw={})),
        "cp_zgate_varlen": ([17, 20], dict(Bsz=1, cu=[0, 9, 30, 37],
                                           kw=dict(rmsnorm=False, D_has_hdim=True)))},
    4: {"cp_awkward": ([10, 1, 0, 19], dict(Bsz=2, cu=None, kw=dict(bias=True)))},
}
TP_LAYER = {
    2: {"tp_sp": (dict(Bsz=1, L=26, sp=True, Ls=[11, 15], kw=dict(bias=True))),
        "tp_nosp": (dict(Bsz=2, L=19, sp=False, kw=dict(D_has_hdim=True)))},
    4: {"tp_sp4": (dict(Bsz=1, L=21, sp=True, Ls=[5, 1, 8, 7], kw=dict(bias=True))),
        "tp_nosp_zgate": (dict(Bsz=1, L=13, sp=False, kw=dict(rmsnorm=False)))},
}


def _layer_problem(Bsz, L, kw, seed):
    torch.manual_seed(seed)
    layer = mamba2c.nn.Mamba2(**LAYER, **kw)
    g = torch.Generator().manual_seed(seed + 1)
    u = torch.randn(Bsz, L, LAYER["d_model"], generator=g)
    gy = torch.randn(Bsz, L, LAYER["d_model"], generator=g)
    return layer.state_dict(), u, gy


def _cp_layer_case(Ls, o):
    def fn(rank, world):
        sd, u, gy = _layer_problem(o["Bsz"], sum(Ls), o["kw"], 3)
        layer = mamba2c.nn.Mamba2(**LAYER, **o["kw"], context_parallel_group=dist.group.WORLD)
        layer.load_state_dict(sd)
        s = sum(Ls[:rank])
        e = s + Ls[rank]
        us = u[:, s:e].clone().requires_grad_(True)
        cu = torch.tensor(o["cu"]) if o["cu"] is not None else None
        out = layer(us, cu_seqlens=cu)
        (out * gy[:, s:e]).sum().backward()
        return dict(out=out.detach(), du=us.grad,
                    grads={k: p.grad for k, p in layer.named_parameters()})
    return fn


def _tp_layer_case(o):
    def fn(rank, world):
        from mamba2c.distributed import tp
        sd, u, gy = _layer_problem(o["Bsz"], o["L"], o["kw"], 5)
        layer = mamba2c.nn.Mamba2(**LAYER, **o["kw"], process_group=dist.group.WORLD,
                                  sequence_parallel=o["sp"])
        layer.load_state_dict(tp.shard_state_dict(sd, layer))
        roundtrip = tp.gather_state_dict(layer)
        same = set(roundtrip) == set(sd) and all(torch.equal(roundtrip[k], sd[k]) for k in sd)
        if o["sp"]:
            s = sum(o["Ls"][:rank])
            e = s + o["Ls"][rank]
        else:
            s, e = 0, o["L"]
        us = u[:, s:e].clone().requires_grad_(True)
        out = layer(us)
        (out * gy[:, s:e]).sum().backward()
        grads = tp.gather_state_dict(layer, {k: p.grad for k, p in layer.named_parameters()})
        return dict(out=out.detach(), du=us.grad, grads=grads, roundtrip=same)
    return fn


def worker_cases(world):
    cases = {f"conv/{n}": _conv_case(Ls, o) for n, (Ls, o) in CONV.get(world, {}).items()}
    cases.update({f"layer/{n}": _cp_layer_case(Ls, o)
                  for n, (Ls, o) in CP_LAYER.get(world, {}).items()})
    cases.update({f"layer/{n}": _tp_layer_case(o) for n, o in TP_LAYER.get(world, {}).items()})
    return cases


def _single_layer(sd, u, gy, kw, cu=None):
    layer = mamba2c.nn.Mamba2(**LAYER, **kw)
    layer.load_state_dict(sd)
    u = u.clone().requires_grad_(True)
    out = layer(u, cu_seqlens=cu)
    (out * gy).sum().backward()
    return out.detach(), u.grad, {k: p.grad for k, p in layer.named_parameters()}


def _check(out, du, grads, ref):
    errs = {"out": normalized_error(out, ref[0]), "du": normalized_error(du, ref[1])}
    for k, g in ref[2].items():
        errs["d" + k] = normalized_error(grads[k], g)
    bad = {k: v for k, v in errs.items() if not v <= TOL_F32}
    assert not bad, bad


@pytest.mark.parametrize("world,name", [(w, n) for w in CP_LAYER for n in CP_LAYER[w]])
def test_cp_mamba2_layer(world, name):
    Ls, o = CP_LAYER[world][name]
    outs = harness.case_results(world, f"layer/{name}")
    sd, u, gy = _layer_problem(o["Bsz"], sum(Ls), o["kw"], 3)
    cu = torch.tensor(o["cu"]) if o["cu"] is not None else None
    ref = _single_layer(sd, u, gy, o["kw"], cu)
    grads = {k: harness_sum([r["grads"][k] for r in outs]) for k in ref[2]}
    _check(torch.cat([r["out"] for r in outs], 1), torch.cat([r["du"] for r in outs], 1),
           grads, ref)


@pytest.mark.parametrize("world,name", [(w, n) for w in TP_LAYER for n in TP_LAYER[w]])
def test_tp_mamba2_layer(world, name):
    o = TP_LAYER[world][name]
    outs = harness.case_results(world, f"layer/{name}")
    assert all(r["roundtrip"] for r in outs), "shard_state_dict -> gather_state_dict changed it"
    sd, u, gy = _layer_problem(o["Bsz"], o["L"], o["kw"], 5)
    ref = _single_layer(sd, u, gy, o["kw"])
    if o["sp"]:
        out = torch.cat([r["out"] for r in outs], 1)
        du = torch.cat([r["du"] for r in outs], 1)
    else:
        out, du = outs[0]["out"], outs[0]["du"]
        for r in outs[1:]:
            assert torch.equal(r["out"], out) and torch.equal(r["du"], du)
    for r in outs[1:]:
        assert all(torch.equal(r["grads"][k], outs[0]["grads"][k]) for k in ref[2])
    _check(out, du, outs[0]["grads"], ref)
