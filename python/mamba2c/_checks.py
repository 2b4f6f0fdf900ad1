"""_checks.py — argument checks shared by the Python layers: a wrong rank is reported as
a ValueError naming the tensor and the shape expected, before any code unpacks it."""
from __future__ import annotations


def expect_rank(name: str, t, *shapes: str) -> None:
    """ValueError unless t's rank is that of one of `shapes` (each written "[B,L,H,P]")."""
    r = t.dim()
    for s in shapes:
        if r == (s.count(",") + 1 if s != "[]" else 0):
            return
    raise ValueError(f"mamba2c: {name} has shape {list(t.shape)} (rank {r}); expected "
                     f"{' or '.join(shapes)}")


def expect_min_rank(name: str, t, k: int, shape: str) -> None:
    """ValueError unless t has at least k dims."""
    if t.dim() < k:
        raise ValueError(f"mamba2c: {name} has shape {list(t.shape)} (rank {t.dim()}); "
                         f"expected {shape}")


def index_dtype(name: str, t) -> None:
    """TypeError unless t (an index tensor: cu_seqlens, state_indices, cache_seqlens, ...)
    is None or has an integer dtype the C library reads (int32 / int64)."""
    if t is not None and str(t.dtype) not in ("torch.int32", "torch.int64"):
        raise TypeError(f"mamba2c: {name} has dtype {t.dtype}; expected int32 or int64")


def group_size(D: int, gs) -> None:
    """ValueError unless gs is None, 0 (the whole row) or a positive divisor of D."""
    if gs is None:
        return
    g = int(gs)
    if g < 0:
        raise ValueError(f"mamba2c: group_size is {g}; expected >= 1 (or None / 0 for the "
                         f"whole row D={D})")
    if g and D % g:
        raise ValueError(f"mamba2c: group_size is {g}, which does not divide x's channel "
                         f"count D={D}")


def step_ranks(state, x, B, C) -> None:
    """ValueError naming the tensor when a decode step's ranks are wrong (SPEC §6)."""
    xr = x.dim()
    if state.dim() == 4 and (xr == 3 or xr == 4) and B.dim() == xr and C.dim() == xr:
        return
    expect_rank("state", state, "[S,H,P,N]")
    expect_rank("x", x, "[B,H,P]", "[B,T,H,P]")
    one = xr == 3
    expect_rank("B", B, "[B,G,N]" if one else "[B,T,G,N]")
    expect_rank("C", C, "[B,G,N]" if one else "[B,T,G,N]")
