"""mamba2c.models.MambaLMHeadModel: mamba_ssm's config and state-dict layout, generate()
against a step-by-step full-forward argmax, save/load round trip, HF conversion."""
from __future__ import annotations

import json

import pytest
import torch

from mamba2c.models import MambaConfig, MambaLMHeadModel
from mamba2c.reference import normalized_error as nerr


def _cfg(**kw):
    base = dict(d_model=32, n_layer=3, d_intermediate=0, vocab_size=101,
                ssm_cfg={"layer": "Mamba2", "d_state": 16, "headdim": 16, "ngroups": 2,
                         "chunk_size": 8},
                rms_norm=True, residual_in_fp32=True, fused_add_norm=True,
                pad_vocab_size_multiple=8, tie_embeddings=True)
    base.update(kw)
    return MambaConfig(**base)


def _expected_keys(cfg: MambaConfig):
    """mamba_ssm's MambaLMHeadModel state-dict keys, written out from its module tree."""
    keys = ["backbone.embedding.weight"]
    for i in range(cfg.n_layer):
        p = f"backbone.layers.{i}."
        keys.append(p + "norm.weight")
        if not cfg.rms_norm:
            keys.append(p + "norm.bias")
        keys += [p + "mixer." + k for k in ("in_proj.weight", "conv1d.weight", "conv1d.bias",
                                            "dt_bias", "A_log", "D", "norm.weight",
                                            "out_proj.weight")]
        if cfg.d_intermediate:
            keys.append(p + "norm2.weight")
            if not cfg.rms_norm:
                keys.append(p + "norm2.bias")
            keys += [p + "mlp.fc1.weight", p + "mlp.fc2.weight"]
    keys.append("backbone.norm_f.weight")
    if not cfg.rms_norm:
        keys.append("backbone.norm_f.bias")
    keys.append("lm_head.weight")
    return keys


@pytest.mark.parametrize("kw", [{}, {"d_intermediate": 40, "rms_norm": False,
                                     "tie_embeddings": False}])
def test_state_dict_keys_and_shapes(kw):
    cfg = _cfg(**kw)
    m = MambaLMHeadModel(cfg)
    sd = m.state_dict()
    assert sorted(sd) == sorted(_expected_keys(cfg)) and len(sd) == len(_expected_keys(cfg))
    V = 104  # 101 padded to a multiple of 8
    assert sd["backbone.embedding.weight"].shape == (V, 32) and sd["lm_head.weight"].shape == (V, 32)
    assert (m.lm_head.weight is m.backbone.embedding.weight) == cfg.tie_embeddings
    d_in_proj = 2 * 64 + 2 * 2 * 16 + 4
    assert sd["backbone.layers.0.mixer.in_proj.weight"].shape == (d_in_proj, 32)
    if cfg.d_intermediate:
        assert sd["backbone.layers.0.mlp.fc1.weight"].shape == (2 * 128, 32)  # 40 -> 128


def test_mamba1_and_attention_configs_raise():
    with pytest.raises(NotImplementedError, match="Mamba2"):
        MambaLMHeadModel(_cfg(ssm_cfg={"d_state": 16}))
    with pytest.raises(NotImplementedError, match="attention"):
        MambaLMHeadModel(_cfg(attn_layer_idx=[1]))


@pytest.mark.parametrize("kw", [{}, {"fused_add_norm": False, "residual_in_fp32": False},
                                {"d_intermediate": 40}])
def test_generate_greedy_equals_full_forward_argmax(kw):
    torch.manual_seed(0)
    m = MambaLMHeadModel(_cfg(**kw)).eval()
    ids = torch.randint(0, 101, (2, 7))
    out = m.generate(ids, max_length=7 + 9)
    assert out.shape == (2, 16) and torch.equal(out[:, :7], ids)
    seq = ids
    with torch.no_grad():
        for _ in range(9):
            nxt = m(seq).logits[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], 1)
    assert torch.equal(out, seq)
    # the decode logits equal the full forward's at every step (to float32 rounding)
    r = m.generate(ids, max_length=12, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        full = m(r.sequences).logits
    for i, sc in enumerate(r.scores):
        assert nerr(sc, full[:, 6 + i]) <= 1e-5, i


def test_generate_sampling_and_stopping():
    torch.manual_seed(1)
    m = MambaLMHeadModel(_cfg()).eval()
    ids = torch.randint(0, 101, (3, 4))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = m.generate(ids, 12, top_k=0, top_p=0.9, temperature=0.7, generator=g1, vocab_size=101)
    b = m.generate(ids, 12, top_k=0, top_p=0.9, temperature=0.7, generator=g2, vocab_size=101)
    assert torch.equal(a, b) and a.shape == (3, 12) and int(a.max()) < 101
    c = m.generate(ids, 12, top_k=5, generator=torch.Generator().manual_seed(2))
    assert c.shape == (3, 12)
    assert m.generate(ids, 2).shape == (3, 5)          # max_length <= L: one new token
    greedy = m.generate(ids[:1], 12)
    first = int(greedy[0, 4])
    assert m.generate(ids[:1], 12, eos_token_id=first).shape == (1, 5)

    class Rec:
        def __init__(self):
            self.got, self.ended = [], 0

        def put(self, v):
            self.got.append(v.clone())

        def end(self):
            self.ended += 1
    s = Rec()
    out = m.generate(ids, 9, streamer=s)
    assert s.ended == 1 and len(s.got) == 1 + 5 and torch.equal(s.got[0], ids)
    assert torch.equal(torch.stack(s.got[1:], 1), out[:, 4:])


@pytest.mark.parametrize("safe", [True, False])
def test_save_pretrained_round_trip(tmp_path, safe):
    if safe:
        pytest.importorskip("safetensors")
    torch.manual_seed(2)
    m = MambaLMHeadModel(_cfg()).eval()
    m.save_pretrained(str(tmp_path), safe_serialization=safe)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["config.json", "model.safetensors" if safe else "pytorch_model.bin"])
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["d_model"] == 32 and cfg["ssm_cfg"]["layer"] == "Mamba2"
    m2 = MambaLMHeadModel.from_pretrained(str(tmp_path)).eval()
    assert m2.lm_head.weight is m2.backbone.embedding.weight
    for (k, v), (k2, v2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert k == k2 and torch.equal(v, v2), k
    ids = torch.randint(0, 101, (1, 5))
    assert torch.equal(m.generate(ids, 10), m2.generate(ids, 10))
    with pytest.raises(FileNotFoundError):
        MambaLMHeadModel.from_pretrained(str(tmp_path / "missing"))


def test_from_transformers_same_logits_and_tokens():
    transformers = pytest.importorskip("transformers")
    from mamba2c.models import from_transformers
    torch.manual_seed(3)
    cfg = transformers.Mamba2Config(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                    state_size=16, expand=2, head_dim=16, num_heads=4, n_groups=2,
                                    chunk_size=8, conv_kernel=4, tie_word_embeddings=False,
                                    rescale_prenorm_residual=False)
    hf = transformers.Mamba2ForCausalLM(cfg).eval()
    m = from_transformers(hf)
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        assert nerr(m(ids).logits, hf(ids).logits) <= 1e-5
    out = m.generate(ids, 15)
    ref = hf.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(out, ref)


def _decoders(m, ids, n):
    """Two decoders over identical prefilled caches: the replayed plan and the generic
    per-op path (plan disabled)."""
    from mamba2c.models.generation import _Decoder
    from mamba2c.nn import InferenceParams
    out = []
    for use_plan in (True, False):
        caches = m.allocate_inference_cache(ids.shape[0], ids.shape[1] + n, dtype=torch.float32)
        ip = InferenceParams(ids.shape[1] + n, ids.shape[0], key_value_memory_dict=caches)
        m(ids, inference_params=ip, num_last_tokens=1)
        d = _Decoder(m, caches)
        if not use_plan:
            d.plan = False
        out.append(d)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kw", [{}, {"fused_add_norm": False},
                                {"ssm_cfg": {"layer": "Mamba2", "d_state": 16, "headdim": 16,
                                             "ngroups": 1, "chunk_size": 8, "bias": True,
                                             "conv_bias": False, "D_has_hdim": True}}])
def test_replayed_decode_plan_equals_per_op_path(dtype, kw):
    """generation's DecodePlan (descriptors packed once, buffers reused) computes the same
    logits, bit for bit, as the per-op decode path, and leaves the same caches."""
    torch.manual_seed(4)
    m = MambaLMHeadModel(_cfg(**kw)).to(dtype).eval()
    ids = torch.randint(0, 101, (2, 6))
    with torch.inference_mode():
        dp, dg = _decoders(m, ids, 5)
        tok = ids[:, -1]
        for i in range(5):
            a, b = dp.step(tok), dg.step(tok)
            assert dp.plan and dg.plan is False
            assert a.dtype == b.dtype == dtype and torch.equal(a, b), i
            tok = a.argmax(-1)
        for lp, lg in zip(dp.layers, dg.layers):
            assert torch.equal(lp.conv_state, lg.conv_state)
            assert torch.equal(lp.ssm_state, lg.ssm_state)


def test_decode_plan_not_used_where_it_does_not_apply():
    torch.manual_seed(5)
    for kw in ({"d_intermediate": 40}, {"fused_add_norm": False, "residual_in_fp32": False},
               {"rms_norm": False}):
        m = MambaLMHeadModel(_cfg(**kw)).eval()
        ids = torch.randint(0, 101, (1, 4))
        with torch.inference_mode():
            d, _ = _decoders(m, ids, 2)
            d.step(ids[:, -1])
        assert d.plan is False, kw


def test_generate_bf16_tokens_follow_the_bf16_forward():
    """bf16 weights: the decode logits agree with the bf16 full forward to bf16 rounding."""
    torch.manual_seed(6)
    m = MambaLMHeadModel(_cfg(fused_add_norm=False)).to(torch.bfloat16).eval()
    ids = torch.randint(0, 101, (2, 7))
    r = m.generate(ids, max_length=12, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        full = m(r.sequences).logits
    for i, sc in enumerate(r.scores):
        assert nerr(sc.float(), full[:, 6 + i].float()) <= 3e-2, i


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kw", [{}, {"fused_add_norm": False},
                                {"ssm_cfg": {"layer": "Mamba2", "d_state": 16,
                                             "headdim": 16, "ngroups": 2, "chunk_size": 8,
                                             "bias": True, "conv_bias": False,
                                             "D_has_hdim": True}}])
def test_block_step_plan_equals_per_op_replay(kw, dtype, monkeypatch):
    """A float32 or bfloat16 model's plan runs one mamba2_block_step per layer (bf16: with
    the block step's bf16 roundings); it gives the bits of the per-op replay
    (MAMBA2C_BLOCK_STEP=0) and of the generic path, caches included."""
    torch.manual_seed(6)
    m = MambaLMHeadModel(_cfg(**kw)).to(dtype).eval()
    ids = torch.randint(0, 101, (3, 5))
    with torch.inference_mode():
        db, dg = _decoders(m, ids, 4)
        dr, _ = _decoders(m, ids, 4)
        tok = ids[:, -1]
        for i in range(4):  # (each plan is built at its decoder's first step)
            monkeypatch.setenv("MAMBA2C_BLOCK_STEP", "1")
            a = db.step(tok)
            monkeypatch.setenv("MAMBA2C_BLOCK_STEP", "0")
            b, c = dr.step(tok), dg.step(tok)
            assert db.plan.block_road and not dr.plan.block_road
            assert (db.plan.blocks is not None or db.plan._blocks) and not dr.plan._blocks
            assert torch.equal(a, b) and torch.equal(a, c), i
            tok = a.argmax(-1)
        for lb, lr in zip(db.layers, dr.layers):
            assert torch.equal(lb.conv_state, lr.conv_state)
            assert torch.equal(lb.ssm_state, lr.ssm_state)
