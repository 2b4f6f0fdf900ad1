"""HuggingFace transformers' Mamba-2 with its mixer kernels (scan, conv, gated norm, decode
steps) replaced by mamba2c, against the same model on transformers' own torch path:
same logits and gradients, same training curve. Small random configs, no downloads."""
from __future__ import annotations

import copy
import os
import random

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from transformers import Mamba2Config, Mamba2ForCausalLM  # noqa: E402
from transformers.models.mamba2 import modeling_mamba2  # noqa: E402

import mamba2c  # noqa: E402
from mamba2c import reference as R  # noqa: E402
from mamba2c.hf import use_mamba2c_in_transformers  # noqa: E402
from mamba2c.reference import normalized_error as nerr  # noqa: E402

TOL = 1e-5
transformers.logging.set_verbosity_error()


def _hf_norm_class():
    """The gated norm's class: Mamba2RMSNormGated from 5.25, MambaRMSNormGated in 5.24."""
    for name in mamba2c.hf._NORM_NAMES:
        if hasattr(modeling_mamba2, name):
            return getattr(modeling_mamba2, name)
    raise AssertionError(f"transformers {transformers.__version__} has no gated norm class")


def test_expected_transformers_version():
    """`make test-python` runs this file on two releases; MAMBA2C_EXPECT_TRANSFORMERS names the
    one a run must import (so a PYTHONPATH that did not take effect fails, not passes twice)."""
    want = os.environ.get("MAMBA2C_EXPECT_TRANSFORMERS")
    print(f"\n[transformers {transformers.__version__} from {transformers.__file__}]")
    if want:
        assert transformers.__version__ == want


def test_hook_names_version_and_missing_symbol(monkeypatch):
    """A release that changes the seam fails at use_mamba2c_in_transformers(), with a message
    naming the transformers version and each missing symbol; nothing is left swapped."""
    for name in mamba2c.hf._NORM_NAMES:
        monkeypatch.delattr(modeling_mamba2, name, raising=False)
    monkeypatch.delattr(modeling_mamba2, "mamba2_chunk_scan")
    conv = modeling_mamba2.causal_conv1d_fn
    with pytest.raises(RuntimeError) as e:
        with use_mamba2c_in_transformers():
            pass
    msg = str(e.value)
    assert f"transformers {transformers.__version__} is not supported" in msg
    assert "mamba2_chunk_scan" in msg and "Mamba2RMSNormGated or MambaRMSNormGated" in msg
    assert modeling_mamba2.causal_conv1d_fn is conv


def test_hook_swaps_and_restores_the_norm():
    norm = _hf_norm_class()
    before = norm.forward
    with use_mamba2c_in_transformers():
        assert norm.forward.__wrapped_by_mamba2c__ is mamba2c.hf._norm_forward
    assert norm.forward is before


def tiny_config(n_groups=1, **kw):
    base = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, state_size=16, expand=2,
                head_dim=8, num_heads=8, n_groups=n_groups, conv_kernel=4, chunk_size=8,
                use_cache=False, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                eos_token_id=2)
    base.update(kw)
    return Mamba2Config(**base)


def make_models(cfg, seed=0):
    torch.manual_seed(seed)
    a = Mamba2ForCausalLM(cfg)
    with torch.no_grad():  # make D, norm weights and dt_bias non-trivial
        for m in a.modules():
            if isinstance(m, modeling_mamba2.Mamba2Mixer):
                m.D.normal_(1.0, 0.5)
                m.norm.weight.normal_(1.0, 0.3)
    return a, copy.deepcopy(a)


def _logits_and_grads(model, ids, labels, ours):
    model.zero_grad(set_to_none=True)
    ctx = use_mamba2c_in_transformers() if ours else _null()
    with ctx:
        out = model(input_ids=ids, labels=labels, use_cache=False)
        out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return out.logits.detach(), out.loss.detach(), grads


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_hf_logits_and_gradients_match_torch_path(mode):
    """train: HF calls the fused mamba_split_conv1d_scan_combined (ours) vs its torch path;
    eval: HF calls conv1d, chunk scan and the gated norm separately."""
    cfg = tiny_config(n_groups=1)
    ref_model, our_model = make_models(cfg)
    for m in (ref_model, our_model):
        m.train(mode == "train")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, cfg.vocab_size, (2, 29), generator=g)
    la, loss_a, ga = _logits_and_grads(ref_model, ids, ids, ours=False)
    lb, loss_b, gb = _logits_and_grads(our_model, ids, ids, ours=True)
    errs = {"logits": nerr(lb, la), "loss": abs(loss_b.item() - loss_a.item()) / abs(loss_a.item())}
    errs.update({n: nerr(gb[n], ga[n]) for n in ga})
    worst = max(errs.items(), key=lambda kv: kv[1])
    assert worst[1] <= TOL, f"worst normalised error {worst}"


def test_hf_decoding_with_mamba2c_kernels():
    """Generation (prefill + recurrent steps through the HF cache) with our kernels gives
    the same tokens and logits as transformers' torch path."""
    cfg = tiny_config(n_groups=2, use_cache=True)
    a, b = make_models(cfg, seed=3)
    a.eval()
    b.eval()
    ids = torch.randint(3, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True,
              pad_token_id=0)
    with torch.no_grad():
        ra = a.generate(ids, **kw)
        with use_mamba2c_in_transformers():
            rb = b.generate(ids, **kw)
    assert torch.equal(ra.sequences, rb.sequences)
    for x, y in zip(ra.logits, rb.logits):
        assert nerr(y, x) <= TOL


def test_gated_norm_groups_follow_mamba_ssm():
    """With n_groups > 1 the gated RMSNorm statistics are per group of d_inner/n_groups
    (mamba_ssm). A whole-row norm (what older transformers releases computed whatever
    n_groups was) is a different function; ours is the grouped one, and the installed
    transformers is checked for which one it implements."""
    d_inner, ngroups = 64, 4
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 5, d_inner, generator=g)
    z = torch.randn(3, 5, d_inner, generator=g)
    w = 1 + 0.3 * torch.randn(d_inner, generator=g)
    grouped = R.rmsnorm_gated(x.double(), w.double(), None, z.double(), 1e-5, d_inner // ngroups)
    whole_row = R.rmsnorm_gated(x.double(), w.double(), None, z.double(), 1e-5, None)
    ours = mamba2c.rmsnorm_fn(x, w, None, z=z, eps=1e-5, group_size=d_inner // ngroups,
                              norm_before_gate=False)
    assert nerr(ours, grouped) <= TOL
    assert nerr(whole_row, grouped) > 1e-2  # the two conventions really differ

    hf_norm = _hf_norm_class()(d_inner, group_size=d_inner // ngroups, eps=1e-5)
    with torch.no_grad():
        hf_norm.weight.copy_(w)
        hf = hf_norm(x, z)
    hf_is_grouped = nerr(hf, grouped) <= TOL
    hf_is_whole_row = nerr(hf, whole_row) <= TOL
    assert hf_is_grouped or hf_is_whole_row
    print(f"\n[transformers {transformers.__version__}] {_hf_norm_class().__name__} is "
          f"{'grouped (= mamba_ssm)' if hf_is_grouped else 'whole-row (differs from mamba_ssm)'}")

    # whole models with n_groups = 4: ours equals the torch path exactly when HF is grouped
    cfg = tiny_config(n_groups=4)
    a, b = make_models(cfg, seed=5)
    ids = torch.randint(3, cfg.vocab_size, (2, 16), generator=g)
    with torch.no_grad():
        la = a(input_ids=ids).logits
        with use_mamba2c_in_transformers():
            lb = b(input_ids=ids).logits
    if hf_is_grouped:
        assert nerr(lb, la) <= TOL
    else:
        assert nerr(lb, la) > 1e-3


# ---- training ---------------------------------------------------------------------------

def generated_corpus(n_lines=400, seed=0) -> str:
    """Deterministic text the test generates: little arithmetic and counting sentences."""
    rnd = random.Random(seed)
    words = ["mamba", "state", "scan", "chunk", "head", "group", "token", "conv"]
    lines = []
    for i in range(n_lines):
        a, b = rnd.randint(0, 49), rnd.randint(0, 49)
        w = rnd.choice(words)
        lines.append(f"{a} + {b} = {a + b}; {w} {w}s: {' '.join(str(i % 7 + k) for k in range(3))}.")
    return "\n".join(lines)


def test_training_run_same_loss_curve():
    text = generated_corpus()
    data = torch.tensor([min(ord(c), 95) for c in text], dtype=torch.long)
    cfg = tiny_config(n_groups=1, vocab_size=96)
    a, b = make_models(cfg, seed=6)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.0) for m in (a, b)]
    g = torch.Generator().manual_seed(7)
    T, Bsz, steps = 48, 8, 60
    curves = ([], [])
    for step in range(steps):
        starts = torch.randint(0, data.numel() - T - 1, (Bsz,), generator=g)
        batch = torch.stack([data[s:s + T] for s in starts])
        for k, (m, opt) in enumerate(zip((a, b), opts)):
            m.train()
            ctx = use_mamba2c_in_transformers() if k == 1 else _null()
            with ctx:
                loss = m(input_ids=batch, labels=batch, use_cache=False).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
            opt.step()
            curves[k].append(loss.item())
    first_a, first_b = (sum(c[:5]) / 5 for c in curves)
    last_a, last_b = (sum(c[-5:]) / 5 for c in curves)
    print(f"\n[training {steps} steps] mean loss of first/last 5 steps: torch path "
          f"{first_a:.4f} -> {last_a:.4f}; mamba2c kernels {first_b:.4f} -> {last_b:.4f}")
    assert last_a < 0.6 * first_a and last_b < 0.6 * first_b
    rel = max(abs(x - y) / abs(x) for x, y in zip(*curves))
    assert rel < 1e-3, f"loss curves diverge: max relative difference {rel:.2e}"
