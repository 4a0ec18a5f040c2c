"""Results derived from a launch, kept on disk next to its kernel for the next process ("side files").

A side file lives in the kernel's directory of Triton's cache (the cache manager under the kernel's hash), is
named `<kernel>.<kind>-<digest>.<ext>` from the full key text of what it holds, and repeats that key text,
which is checked on load. A file that cannot be trusted (unparsable, truncated, or holding another key's
result) is reported with a warning naming it and the caller computes the result again; a store is atomic (the
cache manager's `put`: a temp file, then a rename) and a failed one is reported, never raised. Used by
`footprint` (npz predictions) and `layout_cache` (json layout decisions); the payload format is theirs.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from triton_nmp.abi import metadata_value

__all__ = ["SideCache", "SideFile"]

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class SideFile:
    """Where one result lives: the kernel's Triton cache hash, the file name, and the key text it must repeat."""

    kernel_hash: str
    name: str
    key: str


@dataclass(frozen=True)
class SideCache:
    """One kind of side file. `what` names it in warnings ("layout"), `result` is what one holds ("decision",
    in "it holds another launch's decision"), `again` says what happens instead of reading it ("choosing the
    launch's layouts again")."""

    kind: str
    ext: str
    what: str
    result: str
    again: str

    def file(self, metadata: Any, key: Callable[[], str], salt: str = "") -> SideFile | None:
        """The side file for the kernel of `metadata` and the key text `key()` (called only when the kernel has a
        place in Triton's cache: a hash and a name; None otherwise). `salt` enters the file name only (e.g. the
        hash of the writer's source)."""
        h, name = metadata_value(metadata, "hash"), metadata_value(metadata, "name")
        if not h or not name:
            return None
        text = key()
        digest = hashlib.sha256((salt + text).encode()).hexdigest()[:32]
        return SideFile(h, f"{name}.{self.kind}-{digest}.{self.ext}", text)

    def load(self, where: SideFile, read: Callable[[str], tuple[Any, R]],
             decode: Callable[[R], T] | None = None) -> T | None:
        """The result stored for `where`, or None: no file, or one that cannot be trusted (reported). `read` takes
        the file's path and returns (the key text the file repeats, its payload), raising on anything malformed;
        `decode` turns the payload into the result once the key matched (may raise too)."""
        from triton.runtime.cache import get_cache_manager

        path = get_cache_manager(where.kernel_hash).get_file(where.name)
        if path is None:
            return None
        try:
            key, payload = read(path)
            if key != where.key:
                raise ValueError(f"it holds another launch's {self.result}")
            return payload if decode is None else decode(payload)
        except Exception as e:  # noqa: BLE001 - any unreadable file is computed again
            warnings.warn(f"triton-nmp: ignoring the unreadable {self.what} cache file {path} "
                          f"({type(e).__name__}: {e}); {self.again}", stacklevel=3)
            return None

    def store(self, where: SideFile, data: bytes | str) -> None:
        """Write `data` (bytes, or text) as the file of `where`, atomically; a failure is reported."""
        from triton.runtime.cache import get_cache_manager

        try:
            get_cache_manager(where.kernel_hash).put(data, where.name, binary=isinstance(data, bytes))
        except OSError as e:
            warnings.warn(f"triton-nmp: cannot write the {self.what} cache file {where.name} ({e})", stacklevel=3)
