"""hf.py — run HuggingFace transformers' Mamba-2 mixers on mamba2c: the mamba2 family
(Mamba2, Codestral) and the hybrids Bamba, FalconH1, GraniteMoeHybrid (Granite 4.0-H),
NemotronH and Zamba2, whose modeling modules share one seam.

Each family's Mamba-2 mixer calls five module-level kernels (the mamba_ssm / causal-conv1d
functions when those packages are installed, else its own torch code) and a gated RMSNorm
module. `use_mamba2c_in_transformers()` swaps all of them for mamba2c while the context is
active (and restores them afterwards):

    mamba2_chunk_scan                  -> mamba2c.mamba_chunk_scan_combined
    mamba2_split_conv1d_scan_combined  -> mamba2c.mamba_split_conv1d_scan_combined
                                          (HF's training path: conv + scan + norm + out_proj)
    mamba2_selective_state_update      -> mamba2c.selective_state_update
    causal_conv1d_fn / causal_conv1d_update -> mamba2c's
    Mamba2RMSNormGated.forward         -> mamba2c.rmsnorm_fn(group_size=..., norm_before_gate=False)
                                          (MambaRMSNormGated before transformers 5.25)
    the mixer's forward, one token with a cache -> the conv step, SSD step and gated norm in
                                          C on the cache's own tensors, in place
                                          (hf_decode.py); any other call: the mixer's own
    nn.Linear.forward                  -> the C GEMV (mamba2_linear_forward) for a CPU float32 /
                                          bfloat16 product of at most 8 rows, weight over
                                          8 MiB, that needs no gradient (decode: MLPs,
                                          projections, lm_head; hf_linear.py); any other
                                          call: nn.Linear's own

    with mamba2c.hf.use_mamba2c_in_transformers():
        logits = model(input_ids).logits

The gated norm follows mamba_ssm: statistics per group of d_inner / n_groups channels.
(Older transformers releases normalised over the whole d_inner whatever n_groups was;
with n_groups > 1 such a release computes a different model than mamba_ssm — and than
mamba2c.)
"""
from __future__ import annotations

import contextlib
import importlib

import torch

from . import _dispatch, hf_decode, hf_linear, interface
from ._native import loader

__all__ = ["use_mamba2c_in_transformers"]

_MOD = "transformers.models.mamba2.modeling_mamba2"


def _chunk_scan(hidden_states, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                initial_states=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                return_final_states=False, seq_idx=None, cu_seqlens=None, state_dtype=None, **_):
    return interface.mamba_chunk_scan_combined(
        hidden_states, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias,
        initial_states=initial_states, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
        dt_softplus=dt_softplus, dt_limit=tuple(dt_limit), return_final_states=return_final_states,
        state_dtype=state_dtype)


def _split_conv1d_scan(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size,
                       initial_states=None, dt_limit=(0.0, float("inf")), return_final_states=False,
                       activation="silu", rmsnorm_weight=None, rmsnorm_eps=1e-6,
                       outproj_weight=None, outproj_bias=None, headdim=None, ngroups=1,
                       norm_before_gate=True, seq_idx=None, **_):
    return interface.mamba_split_conv1d_scan_combined(
        zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size,
        initial_states=initial_states, seq_idx=seq_idx, dt_limit=tuple(dt_limit),
        return_final_states=return_final_states, activation=activation,
        rmsnorm_weight=rmsnorm_weight, rmsnorm_eps=rmsnorm_eps, outproj_weight=outproj_weight,
        outproj_bias=outproj_bias, headdim=headdim, ngroups=ngroups,
        norm_before_gate=norm_before_gate)


def _state_update(state, hidden_states, dt, A, B, C, D=None, dt_bias=None, dt_softplus=False,
                  z=None, **_):
    return interface.selective_state_update(state, hidden_states, dt, A, B, C, D=D, z=z,
                                            dt_bias=dt_bias, dt_softplus=dt_softplus)


def _conv1d_fn(hidden_states, weight, bias=None, activation=None, seq_idx=None, **_):
    return interface.causal_conv1d_fn(hidden_states, weight, bias, seq_idx=seq_idx,
                                      activation=activation)


def _conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None, **_):
    return interface.causal_conv1d_update(hidden_states, conv_state, weight, bias, activation)


def _norm_forward(self, hidden_states, gate=None):
    """Every family's gated norm: statistics per group of `group_size` channels (Mamba2,
    Bamba, GraniteMoeHybrid, NemotronH, Zamba2: the gate before the norm), or of
    D / `n_groups` with the family's `norm_before_gate` (FalconH1)."""
    gs = getattr(self, "group_size", None)
    if gs is None:
        gs = hidden_states.shape[-1] // int(getattr(self, "n_groups", 1))
    return interface.rmsnorm_fn(hidden_states, self.weight, None, z=gate,
                                eps=self.variance_epsilon, group_size=gs,
                                norm_before_gate=bool(getattr(self, "norm_before_gate", False)))


# The families whose modeling module carries the five-function seam (transformers 5.18 on);
# any other imported transformers module with the same seam is taken too.
FAMILIES = ("mamba2", "bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "zamba2")
# mamba2's gated norm class by release: Mamba2RMSNormGated from 5.25, MambaRMSNormGated before.
_NORM_NAMES = ("Mamba2RMSNormGated", "MambaRMSNormGated")
_SWAPS = {
    "mamba2_chunk_scan": _chunk_scan,
    "mamba2_split_conv1d_scan_combined": _split_conv1d_scan,
    "mamba2_selective_state_update": _state_update,
    "causal_conv1d_fn": _conv1d_fn,
    "causal_conv1d_update": _conv1d_update,
}


def _decline_fused(*_, **__):
    """transformers' own fused function without a kernel: None, so the mixer takes its
    unfused path (on our conv, scan and norm) — for packed sequences too, which the
    original refuses."""
    return None


# FalconH1's training path calls the fused op with norm_before_gate=False whatever its
# config's mamba_norm_before_gate, and with rmsnorm_weight=None when mamba_rms_norm is off;
# its torch path (the fused function returns None) is the unfused one, which honours both.
# There the fused op declines, so the unfused path runs on our kernels.
_FAMILY_SWAPS = {"falcon_h1": {"mamba2_split_conv1d_scan_combined": _decline_fused}}


def _version() -> str:
    try:
        import transformers
        return getattr(transformers, "__version__", "unknown")
    except ImportError:  # pragma: no cover - the import of the module failed first
        return "not installed"


def _norm_classes(mod):
    return [v for k, v in vars(mod).items() if isinstance(v, type) and k.endswith("RMSNormGated")
            and v.__module__ == mod.__name__]


def _seam_modules():
    """(module, its gated-norm classes, {name: function to swap in}) for every family module, and
    any other imported transformers module with the seam; RuntimeError naming the
    transformers version and each missing symbol when a family's module lacks it."""
    import sys
    mods, problems = [], []
    for fam in FAMILIES:
        name = f"transformers.models.{fam}.modeling_{fam}"
        try:
            mod = importlib.import_module(name)
        except ImportError:
            if fam == "mamba2":
                raise
            continue  # a family this release does not have
        mods.append((fam, mod))
    known = {m.__name__ for _, m in mods}
    for name, mod in list(sys.modules.items()):
        if (name.startswith("transformers.models.") and name not in known and mod is not None
                and all(callable(getattr(mod, n, None)) for n in _SWAPS) and _norm_classes(mod)):
            mods.append((name.rsplit(".", 1)[-1], mod))
    out = []
    for fam, mod in mods:
        missing = [n for n in _SWAPS if not callable(getattr(mod, n, None))]
        norms = _norm_classes(mod)
        if not norms:
            missing.append(" or ".join(_NORM_NAMES) if fam == "mamba2" else "a *RMSNormGated class")
        if missing:
            problems.append(f"{mod.__name__} has no {', '.join(missing)}")
            continue
        out.append((mod, norms, {n: _FAMILY_SWAPS.get(fam, {}).get(n, _SWAPS[n]) for n in _SWAPS}))
    if problems:
        raise RuntimeError(f"mamba2c.hf: transformers {_version()} is not supported: "
                           f"{'; '.join(problems)} (mamba2c.hf swaps the five kernel functions "
                           f"{', '.join(_SWAPS)} and the gated norm's forward)")
    return out


def _served(t) -> bool:
    """Whether mamba2c computes on t's device: CPU tensors, and CUDA tensors when the CUDA
    backend is loaded. Any other device is left to transformers' own function."""
    return not isinstance(t, torch.Tensor) or t.is_cpu or (t.is_cuda and _dispatch.cuda_library())


def _routed(ours, theirs):
    def call(*args, **kwargs):
        first = args[0] if args else next(iter(kwargs.values()), None)
        return ours(*args, **kwargs) if _served(first) else theirs(*args, **kwargs)
    call.__name__ = getattr(theirs, "__name__", "mamba2c_hf")
    call.__wrapped_by_mamba2c__ = ours
    return call


def _routed_norm(ours, theirs):
    def forward(self, hidden_states, gate=None):
        return (ours(self, hidden_states, gate) if _served(hidden_states)
                else theirs(self, hidden_states, gate))
    forward.__wrapped_by_mamba2c__ = ours
    return forward


@contextlib.contextmanager
def use_mamba2c_in_transformers():
    """Context manager: transformers' Mamba-2 mixers (every family of FAMILIES, and any other
    imported module with the same seam) use mamba2c kernels inside the block. Supported:
    transformers 5.24 and later releases with the same seam; any other raises RuntimeError
    here, naming the version and the missing symbols, before anything is swapped. Tensors
    on a device mamba2c has no backend for (neither the CPU nor, with the CUDA backend, CUDA)
    go to transformers' own functions, as without the hook."""
    seams = _seam_modules()
    saved = []
    try:
        for mod, norms, names in seams:
            for n, f in names.items():
                saved.append((mod, n, getattr(mod, n)))
                setattr(mod, n, _routed(f, getattr(mod, n)))
            for cls in norms:
                saved.append((cls, "forward", cls.forward))
                cls.forward = _routed_norm(_norm_forward, cls.forward)
            for cls in hf_decode.mixer_classes(mod):
                f = hf_decode.decode_forward(mod, cls, cls.forward)
                if f is not None:
                    saved.append((cls, "forward", cls.forward))
                    cls.forward = f
        if loader.load(raise_on_error=False) is not None:
            lin = torch.nn.Linear
            saved.append((lin, "forward", lin.forward))
            lin.forward = hf_linear.linear_forward(lin.forward)
        yield
    finally:
        for obj, n, f in reversed(saved):
            setattr(obj, n, f)
