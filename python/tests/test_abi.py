"""The binding's one layout table (mamba2c._native.abi): every struct packer, field offset
and descriptor slot derives from it, and the loaded library agrees with it."""
from __future__ import annotations

import ctypes

from mamba2c import _native
from mamba2c._native import abi


def test_layouts_match_ctypes_and_library():
    for name, lay in abi.LAYOUTS.items():
        assert lay.size == ctypes.sizeof(lay.cstruct), name
        for f, off in lay.offset.items():
            assert getattr(lay.cstruct, f).offset == off, (name, f)
    abi.check_abi(_native.load())  # what load() ran: the library's defaults equal our packing


def test_slots_are_distinct_and_fit_the_scratch_buffer():
    s = _native._state()
    for op, names in abi.SLOTS.items():
        offs = list(abi.SLOT[op])
        assert len(set(offs)) == len(names) == len(offs), op
        assert max(offs) + abi.TSZ <= s.opt_off, op  # below the options struct
    assert s.grd_off >= s.opt_off + max(lay.size for lay in abi.LAYOUTS.values()
                                        if lay.name.endswith("_options"))


def test_prototypes_are_bound():
    lib = _native.load()
    for name, (res, args) in abi.PROTOTYPES.items():
        assert getattr(lib, name).argtypes == args, name


def test_a_constant_leading_field_is_filled_in():
    """How ABI v1's `struct_size` goes in: one table row, no call site changes."""
    lay = abi.Layout("demo", [("struct_size", ctypes.c_uint32, abi.SIZEOF), ("D", ctypes.c_void_p),
                              ("eps", ctypes.c_double), ("n", ctypes.c_int32)], None, {"eps": 1e-5})
    assert lay.variable == ("D", "eps", "n") and lay.defaults == (0, 1e-5, 0)
    buf = ctypes.create_string_buffer(lay.size)
    lay.pack_into(buf, 0, 0x10, 2.0, 3)
    s = lay.cstruct.from_buffer_copy(buf.raw)
    assert (s.struct_size, s.D, s.eps, s.n) == (lay.size, 0x10, 2.0, 3)
