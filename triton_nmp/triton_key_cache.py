"""Triton's hash of its own sources (`triton_key`), kept on disk across processes.

Triton computes `triton.runtime.cache.triton_key()` once per process, before the first compile or Inductor
cache lookup: sha256 over its compiler, backend and language sources and the whole 500 MB `libtriton.so`,
about 0.4 s of CPU. A warm process (everything else cached) and every Inductor compile worker pay it again.

`install()` (run when Triton loads our backend entry points) replaces that function with `triton_key()` here,
which returns the very string Triton's own function computed, stored under a stamp of the files it reads:
path, size, modification and change time (ns), inode and device of every file under `triton/compiler`,
`triton/backends` and `triton/language` (a superset of what Triton hashes), of `triton/runtime/cache.py` and
of `libtriton.so`, plus Triton's version and the Python executable. Any change to those files (a reinstall,
an edit, even a `touch`) changes the stamp, and the key is computed by Triton again and stored under the new
stamp. Files are content-addressed by the stamp's digest and repeat it; one that cannot be read, does not
repeat its stamp or does not hold a key of this Triton version is reported and replaced, never trusted.
Writes are atomic (a temp file, then a rename). `TRITON_NMP_TRITON_KEY_CACHE=0` turns the cache off.

Location: `$TRITON_NMP_CACHE_DIR/triton-key/` (default `~/.cache/triton-nmp/triton-key/`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["install", "triton_key", "original_triton_key", "stamp", "load_or_compute", "cache_dir", "watched_files"]

_FORMAT = 1
_original: Callable[[], str] | None = None


def cache_dir() -> Path:
    root = os.environ.get("TRITON_NMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "triton-nmp")
    return Path(root) / "triton-key"


def watched_files() -> list[Path]:
    """Every file Triton's `triton_key` may read (a superset), in a stable order."""
    import sysconfig

    import triton.runtime.cache as tc

    root = Path(tc.__file__).resolve().parent.parent
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    files = [Path(tc.__file__).resolve(), root / "_C" / f"libtriton.{ext}"]
    for sub in ("compiler", "backends", "language"):
        for folder, dirs, names in os.walk(root / sub):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files.extend(Path(folder) / n for n in sorted(names) if not n.endswith(".pyc"))
    return files


def stamp(files: Iterable[Path], version: str) -> str:
    """sha256 over `version`, the interpreter, and each file's path and stat (size, mtime, ctime, inode, device);
    a missing file enters as missing."""
    h = hashlib.sha256(f"{_FORMAT}\0{version}\0{sys.executable}\0".encode())
    for p in files:
        try:
            st = os.stat(p)
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_dev}\n".encode())
        except OSError:
            h.update(f"{p}\0missing\n".encode())
    return h.hexdigest()


def _read(path: Path, digest: str, version: str) -> str:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or data.get("stamp") != digest:
        raise ValueError("it holds the key of other files")
    key = data.get("key")
    if not isinstance(key, str) or not key.startswith(version) or len(key) <= len(version):
        raise ValueError(f"it holds no Triton {version} source key")
    return key


def _write(path: Path, digest: str, key: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump({"stamp": digest, "key": key}, f)
        os.replace(tmp, path)
    except OSError as e:
        warnings.warn(f"triton-nmp: cannot write Triton's source key cache file {path} ({e})", stacklevel=3)


def load_or_compute(directory: Path, digest: str, version: str, compute: Callable[[], str]) -> str:
    """The key stored in `directory` under `digest`, else `compute()` (stored for the next process)."""
    path = directory / f"{digest[:40]}.json"
    if path.exists():
        try:
            return _read(path, digest, version)
        except Exception as e:  # noqa: BLE001 - an untrusted file is computed again and replaced
            warnings.warn(f"triton-nmp: ignoring the unreadable Triton source key cache file {path} "
                          f"({type(e).__name__}: {e}); hashing Triton's sources again", stacklevel=2)
    key = compute()
    _write(path, digest, key)
    return key


def _enabled() -> bool:
    return os.environ.get("TRITON_NMP_TRITON_KEY_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


@functools.cache
def triton_key() -> str:
    """Triton's `triton_key()` value, from the disk cache while Triton's files are unchanged."""
    import triton

    compute = _original or _triton_original()
    if not _enabled():
        return compute()
    return load_or_compute(cache_dir(), stamp(watched_files(), triton.__version__), triton.__version__, compute)


def _triton_original() -> Callable[[], str]:
    import triton.runtime.cache as tc

    fn = tc.triton_key
    return fn if fn is not triton_key else _original  # type: ignore[return-value]


def original_triton_key() -> str:
    """Triton's own hash, computed now (not from its in-process cache nor ours)."""
    fn = _triton_original()
    return getattr(fn, "__wrapped__", fn)()


def install() -> None:
    """Make Triton (and whoever imports `triton_key` from it later, like Inductor) use `triton_key` here.
    Idempotent; the name Triton's autotuner imported at its import is replaced too."""
    global _original
    import triton.runtime.cache as tc

    if tc.triton_key is triton_key:
        return
    _original = tc.triton_key
    tc.triton_key = triton_key
    autotuner = sys.modules.get("triton.runtime.autotuner")
    if autotuner is not None and getattr(autotuner, "triton_key", None) is _original:
        autotuner.triton_key = triton_key
