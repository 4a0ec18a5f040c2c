"""Replace a file atomically: write a temporary file next to it, then rename it over the target.

A reader (another process sharing a cache directory) sees the old file or the new one, never half of one. On
any failure the temporary file is removed and the error propagates; a writer killed mid-write leaves its
temporary file behind, named `<prefix><random><suffix>` in the target's directory, for the caller's own
sweep (the tuning cache collects its `.*.tmp` files).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["replace_file"]


def replace_file(path: Path | str, write: Callable[[IO[Any]], object], *, binary: bool = False,
                 prefix: str = ".tmp-", suffix: str = ".tmp") -> None:
    """Call `write(f)` on a new temporary file in `path`'s directory (created if missing), then rename it to
    `path`. Text files are UTF-8."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
