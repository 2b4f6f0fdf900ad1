"""_custom_ops.py — the SSD op as torch.library custom ops, with autograd.

Two torch-level entry points reach the C library:

  torch.ops.mamba2c.ssd_fwd / torch.ops.mamba2c.ssd_bwd
      torch.library.custom_op registrations (torch >= 2.4) with fake (meta) kernels and
      register_autograd, so torch.compile traces through the SSD op without a graph break
      (the op is opaque to Inductor and runs the C library at run time) and
      torch.library.opcheck passes.

  SSDFunction (torch.autograd.Function)
      the same forward/backward pair called directly, used in eager mode because it skips
      the dispatcher round trip of a custom op (see ssd() below for the measured numbers).

ssd() picks SSDFunction in eager mode and the custom op while torch.compile traces. Both
produce identical results (same C calls).

Devices: every custom op here has ONE implementation, registered by torch.library.custom_op
without device_types, i.e. for every device (CompositeExplicitAutograd), and it routes
inside: the _native function it calls runs CPU tensors on this thread's backend and CUDA
tensors on the CUDA backend's device mode (_native.context.device_call: zero-copy, torch's
current stream at the time the op runs). A separate CUDA-key registration would repeat the
same body and split one op's behaviour over two functions that could drift apart; routing
in the binding also keeps the eager autograd.Functions, which bypass the dispatcher, on
exactly the same path. The fake kernels allocate with x.new_empty, so traced shapes carry
the input's device.

Training with z: ssd() asks for out_x (the output before the z gate, C options.out_x) when
dz will be needed (_want_out_x); the forward returns it as an extra, non-differentiable
output of the custom op (or keeps it inside SSDFunction), saves it, and the backward hands
it to the C backward, which then does not recompute y for dz. Inference allocates nothing.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _dispatch, _native

__all__ = ["ssd", "SSDFunction", "rmsnorm_gated", "conv1d", "conv1d_step"]

# positions of the differentiable inputs in the op schema below
_DIFF_POS = (0, 1, 2, 3, 4, 6, 7, 8, 9)  # x dt A B C | D z dt_bias initial_states


def _empty(x: Tensor) -> Tensor:
    return x.new_empty((0,))


@torch.library.custom_op("mamba2c::ssd_fwd", mutates_args=())
def ssd_fwd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
            D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor],
            initial_states: Optional[Tensor], cu_seqlens: Optional[Tensor], dt_softplus: bool,
            dt_lo: float, dt_hi: float, want_out_x: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    """SSD forward (SPEC §1): (out [B,L,H,P] in x.dtype, final_state [S,H,P,N], out_x).
    out_x [B,L,H,P] in x.dtype is the output before the z gate (y + D x), which the
    backward reads instead of recomputing y for dz; it is computed only with want_out_x and
    z given, else an empty tensor (no memory)."""
    r = _native.ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
                            cu_seqlens, dt_softplus, dt_lo, dt_hi, want_out_x)
    out_x = r[2] if want_out_x else None
    return r[0], r[1], out_x if out_x is not None else _empty(x)


@ssd_fwd.register_fake
def _ssd_fwd_fake(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                  dt_softplus, dt_lo, dt_hi, want_out_x=False):
    Bsz, L, H, P = x.shape
    N = B.shape[-1]
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    pdt = _native.compute_dtype(x, dt, B, C, z)
    out_x = x.new_empty((Bsz, L, H, P)) if (want_out_x and z is not None) else _empty(x)
    return x.new_empty((Bsz, L, H, P)), x.new_empty((S, H, P, N), dtype=pdt), out_x


@torch.library.custom_op("mamba2c::ssd_bwd", mutates_args=())
def ssd_bwd(dout: Tensor, dfinal: Optional[Tensor], x: Tensor, dt: Tensor, A: Tensor,
            B: Tensor, C: Tensor, chunk_size: int, D: Optional[Tensor], z: Optional[Tensor],
            dt_bias: Optional[Tensor], initial_states: Optional[Tensor],
            cu_seqlens: Optional[Tensor], dt_softplus: bool, dt_lo: float, dt_hi: float,
            needs: list[bool], out_x: Optional[Tensor] = None
            ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """SSD backward (SPEC §2). Returns the 9 gradients (dx, ddt, dA, dB, dC, dD, dz,
    ddt_bias, dinitial_states); one not requested (or of an absent input) is an empty
    tensor. out_x: ssd_fwd's out_x for the same inputs (with z: y is not recomputed)."""
    g = _native.ssd_backward(dout, dfinal, x, dt, A, B, C, chunk_size, D, z, dt_bias,
                             initial_states, cu_seqlens, dt_softplus, dt_lo, dt_hi, needs,
                             out_x)
    return tuple(t if t is not None else _empty(x) for t in g)


@ssd_bwd.register_fake
def _ssd_bwd_fake(dout, dfinal, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
                  cu_seqlens, dt_softplus, dt_lo, dt_hi, needs, out_x=None):
    ins = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    return tuple(t.new_empty(t.shape) if (n and t is not None) else _empty(x)
                 for t, n in zip(ins, needs))


def _want_out_x(z: Optional[Tensor]) -> bool:
    """Whether the forward should produce out_x for the backward: z is given and dz will be
    needed (grad mode on and z requires grad). The C backward uses out_x only for dz, so
    inference, and training without a gradient for z, allocate nothing extra."""
    return z is not None and z.requires_grad and torch.is_grad_enabled()


def _setup_context(ctx, inputs, output):
    (x, dt, A, B, C, chunk_size, D, z, dt_bias, init, cu, sp, lo, hi) = inputs[:14]
    want = len(inputs) > 14 and bool(inputs[14]) and z is not None
    ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, init, cu, output[2] if want else None)
    ctx.args = (chunk_size, sp, lo, hi)
    ctx.mark_non_differentiable(output[2])


def _backward(ctx, dout, dfinal, _dout_x=None):
    x, dt, A, B, C, D, z, dt_bias, init, cu, out_x = ctx.saved_tensors
    chunk_size, sp, lo, hi = ctx.args
    nig = ctx.needs_input_grad
    needs = [bool(nig[i]) for i in _DIFF_POS]
    g = torch.ops.mamba2c.ssd_bwd(dout, dfinal, x, dt, A, B, C, chunk_size, D, z, dt_bias,
                                  init, cu, sp, lo, hi, needs, out_x)
    g = [t if n else None for t, n in zip(g, needs)]
    return (g[0], g[1], g[2], g[3], g[4], None, g[5], g[6], g[7], g[8],
            None, None, None, None, None)


ssd_fwd.register_autograd(_backward, setup_context=_setup_context)


class SSDFunction(torch.autograd.Function):
    """Eager-mode autograd wrapper around the same C forward/backward (no dispatcher).
    want_out_x (see _want_out_x; ssd() decides): the forward also writes out_x, the output
    before the z gate, and saves it; the backward then skips recomputing y for dz."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                dt_softplus, dt_lo, dt_hi, want_out_x=False):
        r = _native.ssd_forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
                                cu_seqlens, dt_softplus, dt_lo, dt_hi, bool(want_out_x))
        out, final = r[0], r[1]
        out_x = r[2] if want_out_x else None
        ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, cu_seqlens, out_x)
        ctx.args = (chunk_size, dt_softplus, dt_lo, dt_hi)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        return out, final

    @staticmethod
    def backward(ctx, dout, dfinal):
        x, dt, A, B, C, D, z, dt_bias, init, cu, out_x = ctx.saved_tensors
        chunk_size, sp, lo, hi = ctx.args
        nig = ctx.needs_input_grad
        needs = [bool(nig[i]) for i in _DIFF_POS]
        if dout is None:
            dout = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        g = _native.ssd_backward(dout, dfinal, x, dt, A, B, C, chunk_size, D, z, dt_bias,
                                 init, cu, sp, lo, hi, needs, out_x)
        return (g[0], g[1], g[2], g[3], g[4], None, g[5], g[6], g[7], g[8],
                None, None, None, None, None)


# ---- SSD forward that also returns the states after chosen tokens ------------------------

@torch.library.custom_op("mamba2c::ssd_fwd_states", mutates_args=())
def ssd_fwd_states(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
                   D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor],
                   initial_states: Optional[Tensor], cu_seqlens: Optional[Tensor],
                   dt_softplus: bool, dt_lo: float, dt_hi: float,
                   positions: Tensor, want_out_x: bool = False
                   ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(out, final_state, position_states [npos,H,P,N], out_x) — mamba2_ssd_forward_states;
    out_x as in ssd_fwd (empty unless want_out_x and z)."""
    r = _native.ssd_forward_states(x, dt, A, B, C, chunk_size, positions, D, z, dt_bias,
                                   initial_states, cu_seqlens, dt_softplus, dt_lo, dt_hi,
                                   want_out_x)
    out, final, pos = r[0], r[1], r[2]
    out_x = r[3] if want_out_x else None
    return out, final, pos, out_x if out_x is not None else _empty(x)


@ssd_fwd_states.register_fake
def _ssd_fwd_states_fake(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
                         cu_seqlens, dt_softplus, dt_lo, dt_hi, positions, want_out_x=False):
    out, final, out_x = _ssd_fwd_fake(x, dt, A, B, C, chunk_size, D, z, dt_bias,
                                      initial_states, cu_seqlens, dt_softplus, dt_lo, dt_hi,
                                      want_out_x)
    return (out, final, final.new_empty((positions.shape[0],) + tuple(final.shape[1:])),
            out_x)


def _states_setup_context(ctx, inputs, output):
    want = len(inputs) > 15 and inputs[15]
    _setup_context(ctx, tuple(inputs[:14]) + (want,), (output[0], output[1], output[3]))
    ctx.mark_non_differentiable(output[2], output[3])


def _states_backward(ctx, dout, dfinal, _dpos, _dout_x):
    return _backward(ctx, dout, dfinal) + (None,)


ssd_fwd_states.register_autograd(_states_backward, setup_context=_states_setup_context)


class SSDStatesFunction(torch.autograd.Function):
    """Eager autograd wrapper of mamba2_ssd_forward_states: out and final_state are
    differentiable (the backward is mamba2_ssd_backward's); position_states is not (the C
    library has no backward for it). want_out_x as in SSDFunction."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, cu_seqlens,
                dt_softplus, dt_lo, dt_hi, positions, want_out_x=False):
        r = _native.ssd_forward_states(x, dt, A, B, C, chunk_size, positions, D, z, dt_bias,
                                       initial_states, cu_seqlens, dt_softplus, dt_lo, dt_hi,
                                       bool(want_out_x))
        out, final, pos = r[0], r[1], r[2]
        out_x = r[3] if want_out_x else None
        ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, cu_seqlens, out_x)
        ctx.args = (chunk_size, dt_softplus, dt_lo, dt_hi)
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(pos)
        return out, final, pos

    @staticmethod
    def backward(ctx, dout, dfinal, _dpos):
        return SSDFunction.backward(ctx, dout, dfinal) + (None,)


def ssd_states(x, dt, A, B, C, chunk_size, positions, D=None, z=None, dt_bias=None,
               initial_states=None, cu_seqlens=None, dt_softplus=False,
               dt_limit=(0.0, math.inf)):
    """(out, final_state, position_states); eager: SSDStatesFunction, compiling: the op."""
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    want = _want_out_x(z)
    if _is_compiling():
        return torch.ops.mamba2c.ssd_fwd_states(x, dt, A, B, C, int(chunk_size), D, z, dt_bias,
                                                initial_states, cu_seqlens, bool(dt_softplus),
                                                lo, hi, positions, want)[:3]
    return SSDStatesFunction.apply(x, dt, A, B, C, int(chunk_size), D, z, dt_bias,
                                   initial_states, cu_seqlens, bool(dt_softplus), lo, hi,
                                   positions, want)


def _is_compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # older torch
        return False


def ssd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
        D: Optional[Tensor] = None, z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None,
        initial_states: Optional[Tensor] = None, cu_seqlens: Optional[Tensor] = None,
        dt_softplus: bool = False, dt_limit=(0.0, math.inf),
        use_custom_op: Optional[bool] = None) -> Tuple[Tensor, Tensor]:
    """The differentiable SSD op in the C contract's form (SPEC §1-2):
    returns (out [B,L,H,P], final_state [S,H,P,N]) with S = B, or nseq with cu_seqlens.
    use_custom_op: None = custom op only while torch.compile traces (eager uses the
    lower-overhead autograd.Function); True/False forces one path."""
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    if use_custom_op is None:
        use_custom_op = _is_compiling()
    want = _want_out_x(z)  # training with z: the forward keeps out_x for the backward
    if use_custom_op:
        return torch.ops.mamba2c.ssd_fwd(x, dt, A, B, C, int(chunk_size), D, z, dt_bias,
                                         initial_states, cu_seqlens, bool(dt_softplus), lo, hi,
                                         want)[:2]
    return SSDFunction.apply(x, dt, A, B, C, int(chunk_size), D, z, dt_bias, initial_states,
                             cu_seqlens, bool(dt_softplus), lo, hi, want)


# =======================================================================================
# Gated RMSNorm (SPEC §5) and causal conv1d (SPEC §4, §6) — used by ops.py where
# _dispatch says the C op serves the call; same pattern as the SSD op above.
# =======================================================================================

def _needs(ctx, positions):
    nig = ctx.needs_input_grad
    return [bool(nig[i]) for i in positions]


# ---- gated RMSNorm: x, z [M,D] ---------------------------------------------------------

@torch.library.custom_op("mamba2c::rmsnorm_gated_fwd", mutates_args=())
def rmsnorm_gated_fwd(x: Tensor, z: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                      eps: float, group_size: int, norm_before_gate: bool) -> Tuple[Tensor, Tensor]:
    """(out [M,D] in x.dtype, rstd [M, D/group_size]); group_size 0 = D."""
    return _native.rmsnorm_gated_forward(x, z, weight, bias, eps, group_size, norm_before_gate)


@rmsnorm_gated_fwd.register_fake
def _rms_fwd_fake(x, z, weight, bias, eps, group_size, norm_before_gate):
    M, D = x.shape
    gs = group_size or D
    return x.new_empty((M, D)), x.new_empty((M, D // gs), dtype=_native._act_dtype(x, z))


@torch.library.custom_op("mamba2c::rmsnorm_gated_bwd", mutates_args=())
def rmsnorm_gated_bwd(dout: Tensor, x: Tensor, z: Optional[Tensor], weight: Tensor,
                      bias: Optional[Tensor], rstd: Optional[Tensor], eps: float, group_size: int,
                      norm_before_gate: bool, needs: list[bool]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    g = _native.rmsnorm_gated_backward(dout, x, z, weight, bias, rstd, eps, group_size,
                                       norm_before_gate, needs)
    return tuple(t if t is not None else x.new_empty((0,)) for t in g)


@rmsnorm_gated_bwd.register_fake
def _rms_bwd_fake(dout, x, z, weight, bias, rstd, eps, group_size, norm_before_gate, needs):
    return tuple(t.new_empty(t.shape) if (n and t is not None) else x.new_empty((0,))
                 for t, n in zip((x, z, weight, bias), needs))


def _rms_setup(ctx, inputs, output):
    x, z, weight, bias, eps, gs, nbg = inputs
    ctx.save_for_backward(x, z, weight, bias, output[1])
    ctx.args = (eps, gs, nbg)
    ctx.mark_non_differentiable(output[1])


def _rms_backward(ctx, dout, _drstd):
    x, z, weight, bias, rstd = ctx.saved_tensors
    needs = _needs(ctx, (0, 1, 2, 3))
    g = torch.ops.mamba2c.rmsnorm_gated_bwd(dout, x, z, weight, bias, rstd, *ctx.args, needs)
    g = [t if n else None for t, n in zip(g, needs)]
    return g[0], g[1], g[2], g[3], None, None, None


rmsnorm_gated_fwd.register_autograd(_rms_backward, setup_context=_rms_setup)


class RMSNormGatedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, z, weight, bias, eps, group_size, norm_before_gate):
        out, rstd = _native.rmsnorm_gated_forward(x, z, weight, bias, eps, group_size,
                                                  norm_before_gate)
        ctx.save_for_backward(x, z, weight, bias, rstd)
        ctx.args = (eps, group_size, norm_before_gate)
        return out

    @staticmethod
    def backward(ctx, dout):
        x, z, weight, bias, rstd = ctx.saved_tensors
        g = _native.rmsnorm_gated_backward(dout, x, z, weight, bias, rstd, *ctx.args,
                                           _needs(ctx, (0, 1, 2, 3)))
        return g[0], g[1], g[2], g[3], None, None, None


def rmsnorm_gated(x2d: Tensor, z2d: Optional[Tensor], weight: Tensor, bias: Optional[Tensor],
                  eps: float, group_size: int, norm_before_gate: bool) -> Tensor:
    """C gated RMSNorm on [M,D] rows (group_size 0 = D)."""
    if _is_compiling():
        return torch.ops.mamba2c.rmsnorm_gated_fwd(x2d, z2d, weight, bias, float(eps),
                                                   int(group_size), bool(norm_before_gate))[0]
    return RMSNormGatedFunction.apply(x2d, z2d, weight, bias, float(eps), int(group_size),
                                      bool(norm_before_gate))


# ---- causal conv1d: x [B,L,C] ------------------------------------------------------------

@torch.library.custom_op("mamba2c::conv1d_fwd", mutates_args=())
def conv1d_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor],
               initial_states: Optional[Tensor], cu_seqlens: Optional[Tensor],
               activation: bool) -> Tuple[Tensor, Tensor]:
    """(out [B,L,C], final_states [S,C,W-1])."""
    return _native.conv1d_forward(x, weight, bias, initial_states, cu_seqlens, activation, True)


@conv1d_fwd.register_fake
def _conv_fwd_fake(x, weight, bias, initial_states, cu_seqlens, activation):
    Bsz, L, C = x.shape
    S = Bsz if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return x.new_empty((Bsz, L, C)), x.new_empty((S, C, weight.shape[-1] - 1))


@torch.library.custom_op("mamba2c::conv1d_bwd", mutates_args=())
def conv1d_bwd(dout: Tensor, dfinal: Optional[Tensor], x: Tensor, weight: Tensor,
               bias: Optional[Tensor], initial_states: Optional[Tensor],
               cu_seqlens: Optional[Tensor], activation: bool,
               needs: list[bool]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    g = _native.conv1d_backward(dout, dfinal, x, weight, bias, initial_states, cu_seqlens,
                                activation, needs)
    return tuple(t if t is not None else x.new_empty((0,)) for t in g)


@conv1d_bwd.register_fake
def _conv_bwd_fake(dout, dfinal, x, weight, bias, initial_states, cu_seqlens, activation, needs):
    return tuple(t.new_empty(t.shape) if (n and t is not None) else x.new_empty((0,))
                 for t, n in zip((x, weight, bias, initial_states), needs))


def _conv_setup(ctx, inputs, output):
    x, weight, bias, init, cu, act = inputs
    ctx.save_for_backward(x, weight, bias, init, cu)
    ctx.act = act


def _conv_backward(ctx, dout, dfinal):
    x, weight, bias, init, cu = ctx.saved_tensors
    needs = _needs(ctx, (0, 1, 2, 3))
    g = torch.ops.mamba2c.conv1d_bwd(dout, dfinal, x, weight, bias, init, cu, ctx.act, needs)
    g = [t if n else None for t, n in zip(g, needs)]
    return g[0], g[1], g[2], g[3], None, None


conv1d_fwd.register_autograd(_conv_backward, setup_context=_conv_setup)


class Conv1dFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, initial_states, cu_seqlens, activation, want_final):
        out, final = _native.conv1d_forward(x, weight, bias, initial_states, cu_seqlens,
                                            activation, want_final)
        ctx.save_for_backward(x, weight, bias, initial_states, cu_seqlens)
        ctx.act = activation
        ctx.set_materialize_grads(False)
        return out, final

    @staticmethod
    def backward(ctx, dout, dfinal):
        x, weight, bias, init, cu = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        g = _native.conv1d_backward(dout, dfinal, x, weight, bias, init, cu, ctx.act,
                                    _needs(ctx, (0, 1, 2, 3)))
        return g[0], g[1], g[2], g[3], None, None, None


def conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor], initial_states: Optional[Tensor],
           cu_seqlens: Optional[Tensor], activation: bool, return_final_states: bool):
    """C causal conv1d; returns (out, final_states or None)."""
    if _is_compiling():
        out, final = torch.ops.mamba2c.conv1d_fwd(x, weight, bias, initial_states, cu_seqlens,
                                                  bool(activation))
        return out, (final if return_final_states else None)
    return Conv1dFunction.apply(x, weight, bias, initial_states, cu_seqlens, bool(activation),
                                bool(return_final_states))


@torch.library.custom_op("mamba2c::conv1d_step", mutates_args=("conv_cache",))
def conv1d_step_op(x: Tensor, conv_cache: Tensor, weight: Tensor, bias: Optional[Tensor],
                   activation: bool, state_indices: Optional[Tensor]) -> Tensor:
    """Decode step: x [B,C] or [B,T,C]; conv_cache [S,C,W-1] updated in place."""
    return _native.conv1d_step(x, conv_cache, weight, bias, activation, state_indices)


@conv1d_step_op.register_fake
def _conv_step_fake(x, conv_cache, weight, bias, activation, state_indices):
    return x.new_empty(x.shape)


def conv1d_step(x, conv_cache, weight, bias, activation, state_indices):
    if _is_compiling():
        return torch.ops.mamba2c.conv1d_step(x, conv_cache, weight, bias, bool(activation),
                                             state_indices)
    return _native.conv1d_step(x, conv_cache, weight, bias, bool(activation), state_indices)


# ---- SSD decode step: state [S,H,P,N] updated in place ----------------------------------

@torch.library.custom_op("mamba2c::ssd_step", mutates_args=("state",))
def ssd_step_op(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor],
                dt_softplus: bool, dt_lo: float, dt_hi: float,
                state_indices: Optional[Tensor]) -> Tensor:
    """Decode step (SPEC §6): out shaped like x; `state` updated in place. The C op when it
    can serve the call, the torch implementation otherwise (_dispatch.ssd_step decides)."""
    return _dispatch.ssd_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                              state_indices)


@ssd_step_op.register_fake
def _ssd_step_fake(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_lo, dt_hi,
                   state_indices):
    return x.new_empty(x.shape)
