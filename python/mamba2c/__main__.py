"""python -m mamba2c: print the version, library path, backend, ISA and threads (info())."""
import sys

from ._info import info

sys.exit(0 if info()["library"] is not None else 1)
