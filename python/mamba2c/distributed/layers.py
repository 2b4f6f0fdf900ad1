"""layers.py — the forward of mamba2c.nn.Mamba2 when it runs context- or tensor-parallel.

Mamba2.forward hands over here when the layer was built with context_parallel_group= or
process_group=. The mixer is the single-process one (in_proj, conv1d + SiLU, SSD, gated
RMSNorm, out_proj) with, for context parallelism, the conv and the scan replaced by their
context-parallel forms (cp_conv1d, cp_mamba_chunk_scan_combined: the input u is this
rank's slice of the sequence), and for tensor parallelism the collectives around the
column-/row-parallel projections (tp.py).
"""
from __future__ import annotations

import torch

from .. import interface, ops
from .conv import cp_conv1d
from .ssd import cp_mamba_chunk_scan_combined
from .tp import tp_input, tp_output

__all__ = ["distributed_forward"]


def _mixer(layer, zxbcdt, cu_seqlens, cp_group):
    z0, x0, z, xBC, dt = layer._split(zxbcdt)  # z0, x0: the d_ssm < d_inner MLP branch
    if cp_group is not None:
        xBC = cp_conv1d(xBC, layer._conv_w(), layer.conv1d.bias, activation=True,
                        cu_seqlens=cu_seqlens, process_group=cp_group)
    else:
        xBC = ops.conv1d(xBC, layer._conv_w(), layer.conv1d.bias, activation=True,
                         cu_seqlens=cu_seqlens)[0]
    x, Bm, Cm = torch.split(xBC, [layer.d_ssm, layer.ngroups * layer.d_state,
                                  layer.ngroups * layer.d_state], dim=-1)
    A = -torch.exp(layer.A_log.float())
    args = (x.unflatten(-1, (layer.nheads, layer.headdim)), dt, A,
            Bm.unflatten(-1, (layer.ngroups, layer.d_state)),
            Cm.unflatten(-1, (layer.ngroups, layer.d_state)), layer.chunk_size)
    kw = dict(D=layer._D(),
              z=None if layer.rmsnorm else z.unflatten(-1, (layer.nheads, layer.headdim)),
              dt_bias=layer.dt_bias, cu_seqlens=cu_seqlens, dt_softplus=True,
              dt_limit=layer.dt_limit)
    if cp_group is not None:
        out = cp_mamba_chunk_scan_combined(*args, process_group=cp_group, **kw)
    else:
        out = interface.mamba_chunk_scan_combined(*args, **kw)
    return layer._finish(out.flatten(-2), z, z0, x0)


def distributed_forward(layer, u, seq_idx=None, cu_seqlens=None, inference_params=None):
    if inference_params is not None:
        raise NotImplementedError("the inference cache (prefill/decode) is not supported by the "
                                  "context-/tensor-parallel Mamba2 forward")
    if layer.context_parallel_group is not None:
        if seq_idx is not None:
            raise NotImplementedError("context parallel: pass the global cu_seqlens, not seq_idx")
        return _mixer(layer, layer.in_proj(u), cu_seqlens, layer.context_parallel_group)
    group, sp = layer.process_group, layer.sequence_parallel
    u_full, lengths = tp_input(u, group, sp)
    if seq_idx is not None and cu_seqlens is None:
        if u_full.shape[0] != 1:
            raise ValueError("seq_idx with batch > 1: pack the sequences into batch 1")
        cu_seqlens = interface.seq_idx_to_cu_seqlens(seq_idx)[0]
    y = _mixer(layer, layer.in_proj(u_full), cu_seqlens, None)
    return tp_output(y, group, sp, lengths)
