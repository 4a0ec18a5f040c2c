"""The backend's version: `VERSION` and the hash of its sources, which key Triton's cache of kernel
binaries (`compiler.NMPBackend.hash`) and name the runtime library's symbols (`runtime_abi`)."""

from __future__ import annotations

import functools
from pathlib import Path

from triton_nmp.source_hash import files_hash

VERSION = "0.1.0"


@functools.lru_cache(None)
def source_hash() -> str:
    """Hash of the compiler's own sources: any change invalidates cached binaries."""
    return files_hash(VERSION, Path(__file__).parent)
