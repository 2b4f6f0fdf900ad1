"""abi.py — the C ABI of libmamba2c (include/mamba2c.h) as data: the one layout table.

Everything the binding knows about the header's structs, prototypes and per-call
descriptor slots is declared here, once; the ctypes.Structure classes, the struct.Struct
packers, the byte offsets of every field and of every descriptor slot are derived from it.
A change of the header is an edit of these tables (plus the wrappers whose C signature
changed), never of hand-written offsets:

  STRUCTS     the public structs, field by field (name, ctypes type[, constant value]).
              A field with a constant (struct_size = SIZEOF, first in every options and
              grads struct) is filled in by the packer; the wrappers pass the other fields,
              in table order.
  PROTOTYPES  every entry point the binding calls: restype and argtypes.
  SLOTS       per C call, the tensor descriptors it takes (prototype order, then the tensors
              its options struct points at): each name's byte offset in the per-thread
              descriptor buffer (see context._Scratch).

load() checks the library's ABI version (mamba2_abi_version) and the derived layouts
against it (check_abi): the tensor constructor's bytes, every `*_options_default()` against
our packing of the same values, and every struct's size against mamba2_struct_size.
"""
from __future__ import annotations

import ctypes
import math
import struct
from collections import namedtuple
from typing import Dict, Optional, Sequence, Tuple

import torch

MAX_RANK = 6

# mamba2_status_t
STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_OUT_OF_MEMORY = 3
STATUS_WORKSPACE_TOO_SMALL = 4
STATUS_BACKEND_UNAVAILABLE = 5
STATUS_INTERNAL_ERROR = 6
STATUS_BUSY = 7  # the context is in use by a call from another thread

ABI_VERSION = 1  # MAMBA2C_ABI_VERSION this binding is written for

# mamba2_dtype_t
DT_F32, DT_F64, DT_BF16, DT_F16, DT_I32, DT_I64, DT_Q8_0 = range(7)
TORCH_DTYPE = {
    torch.float32: DT_F32,
    torch.float64: DT_F64,
    torch.bfloat16: DT_BF16,
    torch.float16: DT_F16,
    torch.int32: DT_I32,
    torch.int64: DT_I64,
}

# mamba2_backend_t
BACKEND_CPU, BACKEND_REF, BACKEND_CUDA, BACKEND_OPENCL = 0, 1, 2, 3
# the names set_backend / use_backend take. "cuda" and "opencl" are the GPU backends in host
# mode (CPU tensors copied in and out per call); CUDA tensors use the CUDA device mode
# whatever the name (context._cuda_context)
BACKENDS = {"cpu": BACKEND_CPU, "ref": BACKEND_REF, "reference": BACKEND_REF,
            "cuda": BACKEND_CUDA, "opencl": BACKEND_OPENCL}
GPU_BACKENDS = frozenset((BACKEND_CUDA, BACKEND_OPENCL))

_VP = ctypes.c_void_p
_SZ = ctypes.c_size_t
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_INT = ctypes.c_int  # C enums (mamba2_dtype_t, mamba2_activation_t)
_F64 = ctypes.c_double
_PTR = _VP  # const mamba2_tensor_t *
_U32 = ctypes.c_uint32

SIZEOF = object()  # a constant field's value: the struct's own size (ABI v1 struct_size)


# ---------------------------------------------------------------------------------------
# The structs (must match include/mamba2c.h field for field)
# ---------------------------------------------------------------------------------------
#   name: (fields, default-constructor symbol or None, its non-zero defaults)

#   Every options and grads struct starts with uint32_t struct_size (ABI v1), a constant
#   field the packers fill with the struct's sizeof; structs are append-only.
_SS = ("struct_size", _U32, SIZEOF)

# the tensors of mamba2_block_step_weights_t, in field order
BLOCK_STEP_WEIGHTS = ("norm_weight", "in_proj_weight", "in_proj_bias", "conv_weight",
                      "conv_bias", "A", "D", "dt_bias", "gnorm_weight", "out_proj_weight",
                      "out_proj_bias")

STRUCTS: Dict[str, Tuple[list, Optional[str], dict]] = {
    "tensor": ([("data", _VP), ("dtype", _INT), ("rank", _I32),
                ("shape", _I64 * MAX_RANK), ("stride", _I64 * MAX_RANK)], None, {}),
    "ssd_options": ([_SS, ("chunk_size", _I64), ("D", _PTR), ("z", _PTR), ("dt_bias", _PTR),
                     ("initial_state", _PTR), ("cu_seqlens", _PTR), ("state_positions", _PTR),
                     ("dt_softplus", _I32), ("dt_limit_lo", _F64), ("dt_limit_hi", _F64)],
                    "mamba2_ssd_options_default", {"chunk_size": 256, "dt_limit_hi": math.inf}),
    "ssd_grads": ([_SS] + [(n, _PTR) for n in ("dx", "ddt", "dA", "dBm", "dCm", "dD", "dz",
                                               "ddt_bias", "dinitial_state")], None, {}),
    "ssd_chunked_options": ([_SS, ("chunk_size", _I64), ("D", _PTR), ("z", _PTR),
                             ("dt_bias", _PTR), ("initial_state", _PTR), ("dt_softplus", _I32),
                             ("dt_limit_lo", _F64), ("dt_limit_hi", _F64)],
                            "mamba2_ssd_chunked_options_default",
                            {"chunk_size": 256, "dt_limit_hi": math.inf}),
    "ssd_step_options": ([_SS, ("D", _PTR), ("z", _PTR), ("dt_bias", _PTR),
                          ("state_indices", _PTR), ("dt_softplus", _I32), ("dt_limit_lo", _F64),
                          ("dt_limit_hi", _F64)],
                         "mamba2_ssd_step_options_default", {"dt_limit_hi": math.inf}),
    "rmsnorm_gated_options": ([_SS, ("eps", _F64), ("group_size", _I64),
                               ("norm_before_gate", _I32)],
                              "mamba2_rmsnorm_gated_options_default", {"eps": 1e-5}),
    "rmsnorm_gated_grads": ([_SS] + [(n, _PTR) for n in ("dx", "dz", "dweight", "dbias")],
                            None, {}),
    "conv1d_options": ([_SS, ("bias", _PTR), ("initial_conv_state", _PTR), ("cu_seqlens", _PTR),
                        ("activation", _INT)], "mamba2_conv1d_options_default", {}),
    "conv1d_grads": ([_SS] + [(n, _PTR) for n in ("dx", "dweight", "dbias",
                                                  "dinitial_conv_state")], None, {}),
    "conv1d_step_options": ([_SS, ("bias", _PTR), ("state_indices", _PTR), ("activation", _INT),
                             ("cache_seqlens", _PTR)],  # appended after ABI v1
                            "mamba2_conv1d_step_options_default", {}),
    "linear_options": ([_SS, ("bias", _PTR), ("accumulate", _I32), ("quantize_x", _I64)],
                       "mamba2_linear_options_default", {}),
    # mamba2c_block.h: the whole-block decode step
    "block_step_weights": ([_SS] + [(n, _PTR) for n in BLOCK_STEP_WEIGHTS],
                           "mamba2_block_step_weights_default", {}),
    "block_step_options": ([_SS, ("add_residual", _I32), ("norm_eps", _F64), ("gnorm_eps", _F64),
                            ("gnorm_group_size", _I64), ("norm_before_gate", _I32),
                            ("dt_softplus", _I32), ("dt_limit_lo", _F64), ("dt_limit_hi", _F64),
                            ("state_indices", _PTR), ("conv_state_indices", _PTR),
                            ("round_bf16", _I32), ("round_norm_input", _I32)],  # appended
                           "mamba2_block_step_options_default",
                           {"add_residual": 1, "norm_eps": 1e-5, "gnorm_eps": 1e-5,
                            "dt_softplus": 1, "dt_limit_hi": math.inf}),
}

# mamba2_struct_id_t: mamba2_struct_size(id), checked for every struct at load time
STRUCT_IDS = {"tensor": 0, "ssd_options": 1, "ssd_grads": 2, "ssd_chunked_options": 3,
              "rmsnorm_gated_options": 4, "rmsnorm_gated_grads": 5, "conv1d_options": 6,
              "conv1d_grads": 7, "conv1d_step_options": 8, "ssd_step_options": 9,
              "linear_options": 10, "block_step_weights": 11, "block_step_options": 12}

_CODE = {_VP: "P", _I32: "i", _I64: "q", _F64: "d", _SZ: "N", ctypes.c_uint32: "I"}
if _INT is not _I32:
    _CODE[_INT] = "i"


def _code(ct) -> str:
    if isinstance(ct, type) and issubclass(ct, ctypes.Array):
        return f"{ct._length_}{_CODE[ct._type_]}"
    return _CODE[ct]


class Layout:
    """One struct of STRUCTS: .cstruct (ctypes.Structure), .st (struct.Struct, native
    alignment as the C compiler lays it out, without trailing padding), .size (sizeof),
    .offset[field], and
    .pack_into(buf, off, *values) / .pack(*values) taking the non-constant fields in table
    order (constant fields are filled in)."""

    def __init__(self, name: str, fields: Sequence[tuple], default_fn: Optional[str],
                 defaults: dict):
        self.name = name
        self.names = tuple(f[0] for f in fields)
        self.cstruct = type(f"mamba2_{name}_t", (ctypes.Structure,),
                            {"_fields_": [(f[0], f[1]) for f in fields]})
        codes = [_code(f[1]) for f in fields]
        # no trailing padding: the packed bytes are the fields (what the defaults compare)
        self.st = struct.Struct("@" + "".join(codes))
        self.size = ctypes.sizeof(self.cstruct)  # sizeof, trailing padding included
        self.offset = {f[0]: getattr(self.cstruct, f[0]).offset for f in fields}
        for i, f in enumerate(fields):
            mine = struct.calcsize("@" + "".join(codes[:i + 1])) - struct.calcsize("@" + codes[i])
            if mine != self.offset[f[0]]:
                raise OSError(f"mamba2c: {name}.{f[0]}: struct and ctypes layouts differ")
        if not self.size - ctypes.alignment(self.cstruct) < self.st.size <= self.size:
            raise OSError(f"mamba2c: {name}: struct and ctypes sizes differ")
        self.default_fn = default_fn
        consts = [(i, self.size if f[2] is SIZEOF else f[2])
                  for i, f in enumerate(fields) if len(f) > 2]
        self.variable = tuple(f[0] for f in fields if len(f) == 2)
        if not consts:
            self.pack_into, self.pack = self.st.pack_into, self.st.pack
        elif [i for i, _ in consts] == list(range(len(consts))):  # leading constants
            head = tuple(v for _, v in consts)
            st = self.st
            self.pack_into = lambda buf, off, *v: st.pack_into(buf, off, *head, *v)
            self.pack = lambda *v: st.pack(*head, *v)
        else:
            raise ValueError(f"mamba2c: {name}: constant fields must come first")
        self.defaults = tuple(defaults.get(n, 0.0 if self._is_double(n, fields) else 0)
                              for n in self.variable)

    @staticmethod
    def _is_double(n, fields) -> bool:
        return any(f[0] == n and f[1] is _F64 for f in fields)


LAYOUTS = {name: Layout(name, *spec) for name, spec in STRUCTS.items()}
TENSOR = LAYOUTS["tensor"]
SSD_OPTIONS = LAYOUTS["ssd_options"]
SSD_GRADS = LAYOUTS["ssd_grads"]
SSD_CHUNKED_OPTIONS = LAYOUTS["ssd_chunked_options"]
SSD_STEP_OPTIONS = LAYOUTS["ssd_step_options"]
RMSNORM_OPTIONS = LAYOUTS["rmsnorm_gated_options"]
RMSNORM_GRADS = LAYOUTS["rmsnorm_gated_grads"]
CONV1D_OPTIONS = LAYOUTS["conv1d_options"]
CONV1D_GRADS = LAYOUTS["conv1d_grads"]
CONV1D_STEP_OPTIONS = LAYOUTS["conv1d_step_options"]
LINEAR_OPTIONS = LAYOUTS["linear_options"]
BLOCK_STEP_WEIGHTS_S = LAYOUTS["block_step_weights"]
BLOCK_STEP_OPTIONS = LAYOUTS["block_step_options"]
TSZ = TENSOR.size  # bytes of one descriptor slot

# Per-rank tensor packers for the decode paths: data, dtype, rank, shape[:r], stride[:r]
# (the bytes after rank r are not read by the library, so they are skipped, not zeroed).
_SHAPE_OFF, _STRIDE_OFF = TENSOR.offset["shape"], TENSOR.offset["stride"]
TENSOR_R = tuple(struct.Struct(f"@Pii{r}q{_STRIDE_OFF - _SHAPE_OFF - 8 * r}x{r}q")
                 for r in range(MAX_RANK + 1))
if TENSOR_R[0].size != _STRIDE_OFF or struct.calcsize("@Pii") != _SHAPE_OFF:
    raise OSError("mamba2c: unexpected mamba2_tensor_t layout")


# ---------------------------------------------------------------------------------------
# The prototypes: name -> (restype, argtypes)
# ---------------------------------------------------------------------------------------

def _ops(n_ptr: int, workspace: bool = False) -> tuple:
    return (ctypes.c_int, [_VP] * n_ptr + ([_SZ] if workspace else []))


PROTOTYPES = {
    "mamba2_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "mamba2_last_error": (ctypes.c_char_p, []),
    "mamba2_version_string": (ctypes.c_char_p, []),
    "mamba2_context_create": (ctypes.c_int, [_VP, ctypes.c_int, _I32]),
    "mamba2_context_destroy": (None, [_VP]),
    # ctx **, device ordinal, CUstream (NULL: the default stream)
    "mamba2_context_create_cuda": (ctypes.c_int, [_VP, _I32, _VP]),
    # ctx, alloc(user, bytes, stream), free(user, ptr, stream), user (see context.py)
    "mamba2_context_set_device_allocator": (ctypes.c_int, [_VP, _VP, _VP, _VP]),
    "mamba2_context_set_device_indices": (ctypes.c_int, [_VP, _I32]),
    "mamba2_context_set_num_threads": (ctypes.c_int, [_VP, _I32]),
    "mamba2_context_get_num_threads": (_I32, [_VP]),
    "mamba2_context_get_isa": (ctypes.c_char_p, [_VP]),
    "mamba2_context_force_isa": (ctypes.c_int, [_VP, ctypes.c_char_p]),
    "mamba2_abi_version": (_U32, []),
    "mamba2_struct_size": (_SZ, [ctypes.c_int]),
    # ctx, out, out_x, final_state, x, dt, A, Bm, Cm, opts, workspace, workspace_size
    "mamba2_ssd_forward": _ops(11, True),
    # ctx, out, out_x, final_state, position_states, x, dt, A, Bm, Cm, opts, workspace, size
    "mamba2_ssd_forward_states": _ops(12, True),
    # ctx, grads, dout, dfinal_state, x, dt, A, Bm, Cm, out_x, opts, workspace, workspace_size
    "mamba2_ssd_backward": _ops(12, True),
    # ctx, grads, dout, dfinal_state, x, dt, A, Bm, Cm, out_x, opts, size_t *workspace_size
    "mamba2_ssd_backward_workspace_size": _ops(12),
    # ctx, out, rstd, x, z, weight, bias, opts, workspace, workspace_size
    "mamba2_rmsnorm_gated_forward": _ops(9, True),
    # ctx, grads, dout, x, z, weight, bias, rstd, opts, workspace, workspace_size
    "mamba2_rmsnorm_gated_backward": _ops(10, True),
    # ctx, out, final_conv_state, x, weight, opts
    "mamba2_conv1d_forward": _ops(6),
    # ctx, grads, dout, dfinal_conv_state, x, weight, opts, workspace, workspace_size
    "mamba2_conv1d_backward": _ops(8, True),
    # ctx, out, conv_cache, x, weight, opts
    "mamba2_conv1d_step": _ops(6),
    # ctx, state_cache, out, all_states, x, dt, A, Bm, Cm, opts
    "mamba2_ssd_step": _ops(10),
    # ctx, out, x, weight, opts
    "mamba2_linear_forward": _ops(5),
    # ctx, hidden, residual, conv_cache, state_cache, weights, opts, workspace, workspace_size
    "mamba2_block_step": _ops(7, True),
    # ctx, hidden, residual, conv_cache, state_cache, weights, opts, size_t *workspace_size
    "mamba2_block_step_workspace_size": _ops(7),
    # the staged pipeline (forward only)
    "mamba2_ssd_chunk_cumsum": _ops(6),   # ctx, dt_out, dA_cumsum, dt, A, opts
    "mamba2_ssd_bmm_chunk": _ops(5),      # ctx, CB, Bm, Cm, opts
    "mamba2_ssd_chunk_state": _ops(7),    # ctx, states, x, Bm, dt_out, dA_cumsum, opts
    "mamba2_ssd_state_passing": _ops(6),  # ctx, states_start, final, states, dA_cumsum, opts
    "mamba2_ssd_chunk_scan": _ops(9),     # ctx, out, CB, x, dt_out, dA_cumsum, Cm, start, opts
}


# ---------------------------------------------------------------------------------------
# Descriptor slots per call: name -> byte offset in the per-thread descriptor buffer
# ---------------------------------------------------------------------------------------

# the tensors mamba2_ssd_options_t points at, in the order _options() fills them
SSD_OPTION_TENSORS = ("D", "z", "dt_bias", "initial_state", "cu_seqlens", "state_positions")
# those of mamba2_ssd_chunked_options_t (the staged stages; _chunked_options())
CHUNKED_OPTION_TENSORS = ("D", "z", "dt_bias", "initial_state")

SLOTS = {
    "ssd_forward": ("out", "out_x", "final_state", "x", "dt", "A", "B", "C",
                    *SSD_OPTION_TENSORS, "position_states"),
    "ssd_backward": ("dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddt_bias", "dinitial_state",
                     "dout", "dfinal_state", "x", "dt", "A", "B", "C", "out_x",
                     *SSD_OPTION_TENSORS),
    "ssd_probe": ("out", "final_state", "x", "dt", "A", "B", "C", *SSD_OPTION_TENSORS),
    "rmsnorm_forward": ("out", "rstd", "x", "z", "weight", "bias"),
    "rmsnorm_backward": ("dx", "dz", "dweight", "dbias", "dout", "x", "z", "weight", "bias",
                         "rstd"),
    "conv1d_forward": ("out", "final_state", "x", "weight", "bias", "initial_state",
                       "cu_seqlens"),
    "conv1d_backward": ("dx", "dweight", "dbias", "dinitial_state", "dout", "dfinal_state", "x",
                        "weight", "bias", "initial_state", "cu_seqlens"),
    "conv1d_step": ("out", "conv_cache", "x", "weight", "bias", "state_indices",
                    "cache_seqlens"),
    # the decode step's block: these 12 descriptors, then the options struct (see steps.py)
    "ssd_step": ("state", "out", "all_states", "x", "dt", "A", "B", "C", "D", "z", "dt_bias",
                 "state_indices", "options"),
    "linear": ("out", "x", "weight", "bias"),
    # the block step's packed call (decode_plan.py): these, then weights and options structs
    "block_step": ("hidden", "residual", "conv_cache", "state_cache", *BLOCK_STEP_WEIGHTS),
    "chunk_cumsum": ("dt_out", "dA_cumsum", "dt", "A", *CHUNKED_OPTION_TENSORS),
    "bmm_chunk": ("CB", "B", "C", *CHUNKED_OPTION_TENSORS),
    "chunk_state": ("states", "x", "B", "dt_out", "dA_cumsum", *CHUNKED_OPTION_TENSORS),
    "state_passing": ("states_start", "final_state", "states", "dA_cumsum",
                      *CHUNKED_OPTION_TENSORS),
    "chunk_scan": ("out", "CB", "x", "dt_out", "dA_cumsum", "C", "states_start",
                   *CHUNKED_OPTION_TENSORS),
}

SLOT = {op: namedtuple(f"{op}_slots", names)(*(i * TSZ for i in range(len(names))))
        for op, names in SLOTS.items()}
NSLOTS = max(len(v) for v in SLOTS.values())  # descriptor slots per thread


# ---------------------------------------------------------------------------------------
# Load-time checks
# ---------------------------------------------------------------------------------------

class _Ret256(ctypes.Structure):
    _fields_ = [("b", ctypes.c_ubyte * 256)]


def bind(lib) -> None:
    """Set argtypes/restype of every entry point once (ctypes then converts cheaply); an
    AttributeError names a missing symbol (a library older than this binding). A library of
    another ABI version is refused before any prototype is bound."""
    ver = getattr(lib, "mamba2_abi_version", None)
    if ver is None:
        raise OSError(f"mamba2c: the library has no mamba2_abi_version: it predates ABI "
                      f"{ABI_VERSION}, which this binding needs (rebuild libmamba2c)")
    ver.restype, ver.argtypes = _U32, []
    if ver() != ABI_VERSION:
        raise OSError(f"mamba2c: the library has ABI version {ver()}; this binding needs "
                      f"{ABI_VERSION} (library and binding from different releases)")
    for name, (res, args) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    check_abi(lib)


def check_abi(lib) -> None:
    # Cross-check our tensor packing against the library's own constructor.
    make = lib.mamba2_tensor_make_strided
    make.restype = TENSOR.cstruct
    make.argtypes = [_VP, ctypes.c_int, _I32, _VP, _VP]
    shp = (_I64 * 2)(3, 5)
    std = (_I64 * 2)(7, 1)
    t = make(_VP(0x1000), DT_F64, 2, ctypes.addressof(shp), ctypes.addressof(std))
    mine = TENSOR.pack(0x1000, DT_F64, 2, 3, 5, 0, 0, 0, 0, 7, 1, 0, 0, 0, 0)
    if bytes(t) != mine:
        raise OSError("mamba2c: mamba2_tensor_t layout differs from the binding's packing")
    size_of = lib.mamba2_struct_size
    size_of.restype, size_of.argtypes = _SZ, [ctypes.c_int]
    for name, lay in LAYOUTS.items():
        sid = STRUCT_IDS[name]
        if size_of(sid) != lay.size:
            raise OSError(f"mamba2c: the library's {name} struct has {size_of(sid)} bytes, the "
                          f"binding's {lay.size} (library and binding from different headers)")
        if lay.default_fn is None:
            continue
        # Each library default against our packing of the same values. The return buffer
        # is 256 bytes whatever the struct's size, so a library whose struct grew cannot
        # write past it (structs over 16 bytes are returned through a caller-owned buffer
        # on the x86-64 and AArch64 ABIs); only the first bytes are compared.
        fn = getattr(lib, lay.default_fn)
        fn.restype = _Ret256
        fn.argtypes = []
        want = lay.pack(*lay.defaults)
        if bytes(fn())[:len(want)] != want:
            raise OSError(f"mamba2c: the struct returned by {lay.default_fn} differs from the "
                          f"binding's packing (library and binding built from different headers)")
