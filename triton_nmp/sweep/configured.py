"""Which sweep engine runs candidates: one built from the command line's or the environment's words
(`engine_from_options`, `parse_engine_word`), and the one configured for the process (`set_engine`,
`$TRITON_NMP_SWEEP_ENGINE`) that autotuners and Inductor send their benchmarks to (`configured_engine`).
"""

from __future__ import annotations

import os

from .engine import DEFAULT_RETRIES, Engine, InProcessEngine
from .spec import NMPSweepError

__all__ = ["ENV_VAR", "configured_engine", "engine_from_options", "parse_engine_word", "set_engine"]

ENV_VAR = "TRITON_NMP_SWEEP_ENGINE"


def engine_from_options(engine: str | None = None, workers: int | None = None, ray: str | None = None,
                        retries: int = DEFAULT_RETRIES) -> Engine:
    """An engine from `triton-nmp tune`'s options: `engine` "in-process" (default), "pool" or "ray";
    `ray` ("auto" or a cluster address) implies "ray"; `workers` defaults to the CPU count."""
    if ray is not None:
        if engine not in (None, "ray"):
            raise NMPSweepError(f"--ray {ray} runs on Ray: it cannot be combined with --engine {engine}")
        engine = "ray"
    engine = engine or "in-process"
    if workers is not None and workers < 1:
        raise NMPSweepError(f"--workers must be at least 1, not {workers}")
    if engine in ("in-process", "inprocess", "local"):
        return InProcessEngine(retries)
    if engine == "pool":
        from .pool import ProcessPoolEngine

        return ProcessPoolEngine(workers or os.cpu_count() or 1, retries=retries)
    if engine == "ray":
        from .ray_engine import RayEngine

        return RayEngine(ray or "auto", workers, retries=retries)
    raise NMPSweepError(f"unknown sweep engine {engine!r}: choose in-process, pool or ray")


def parse_engine_word(text: str) -> Engine:
    """An engine from `$TRITON_NMP_SWEEP_ENGINE`: "pool", "pool:<workers>", "ray" / "ray:auto" (an embedded
    local cluster), "ray:<address>" (join a cluster), "in-process"."""
    kind, _, rest = text.strip().partition(":")
    if kind == "pool":
        try:
            return engine_from_options("pool", int(rest) if rest else None)
        except ValueError:
            raise NMPSweepError(f"{ENV_VAR}={text!r}: expected pool or pool:<workers>") from None
    if kind == "ray":
        return engine_from_options("ray", ray=rest or "auto")
    return engine_from_options(kind)


_configured: Engine | None = None


def set_engine(engine: Engine | str | None) -> Engine | None:
    """Configure the engine that autotuners and Inductor send candidate benchmarks to (None: in process);
    returns the previous one (not closed). A string is parsed like `$TRITON_NMP_SWEEP_ENGINE`."""
    global _configured
    previous = _configured
    _configured = parse_engine_word(engine) if isinstance(engine, str) else engine
    if isinstance(_configured, InProcessEngine):
        _configured = None
    return previous


def configured_engine() -> Engine | None:
    """The engine set by `set_engine`, else one built (once) from `$TRITON_NMP_SWEEP_ENGINE`, else None."""
    global _configured
    if _configured is None:
        word = os.environ.get(ENV_VAR, "").strip()
        if word and word not in ("in-process", "inprocess", "0", "none"):
            _configured = parse_engine_word(word)
    return _configured
