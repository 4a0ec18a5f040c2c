"""Profiling nmp launches: what the simulated machine did for each kernel launch.

    with triton_nmp.profile() as prof:
        kernel[grid](...)
    print(prof.summary())
    prof.save_trace("trace.json")     # chrome://tracing or ui.perfetto.dev: one track per PU
    prof.roofline_plot("roofline.png")

Records come from the simulated device clock (`driver.device.clock`): every launch executed inside
the context is timed by the machine model and recorded in launch order. Launches replayed inside a
benchmark loop (see `driver.device`) are not executed, so they are only counted (`Profile.replayed`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import triton  # noqa: F401  (first: importing Triton imports the nmp driver; the reverse order is a cycle)

from triton_nmp.abi import metadata_value
from triton_nmp.driver.device import ResolvedLaunch, ResolvedTransfer, clock

__all__ = ["LaunchRecord", "TransferRecord", "Profile", "profile"]

LAUNCH_PID = 1_000_000  # Chrome trace process of the per-launch spans, apart from the timing model's PU tracks



@dataclass
class LaunchRecord:
    """One kernel launch as the simulated machine ran it."""

    kernel: str
    grid: tuple[int, int, int]
    cycles: int
    sim_seconds: float
    bytes_local: int
    bytes_remote: int
    flops: int
    spm_peak_bytes: int  # scratchpad in use on a PU: the plan's peak, twice under the grid pipeline
    roofline_seconds: float
    host_seconds: float  # wall time of the native run on the host (not simulated)
    counters: dict[str, int]
    timing: Any  # simulator.timing.LaunchTiming (or driver.device.CounterEstimate without a trace)
    sim_start_seconds: float = 0.0  # simulated clock at the start of the launch
    memo_hit: bool = False  # timing reused from an identical earlier launch
    estimated: bool = False  # no execution trace: timing estimated from counters
    spec: Any = field(default=None, repr=False)
    mapping: str = ""  # program -> PU mapping the timing model applied ("auto -> locality", "round_robin", ...)
    note: str = ""  # why the mapping differs from the one asked for (e.g. a data-dependent footprint)
    spill_bytes: int = 0  # bytes moved between scratchpads and spill areas (tiles that did not fit), all programs
    spilled: tuple[str, ...] = ()  # the spilled tiles (name, type, bytes, Python line), from the compile
    grid_pipeline: str = ""  # whether the compiler pipelined the grid loop, and why (backend/grid_pipeline.py)
    launch: str = "host"  # "graph": dispatched from a replayed launch graph (driver/launch_graph.py), no host cost

    @property
    def bytes_total(self) -> int:
        return self.bytes_local + self.bytes_remote

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per byte moved between banks and scratchpads."""
        return self.flops / self.bytes_total if self.bytes_total else float("inf")

    @property
    def flops_per_second(self) -> float:
        return self.flops / self.sim_seconds if self.sim_seconds > 0 else 0.0

    @property
    def bytes_per_second(self) -> float:
        return self.bytes_total / self.sim_seconds if self.sim_seconds > 0 else 0.0

    @property
    def roofline_fraction(self) -> float:
        """roofline bound / simulated time: 1.0 means the launch ran at the machine's limit."""
        return self.roofline_seconds / self.sim_seconds if self.sim_seconds > 0 else 0.0

    @classmethod
    def from_resolved(cls, r: ResolvedLaunch) -> LaunchRecord:
        launch, t = r.launch, r.timing
        spm = metadata_value(launch.metadata, "nmp_spm_pu_bytes", None)  # both copies under the grid pipeline
        if spm is None:
            spm = metadata_value(launch.metadata, "nmp_spm_bytes", None)
        if spm is None:
            spm = metadata_value(launch.metadata, "shared", 0) or 0
        return cls(
            kernel=launch.kernel,
            grid=launch.grid,
            cycles=int(round(t.cycles)),
            sim_seconds=float(t.seconds),
            bytes_local=int(round(t.bytes_local)),
            bytes_remote=int(round(t.bytes_remote)),
            flops=int(round(t.flops)),
            spm_peak_bytes=int(spm),
            roofline_seconds=float(t.roofline_seconds),
            host_seconds=launch.host_seconds,
            counters=dict(launch.counters),
            timing=t,
            sim_start_seconds=r.start_seconds,
            memo_hit=r.memo_hit,
            estimated=bool(getattr(t, "estimated", False)),
            spec=launch.spec,
            mapping=_mapping_of(launch.mapping, t),
            note=launch.note,
            spill_bytes=int(launch.counters.get("spill_bytes", 0)),
            spilled=tuple(metadata_value(launch.metadata, "nmp_spilled", ()) or ()),
            grid_pipeline=str(metadata_value(launch.metadata, "nmp_grid_pipeline_reason", "") or ""),
            launch="graph" if launch.graph else "host",
        )


def _mapping_of(asked: str, timing: Any) -> str:
    extra = getattr(timing, "extra", None) or {}
    choice = extra.get("auto_choice")
    return f"{asked} -> {choice}" if choice else asked


@dataclass
class TransferRecord:
    """Data moved outside kernels: host data written into banks, or a tensor re-laid out."""

    kind: str  # "host_write" | "relayout"
    tensor: str
    nbytes: int
    src: str
    dst: str
    sim_seconds: float
    sim_start_seconds: float
    noc_bytes: float  # bytes that crossed the mesh
    limit: str  # what set the time

    @classmethod
    def from_resolved(cls, r: ResolvedTransfer) -> TransferRecord:
        t = r.transfer
        return cls(t.kind, t.tensor, int(t.nbytes), t.src, t.dst, float(t.seconds), r.start_seconds,
                   float(t.noc_bytes), t.limit)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fmt_time(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


@dataclass
class Profile:
    """The launches recorded by one `profile()` context."""

    launches: list[LaunchRecord] = field(default_factory=list)
    transfers: list[TransferRecord] = field(default_factory=list)  # host writes and re-layouts, in order
    replayed: int = 0  # launches replayed inside benchmark loops (not executed, not recorded)
    start_seconds: float = 0.0  # simulated clock when the context was entered
    end_seconds: float = 0.0  # ... and left

    def _on_launch(self, r: ResolvedLaunch | ResolvedTransfer) -> None:
        if isinstance(r, ResolvedTransfer):
            self.transfers.append(TransferRecord.from_resolved(r))
        else:
            self.launches.append(LaunchRecord.from_resolved(r))

    @property
    def sim_seconds(self) -> float:
        """Simulated time of the recorded launches (replays and transfers excluded)."""
        return sum(rec.sim_seconds for rec in self.launches)

    @property
    def transfer_seconds(self) -> float:
        """Simulated time of the data moved outside kernels (host writes, re-layouts)."""
        return sum(t.sim_seconds for t in self.transfers)

    # -- Chrome / Perfetto trace ---------------------------------------------------------------------

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace events: the timing model's per-PU DMA/compute spans for every launch, launches
        laid out back to back from t=0 (replayed launches leave no gap), plus one span per launch on a
        'launches' track carrying the record's numbers."""
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": LAUNCH_PID, "tid": 0, "args": {"name": "nmp launches"}},
            {"name": "thread_name", "ph": "M", "pid": LAUNCH_PID, "tid": 0, "args": {"name": "launches"}},
        ]
        seen_meta: set[str] = set()
        t_us = 0.0
        for i, rec in enumerate(self.launches):
            for ev in rec.timing.chrome_events(rec.kernel, t_us):
                if ev.get("ph") == "M":  # every launch repeats the track names: keep one of each
                    sig = json.dumps(ev, sort_keys=True, default=str)
                    if sig in seen_meta:
                        continue
                    seen_meta.add(sig)
                events.append(ev)
            events.append(
                {
                    "name": rec.kernel, "cat": "launch", "ph": "X", "pid": LAUNCH_PID, "tid": 0,
                    "ts": t_us, "dur": rec.sim_seconds * 1e6,
                    "args": {
                        "launch": i, "grid": list(rec.grid), "cycles": rec.cycles,
                        "bytes_local": rec.bytes_local, "bytes_remote": rec.bytes_remote, "flops": rec.flops,
                        "spm_peak_bytes": rec.spm_peak_bytes, "roofline_fraction": round(rec.roofline_fraction, 4),
                        "estimated": rec.estimated, "spill_bytes": rec.spill_bytes,
                        "grid_pipeline": rec.grid_pipeline, "dispatch": rec.launch,
                    },
                }
            )
            t_us += rec.sim_seconds * 1e6
        if self.transfers:
            events.append({"name": "thread_name", "ph": "M", "pid": LAUNCH_PID, "tid": 1,
                           "args": {"name": "transfers (host writes, re-layouts)"}})
            t0 = self.transfers[0].sim_start_seconds
            for t in self.transfers:
                events.append({"name": f"{t.kind} {t.tensor}", "cat": "transfer", "ph": "X", "pid": LAUNCH_PID,
                               "tid": 1, "ts": (t.sim_start_seconds - t0) * 1e6, "dur": t.sim_seconds * 1e6,
                               "args": {"bytes": t.nbytes, "from": t.src, "to": t.dst, "noc_bytes": t.noc_bytes,
                                        "limit": t.limit}})
        return events

    def save_trace(self, path: str | os.PathLike[str]) -> None:
        """Write a Chrome/Perfetto JSON trace (open it in ui.perfetto.dev or chrome://tracing)."""
        doc = {
            "traceEvents": self.trace_events(),
            "displayTimeUnit": "ns",
            "otherData": {"clock": "simulated nmp device time", "replayed_launches": self.replayed},
        }
        with open(path, "w") as f:
            json.dump(doc, f, default=_json_default)

    # -- table ---------------------------------------------------------------------------------------

    def summary(self) -> str:
        """A printable table: one row per launch and a total."""
        head = ("kernel", "grid", "sim time", "% roofline", "GB/s", "GFLOP/s", "local", "remote", "SPM peak",
                "spilled", "mapping")
        rows = []
        for rec in self.launches:
            name = rec.kernel + (" (est.)" if rec.estimated else "")
            rows.append(
                (
                    name,
                    "x".join(str(g) for g in rec.grid),
                    _fmt_time(rec.sim_seconds),
                    f"{100 * rec.roofline_fraction:.1f}%",
                    f"{rec.bytes_per_second / 1e9:.2f}",
                    f"{rec.flops_per_second / 1e9:.2f}",
                    _fmt_bytes(rec.bytes_local),
                    _fmt_bytes(rec.bytes_remote),
                    _fmt_bytes(rec.spm_peak_bytes),
                    _fmt_bytes(rec.spill_bytes) if rec.spill_bytes else "-",
                    rec.mapping,
                )
            )
        total_s = self.sim_seconds
        total_roof = sum(r.roofline_seconds for r in self.launches)
        total_b = sum(r.bytes_total for r in self.launches)
        total_f = sum(r.flops for r in self.launches)
        rows.append(
            (
                f"total ({len(self.launches)} launches)",
                "",
                _fmt_time(total_s),
                f"{100 * total_roof / total_s:.1f}%" if total_s else "-",
                f"{total_b / total_s / 1e9:.2f}" if total_s else "-",
                f"{total_f / total_s / 1e9:.2f}" if total_s else "-",
                _fmt_bytes(sum(r.bytes_local for r in self.launches)),
                _fmt_bytes(sum(r.bytes_remote for r in self.launches)),
                _fmt_bytes(max((r.spm_peak_bytes for r in self.launches), default=0)),
                _fmt_bytes(sum(r.spill_bytes for r in self.launches)) if any(r.spill_bytes for r in self.launches)
                else "-",
                "",
            )
        )
        widths = [max(len(head[c]), *(len(r[c]) for r in rows)) for c in range(len(head))]

        def line(cells: tuple[str, ...]) -> str:
            return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        out = [line(head), line(tuple("-" * w for w in widths))]
        out += [line(r) for r in rows[:-1]]
        out += [line(tuple("-" * w for w in widths)), line(rows[-1])]
        if self.replayed:
            out.append(f"({self.replayed} launches replayed inside benchmark loops are not listed)")
        graphed = [r for r in self.launches if r.launch == "graph"]
        if graphed:
            spec = graphed[0].spec
            out.append(f"{len(graphed)} of {len(self.launches)} launches dispatched from replayed launch graphs "
                       f"(mode='reduce-overhead' or 'max-autotune'): {spec.launch_graph_dispatch_us:g} us device "
                       f"dispatch each instead of the {spec.launch_overhead_us:g} us host launch")
        for rec in self.launches:
            if rec.note:
                out.append(f"note: {rec.kernel}: {rec.note}")
        noted: set[str] = set()
        for rec in self.launches:
            if rec.spilled and rec.kernel not in noted:
                noted.add(rec.kernel)
                out.append(f"spilled: {rec.kernel}: tiles that do not fit the scratchpad live in the PU's bank "
                           f"(the 'spilled' column: bytes moved to and from it): {'; '.join(rec.spilled)}")
        if self.transfers:
            out.append(f"transfers (data moved outside kernels): {len(self.transfers)}, "
                       f"{_fmt_time(self.transfer_seconds)}")
            for t in self.transfers:
                out.append(f"  {t.kind:<10} {_fmt_time(t.sim_seconds):>11}  {t.tensor}: {t.src} -> {t.dst}"
                           f" ({t.limit})")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.summary()

    # -- roofline ------------------------------------------------------------------------------------

    def roofline_plot(self, path: str | os.PathLike[str], dtype: str = "fp16") -> None:
        """Write a PNG roofline: achieved FLOP/s against arithmetic intensity, one point per launch,
        under the machine's compute peak (matrix unit in `dtype`, and the fp32 vector unit) and its
        local-bank and remote (NoC) bandwidth roofs. Launches without flops cannot sit on a log axis
        and are listed in the title instead."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazily: matplotlib is optional
        from matplotlib.figure import Figure

        from triton_nmp.target import active_target

        spec = next((r.spec for r in self.launches if r.spec is not None), None) or active_target()
        peak = spec.peak_flops(dtype)
        vec_peak = spec.vector_fp32_lanes * spec.num_pus * spec.clock_hz
        bw_local, bw_remote = spec.local_bytes_per_second, spec.remote_bytes_per_second
        pts = [r for r in self.launches if r.flops > 0 and r.bytes_total > 0 and r.sim_seconds > 0]
        skipped = len(self.launches) - len(pts)

        ai = [r.arithmetic_intensity for r in pts]
        ridge_remote = peak / bw_remote
        lo = min([*ai, 1.0 / 16]) / 4
        hi = max([*ai, ridge_remote]) * 4
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]

        fig = Figure(figsize=(8, 5.5))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        ax.loglog(xs, [min(peak, x * bw_local) for x in xs], color="tab:blue", lw=2,
                  label=f"local bank roof ({bw_local / 1e9:.0f} GB/s, ridge {peak / bw_local:.0f} FLOP/B)")
        ax.loglog(xs, [min(peak, x * bw_remote) for x in xs], color="tab:red", lw=2, ls="--",
                  label=f"remote roof ({bw_remote / 1e9:.0f} GB/s, ridge {ridge_remote:.0f} FLOP/B)")
        ax.axhline(vec_peak, color="tab:gray", lw=1, ls=":", label=f"vector fp32 peak ({vec_peak / 1e9:.0f} GFLOP/s)")
        ax.axhline(peak, color="black", lw=0.8, ls=":", label=f"matrix {dtype} peak ({peak / 1e12:.1f} TFLOP/s)")
        for r, x in zip(pts, ai):
            ax.plot([x], [r.flops_per_second], "o", color="tab:green")
            ax.annotate(r.kernel, (x, r.flops_per_second), textcoords="offset points", xytext=(5, 5), fontsize=8)
        ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
        ax.set_ylabel("achieved FLOP/s (simulated)")
        title = f"roofline on {spec.name}"
        if skipped:
            title += f" ({skipped} launches without flops not shown)"
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(os.fspath(path), format="png", dpi=100)


def _json_default(o: Any) -> Any:
    """numpy scalars and arrays in trace event args."""
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Record every nmp launch executed inside the context (see the module docstring)."""
    prof = Profile()
    replayed0 = clock.stats.replayed
    clock.subscribe(prof._on_launch)
    prof.start_seconds = clock.now()
    try:
        yield prof
    finally:
        clock.unsubscribe(prof._on_launch)
        prof.replayed = clock.stats.replayed - replayed0
        prof.end_seconds = clock.now()
