"""mamba2c.nn — Mamba-2 layers on mamba2c ops."""
from ..interface import RMSNormGated
from ..layer_norm import LayerNorm, RMSNorm
from .mamba2 import InferenceParams, Mamba2

__all__ = ["Mamba2", "RMSNormGated", "RMSNorm", "LayerNorm", "InferenceParams"]
