"""mamba2.py — the Mamba-2 mixer layer (mamba_ssm.modules.mamba2.Mamba2's structure) on
mamba2c ops.

    u [B,L,d_model] --in_proj--> [z | xBC | dt]            (views of one buffer, no copy)
    xBC --causal depthwise conv1d (width d_conv) + SiLU--> [x | B | C]
    y = SSD(x, dt, A=-exp(A_log), B, C; D, dt_bias, softplus, dt_limit)
    y = RMSNormGated(y, z)  (group size d_inner/ngroups, norm_before_gate=False)
        — or, with rmsnorm=False, z gates inside the scan: y * silu(z)
    out = out_proj(y)

Parameters and their names follow mamba_ssm (in_proj, conv1d, dt_bias, A_log, D, norm,
out_proj), so a mamba_ssm state_dict loads as is. With d_ssm < d_inner (mamba_ssm's d_ssm=)
only d_ssm channels go through the SSM; the other d_inner - d_ssm form a gated MLP branch
silu(z0) * x0 concatenated before out_proj, as in mamba_ssm: in_proj gives
[z0 | x0 | z | xBC | dt]. An inference cache (conv_state
[B,conv_dim,d_conv-1], ssm_state [B,H,P,N] float32) supports prefill (forward with
inference_params) and token-by-token decoding with `step`; step also accepts mamba_ssm's
[B,conv_dim,d_conv] conv_state.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .. import ops
from ..interface import RMSNormGated

__all__ = ["Mamba2", "InferenceParams"]


class InferenceParams:
    """mamba_ssm's inference cache holder (mamba_ssm.utils.generation.InferenceParams):
    key_value_memory_dict maps layer_idx -> (conv_state, ssm_state); seqlen_offset > 0
    means "decoding"; lengths_per_sample optional [B] int tensor."""

    def __init__(self, max_seqlen: int = 0, max_batch_size: int = 0, seqlen_offset: int = 0,
                 batch_size_offset: int = 0, key_value_memory_dict=None,
                 lengths_per_sample: Optional[Tensor] = None):
        self.max_seqlen = max_seqlen
        self.max_batch_size = max_batch_size
        self.seqlen_offset = seqlen_offset
        self.batch_size_offset = batch_size_offset
        self.key_value_memory_dict = {} if key_value_memory_dict is None else key_value_memory_dict
        self.lengths_per_sample = lengths_per_sample

    def reset(self, max_seqlen: int, max_batch_size: int) -> None:
        """mamba_ssm's reset: new limits, seqlen_offset back to 0 (the next forward is a
        prefill, which overwrites every layer's cached states), lengths_per_sample zeroed.
        The cached state tensors are kept (reused when the batch size matches)."""
        self.max_seqlen = max_seqlen
        self.max_batch_size = max_batch_size
        self.seqlen_offset = 0
        if self.lengths_per_sample is not None:
            self.lengths_per_sample.zero_()


class Mamba2(nn.Module):
    def __init__(self, d_model: int, d_state: int = 128, d_conv: int = 4, conv_init=None,
                 expand: int = 2, headdim: int = 64, d_ssm: Optional[int] = None,
                 ngroups: int = 1, A_init_range=(1, 16),
                 D_has_hdim: bool = False, rmsnorm: bool = True, norm_before_gate: bool = False,
                 dt_min: float = 0.001, dt_max: float = 0.1, dt_init_floor: float = 1e-4,
                 dt_limit=(0.0, float("inf")), bias: bool = False, conv_bias: bool = True,
                 chunk_size: int = 256, use_mem_eff_path: bool = True,
                 layer_idx: Optional[int] = None, process_group=None,
                 sequence_parallel: bool = True, device=None, dtype=None,
                 context_parallel_group=None):
        """mamba_ssm's Mamba2 arguments, in its order. use_mem_eff_path: accepted; both of
        mamba_ssm's paths compute the same function and this layer has one (the C ops, views
        of one in_proj buffer). process_group / sequence_parallel: tensor parallelism with
        mamba_ssm's semantics (mamba2c.distributed.tp); context_parallel_group: the sequence
        split over ranks (mamba2c.distributed; docs/distributed.md)."""
        fk = {"device": device, "dtype": dtype}
        super().__init__()
        # -- distributed: context parallel = the sequence split over context_parallel_group;
        # tensor parallel = the heads split over process_group, this rank's shard built below.
        self.context_parallel_group = context_parallel_group
        self.process_group = process_group
        self.sequence_parallel = sequence_parallel
        self.use_mem_eff_path = use_mem_eff_path
        self.tp_world_size = 1
        self.world_size = 1
        self.out_proj_has_bias = bias
        self.d_model = d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.conv_init = conv_init
        self.expand = expand
        self.d_inner = expand * d_model
        self.headdim = headdim
        self.d_ssm = self.d_inner if d_ssm is None else d_ssm
        if not 0 < self.d_ssm <= self.d_inner:
            raise ValueError(f"d_ssm={self.d_ssm} must be in (0, d_inner={self.d_inner}]")
        self.d_mlp = self.d_inner - self.d_ssm
        self.ngroups = ngroups
        if self.d_ssm % headdim:
            raise ValueError(f"d_ssm={self.d_ssm} is not a multiple of headdim={headdim}")
        self.nheads = self.d_ssm // headdim
        if self.nheads % ngroups:
            raise ValueError(f"nheads={self.nheads} is not a multiple of ngroups={ngroups}")
        if process_group is not None:  # tensor parallel: this rank's heads and groups
            from ..distributed.tp import tp_local_dims
            if context_parallel_group is not None:
                raise NotImplementedError("tensor and context parallelism in one layer")
            if self.d_ssm != self.d_inner:
                raise NotImplementedError("tensor parallelism with d_ssm < d_inner")
            self.tp_world_size = torch.distributed.get_world_size(process_group)
            self.nheads, ngroups, self.d_inner = tp_local_dims(self.nheads, ngroups,
                                                               self.d_inner, process_group)
            self.ngroups = ngroups
            self.d_ssm = self.d_inner
            self.world_size = self.tp_world_size
        self.D_has_hdim = D_has_hdim
        self.rmsnorm = rmsnorm
        self.norm_before_gate = norm_before_gate
        self.dt_limit = tuple(dt_limit)
        self.chunk_size = chunk_size
        self.layer_idx = layer_idx
        self.activation = "silu"

        # [z0, x0 (d_mlp each), z (d_ssm), x (d_ssm), B, C (G*N each), dt (H)]
        d_in_proj = 2 * self.d_inner + 2 * ngroups * d_state + self.nheads
        self.in_proj = nn.Linear(d_model, d_in_proj, bias=bias, **fk)
        self.conv_dim = self.d_ssm + 2 * ngroups * d_state
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, kernel_size=d_conv,
                                groups=self.conv_dim, padding=d_conv - 1, bias=conv_bias, **fk)
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)

        # dt_bias = softplus^-1(dt), dt log-uniform in [dt_min, dt_max]
        dt = torch.exp(torch.rand(self.nheads, **fk) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min)).clamp(min=dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.dt_bias._no_weight_decay = True
        A = torch.empty(self.nheads, dtype=torch.float32, device=device).uniform_(*A_init_range)
        self.A_log = nn.Parameter(torch.log(A).to(dtype=dtype))
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(self.d_ssm if D_has_hdim else self.nheads, device=device))
        self.D._no_weight_decay = True
        if rmsnorm:
            self.norm = RMSNormGated(self.d_ssm, eps=1e-5, norm_before_gate=norm_before_gate,
                                     group_size=self.d_ssm // ngroups, **fk)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **fk)
        if process_group is not None and bias and torch.distributed.get_rank(process_group):
            self.out_proj.register_parameter("bias", None)  # row-parallel: rank 0 adds it

    # -- helpers ---------------------------------------------------------------------------

    def _D(self) -> Tensor:
        return self.D.view(self.nheads, self.headdim) if self.D_has_hdim else self.D

    def _conv_w(self) -> Tensor:
        return self.conv1d.weight.view(self.conv_dim, self.d_conv)

    def _split(self, zxbcdt: Tensor):
        """[z0, x0, z, xBC, dt] views (z0, x0 empty when d_ssm == d_inner)."""
        return torch.split(zxbcdt, [self.d_mlp, self.d_mlp, self.d_ssm, self.conv_dim,
                                    self.nheads], dim=-1)

    def _finish(self, y: Tensor, z: Tensor, z0: Tensor, x0: Tensor) -> Tensor:
        """Gated norm, the MLP branch (d_mlp > 0) and out_proj."""
        if self.rmsnorm:
            y = self.norm(y, z)
        if self.d_mlp > 0:
            y = torch.cat([torch.nn.functional.silu(z0) * x0, y], dim=-1)
        return self.out_proj(y)

    # -- forward ---------------------------------------------------------------------------

    def forward(self, u: Tensor, seqlen: Optional[int] = None, seq_idx: Optional[Tensor] = None,
                cu_seqlens: Optional[Tensor] = None, inference_params=None) -> Tensor:
        """u [B,L,d_model] -> [B,L,d_model], or with seqlen (mamba_ssm's sequence-parallel
        form) u [B*L,d_model] -> [B*L,d_model]. cu_seqlens [nseq+1] (B == 1) or seq_idx
        [B,L] (non-decreasing per row, any batch) keep packed sequences apart (conv window
        and scan state both reset; rows are independent).
        inference_params: prefill the cache (seqlen_offset == 0) or decode (> 0). After a
        prefill with seq_idx the cache of row b holds the state of its last sequence."""
        flat = seqlen is not None
        if flat:
            BL = u.shape[0]
            if u.dim() != 2 or BL % seqlen:
                raise ValueError(f"u has shape {tuple(u.shape)}; with seqlen={seqlen} expected "
                                 f"[batch*seqlen, d_model]")
            u = u.view(BL // seqlen, seqlen, u.shape[1])
        if self.process_group is not None or self.context_parallel_group is not None:
            from ..distributed.layers import distributed_forward
            y = distributed_forward(self, u, seq_idx, cu_seqlens, inference_params)
            return y.reshape(-1, y.shape[-1]) if flat else y
        Bsz, L, _ = u.shape
        conv_state = ssm_state = None
        if inference_params is not None:
            n = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else Bsz
            conv_state, ssm_state = self._get_states_from_cache(inference_params, n)
            if inference_params.seqlen_offset > 0:
                out, _, _ = self.step(u, conv_state, ssm_state)
                return out.reshape(-1, out.shape[-1]) if flat else out
        zxbcdt = self.in_proj(u)
        rows = None
        if seq_idx is not None and cu_seqlens is None:
            from ..interface import _flatten_rows, seq_idx_to_cu_seqlens
            cu_seqlens, _, last, _ = seq_idx_to_cu_seqlens(seq_idx)
            if Bsz != 1:  # rows become consecutive packed sequences of one row
                rows = last
                zxbcdt = _flatten_rows(zxbcdt)
        z0, x0, z, xBC, dt = self._split(zxbcdt)
        # causal conv over channel-last xBC (a strided view of zxbcdt: no copy)
        want_conv_state = conv_state is not None
        xBC_out, conv_final = ops.conv1d(xBC, self._conv_w(), self.conv1d.bias, activation=True,
                                         cu_seqlens=cu_seqlens, return_final_states=want_conv_state)
        if want_conv_state:  # the last d_conv-1 inputs of each sequence (of each row's last)
            conv_state.copy_(conv_final if rows is None else conv_final.index_select(0, rows))
        x, Bm, Cm = torch.split(xBC_out, [self.d_ssm, self.ngroups * self.d_state,
                                          self.ngroups * self.d_state], dim=-1)
        A = -torch.exp(self.A_log.float())
        out, final = ops.ssd(x.unflatten(-1, (self.nheads, self.headdim)), dt, A,
                             Bm.unflatten(-1, (self.ngroups, self.d_state)),
                             Cm.unflatten(-1, (self.ngroups, self.d_state)), self.chunk_size,
                             D=self._D(),
                             z=None if self.rmsnorm else z.unflatten(-1, (self.nheads, self.headdim)),
                             dt_bias=self.dt_bias, cu_seqlens=cu_seqlens, dt_softplus=True,
                             dt_limit=self.dt_limit)
        if ssm_state is not None:
            ssm_state.copy_(final if rows is None else final.index_select(0, rows))
        y = self._finish(out.flatten(-2), z, z0, x0)
        if rows is not None:
            y = y.view(Bsz, L, y.shape[-1])
        return y.reshape(Bsz * L, y.shape[-1]) if flat else y

    # -- decoding --------------------------------------------------------------------------

    def step(self, hidden_states: Tensor, conv_state: Tensor, ssm_state: Tensor
             ) -> Tuple[Tensor, Tensor, Tensor]:
        """Decode: hidden_states [B,T,d_model] — one token (T = 1, mamba_ssm's step) or T
        tokens at once (e.g. verifying T speculative tokens; equal to T calls with one
        token). conv_state [B,conv_dim,d_conv-1] (or mamba_ssm's [B,conv_dim,d_conv]) and
        ssm_state [B,H,P,N] are updated in place. Returns (out [B,T,d_model], conv_state,
        ssm_state) as mamba_ssm does.
        Both decode ops run in C (mamba2_conv1d_step, mamba2_ssd_step) for CPU tensors when
        no gradient is needed — decode under torch.no_grad() / torch.inference_mode();
        with gradients enabled and trainable parameters they take the differentiable torch
        path (see mamba2c.ops.ssd_step)."""
        if self.process_group is not None:
            raise NotImplementedError("Mamba2.step: decoding a tensor-parallel layer is not "
                                      "supported (gather_state_dict into a single-process layer)")
        T = hidden_states.shape[1]
        one = T == 1
        zxbcdt = self.in_proj(hidden_states.squeeze(1) if one else hidden_states)
        z0, x0, z, xBC, dt = self._split(zxbcdt)         # [B,(T,)*] views, no copy
        # the conv step takes causal-conv1d's channel-first layout: [B,C] or [B,C,T]
        xBC = ops.conv1d_step(xBC if one else xBC.transpose(1, 2), conv_state, self._conv_w(),
                              self.conv1d.bias, activation=True)
        if not one:
            xBC = xBC.transpose(1, 2)                    # back to [B,T,C] (a view)
        x, Bm, Cm = torch.split(xBC, [self.d_ssm, self.ngroups * self.d_state,
                                      self.ngroups * self.d_state], dim=-1)
        A = -torch.exp(self.A_log.float())
        y = ops.ssd_step(ssm_state, x.unflatten(-1, (self.nheads, self.headdim)), dt, A,
                         Bm.unflatten(-1, (self.ngroups, self.d_state)),
                         Cm.unflatten(-1, (self.ngroups, self.d_state)), D=self._D(),
                         z=None if self.rmsnorm else z.unflatten(-1, (self.nheads, self.headdim)),
                         dt_bias=self.dt_bias, dt_softplus=True, dt_limit=self.dt_limit)
        out = self._finish(y.flatten(-2), z, z0, x0)
        return (out.unsqueeze(1) if one else out), conv_state, ssm_state

    def allocate_inference_cache(self, batch_size: int, max_seqlen: int = 0, dtype=None, **kw):
        device = self.out_proj.weight.device
        conv_dtype = self.conv1d.weight.dtype if dtype is None else dtype
        # [B, conv_dim, d_conv-1], contiguous: the previous d_conv-1 inputs, oldest first —
        # the C decode step's layout, updated in place without a copy. (mamba_ssm keeps
        # d_conv inputs in a channel-last [B, d_conv, conv_dim] buffer seen transposed; its
        # oldest entry never reaches an output.)
        conv_state = torch.zeros(batch_size, self.conv_dim, self.d_conv - 1, device=device,
                                 dtype=conv_dtype)
        ssm_state = torch.zeros(batch_size, self.nheads, self.headdim, self.d_state,
                                device=device, dtype=torch.float32)
        return conv_state, ssm_state

    def _get_states_from_cache(self, inference_params, batch_size: int):
        key = self.layer_idx
        cache = inference_params.key_value_memory_dict
        if key not in cache:
            cache[key] = self.allocate_inference_cache(batch_size)
        return cache[key]
