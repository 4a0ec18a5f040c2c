"""Target descriptions of the nmp machine.

A `TargetSpec` is the single source of the machine's numbers: the compiler reads it to plan
scratchpad buffers and DMA descriptors, the simulator to charge time, the tuner to rank configs,
and the CLI to show roofline bounds. Presets ship as TOML files in `triton_nmp/targets/`; a user
describes another machine with a TOML file of the same schema.

TOML schema (every key is required; units in the names):

    name = "nmp-64"
    [mesh]       rows, cols                                   (PUs, XY-routed 2-D mesh)
    [clock]      ghz
    [scratchpad] bytes                                        (per PU)
    [bank]       bytes, bytes_per_cycle                       (the PU's own DRAM bank)
    [dma]        setup_cycles, granule_bytes, alignment_bytes, max_descriptor_bytes, max_in_flight
    [matrix]     fp16_macs_per_cycle, bf16_macs_per_cycle, fp32_macs_per_cycle, int8_macs_per_cycle
    [vector]     fp32_lanes
    [noc]        link_bytes_per_cycle, hop_cycles, remote_read_bytes_per_cycle
    [launch]     overhead_us, graph_dispatch_us (optional)

The dataclass is flat (`dma_setup_cycles` <-> `dma.setup_cycles`) so that hot timing code reads
plain attributes; each field's metadata holds its TOML path, unit and constraint, and that one
table drives loading, validation, error messages, `to_toml()` and the CLI listing.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import threading
import tomllib
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

from triton_nmp.errors import NMPTargetError

__all__ = [
    "DEFAULT_TARGET",
    "ENV_VAR",
    "DTYPES",
    "FieldInfo",
    "TargetSpec",
    "active_target",
    "available_presets",
    "canonical_dtype",
    "set_active_target",
    "spec_for_arch",
    "target_arch",
]

DEFAULT_TARGET = "nmp-64"
ENV_VAR = "TRITON_NMP_TARGET"
PRESET_DIR = Path(__file__).resolve().parent / "targets"

#: dtypes the matrix unit has a rate for, in display order.
DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp32", "int8")

# Constraint kinds: what a value must satisfy, and how to say so in an error message.
_POSITIVE = "positive"
_NONNEGATIVE = "nonnegative"
_POW2 = "power-of-two"
_NAME = "name"
_FRACTION = "fraction"


def _f(default: Any, toml: str, unit: str, check: str, doc: str, *, optional: bool = False,
       inherit: str = "") -> Any:
    """A dataclass field carrying its TOML path, unit and constraint (see module docstring).

    `optional` fields may be left out of a TOML file: they then take their neutral default (the one
    that reproduces the model without them), or the value of the field named by `inherit`."""
    meta = {"toml": toml, "unit": unit, "check": check, "doc": doc, "optional": optional, "inherit": inherit}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class TargetSpec:
    """Parameters of one nmp machine (all rates are per PU unless the name says otherwise).

    Defaults equal the `nmp-64` preset, so `TargetSpec()` and `dataclasses.replace(spec, ...)` give
    valid specs for quick experiments; values are validated on construction as well as on load.
    """

    name: str = _f("nmp-64", "name", "", _NAME, "target name")
    mesh_rows: int = _f(8, "mesh.rows", "PUs", _POSITIVE, "mesh rows")
    mesh_cols: int = _f(8, "mesh.cols", "PUs", _POSITIVE, "mesh columns")
    clock_ghz: float = _f(1.0, "clock.ghz", "GHz", _POSITIVE, "clock of PUs, DMA engines and NoC")
    spm_bytes: int = _f(256 * 1024, "scratchpad.bytes", "bytes", _POSITIVE, "scratchpad per PU")
    bank_bytes: int = _f(64 * 1024 * 1024, "bank.bytes", "bytes", _POSITIVE, "local DRAM bank per PU")
    bank_bytes_per_cycle: float = _f(16.0, "bank.bytes_per_cycle", "B/cycle", _POSITIVE, "bank <-> SPM bandwidth")
    dma_setup_cycles: int = _f(100, "dma.setup_cycles", "cycles", _NONNEGATIVE, "fixed cost per DMA descriptor")
    dma_granule_bytes: int = _f(32, "dma.granule_bytes", "bytes", _POW2, "transfers move whole granules")
    dma_alignment_bytes: int = _f(32, "dma.alignment_bytes", "bytes", _POW2, "DMA address alignment")
    dma_max_descriptor_bytes: int = _f(8192, "dma.max_descriptor_bytes", "bytes", _POSITIVE, "largest DMA descriptor")
    dma_max_in_flight: int = _f(8, "dma.max_in_flight", "descriptors", _POSITIVE, "outstanding DMAs per PU")
    matrix_fp16_macs_per_cycle: float = _f(128.0, "matrix.fp16_macs_per_cycle", "MAC/cycle", _POSITIVE, "fp16 MACs")
    matrix_bf16_macs_per_cycle: float = _f(128.0, "matrix.bf16_macs_per_cycle", "MAC/cycle", _POSITIVE, "bf16 MACs")
    matrix_fp32_macs_per_cycle: float = _f(32.0, "matrix.fp32_macs_per_cycle", "MAC/cycle", _POSITIVE, "fp32 MACs")
    matrix_int8_macs_per_cycle: float = _f(256.0, "matrix.int8_macs_per_cycle", "MAC/cycle", _POSITIVE, "int8 MACs")
    vector_fp32_lanes: int = _f(32, "vector.fp32_lanes", "lanes", _POSITIVE, "fp32 lanes of the vector unit")
    noc_link_bytes_per_cycle: float = _f(32.0, "noc.link_bytes_per_cycle", "B/cycle", _POSITIVE, "per NoC link")
    noc_hop_cycles: int = _f(9, "noc.hop_cycles", "cycles", _NONNEGATIVE, "latency per mesh hop")
    remote_read_bytes_per_cycle: float = _f(
        4.0, "noc.remote_read_bytes_per_cycle", "B/cycle", _POSITIVE, "cap on one PU's reads of other banks"
    )
    launch_overhead_us: float = _f(5.0, "launch.overhead_us", "us", _NONNEGATIVE, "host cost per kernel launch")
    # --- optional fields (docs/machine-model.md): their defaults are neutral, i.e. they reproduce the model
    # of the fields above exactly, so files written before they existed keep their meaning.
    launch_graph_dispatch_us: float = _f(
        1.0, "launch.graph_dispatch_us", "us", _NONNEGATIVE,
        "device cost per kernel of a replayed launch graph (torch.compile mode='reduce-overhead' or 'max-autotune')",
        optional=True, inherit="launch_overhead_us")
    host_write_gb_per_s: float = _f(64.0, "host.write_gb_per_s", "GB/s", _POSITIVE,
                                    "host -> banks link (tensors written in, charged by simulator.transfer)",
                                    optional=True)
    dma_store_setup_cycles: int = _f(100, "dma.store_setup_cycles", "cycles", _NONNEGATIVE,
                                     "fixed cost per store descriptor", optional=True, inherit="dma_setup_cycles")
    dma_store_bytes_per_cycle: float = _f(16.0, "dma.store_bytes_per_cycle", "B/cycle", _POSITIVE,
                                          "SPM -> own bank bandwidth", optional=True, inherit="bank_bytes_per_cycle")
    issue_threads: int = _f(1, "issue.threads", "programs", _POSITIVE,
                            "programs a PU runs at once (hardware threads), sharing pipeline, DMA engine and SPM",
                            optional=True)
    issue_thread_interval_cycles: int = _f(1, "issue.thread_interval_cycles", "cycles", _POSITIVE,
                                           "fewest cycles between two instructions of one thread", optional=True)
    issue_spm_access_cycles: float = _f(0.0, "issue.spm_access_cycles", "cycles/element", _NONNEGATIVE,
                                        "scalar core: per tile element a compute loop loads or stores", optional=True)
    issue_loop_cycles: float = _f(0.0, "issue.loop_cycles", "cycles/iteration", _NONNEGATIVE,
                                  "scalar core: per element-loop iteration (index, branch, address)", optional=True)
    issue_dma_overlap: float = _f(1.0, "issue.dma_overlap", "fraction", _FRACTION,
                                  "threads > 1: share of min(compute, DMA) of concurrent programs hidden",
                                  optional=True)
    ops_int_alu_cycles: float = _f(1.0, "ops.int_alu", "cycles/lanes", _POSITIVE,
                                   "integer add/sub/logic/shift/compare/select/cast", optional=True)
    ops_int_mul_cycles: float = _f(1.0, "ops.int_mul", "cycles/lanes", _POSITIVE, "integer multiply", optional=True)
    ops_int_div_cycles: float = _f(1.0, "ops.int_div", "cycles/lanes", _POSITIVE, "integer divide/remainder",
                                   optional=True)
    ops_float_add_cycles: float = _f(1.0, "ops.float_add", "cycles/lanes", _POSITIVE,
                                     "float add/sub/compare/min/max/convert", optional=True)
    ops_float_mul_cycles: float = _f(1.0, "ops.float_mul", "cycles/lanes", _POSITIVE, "float multiply, fma",
                                     optional=True)
    ops_float_div_cycles: float = _f(1.0, "ops.float_div", "cycles/lanes", _POSITIVE, "float divide, sqrt",
                                     optional=True)
    ops_float_special_cycles: float = _f(1.0, "ops.float_special", "cycles/lanes", _POSITIVE,
                                         "exp, log, trigonometric, pow, erf", optional=True)
    ops_int64_alu_cycles: float = _f(2.0, "ops.int64_alu", "cycles/lanes", _POSITIVE, "64-bit int_alu",
                                     optional=True)
    ops_int64_mul_cycles: float = _f(2.0, "ops.int64_mul", "cycles/lanes", _POSITIVE, "64-bit int_mul",
                                     optional=True)
    ops_int64_div_cycles: float = _f(2.0, "ops.int64_div", "cycles/lanes", _POSITIVE, "64-bit int_div",
                                     optional=True)
    ops_float64_add_cycles: float = _f(2.0, "ops.float64_add", "cycles/lanes", _POSITIVE, "64-bit float_add",
                                       optional=True)
    ops_float64_mul_cycles: float = _f(2.0, "ops.float64_mul", "cycles/lanes", _POSITIVE, "64-bit float_mul",
                                       optional=True)
    ops_float64_div_cycles: float = _f(2.0, "ops.float64_div", "cycles/lanes", _POSITIVE, "64-bit float_div",
                                       optional=True)
    ops_float64_special_cycles: float = _f(2.0, "ops.float64_special", "cycles/lanes", _POSITIVE,
                                           "64-bit float_special", optional=True)
    # Calibration ranges ([fit] table): (field path, low, high) that the field's sources allow. Not part of
    # the machine (no effect on hash or equality): `triton-nmp calibrate-target` keeps fitted values inside.
    fit_ranges: tuple[tuple[str, float, float], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        values = {info.attr: getattr(self, info.attr) for info in _SCHEMA}
        normalized = _validate(values, f"TargetSpec(name={self.name!r})")
        for attr, value in normalized.items():
            if value is not values[attr] and type(value) is not type(values[attr]):
                object.__setattr__(self, attr, value)  # e.g. 1 -> 1.0 for GHz, so equal specs hash equally
        ranges = _check_fit_ranges(self, self.fit_ranges, f"TargetSpec(name={self.name!r})")
        object.__setattr__(self, "fit_ranges", ranges)

    # ----------------------------------------------------------------------------------- loading

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str] = DEFAULT_TARGET) -> TargetSpec:
        """A preset by name (`"nmp-64"`) or a TOML file by path.

        An argument containing a path separator or ending in `.toml` is a file path; anything else is
        a preset name, so a stray file named like a preset in the working directory never shadows it.
        Parsed presets are cached; files are re-read only when their mtime or size changes.
        """
        text = os.fspath(name_or_path)
        if _looks_like_path(text):
            return _load_file(Path(text).expanduser())
        return _load_preset(text)

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> TargetSpec:
        """Parse TOML text (the same schema as the preset files); `source` names it in errors."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise NMPTargetError(f"target {source} is not valid TOML: {exc}") from None
        return cls(**_from_document(document, source))

    # ------------------------------------------------------------------------------ serialising

    def to_dict(self) -> dict[str, Any]:
        """Nested dict in the TOML file's shape (sections as sub-dicts)."""
        out: dict[str, Any] = {}
        for info in _SCHEMA:
            section, _, key = info.path.rpartition(".")
            target = out.setdefault(section, {}) if section else out
            target[key] = getattr(self, info.attr)
        return out

    def to_toml(self) -> str:
        """TOML text that `TargetSpec.load` reads back to an equal spec (units as comments)."""
        lines = [f"name = {json.dumps(self.name)}"]
        for section in _SECTIONS:
            lines += ["", f"[{section}]"]
            for info in _SCHEMA:
                if info.path.startswith(section + "."):
                    lines.append(f"{info.path.split('.', 1)[1]} = {getattr(self, info.attr)!r}  # {info.unit}")
        if self.fit_ranges:
            lines += ["", "[fit]"] + [f'"{path}" = [{lo!r}, {hi!r}]' for path, lo, hi in self.fit_ranges]
        return "\n".join(lines) + "\n"

    def hash(self) -> str:
        """sha256 hex of the canonical content; any field change changes it (cache keys use it).

        Optional fields at their neutral value are left out, so adding a field to the schema does not
        change the hash (and so the caches) of a machine that does not use it."""
        content = self.to_dict()
        for info in _SCHEMA:
            if info.optional and getattr(self, info.attr) == self.neutral_value(info):
                section, _, key = info.path.rpartition(".")
                del content[section][key]
                if not content[section]:
                    del content[section]
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def neutral_value(self, info: FieldInfo) -> Any:
        """The value of an optional field that leaves the model as it was without it."""
        return getattr(self, info.inherit) if info.inherit else info.default

    # ----------------------------------------------------------------------------- threads/SPM

    @property
    def spm_bytes_per_program(self) -> int:
        """Scratchpad one program may plan for: the PU's scratchpad shared by its `issue.threads`
        concurrent programs (UPMEM: 64 KB WRAM / 16 tasklets = 4 KB each)."""
        return self.spm_bytes // self.issue_threads

    # --------------------------------------------------------------------------------- geometry

    @property
    def num_pus(self) -> int:
        return self.mesh_rows * self.mesh_cols

    def pu_coords(self, pu: int) -> tuple[int, int]:
        """(row, col) of PU `pu`; PUs are numbered row-major, so bank i belongs to PU i."""
        if not 0 <= pu < self.num_pus:
            raise IndexError(f"PU {pu} out of range for {self.name} ({self.num_pus} PUs)")
        return divmod(pu, self.mesh_cols)

    def hops(self, src_pu: int, dst_pu: int) -> int:
        """Mesh hops between two PUs under XY routing (Manhattan distance)."""
        (r0, c0), (r1, c1) = self.pu_coords(src_pu), self.pu_coords(dst_pu)
        return abs(r0 - r1) + abs(c0 - c1)

    # ------------------------------------------------------------------------------- rates/time

    @property
    def clock_hz(self) -> float:
        return self.clock_ghz * 1e9

    def cycles_to_seconds(self, cycles: float) -> float:
        return cycles / self.clock_hz

    def seconds_to_cycles(self, seconds: float) -> float:
        return seconds * self.clock_hz

    def peak_macs_per_cycle(self, dtype: Any = "fp16") -> float:
        """Matrix-unit MACs per cycle of one PU for `dtype` (str, torch or triton dtype)."""
        key = canonical_dtype(dtype)
        return float(getattr(self, f"matrix_{key}_macs_per_cycle"))

    def peak_flops(self, dtype: Any = "fp16") -> float:
        """Whole-machine peak FLOP/s (1 MAC = 2 FLOP; for int8 read OP/s)."""
        return 2.0 * self.peak_macs_per_cycle(dtype) * self.num_pus * self.clock_hz

    @property
    def local_bytes_per_second(self) -> float:
        """Aggregate bank bandwidth when every PU streams from its own bank."""
        return self.bank_bytes_per_cycle * self.num_pus * self.clock_hz

    @property
    def remote_bytes_per_second(self) -> float:
        """Aggregate rate of reads from other PUs' banks: each PU is capped at
        `noc.remote_read_bytes_per_cycle`. NoC link contention can only lower it; modelling that is
        the simulator's job, this is the optimistic bound."""
        return self.remote_read_bytes_per_cycle * self.num_pus * self.clock_hz

    def ridge_point(self, dtype: Any = "fp16", remote: bool = False) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound.

        = peak FLOP/s / aggregate bandwidth; for nmp-64 fp16: 2*128 / 16 = 16 (local) and
        2*128 / 4 = 64 (remote). Per-PU and whole-machine ratios agree because both scale by PUs.
        """
        bandwidth = self.remote_bytes_per_second if remote else self.local_bytes_per_second
        return self.peak_flops(dtype) / bandwidth

    def roofline_seconds(
        self, flops: float, bytes_local: float, bytes_remote: float = 0.0, dtype: Any = "fp16"
    ) -> float:
        """Lower bound on a kernel's run time on the whole machine:

            max(flops / peak_flops(dtype),
                bytes_local / local_bytes_per_second,
                bytes_remote / remote_bytes_per_second)

        It assumes perfect overlap of compute and DMA and perfect balance over PUs, and excludes
        `launch_overhead_us` and DMA setup costs, so simulated times must never be below it; the gap
        between the two is what tuning can win back.
        """
        return max(
            flops / self.peak_flops(dtype),
            bytes_local / self.local_bytes_per_second,
            bytes_remote / self.remote_bytes_per_second,
        )

    @classmethod
    def schema(cls) -> tuple[FieldInfo, ...]:
        """Field descriptions (attribute, TOML path, kind, unit, constraint) for tools and docs."""
        return _SCHEMA


# ------------------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class FieldInfo:
    """One TargetSpec field as it appears in TOML."""

    attr: str
    path: str
    kind: type
    unit: str
    check: str
    doc: str
    optional: bool = False
    inherit: str = ""  # optional field whose default is another field's value
    default: Any = None

    def expectation(self) -> str:
        kind = {int: "an integer", float: "a number", str: "a string"}[self.kind]
        text = {
            _POSITIVE: f"{kind} > 0",
            _NONNEGATIVE: f"{kind} >= 0",
            _POW2: "a power of two (integer > 0)",
            _NAME: "a non-empty string",
            _FRACTION: f"{kind} between 0 and 1",
        }[self.check]
        return f"{text} ({self.unit})" if self.unit else text


_KINDS = {"int": int, "float": float, "str": str}
_SCHEMA: tuple[FieldInfo, ...] = tuple(
    FieldInfo(
        f.name, f.metadata["toml"], _KINDS[str(f.type)], f.metadata["unit"], f.metadata["check"], f.metadata["doc"],
        f.metadata["optional"], f.metadata["inherit"], f.default,
    )
    for f in fields(TargetSpec)
    if "toml" in f.metadata
)
_BY_PATH = {info.path: info for info in _SCHEMA}
_SECTIONS = tuple(dict.fromkeys(info.path.split(".")[0] for info in _SCHEMA if "." in info.path))
_TOP_LEVEL = {info.path for info in _SCHEMA if "." not in info.path}


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "float", str: "string", dict: "table", list: "array"}.get(
        type(value), type(value).__name__
    )


def _check_value(info: FieldInfo, value: Any) -> tuple[Any, str | None]:
    """(normalized value, problem or None). Booleans are never numbers, and NaN/inf are rejected.

    Problems quote the value as written, not as normalized, so the user finds it in the file.
    """
    if info.kind is str:
        if not isinstance(value, str):
            return value, f"has type {_toml_type(value)} (value {value!r})"
        if not value.strip():
            return value, "is empty"
        return value, None
    ok_types: tuple[type, ...] = (int,) if info.kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        return value, f"has type {_toml_type(value)} (value {value!r})"
    number = float(value) if info.kind is float else value
    if not math.isfinite(number):
        return number, f"is {value!r}"
    if info.check == _NONNEGATIVE and number < 0:
        return number, f"is {value!r}"
    if info.check in (_POSITIVE, _POW2) and number <= 0:
        return number, f"is {value!r}"
    if info.check == _POW2 and number & (number - 1):
        return number, f"is {value!r}, not a power of two"
    if info.check == _FRACTION and not 0 <= number <= 1:
        return number, f"is {value!r}"
    return number, None


def _check_fit_ranges(spec: TargetSpec, ranges: Any, source: str) -> tuple[tuple[str, float, float], ...]:
    """Validate calibration ranges: known numeric fields, low <= high, the spec's value inside."""
    out, problems = [], []
    for entry in ranges:
        try:
            path, lo, hi = entry
            lo, hi = float(lo), float(hi)
        except (TypeError, ValueError):
            problems.append(f"fit: entry {entry!r} is not (field path, low, high)")
            continue
        info = _BY_PATH.get(path)
        if info is None or info.kind is str:
            problems.append(_unknown(f"fit.{path}", [p for p, i in _BY_PATH.items() if i.kind is not str]))
            continue
        value = getattr(spec, info.attr)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            problems.append(f"fit.{path}: range [{lo}, {hi}] is empty or not finite; expected [low, high]")
        elif not lo <= value <= hi:
            problems.append(f"fit.{path}: the value {value!r} of {path} lies outside its range [{lo}, {hi}]")
        else:
            out.append((path, lo, hi))
    if problems:
        _raise(source, problems)
    return tuple(out)


def _cross_check(values: dict[str, Any]) -> list[str]:
    """Constraints between fields (only run when every field is individually valid)."""
    problems = []
    granule, largest = values["dma_granule_bytes"], values["dma_max_descriptor_bytes"]
    if largest % granule:
        problems.append(
            f"dma.max_descriptor_bytes: is {largest}, not a multiple of dma.granule_bytes ({granule}); "
            f"expected a multiple of the granule"
        )
    return problems


def _raise(source: str, problems: list[str]) -> None:
    lines = "\n  ".join(problems)
    raise NMPTargetError(f"invalid target {source}:\n  {lines}")


def _validate(values: dict[str, Any], source: str) -> dict[str, Any]:
    """Check flat attribute values; return them normalized or raise one error listing every problem."""
    problems, out = [], {}
    for info in _SCHEMA:
        value, problem = _check_value(info, values[info.attr])
        out[info.attr] = value
        if problem:
            problems.append(f"{info.path}: {problem}; expected {info.expectation()}")
    if not problems:
        problems = _cross_check(out)
    if problems:
        _raise(source, problems)
    return out


def _unknown(path: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(path, candidates, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{path}: unknown field{hint}; expected only the fields {', '.join(sorted(candidates))}"


def _from_document(document: dict[str, Any], source: str) -> dict[str, Any]:
    """Flat constructor kwargs from a parsed TOML document, reporting missing/unknown/mistyped fields."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    all_paths = list(_BY_PATH)
    for key, value in document.items():
        if key in _TOP_LEVEL or key == "fit":
            continue
        if key not in _SECTIONS:
            problems.append(_unknown(key, all_paths + list(_SECTIONS)))
        elif not isinstance(value, dict):
            problems.append(f"{key}: has type {_toml_type(value)}; expected a table [{key}]")
        else:
            for sub in value:
                if f"{key}.{sub}" not in _BY_PATH:
                    problems.append(_unknown(f"{key}.{sub}", [p for p in all_paths if p.startswith(key + ".")]))
    for info in _SCHEMA:
        section, _, key = info.path.rpartition(".")
        table = document.get(section, {}) if section else document
        if not isinstance(table, dict):
            continue  # already reported: the section is not a table
        if key not in table:
            if not info.optional:
                problems.append(f"{info.path}: missing; expected {info.expectation()}")
            continue
        value, problem = _check_value(info, table[key])
        if problem:
            problems.append(f"{info.path}: {problem}; expected {info.expectation()}")
        values[info.attr] = value
    for info in _SCHEMA:  # optional fields left out: their neutral default
        if info.attr not in values and info.optional and not problems:
            values[info.attr] = values[info.inherit] if info.inherit else info.default
    if not problems:
        problems = _cross_check(values)
    fit = document.get("fit", {})
    if not isinstance(fit, dict):
        problems.append(f"fit: has type {_toml_type(fit)}; expected a table [fit] of field = [low, high]")
    else:
        ranges = []
        for path, bounds in fit.items():
            if not (isinstance(bounds, list) and len(bounds) == 2
                    and all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)):
                problems.append(f"fit.{path}: is {bounds!r}; expected [low, high] (two numbers)")
            else:
                ranges.append((path, bounds[0], bounds[1]))
        values["fit_ranges"] = tuple(ranges)
    if problems:
        _raise(source, problems)
    return values


# ------------------------------------------------------------------------------------ loading

_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _looks_like_path(text: str) -> bool:
    return text.endswith(".toml") or "/" in text or os.sep in text or (os.altsep is not None and os.altsep in text)


def available_presets() -> list[str]:
    """Names of the bundled presets (TOML files in triton_nmp/targets/)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


@cache
def _load_preset(name: str) -> TargetSpec:
    path = PRESET_DIR / f"{name}.toml"
    if not _PRESET_NAME.match(name) or not path.is_file():
        raise NMPTargetError(
            f"unknown target preset '{name}'; expected one of {', '.join(available_presets())} "
            f"or a path to a .toml file"
        )
    return _parse_file(path, f"preset '{name}' ({path})")


_file_cache: dict[Path, tuple[tuple[int, int], TargetSpec]] = {}
_file_cache_lock = threading.Lock()


def _load_file(path: Path) -> TargetSpec:
    try:
        stat = path.stat()
    except FileNotFoundError:
        hint = f" (for the bundled preset, pass its name: '{path.stem}')" if path.stem in available_presets() else ""
        raise NMPTargetError(f"target file '{path}' does not exist; expected a TOML target description{hint}") from None
    except OSError as exc:
        raise NMPTargetError(f"cannot read target file '{path}': {exc}") from None
    key, stamp = path.resolve(), (stat.st_mtime_ns, stat.st_size)
    with _file_cache_lock:
        hit = _file_cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    spec = _parse_file(path, f"file '{path}'")
    with _file_cache_lock:
        _file_cache[key] = (stamp, spec)
    return spec


def _parse_file(path: Path, source: str) -> TargetSpec:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NMPTargetError(f"target {source} is not UTF-8 text: {exc}") from None
    except IsADirectoryError:
        raise NMPTargetError(f"target {source} is a directory; expected a TOML file") from None
    except OSError as exc:
        raise NMPTargetError(f"cannot read target {source}: {exc}") from None
    return TargetSpec.from_toml(text, source)


# ------------------------------------------------------------------------------------- dtypes

_DTYPE_ALIASES = {
    "fp16": "fp16", "float16": "fp16", "f16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp32": "fp32", "float32": "fp32", "f32": "fp32", "float": "fp32", "tf32": "fp32",
    "int8": "int8", "i8": "int8", "uint8": "int8", "u8": "int8",
}  # fmt: skip


def canonical_dtype(dtype: Any) -> str:
    """'fp16' | 'bf16' | 'fp32' | 'int8' for a string, torch dtype or triton dtype.

    Accepting framework dtypes here saves every caller its own mapping table.
    """
    text = str(dtype).strip().lower()
    for prefix in ("torch.", "triton.language.", "tl."):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    try:
        return _DTYPE_ALIASES[text]
    except KeyError:
        raise NMPTargetError(
            f"dtype {dtype!r} has no matrix-unit rate; expected one of {', '.join(DTYPES)} (or an alias such as "
            f"float16, bfloat16, float32, int8, torch.float16, tl.float16)"
        ) from None


# ------------------------------------------------------------------------------ active target

_active: TargetSpec | None = None
_active_lock = threading.Lock()


def active_target() -> TargetSpec:
    """The target compiled and simulated for. On first use: $TRITON_NMP_TARGET (preset name or TOML
    path) if set, else `nmp-64`."""
    global _active
    spec = _active
    if spec is not None:
        return spec
    with _active_lock:
        if _active is None:
            choice = os.environ.get(ENV_VAR, "").strip()
            try:
                _active = TargetSpec.load(choice or DEFAULT_TARGET)
            except NMPTargetError as exc:
                if not choice:
                    raise
                raise NMPTargetError(f"{exc}\n(target selected by ${ENV_VAR}={choice!r})") from None
        return _active


def set_active_target(spec: TargetSpec | str | os.PathLike[str] | None) -> TargetSpec | None:
    """Make `spec` (a TargetSpec, preset name or TOML path) active; return the previous one so callers
    (tests, `activate()`) can restore it. `None` resets, so $TRITON_NMP_TARGET is read again."""
    global _active
    new = spec if spec is None or isinstance(spec, TargetSpec) else TargetSpec.load(spec)
    with _active_lock:
        previous, _active = _active, new
    return previous


# ------------------------------------------------------------------------- compile target <-> spec

_by_arch: dict[str, TargetSpec] = {}


def target_arch(spec: TargetSpec) -> str:
    """The GPUTarget arch string of a spec: "<name>:<first 16 hex digits of its hash>".

    The hash is part of the arch so Triton's cache keys change whenever the machine description does.
    The spec is remembered, so a compile for this arch finds it again (`spec_for_arch`)."""
    arch = f"{spec.name}:{spec.hash()[:16]}"
    _by_arch[arch] = spec
    return arch


def compiled_target(metadata: Any) -> TargetSpec | None:
    """The machine a compiled kernel was compiled for, from its metadata (the options' `arch`, else the
    GPUTarget's), or None when the metadata names none (launchers built by tools from bare metadata).

    A launch simulates on this spec, not on the active target: the kernel's code, scratchpad plan and
    DMA descriptors are that machine's. Through the @jit function the two agree (switching targets
    changes Triton's device, so the kernel is compiled again); they differ only for a compiled kernel
    kept and launched after `activate(target=...)`."""
    from triton_nmp.abi import metadata_value

    target = metadata_value(metadata, "target")
    arch = metadata_value(metadata, "arch", None) or getattr(target, "arch", None)
    if not arch and isinstance(target, dict):
        arch = target.get("arch")
    return spec_for_arch(str(arch)) if arch else None


def spec_for_arch(arch: str) -> TargetSpec:
    """The spec a compile target names: one seen by `target_arch` (every target the driver reports),
    else the active target or the preset of that name if its hash matches. The compiler takes the
    machine from its options' `arch` this way, never from the active target, so a compile for another
    spec (the legality query's `spec=`) plans for that spec's scratchpad."""
    spec = _by_arch.get(arch)
    if spec is not None:
        return spec
    name = arch.partition(":")[0]
    candidates = [active_target()]
    if _PRESET_NAME.match(name) and (PRESET_DIR / f"{name}.toml").is_file():
        candidates.append(_load_preset(name))
    for spec in candidates:
        if target_arch(spec) == arch:
            return spec
    raise NMPTargetError(
        f"no nmp target matches the compile target's arch '{arch}' (expected '<name>:<hash>' of a loaded "
        f"target); compile for `triton.runtime.driver.active.get_current_target()` or load the target first"
    )
