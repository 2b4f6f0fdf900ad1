"""Where the binding finds libmamba2c (issue 18 item 1): besides MAMBA2C_LIBRARY,
<repo>/build and mamba2c/lib, an installed library — through ctypes.util.find_library
(LD_LIBRARY_PATH, the ldconfig cache) and pkg-config's libdir — and, when none is found, a
LibraryNotFoundError listing every place tried. Each case runs in a fresh interpreter on a
copy of the package outside the repository, against a scratch install prefix."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mamba2c import _native

_PKG = Path(__file__).resolve().parents[1] / "mamba2c"

_PROBE = r"""
import mamba2c
from mamba2c import _native
try:
    _native.load()
    print("FOUND", _native.library_path())
    print("VERSION", _native.version())
except mamba2c.LibraryNotFoundError as e:
    print("NOTFOUND")
    print(e)
"""


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """(package root outside the repo, install prefix with lib/ and lib/pkgconfig/)."""
    root = tmp_path_factory.mktemp("loader")
    pkg = root / "site" / "mamba2c"
    shutil.copytree(_PKG, pkg, ignore=shutil.ignore_patterns("__pycache__", "lib"))
    built = Path(_native.library_path()).resolve()
    libdir = root / "prefix" / "lib"
    (libdir / "pkgconfig").mkdir(parents=True)
    # an install as cmake --install lays it out: the real file and its soname links
    for f in sorted(built.parent.glob("libmamba2c.so*")):
        shutil.copy2(f, libdir / f.name, follow_symlinks=False)
    if not (libdir / "libmamba2c.so").exists():
        shutil.copy2(built, libdir / "libmamba2c.so")
    (libdir / "pkgconfig" / "mamba2c.pc").write_text(
        "prefix=${pcfiledir}/../..\nlibdir=${prefix}/lib\nincludedir=${prefix}/include\n\n"
        "Name: mamba2c\nDescription: test\nVersion: 0.1.0\nLibs: -L${libdir} -lmamba2c\n"
        "Cflags: -I${includedir}\n")
    return root / "site", libdir


def _run(site: Path, cwd: Path, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAMBA2C_LIBRARY", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", _PROBE], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_not_found_lists_every_place_tried(layout, tmp_path):
    site, _ = layout
    out = _run(site, tmp_path, PKG_CONFIG_PATH=str(tmp_path))
    if out.startswith("FOUND"):
        pytest.skip("a libmamba2c is installed system-wide: " + out.splitlines()[0])
    assert out.startswith("NOTFOUND"), out
    for place in ("repository build/ directory", "copy inside the package",
                  "ctypes.util.find_library", "pkg-config"):
        assert place in out, (place, out)


def test_finds_library_on_ld_library_path(layout, tmp_path):
    """cmake --install + LD_LIBRARY_PATH (the loader's own search, via find_library)."""
    site, libdir = layout
    if shutil.which("ld") is None and shutil.which("gcc") is None:
        pytest.skip("ctypes.util.find_library needs ld or gcc to search LD_LIBRARY_PATH")
    out = _run(site, tmp_path, LD_LIBRARY_PATH=str(libdir), PKG_CONFIG_PATH=str(tmp_path))
    assert out.startswith("FOUND"), out
    assert Path(out.split()[1]).resolve().parent == libdir.resolve(), out


def test_finds_library_through_pkg_config(layout, tmp_path):
    site, libdir = layout
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed")
    out = _run(site, tmp_path, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    assert out.startswith("FOUND"), out
    assert Path(out.split()[1]).resolve().parent == libdir.resolve(), out
