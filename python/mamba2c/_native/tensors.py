"""tensors.py — torch tensors into mamba2_tensor_t descriptors (the layout policy).

For every tensor argument:
  - A CPU tensor whose last dimension is contiguous (stride 1, or size <= 1) and that has
    the dtype the op computes in is passed as data_ptr + shape + element strides: views
    (slices of Mamba-2's in_proj output, transposes of outer dims, expand()ed outer dims
    with stride 0) are never copied.
  - A last dimension with stride != 1 (e.g. x.transpose(-1, -2), or an expand()ed last
    dim) is copied with .contiguous() first.
  - torch tensors never have negative strides (torch.flip copies); numpy arrays with
    negative strides must be copied by the caller (torch.from_numpy refuses them).
  - Outputs are always allocated by the wrappers (fresh, contiguous), so an output is never
    a stride-0 broadcast or an overlapping view.
  - Devices: CPU tensors, and CUDA tensors in a call on that CUDA device (context.
    device_call made it the call's device: their device pointers are passed as they are,
    zero-copy, to the CUDA backend's device mode). Index tensors (cu_seqlens,
    state_positions, state_indices, cache_seqlens) go where the call runs: in a CUDA call on
    its device (the device contexts take device indices, whose values the library does not
    read on the host: no copy, no sync; a CPU one is copied there), in a CPU call on the host
    (a CUDA one copied there: _index_tensor). Any other tensor that is not on the CPU raises
    DeviceError (a NotImplementedError); a meta tensor raises DeviceError when real
    computation is requested (shape-only tracing goes through the fake implementations in
    _custom_ops.py instead and never reaches this package).
Every packer writes at a byte offset of the per-thread buffer (abi.SLOT gives them) and
returns the tensor actually described, which the caller keeps alive over the C call.
"""
from __future__ import annotations

import torch

from . import abi, context
from .abi import MAX_RANK, TENSOR, TENSOR_R, TORCH_DTYPE
from .loader import DeviceError

_ZEROS = (0,) * MAX_RANK
_T = TENSOR.st
_TR = TENSOR_R


def _check_device(name: str, t: torch.Tensor) -> None:
    dev = t.device.type
    if dev == "cpu":  # (in a CUDA call device_call has let only index tensors be here)
        return
    if t.device == context._tls.__dict__.get("device"):
        return  # a CUDA tensor of a call on its device (context.device_call)
    if dev == "meta":
        raise DeviceError(
            f"mamba2c: {name} is a meta tensor; the C library needs real data. (Shape-only "
            f"tracing works through torch.compile / FakeTensor, which use the fake kernels.)")
    if dev == "cuda":
        raise DeviceError(
            f"mamba2c: {name} is on device '{t.device}' and the other tensors of the call are "
            f"not, or the C library has no usable CUDA backend (built without nvcc, or no "
            f"driver / device): move the tensors to one device")
    raise DeviceError(
        f"mamba2c: {name} is on device '{t.device}'; mamba2c computes on CPU tensors, and "
        f"CUDA tensors with its CUDA backend (no {dev} backend). Move the tensors to the CPU.")


def _host_index(name: str, t: torch.Tensor) -> torch.Tensor:
    """An index tensor as the host array the C library reads: a CUDA one of the call's
    device is copied to the host (a synchronising copy, as the C checks read the values)."""
    if not t.is_cpu:
        _check_device(name, t)
        t = t.cpu()
    return t


def _desc(buf, off: int, name: str, t: torch.Tensor, dtype: torch.dtype, code: int) -> torch.Tensor:
    """Pack the descriptor of `t` (converted per the layout policy) at byte offset `off`."""
    if not t.is_cpu:
        _check_device(name, t)
    if t.dtype is not dtype:
        if not t.dtype.is_floating_point:
            raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected a floating-point tensor")
        t = t.to(dtype)
    sh = t.shape
    st = t.stride()
    r = len(sh)
    if r and sh[-1] > 1 and st[-1] != 1:
        t = t.contiguous()
        st = t.stride()
    _T.pack_into(buf, off, t.data_ptr(), code, r, *sh, *_ZEROS[r:], *st, *_ZEROS[r:])
    return t


def _out_desc(buf, off: int, t: torch.Tensor, code: int) -> None:
    """Descriptor of a fresh contiguous output allocated here."""
    sh = t.shape
    r = len(sh)
    _T.pack_into(buf, off, t.data_ptr(), code, r, *sh, *_ZEROS[r:], *t.stride(), *_ZEROS[r:])


def _index_tensor(name: str, t: torch.Tensor) -> torch.Tensor:
    """An index tensor where the C call reads it: in a CUDA call (context.device_call) on
    the call's device, as the device contexts take device index tensors (a CPU one is copied
    there; a CUDA one is used as is: no copy to the host, no sync); in a CPU call on the host
    (_host_index)."""
    dev = context._tls.__dict__.get("device")
    if dev is None:
        return _host_index(name, t)
    if t.is_cpu:
        return t.to(dev)
    _check_device(name, t)
    return t


def _index_desc(buf, off, t, name):
    t = _index_tensor(name, t)
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected int32 or int64")
    t = t.contiguous()
    _out_desc(buf, off, t, TORCH_DTYPE[t.dtype])
    return t


def _cu_prep(cu):
    if cu is None:
        return None
    cu = _index_tensor("cu_seqlens", cu)
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"mamba2c: cu_seqlens has dtype {cu.dtype}; expected int32 or int64")
    return cu.contiguous()


def _options(s, keep: list, slots, chunk_size, D, z, dt_bias, init, cu, dt_softplus, dt_lo,
             dt_hi, cdtype, code, positions=None, zdtype=None, zcode=None) -> int:
    """Pack the tensors an SSD options struct points at (at their `slots`, an abi.SLOT entry
    naming abi.SSD_OPTION_TENSORS, or abi.CHUNKED_OPTION_TENSORS for a staged stage, whose
    mamba2_ssd_chunked_options_t has no cu_seqlens / state_positions) and the struct; returns
    its address. z, an activation, is described in (zdtype, zcode) when given (half
    storage), else like the parameters in (cdtype, code)."""
    buf, base = s.buf, s.base
    pD = pz = pb = pi = pc = pp = 0
    if D is not None:
        keep.append(_desc(buf, slots.D, "D", D, cdtype, code))
        pD = base + slots.D
    if z is not None:
        keep.append(_desc(buf, slots.z, "z", z, zdtype or cdtype,
                          code if zcode is None else zcode))
        pz = base + slots.z
    if dt_bias is not None:
        keep.append(_desc(buf, slots.dt_bias, "dt_bias", dt_bias, cdtype, code))
        pb = base + slots.dt_bias
    if init is not None:
        keep.append(_desc(buf, slots.initial_state, "initial_states", init, cdtype, code))
        pi = base + slots.initial_state
    if cu is not None:
        cu = _cu_prep(cu)
        keep.append(cu)
        _out_desc(buf, slots.cu_seqlens, cu, TORCH_DTYPE[cu.dtype])
        pc = base + slots.cu_seqlens
    if positions is not None:
        keep.append(_index_desc(buf, slots.state_positions, positions, "state_positions"))
        pp = base + slots.state_positions
    if not hasattr(slots, "cu_seqlens"):  # a staged stage: mamba2_ssd_chunked_options_t
        abi.SSD_CHUNKED_OPTIONS.pack_into(buf, s.opt_off, int(chunk_size), pD, pz, pb, pi,
                                          1 if dt_softplus else 0, float(dt_lo), float(dt_hi))
    else:
        abi.SSD_OPTIONS.pack_into(buf, s.opt_off, int(chunk_size), pD, pz, pb, pi, pc, pp,
                                  1 if dt_softplus else 0, float(dt_lo), float(dt_hi))
    return base + s.opt_off


# ---------------------------------------------------------------------------------------
# The decode steps' packers (see steps.py): per-rank descriptors, broadcast views
# ---------------------------------------------------------------------------------------

def _bc_desc(buf, off, name, t, k, sdt, code):
    """Pack the first k dims of t when its dims after k are broadcast (stride 0 or size 1);
    otherwise (values genuinely vary along them) return NotImplemented — unless the values
    are equal along those dims anyway (a materialised repeat), checked with torch.equal and
    then passed as a compact copy. Returns the tensor to keep alive over the call."""
    if not t.is_cpu:
        _check_device(name, t)
    sh = t.shape
    st = t.stride()
    r = len(sh)
    if r != k:
        if r < k:
            return NotImplemented
        for i in range(k, r):
            if st[i] and sh[i] != 1:
                c = t[(Ellipsis,) + (0,) * (r - k)]
                if not torch.equal(t, c.reshape(tuple(sh[:k]) + (1,) * (r - k)).expand(sh)):
                    return NotImplemented
                t = c
                sh = c.shape
                st = c.stride()
                break
        else:
            sh = sh[:k]
            st = st[:k]
    if t.dtype is not sdt or (k and sh[k - 1] > 1 and st[k - 1] != 1):
        if not t.dtype.is_floating_point:
            raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected a floating-point tensor")
        t = t.as_strided(sh, st).to(sdt).contiguous()
        sh = t.shape
        st = t.stride()
    _TR[k].pack_into(buf, off, t.data_ptr(), code, k, *sh, *st)
    return t


def _act_desc(buf, off, name, t, sdt, code):
    """An activation (x, B, C, z): converted to the state's dtype if needed (bf16/f16 -> f32),
    copied only when its last dim is not contiguous."""
    if not t.is_cpu:
        _check_device(name, t)
    sh = t.shape
    st = t.stride()
    r = len(sh)
    if t.dtype is not sdt or (r and sh[r - 1] > 1 and st[r - 1] != 1):
        if not t.dtype.is_floating_point:
            raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected a floating-point tensor")
        t = t.to(sdt).contiguous()
        st = t.stride()
    _TR[r].pack_into(buf, off, t.data_ptr(), code, r, *sh, *st)
    return t
