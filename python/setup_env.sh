#!/usr/bin/env bash
# setup_env.sh — prepare the Python environment for the mamba2c PyTorch integration.
#
#   python/setup_env.sh            # from anywhere; idempotent, quick when already done
#   .venv/bin/python -m pytest python/tests -q
#
# Creates <repo>/.venv (python3 -m venv) if missing, installs python/requirements.txt (torch
# from PyPI, numpy, pytest, transformers) only when something is missing, installs the
# mamba2c package in editable mode, and builds the C library (<repo>/build/libmamba2c.so)
# if it is not there. Environment: PYTHON (interpreter for the venv, default python3),
# VENV (default <repo>/.venv), MAMBA2C_SKIP_BUILD=1 to leave the C build alone.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
  echo "[setup_env] creating $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
fi

# Install the requirements only if one of them is missing (pip resolution is slow).
if ! "$PY" - "$HERE/requirements.txt" <<'PYEOF' >/dev/null 2>&1
import sys, re
from importlib import metadata
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name = re.split(r"[<>=!~ \[]", line, 1)[0]
    metadata.version(name)  # raises PackageNotFoundError when missing
PYEOF
then
  echo "[setup_env] installing $HERE/requirements.txt"
  "$PY" -m pip install --quiet -r "$HERE/requirements.txt"
fi

# Editable install of the package (a .pth pointing at python/), once.
if ! (cd / && "$PY" -c "import mamba2c, os, sys; sys.exit(0 if os.path.dirname(os.path.dirname(mamba2c.__file__)) == '$HERE' else 1)") >/dev/null 2>&1; then
  echo "[setup_env] installing mamba2c (editable) from $HERE"
  "$PY" -m pip install --quiet --no-deps --no-build-isolation -e "$HERE"
fi

# The C library the binding loads (unless MAMBA2C_LIBRARY points elsewhere).
if [ -z "${MAMBA2C_SKIP_BUILD:-}" ] && [ -z "${MAMBA2C_LIBRARY:-}" ] && [ ! -e "$REPO/build/libmamba2c.so" ]; then
  echo "[setup_env] building the C library in $REPO/build"
  cmake -S "$REPO" -B "$REPO/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$REPO/build" --target mamba2c -j "$(nproc 2>/dev/null || echo 2)"
fi
echo "[setup_env] ready: $PY ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
