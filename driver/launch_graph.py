"""Launch graphs: a model step whose kernels the host submits once, as CUDA graphs and tt-metal traces do.

Without a graph, every kernel launch costs the host `TargetSpec.launch_overhead_us` (5 us on nmp-64). A
decode step of a small LLM is a long chain of short kernels (GPT-2 small: 146 launches of 5-30 us), so the
host, not the machine, sets its pace. `torch.compile(model, backend="nmp", mode="reduce-overhead")` wraps
each compiled graph in a `LaunchGraph`:

- the first call per input signature (shapes, dtypes, strides, non-tensor values) *warms up* (it may
  autotune: Inductor benchmarks configs on a kernel's first call, which adds launches) and the second
  *captures*, as CUDA graph trees do: their launches are ordinary host launches, and the second call's
  sequence (kernel, grid) is recorded;
- every later call with that signature *replays*: the first kernel pays the host launch overhead (the
  host submits the graph) and each further kernel only `TargetSpec.launch_graph_dispatch_us`, the
  device-side dispatch of the next kernel of a submitted graph (nmp-64: 1 us, see its TOML);
- a replay whose launches stop matching the capture (a different kernel or grid at some position) is no
  replay from there on: those launches are charged as host launches and `LaunchGraph.diverged` counts it;
- a graph that computes on the host (an ATen fallback) cannot be captured: `LaunchGraph(host_ops=...)`
  never replays, and `reason` says why.

Only the charge differs: every kernel still executes natively with its real arguments, so results are
exactly those of ordinary launches. Inputs are not copied into static buffers as CUDA graph trees do
(a decode step's token id and position are a few bytes, not charged). Launches outside any graph, and in
other threads, are unaffected (the active graph is a context variable).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LaunchGraph", "dispatch", "signature"]


@dataclass
class _Call:
    """One call of a graph in progress: capturing (`expected` is None) or replaying `expected`."""

    expected: tuple[Hashable, ...] | None
    seen: list[Hashable] = field(default_factory=list)
    matching: bool = True


@dataclass
class LaunchGraph:
    """The captured launch sequences of one compiled graph, per input signature."""

    name: str = "graph"
    host_ops: tuple[str, ...] = ()  # host computations in the graph: it is never captured
    captured: dict[Hashable, tuple[Hashable, ...]] = field(default_factory=dict)
    warmed: set[Hashable] = field(default_factory=set)
    replays: int = 0
    diverged: int = 0

    @property
    def reason(self) -> str:
        """Why the graph does not replay ("" when it can)."""
        if self.host_ops:
            return f"not captured: it computes on the host ({', '.join(sorted(set(self.host_ops)))})"
        return ""

    @contextlib.contextmanager
    def call(self, sig: Hashable) -> Iterator[None]:
        """Run one call of the graph: capture it, or replay the sequence captured for `sig`."""
        if self.host_ops or sig not in self.warmed:
            self.warmed.add(sig)
            yield
            return
        expected = self.captured.get(sig)
        state = _Call(expected)
        token = _ACTIVE.set(state)
        try:
            yield
        finally:
            _ACTIVE.reset(token)
        if expected is None:
            self.captured[sig] = tuple(state.seen)
        else:
            self.replays += 1
            if not state.matching or len(state.seen) != len(expected):
                self.diverged += 1

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` with every call run through `call(signature(args))`."""

        def run(*args: Any, **kwargs: Any) -> Any:
            with self.call(signature(args, kwargs)):
                return fn(*args, **kwargs)

        run.__wrapped__ = fn  # type: ignore[attr-defined]
        run.launch_graph = self  # type: ignore[attr-defined]
        return run


_ACTIVE: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("nmp_launch_graph", default=None)


def dispatch(kernel: str, grid: tuple[int, int, int]) -> bool:
    """Called by the launcher for each launch: True when it is dispatched from a replayed graph (charged
    the device dispatch cost), False when the host launches it (outside graphs, while capturing, the
    first kernel of a replay, and every launch after a replay stopped matching its capture)."""
    state = _ACTIVE.get()
    if state is None:
        return False
    i = len(state.seen)
    key = (kernel, tuple(grid))
    state.seen.append(key)
    if state.expected is None:
        return False
    if state.matching and (i >= len(state.expected) or state.expected[i] != key):
        state.matching = False
    return state.matching and i > 0


def signature(args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Hashable:
    """What a capture is valid for: per tensor its shape, stride and dtype; other values as they are."""

    def one(x: Any) -> Hashable:
        shape = getattr(x, "shape", None)
        if shape is not None and hasattr(x, "stride") and hasattr(x, "dtype"):
            return ("tensor", tuple(shape), tuple(x.stride()), str(x.dtype))
        if isinstance(x, (list, tuple)):
            return tuple(one(v) for v in x)
        try:
            hash(x)
        except TypeError:
            return ("unhashable", type(x).__name__)
        return x

    return (tuple(one(a) for a in args), tuple(sorted((k, one(v)) for k, v in (kwargs or {}).items())))
