"""One digest of source files, for cache keys that must change whenever the code that made an entry changes.

`files_hash(seed, *folders)`: sha256 over `seed`, then, folder by folder and by sorted file name, every
`*.py` file's name and bytes. Used by the compiler (cached binaries), the Inductor integration (Inductor's
cache keys) and the layout-decision cache (`layout_cache`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["files_hash"]


def files_hash(seed: str, *folders: Path) -> str:
    h = hashlib.sha256(seed.encode())
    for folder in folders:
        for p in sorted(Path(folder).glob("*.py")):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()
