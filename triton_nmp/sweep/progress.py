"""The sweep's progress bar: candidates done of all, simulated seconds measured so far, retries, and an ETA.

tqdm on stderr (the autotuner's bar uses it too): its rate and ETA count only the candidates measured in this
run, so a resumed sweep does not promise an ETA from results it read back.
"""

from __future__ import annotations

import sys
from typing import Any

from .plan import TaskResult

__all__ = ["Progress", "format_seconds"]


def format_seconds(x: float) -> str:
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if x >= factor:
            return f"{x / factor:.3g} {unit}"
    return f"{x * 1e9:.3g} ns" if x else "0 s"


class Progress:
    def __init__(self, total: int, done: int = 0, enabled: bool = True, desc: str = "sweep") -> None:
        self.simulated = 0.0
        self.retries = 0
        self.failed = 0
        self._bar: Any = None
        if enabled and total:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, initial=done, desc=desc, unit="cand", file=sys.stderr,
                             dynamic_ncols=True, smoothing=0.1)
            self._postfix()

    def _postfix(self) -> None:
        if self._bar is None:
            return
        fields = {"simulated": format_seconds(self.simulated)}
        if self.retries:
            fields["retried"] = str(self.retries)
        if self.failed:
            fields["failed"] = str(self.failed)
        self._bar.set_postfix(fields, refresh=False)

    def result(self, result: TaskResult) -> None:
        self.simulated += result.simulated_seconds or 0.0
        if result.error is not None:
            self.failed += 1
        if self._bar is not None:
            self._postfix()
            self._bar.update(1)

    def retry(self) -> None:
        self.retries += 1
        self._postfix()
        if self._bar is not None:
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
