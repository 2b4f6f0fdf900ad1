"""mamba2c — PyTorch integration of the mamba2c C library of Mamba-2 operators.

    import mamba2c
    y = mamba2c.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=64, D=D, z=z,
                                          dt_bias=dt_bias, dt_softplus=True)

Layers:   mamba2c.nn.Mamba2, mamba2c.nn.RMSNormGated, mamba2c.RMSNorm / LayerNorm
Models:   mamba2c.models.VisionMamba2, mamba2c.models.MambaLMHeadModel
Ops:      mamba2c.ops (one function per operator, the C contract's form)
Staged:   mamba2c.chunked (the SSD pipeline stage by stage, forward only)
Oracle:   mamba2c.reference (pure torch)
Every op runs in the C library for CPU tensors (float32; float64 on the reference backend;
bf16/f16 computed in float32), and for CUDA tensors where the library has its CUDA backend
(device mode: zero-copy on torch's current stream; float32, bf16/f16 SSD storage);
mamba2c.ops.backend_of tells which, and each op's docstring lists the cases that fall back
to torch. Backends for CPU tensors: set_backend / use_backend("cpu" | "ref" | "opencl" |
"cuda"), the GPU ones in host mode (copies per call).
"""
from . import chunked, ops, reference
from ._info import info
from .layer_norm import LayerNorm, RMSNorm, layer_norm_fn, layernorm_fn, rms_norm_fn
from ._native import (DeviceError, LibraryNotFoundError, Mamba2Error, available, get_backend,
                      library_path, release_cuda_contexts, reuse_freed_memory, set_backend,
                      use_backend)
from .interface import (RMSNormGated, causal_conv1d_fn, causal_conv1d_update,
                        causal_conv1d_varlen_states, mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined, rmsnorm_fn,
                        selective_state_update, seq_idx_to_cu_seqlens)

__version__ = "0.1.0"

__all__ = [
    "ops", "reference", "chunked", "nn", "models",
    "mamba_chunk_scan_combined", "mamba_split_conv1d_scan_combined", "selective_state_update",
    "causal_conv1d_fn", "causal_conv1d_update", "causal_conv1d_varlen_states", "rmsnorm_fn",
    "RMSNormGated", "layer_norm_fn", "layernorm_fn", "rms_norm_fn", "RMSNorm", "LayerNorm",
    "seq_idx_to_cu_seqlens",
    "Mamba2Error", "DeviceError", "LibraryNotFoundError",
    "available", "library_path", "set_backend", "get_backend", "use_backend",
    "reuse_freed_memory", "release_cuda_contexts", "info",
]


def __getattr__(name):  # lazy subpackages: `mamba2c.nn`, `mamba2c.models`
    if name in ("nn", "models"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mamba2c' has no attribute {name!r}")
