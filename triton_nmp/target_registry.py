"""Target descriptions by arch string, across processes.

A compiled kernel names its target by the arch string of its `GPUTarget` (`triton_nmp.target.target_arch`:
`"<name>:<16 hex digits of the spec's hash>"`); the compiler reads the spec back with `spec_for_arch`, which
knows the specs this process has seen and the presets. Inductor compiles kernels in worker subprocesses that
only see the arch string (it travels in the kernel's `triton_meta` as the device's compute capability), not the
parent's `triton_nmp.activate(target=...)`, which may name a TOML file. `publish(spec)` writes the spec as TOML
to `$TRITON_NMP_CACHE_DIR/targets/<arch>.toml` (content-addressed, written once, atomically); `resolve(arch)`
finds it in any process.
"""

from __future__ import annotations

import os
from pathlib import Path

from triton_nmp.atomic_file import replace_file
from triton_nmp.errors import NMPTargetError
from triton_nmp.target import TargetSpec, active_target, spec_for_arch, target_arch

__all__ = ["publish", "resolve", "registry_dir"]


def registry_dir() -> Path:
    root = os.environ.get("TRITON_NMP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "triton-nmp")
    return Path(root) / "targets"


def _file_for(arch: str) -> Path:
    return registry_dir() / (arch.replace(":", "-").replace(os.sep, "_") + ".toml")


_published: set[str] = set()


def publish(spec: TargetSpec) -> str:
    """Make `spec` resolvable from its arch string in other processes; returns the arch string."""
    arch = target_arch(spec)
    if arch in _published:
        return arch
    path = _file_for(arch)
    if not path.exists():
        replace_file(path, lambda f: f.write(spec.to_toml()), prefix="tmp")
    _published.add(arch)
    return arch


def resolve(arch: str) -> TargetSpec:
    """The target an arch string names ("" is the active target); afterwards `spec_for_arch(arch)` knows it.

    Raises NMPTargetError (with what to do) when no spec matches."""
    if not arch:
        return active_target()
    try:
        return spec_for_arch(arch)
    except NMPTargetError:
        pass
    path = _file_for(arch)
    if path.exists():
        found = TargetSpec.from_toml(path.read_text(), source=str(path))
        if target_arch(found) == arch:  # remembers it for spec_for_arch
            return found
    name, _, digest = arch.rpartition(":")
    raise NMPTargetError(
        f"a kernel was generated for nmp target '{name}' (hash {digest}), which this process cannot find "
        f"(active target: '{active_target().name}', no description in {registry_dir()}); set TRITON_NMP_TARGET "
        f"to that target before starting Python, or keep TRITON_NMP_CACHE_DIR the same for all processes")
