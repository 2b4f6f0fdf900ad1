"""mamba2c.distributed — Mamba-2 beyond one process, on torch.distributed.

  cp_mamba_chunk_scan_combined   context-parallel SSD scan (the sequence split across ranks)
  cp_conv1d                      context-parallel causal conv1d (W-1 halo tokens)
  launch                         spawning a local process group (tests, benchmarks)

The algorithms, the communication per layer and the scaling model: docs/distributed.md.
"""
from ._comm import CPError, all_sum
from .conv import cp_conv1d
from .ssd import cp_mamba_chunk_scan_combined

__all__ = ["cp_mamba_chunk_scan_combined", "cp_conv1d", "CPError", "all_sum"]
