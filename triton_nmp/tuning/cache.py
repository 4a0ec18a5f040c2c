"""Persistent tuning cache: one JSON file per tuned launch key, safe under concurrent tuners.

Layout: `<cache dir>/<kernel>-<source hash>/<entry id>.json`, where the entry id hashes everything
the best config depends on (kernel source, tuning-key values, argument dtypes, target description,
bank placement of each tensor argument, the config list, triton-nmp's version). One file per entry
makes a warm lookup one small read whatever the cache holds, and writers of different entries never
touch the same file. Writers of the same entry serialise on a lock file (fcntl.flock), merge what is
on disk with what they measured and replace the file atomically (temp file + os.replace), so
readers never see a partial file and need no lock. Files are JSON, never pickle: a cache directory
shared between users must not be able to run code. A corrupt or foreign file is ignored with a
warning and replaced by the next write.

A writer killed mid-write leaves its temp file (`.<id>.<random>.tmp`) behind. `store()` collects
them: in the directory it holds the lock of, and (at most once a minute per process) in every other
kernel directory, each temp file older than `TRITON_NMP_TUNING_TMP_AGE` seconds (default 600) is
deleted. A live writer holds its directory's lock while its temp file exists and writes it in well
under the age limit, so no file being written is ever collected. `stale_temp_files()` lists them
(`triton-nmp cache ls` reports them).

Each entry keeps every candidate (config, simulated or only predicted, both times) and the winner,
which is the data `costmodel.calibrate` needs and what `export_table` turns into rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: atomic replace still keeps files whole
    fcntl = None  # type: ignore[assignment]

from triton_nmp.atomic_file import replace_file

from .context import user_stacklevel

__all__ = ["ENV_VAR", "FORMAT", "SCHEMA", "Candidate", "Entry", "EntryKey", "TempFile", "TuningCache",
           "TuningCacheWarning", "default_cache_dir", "stale_temp_age"]

ENV_VAR = "TRITON_NMP_TUNING_CACHE"
TMP_AGE_ENV_VAR = "TRITON_NMP_TUNING_TMP_AGE"
DEFAULT_TMP_AGE_S = 600.0
_SWEEP_INTERVAL_S = 60.0
FORMAT = "triton-nmp-tuning-cache"
SCHEMA = 1
_LOCK_NAME = ".lock"


class TuningCacheWarning(UserWarning):
    """A cache file was unreadable or foreign and is being ignored."""


def default_cache_dir() -> Path:
    """$TRITON_NMP_TUNING_CACHE, else `tuning/` under $TRITON_NMP_CACHE_DIR, $XDG_CACHE_HOME/triton-nmp
    or ~/.cache/triton-nmp."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    root = os.environ.get("TRITON_NMP_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "triton-nmp")
    return Path(root).expanduser() / "tuning"


def stale_temp_age() -> float:
    """Seconds after which a writer's temp file counts as left behind by a killed writer."""
    raw = os.environ.get(TMP_AGE_ENV_VAR)
    if raw is None:
        return DEFAULT_TMP_AGE_S
    try:
        age = float(raw)
    except ValueError:
        raise ValueError(f"{TMP_AGE_ENV_VAR}={raw!r} is not a number of seconds") from None
    if not age >= 0:
        raise ValueError(f"{TMP_AGE_ENV_VAR}={raw!r} must be a non-negative number of seconds")
    return age


@dataclass(frozen=True)
class TempFile:
    """A writer's temp file in the cache (see the module docstring)."""

    path: Path
    size: int
    age_seconds: float


def _temp_files(directory: Path, now: float) -> list[TempFile]:
    found = []
    for p in directory.glob(".*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            st = p.stat()
            found.append(TempFile(p, st.st_size, max(0.0, now - st.st_mtime)))
    return found


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _finite(x: Any) -> float | None:
    """JSON has no inf/nan: a failed or unknown time is stored as null."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class EntryKey:
    """Everything the best config of a launch depends on; `digest()` names the entry."""

    kernel: str
    source_hash: str
    key: dict[str, Any]
    dtypes: dict[str, str]
    target: str
    target_hash: str
    placements: dict[str, Any]
    space: str
    version: str

    def digest(self) -> str:
        return hashlib.sha256(_canonical(asdict(self)).encode()).hexdigest()[:40]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EntryKey:
        return cls(**{f: data[f] for f in cls.__dataclass_fields__})


@dataclass
class Candidate:
    """One config of an entry: `config` is `configs.config_record` ({"kwargs", "options"})."""

    config: dict[str, dict[str, Any]]
    simulated: bool
    simulated_seconds: float | None = None
    predicted_seconds: float | None = None
    grid: list[int] | None = None
    error: str | None = None
    # the layouts of the arguments whose layout the autotuner searched ({name: [policy, bank, granularity]});
    # None: measured in the arguments' placements of the entry key
    layouts: dict[str, Any] | None = None

    def identity(self) -> tuple[str, str]:
        """What makes two candidates of an entry the same point: the config and the searched layouts."""
        from .configs import config_identity

        return config_identity(self.config), _canonical(self.layouts)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["simulated_seconds"] = _finite(self.simulated_seconds)
        d["predicted_seconds"] = _finite(self.predicted_seconds)
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Candidate:
        c = cls(**{f: data.get(f) for f in cls.__dataclass_fields__})
        if not isinstance(c.config, dict) or not isinstance(c.simulated, bool):
            raise ValueError("bad candidate")
        return c


@dataclass
class Entry:
    """The tuning result of one launch key."""

    key: EntryKey
    candidates: list[Candidate]
    winner: int
    pruned: list[dict[str, Any]] = field(default_factory=list)  # {"config": record, "reason": str}
    args: dict[str, Any] = field(default_factory=dict)  # argument summary (shapes, strides, scalars)
    created: float = field(default_factory=time.time)
    tuning_seconds: float | None = None

    @property
    def id(self) -> str:
        return self.key.digest()

    @property
    def best(self) -> Candidate:
        return self.candidates[self.winner]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "schema": SCHEMA, "id": self.id, "key": asdict(self.key),
            "candidates": [c.to_json() for c in self.candidates], "winner": self.winner,
            "pruned": self.pruned, "args": self.args, "created": self.created,
            "tuning_seconds": _finite(self.tuning_seconds),
        }

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """Parse and validate; raises ValueError (or KeyError/TypeError) for anything foreign."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a triton-nmp tuning cache file")
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}, this version reads {SCHEMA}")
        entry = cls(EntryKey.from_json(data["key"]), [Candidate.from_json(c) for c in data["candidates"]],
                    data["winner"], list(data.get("pruned", [])), dict(data.get("args", {})),
                    float(data.get("created", 0.0)), data.get("tuning_seconds"))
        if not isinstance(entry.winner, int) or not 0 <= entry.winner < len(entry.candidates):
            raise ValueError("winner is not a candidate")
        if data.get("id") != entry.id:
            raise ValueError("entry id does not match its key")
        return entry

    def merged_with(self, older: Entry) -> Entry:
        """This entry plus the candidates only `older` has (or only it simulated); the winner is the
        fastest simulated candidate of the union (keeping this one's if nothing was simulated)."""
        ours = {c.identity(): c for c in self.candidates}
        merged = dict(ours)
        for c in older.candidates:
            ident = c.identity()
            mine = merged.get(ident)
            if mine is None or (c.simulated and not mine.simulated):
                merged[ident] = c
        candidates = list(merged.values())
        timed = [i for i, c in enumerate(candidates) if c.simulated and c.simulated_seconds is not None]
        if timed:
            winner = min(timed, key=lambda i: candidates[i].simulated_seconds)
        else:
            winner = list(merged).index(self.best.identity())
        return Entry(self.key, candidates, winner, self.pruned or older.pruned, self.args or older.args,
                     self.created, self.tuning_seconds)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "kernel"


class TuningCache:
    """The cache in one directory (default: `default_cache_dir()`, resolved on each use so that the
    environment variable can change at run time)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._directory = Path(directory).expanduser() if directory is not None else None
        self._memo: dict[Path, tuple[tuple[int, int, int], Entry | None]] = {}
        self._last_sweep = -math.inf  # time.monotonic() of the last sweep of every kernel directory

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else default_cache_dir()

    def kernel_dir(self, key: EntryKey) -> Path:
        return self.directory / f"{_safe(key.kernel)}-{key.source_hash[:16]}"

    def path_for(self, key: EntryKey) -> Path:
        return self.kernel_dir(key) / f"{key.digest()}.json"

    # ---------------------------------------------------------------------------------- reading

    def _read(self, path: Path) -> Entry | None:
        """The valid entry in `path`, or None (missing; corrupt or foreign files warn once per version)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            self._memo.pop(path, None)
            return None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        memo = self._memo.get(path)
        if memo is not None and memo[0] == stamp:
            return memo[1]
        entry: Entry | None
        try:
            with open(path, encoding="utf-8") as f:
                entry = Entry.from_json(json.load(f))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"ignoring tuning cache file {path}: {exc}; it will be rewritten", TuningCacheWarning,
                          stacklevel=user_stacklevel())
            entry = None
        self._memo[path] = (stamp, entry)
        return entry

    def lookup(self, key: EntryKey) -> Entry | None:
        """The stored entry for `key`, if any (one file read; no lock: files are replaced atomically)."""
        entry = self._read(self.path_for(key))
        return entry if entry is not None and entry.key == key else None

    def entries(self) -> Iterator[Entry]:
        """Every valid entry under the directory, oldest first."""
        root = self.directory
        if not root.is_dir():
            return iter(())
        found = [e for p in sorted(root.glob("*/*.json")) if (e := self._read(p)) is not None]
        return iter(sorted(found, key=lambda e: e.created))

    def find(self, prefix: str) -> list[Entry]:
        """Entries whose id starts with `prefix`, or whose kernel is named `prefix`."""
        return [e for e in self.entries() if e.id.startswith(prefix) or e.key.kernel == prefix]

    # ---------------------------------------------------------------------------------- writing

    @contextlib.contextmanager
    def _locked(self, directory: Path) -> Iterator[None]:
        directory.mkdir(parents=True, exist_ok=True)
        if fcntl is None:
            yield
            return
        with open(directory / _LOCK_NAME, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def store(self, entry: Entry) -> Path:
        """Write `entry`, merged with what another process stored for the same key meanwhile."""
        path = self.path_for(entry.key)
        with self._locked(path.parent):
            self._memo.pop(path, None)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", TuningCacheWarning)  # lookup already warned; we replace it
                current = self._read(path)
            if current is not None and current.key == entry.key:
                entry = entry.merged_with(current)
            self._collect(path.parent)
            data = entry.to_json()
            replace_file(path, lambda f: json.dump(data, f, indent=1, sort_keys=True), prefix=f".{path.stem[:12]}.")
        self._memo.pop(path, None)
        if time.monotonic() - self._last_sweep >= _SWEEP_INTERVAL_S:
            self._last_sweep = time.monotonic()
            for sub in self._kernel_dirs():
                if sub != path.parent:
                    self._collect(sub)
        return path

    def _kernel_dirs(self) -> list[Path]:
        root = self.directory
        return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def stale_temp_files(self) -> list[TempFile]:
        """Temp files older than the age limit, in every kernel directory (what `store` would collect)."""
        now, age = time.time(), stale_temp_age()
        return [t for d in self._kernel_dirs() for t in _temp_files(d, now) if t.age_seconds >= age]

    def _collect(self, directory: Path) -> int:
        """Delete the temp files in `directory` older than the age limit; returns how many."""
        now, age, removed = time.time(), stale_temp_age(), 0
        for t in _temp_files(directory, now):
            if t.age_seconds >= age:
                with contextlib.suppress(FileNotFoundError):
                    t.path.unlink()
                    removed += 1
        return removed

    def remove(self, entry: Entry) -> bool:
        path = self.path_for(entry.key)
        with self._locked(path.parent):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
        self._memo.pop(path, None)
        return True

    def clear(self) -> int:
        """Delete every entry file (valid or not); returns how many. Kernel folders and their lock files
        stay: a tuner of another process may hold the lock right now."""
        root = self.directory
        removed = 0
        if root.is_dir():
            for sub in sorted(p for p in root.iterdir() if p.is_dir()):
                with self._locked(sub):
                    for p in sub.glob("*.json"):
                        p.unlink(missing_ok=True)
                        removed += 1
                    for p in sub.glob(".*.tmp"):
                        p.unlink(missing_ok=True)
        self._memo.clear()
        return removed
