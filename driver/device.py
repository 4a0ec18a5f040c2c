"""The simulated nmp device: its clock, its queue of launches awaiting timing, and a torch.cuda-shaped
interface so Triton's benchmarking code runs on it.

**Simulated clock.** Every launch advances a process-wide clock (seconds, monotonic) by the time the
machine model says it takes (`simulator.timing.simulate_timing` on the launch's execution trace). The
model costs far more than the native run of a small kernel, so it runs lazily: the launcher queues a
`PendingLaunch` (trace, argument buffers and their placements, metadata) and the queue is resolved
only when someone reads the clock (`SimClock.now()`, an `Event.record()`, a profiler) or when it grows
past `MAX_PENDING_LAUNCHES` / `MAX_PENDING_TRACE_BYTES`; then each pending launch is timed, the clock
advances, and its trace is dropped. The price of laziness: an error of the timing model (say, a store
to a tensor placed "replicated") is raised by whatever resolves the queue, with a note naming the
launch; the failing launch is dropped and the queue stays usable.

**Timing memo.** Resolved timings are memoised by *timing key*: kernel hash, grid, scalar argument
values, target, and per pointer its placement, its position inside the placed range and its size.
Those and the trace are exactly the model's inputs (placements address banks relative to the placed
range, so the host address itself does not matter: see `triton_nmp.placement`). A later executed
launch with the same timing key *and an identical trace* reuses the memoised timing without running
the model, which makes repeated launches cheap, also when outputs are freshly allocated each time.

**Benchmark replay** (the launcher skips the native run). Triton's `do_bench` calls the driver's
`clear_cache()` before each timed call. A launch is *replayed* - not executed, the clock advanced by
the memoised time - only when all of these hold:

1. it is the i-th launch since the most recent `clear_cache()` called by the same thread (each thread
   has its own segments, so launches from other threads never make one replay),
2. the i-th launch after the `clear_cache()` before that was the identical launch (same compiled
   kernel, grid, argument values and data_ptrs, placements, target), and so was every earlier launch
   of the two segments (the benchmarked function repeats launch for launch),
3. the memo has seen its timing key *executed* at least twice with identical traces (deterministic).

So replay happens only inside benchmark loops; ordinary repeated launches always execute. Replayed
launches do not reach the runtime's launch listeners and are not profiled individually (profiles
count them in `Profile.replayed`); their outputs are whatever the last executed launch wrote.

**Launches without a trace** (`TRITON_NMP_TRACE=0`, or kernels that record none) advance the clock by
`CounterEstimate`, an optimistic estimate from the kernel's counters (all bytes local, work spread
evenly over the PUs the grid can occupy, plus the launch overhead). The same estimate is used if the
timing model is not installed.

**Device interface.** `triton.testing.do_bench` only needs `synchronize()` and `Event(enable_timing=True)`
with `record()` and `elapsed_time(other)` in milliseconds: events stamp the simulated clock, so
`do_bench` called directly reports simulated milliseconds. The clock counts integer picoseconds, so
the difference of two stamps is exact and identical launches time identically (all quantiles
equal). Launches are synchronous, so synchronize is a no-op. The stream helpers exist so code
written against `torch.cuda` does not trip over nmp.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Event",
    "Stream",
    "NMPDeviceInterface",
    "device_interface",
    "PendingLaunch",
    "PendingTransfer",
    "ResolvedLaunch",
    "ResolvedTransfer",
    "CounterEstimate",
    "MemoEntry",
    "ClockStats",
    "SimClock",
    "clock",
    "estimate_from_counters",
    "MAX_PENDING_LAUNCHES",
    "MAX_PENDING_TRACE_BYTES",
]

MAX_PENDING_LAUNCHES = 256  # resolve the queue when it holds more launches than this ...
MAX_PENDING_TRACE_BYTES = 64 << 20  # ... or more trace bytes than this
MAX_MEMO_ENTRIES = 1024
MAX_MEMO_TRACE_BYTES = 128 << 20
MAX_SEGMENT = 256  # launches remembered per clear_cache segment; later ones are never replayed
PS_PER_SECOND = 10**12


def _to_ps(seconds: float) -> int:
    return round(float(seconds) * PS_PER_SECOND)


# ------------------------------------------------------------------------------------------------
# Launch records


@dataclass(slots=True)
class PendingLaunch:
    """An executed launch whose timing has not been computed yet (see the module docstring)."""

    seq: int
    kernel: str
    key: Hashable
    grid: tuple[int, int, int]
    metadata: Any
    spec: Any  # the TargetSpec active at launch time
    mapping: str  # metadata.pu_mapping
    buffers: tuple[tuple[str, int, int, Any] | None, ...]  # (name, data_ptr, nbytes, placement) per nmp arg
    counters: dict[str, int]
    host_seconds: float
    trace: Any  # numpy int64 (n, 8) or None
    note: str = ""  # how the launch was placed and mapped when that differs from what was asked (profiles)
    graph: bool = False  # dispatched from a replayed launch graph (`launch_graph`): no host launch overhead
    owner_trace: Any = None  # what owner mappings place programs by when the run's records depend on data


@dataclass(slots=True)
class PendingTransfer:
    """Data moved outside a kernel (a host write, a re-layout), already timed (`simulator.transfer`)."""

    seq: int
    transfer: Any  # simulator.transfer.TransferTiming
    spec: Any


@dataclass(frozen=True, slots=True)
class ResolvedTransfer:
    """A transfer with its place on the clock, handed to subscribers in order with launches."""

    transfer: Any
    start_seconds: float


@dataclass(frozen=True, slots=True)
class ResolvedLaunch:
    """A launch with its timing, handed to clock subscribers (profilers) in launch order."""

    launch: PendingLaunch  # its trace has been dropped
    start_seconds: float  # simulated clock when the launch started
    timing: Any  # simulator.timing.LaunchTiming, or CounterEstimate for trace-less launches
    memo_hit: bool  # timing reused from an identical earlier launch


@dataclass
class CounterEstimate:
    """Optimistic timing of a launch without an execution trace, from its counters alone.

    Carries the LaunchTiming fields profilers read, so records look alike; `estimated` tells them apart.
    """

    cycles: int
    seconds: float
    bytes_local: int
    bytes_remote: int
    flops: int
    dma_cycles: int
    compute_cycles: int
    roofline_seconds: float
    overhead_cycles: float = 0.0  # the launch overhead included in `cycles`
    estimated: bool = True

    def chrome_events(self, name: str, t0_us: float) -> list[dict[str, Any]]:
        """One span on an 'estimated' track: there is no per-PU schedule without a trace."""
        return [
            {"name": "process_name", "ph": "M", "pid": 1 << 20, "tid": 0, "args": {"name": "nmp (estimated)"}},
            {
                "name": name, "cat": "estimate", "ph": "X", "pid": 1 << 20, "tid": 0, "ts": t0_us,
                "dur": self.seconds * 1e6, "args": {"cycles": self.cycles, "flops": self.flops},
            },
        ]


def estimate_from_counters(counters: dict[str, int], grid: tuple[int, int, int], spec: Any) -> CounterEstimate:
    """`CounterEstimate` from the compiler's counters (names in triton_nmp.abi.COUNTERS).

    Every DMA descriptor costs its setup, overlapped `dma_max_in_flight` deep; gather/scatter elements
    count as one granule-sized descriptor each; bytes stream at the local bank rate; matmul MACs run
    at the fp16 rate and vector elements on the vector lanes; DMA and compute overlap perfectly, and
    all of it is spread evenly over min(programs, PUs). Unknown counters contribute nothing.
    """
    c = counters.get
    programs = c("programs", grid[0] * grid[1] * grid[2]) or 1
    pus = max(1, min(programs, spec.num_pus))
    elems = c("gather_elems", 0) + c("scatter_elems", 0)
    nbytes = c("dma_load_bytes", 0) + c("dma_store_bytes", 0) + elems * spec.dma_granule_bytes
    descriptors = c("dma_loads", 0) + c("dma_stores", 0) + elems
    macs, vec = c("macs", 0), c("vec_elems", 0)
    dma = (descriptors * spec.dma_setup_cycles / spec.dma_max_in_flight + nbytes / spec.bank_bytes_per_cycle) / pus
    compute = (macs / spec.peak_macs_per_cycle("fp16") + vec / spec.vector_fp32_lanes) / pus
    overhead = spec.seconds_to_cycles(spec.launch_overhead_us * 1e-6)
    cycles = int(round(max(dma, compute) + overhead))
    flops = 2 * macs + vec
    return CounterEstimate(
        cycles=cycles,
        seconds=spec.cycles_to_seconds(cycles),
        bytes_local=nbytes,
        bytes_remote=0,
        flops=flops,
        dma_cycles=int(round(dma)),
        compute_cycles=int(round(compute)),
        roofline_seconds=spec.roofline_seconds(flops, nbytes, 0.0),
        overhead_cycles=overhead,
    )


@dataclass(slots=True)
class MemoEntry:
    """The timing of one launch key; `runs` counts executions whose trace matched `trace`."""

    spec: Any
    trace: bytes | None  # the records' bytes (records are 8 int64 words, so the shape follows)
    counters: dict[str, int]
    timing: Any
    ps: int  # the timing's seconds in picoseconds, as the clock advances
    runs: int = 1


@dataclass(slots=True)
class _Segment:
    """One thread's launch keys since its last clear_cache(), and those of the segment before."""

    generation: int  # SimClock._generation when made: clear_memo() retires every thread's segments
    prev: list[Hashable] | None = None
    keys: list[Hashable] = field(default_factory=list)
    matches: bool = False


@dataclass
class ClockStats:
    """Where launches went: counts for tests, benchmarks and the profiler's summary."""

    executed: int = 0  # launches run natively and queued
    replayed: int = 0  # launches skipped inside benchmark loops
    simulated: int = 0  # timings computed by the model (or the counter estimate)
    memo_hits: int = 0  # executed launches whose timing came from the memo
    flushes: int = 0
    transfers: int = 0  # host writes and re-layouts charged


# ------------------------------------------------------------------------------------------------
# The clock


_timing_api: Any = None


def _timing_module() -> Any:
    """simulator.timing, or False when it is not installed (then launches are estimated)."""
    global _timing_api
    if _timing_api is None:
        try:
            from triton_nmp.simulator import timing
        except ImportError:
            _timing_api = False
        else:
            _timing_api = timing
    return _timing_api


def _trace_bytes(trace: Any) -> bytes | None:
    """The trace's records as bytes: comparing bytes is ~10x cheaper than np.array_equal on small traces."""
    return None if trace is None else trace.tobytes()


def graph_dispatched(timing: Any, spec: Any) -> Any:
    """`timing` of a launch dispatched from a replayed launch graph (`launch_graph`): the device-side
    dispatch cost `spec.launch_graph_dispatch_us` in place of the host launch overhead."""
    overhead = spec.seconds_to_cycles(spec.launch_graph_dispatch_us * 1e-6)
    cycles = timing.cycles - timing.overhead_cycles + overhead
    if isinstance(timing.cycles, int):
        cycles = int(round(cycles))
    return dataclasses.replace(timing, cycles=cycles, overhead_cycles=overhead, seconds=spec.cycles_to_seconds(cycles))


def _nbytes(trace: Any) -> int:
    return 0 if trace is None else int(trace.nbytes)


class SimClock:
    """The process-wide simulated device clock with its pending-launch queue and timing memo."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._now_ps = 0  # integer picoseconds: differences of stamps are exact, so repeats time alike
        self._seq = 0
        self._pending: list[PendingLaunch] = []
        self._pending_bytes = 0
        self._memo: OrderedDict[Hashable, MemoEntry] = OrderedDict()
        self._memo_bytes = 0
        self._subscribers: list[Callable[[ResolvedLaunch], None]] = []
        # clear_cache segments (benchmark replay), per thread: a benchmark loop is one thread's launches
        self._segments = threading.local()
        self._generation = 0
        self.stats = ClockStats()

    # -- reading ---------------------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since process start, after every launch so far has been timed."""
        return self.now_ps() / PS_PER_SECOND

    def now_ps(self) -> int:
        """`now()` in integer picoseconds (what events stamp)."""
        with self._lock:
            if self._pending:
                self._flush()
            return self._now_ps

    def flush(self) -> None:
        """Time every pending launch now (notifying subscribers) and drop their traces."""
        with self._lock:
            if self._pending:
                self._flush()

    @property
    def pending(self) -> int:
        """Launches queued for timing (transfers, already timed, are not counted)."""
        return sum(1 for p in self._pending if isinstance(p, PendingLaunch))

    def subscribe(self, fn: Callable[[ResolvedLaunch], None]) -> None:
        """Call `fn(resolved)` for every launch timed from now on, in launch order."""
        with self._lock:
            self.flush()  # launches queued before subscribing are not the subscriber's
            self._subscribers.append(fn)

    def unsubscribe(self, fn: Callable[[ResolvedLaunch], None]) -> None:
        with self._lock:
            try:
                self.flush()
            finally:
                with contextlib.suppress(ValueError):
                    self._subscribers.remove(fn)

    # -- launches --------------------------------------------------------------------------------

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def submit(self, launch_key: Hashable, launch: PendingLaunch) -> None:
        """Queue an executed launch (`launch.key` is its timing key); resolve the queue when it passes
        its bounds."""
        with self._lock:
            self._note_launch(launch_key)
            self.stats.executed += 1
            self._pending.append(launch)
            self._pending_bytes += _nbytes(launch.trace)
            if len(self._pending) > MAX_PENDING_LAUNCHES or self._pending_bytes > MAX_PENDING_TRACE_BYTES:
                self._flush()

    def submit_transfer(self, transfer: Any, spec: Any) -> None:
        """Queue a timed transfer (host write or re-layout): it advances the clock after the launches
        queued before it."""
        with self._lock:
            self.stats.transfers += 1
            self._pending.append(PendingTransfer(self.next_seq(), transfer, spec))

    def replay_entry(self, launch_key: Hashable, timing_key: Hashable, spec: Any) -> MemoEntry | None:
        """The memo entry to replay for a launch, or None when it must execute.

        See the module docstring for the three conditions; this is the launcher's hot path, so the
        cheap segment test comes first and the queue is resolved only for a candidate.
        """
        seg = self._thread_segment()
        prev = seg.prev
        if prev is None or not seg.matches:
            return None
        i = len(seg.keys)
        if i >= len(prev) or prev[i] != launch_key:
            return None
        with self._lock:
            if self._pending:
                self._flush()
            entry = self._memo.get(timing_key)
            if entry is None or entry.runs < 2 or entry.spec is not spec:
                return None
            return entry

    def replay(self, launch_key: Hashable, entry: MemoEntry, graph: bool = False) -> None:
        """Account a replayed launch: advance the clock by its memoised time (less the host launch overhead
        for a launch dispatched from a launch graph)."""
        with self._lock:
            self._note_launch(launch_key)
            self.stats.replayed += 1
            self._now_ps += _to_ps(graph_dispatched(entry.timing, entry.spec).seconds) if graph else entry.ps

    def note_clear_cache(self) -> None:
        """A benchmark loop's cache flush: start a new replay segment (see the module docstring) for the
        calling thread; launches from other threads never take part in it."""
        seg = self._thread_segment()
        seg.prev, seg.keys, seg.matches = seg.keys, [], True

    def _thread_segment(self) -> _Segment:
        seg = getattr(self._segments, "seg", None)
        if seg is None or seg.generation != self._generation:
            seg = self._segments.seg = _Segment(self._generation)
        return seg

    def _note_launch(self, key: Hashable) -> None:
        seg = self._thread_segment()
        keys = seg.keys
        i = len(keys)
        if i >= MAX_SEGMENT:
            seg.matches = False
            return
        if seg.matches:
            prev = seg.prev
            if prev is None or i >= len(prev) or prev[i] != key:
                seg.matches = False
        keys.append(key)

    # -- resolution ------------------------------------------------------------------------------

    def _flush(self) -> None:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        self.stats.flushes += 1
        for k, launch in enumerate(pending):
            if isinstance(launch, PendingTransfer):
                start = self._now_ps
                self._now_ps = start + _to_ps(launch.transfer.seconds)
                if self._subscribers:
                    moved = ResolvedTransfer(launch.transfer, start / PS_PER_SECOND)
                    for fn in tuple(self._subscribers):
                        fn(moved)
                continue
            try:
                timing, hit = self._time(launch)
            except BaseException as exc:
                # Keep the clock usable: the launches after the failing one are still queued.
                rest = pending[k + 1 :]
                self._pending = rest + self._pending
                self._pending_bytes = sum(_nbytes(getattr(p, "trace", None)) for p in self._pending)
                exc.add_note(f"while computing the simulated time of kernel '{launch.kernel}' (grid {launch.grid})")
                raise
            if launch.graph:
                timing = graph_dispatched(timing, launch.spec)
            start = self._now_ps
            self._now_ps = start + _to_ps(timing.seconds)
            launch.trace = None
            if self._subscribers:
                resolved = ResolvedLaunch(launch, start / PS_PER_SECOND, timing, hit)
                for fn in tuple(self._subscribers):
                    fn(resolved)

    def _time(self, launch: PendingLaunch) -> tuple[Any, bool]:
        """Timing of one launch: from the memo when key and trace match, else from the model."""
        key, trace = launch.key, _trace_bytes(launch.trace)
        entry = self._memo.get(key)
        if (
            entry is not None
            and entry.spec is launch.spec
            and entry.trace == trace
            and (trace is not None or entry.counters == launch.counters)
        ):
            entry.runs += 1
            self._memo.move_to_end(key)
            self.stats.memo_hits += 1
            return entry.timing, True
        timing = self._simulate(launch)
        self.stats.simulated += 1
        if entry is not None:
            self._memo_bytes -= len(entry.trace or b"")
        self._memo[key] = MemoEntry(launch.spec, trace, dict(launch.counters), timing, _to_ps(timing.seconds))
        self._memo.move_to_end(key)
        self._memo_bytes += len(trace or b"")
        while len(self._memo) > MAX_MEMO_ENTRIES or (self._memo_bytes > MAX_MEMO_TRACE_BYTES and len(self._memo) > 1):
            _, old = self._memo.popitem(last=False)
            self._memo_bytes -= len(old.trace or b"")
        return timing, False

    @staticmethod
    def _simulate(launch: PendingLaunch) -> Any:
        timing = _timing_module()
        if launch.trace is None or not timing:
            return estimate_from_counters(launch.counters, launch.grid, launch.spec)
        ArgBuffer = timing.ArgBuffer
        # Null or empty buffers carry no placement: the model treats None as interleaved from byte 0.
        args = [None if b is None or b[3] is None else ArgBuffer(*b) for b in launch.buffers]
        return timing.simulate_timing(
            launch.trace, launch.grid, args, launch.spec, mapping=launch.mapping, kernel=f"kernel '{launch.kernel}'",
            owner_trace=launch.owner_trace,
        )

    def clear_memo(self) -> None:
        """Forget memoised timings (e.g. after the timing model changed); the clock keeps its time."""
        with self._lock:
            if self._pending:
                self._flush()
            self._memo.clear()
            self._memo_bytes = 0
            self._generation += 1  # every thread's replay segments start afresh


clock = SimClock()


# ------------------------------------------------------------------------------------------------
# torch.cuda-shaped interface


class Event:
    """An event on the simulated clock, like torch.cuda.Event; `elapsed_time` is in milliseconds.

    Between two events that saw nmp launches, the time is simulated device time. Between two events
    with no launch in between (host-only work, e.g. a torch baseline timed with `triton.testing.do_bench`
    as the tutorials do) it is host wall-clock time: that work really runs on the host CPU, and a
    simulated 0 ms would make Triton's `do_bench` divide by zero.
    """

    __slots__ = ("enable_timing", "_t", "_launches", "_wall_ns")

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._t: int | None = None  # simulated picoseconds
        self._launches = 0
        self._wall_ns = 0

    def record(self, stream: Any = None) -> None:
        self._t = clock.now_ps()
        self._launches = clock.stats.executed + clock.stats.replayed
        self._wall_ns = time.perf_counter_ns()

    def elapsed_time(self, end_event: Event) -> float:
        if self._t is None or end_event._t is None:
            raise RuntimeError("both events must be recorded before elapsed_time() is called")
        if end_event._launches == self._launches:
            return (end_event._wall_ns - self._wall_ns) / 1e6
        return (end_event._t - self._t) / 1e9

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass


class Stream:
    """The single, synchronous nmp stream (handle 0)."""

    cuda_stream = 0
    stream_id = 0

    def __init__(self, device: Any = None, priority: int = 0, **_: Any):
        self.device = device

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_stream(self, other: Any) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event


# A compatibility answer for code that sizes kernels by register count; nmp has no register file limit
# that Triton could act on.
MAX_NUM_REGS = 65536


def device_properties(device: Any = None) -> dict[str, Any]:
    """The properties Triton and torch ask a device for, from the active target (one device)."""
    from triton_nmp.target import active_target

    spec = active_target()
    return {
        "multiprocessor_count": spec.num_pus,
        "max_shared_mem": spec.spm_bytes_per_program,
        "max_num_regs": MAX_NUM_REGS,
        "warpSize": 1,
        "nmp_target": spec.name,
        "nmp_target_hash": spec.hash(),
    }


class NMPDeviceInterface:
    """The subset of the torch.cuda module interface that Triton uses, for one synchronous device."""

    Event = Event
    Stream = Stream
    ExternalStream = Stream

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        pass

    @staticmethod
    def synchronize(device: Any = None) -> None:
        pass  # launches return only when the whole grid has run; timing is resolved when read

    @staticmethod
    def current_stream(device: Any = None) -> Stream:
        return Stream(device)

    @staticmethod
    def default_stream(device: Any = None) -> Stream:
        return Stream(device)

    @staticmethod
    @contextlib.contextmanager
    def stream(stream: Any = None) -> Iterator[Any]:
        yield stream

    @staticmethod
    @contextlib.contextmanager
    def device(device: Any = None) -> Iterator[Any]:
        yield device

    @staticmethod
    def get_device_properties(device: Any = None) -> dict[str, Any]:
        return device_properties(device)

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        from triton_nmp.target import active_target

        return f"nmp ({active_target().name})"

    @staticmethod
    def simulated_time() -> float:
        """The simulated clock in seconds (nmp extension)."""
        return clock.now()


device_interface = NMPDeviceInterface()
