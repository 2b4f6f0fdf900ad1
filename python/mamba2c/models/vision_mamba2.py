"""vision_mamba2.py — Vision-Mamba2: a hierarchical image classifier whose token mixer is
the Mamba-2 SSD scan run in four directions over the 2-D token grid.

The architecture of the Ascend Mamba-2 SSD project's Vision-Mamba2 (seed 000), on mamba2c:

  image -> patch embedding (conv k=s=patch) -> 4 stages of blocks, a 2x2 stride-2 conv
  downsampling (+ LayerNorm) between stages -> LayerNorm -> mean pool -> linear head.
  Block:  x += dwconv3x3(x)                  (conditional position encoding)
          x += Mixer(LayerNorm(x))
          x += dwconv3x3(x)
          x += MLP(LayerNorm(x))             (ratio 4, GELU)
  Mixer:  in_proj -> z [B,L,d_inner], xBC, dt [B,L,H]
          xBC -> depthwise 3x3 conv2d on the grid + SiLU -> x [B,L,H,P], B, C [B,L,G,N]
          SSD(x, dt, A=-exp(A_log), B, C; D [H,P], z gating, dt_bias, softplus) over four
          scan orders — rows, rows reversed, columns, columns reversed — averaged
          -> LayerNorm(d_inner) -> out_proj.
The four scan orders are stacked along the batch dimension, so each mixer makes ONE SSD
call of batch 4B (one forward and one backward C call), instead of four.

Tiny configuration (VisionMamba2Config defaults): dims (96,192,384,768), depths
(2,2,6,2), headdim 64, d_state 128, expand 2, chunk 128, ngroups (1,2,4,8), patch 4.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .. import ops

__all__ = ["VisionMamba2Config", "VisionMamba2", "VisionMamba2Mixer", "VisionMamba2Block",
           "cross_scan", "cross_merge"]


@dataclass(frozen=True)
class VisionMamba2Config:
    image_size: int = 224
    patch_size: int = 4
    in_channels: int = 3
    num_classes: int = 1000
    dims: Tuple[int, ...] = (96, 192, 384, 768)
    depths: Tuple[int, ...] = (2, 2, 6, 2)
    ngroups: Tuple[int, ...] = (1, 2, 4, 8)
    chunk_size: int = 128
    expand: int = 2
    headdim: int = 64
    d_state: int = 128
    mlp_ratio: float = 4.0
    directions: int = 4


def cross_scan(t: Tensor, h: int, w: int, directions: int = 4) -> Tensor:
    """[B, h*w, ...] in row-major token order -> [directions*B, h*w, ...]: the sequence in
    row order, reversed row order, column order, reversed column order (first `directions`)."""
    Bsz = t.shape[0]
    rest = t.shape[2:]
    seqs = [t]
    if directions >= 2:
        seqs.append(t.flip(1))
    if directions == 4:
        col = t.reshape(Bsz, h, w, *rest).transpose(1, 2).reshape(Bsz, h * w, *rest)
        seqs += [col, col.flip(1)]
    return torch.cat(seqs, dim=0)


def cross_merge(y: Tensor, h: int, w: int, directions: int = 4) -> Tensor:
    """Inverse of cross_scan, averaged: [directions*B, h*w, ...] -> [B, h*w, ...]."""
    Bsz = y.shape[0] // directions
    rest = y.shape[2:]
    parts = list(y.split(Bsz, dim=0))
    acc = parts[0]
    if directions >= 2:
        acc = acc + parts[1].flip(1)
    if directions == 4:
        col = parts[2] + parts[3].flip(1)
        acc = acc + col.reshape(Bsz, w, h, *rest).transpose(1, 2).reshape(Bsz, h * w, *rest)
    return acc * (1.0 / directions)


class VisionMamba2Mixer(nn.Module):
    def __init__(self, dim: int, *, expand: int = 2, headdim: int = 64, d_state: int = 128,
                 ngroups: int = 1, chunk_size: int = 128, directions: int = 4,
                 dt_min: float = 0.001, dt_max: float = 0.1):
        super().__init__()
        if directions not in (1, 2, 4):
            raise ValueError("directions must be 1, 2 or 4")
        self.d_inner = dim * expand
        if self.d_inner % headdim:
            raise ValueError(f"dim*expand={self.d_inner} is not a multiple of headdim={headdim}")
        self.nheads = self.d_inner // headdim
        if self.nheads % ngroups:
            raise ValueError(f"nheads={self.nheads} is not a multiple of ngroups={ngroups}")
        self.headdim, self.d_state, self.ngroups = headdim, d_state, ngroups
        self.chunk_size, self.directions = chunk_size, directions
        self.conv_dim = self.d_inner + 2 * ngroups * d_state
        self.in_proj = nn.Linear(dim, self.d_inner + self.conv_dim + self.nheads, bias=False)
        self.dwconv = nn.Conv2d(self.conv_dim, self.conv_dim, 3, padding=1, groups=self.conv_dim)
        A = torch.empty(self.nheads).uniform_(1.0, 16.0)
        self.A_log = nn.Parameter(torch.log(A))
        dt = torch.exp(torch.rand(self.nheads) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.D = nn.Parameter(torch.ones(self.nheads, headdim))
        self.out_norm = nn.LayerNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, dim, bias=False)

    def forward(self, u: Tensor, h: int, w: int) -> Tensor:
        Bsz, L, _ = u.shape
        z, xBC, dt = torch.split(self.in_proj(u), [self.d_inner, self.conv_dim, self.nheads], dim=-1)
        xBC = xBC.reshape(Bsz, h, w, self.conv_dim).permute(0, 3, 1, 2)
        xBC = F.silu(self.dwconv(xBC)).permute(0, 2, 3, 1).reshape(Bsz, L, self.conv_dim)
        nd = self.directions
        # one [nd*B, L, ...] problem for the four scan orders
        xBC_s = cross_scan(xBC, h, w, nd)
        x, Bm, Cm = torch.split(xBC_s, [self.d_inner, self.ngroups * self.d_state,
                                        self.ngroups * self.d_state], dim=-1)
        z_s = cross_scan(z, h, w, nd)
        dt_s = cross_scan(dt, h, w, nd)
        A = -torch.exp(self.A_log.float())
        y, _ = ops.ssd(x.unflatten(-1, (self.nheads, self.headdim)), dt_s, A,
                       Bm.unflatten(-1, (self.ngroups, self.d_state)),
                       Cm.unflatten(-1, (self.ngroups, self.d_state)), self.chunk_size,
                       D=self.D, z=z_s.unflatten(-1, (self.nheads, self.headdim)),
                       dt_bias=self.dt_bias, dt_softplus=True)
        y = cross_merge(y.flatten(-2), h, w, nd)
        return self.out_proj(self.out_norm(y))


class _MLP(nn.Module):
    def __init__(self, dim: int, ratio: float):
        super().__init__()
        hidden = int(dim * ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class VisionMamba2Block(nn.Module):
    def __init__(self, dim: int, mlp_ratio: float = 4.0, **mixer_kw):
        super().__init__()
        self.cpe1 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm1 = nn.LayerNorm(dim)
        self.mixer = VisionMamba2Mixer(dim, **mixer_kw)
        self.cpe2 = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = _MLP(dim, mlp_ratio)

    @staticmethod
    def _grid_conv(x: Tensor, conv: nn.Conv2d, h: int, w: int) -> Tensor:
        g = x.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w)
        return conv(g).flatten(2).transpose(1, 2)

    def forward(self, x: Tensor, h: int, w: int) -> Tensor:
        x = x + self._grid_conv(x, self.cpe1, h, w)
        x = x + self.mixer(self.norm1(x), h, w)
        x = x + self._grid_conv(x, self.cpe2, h, w)
        return x + self.mlp(self.norm2(x))


class _Downsample(nn.Module):
    def __init__(self, dim: int, out_dim: int):
        super().__init__()
        self.conv = nn.Conv2d(dim, out_dim, kernel_size=2, stride=2)
        self.norm = nn.LayerNorm(out_dim)

    def forward(self, x: Tensor, h: int, w: int):
        g = self.conv(x.transpose(1, 2).reshape(x.shape[0], x.shape[2], h, w))
        h, w = g.shape[-2:]
        return self.norm(g.flatten(2).transpose(1, 2)), h, w


class VisionMamba2(nn.Module):
    """Vision-Mamba2 classifier. forward(image [B,C,H,W]) -> logits [B,num_classes]."""

    def __init__(self, config: VisionMamba2Config = VisionMamba2Config()):
        super().__init__()
        c = config
        n = len(c.dims)
        if not (len(c.depths) == len(c.ngroups) == n):
            raise ValueError("dims, depths and ngroups must have one entry per stage")
        self.config = c
        self.patch_embed = nn.Conv2d(c.in_channels, c.dims[0], c.patch_size, stride=c.patch_size)
        self.stages = nn.ModuleList()
        self.downsamples = nn.ModuleList()
        for i, (dim, depth, g) in enumerate(zip(c.dims, c.depths, c.ngroups)):
            self.stages.append(nn.ModuleList(
                VisionMamba2Block(dim, c.mlp_ratio, expand=c.expand, headdim=c.headdim,
                                  d_state=c.d_state, ngroups=g, chunk_size=c.chunk_size,
                                  directions=c.directions)
                for _ in range(depth)))
            if i + 1 < n:
                self.downsamples.append(_Downsample(dim, c.dims[i + 1]))
        self.norm = nn.LayerNorm(c.dims[-1])
        self.head = nn.Linear(c.dims[-1], c.num_classes)

    def forward_features(self, image: Tensor) -> Tensor:
        x = self.patch_embed(image)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        for i, blocks in enumerate(self.stages):
            for blk in blocks:
                x = blk(x, h, w)
            if i < len(self.downsamples):
                x, h, w = self.downsamples[i](x, h, w)
        return self.norm(x).mean(dim=1)

    def forward(self, image: Tensor) -> Tensor:
        return self.head(self.forward_features(image))
