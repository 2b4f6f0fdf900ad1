"""hf.py — run HuggingFace transformers' Mamba-2 (modeling_mamba2) on mamba2c.

transformers' Mamba2Mixer calls five module-level kernels (the mamba_ssm / causal-conv1d
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

from . import interface

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
    return interface.rmsnorm_fn(hidden_states, self.weight, None, z=gate,
                                eps=self.variance_epsilon, group_size=self.group_size,
                                norm_before_gate=False)


# The gated norm's class name by release: Mamba2RMSNormGated from 5.25, MambaRMSNormGated
# before. The first one the module has is used.
_NORM_NAMES = ("Mamba2RMSNormGated", "MambaRMSNormGated")
_SWAPS = {
    "mamba2_chunk_scan": _chunk_scan,
    "mamba2_split_conv1d_scan_combined": _split_conv1d_scan,
    "mamba2_selective_state_update": _state_update,
    "causal_conv1d_fn": _conv1d_fn,
    "causal_conv1d_update": _conv1d_update,
}


def _version() -> str:
    try:
        import transformers
        return getattr(transformers, "__version__", "unknown")
    except ImportError:  # pragma: no cover - the import of _MOD failed first
        return "not installed"


def _seam(mod):
    """The gated-norm class of `mod`, or RuntimeError naming the transformers version and
    every symbol of the seam that is missing."""
    missing = [n for n in _SWAPS if not callable(getattr(mod, n, None))]
    norm = next((getattr(mod, n) for n in _NORM_NAMES if isinstance(getattr(mod, n, None), type)),
                None)
    if norm is None:
        missing.append(" or ".join(_NORM_NAMES))
    if missing:
        raise RuntimeError(f"mamba2c.hf: transformers {_version()} is not supported: {_MOD} "
                           f"has no {', '.join(missing)} (mamba2c.hf swaps the five kernel "
                           f"functions {', '.join(_SWAPS)} and the gated norm's forward)")
    return norm


@contextlib.contextmanager
def use_mamba2c_in_transformers():
    """Context manager: transformers' Mamba-2 uses mamba2c kernels inside the block.
    Supported: transformers 5.24 and later releases with the same seam; any other raises
    RuntimeError here, naming the version and the missing symbols."""
    mod = importlib.import_module(_MOD)
    norm = _seam(mod)
    saved = {n: getattr(mod, n) for n in _SWAPS}
    saved_norm = norm.forward
    try:
        for n, f in _SWAPS.items():
            setattr(mod, n, f)
        norm.forward = _norm_forward
        yield
    finally:
        for n, f in saved.items():
            setattr(mod, n, f)
        norm.forward = saved_norm
