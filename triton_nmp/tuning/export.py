"""Export the tuning cache as a table, one row per measured or predicted candidate.

A placement pass wants to ask "for this kernel and shape, how fast is each config under each
placement of the tensors?"; every cache entry is one (kernel, key, placements) point, and its
candidates are the configs, so the table is their flattening. CSV cells holding structures
(key values, placements, config) are compact JSON so the file stays one row per candidate.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from .cache import Entry, TuningCache

__all__ = ["COLUMNS", "table_rows", "export_table"]

COLUMNS: tuple[str, ...] = (
    "entry", "kernel", "source_hash", "target", "key", "dtypes", "placements", "kwargs", "options",
    "grid", "simulated", "simulated_seconds", "predicted_seconds", "winner", "error",
)


def table_rows(entries: list[Entry] | None = None, cache: TuningCache | None = None) -> list[dict[str, Any]]:
    """The rows of `entries` (default: every entry of `cache`, default the user's cache)."""
    if entries is None:
        entries = list((cache or TuningCache()).entries())
    rows = []
    for e in entries:
        for i, c in enumerate(e.candidates):
            rows.append({
                "entry": e.id, "kernel": e.key.kernel, "source_hash": e.key.source_hash, "target": e.key.target,
                "key": e.key.key, "dtypes": e.key.dtypes, "placements": e.key.placements,
                "kwargs": c.config.get("kwargs", {}), "options": c.config.get("options", {}), "grid": c.grid,
                "simulated": c.simulated, "simulated_seconds": c.simulated_seconds,
                "predicted_seconds": c.predicted_seconds, "winner": i == e.winner, "error": c.error,
            })
    return rows


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def export_table(path: str | os.PathLike[str], fmt: str | None = None, *, cache: TuningCache | None = None,
                 entries: list[Entry] | None = None) -> int:
    """Write the table to `path` as "json" (a list of row objects) or "csv" (default: by the file's
    suffix, else json); returns the number of rows."""
    path = Path(path)
    fmt = (fmt or (path.suffix.lstrip(".").lower() if path.suffix.lower() in (".csv", ".json") else "json")).lower()
    if fmt not in ("json", "csv"):
        raise ValueError(f"export format must be 'json' or 'csv', not {fmt!r}")
    rows = table_rows(entries, cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        path.write_text(json.dumps(rows, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    else:
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _cell(v) for k, v in row.items()})
    return len(rows)
