"""decode_plan.py — the replayed decode step of generation._Decoder (the common case).

A decode token runs the same ~10 operations per layer on tensors whose addresses do not
change between tokens: the weights, the caches, and — when every intermediate lives in a
buffer allocated once per generate() call — the activations too. So every C call's
descriptors (mamba2_tensor_t structs and options) are packed ONCE per layer, when the plan
is built, into memory the plan owns; a token then only replays the calls:

    per layer  residual add (torch, out=)         -> res
               [bf16: res rounded to the model dtype and widened, as the norm sees it]
               mamba2_rmsnorm_gated_forward (no gate)  the block's RMSNorm
               in_proj   mamba2_linear_forward     -> zx      (the C GEMV; torch.mm for f16)
               mamba2_conv1d_step                  -> xbc     (cache updated in place)
               mamba2_ssd_step                     -> y       (state updated in place)
               mamba2_rmsnorm_gated_forward (gate z)
               out_proj  mamba2_linear_forward     -> h

with no allocation, no descriptor packing and no dispatch in between: each C call is one
ctypes call with constant arguments. The roundings are those of Mamba2.step and of the
block's add + norm (a half model rounds the conv output, the SSD output and the gated norm's
output to its dtype; the widening copies back to float32 are exact), so the logits equal
the generic path's (tests/test_mamba_lm.py checks both against the full forward).

Served: Mamba-2 mixers with the gated RMSNorm (rmsnorm=True, d_ssm == d_inner), no MLP
blocks, RMSNorm block norms with residual_in_fp32, float32 / bfloat16 / float16 weights,
CPU tensors, float32 caches in the C layout. `plan_for` returns None otherwise and the
decoder keeps its generic per-op path.

float32 and bfloat16 models whose layers all fit (every layer's projections on the C GEMV)
take a shorter road: one mamba2_block_step call per layer (include/mamba2c_block.h; bf16:
its round_bf16 mode, which rounds each op's output as the per-op replay below does) runs the
residual add, the block norm, in_proj, the conv and SSD steps, the gated norm and out_proj on
the same C ops, with the same bits (the C test checks the block step against the ops one by
one), so a token costs one ctypes call per layer instead of seven. MAMBA2C_BLOCK_STEP=0 in the
environment keeps the per-op replay (for measuring one against the other).

The projections run on the C GEMV (mamba2_linear_forward) with the weight a Linear carries
for it (`gemv_weight`, set by MambaLMHeadModel.quantize: Q8_0 or bf16) or else its own
float32 / bfloat16 weight as is; the GEMV reads float32 activations and writes float32, so
a half model's input is its dtype-rounded activation widened (exact) and the output is
rounded to the model dtype, as torch's half matmul rounds them. float16 weights keep
torch.mm. The lm_head of such a decoder runs on the same GEMV (generation._Decoder._final).
"""
from __future__ import annotations

import ctypes
import os
import struct
from typing import Optional

import torch

from .._native import abi, context, loader
from .._native.abi import DT_F32, TENSOR_R
from .._native.context import _context, _Scratch
from .._native.tensors import _act_desc, _bc_desc, _desc, _out_desc
from .quant import GemvWeight, LinearCall

_F32 = torch.float32
_HALF = (torch.bfloat16, torch.float16)
_S = abi.SLOT["ssd_step"]
_C = abi.SLOT["conv1d_step"]
_R = abi.SLOT["rmsnorm_forward"]


def _packed(*ts):
    """Check the packers described every tensor as is (no conversion copy, whose address
    would not outlive the call)."""
    for t, kept in ts:
        if kept is not t:
            raise AssertionError("decode plan: a tensor was copied by the packer")


class _LayerCalls:
    """The packed descriptor memory of one layer's three C calls (kept alive here)."""
    __slots__ = ("norm", "conv", "ssd", "gnorm", "args_norm", "args_conv", "args_ssd",
                 "args_gnorm", "keep")


def gemv_weight(lin_weight: torch.Tensor, module) -> Optional[GemvWeight]:
    """The weight the C GEMV reads for a Linear: its `gemv_weight` (quantize()), else its
    float32 / bfloat16 weight as is; None for other dtypes (torch.mm then)."""
    g = getattr(module, "gemv_weight", None)
    if g is not None and tuple(lin_weight.shape) == (g.O, g.I):
        return g
    w = lin_weight.detach()
    if w.is_cpu and w.is_contiguous() and w.dtype in (_F32, torch.bfloat16) and w.dim() == 2:
        return GemvWeight(w, "f32" if w.dtype is _F32 else "bf16", w.shape[0], w.shape[1])
    return None


def _norm_block(x, z, weight, out, rstd, eps, group_size, nbg):
    s = _Scratch()
    buf, base, F = s.buf, s.base, _R
    _out_desc(buf, F.out, out, DT_F32)
    _out_desc(buf, F.rstd, rstd, DT_F32)
    _packed((x, _desc(buf, F.x, "x", x, _F32, DT_F32)),
            (weight, _desc(buf, F.weight, "weight", weight, _F32, DT_F32)))
    pz = 0
    if z is not None:
        _packed((z, _desc(buf, F.z, "z", z, _F32, DT_F32)))
        pz = base + F.z
    abi.RMSNORM_OPTIONS.pack_into(buf, s.opt_off, float(eps), int(group_size), 1 if nbg else 0)
    return s, (base + F.out, base + F.rstd, base + F.x, pz, base + F.weight, 0,
               base + s.opt_off, None, 0)


def _conv_block(x, cache, weight, bias, out):
    s = _Scratch()
    buf, base, S = s.buf, s.base, _C
    _out_desc(buf, S.out, out, DT_F32)
    _out_desc(buf, S.conv_cache, cache, DT_F32)
    _packed((x, _desc(buf, S.x, "x", x, _F32, DT_F32)),
            (weight, _desc(buf, S.weight, "weight", weight, _F32, DT_F32)))
    pb = 0
    if bias is not None:
        _packed((bias, _desc(buf, S.bias, "bias", bias, _F32, DT_F32)))
        pb = base + S.bias
    try:  # (bias, state_indices, activation[, cache_seqlens: appended after ABI v1])
        abi.CONV1D_STEP_OPTIONS.pack_into(buf, s.opt_off, pb, 0, 1, 0)
    except struct.error:
        abi.CONV1D_STEP_OPTIONS.pack_into(buf, s.opt_off, pb, 0, 1)
    return s, (base + S.out, base + S.conv_cache, base + S.x, base + S.weight, base + s.opt_off)


def _ssd_block(state, x, dt, A, B, C, D, dt_bias, out, dt_lo, dt_hi):
    s = _Scratch()
    buf, base, S = s.buf, s.base, _S
    TENSOR_R[4].pack_into(buf, S.state, state.data_ptr(), DT_F32, 4, *state.shape,
                          *state.stride())
    _packed((dt, _bc_desc(buf, S.dt, "dt", dt, x.dim() - 1, _F32, DT_F32)),
            (A, _bc_desc(buf, S.A, "A", A, 1, _F32, DT_F32)),
            (x, _act_desc(buf, S.x, "x", x, _F32, DT_F32)),
            (B, _act_desc(buf, S.B, "B", B, _F32, DT_F32)),
            (C, _act_desc(buf, S.C, "C", C, _F32, DT_F32)))
    pD = pb = 0
    if D is not None:
        k = 1 if D.dim() == 1 or D.stride(1) == 0 else 2
        _packed((D, _bc_desc(buf, S.D, "D", D, k, _F32, DT_F32)))
        pD = base + S.D
    if dt_bias is not None:
        _packed((dt_bias, _bc_desc(buf, S.dt_bias, "dt_bias", dt_bias, 1, _F32, DT_F32)))
        pb = base + S.dt_bias
    TENSOR_R[out.dim()].pack_into(buf, S.out, out.data_ptr(), DT_F32, out.dim(), *out.shape,
                                  *out.stride())
    abi.SSD_STEP_OPTIONS.pack_into(buf, S.options, pD, 0, pb, 0, 1, dt_lo, dt_hi)
    return s, (base + S.state, base + S.out, None, base + S.x, base + S.dt, base + S.A,
               base + S.B, base + S.C, base + S.options)


class _BlockCall:
    """One layer's packed mamba2_block_step call: the descriptors of the in/out tensors and
    the weights, the weights and options structs, all in memory this object owns."""

    __slots__ = ("buf", "args", "keep")
    _B = abi.SLOT["block_step"]

    def __init__(self, hidden, res, p, norm_w, norm_eps, gi, go, in_b, out_b, first,
                 round_bf16=False, round_norm_input=False):
        B = self._B
        w_off = B.out_proj_bias + abi.TSZ
        o_off = (w_off + abi.BLOCK_STEP_WEIGHTS_S.size + 15) // 16 * 16
        self.buf = buf = ctypes.create_string_buffer(o_off + abi.BLOCK_STEP_OPTIONS.size + 16)
        base = ctypes.addressof(buf)
        for off, t in ((B.hidden, hidden), (B.residual, res), (B.conv_cache, p.conv_state),
                       (B.state_cache, p.ssm_state)):
            TENSOR_R[t.dim()].pack_into(buf, off, t.data_ptr(), DT_F32, t.dim(), *t.shape,
                                        *t.stride())
        keep = [hidden, res, p.conv_state, p.ssm_state, gi, go]
        ptr = {}

        def f32(name, t, k=1):
            if t is None:
                ptr[name] = 0
                return
            t = t.detach().to(_F32).contiguous()
            kept = _bc_desc(buf, getattr(B, name), name, t, k, _F32, DT_F32)
            if kept is NotImplemented:
                raise ValueError(f"decode plan: {name} does not fit the block step")
            keep.append(kept)
            ptr[name] = base + getattr(B, name)

        f32("norm_weight", norm_w)
        f32("in_proj_bias", in_b)
        f32("conv_weight", p.conv_w, 2)
        f32("conv_bias", p.conv_b)
        f32("A", p.A)
        D = p.D
        f32("D", D, 1 if D.dim() == 1 or D.stride(1) == 0 else 2)
        f32("dt_bias", p.dt_bias)
        f32("gnorm_weight", p.gnorm_w)
        f32("out_proj_bias", out_b)
        gi.pack(buf, B.in_proj_weight)
        go.pack(buf, B.out_proj_weight)
        ptr["in_proj_weight"] = base + B.in_proj_weight
        ptr["out_proj_weight"] = base + B.out_proj_weight
        abi.BLOCK_STEP_WEIGHTS_S.pack_into(buf, w_off, *(ptr[n] for n in abi.BLOCK_STEP_WEIGHTS))
        abi.BLOCK_STEP_OPTIONS.pack_into(buf, o_off, 0 if first else 1, float(norm_eps),
                                         float(p.gnorm_eps), int(p.gsize), 1 if p.nbg else 0,
                                         1, p.dt_lo, p.dt_hi, 0, 0, 1 if round_bf16 else 0,
                                         1 if round_norm_input else 0)
        self.keep = keep
        self.args = (base + B.hidden, base + B.residual, base + B.conv_cache,
                     base + B.state_cache, base + w_off, base + o_off)


def _block_step_enabled() -> bool:
    return os.environ.get("MAMBA2C_BLOCK_STEP", "1") != "0"


class DecodePlan:
    """Buffers + packed C calls for one decoder (batch size Bsz); `step(h)` runs all layers
    on the embedded tokens h [Bsz, d_model] and returns (hidden, residual) for the final
    norm."""

    def __init__(self, dec, Bsz: int):
        L0 = dec.layers[0]
        self.dtype = dt = L0.dtype
        self.half = dt in _HALF
        d_model = dec.emb.shape[1]
        m0 = L0.mixer
        H, P, G, N = L0.H, L0.P, L0.G, L0.N
        d_ssm, conv_dim, d_in = m0.d_ssm, m0.conv_dim, L0.in_w.shape[0]
        e = lambda *s, d=_F32: torch.zeros(*s, dtype=d)  # noqa: E731
        self.res = e(Bsz, d_model)                       # the residual (float32)
        self.nx = e(Bsz, d_model) if self.half else self.res  # what the block norm reads
        self.nxh = e(Bsz, d_model, d=dt) if self.half else None
        self.n32 = e(Bsz, d_model)
        self.nh = e(Bsz, d_model, d=dt) if self.half else self.n32  # in_proj's input
        self.nrs = e(Bsz, 1)
        self.zx = e(Bsz, d_in, d=dt)
        zi, xi, di = 2 * L0.d_mlp, 2 * L0.d_mlp + d_ssm, 2 * L0.d_mlp + d_ssm + conv_dim
        self.z_h, self.xbc_h, self.dt_h = (self.zx[:, zi:zi + d_ssm], self.zx[:, xi:di],
                                           self.zx[:, di:di + H])
        if self.half:
            self.z32, self.xin32, self.dt32 = e(Bsz, d_ssm), e(Bsz, conv_dim), e(Bsz, H)
            self.xbc_r = e(Bsz, conv_dim, d=dt)
            self.y_r = e(Bsz, H, P, d=dt)
            self.g_h = e(Bsz, d_ssm, d=dt)
        else:
            self.z32, self.xin32, self.dt32 = self.z_h, self.xbc_h, self.dt_h
        self.xbc = e(Bsz, conv_dim)
        x = self.xbc[:, :d_ssm].view(Bsz, H, P)
        Bm = self.xbc[:, d_ssm:d_ssm + G * N].view(Bsz, G, N)
        Cm = self.xbc[:, d_ssm + G * N:].view(Bsz, G, N)
        self.y = e(Bsz, H, P)
        self.g32 = e(Bsz, d_ssm)
        self.grs = e(Bsz, G)
        self.gin = self.g_h if self.half else self.g32   # out_proj's input
        self.h = e(Bsz, d_model, d=dt)
        # the C GEMV's float32 operands (half models: widened copies / rounded afterwards)
        self.nh32 = e(Bsz, d_model) if self.half else self.nh
        self.zx32 = e(Bsz, d_in) if self.half else self.zx
        self.gin32 = e(Bsz, d_ssm) if self.half else self.gin
        self.h32 = e(Bsz, d_model) if self.half else self.h
        self.calls = []
        for p in dec.layers:
            blk = p.blk
            c = _LayerCalls()
            c.keep = (blk.norm.weight.detach().to(_F32).contiguous(),)
            c.norm, c.args_norm = _norm_block(self.nx, None, c.keep[0], self.n32, self.nrs,
                                              blk.norm.eps, 0, False)
            c.conv, c.args_conv = _conv_block(self.xin32, p.conv_state, p.conv_w, p.conv_b,
                                              self.xbc)
            c.ssd, c.args_ssd = _ssd_block(p.ssm_state, x, self.dt32, p.A, Bm, Cm, p.D,
                                           p.dt_bias, self.y, p.dt_lo, p.dt_hi)
            c.gnorm, c.args_gnorm = _norm_block(self.y.view(Bsz, d_ssm), self.z32, p.gnorm_w,
                                                self.g32, self.grs, p.gnorm_eps, p.gsize, p.nbg)
            m = p.mixer
            gi, go = gemv_weight(p.in_w, m.in_proj), gemv_weight(p.out_w, m.out_proj)
            c_in = None if gi is None else LinearCall(self.zx32, self.nh32, gi, p.in_b)
            c_out = None if go is None else LinearCall(self.h32, self.gin32, go, p.out_b)
            self.calls.append((c, p.in_w.t(), p.in_b, p.out_w.t(), p.out_b, c_in, c_out))
        lib = loader._lib if loader._lib is not None else loader.load()
        # the one-call-per-layer road (float32 and bfloat16 models with every projection on
        # the GEMV; bf16: the block step's round_bf16 mode, hidden in the float32 h32)
        self.blocks = None
        self.lib, self._dec, self._blocks, self.ws = lib, dec, {}, None
        self.block_road = ((dt is _F32 or dt is torch.bfloat16) and _block_step_enabled()
                           and all(c[5] is not None and c[6] is not None for c in self.calls))
        if self.block_road and not self.half:
            self.blocks = self._block_calls(False)
        self.f_blk = lib.mamba2_block_step
        self.f_norm = lib.mamba2_rmsnorm_gated_forward
        self.f_conv = lib.mamba2_conv1d_step
        self.f_ssd = lib.mamba2_ssd_step

    def _block_calls(self, fused: bool):
        """The packed block-step calls (bf16: per value of `fused`, which decides whether the
        block norm reads the residual rounded to bf16), and the workspace they share."""
        if fused in self._blocks:
            return self._blocks[fused]
        half, hid = self.half, self.h32
        blocks = [_BlockCall(hid, self.res, p, c[0].keep[0], p.blk.norm.eps, c[5].keep[2],
                             c[6].keep[2], p.in_b, p.out_b, i == 0, round_bf16=half,
                             round_norm_input=half and not fused)
                  for i, (p, c) in enumerate(zip(self._dec.layers, self.calls))]
        ctx = _context(context._backend_code())
        need, n = 0, ctypes.c_size_t(0)
        for b in blocks:
            st = self.lib.mamba2_block_step_workspace_size(ctx, *b.args, ctypes.byref(n))
            if st:
                loader._raise_status(st, "mamba2_block_step_workspace_size")
            need = max(need, n.value)
        if self.ws is None or self.ws.numel() < need:
            self.ws = torch.empty(max(need, 1), dtype=torch.uint8)
        self.ws_args = (self.ws.data_ptr(), need)
        self._blocks[fused] = blocks
        return blocks

    @staticmethod
    def supported(dec, Bsz: int) -> bool:
        from ..layer_norm import RMSNorm
        if not dec.layers or not dec.r32:
            return False
        dt = dec.layers[0].dtype
        if dt is not _F32 and dt not in _HALF:
            return False
        for p in dec.layers:
            m, blk = p.mixer, p.blk
            if (p.z_in_scan or p.d_mlp or blk.mlp is not None or p.dtype is not dt
                    or not isinstance(blk.norm, RMSNorm) or blk.norm.bias is not None
                    or not p.in_w.is_cpu or p.conv_state.dtype is not _F32
                    or p.ssm_state.dtype is not _F32
                    or not p.conv_state.is_contiguous() or not p.ssm_state.is_contiguous()
                    or p.conv_state.shape[0] != Bsz or p.ssm_state.shape[0] != Bsz
                    or p.conv_state.shape[-1] != m.d_conv - 1
                    or p.A.dim() != 1 or p.dt_bias is None or p.dt_bias.dim() != 1):
                return False
        return True

    def step(self, h: torch.Tensor, fused: bool):
        ctx = _context(context._backend_code())
        f_norm, f_conv, f_ssd = self.f_norm, self.f_conv, self.f_ssd
        half = self.half
        res, zx, hb = self.res, self.zx, self.h
        mm, addmm = torch.mm, torch.addmm
        if self.blocks is not None:                    # one C call per layer
            f_blk, ws = self.f_blk, self.ws_args
            hb.copy_(h)                                # the first block: residual = hidden
            for b in self.blocks:
                st = f_blk(ctx, *b.args, *ws)
                if st:
                    loader._raise_status(st, "mamba2_block_step")
            return hb, res
        if half and self.block_road:                   # bf16: one C call per layer too
            blocks = self._block_calls(fused)
            f_blk, ws, h32 = self.f_blk, self.ws_args, self.h32
            h32.copy_(h)                               # exact: h is bf16 (or float32)
            for b in blocks:
                st = f_blk(ctx, *b.args, *ws)
                if st:
                    loader._raise_status(st, "mamba2_block_step")
            hb.copy_(h32)                              # exact: the block rounded it to bf16
            return hb, res
        res.copy_(h)                                   # first layer: residual = hidden
        for i, (c, in_wt, in_b, out_wt, out_b, c_in, c_out) in enumerate(self.calls):
            if i:
                torch.add(res, hb, out=res)            # residual = hidden + residual
            if half and not fused:                     # norm(residual.to(dtype))
                self.nxh.copy_(res)
                self.nx.copy_(self.nxh)
            elif half:                                 # fused: the unrounded sum
                self.nx.copy_(res)
            st = f_norm(ctx, *c.args_norm)
            if st:
                loader._raise_status(st, "mamba2_rmsnorm_gated_forward")
            if half:
                self.nh.copy_(self.n32)
            if c_in is not None:
                if half:
                    self.nh32.copy_(self.nh)
                c_in(ctx)
                if half:
                    zx.copy_(self.zx32)
            elif in_b is None:
                mm(self.nh, in_wt, out=zx)
            else:
                addmm(in_b, self.nh, in_wt, out=zx)
            if half:
                self.xin32.copy_(self.xbc_h)
                self.dt32.copy_(self.dt_h)
                self.z32.copy_(self.z_h)
            st = f_conv(ctx, *c.args_conv)
            if st:
                loader._raise_status(st, "mamba2_conv1d_step")
            if half:                                   # Mamba2.step rounds the conv output
                self.xbc_r.copy_(self.xbc)
                self.xbc.copy_(self.xbc_r)
            st = f_ssd(ctx, *c.args_ssd)
            if st:
                loader._raise_status(st, "mamba2_ssd_step")
            if half:                                   # ... and the SSD output
                self.y_r.copy_(self.y)
                self.y.copy_(self.y_r)
            st = f_norm(ctx, *c.args_gnorm)
            if st:
                loader._raise_status(st, "mamba2_rmsnorm_gated_forward")
            if half:
                self.g_h.copy_(self.g32)
            if c_out is not None:
                if half:
                    self.gin32.copy_(self.g_h)
                c_out(ctx)
                if half:
                    hb.copy_(self.h32)
            elif out_b is None:
                mm(self.gin, out_wt, out=hb)
            else:
                addmm(out_b, self.gin, out_wt, out=hb)
        return hb, res


def plan_for(dec, Bsz: int) -> Optional[DecodePlan]:
    if not DecodePlan.supported(dec, Bsz):
        return None
    return DecodePlan(dec, Bsz)
