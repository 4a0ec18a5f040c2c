"""A sweep described as data: kernels with their arguments, config spaces, targets and placements.

A sweep file (TOML or JSON) reads:

    targets = ["nmp-64", "upmem-like"]        # preset names or TOML paths (default: the active target)
    placements = ["interleaved", "blocked"]   # per sweep: one policy for every tensor, or a table
                                              # {arg = policy}; "bank:3" for one bank (default: as launched)
    [[kernel]]
    name = "gemm"                                    # a label (default: the kernel's name)
    kernel = "triton_nmp.examples:matmul_kernel"     # module:attr or path/to/file.py:attr
    grid = "(cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),)"  # a Python expression of the kernel's parameters
    key = ["M", "N", "K"]                            # the autotuner's key (default: the kernel's autotuner's)
    args = {a_ptr = {shape = [64, 256], dtype = "float16"}, M = 64, stride_am = "a_ptr.stride(0)", ...}
    space = {tiles = {BLOCK_M = [16, 32]}, num_stages = [1, 2], pu_mapping = ["round_robin"]}
                                                     # `triton_nmp.config_space` arguments, or
    configs = [{kwargs = {BLOCK_M = 16}, num_stages = 2}]   # explicit configs (default: the autotuner's)

Tensor arguments are made from a seeded generator (`init`: randn (default for floats), rand, randint
with `low`/`high` (default for integers), zeros, ones), so every worker builds the same bytes. A string
argument is an expression of the other arguments (`"a_ptr.stride(0)"`). When `kernel` names a
`triton.autotune`/`triton_nmp.autotune` object, its configs and key are the defaults, and the entries the
sweep stores are the ones that autotuner looks up: a later launch with the same shapes simulates nothing.

Expressions are evaluated without builtins (only `cdiv`, `min`, `max` and the arguments), and the kernel
module is imported: run sweep files you trust, as you would run a script.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton

from triton_nmp.errors import NMPError

__all__ = ["NMPSweepError", "KernelRef", "TensorSpec", "PlacementSpec", "KernelCase", "Sweep", "evaluate"]


class NMPSweepError(NMPError):
    """A sweep that cannot run as described: the message names the file, the kernel and the field."""


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any, n: int = 24) -> str:
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()[:n]


_SAFE_NAMES = {"cdiv": triton.cdiv, "min": min, "max": max, "abs": abs, "len": len, "int": int}


def evaluate(expr: str, names: dict[str, Any], where: str) -> Any:
    """Evaluate a sweep-file expression over `names` with no builtins but `_SAFE_NAMES`."""
    try:
        return eval(compile(expr, where, "eval"), {"__builtins__": {}, **_SAFE_NAMES}, dict(names))  # noqa: S307
    except Exception as exc:
        raise NMPSweepError(f"{where}: cannot evaluate {expr!r}: {type(exc).__name__}: {exc}") from None


# ------------------------------------------------------------------------------------------- kernels


@dataclass(frozen=True)
class KernelRef:
    """Where a kernel lives: an importable module, or a Python file (for scripts), and the attribute."""

    attr: str
    module: str | None = None
    path: str | None = None

    @classmethod
    def parse(cls, text: str, base: Path | None = None) -> KernelRef:
        mod, sep, attr = str(text).rpartition(":")
        if not sep or not mod or not attr:
            raise NMPSweepError(f"kernel {text!r}: expected 'package.module:name' or 'path/to/file.py:name'")
        if mod.endswith(".py") or "/" in mod or "\\" in mod:
            p = Path(mod).expanduser()
            if not p.is_absolute() and base is not None:
                p = base / p
            return cls(attr, path=str(p.resolve()))
        return cls(attr, module=mod)

    @classmethod
    def of(cls, fn: Any) -> KernelRef:
        """The reference of a live kernel (its Python function's module, or its file for `__main__`)."""
        from triton_nmp.tuning.context import unwrap_jit

        py = unwrap_jit(fn).fn
        name = py.__qualname__
        if "<locals>" in name:
            raise NMPSweepError(f"kernel '{py.__name__}' is defined inside a function: workers cannot import it; "
                                f"define it at module level")
        module = py.__module__
        if module == "__main__" or module.startswith("_sweep_file_"):
            return cls(name, path=str(Path(py.__code__.co_filename).resolve()))
        return cls(name, module=module)

    def label(self) -> str:
        return f"{self.module or self.path}:{self.attr}"

    def load(self) -> Any:
        """The object (a JITFunction, or an autotune/heuristics wrapper of one)."""
        if self.module is not None:
            try:
                mod = importlib.import_module(self.module)
            except ImportError as exc:
                raise NMPSweepError(f"kernel {self.label()}: cannot import {self.module} ({exc}); "
                                    f"put it on PYTHONPATH") from None
        else:
            mod = _load_file(Path(self.path))
        obj: Any = mod
        for part in self.attr.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise NMPSweepError(f"kernel {self.label()}: '{self.attr}' not found in {mod.__name__}")
        from triton_nmp.tuning.context import unwrap_jit

        try:
            unwrap_jit(obj)
        except TypeError:
            raise NMPSweepError(f"kernel {self.label()} is a {type(obj).__name__}, not a @triton.jit kernel "
                                f"(or an autotune/heuristics wrapper of one)") from None
        return obj


def _load_file(path: Path) -> Any:
    name = "_sweep_file_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None) and Path(main.__file__).resolve() == path:
        return main  # the running script itself: its kernels are already defined
    if not path.is_file():
        raise NMPSweepError(f"kernel file {path} does not exist")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception:
        del sys.modules[name]
        raise
    return mod


# ----------------------------------------------------------------------------------------- arguments

_DTYPES = {name: getattr(torch, name) for name in (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
    "float8_e5m2", "float8_e4m3fn")}
_DTYPES.update({"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
                "half": torch.float16, "float": torch.float32, "double": torch.float64})
_INITS = ("randn", "rand", "randint", "zeros", "ones")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument by shape and dtype, filled deterministically from the case's seed."""

    shape: tuple[int, ...]
    dtype: str
    init: str = ""
    low: int = 0
    high: int = 16

    @classmethod
    def parse(cls, data: dict[str, Any], where: str) -> TensorSpec:
        unknown = set(data) - {"shape", "dtype", "init", "low", "high"}
        if unknown:
            raise NMPSweepError(f"{where}: unknown field(s) {sorted(unknown)} (tensor fields: shape, dtype, init, "
                                f"low, high)")
        shape = data.get("shape")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise NMPSweepError(f"{where}: shape must be a list of non-negative integers, not {shape!r}")
        dtype = str(data.get("dtype", "float32")).removeprefix("torch.")
        if dtype not in _DTYPES:
            raise NMPSweepError(f"{where}: unknown dtype {dtype!r} (one of {', '.join(sorted(_DTYPES))})")
        init = str(data.get("init", ""))
        if init and init not in _INITS:
            raise NMPSweepError(f"{where}: unknown init {init!r} (one of {', '.join(_INITS)})")
        return cls(tuple(shape), dtype, init, int(data.get("low", 0)), int(data.get("high", 16)))

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorSpec:
        return cls(tuple(t.shape), str(t.dtype).removeprefix("torch."))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.init:
            d["init"] = self.init
        if self.init == "randint":
            d.update(low=self.low, high=self.high)
        return d

    def make(self, gen: torch.Generator) -> torch.Tensor:
        dtype = _DTYPES[self.dtype]
        init = self.init or ("randn" if dtype.is_floating_point else "randint")
        if init == "zeros":
            return torch.zeros(self.shape, dtype=dtype)
        if init == "ones":
            return torch.ones(self.shape, dtype=dtype)
        if init == "randint" or not dtype.is_floating_point:
            high = 2 if dtype == torch.bool else self.high
            return torch.randint(self.low, high, self.shape, generator=gen).to(dtype)
        base = torch.rand if init == "rand" else torch.randn
        return base(self.shape, generator=gen, dtype=torch.float32).to(dtype)


@dataclass(frozen=True)
class Expr:
    """A scalar argument computed from the others (`"a_ptr.stride(0)"`)."""

    text: str


def _parse_arg(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return TensorSpec.parse(value, where)
    if isinstance(value, str):
        return Expr(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise NMPSweepError(f"{where}: an argument is a tensor table, a number, a boolean or an expression string, "
                        f"not {type(value).__name__}")


def _arg_json(value: Any) -> Any:
    if isinstance(value, TensorSpec):
        return value.to_json()
    if isinstance(value, torch.Tensor):  # a live launch's tensor (shipped by value, see `integrate`)
        return {"tensor": list(value.shape), "stride": list(value.stride()), "dtype": str(value.dtype)}
    if isinstance(value, Expr):
        return value.text
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


# ---------------------------------------------------------------------------------------- placements


@dataclass(frozen=True)
class PlacementSpec:
    """Where a case's tensors live: one policy for all (`default`), and per-argument overrides."""

    default: str | None = None
    per_arg: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, value: Any, where: str) -> PlacementSpec:
        if value is None or value == "":
            return cls()
        if isinstance(value, str):
            cls._check(value, where)
            return cls(value)
        if isinstance(value, dict):
            for v in value.values():
                cls._check(str(v), where)
            rest = {k: str(v) for k, v in value.items() if k != "*"}
            return cls(value.get("*"), tuple(sorted(rest.items())))
        raise NMPSweepError(f"{where}: a placement is a policy string or a table {{argument = policy}}")

    @staticmethod
    def _check(policy: str, where: str) -> None:
        from triton_nmp.placement import POLICIES

        name, _, number = policy.partition(":")
        numbered = name in ("bank", "interleaved") and number.isdigit()
        if name not in POLICIES or (name == "bank" and not numbered) or (number and not numbered):
            names = ", ".join(p for p in POLICIES if p != "bank")
            raise NMPSweepError(f"{where}: unknown placement {policy!r} (one of {names}, interleaved:<granularity "
                                f"bytes>, bank:<n>)")

    def label(self) -> str:
        parts = ([self.default] if self.default else []) + [f"{k}={v}" for k, v in self.per_arg]
        return ",".join(parts) or "as-launched"

    def to_json(self) -> Any:
        if not self.per_arg:
            return self.default
        return {**({"*": self.default} if self.default else {}), **dict(self.per_arg)}

    def policy_for(self, arg: str) -> str | None:
        return dict(self.per_arg).get(arg, self.default)

    def apply(self, named: dict[str, Any]) -> None:
        """Place every tensor of `named` (on the active target)."""
        from triton_nmp.placement import place

        for name, value in named.items():
            policy = self.policy_for(name)
            if policy is None or not isinstance(value, torch.Tensor):
                continue
            kind, _, number = policy.partition(":")
            if kind == "bank":
                place(value, bank=int(number))
            elif number:
                place(value, kind, granularity=int(number))
            else:
                place(value, kind)


# -------------------------------------------------------------------------------------------- cases


def _record_of(config: triton.Config) -> dict[str, Any]:
    from triton_nmp.tuning.configs import config_record

    return config_record(config)


@dataclass
class KernelCase:
    """One kernel at one set of argument shapes, with its config space (as `configs.config_record`s)."""

    name: str
    kernel: KernelRef
    args: dict[str, Any]
    configs: list[dict[str, Any]]
    key: list[str]
    grid: str | None = None
    grids: list[tuple[int, int, int]] | None = None  # per config, when recorded from a live launch
    seed: int = 0
    _fn: Any = field(default=None, repr=False, compare=False)

    def identity(self) -> str:
        """Stable across processes and machines (a task names its case by it)."""
        return digest([self.name, self.kernel.label(), self.json_args(), self.configs, self.key, self.grid,
                       self.grids, self.seed])

    def json_args(self) -> dict[str, Any]:
        return {k: _arg_json(v) for k, v in self.args.items()}

    def fn(self) -> Any:
        if self._fn is None:
            self._fn = self.kernel.load()
        return self._fn

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fn": None}  # workers import the kernel themselves

    def build_args(self) -> dict[str, Any]:
        """Every kernel argument, in the kernel's parameter order (tensors freshly made, expressions evaluated).

        Fresh per candidate: a tensor left to the "auto" placement policy is laid out at its first launch, so
        tensors shared between candidates would give each candidate the layout of whichever ran first."""
        from triton_nmp.tuning.context import unwrap_jit

        jit = unwrap_jit(self.fn())
        gen = torch.Generator().manual_seed(self.seed)
        named: dict[str, Any] = {}
        for name, value in self.args.items():
            if isinstance(value, TensorSpec):
                named[name] = value.make(gen)
            elif isinstance(value, torch.Tensor):  # a copy with the same strides: candidates never share bytes
                named[name] = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype).copy_(value)
            elif not isinstance(value, Expr):
                named[name] = value
        for name, value in self.args.items():
            if isinstance(value, Expr):
                named[name] = evaluate(value.text, named, f"<sweep {self.name}: argument {name}>")
        order = [n for n in jit.arg_names if n in named]
        return {n: named[n] for n in order}

    def triton_configs(self) -> list[triton.Config]:
        from triton_nmp.tuning.configs import config_from_record

        return [config_from_record(r) for r in self.configs]

    def grid_for(self, index: int, named: dict[str, Any]) -> tuple[int, int, int]:
        from triton_nmp.tuning.context import kernel_meta, resolve_grid

        if self.grids is not None:
            return tuple(self.grids[index])  # type: ignore[return-value]
        config = self.triton_configs()[index]
        meta = kernel_meta(self.fn(), named, {}, config)
        where = f"<sweep {self.name}: grid>"
        return resolve_grid(lambda m: evaluate(self.grid, m, where), meta)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kernel": self.kernel.label(), "args": self.json_args(),
                             "key": self.key, "configs": self.configs, "seed": self.seed}
        if self.grid is not None:
            d["grid"] = self.grid
        if self.grids is not None:
            d["grids"] = [list(g) for g in self.grids]
        return d


def _configs_from(data: dict[str, Any], default: list[triton.Config] | None, where: str) -> list[dict[str, Any]]:
    from triton_nmp.tuning.space import config_space

    if "configs" in data and "space" in data:
        raise NMPSweepError(f"{where}: give 'configs' or 'space', not both")
    if "space" in data:
        space = data["space"]
        if not isinstance(space, dict) or "tiles" not in space:
            raise NMPSweepError(f"{where}: space needs 'tiles' (and optionally num_stages, pu_mapping, num_warps)")
        unknown = set(space) - {"tiles", "num_stages", "pu_mapping", "num_warps"}
        if unknown:
            raise NMPSweepError(f"{where}: unknown space field(s) {sorted(unknown)}")
        try:
            return [_record_of(c) for c in config_space(**space)]
        except NMPError as exc:
            raise NMPSweepError(f"{where}: {exc}") from None
    if "configs" in data:
        configs = data["configs"]
        if not isinstance(configs, list) or not configs:
            raise NMPSweepError(f"{where}: configs must be a non-empty list")
        out = []
        for i, c in enumerate(configs):
            if not isinstance(c, dict):
                raise NMPSweepError(f"{where}: configs[{i}] must be a table")
            if "options" in c:  # already a config record (recorded sweeps)
                out.append({"kwargs": dict(c.get("kwargs", {})), "options": dict(c["options"])})
                continue
            opts = {k: v for k, v in c.items() if k != "kwargs"}
            out.append(_record_of(triton.Config(dict(c.get("kwargs", {})), **opts)))
        return out
    if default:
        return [_record_of(c) for c in default]
    raise NMPSweepError(f"{where}: no configs: give 'space' or 'configs', or name a triton.autotune kernel")


def _case_from(data: dict[str, Any], index: int, base: Path | None, source: str) -> KernelCase:
    from triton.runtime.autotuner import Autotuner

    where = f"{source}: kernel[{index}]"
    if not isinstance(data, dict) or "kernel" not in data:
        raise NMPSweepError(f"{where}: each [[kernel]] needs 'kernel = \"module:name\"'")
    unknown = set(data) - {"name", "kernel", "args", "grid", "grids", "key", "space", "configs", "seed"}
    if unknown:
        raise NMPSweepError(f"{where}: unknown field(s) {sorted(unknown)}")
    ref = KernelRef.parse(data["kernel"], base)
    obj = ref.load()
    tuner = obj if isinstance(obj, Autotuner) else None
    name = str(data.get("name") or ref.attr)
    where = f"{source}: kernel '{name}'"
    args = data.get("args", {})
    if not isinstance(args, dict):
        raise NMPSweepError(f"{where}: args must be a table")
    from triton_nmp.tuning.context import unwrap_jit

    params = unwrap_jit(obj).arg_names
    stray = [a for a in args if a not in params]
    if stray:
        raise NMPSweepError(f"{where}: {stray} are not parameters of {ref.attr} ({', '.join(params)})")
    parsed = {k: _parse_arg(v, f"{where}: argument {k}") for k, v in args.items()}
    configs = _configs_from(data, tuner.configs if tuner else None, where)
    key = data.get("key", list(tuner.keys) if tuner else [])
    if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
        raise NMPSweepError(f"{where}: key must be a list of argument names")
    grid = data.get("grid")
    grids = data.get("grids")
    if grid is None and grids is None:
        raise NMPSweepError(f"{where}: no grid: give grid = \"(cdiv(n, BLOCK),)\" (an expression of the parameters)")
    if grids is not None and len(grids) != len(configs):
        raise NMPSweepError(f"{where}: grids has {len(grids)} entries for {len(configs)} configs")
    case = KernelCase(name, ref, parsed, configs, key, str(grid) if grid is not None else None,
                      [tuple(int(x) for x in g) for g in grids] if grids is not None else None,
                      int(data.get("seed", 0)), obj)
    missing = [p.name for p in unwrap_jit(obj).params
               if not p.is_constexpr and not p.has_default and p.name not in args]
    if missing:
        raise NMPSweepError(f"{where}: no value for argument(s) {missing}")
    return case


@dataclass
class Sweep:
    """Kernel cases x targets x placements; every case's configs are the candidates."""

    cases: list[KernelCase]
    targets: list[str] = field(default_factory=list)  # empty: the active target
    placements: list[PlacementSpec] = field(default_factory=lambda: [PlacementSpec()])
    source: str = "<sweep>"

    @classmethod
    def load(cls, path: str | Path) -> Sweep:
        p = Path(path)
        if not p.is_file():
            raise NMPSweepError(f"sweep file {p} does not exist")
        text = p.read_text(encoding="utf-8")
        try:
            data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise NMPSweepError(f"{p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'TOML'}: {exc}") from None
        return cls.from_dict(data, p.parent.resolve(), str(p))

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: Path | None = None, source: str = "<sweep>") -> Sweep:
        unknown = set(data) - {"kernel", "targets", "placements"}
        if unknown:
            raise NMPSweepError(f"{source}: unknown top-level field(s) {sorted(unknown)} (kernel, targets, placements)")
        kernels = data.get("kernel")
        if not isinstance(kernels, list) or not kernels:
            raise NMPSweepError(f"{source}: no [[kernel]] tables")
        targets = data.get("targets", [])
        if isinstance(targets, str):
            targets = [targets]
        resolved = []
        for t in targets:
            p = Path(str(t)).expanduser()
            if str(t).endswith(".toml") and not p.is_absolute() and base is not None:
                p = base / p
            resolved.append(str(p) if str(t).endswith(".toml") else str(t))
        placements = data.get("placements", [None])
        if not isinstance(placements, list) or not placements:
            raise NMPSweepError(f"{source}: placements must be a non-empty list")
        cases = [_case_from(k, i, base, source) for i, k in enumerate(kernels)]
        names = [c.name for c in cases]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise NMPSweepError(f"{source}: kernel names {dup} are used twice: give each [[kernel]] its own name")
        return cls(cases, resolved, [PlacementSpec.parse(v, f"{source}: placements") for v in placements], source)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.targets:
            d["targets"] = list(self.targets)
        if self.placements != [PlacementSpec()]:
            d["placements"] = [p.to_json() for p in self.placements]
        d["kernel"] = [c.to_json() for c in self.cases]
        return d

    def save(self, path: str | Path) -> Path:
        """Write as JSON (a recorded sweep; `triton-nmp tune` reads it back)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return p
