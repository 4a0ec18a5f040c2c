"""Target descriptions of the nmp machine (placeholder: the full TargetSpec is being written)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TargetSpec:
    name: str = "nmp-64"
    mesh_rows: int = 8
    mesh_cols: int = 8
    clock_ghz: float = 1.0
    spm_bytes: int = 256 * 1024

    @property
    def num_pus(self) -> int:
        return self.mesh_rows * self.mesh_cols

    def hash(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()

    @classmethod
    def load(cls, name_or_path: str = "nmp-64") -> TargetSpec:
        return cls()


_active: TargetSpec | None = None


def active_target() -> TargetSpec:
    global _active
    if _active is None:
        _active = TargetSpec.load("nmp-64")
    return _active


def set_active_target(spec: TargetSpec) -> None:
    global _active
    _active = spec
