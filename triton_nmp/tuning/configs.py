"""Configs as plain data: the JSON record the tuning cache stores, identities, labels.

A `triton.Config` carries constexpr values and backend options in `kwargs` (nmp's `pu_mapping` lives
there, because Triton's Config has no field for backend knobs) and Triton's own options as
attributes. The record splits them into `kwargs` (kernel parameters) and `options` (everything the
compiler reads), so the cost model can be recalibrated from the cache without importing the kernel,
and rebuilds an equal Config. Pre-hooks cannot be stored: a cached winner is matched back to the
live config list by identity instead of being rebuilt, which keeps hooks attached.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from functools import cache
from typing import Any

import triton

__all__ = ["CONFIG_FIELDS", "config_record", "config_from_record", "config_identity", "config_label",
           "space_hash", "jsonable"]

#: `triton.Config` attributes that are compile options (pre_hook is code and never stored).
CONFIG_FIELDS: tuple[str, ...] = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")


@cache
def _backend_option_names() -> frozenset[str]:
    """Names of nmp compile options, which may appear in Config kwargs (e.g. `pu_mapping`)."""
    from triton_nmp.backend.compiler import NMPOptions

    return frozenset(NMPOptions.__dataclass_fields__) - set(CONFIG_FIELDS)


def jsonable(value: Any) -> Any:
    """A JSON-safe stand-in for a key/config value: scalars as is, non-finite floats and other objects
    as strings (stable across processes, so identities computed from them compare equal)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return str(value)


def config_record(config: triton.Config) -> dict[str, dict[str, Any]]:
    """{"kwargs": constexpr values, "options": compile options incl. backend knobs from kwargs}."""
    backend = _backend_option_names()
    kwargs = {k: jsonable(v) for k, v in config.kwargs.items() if k not in backend}
    options = {k: jsonable(getattr(config, k, None)) for k in CONFIG_FIELDS}
    options.update({k: jsonable(v) for k, v in config.kwargs.items() if k in backend})
    return {"kwargs": kwargs, "options": options}


def config_from_record(record: dict[str, dict[str, Any]]) -> triton.Config:
    """Inverse of `config_record` (without pre_hook)."""
    options = dict(record.get("options", {}))
    fields = {k: options.pop(k, None) for k in CONFIG_FIELDS}
    return triton.Config({**record.get("kwargs", {}), **options}, **fields)


def config_identity(config: triton.Config | dict) -> str:
    """Canonical JSON text of a config's record: equal for equal configs in any process."""
    record = config if isinstance(config, dict) else config_record(config)
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def config_label(config: triton.Config | dict) -> str:
    """Short human form: constexprs, then the options that are set (`BLOCK=256 num_stages=2 ...`)."""
    record = config if isinstance(config, dict) else config_record(config)
    parts = [f"{k}={v}" for k, v in record.get("kwargs", {}).items()]
    parts += [f"{k}={v}" for k, v in record.get("options", {}).items()
              if v is not None and k not in ("num_warps", "num_ctas")]
    return " ".join(parts) or "(defaults)"


def space_hash(configs: Iterable[triton.Config]) -> str:
    """Hash of a config list (order-insensitive): a changed search space re-tunes."""
    ids = sorted(config_identity(c) for c in configs)
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
