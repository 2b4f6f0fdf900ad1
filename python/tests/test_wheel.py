"""`pip wheel .` at the repository root (issue 18 item 1): a platform wheel that carries
libmamba2c.so inside the package and works from any directory, with no repository and no
environment variable pointing at the library.

Builds the wheel (scikit-build-core driving CMake; no network: --no-build-isolation with the
backend from python/requirements.txt), installs it with pip into a scratch venv whose only
other packages are this interpreter's (torch, ...) seen through a .pth path, and runs an op
there from a directory outside the repository, with MAMBA2C_LIBRARY, PYTHONPATH,
LD_LIBRARY_PATH and PKG_CONFIG_PATH removed from the environment. The wheel is built without
the CUDA backend (MAMBA2C_CUDA=OFF): its kernels are compiled and checked by test-fast. The
CMake build directory build-wheel/ is kept, so a rerun only relinks."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import os, sys, torch, mamba2c
from mamba2c._native import loader
here = os.path.dirname(mamba2c.__file__)
assert here.startswith(sys.prefix), (here, sys.prefix)    # the installed copy, not the repo
torch.manual_seed(0)
B, L, H, P, N = 1, 37, 3, 4, 5
x = torch.randn(B, L, H, P); dt = torch.rand(B, L, H) * 0.1 + 0.01; A = -torch.rand(H) - 0.1
Bm = torch.randn(B, L, 1, N) / 5; Cm = torch.randn(B, L, 1, N) / 5
y = mamba2c.mamba_chunk_scan_combined(x, dt, A, Bm, Cm, chunk_size=16)
r = mamba2c.reference.ssd_sequential(x.double(), dt.double(), A.double(), Bm.double(),
                                     Cm.double())
r = r[0] if isinstance(r, tuple) else r
err = ((y.double() - r).norm() / r.norm()).item()
assert err < 1e-5, err
assert mamba2c.ops.backend_of("ssd") == "C"
assert loader._lib_path == os.path.join(here, "lib", "libmamba2c.so"), loader._lib_path
mamba2c.info()
print("OK", err)
"""


def _scratch_venv(root: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   capture_output=True, timeout=300)
    py = root / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True).stdout
    # this interpreter's packages (torch) as a plain path: their .pth files are not run, so
    # an editable mamba2c of the dev environment is not importable there
    Path(site.strip(), "_parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


def test_wheel_is_self_contained(tmp_path):
    try:
        import scikit_build_core  # noqa: F401
    except ImportError:
        pytest.fail("scikit-build-core is missing: pip install -r python/requirements.txt",
                    pytrace=False)
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAMBA2C_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH")}
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(dist), f"--config-settings=build-dir={REPO / 'build-wheel'}",
         # the CUDA kernels are a blob linked into libmamba2c.so (nothing more to package);
         # test-fast compiles and checks them, so this build leaves nvcc's pass out
         "--config-settings=cmake.define.MAMBA2C_CUDA=OFF"],
        env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    wheels = list(dist.glob("mamba2c-*.whl"))
    assert len(wheels) == 1, wheels
    whl = wheels[0]
    assert whl.name.endswith("-py3-none-" + sysconfig.get_platform().replace("-", "_")
                             .replace(".", "_") + ".whl"), whl.name
    names = zipfile.ZipFile(whl).namelist()
    assert "mamba2c/lib/libmamba2c.so" in names, names
    assert "mamba2c/__main__.py" in names and "mamba2c/nn/mamba2.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")], names

    py = _scratch_venv(tmp_path / "venv")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install",
                        "--no-deps", "--no-index", str(whl)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]

    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([str(py), "-c", _SCRIPT], cwd=work, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "OK" in r.stdout, r.stdout
    r = subprocess.run([str(py), "-m", "mamba2c"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "isa:" in r.stdout and "lib/libmamba2c.so" in r.stdout, (
        r.stdout + r.stderr)
