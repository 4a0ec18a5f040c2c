"""Triton's and torch's hashes of their own sources, kept on disk across processes.

Each process computes `triton.runtime.cache.triton_key()` before its first Triton compile or Inductor cache lookup
(sha256 over Triton's compiler, backend and language sources and the whole 500 MB `libtriton.so`: ~0.4 s of CPU),
and Inductor computes `torch._inductor.codecache.torch_key()` (sha256 over every module of torch: ~0.15 s) before
its first cache lookup. A warm process (everything else cached) pays both again.

Here each value is the very one the library's own function computed, stored under a stamp of the files that
function reads: path, size, modification and change time (ns), inode and device of each file of a superset of
them, plus the library's version and the Python executable. Any change to those files (a reinstall, an edit, even a
`touch`) changes the stamp; the library computes the value again and it is stored under the new stamp. Files are
content-addressed by the stamp's digest and repeat it; one that cannot be read, does not repeat its stamp or does
not hold a key of this version is reported and replaced, never trusted. Writes are atomic (a temp file, then a
rename). `TRITON_NMP_TRITON_KEY_CACHE=0` turns both off.

`install()` (run when Triton loads our backend entry points) replaces `triton.runtime.cache.triton_key` with
`triton_key()` here; `install_torch_key()` (run when the Inductor integration is installed) hands Inductor's
`torch_key` its value (`torch_key.set`) before Inductor asks for it.
Location: `$TRITON_NMP_CACHE_DIR/triton-key/` and `.../torch-key/` (default under `~/.cache/triton-nmp/`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from triton_nmp.atomic_file import replace_file

__all__ = ["install", "install_torch_key", "triton_key", "original_triton_key", "torch_key_bytes", "stamp",
           "load_or_compute", "cache_dir", "watched_files", "torch_watched_files"]

_FORMAT = 1
_original: Callable[[], str] | None = None


def cache_dir(kind: str = "triton") -> Path:
    root = os.environ.get("TRITON_NMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "triton-nmp")
    return Path(root) / f"{kind}-key"


def _walk(root: Path, keep: Callable[[str], bool]) -> list[Path]:
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files.extend(Path(folder) / n for n in sorted(names) if keep(n))
    return files


def watched_files() -> list[Path]:
    """Every file Triton's `triton_key` may read (a superset), in a stable order."""
    import sysconfig

    import triton.runtime.cache as tc

    root = Path(tc.__file__).resolve().parent.parent
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    files = [Path(tc.__file__).resolve(), root / "_C" / f"libtriton.{ext}"]
    for sub in ("compiler", "backends", "language"):
        files.extend(_walk(root / sub, lambda n: not n.endswith(".pyc")))
    return files


def torch_watched_files() -> list[Path]:
    """Every file Inductor's `torch_key` may read (a superset): each module of the torch package (sources and
    extension modules) and the two extra files it hashes."""
    import importlib.machinery

    import torch

    root = Path(torch.__file__).parent
    suffixes = tuple(importlib.machinery.all_suffixes())
    inductor = root / "_inductor"
    return _walk(root, lambda n: n.endswith(suffixes)) + [inductor / "codegen" / "aoti_runtime" / "interface.cpp",
                                                          inductor / "script.ld"]


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
        raise ValueError(f"it holds no {version} source key")
    return key


def _no_check(key: str) -> None:
    pass


def _write(path: Path, digest: str, key: str) -> None:
    try:
        replace_file(path, lambda f: json.dump({"stamp": digest, "key": key}, f), suffix="")
    except OSError as e:
        warnings.warn(f"triton-nmp: cannot write the source key cache file {path} ({e})", stacklevel=3)


def load_or_compute(directory: Path, digest: str, version: str, compute: Callable[[], str],
                    check: Callable[[str], None] = _no_check) -> str:
    """The key stored in `directory` under `digest`, else `compute()` (stored for the next process). A stored key
    must start with `version` (so does every key `compute` returns) and pass `check` (which raises ValueError)."""
    path = directory / f"{digest[:40]}.json"
    if path.exists():
        try:
            key = _read(path, digest, version)
            check(key)
            return key
        except Exception as e:  # noqa: BLE001 - an untrusted file is computed again and replaced
            warnings.warn(f"triton-nmp: ignoring the unreadable source key cache file {path} "
                          f"({type(e).__name__}: {e}); hashing the sources again", stacklevel=2)
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


def torch_key_bytes(compute: Callable[[], bytes]) -> bytes:
    """Inductor's `torch_key()` value (`compute` computes it), from the disk cache while torch's files are
    unchanged. Stored as "<torch version>-<base64>"; a stored value that is not 32 bytes is not trusted."""
    import torch

    version = torch.__version__

    def text() -> str:
        return f"{version}-{base64.b64encode(compute()).decode()}"

    def decode(key: str) -> bytes:
        if key[len(version):len(version) + 1] != "-":
            raise ValueError("it holds no torch source key")
        value = base64.b64decode(key[len(version) + 1:], validate=True)  # binascii.Error is a ValueError
        if len(value) != 32:
            raise ValueError(f"its torch source key has {len(value)} bytes, not 32")
        return value

    return decode(load_or_compute(cache_dir("torch"), stamp(torch_watched_files(), version), version, text, decode))


_torch_key_installed = False


def install_torch_key() -> None:
    """Give Inductor's `torch_key` its value from the disk cache (once per process; a value Inductor already has
    is kept)."""
    global _torch_key_installed
    if _torch_key_installed or not _enabled():
        return
    from torch._inductor import codecache

    _torch_key_installed = True
    key_fn = codecache.torch_key
    if not hasattr(key_fn, "set"):  # not the prefetchable cache of torch 2.13: leave it alone
        return
    value = torch_key_bytes(key_fn)  # on a miss, key_fn computes (and keeps) it itself
    try:
        key_fn.set(value)
    except RuntimeError:  # already known in this process
        pass
