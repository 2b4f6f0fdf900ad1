"""mamba2c.models.from_gguf / save_gguf: llama.cpp's Mamba-2 GGUF layout (the keys, tensor
names, ggml shapes and types llama.cpp's convert_hf_to_gguf.py writes and
llama_model_mamba2::load_arch_tensors reads), a tiny random model round-tripped in f32, f16,
bf16 and Q8_0 (same logits: bit-exact in f32, within measured bounds otherwise), the config
from the metadata, and the refusals (another architecture, truncated files, unsupported
tensor types, missing / extra tensors, shape mismatches)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from mamba2c.models import MambaConfig, MambaLMHeadModel, from_gguf, save_gguf  # noqa: E402

QT = gguf.GGMLQuantizationType

# Logit-error bounds for the tiny model below (random init, 2 layers, 48 tokens), as
# (||out - ref|| / ||ref||, max|out - ref| / max|ref|), 2.4-3.5x the largest values measured
# over 6 seeds x tied/untied (2026-12-03: f16 5.8e-4 / 8.5e-4, bf16 4.6e-3 / 6.5e-3,
# q8_0 1.32e-2 / 2.5e-2). f32 is exact.
BOUNDS = {"f16": (2e-3, 3e-3), "bf16": (1.5e-2, 2e-2), "q8_0": (4e-2, 6e-2)}
MATRIX_TYPE = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0}


def _model(seed=0, tie=True, eps=None, **ssm):
    torch.manual_seed(seed)
    ssm_cfg = {"layer": "Mamba2", "d_state": 16, "headdim": 16, "ngroups": 2, "chunk_size": 16}
    ssm_cfg.update(ssm)
    cfg = MambaConfig(d_model=64, n_layer=2, d_intermediate=0, vocab_size=100, ssm_cfg=ssm_cfg,
                      rms_norm=True, residual_in_fp32=True, fused_add_norm=True,
                      pad_vocab_size_multiple=8, tie_embeddings=tie)
    m = MambaLMHeadModel(cfg).eval()
    with torch.no_grad():  # non-trivial norms, D, conv bias (init leaves some at 1 / 0)
        for p in m.parameters():
            if p.dim() == 1 and p is not m.backbone.embedding.weight:
                p.add_(0.1 * torch.randn_like(p))
    if eps is not None:
        for blk in m.backbone.layers:
            blk.norm.eps = blk.mixer.norm.eps = eps
        m.backbone.norm_f.eps = eps
    return m


def _logits(m, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (2, 48), generator=g)  # below every vocab here
    with torch.no_grad():
        return m(ids).logits


def _expected_layout(m, dtype):
    """{tensor name: (ggml shape ne, ggml type)} as llama.cpp's converter writes them."""
    c, mx = m.config, m.backbone.layers[0].mixer
    d, di, N, H, G, K = c.d_model, mx.d_inner, mx.d_state, mx.nheads, mx.ngroups, mx.d_conv
    V = m.backbone.embedding.weight.shape[0]
    mt, F32 = MATRIX_TYPE[dtype], QT.F32
    out = {"token_embd.weight": ((d, V), mt), "output_norm.weight": ((d,), F32)}
    if not c.tie_embeddings:
        out["output.weight"] = ((d, V), mt)
    for i in range(c.n_layer):
        p = f"blk.{i}."
        out.update({p + "attn_norm.weight": ((d,), F32),
                    p + "ssm_in.weight": ((d, 2 * di + 2 * G * N + H), mt),
                    p + "ssm_conv1d.weight": ((K, di + 2 * G * N), F32),
                    p + "ssm_conv1d.bias": ((di + 2 * G * N,), F32),
                    p + "ssm_dt.bias": ((H,), F32), p + "ssm_a": ((1, H), F32),
                    p + "ssm_d": ((1, H), F32), p + "ssm_norm.weight": ((di // G, G), F32),
                    p + "ssm_out.weight": ((di, d), mt)})
    return out


def _cfg_tuple(m):
    c, mx = m.config, m.backbone.layers[0].mixer
    return (c.d_model, c.n_layer, mx.d_state, mx.headdim, mx.ngroups, mx.d_conv, mx.expand,
            m.backbone.embedding.weight.shape[0], c.tie_embeddings, m.backbone.norm_f.eps,
            mx.norm.eps, m.backbone.layers[1].norm.eps, mx.chunk_size)


# -- round trips ------------------------------------------------------------------------

@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0"])
def test_round_trip(tmp_path, dtype, tie):
    m = _model(tie=tie)
    path = tmp_path / f"m-{dtype}.gguf"
    save_gguf(m, path, dtype=dtype)
    m2 = from_gguf(path)
    assert _cfg_tuple(m2) == _cfg_tuple(m)
    assert m2.config.tie_embeddings == tie
    assert (m2.lm_head.weight is m2.backbone.embedding.weight) == tie
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" and p.requires_grad
               for p in m2.parameters())
    assert all(blk.mixer.A_log._no_weight_decay for blk in m2.backbone.layers)
    ref, out = _logits(m), _logits(m2)
    sd, sd2 = m.state_dict(), m2.state_dict()
    for k, v in sd.items():
        w = sd2[k]
        assert w.shape == v.shape, k
        if k.endswith("A_log"):  # stored as A = -exp(A_log); recovered so A is bit-exact
            assert torch.equal(-torch.exp(w), -torch.exp(v)), k
        elif dtype == "f32" or v.dim() == 1 or "conv1d" in k:  # float32 in every file
            assert torch.equal(w, v), k
        elif dtype in ("f16", "bf16"):
            tdt = torch.float16 if dtype == "f16" else torch.bfloat16
            assert torch.equal(w, v.to(tdt).float()), k
        else:  # Q8_0: blocks of 32 along a row, scale = amax/127 rounded to f16
            blocks, got = v.reshape(-1, 32), w.reshape(-1, 32)
            # |q*f16(d) - x| <= d/2 + 127*|f16(d) - d|, |f16(d) - d| <= d * 2**-11
            d = blocks.abs().amax(1, keepdim=True) / 127
            assert bool(((got - blocks).abs() <= d * (0.5 + 127 * 2 ** -11) * (1 + 1e-6)).all()), k
    if dtype == "f32":
        assert torch.equal(out, ref)
    else:
        nerr = ((out - ref).norm() / ref.norm()).item()
        maxerr = ((out - ref).abs().max() / ref.abs().max()).item()
        print(f"\n{dtype} tie={tie}: logits normalized error {nerr:.2e}, max {maxerr:.2e}")
        assert nerr <= BOUNDS[dtype][0] and maxerr <= BOUNDS[dtype][1], (nerr, maxerr)
        assert nerr > 0  # the rounding did happen


@pytest.mark.parametrize("dtype", ["f32", "q8_0"])
def test_file_layout_is_llama_cpp(tmp_path, dtype):
    """The keys, tensor names, ggml shapes and types llama.cpp's mamba2 loader expects."""
    m = _model(tie=False)
    path = tmp_path / "m.gguf"
    save_gguf(m, path, dtype=dtype)
    r = gguf.GGUFReader(path)
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert f["general.architecture"] == "mamba2"
    assert {k: f[k] for k in [
        "mamba2.embedding_length", "mamba2.block_count", "mamba2.ssm.conv_kernel",
        "mamba2.ssm.inner_size", "mamba2.ssm.state_size", "mamba2.ssm.time_step_rank",
        "mamba2.ssm.group_count", "mamba2.context_length", "mamba2.feed_forward_length",
        "mamba2.attention.head_count", "general.file_type", "mamba2.vocab_size"]} == {
        "mamba2.embedding_length": 64, "mamba2.block_count": 2, "mamba2.ssm.conv_kernel": 4,
        "mamba2.ssm.inner_size": 128, "mamba2.ssm.state_size": 16,
        "mamba2.ssm.time_step_rank": 8, "mamba2.ssm.group_count": 2,
        "mamba2.context_length": 2 ** 20, "mamba2.feed_forward_length": 0,
        "mamba2.attention.head_count": 0,
        "general.file_type": {"f32": 0, "q8_0": 7}[dtype], "mamba2.vocab_size": 104}
    assert f["mamba2.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5, rel=1e-6)
    assert f["tokenizer.ggml.model"] == "none"
    got = {t.name: (tuple(int(x) for x in t.shape), t.tensor_type) for t in r.tensors}
    assert got == _expected_layout(m, dtype)
    a = next(t for t in r.tensors if t.name == "blk.1.ssm_a").data.reshape(-1)
    assert np.array_equal(a, (-torch.exp(m.backbone.layers[1].mixer.A_log.detach())).numpy())


def test_config_from_metadata(tmp_path):
    """Other dims, eps 1e-6, ngroups 1, d_conv 3, default chunk size: all from the file."""
    torch.manual_seed(3)
    cfg = MambaConfig(d_model=32, n_layer=2, vocab_size=64, pad_vocab_size_multiple=1,
                      ssm_cfg={"layer": "Mamba2", "d_state": 8, "headdim": 8, "ngroups": 1,
                               "d_conv": 3, "expand": 4}, tie_embeddings=False)
    m = MambaLMHeadModel(cfg).eval()
    for blk in m.backbone.layers:
        blk.norm.eps = blk.mixer.norm.eps = 1e-6
    m.backbone.norm_f.eps = 1e-6
    save_gguf(m, tmp_path / "c.gguf")
    m2 = from_gguf(tmp_path / "c.gguf")
    assert _cfg_tuple(m2) == _cfg_tuple(m)
    assert m2.backbone.norm_f.eps == 1e-6 and m2.backbone.layers[0].mixer.chunk_size == 256
    assert torch.equal(_logits(m2), _logits(m))
    m3 = from_gguf(str(tmp_path / "c.gguf"), dtype=torch.bfloat16, chunk_size=32)
    assert m3.lm_head.weight.dtype == torch.bfloat16
    assert m3.backbone.layers[0].mixer.chunk_size == 32


def test_generate_from_loaded_model(tmp_path):
    m = _model()
    save_gguf(m, tmp_path / "g.gguf")
    m2 = from_gguf(tmp_path / "g.gguf")
    ids = torch.randint(0, 100, (1, 5), generator=torch.Generator().manual_seed(0))
    assert torch.equal(m2.generate(ids, max_length=12), m.generate(ids, max_length=12))


# -- crafted files (written here with gguf-py directly, the converter's way) ------------

def _write(path, m, arch="mamba2", types=None, drop=(), extra=(), meta=None, drop_keys=()):
    """m's weights in llama.cpp's layout; types: {tensor: GGMLQuantizationType}; meta:
    {key suffix after 'mamba2.': int value} overrides."""
    c, mx = m.config, m.backbone.layers[0].mixer
    keys = {"embedding_length": c.d_model, "block_count": c.n_layer,
            "ssm.conv_kernel": mx.d_conv, "ssm.inner_size": mx.d_inner,
            "ssm.state_size": mx.d_state, "ssm.time_step_rank": mx.nheads,
            "ssm.group_count": mx.ngroups}
    keys.update(meta or {})
    w = gguf.GGUFWriter(str(path), arch)
    for k, v in keys.items():
        if k not in drop_keys:
            w.add_uint32(f"{arch}.{k}", v)
    if "eps" not in drop_keys:
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("none")
    sd = {k: v.detach().float() for k, v in m.state_dict().items()}
    arrays = {"token_embd.weight": sd["backbone.embedding.weight"],
              "output_norm.weight": sd["backbone.norm_f.weight"]}
    if not c.tie_embeddings:
        arrays["output.weight"] = sd["lm_head.weight"]
    for i in range(c.n_layer):
        p, q = f"blk.{i}.", f"backbone.layers.{i}."
        arrays.update({
            p + "attn_norm.weight": sd[q + "norm.weight"],
            p + "ssm_in.weight": sd[q + "mixer.in_proj.weight"],
            p + "ssm_conv1d.weight": sd[q + "mixer.conv1d.weight"].squeeze(1),
            p + "ssm_conv1d.bias": sd[q + "mixer.conv1d.bias"],
            p + "ssm_dt.bias": sd[q + "mixer.dt_bias"],
            p + "ssm_a": -torch.exp(sd[q + "mixer.A_log"]).reshape(-1, 1),
            p + "ssm_d": sd[q + "mixer.D"].reshape(-1, 1),
            p + "ssm_norm.weight": sd[q + "mixer.norm.weight"].reshape(mx.ngroups, -1),
            p + "ssm_out.weight": sd[q + "mixer.out_proj.weight"]})
    for name in extra:
        arrays[name] = torch.zeros(4)
    for name, t in arrays.items():
        if name in drop:
            continue
        qt = (types or {}).get(name, QT.F32)
        a = t.numpy()
        if qt in (QT.F64, QT.I32):
            w.add_tensor(name, a.astype(np.float64 if qt == QT.F64 else np.int32))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_converter_style_file_loads(tmp_path):
    """A file written independently of save_gguf (no mamba2c.chunk_size key, tied: no
    output.weight, f16 matrices) loads with the same logits as its weights."""
    m = _model(chunk_size=256)
    mats = ["token_embd.weight"] + [f"blk.{i}.ssm_{n}.weight" for i in range(2)
                                    for n in ("in", "out")]
    p = _write(tmp_path / "conv.gguf", m, types={n: QT.F16 for n in mats})
    m2 = from_gguf(p)
    assert m2.config.tie_embeddings and m2.backbone.layers[0].mixer.chunk_size == 256
    with torch.no_grad():
        for name, prm in m.named_parameters():
            if name.endswith(("in_proj.weight", "out_proj.weight", "embedding.weight")):
                prm.copy_(prm.half().float())
    assert torch.equal(_logits(m2), _logits(m))


def test_refuses_other_architecture(tmp_path):
    p = _write(tmp_path / "llama.gguf", _model(), arch="llama")
    with pytest.raises(ValueError, match=r"architecture 'llama'.*'mamba2'"):
        from_gguf(p)
    w = gguf.GGUFWriter(str(tmp_path / "mamba1.gguf"), "mamba")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"architecture 'mamba'"):
        from_gguf(tmp_path / "mamba1.gguf")


def test_refuses_truncated_files(tmp_path):
    good = tmp_path / "good.gguf"
    save_gguf(_model(tie=False), good, dtype="q8_0")
    data = good.read_bytes()
    r = gguf.GGUFReader(good)
    start = r.data_offset
    last = max(r.tensors, key=lambda t: t.data_offset)
    del r
    # empty, inside the magic, the version, the counts, the metadata, the tensor infos,
    # at the start of the data, inside a tensor, one byte short of the last tensor's end
    cuts = [0, 3, 6, 20, 60, 200, start - 40, start, start + 1000,
            last.data_offset + 17, last.data_offset + last.n_bytes - 1]
    assert sorted(set(cuts)) == cuts and cuts[-1] > cuts[-2]
    for n in cuts:
        bad = tmp_path / f"cut{n}.gguf"
        bad.write_bytes(data[:n])
        with pytest.raises(ValueError, match=r"truncated|not a readable GGUF") as e:
            from_gguf(bad)
        assert str(bad) in str(e.value)
    with pytest.raises(ValueError, match="not a readable GGUF"):
        (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all" * 10)
        from_gguf(tmp_path / "junk.gguf")
    assert torch.equal(_logits(from_gguf(good)), _logits(from_gguf(good)))


@pytest.mark.parametrize("qt", [QT.Q4_0, QT.Q5_1, QT.F64, QT.I32])
def test_refuses_unsupported_tensor_type(tmp_path, qt):
    p = _write(tmp_path / "t.gguf", _model(), types={"blk.1.ssm_in.weight": qt})
    with pytest.raises(ValueError, match=rf"'blk.1.ssm_in.weight' has type {qt.name}"):
        from_gguf(p)


def test_refuses_missing_extra_and_misshapen(tmp_path):
    m = _model()
    with pytest.raises(ValueError, match=r"lacks the tensor\(s\) \['blk.1.ssm_d'\]"):
        from_gguf(_write(tmp_path / "a.gguf", m, drop=["blk.1.ssm_d"]))
    with pytest.raises(ValueError, match=r"lacks the tensor 'token_embd.weight'"):
        from_gguf(_write(tmp_path / "b.gguf", m, drop=["token_embd.weight"]))
    with pytest.raises(ValueError, match=r"does not use: \['blk.2.ssm_in.weight'\]"):
        from_gguf(_write(tmp_path / "c.gguf", m, extra=["blk.2.ssm_in.weight"]))
    with pytest.raises(ValueError, match=r"'blk.0.ssm_in.weight' has ggml shape \[64, 328\], "
                                         r"the metadata gives \[64, 392\]"):
        from_gguf(_write(tmp_path / "d.gguf", m, meta={"ssm.state_size": 32}))
    with pytest.raises(ValueError, match=r"lacks the tensor\(s\) \['blk.2.attn_norm"):
        from_gguf(_write(tmp_path / "e.gguf", m, meta={"block_count": 3}))
    with pytest.raises(ValueError, match=r"lacks the metadata key 'mamba2.ssm.group_count'"):
        from_gguf(_write(tmp_path / "f.gguf", m, drop_keys=["ssm.group_count"]))
    with pytest.raises(ValueError, match=r"layer_norm_rms_epsilon"):
        from_gguf(_write(tmp_path / "g.gguf", m, drop_keys=["eps"]))
    with pytest.raises(ValueError, match=r"inconsistent dimensions"):
        from_gguf(_write(tmp_path / "h.gguf", m, meta={"ssm.time_step_rank": 7}))
    with torch.no_grad():
        m.backbone.layers[0].mixer.A_log.fill_(float("-inf"))  # A = -0: log(-A) undefined
    with pytest.raises(ValueError, match=r"blk.0.ssm_a must be finite and < 0"):
        from_gguf(_write(tmp_path / "i.gguf", m))
    with pytest.raises(FileNotFoundError):
        from_gguf(tmp_path / "nope.gguf")
    with pytest.raises(TypeError, match="path"):
        from_gguf(123)


def test_save_refusals(tmp_path):
    m = _model()
    with pytest.raises(ValueError, match=r"dtype 'q4_0'"):
        save_gguf(m, tmp_path / "x.gguf", dtype="q4_0")
    with pytest.raises(TypeError, match="dtype"):
        save_gguf(m, tmp_path / "x.gguf", dtype=torch.int8)
    save_gguf(m, tmp_path / "y.gguf", dtype=torch.bfloat16)
    assert gguf.GGUFReader(tmp_path / "y.gguf").fields["general.file_type"].contents() == 32
    cfg = MambaConfig(d_model=32, n_layer=1, vocab_size=64, d_intermediate=48,
                      ssm_cfg={"layer": "Mamba2", "d_state": 8, "headdim": 8})
    with pytest.raises(ValueError, match=r"cannot represent.*d_intermediate=48"):
        save_gguf(MambaLMHeadModel(cfg), tmp_path / "mlp.gguf")
    cfg = MambaConfig(d_model=32, n_layer=1, vocab_size=64,
                      ssm_cfg={"layer": "Mamba2", "d_state": 8, "headdim": 8,
                               "conv_bias": False, "dt_limit": (0.0, 0.1)})
    with pytest.raises(ValueError, match=r"conv_bias=False.*dt_limit"):
        save_gguf(MambaLMHeadModel(cfg), tmp_path / "nb.gguf")
    m.backbone.norm_f.eps = 1e-6
    with pytest.raises(ValueError, match=r"one eps"):
        save_gguf(m, tmp_path / "eps.gguf")
    with pytest.raises(TypeError, match="MambaLMHeadModel"):
        save_gguf(torch.nn.Linear(2, 2), tmp_path / "lin.gguf")
    left = sorted(os.listdir(tmp_path))
    assert left == ["y.gguf"], left  # no partial or temporary files
