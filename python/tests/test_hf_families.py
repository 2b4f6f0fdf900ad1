"""Every transformers family with a Mamba-2 mixer (mamba2, bamba, falcon_h1,
granitemoehybrid, nemotron_h, zamba2) on mamba2c through use_mamba2c_in_transformers(),
against the same model on transformers' own torch path: tiny random-weight configs built from
each family's config class (2-3 layers, with the family's attention / MLP / MoE layer where it
has one), logits and every parameter gradient in training mode (the fused path where the
family takes it), eval logits, and greedy generation through the cache (the decode steps).
The hook's functions are counted, so a family that silently stayed on torch fails."""
from __future__ import annotations

import collections
import copy
import importlib
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

transformers = pytest.importorskip("transformers")

import mamba2c  # noqa: E402
from mamba2c import hf, hf_decode  # noqa: E402
from mamba2c.reference import normalized_error as nerr  # noqa: E402

TOL = 1e-5
transformers.logging.set_verbosity_error()

# Mamba part in every config: d_inner 64 = 8 heads x 8, 2 groups, N 16, conv 4, chunk 8.
_COMMON = dict(vocab_size=96, hidden_size=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
               tie_word_embeddings=False)
_ATTN = dict(num_attention_heads=4, num_key_value_heads=2)
_MAMBA = dict(mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=16,
              mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8)


def _configs():
    t = transformers
    return {
        "mamba2": (t.Mamba2Config, t.Mamba2ForCausalLM, dict(
            num_hidden_layers=2, state_size=16, expand=2, head_dim=8, num_heads=8, n_groups=2,
            conv_kernel=4, chunk_size=8)),
        "bamba": (t.BambaConfig, t.BambaForCausalLM, dict(
            intermediate_size=64, num_hidden_layers=3, attn_layer_indices=[1], **_ATTN,
            **_MAMBA)),
        "falcon_h1": (t.FalconH1Config, t.FalconH1ForCausalLM, dict(
            intermediate_size=64, num_hidden_layers=2, mamba_d_ssm=64, mamba_rms_norm=True,
            mamba_norm_before_gate=True, **_ATTN, **_MAMBA)),
        "falcon_h1_gate_first": (t.FalconH1Config, t.FalconH1ForCausalLM, dict(
            intermediate_size=64, num_hidden_layers=2, mamba_d_ssm=64, mamba_rms_norm=True,
            mamba_norm_before_gate=False, **_ATTN, **_MAMBA)),
        "falcon_h1_no_mamba_norm": (t.FalconH1Config, t.FalconH1ForCausalLM, dict(
            intermediate_size=64, num_hidden_layers=2, mamba_d_ssm=64, mamba_rms_norm=False,
            **_ATTN, **_MAMBA)),
        "granitemoehybrid": (t.GraniteMoeHybridConfig, t.GraniteMoeHybridForCausalLM, dict(
            intermediate_size=32, shared_intermediate_size=64, num_local_experts=4,
            num_experts_per_tok=2, num_hidden_layers=3,
            layer_types=["mamba", "attention", "mamba"], **_ATTN, **_MAMBA)),
        "nemotron_h": (t.NemotronHConfig, t.NemotronHForCausalLM, dict(
            layers_block_type=["mamba", "attention", "mlp"], intermediate_size=64, head_dim=8,
            ssm_state_size=16, mamba_num_heads=8, mamba_head_dim=8, n_groups=2, conv_kernel=4,
            expand=2, chunk_size=8, **_ATTN)),
        "zamba2": (t.Zamba2Config, t.Zamba2ForCausalLM, dict(
            num_hidden_layers=3, layers_block_type=["mamba", "hybrid", "mamba"],
            mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=2, n_mamba_heads=8,
            chunk_size=8, intermediate_size=64, num_mem_blocks=1, adapter_rank=4, **_ATTN)),
    }


CASES = list(_configs())


def _make(case, seed=0, **kw):
    cfg_cls, model_cls, args = _configs()[case]
    cfg = cfg_cls(**{**_COMMON, **args, **kw})
    torch.manual_seed(seed)
    a = model_cls(cfg)
    with torch.no_grad():  # non-trivial D, gated-norm weights and dt_bias
        for m in a.modules():
            if hasattr(m, "A_log") and hasattr(m, "D"):
                m.D.normal_(1.0, 0.5)
                m.dt_bias.normal_(0.0, 0.5)
            if type(m).__name__.endswith("RMSNormGated"):
                m.weight.normal_(1.0, 0.3)
    return cfg, a, copy.deepcopy(a)


class _Counted:
    """use_mamba2c_in_transformers() with every swapped function counted."""

    def __init__(self, monkeypatch):
        self.n = collections.Counter()
        for name, f in list(hf._SWAPS.items()):
            monkeypatch.setitem(hf._SWAPS, name, self._wrap(name, f))
        monkeypatch.setattr(hf, "_norm_forward", self._wrap("norm", hf._norm_forward))
        dec = hf_decode._decode

        def decode(*a, **k):  # the C decode path, counted when it served the call
            r = dec(*a, **k)
            self.n["decode"] += r is not None
            return r
        monkeypatch.setattr(hf_decode, "_decode", decode)

    def _wrap(self, name, f):
        def g(*a, **k):
            self.n[name] += 1
            return f(*a, **k)
        return g

    def __call__(self):
        return hf.use_mamba2c_in_transformers()


def _run(model, ids, ctx, train):
    model.train(train)
    model.zero_grad(set_to_none=True)
    with ctx:
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), grads


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES)
def test_family_logits_and_gradients(case, train, monkeypatch):
    cfg, a, b = _make(case)
    counted = _Counted(monkeypatch)
    ids = torch.randint(3, cfg.vocab_size, (2, 21), generator=torch.Generator().manual_seed(1))
    la, ga = _run(a, ids, _null(), train)
    lb, gb = _run(b, ids, counted(), train)
    assert set(ga) == set(gb)
    errs = {"logits": nerr(lb, la)}
    errs.update({n: nerr(gb[n], ga[n]) for n in ga})
    worst = max(errs.items(), key=lambda kv: kv[1])
    assert worst[1] <= TOL, f"{case}: worst normalised error {worst}"
    fused = counted.n["mamba2_split_conv1d_scan_combined"]
    if train and not case.startswith("falcon_h1"):
        assert fused > 0, f"{case}: the fused training path did not reach mamba2c: {counted.n}"
    else:
        assert fused == 0
        assert counted.n["mamba2_chunk_scan"] > 0 and counted.n["causal_conv1d_fn"] > 0, \
            f"{case}: the scan / conv did not reach mamba2c: {counted.n}"
        if getattr(a.config, "mamba_rms_norm", True):  # Falcon-H1 may have no gated norm
            assert counted.n["norm"] > 0, f"{case}: the gated norm did not reach mamba2c"


@pytest.mark.parametrize("case", CASES)
def test_family_greedy_generation(case, monkeypatch):
    """Prefill and recurrent decode through the family's cache: the same greedy tokens and
    logits as the torch path, with the C decode steps taken."""
    cfg, a, b = _make(case, seed=3, use_cache=True)
    a.eval()
    b.eval()
    counted = _Counted(monkeypatch)
    ids = torch.randint(3, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=5, do_sample=False, output_logits=True, return_dict_in_generate=True,
              pad_token_id=0)
    with torch.no_grad():
        ra = a.generate(ids, **kw)
        with counted():
            rb = b.generate(ids, **kw)
    assert torch.equal(ra.sequences, rb.sequences), case
    for x, y in zip(ra.logits, rb.logits):
        assert nerr(y, x) <= TOL, case
    # every decode token of every Mamba layer on the C decode path (2 rows, 4 decode steps)
    layers = sum(type(m) in hf_decode.mixer_classes(importlib.import_module(type(m).__module__))
                 for m in b.modules())
    assert counted.n["decode"] == 4 * layers > 0, f"{case}: {counted.n}"


def _decode_logits(model, ids, n, hook):
    kw = dict(max_new_tokens=n, do_sample=False, output_logits=True, return_dict_in_generate=True,
              pad_token_id=0)
    with torch.no_grad(), (hf.use_mamba2c_in_transformers() if hook else _null()):
        r = model.generate(ids, **kw)
    return r.sequences, torch.stack(r.logits, 1).float()


@pytest.mark.parametrize("case", CASES)
def test_family_bf16_decode(case, monkeypatch):
    """bfloat16 decode through the hook: every step on the C decode path (the conv and SSD
    steps take the bf16 cache and activations as they are: no fallback to torch under
    strict mode), the logits of each generated token as close to the float32 model's on the
    same tokens as transformers' own bf16 decode is on its tokens."""
    cfg, a, b = _make(case, seed=8, use_cache=True)
    ref = copy.deepcopy(a).float().eval()
    a, b = a.bfloat16().eval(), b.bfloat16().eval()
    ids = torch.randint(3, cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    counted = _Counted(monkeypatch)
    mamba2c.set_strict(True)
    try:
        with counted():
            sh, lh = _decode_logits(b, ids, 5, False)
    finally:
        mamba2c.set_strict(False)
    assert counted.n["decode"] > 0, f"{case}: {counted.n}"
    st, lt = _decode_logits(a, ids, 5, False)
    L = ids.shape[1]
    with torch.no_grad():
        e_hook = nerr(lh, ref(input_ids=sh, use_cache=False).logits[:, L - 1:-1].float())
        e_torch = nerr(lt, ref(input_ids=st, use_cache=False).logits[:, L - 1:-1].float())
    assert e_hook <= 1.25 * e_torch + 1e-3 and e_hook <= 2e-2, (case, e_hook, e_torch)


def test_every_family_module_has_the_seam():
    """The installed transformers has each family's module with the seam (the hook raises
    otherwise); the norm classes found are the family's own."""
    seams = hf._seam_modules()
    names = {mod.__name__.rsplit(".", 1)[-1]: [c.__name__ for c in norms]
             for mod, norms, _ in seams}
    for fam in hf.FAMILIES:
        assert f"modeling_{fam}" in names, fam
        assert len(names[f"modeling_{fam}"]) == 1, names


# transformers' own attention does not keep packed sequences apart in every family: in
# GraniteMoeHybrid's attention layer (sdpa, no position embedding) the packed run attends
# across the sequences. Its packed test runs the Mamba layers alone.
_PACKED_ARGS = {"granitemoehybrid": dict(layer_types=["mamba", "mamba", "mamba"])}


def _packed(model, case, **kw):
    """Logits of a packed batch. transformers 5.24's Mamba2ForCausalLM does not pass seq_idx
    on to its backbone (the packed sequences mix there, silently); its backbone does."""
    if case == "mamba2":
        return model.lm_head(model.backbone(use_cache=False, **kw)[0]).float()
    return model(use_cache=False, **kw).logits


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES)
def test_family_packed_equals_separate(case, train):
    """Padding-free sequences (`seq_idx` and position_ids, as transformers' packed-sequence
    collator passes them; the torch path refuses them with a ValueError): logits and every
    parameter gradient of three packed sequences equal those of the three run separately."""
    cfg, a, _ = _make(case, seed=4, **_PACKED_ARGS.get(case, {}))
    a.train(train)
    lens = [5, 9, 7]
    g = torch.Generator().manual_seed(5)
    seqs = [torch.randint(3, cfg.vocab_size, (1, n), generator=g) for n in lens]
    w = torch.randn(1, sum(lens), cfg.vocab_size, generator=g)
    ids = torch.cat(seqs, 1)
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    seq_idx = torch.cat([torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(lens)])[None]
    with hf.use_mamba2c_in_transformers():
        a.zero_grad(set_to_none=True)
        sep = [a(input_ids=s, use_cache=False).logits for s in seqs]
        (torch.cat(sep, 1) * w).sum().backward()
        g_sep = {n: p.grad.clone() for n, p in a.named_parameters() if p.grad is not None}
        a.zero_grad(set_to_none=True)
        packed = _packed(a, case, input_ids=ids, position_ids=pos, seq_idx=seq_idx)
        (packed * w).sum().backward()
        g_pk = {n: p.grad.clone() for n, p in a.named_parameters() if p.grad is not None}
    errs = {"logits": nerr(packed.detach(), torch.cat(sep, 1).detach())}
    errs.update({n: nerr(g_pk[n], g_sep[n]) for n in g_sep})
    worst = max(errs.items(), key=lambda kv: kv[1])
    assert worst[1] <= TOL, f"{case}: worst normalised error {worst}"
    with pytest.raises(ValueError, match="packed sequences"):
        _packed(a, case, input_ids=ids, position_ids=pos, seq_idx=seq_idx)


@pytest.mark.parametrize("case", CASES)
def test_family_bf16_prefill(case):
    """bfloat16 weights and activations: the hook's logits are as close to the float32 model
    as transformers' own bfloat16 torch path is (the bf16 matrix products dominate both)."""
    cfg, a, b = _make(case, seed=6)
    ids = torch.randint(3, cfg.vocab_size, (2, 21), generator=torch.Generator().manual_seed(1))
    ref = copy.deepcopy(a).float().eval()
    a, b = a.bfloat16().eval(), b.bfloat16().eval()
    with torch.no_grad():
        l32 = ref(input_ids=ids, use_cache=False).logits
        lt = a(input_ids=ids, use_cache=False).logits.float()
        with hf.use_mamba2c_in_transformers():
            lh = b(input_ids=ids, use_cache=False).logits.float()
    e_torch, e_hook = nerr(lt, l32), nerr(lh, l32)
    assert e_hook <= 1.25 * e_torch + 1e-3 and e_hook <= 2e-2, (case, e_hook, e_torch)


# (the families whose own forward runs on "meta": bamba, falcon_h1, nemotron_h and zamba2 call
# Tensor.item() in transformers' attention-mask code, which meta tensors refuse, hook or not)
@pytest.mark.parametrize("case", ["mamba2", "granitemoehybrid"])
def test_family_other_device_left_to_transformers(case, monkeypatch):
    """Tensors on a device mamba2c has no backend for (here "meta") go to transformers' own
    functions inside the hook: the same result as without it, none of ours called."""
    cfg, a, _ = _make(case)
    a = a.to("meta").eval()
    counted = _Counted(monkeypatch)
    ids = torch.randint(3, cfg.vocab_size, (2, 9)).to("meta")
    with torch.no_grad():
        ref = a(input_ids=ids, use_cache=False).logits
        with counted():
            out = a(input_ids=ids, use_cache=False).logits
    assert out.device.type == "meta" and out.shape == ref.shape and out.dtype == ref.dtype
    assert sum(counted.n.values()) == 0, counted.n
