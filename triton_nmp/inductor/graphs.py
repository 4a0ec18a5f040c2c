"""What `torch.compile(backend="nmp")` compiled: graphs, generated code, kernels and host fallbacks.

One `CompiledGraph` per graph Dynamo hands the backend, kept in `compiled_graphs()` (newest last) so later
passes (bank placement, issue #12) and reports can read what runs: `dynamo_graph` (the FX graph of torch ops
Dynamo captured), `aten_graphs` (the functional ATen graphs after AOT autograd that Inductor lowered, one per
forward/backward; empty when AOTAutograd's cache served the graph, which skips tracing), `source_code`
(Inductor's generated Python wrapper: its `call()` launches the Triton kernels in order), `kernels` (Triton
kernel names, as `triton_nmp.profile()` records their launches) and `host_fallbacks` (ATen/extern calls that
run on the host instead of nmp).

The generated code is recorded from Inductor's `CompiledFxGraph.post_compile`, which runs for every
compiled graph whether Inductor generated it now or a cache (FX graph or AOTAutograd) served it, so a warm
process that skips tracing and lowering still knows what runs (`recording`).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HostFallback", "CompiledGraph", "compiled_graphs", "clear", "host_fallbacks_in", "kernels_in", "recording"]


@dataclass(frozen=True)
class HostFallback:
    """One call in the generated wrapper that runs on the host (`extern_kernels.mm`, `aten.sort.default`)."""

    op: str
    line: str


@dataclass
class CompiledGraph:
    dynamo_graph: Any  # torch.fx.GraphModule
    example_inputs: list[Any]
    mode: str
    aten_graphs: list[Any] = field(default_factory=list)
    source_code: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    host_fallbacks: list[HostFallback] = field(default_factory=list)
    compile_seconds: float = 0.0
    launch_graph: Any = None  # driver.launch_graph.LaunchGraph under mode="reduce-overhead" / "max-autotune"

    def add_source(self, source: str) -> None:
        """Record one generated wrapper module: its kernels and host fallbacks."""
        self.source_code.append(source)
        self.kernels.extend(kernels_in(source))
        self.host_fallbacks.extend(host_fallbacks_in(source))

    def fallback_counts(self) -> Counter:
        return Counter(f.op for f in self.host_fallbacks)

    def summary(self) -> str:
        fb = ", ".join(f"{op} x{n}" for op, n in sorted(self.fallback_counts().items())) or "none"
        lg = self.launch_graph
        graph = "" if lg is None else f", launch graph: {lg.reason or f'{lg.replays} replays, {lg.diverged} diverged'}"
        return (f"{len(self.kernels)} Triton kernels on nmp, host fallbacks: {fb}, "
                f"compiled in {self.compile_seconds:.1f} s ({self.mode}){graph}")


_GRAPHS: list[CompiledGraph] = []
MAX_KEPT = 64


def compiled_graphs() -> list[CompiledGraph]:
    """The graphs compiled by the nmp backend in this process, oldest first (at most MAX_KEPT)."""
    return list(_GRAPHS)


def clear() -> None:
    _GRAPHS.clear()


def keep(graph: CompiledGraph) -> None:
    _GRAPHS.append(graph)
    del _GRAPHS[:-MAX_KEPT]


_RECORDING: contextvars.ContextVar[CompiledGraph | None] = contextvars.ContextVar("nmp_recording", default=None)


@contextlib.contextmanager
def recording(record: CompiledGraph) -> Iterator[CompiledGraph]:
    """While active, every graph Inductor compiles or loads from its caches is added to `record`."""
    _install_output_hook()
    token = _RECORDING.set(record)
    try:
        yield record
    finally:
        _RECORDING.reset(token)


def _install_output_hook() -> None:
    """Wrap `CompiledFxGraph.post_compile` (idempotent): it runs after a fresh compile and after a cache hit."""
    from torch._inductor.output_code import CompiledFxGraph

    original = CompiledFxGraph.post_compile
    if getattr(original, "_nmp_recording", False):
        return

    def post_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        record = _RECORDING.get()
        if record is not None and getattr(self, "source_code", None):
            record.add_source(self.source_code)
        return original(self, *args, **kwargs)

    post_compile._nmp_recording = True  # type: ignore[attr-defined]
    CompiledFxGraph.post_compile = post_compile  # type: ignore[method-assign]


# Calls in the wrapper's call() that compute on the host. Allocation, views and checks are not computations.
_HOST_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\s*\(")
_NOT_COMPUTE = re.compile(r"reinterpret_tensor|empty_strided|as_strided|assert_size_stride|assert_alignment|"
                          r"\bview\b|record_stream|empty\b|resize_")
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)'", re.M)
_CALL_DEF = re.compile(r"^(\s*)def call\(")


def _call_body(source: str) -> list[str]:
    body: list[str] = []
    indent = None
    for line in source.splitlines():
        if indent is None:
            m = _CALL_DEF.match(line)
            if m:
                indent = len(m.group(1))
            continue
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line.strip())
    return body


def host_fallbacks_in(source: str) -> list[HostFallback]:
    """The host computations in a generated wrapper's `call()`."""
    out = []
    for line in _call_body(source):
        if line.startswith("#"):
            continue
        for m in _HOST_CALL.finditer(line):
            op = m.group(1)
            if not _NOT_COMPUTE.search(op):
                out.append(HostFallback(op.removeprefix("torch.ops."), line))
    return out


def kernels_in(source: str) -> list[str]:
    """Names of the Triton kernels a generated wrapper defines."""
    return [m.group(2) for m in _KERNEL_DEF.finditer(source)]
