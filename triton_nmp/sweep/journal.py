"""The sweep journal: every finished candidate, appended as one JSON line the moment its result arrives.

A tuning-cache entry is written only when all candidates of its group are in (a partial entry would be
served to later launches as if it were the best config). Until then the results live here, in
`<tuning cache>/.sweeps/<plan id>.jsonl`: a parent killed mid-sweep loses no finished candidate, and running
the same sweep again resumes from the journal. Lines are appended under an exclusive `flock` and flushed
to the disk, so concurrent runs of the same sweep do not interleave bytes; a torn last line (the writer was
killed mid-write) is skipped on load. The journal is deleted once every group is in the cache.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from .plan import TaskResult

__all__ = ["Journal"]


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, TaskResult]:
        """Results by task id (later lines win; unreadable lines are skipped)."""
        out: dict[str, TaskResult] = {}
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return out
        for line in text.splitlines():
            try:
                r = TaskResult.from_json(json.loads(line))
            except (ValueError, TypeError):
                continue
            if isinstance(r.task, str):
                out[r.task] = r
        return out

    def append(self, result: TaskResult) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(result.to_json(), separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
