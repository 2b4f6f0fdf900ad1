"""mamba2c.models — complete networks built on mamba2c ops."""
from .mamba_lm import MambaConfig, MambaLMHeadModel, from_transformers
from .vision_mamba2 import VisionMamba2, VisionMamba2Config

__all__ = ["VisionMamba2", "VisionMamba2Config", "MambaConfig", "MambaLMHeadModel",
           "from_transformers"]
