"""mamba2c.models — complete networks built on mamba2c ops."""
from .mamba_lm import MambaConfig, MambaLMHeadModel, from_transformers
from .gguf_io import from_gguf, save_gguf
from .vision_mamba2 import VisionMamba2, VisionMamba2Config

__all__ = ["VisionMamba2", "VisionMamba2Config", "MambaConfig", "MambaLMHeadModel",
           "from_transformers", "from_gguf", "save_gguf"]
