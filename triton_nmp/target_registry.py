"""Target descriptions by arch string, across processes.

A compiled kernel names its target by the arch string of its `GPUTarget` (`"<name>:<16 hex digits of the
spec's hash>"`, see `driver.target_arch`). Inductor compiles kernels in worker subprocesses that only see that
string (it travels in the kernel's `triton_meta` as the device's compute capability), not the parent's
`triton_nmp.activate(target=...)`. `publish(spec)` writes the spec as TOML to
`$TRITON_NMP_CACHE_DIR/targets/<arch>.toml` (content-addressed, written once, atomically); `resolve(arch)`
finds the spec again: the active one, a published one, or a preset of that name with that hash.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from triton_nmp.errors import NMPTargetError
from triton_nmp.target import TargetSpec, active_target

__all__ = ["arch_of", "publish", "resolve", "registry_dir"]


def registry_dir() -> Path:
    root = os.environ.get("TRITON_NMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "triton-nmp")
    return Path(root) / "targets"


def arch_of(spec: TargetSpec) -> str:
    """The arch string of `spec` (the same as `triton_nmp.driver.target_arch`)."""
    return f"{spec.name}:{spec.hash()[:16]}"


def _file_for(arch: str) -> Path:
    return registry_dir() / (arch.replace(":", "-").replace(os.sep, "_") + ".toml")


_published: set[str] = set()


def publish(spec: TargetSpec) -> str:
    """Make `spec` resolvable from its arch string in other processes; returns the arch string."""
    arch = arch_of(spec)
    if arch in _published:
        return arch
    path = _file_for(arch)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(spec.to_toml())
        os.replace(tmp, path)
    _published.add(arch)
    return arch


def resolve(arch: str) -> TargetSpec:
    """The target an arch string names. Raises NMPTargetError (with what to do) when no spec matches."""
    spec = active_target()
    if not arch or arch == arch_of(spec):
        return spec
    name, _, digest = arch.rpartition(":")
    path = _file_for(arch)
    if path.exists():
        found = TargetSpec.from_toml(path.read_text(), source=str(path))
        if arch_of(found) == arch:
            return found
    try:
        preset = TargetSpec.load(name)
    except NMPTargetError:
        preset = None
    if preset is not None and arch_of(preset) == arch:
        return preset
    raise NMPTargetError(
        f"a kernel was generated for nmp target '{name}' (hash {digest}), which this process cannot find "
        f"(active target: '{spec.name}', no description in {registry_dir()}); set TRITON_NMP_TARGET to that "
        f"target before starting Python, or keep TRITON_NMP_CACHE_DIR the same for all processes")


_swap_lock = __import__("threading").RLock()


class compiling_for:  # noqa: N801  (used as a context manager, like a function)
    """Make `spec` the active target while a kernel is compiled for it, if it is not already.

    Only compile workers meet a kernel for another target (they started before the parent's `activate`);
    the swap is serialised so a thread of the parent never sees a half-swapped target.
    """

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        self.previous: TargetSpec | None = None
        self.swapped = False

    def __enter__(self) -> TargetSpec:
        from triton_nmp.target import set_active_target

        if active_target() is not self.spec and arch_of(active_target()) != arch_of(self.spec):
            _swap_lock.acquire()
            self.previous = set_active_target(self.spec)
            self.swapped = True
        return self.spec

    def __exit__(self, *exc) -> None:
        from triton_nmp.target import set_active_target

        if self.swapped:
            set_active_target(self.previous)
            _swap_lock.release()
