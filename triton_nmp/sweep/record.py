"""A sweep recorded from a run: every autotuned kernel launch, with its argument shapes and dtypes.

    with record() as rec:
        model(x)                       # torch.compile(backend="nmp") models, scripts with triton.autotune ...
    rec.sweep().save("model-sweep.json")
    # triton-nmp tune model-sweep.json --engine pool --targets nmp-64,tensix-like

While recording, the first launch of every (autotuner, tuning key) is noted: the kernel (its module, or its
file for a script), each tensor argument's shape and dtype, the scalar arguments, the autotuner's configs
and key, and each config's launch grid. Tensors are recorded by shape and dtype only (the sweep makes
seeded data of that shape: a kernel whose timing depends on the data, e.g. a loop bound it loads, should
be swept from a file with the right `init`), contiguous, with their layouts left to the default policy
(add `placements` to the file to sweep layouts). Launches of kernels the workers could not import
(defined inside a function) are skipped and counted in `skipped`.

`record_script(path, argv)` runs a Python script under the recorder (`triton-nmp tune --record`).
"""

from __future__ import annotations

import contextlib
import runpy
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .spec import KernelCase, KernelRef, NMPSweepError, Sweep, TensorSpec

__all__ = ["Recorder", "record", "record_script"]


@dataclass
class Recorder:
    cases: list[KernelCase] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    _seen: set = field(default_factory=set)

    def note(self, tuner: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        """Record the launch `tuner.run(*args, **kwargs)` (once per tuner and tuning key)."""
        import torch

        from triton_nmp.tuning.configs import config_record
        from triton_nmp.tuning.context import LAUNCH_KWARGS, kernel_meta, resolve_grid, unwrap_jit

        named = dict(zip(tuner.arg_names, args))
        every = {**named, **{k: v for k, v in kwargs.items() if k not in LAUNCH_KWARGS}}
        key = tuple(repr(every.get(k)) for k in tuner.keys) + tuple(
            (k, tuple(v.shape), str(v.dtype)) for k, v in every.items() if isinstance(v, torch.Tensor))
        if (id(tuner), key) in self._seen or len(tuner.configs) < 2:
            return
        self._seen.add((id(tuner), key))
        name = unwrap_jit(tuner.fn).__name__
        try:
            ref = KernelRef.of(tuner)
            grids = [tuple(resolve_grid(kwargs.get("grid"), kernel_meta(tuner.fn, named, kwargs, c)))
                     for c in tuner.configs]
        except (NMPSweepError, ValueError, TypeError) as exc:
            self.skipped.append(f"{name}: {exc}")
            return
        recorded = {k: TensorSpec.of(v) if isinstance(v, torch.Tensor) else v for k, v in every.items()
                    if isinstance(v, (torch.Tensor, bool, int, float)) or v is None}
        n = sum(1 for c in self.cases if c.kernel == ref)
        self.cases.append(KernelCase(f"{name}-{n}" if n else name, ref, recorded,
                                     [config_record(c) for c in tuner.configs], list(tuner.keys), None,
                                     grids, 0, tuner))

    def sweep(self) -> Sweep:
        if not self.cases:
            raise NMPSweepError("the run launched no autotuned kernel with more than one config: nothing to sweep"
                                + (f" (skipped: {'; '.join(self.skipped)})" if self.skipped else ""))
        return Sweep(list(self.cases), source="<recorded>")


@contextlib.contextmanager
def record() -> Iterator[Recorder]:
    """Record autotuned launches inside the block (see the module docstring)."""
    from triton.runtime.autotuner import Autotuner

    rec = Recorder()
    original = Autotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec.note(self, args, kwargs)
        return original(self, *args, **kwargs)

    Autotuner.run = run  # subclasses (NMPAutotuner) call it through super().run
    try:
        yield rec
    finally:
        Autotuner.run = original


def record_script(path: Path, argv: list[str]) -> Sweep:
    """Run the script at `path` with `argv` as `__main__` under `record()`; its recorded sweep."""
    if not path.is_file():
        raise NMPSweepError(f"script {path} does not exist")
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        with record() as rec:
            try:
                runpy.run_path(str(path), run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (0, None):
                    raise NMPSweepError(f"{path} exited with status {exc.code}") from None
    finally:
        sys.argv = saved
    return rec.sweep()
