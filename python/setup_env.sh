#!/usr/bin/env bash
# setup_env.sh — prepare the Python environment for the mamba2c PyTorch integration.
#
#   python/setup_env.sh            # from anywhere; idempotent, quick when already done
#   .venv/bin/python -m pytest python/tests -q
#
# Creates <repo>/.venv (python3 -m venv) if missing, installs python/requirements.txt (torch
# from PyPI, numpy, pytest, transformers) at the exact versions of python/constraints.txt
# when one is missing or differs, the previous transformers release of
# python/constraints-hf-prev.txt into .venv/hf-prev (the HF tests run on both), installs the
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

# Install the requirements, at the versions constraints.txt pins, only when one of the pinned
# packages is missing or at another version (pip's resolution is slow).
if ! "$PY" - "$HERE/constraints.txt" <<'PYEOF' >/dev/null 2>&1
import sys, re
from importlib import metadata
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    if metadata.version(name) != want:  # raises PackageNotFoundError when missing
        sys.exit(1)
PYEOF
then
  echo "[setup_env] installing $HERE/requirements.txt with the pins of $HERE/constraints.txt"
  "$PY" -m pip install --quiet -r "$HERE/requirements.txt" -c "$HERE/constraints.txt"
fi

# The previous transformers release for the HF tests (constraints-hf-prev.txt), without its
# dependencies (the pinned ones serve it), into $VENV/hf-prev: PYTHONPATH=$VENV/hf-prev.
PREV="$(sed -n 's/^transformers==//p' "$HERE/constraints-hf-prev.txt")"
if [ ! -e "$VENV/hf-prev/transformers-$PREV.dist-info" ]; then
  echo "[setup_env] installing transformers $PREV into $VENV/hf-prev"
  rm -rf "$VENV/hf-prev"
  "$PY" -m pip install --quiet --no-deps --target "$VENV/hf-prev" -r "$HERE/constraints-hf-prev.txt"
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
