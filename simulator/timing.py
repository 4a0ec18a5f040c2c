"""Timing model: a launch's execution trace + tensor placement -> simulated cycles on the nmp mesh.

The functional run records what each program did (DMA descriptors, gathers, vector and matrix ops,
in program order; record layout in `triton_nmp.abi`). This module charges time for it with the
machine numbers of a `TargetSpec` (DESIGN.md section 1; nmp-64 values in brackets). Everything is
vectorised over records with numpy: no Python loop runs per record or per program.

1. Bytes to banks (items 1 and 2: `simulator/banks.py`). A DMA record [arg, origin, rows, row_bytes,
   row_stride] moves `rows` runs of `row_bytes` contiguous bytes; a gather/scatter of n elements of e
   bytes is spread uniformly over the argument's byte span [lo, hi). Positions are relative to the
   argument's placed range and mapped to banks by its `Placement` (`triton_nmp.placement`), exactly,
   also for runs that cross chunk boundaries. Records of the spill area (arg `abi.SPILL_ARG`: tiles
   that did not fit the scratchpad) move bytes of the executing PU's own bank, like reads of a
   replicated tensor. Speed: records with equal access patterns (same offset modulo the interleave
   period, stride, rows, row bytes) move the same bytes per bank and are evaluated once (a tiled
   matmul's thousands of tile loads have a few dozen patterns), and rows whose bank pattern repeats are
   folded. The cost is O(records) plus O(distinct patterns x min(rows, period)).

2. Bytes moved. Each row is moved in whole granules from an aligned address:
   moved_row = ceil((start mod dma_alignment + row_bytes) / dma_granule) * dma_granule [32 B, 32 B];
   a gather/scatter element moves ceil(e / granule) granules. Bank and link loads use moved bytes;
   `bytes_local`/`bytes_remote` report the kernel's useful bytes.

3. DMA time of one record (hardware descriptors nd = ceil(bytes / dma_max_descriptor_bytes) [8 KiB],
   issued in batches of dma_max_in_flight [8] whose setups overlap):
       dma = ceil(nd / in_flight) * (dma_setup_cycles [100] + noc_hop_cycles [9] * hops)
             + local_moved / bank_bytes_per_cycle [16]
   (stores: dma_store_setup_cycles and dma_store_bytes_per_cycle, by default equal to the load values)
             + remote_moved / min(remote_read_bytes_per_cycle [4], noc_link_bytes_per_cycle [32])
   `local` = bytes in the executing PU's own bank (every read of a "replicated" tensor); `hops` =
   remote-byte-weighted mean XY distance from the banks to the PU (0 when all bytes are local).
   Stores are charged like loads (a remote write crosses the same NoC path in the other direction).

4. Compute time: vector op = ceil(elements / vector_fp32_lanes [32]) * ops[class] cycles, ops[class] =
   the target's `[ops]` rate of the record's op class (`triton_nmp.opclass`) [1, x2 for 64-bit types]
   (fp16/bf16/int8 use the same lanes: no packing assumed; reductions cost the same as elementwise),
   plus, on scalar cores, elements * (accesses * issue_spm_access_cycles + issue_loop_cycles) [0] for a
   record that opens an element loop (accesses > 0); a program's compute runs at one instruction per
   issue_thread_interval_cycles [1] (one thread of a barrel/revolver pipeline);
   matrix op = ceil(M*N*K / matrix MACs per cycle of the input dtype [128 fp16/bf16, 32 fp32,
   256 int8]); fp64 at half the fp32 rate, other integer inputs at the fp32 rate.
   flops = 2 per MAC + 1 per vector element.

5. Program time: synchronous DMAs and compute run one after the other (sum). A load flagged
   prefetched (flags bit 0, emitted for multi-buffered loads, `num_stages` > 1) was issued one
   pipeline stage ahead, i.e. it ran during the compute that precedes it in the trace (the previous
   loop iteration). A stage = the compute records since the last synchronous DMA / WAIT /
   prefetched batch, plus the prefetched DMAs right after them, and costs
   max(compute, prefetched DMA) instead of their sum. WAIT records (kind 7) end a stage.
   Kernels pipelined across the grid loop (DMA flag FLAG_GRID_PIPELINED, backend/grid_pipeline.py:
   the next program's leading loads in flight and stores posted while a program runs) are charged
   per PU as one stream with a DMA queue instead (simulator/grid_stream.py).

6. Program -> PU mapping (`pu_mapping` compile option):
   round_robin: pu = p mod P;  blocked: pu = p // ceil(n / P);  random: a seeded permutation dealt
   round-robin (a validation baseline: placement-oblivious pairing);  locality (owner computes):
   each program goes to the PU whose bank holds most of its DMA bytes (ties: the first such bank at
   or after p mod P), but no PU takes more than ceil(n / P) + LOCALITY_SLACK (= 0) programs; the
   overflow, in program order, fills the least-loaded PUs' free slots. No slack because in the wave
   model (item 7) one extra program on one PU costs a whole wave, more than the remote reads it
   would save.  auto (the default): round_robin, the locality mapping and, for grids of at most
   UNCAPPED_MAX_PROGRAMS_PER_PU (= 32) programs per PU, two owner-computes mappings without the count
   cap, "owner" (every program on the PU whose bank holds most of its bytes) and "weighted locality"
   (from there, programs leave the busiest PU while that shortens its load, each program costed where
   it would run: its bytes in that PU's bank at the local rate, the others at the remote rate), are
   all scheduled and the fastest is kept (ties: the earlier of that list), so auto is never slower
   than round robin; `extra["auto_choice"]` says which. The uncapped ones win when a tensor sits in
   fewer banks than there are PUs (a weight laid out for another kernel's tiles): its owners read it
   themselves instead of idle PUs reading it at the remote rate, and the wave model weighs the extra
   programs they queue against the remote reads they save.
   The launcher passes auto only for launches whose footprint is static (`triton_nmp.footprint`:
   the trace predicted from nmpir without running is exact, so the mapping could have been chosen
   before the run); data-dependent launches fall back to round_robin, with the reason in the profile.

7. Concurrency and contention, in waves: each PU runs its programs back to back in program order, in
   groups of issue_threads [1] (item 8); wave k holds the k-th group of every PU, which run
   concurrently. Shared resources are charged per wave:
       wave = max( max over its PUs of group time (program time with one thread),
                   max over banks of moved bytes served by the bank / bank_bytes_per_cycle,
                   max over directed mesh links of bytes crossing it / noc_link_bytes_per_cycle )
   with remote bytes routed XY (along the source's row, then down the destination's column) from
   bank to reader (loads) or writer to bank (stores). The wave is the unit of synchrony: a PU
   that finishes its program early waits for the wave (simple and deterministic; it overestimates
   launches whose programs differ much in length). Per-link sums are skipped when a cheap bound
   (bytes leaving a mesh row / entering a mesh column) shows links cannot set any wave's time.
       cycles = sum of waves + launch_overhead_us * clock_ghz * 1000 [5 us]
   For pipelined kernels (item 5) the PUs' streams have no barrier: wave w ends at
   max(the last PU's end of its w-th program, end of wave w-1 + max(bank, link time of wave w)).

8. Threads (issue_threads > 1, e.g. UPMEM's tasklets): a group of k programs shares one pipeline and
   one DMA engine; its time is
       max( slowest program alone (item 5),  I + D - issue_dma_overlap * min(I, D) )
   with I = the group's issue cycles x max(1, issue_thread_interval_cycles / k) (too few threads
   cannot fill the pipeline) and D = the group's DMA cycles. With one thread a group is one program.

The model is deterministic (the random mapping uses `seed`). Its lower bound, `roofline_seconds`,
is `TargetSpec.roofline_seconds` for the launch's flops and useful local/remote bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_nmp.abi import (
    DTYPE_CODES,
    FLAG_PREFETCHED,
    KIND_DMA_LOAD,
    KIND_DMA_STORE,
    KIND_GATHER,
    KIND_MATMUL,
    KIND_SCATTER,
    KIND_VEC,
    KIND_WAIT,
    TRACE_WORDS,
    metadata_value,
)
from triton_nmp.abi import PU_MAPPINGS as MAPPINGS
from triton_nmp.errors import NMPRuntimeError
from triton_nmp.opclass import CLASS_FIELDS
from triton_nmp.placement_registry import extent_bytes, placement_of
from triton_nmp.target import TargetSpec, active_target

from .banks import ArgBuffer, PatternTable, dma_patterns, footprint_bank_bytes
from .grid_stream import is_pipelined, stream_program_times

__all__ = [
    "ArgBuffer",
    "LaunchTiming",
    "MAPPINGS",
    "arg_buffers",
    "arg_buffers_from_slots",
    "simulate_timing",
    "simulate_launch",
    "footprint_bank_bytes",
]

LOCALITY_SLACK = 0  # locality mapping: a PU takes at most ceil(n/P) + LOCALITY_SLACK programs

# dtype codes of the trace -> (matrix-unit rate key, cost multiplier); 64-bit types run at half rate.
_DTYPE_FP64, _DTYPE_INT64 = DTYPE_CODES["f64"], DTYPE_CODES["i64"]
_MATRIX_RATE = {DTYPE_CODES[t]: rate for t, rate in (
    ("f32", ("fp32", 1)), ("f16", ("fp16", 1)), ("bf16", ("bf16", 1)), ("f64", ("fp32", 2)), ("i8", ("int8", 1)),
    ("i16", ("fp32", 1)), ("i32", ("fp32", 1)), ("i64", ("fp32", 2)), ("i1", ("int8", 1)))}
_LIMIT_NAMES = ("pu", "bank", "link")


# ------------------------------------------------------------------------------------ arguments


def _arg_infos(metadata: Any) -> list[tuple[str, str]]:
    """(name, kind) per non-constexpr argument from Triton metadata (dict or namedtuple) or a KernelABI."""
    raw = metadata_value(metadata, "nmp_args", None)
    if raw is None and not isinstance(metadata, dict):
        raw = getattr(metadata, "args", None)  # a KernelABI
    raw = raw or ()
    out = []
    for a in raw:
        if isinstance(a, dict):
            out.append((str(a.get("name", "")), str(a.get("kind", ""))))
        else:
            out.append((str(getattr(a, "name", "")), str(getattr(a, "kind", ""))))
    return out



def _buffer(name: str, value: Any) -> ArgBuffer | None:
    if value is None:
        return None
    if hasattr(value, "data_ptr") and hasattr(value, "element_size"):  # a torch tensor
        ptr, nbytes = int(value.data_ptr()), extent_bytes(value)
    elif isinstance(value, tuple | list):
        ptr, nbytes = int(value[0]), int(value[1])
    else:
        ptr, nbytes = int(value), 0
    if ptr == 0:
        return None
    return ArgBuffer(name, ptr, nbytes, placement_of(ptr, nbytes))


def arg_buffers(metadata: Any, kernel_args: Sequence[Any] | Mapping[str, Any]) -> list[ArgBuffer | None]:
    """ArgBuffers per metadata["nmp_args"] entry. `kernel_args` is a mapping from argument name to
    value (Triton drops arguments it specialises, e.g. integers equal to 1, from nmp_args, so names
    are the robust key) or a sequence with one value per nmp_args entry. A pointer's value is a
    tensor, a (data_ptr, nbytes) pair or a bare data_ptr; scalars may be anything."""
    infos = _arg_infos(metadata)
    if isinstance(kernel_args, Mapping):
        return [_buffer(name, kernel_args.get(name)) if kind == "ptr" else None for name, kind in infos]
    if len(kernel_args) != len(infos):
        raise NMPRuntimeError(
            f"arg_buffers: {len(kernel_args)} values for the {len(infos)} non-constexpr kernel arguments "
            f"({', '.join(n for n, _ in infos)}); pass a dict by argument name instead"
        )
    return [_buffer(name, v) if kind == "ptr" else None for (name, kind), v in zip(infos, kernel_args)]


def arg_buffers_from_slots(metadata: Any, slots: Sequence[int]) -> list[ArgBuffer | None]:
    """ArgBuffers from the launcher's marshalled slot values (a pointer takes [data_ptr, span])."""
    out: list[ArgBuffer | None] = []
    i = 0
    for name, kind in _arg_infos(metadata):
        if kind == "ptr":
            out.append(_buffer(name, (slots[i], slots[i + 1])))
            i += 2
        else:
            out.append(None)
            i += 1
    return out


# --------------------------------------------------------------------------------------- result


@dataclass(eq=False)
class LaunchTiming:
    """Simulated time of one launch; per-program arrays are indexed by linear program id."""

    cycles: float
    seconds: float
    device_cycles: float  # sum of waves (cycles without the host launch overhead)
    overhead_cycles: float
    bytes_local: float  # useful bytes in the executing PU's own bank (replicated reads included)
    bytes_remote: float
    bytes_moved: float  # granule/alignment-rounded bytes actually transferred
    flops: float
    dma_cycles: float  # summed over programs
    compute_cycles: float
    per_pu_busy_cycles: np.ndarray
    bank_bytes: np.ndarray  # moved bytes served per bank
    roofline_seconds: float
    program_pu: np.ndarray
    program_start: np.ndarray  # cycles from the first wave
    program_end: np.ndarray
    program_dma: np.ndarray
    program_compute: np.ndarray
    wave_cycles: np.ndarray
    wave_limit: np.ndarray  # per wave: 0 = slowest PU, 1 = a bank, 2 = a NoC link
    mapping: str = "round_robin"
    clock_ghz: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)  # per-wave resource cycles, for analysis

    @property
    def num_programs(self) -> int:
        return int(self.program_pu.size)

    def limits(self) -> dict[str, int]:
        """How many waves each resource limited: {"pu": ..., "bank": ..., "link": ...}."""
        counts = np.bincount(self.wave_limit, minlength=3)
        return {name: int(c) for name, c in zip(_LIMIT_NAMES, counts)}

    def chrome_events(self, name: str, t0_us: float = 0.0) -> list[dict[str, Any]]:
        """Chrome/Perfetto trace events: one track per PU (pid = tid = PU), a DMA then a compute span
        per program (the order inside a program is approximated: DMA first, compute last)."""
        us = 1.0 / (self.clock_ghz * 1e3)
        pu = self.program_pu
        start = t0_us + self.program_start * us
        end = t0_us + self.program_end * us
        dma = self.program_dma * us
        comp = np.minimum(self.program_compute * us, end - start)
        events: list[dict[str, Any]] = []
        for p in np.unique(pu).tolist():
            events.append({"name": "process_name", "ph": "M", "pid": p, "tid": p, "args": {"name": f"PU {p}"}})
        for i, (q, s, e, d, c) in enumerate(zip(pu.tolist(), start.tolist(), end.tolist(), dma.tolist(),
                                                comp.tolist())):  # fmt: skip
            if d > 0:
                events.append({"name": f"{name} dma", "cat": "dma", "ph": "X", "pid": q, "tid": q, "ts": s,
                               "dur": min(d, e - s), "args": {"program": i}})  # fmt: skip
            if c > 0:
                events.append({"name": f"{name} compute", "cat": "compute", "ph": "X", "pid": q, "tid": q,
                               "ts": e - c, "dur": c, "args": {"program": i}})  # fmt: skip
        return events


# ---------------------------------------------------------------------------------------- model


def _map_programs(mapping: str, n: int, P: int, owner_bytes: np.ndarray | None, seed: int) -> np.ndarray:
    """Program -> PU (see module docstring, item 6)."""
    ids = np.arange(n, dtype=np.int64)
    if mapping == "round_robin":
        return ids % P
    if mapping == "blocked":
        return ids // max(1, -(-n // P))
    if mapping == "random":
        pu = np.empty(n, dtype=np.int64)
        pu[np.random.default_rng(seed).permutation(n)] = ids % P
        return pu
    if mapping != "locality":
        raise NMPRuntimeError(f"unknown pu_mapping '{mapping}'; choose one of {', '.join(MAPPINGS)}")
    rr = ids % P
    if owner_bytes is None or owner_bytes.size == 0:
        return rr
    owner = _owners(owner_bytes, P)
    cap = -(-n // P) + LOCALITY_SLACK
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=P)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = ids - (np.cumsum(counts) - counts)[owner[order]]
    over = np.flatnonzero(rank >= cap)
    if over.size:
        kept = np.minimum(counts, cap)
        spare = cap - kept
        slot_pu = np.repeat(np.arange(P), spare)
        slot_level = np.arange(slot_pu.size) - np.repeat(np.cumsum(spare) - spare, spare) + kept[slot_pu]
        slots = slot_pu[np.lexsort((slot_pu, slot_level))]
        owner = owner.copy()
        owner[over] = slots[: over.size]
    return owner


def _owners(owner_bytes: np.ndarray, P: int) -> np.ndarray:
    """Per program, the bank holding most of its bytes: among the banks holding the most (all of them for
    a program without DMAs) the first at or after p mod P, so ties spread like round_robin instead of
    piling onto bank 0: argmax (first maximum) of each row rotated left by p mod P."""
    n = owner_bytes.shape[0]
    ids = np.arange(n, dtype=np.int64)
    rr = ids % P
    doubled = np.concatenate([owner_bytes, owner_bytes], axis=1)
    rotated = np.lib.stride_tricks.sliding_window_view(doubled, P, axis=1)[ids, rr]
    return (np.argmax(rotated, axis=1) + rr) % P


UNCAPPED_MAX_PROGRAMS_PER_PU = 32  # the uncapped owner mappings are tried for grids up to this many per PU


def _weighted_locality(owner_bytes: np.ndarray, P: int, local_bw: float, remote_bw: float,
                       owners: np.ndarray | None = None) -> np.ndarray:
    """Owner computes with loads weighted by what a program costs where it runs (item 6, "auto").

    Every program starts on its owner PU (`owners` if given, else `_owners`); its cost on PU q is its
    bytes in bank q at the local rate plus the rest at the remote rate. Then, while it shortens the
    busiest PU's load, one of that PU's programs moves to the PU where it would end earliest. Unlike the
    count cap of "locality", a PU may run more programs than ceil(n / P) when a remote program costs more
    than the local ones it queues behind: a weight whose row blocks sit in fewer banks than there are PUs
    (laid out for another kernel's tiles) is read locally by those banks' PUs instead of at the remote
    rate by idle ones."""
    owner = (_owners(owner_bytes, P) if owners is None else owners).copy()
    total = owner_bytes.sum(axis=1)
    cost = total[:, None] / remote_bw - owner_bytes * (1.0 / remote_bw - 1.0 / local_bw)  # [program, PU]
    n = owner.size
    load = np.bincount(owner, weights=cost[np.arange(n), owner], minlength=P)
    for _ in range(n):
        h = int(np.argmax(load))
        mine = np.flatnonzero(owner == h)
        if mine.size <= 1:
            break
        there = load[None, :] + cost[mine]  # [program of h, destination PU]
        there[:, h] = np.inf
        dest = np.argmin(there, axis=1)
        after = np.maximum(load[h] - cost[mine, h], there[np.arange(mine.size), dest])
        i = int(np.argmin(after))
        if after[i] >= load[h] * (1.0 - 1e-9):
            break
        p, d = int(mine[i]), int(dest[i])
        load[h] -= cost[p, h]
        load[d] += cost[p, d]
        owner[p] = d
    return owner


def _link_max(Ax: np.ndarray, By: np.ndarray) -> np.ndarray:
    """Per wave, bytes on the busiest directed mesh link under XY routing, from
    Ax[w, row, c_src, c_dst] (X legs along a row) and By[w, col, r_src, r_dst] (Y legs along a column).
    Link (c -> c+1) carries the legs with c_src <= c < c_dst; prefix/suffix sums give all links at once."""
    W = Ax.shape[0]
    best = np.zeros(W)
    for legs in (Ax, By):
        n = legs.shape[-1]
        if n < 2:
            continue
        fwd = np.cumsum(legs, axis=2)[:, :, :, ::-1].cumsum(axis=3)[:, :, :, ::-1]  # src <= i, dst >= j
        bwd = np.cumsum(legs[:, :, ::-1], axis=2)[:, :, ::-1].cumsum(axis=3)  # src >= i, dst <= j
        i = np.arange(n - 1)
        best = np.maximum(best, fwd[:, :, i, i + 1].max(axis=(1, 2)))
        best = np.maximum(best, bwd[:, :, i + 1, i].max(axis=(1, 2)))
    return best


def _op_rates(spec: TargetSpec) -> tuple[np.ndarray, np.ndarray]:
    """Issue cycles per lane group of each op class (`triton_nmp.opclass`), narrow and 64-bit results."""
    codes = range(max(CLASS_FIELDS) + 1)
    return (np.array([getattr(spec, CLASS_FIELDS[c][0]) for c in codes]),
            np.array([getattr(spec, CLASS_FIELDS[c][1]) for c in codes]))


def _group_time(slot: np.ndarray, slots: int, prog_time: np.ndarray, prog_issue: np.ndarray,
                prog_dma: np.ndarray, spec: TargetSpec) -> np.ndarray:
    """Time of each group of programs that one PU runs at once (item 8 of the module docstring), per
    slot = wave * P + pu: the slowest program alone, or the group's shared pipeline and DMA engine
    with partial overlap, whichever binds."""
    k = np.bincount(slot, minlength=slots)
    issue = np.bincount(slot, weights=prog_issue, minlength=slots)
    issue *= np.maximum(1.0, spec.issue_thread_interval_cycles / np.maximum(k, 1))  # too few threads to fill it
    dma = np.bincount(slot, weights=prog_dma, minlength=slots)
    shared = issue + dma - spec.issue_dma_overlap * np.minimum(issue, dma)
    chain = np.zeros(slots)
    np.maximum.at(chain, slot, prog_time)
    return np.maximum(chain, shared)


def _grid_size(grid: Any) -> int:
    dims = (int(grid),) if isinstance(grid, int | np.integer) else tuple(int(g) for g in grid)
    if not 1 <= len(dims) <= 3 or any(g < 0 for g in dims):
        raise NMPRuntimeError(f"grid must be 1 to 3 non-negative sizes, got {grid!r}")
    return math.prod(dims)


def simulate_timing(
    trace: Any,
    grid: Any,
    args: Sequence[ArgBuffer | None] | None = None,
    spec: TargetSpec | None = None,
    mapping: str = "round_robin",
    seed: int = 0,
    *,
    kernel: str = "",
    owner_trace: Any = None,
) -> LaunchTiming:
    """Simulated time of one launch from its execution trace (see the module docstring for the model).

    `args` holds, per metadata["nmp_args"] entry, an ArgBuffer for pointers (None otherwise; a
    pointer without one is treated as interleaved from its first byte). `kernel` names the kernel
    in error messages. `owner_trace`, when given, is what the owner mappings ("locality", "auto") place
    programs by instead of the run's own records: a bound of the footprint known before the launch
    (`triton_nmp.footprint`), when the records a run issues depend on its data.
    """
    spec = spec or active_target()
    if mapping not in MAPPINGS:
        raise NMPRuntimeError(f"unknown pu_mapping '{mapping}'; choose one of {', '.join(MAPPINGS)}")
    P, R, C = spec.num_pus, spec.mesh_rows, spec.mesh_cols
    n = _grid_size(grid)
    tr = np.asarray(trace if trace is not None else np.zeros((0, TRACE_WORDS)), dtype=np.int64)
    if tr.size == 0:
        tr = tr.reshape(0, TRACE_WORDS)
    if tr.ndim != 2 or tr.shape[1] != TRACE_WORDS:
        raise NMPRuntimeError(f"trace must have shape (records, {TRACE_WORDS}), got {tr.shape}")
    kind, prog = tr[:, 0], tr[:, 1]
    if tr.shape[0] and (prog.min() < 0 or prog.max() >= n):
        raise NMPRuntimeError(f"trace names program {int(prog.max())} outside the grid of {n} programs")
    bad = (kind < KIND_DMA_LOAD) | (kind > KIND_WAIT)
    if bad.any():
        raise NMPRuntimeError(f"trace record kind {int(kind[bad][0])} is unknown; the compiler and simulator disagree")
    if tr.shape[0] and np.any(np.diff(prog) < 0):  # keep program order: records of a program in trace order
        order = np.argsort(prog, kind="stable")
        tr, kind, prog = tr[order], kind[order], prog[order]
    overhead = spec.launch_overhead_us * 1e3 * spec.clock_ghz

    # --- DMA-like records: useful and moved bytes, bytes per bank ---------------------------------
    is_dma = kind <= KIND_SCATTER
    di = np.flatnonzero(is_dma)
    dtr = tr[di]
    d_kind = dtr[:, 0]
    d_prog = dtr[:, 1]
    d_store = (d_kind == KIND_DMA_STORE) | (d_kind == KIND_SCATTER)
    pats = dma_patterns(dtr, d_kind >= KIND_GATHER, args, spec, kernel)
    rec_pat = pats.rec_pat
    useful, moved, rep = pats.useful[rec_pat], pats.moved[rec_pat], pats.replicated[rec_pat]

    banks_t = PatternTable(pats.banks)
    flags = np.zeros(tr.shape[0], dtype=np.int64)
    flags[di] = dtr[:, 7]
    pipelined = is_pipelined(kind, flags)

    # per pattern and PU, sum_b bytes[b] * hops(b, pu): the same for every mapping tried, so computed once
    idx = np.arange(P)
    hops = np.abs(idx[:, None] // C - idx[None, :] // C) + np.abs(idx[:, None] % C - idx[None, :] % C)
    pat_hop_bytes = pats.banks @ hops

    # --- mapping --------------------------------------------------------------------------------
    def _schedule_launch(pu: np.ndarray, mapping: str) -> LaunchTiming:
        """Items 3-7 of the module docstring for one program -> PU mapping."""
        # --- per-record local bytes and hop-weighted remote bytes ---------------------------------
        r_pu = pu[d_prog]
        local = np.where(rep, moved, np.minimum(pats.banks[rec_pat, r_pu], moved))
        hop_bytes = pat_hop_bytes[rec_pat, r_pu]
        remote = moved - local
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_hops = np.where(remote > 1e-9, hop_bytes / remote, 0.0)

        # --- DMA cycles -----------------------------------------------------------------------------
        nhw = np.maximum(1, -(-useful.astype(np.int64) // spec.dma_max_descriptor_bytes))
        batches = -(-nhw // spec.dma_max_in_flight)
        remote_bw = min(spec.remote_read_bytes_per_cycle, spec.noc_link_bytes_per_cycle)
        setup = np.where(d_store, spec.dma_store_setup_cycles, spec.dma_setup_cycles)
        local_bw = np.where(d_store, spec.dma_store_bytes_per_cycle, spec.bank_bytes_per_cycle)
        d_lat = np.where(useful > 0, batches * (setup + spec.noc_hop_cycles * mean_hops), 0.0)
        d_xfer = np.where(useful > 0, local / local_bw + remote / remote_bw, 0.0)
        d_cyc = d_lat + d_xfer

        # --- compute cycles -------------------------------------------------------------------------
        m = tr.shape[0]
        comp = np.zeros(m)
        flops = np.zeros(m)
        vi = np.flatnonzero(kind == KIND_VEC)
        if vi.size:
            el, dt, cls, acc = tr[vi, 2], tr[vi, 4], tr[vi, 5], tr[vi, 6]
            wide = (dt == _DTYPE_FP64) | (dt == _DTYPE_INT64)
            narrow_rate, wide_rate = _op_rates(spec)
            cls = np.where((cls >= 0) & (cls < narrow_rate.size), cls, 0)
            comp[vi] = -(-el // spec.vector_fp32_lanes) * np.where(wide, wide_rate[cls], narrow_rate[cls])
            loop = acc * spec.issue_spm_access_cycles + spec.issue_loop_cycles
            if loop.any():
                comp[vi] += np.where(acc > 0, el * loop, 0.0)
            flops[vi] = el
        mi = np.flatnonzero(kind == KIND_MATMUL)
        mm_dtypes: list[str] = []
        if mi.size:
            macs = tr[mi, 2] * tr[mi, 3] * tr[mi, 4]
            dt = tr[mi, 5]
            rate = np.empty(mi.size)
            for code in np.unique(dt).tolist():
                key, mult = _MATRIX_RATE.get(code, ("fp32", 1))
                rate[dt == code] = spec.peak_macs_per_cycle(key) / mult
                mm_dtypes.append(key)
            comp[mi] = np.ceil(macs / rate)
            flops[mi] = 2.0 * macs
        issue = comp  # pipeline issue cycles at full rate (all threads together)
        comp = comp * spec.issue_thread_interval_cycles  # one thread alone issues once per interval

        # --- program time: a stage = compute records and the prefetched DMAs that follow them ----------
        dma_all = np.zeros(m)
        dma_all[di] = d_cyc
        pre = np.zeros(m, dtype=bool)
        pre[di] = (dtr[:, 7] & FLAG_PREFETCHED) != 0
        is_comp = (kind == KIND_VEC) | (kind == KIND_MATMUL)
        new_seg = np.ones(m, dtype=bool)
        if m:
            new_seg[1:] = (prog[1:] != prog[:-1]) | (kind[1:] == KIND_WAIT) | (is_comp[1:] & pre[:-1])
        new_seg |= is_dma & ~pre  # a synchronous DMA waits for everything before it
        seg = np.cumsum(new_seg) - 1
        seg_first = np.flatnonzero(new_seg)
        stage = np.maximum(
            np.bincount(seg, weights=np.where(pre, dma_all, 0.0), minlength=seg_first.size),
            np.bincount(seg, weights=comp, minlength=seg_first.size),
        )
        serial = np.where(pre, 0.0, dma_all)
        prog_dma = np.bincount(prog, weights=dma_all, minlength=n)
        prog_comp = np.bincount(prog, weights=comp, minlength=n)

        # --- waves: k-th program (group of `issue.threads` programs) of every PU together; bank and link
        # contention per wave ---------------------------------------------------------------------------
        counts = np.bincount(pu, minlength=P)
        order = np.argsort(pu, kind="stable")
        wave = np.empty(n, dtype=np.int64)
        wave[order] = np.arange(n) - (np.cumsum(counts) - counts)[pu[order]]
        threads = spec.issue_threads
        if pipelined and threads == 1:  # the PU's programs as one stream (simulator/grid_stream.py)
            lat, xfer = np.zeros(m), np.zeros(m)
            lat[di], xfer[di] = d_lat, d_xfer
            prog_time, prog_end = stream_program_times(kind, prog, flags, comp, lat, xfer, pu, wave, n, P)
        else:
            prog_end = None
            prog_time = (np.bincount(prog, weights=serial, minlength=n)
                         + np.bincount(prog[seg_first], stage, minlength=n))
        if threads == 1:
            W = int(counts.max()) if n else 0
            pu_time = np.zeros(W * P)
            pu_time[wave * P + pu] = prog_time  # at most one program per (wave, PU)
        else:
            wave //= threads
            W = int(-(-counts.max() // threads)) if n else 0
            pu_time = _group_time(wave * P + pu, W * P, prog_time, np.bincount(prog, weights=issue, minlength=n),
                                  prog_dma, spec)
        wave_pu = pu_time.reshape(W, P).max(axis=1) if W else np.zeros(0)
        # bank bytes per wave; replicated reads come from the reader's own copy
        d_wave, d_pu = wave[d_prog], pu[d_prog]
        npat = pats.useful.size
        ld, st = ~d_store, d_store
        wp = d_wave * P + d_pu
        # Few patterns (regular tilings): count records per (wave, PU, pattern) once and derive every
        # per-wave sum by small matrix products; many patterns: sparse sums per grouping.
        dense = W * P * npat <= max(1 << 22, 8 * rec_pat.size)
        if dense:
            cl = np.bincount(wp[ld] * npat + rec_pat[ld], minlength=W * P * npat).reshape(W, R, C, npat).astype(float)
            cs = np.bincount(wp[st] * npat + rec_pat[st], minlength=W * P * npat).reshape(W, R, C, npat).astype(float)
            served = (cl + cs).sum(axis=(1, 2)) @ pats.banks
        else:
            served = banks_t.aggregate(d_wave, W, rec_pat)
        served += np.bincount(wp, weights=np.where(rep, moved, 0.0), minlength=W * P).reshape(W, P)
        bank_total = served.sum(axis=0)
        wave_bank = served.max(axis=1, initial=0.0) / spec.bank_bytes_per_cycle
        # NoC legs per wave: loads go bank -> PU, stores PU -> bank (XY: row first, then column).
        # Cheap bound first: a row link only carries X legs that start in its row (bank reads served
        # there, PU writes issued there), a column link only Y legs that end in its column. When that
        # bound cannot exceed a wave's PU or bank time, the exact per-link sums are skipped.
        wave_link = np.zeros(W)
        pu_bytes = np.bincount(wp, weights=moved, minlength=W * P).reshape(W, R, C)
        grid_served = served.reshape(W, R, C)
        bound = np.maximum(
            (grid_served.sum(axis=2) + pu_bytes.sum(axis=2)).max(axis=1, initial=0.0),
            (grid_served.sum(axis=1) + pu_bytes.sum(axis=1)).max(axis=1, initial=0.0),
        ) / spec.noc_link_bytes_per_cycle
        links_exact = bool(P > 1 and rec_pat.size and np.any(bound > np.maximum(wave_pu, wave_bank)))
        if links_exact:
            # Ax[w, row, c_src, c_dst]: X legs; By[w, col, r_src, r_dst]: Y legs
            tab = pats.banks.reshape(-1, R, C)
            if dense:
                Ax = (cl.sum(axis=1) @ pats.banks).reshape(W, C, R, C).transpose(0, 2, 3, 1) + cs @ tab.sum(axis=1)
                By = (cl @ tab.sum(axis=2)).transpose(0, 2, 3, 1)
                By = By + (cs.sum(axis=2) @ pats.banks).reshape(W, R, R, C).transpose(0, 3, 1, 2)
            else:
                rp, cp = np.divmod(d_pu, C)
                rows_t, cols_t = PatternTable(tab.sum(axis=2)), PatternTable(tab.sum(axis=1))
                Ax = banks_t.aggregate(d_wave[ld] * C + cp[ld], W * C, rec_pat[ld]).reshape(W, C, R, C)
                Ax = Ax.transpose(0, 2, 3, 1) + cols_t.aggregate(wp[st], W * P, rec_pat[st]).reshape(W, R, C, C)
                By = rows_t.aggregate(wp[ld], W * P, rec_pat[ld]).reshape(W, R, C, R).transpose(0, 2, 3, 1)
                By_st = banks_t.aggregate(d_wave[st] * R + rp[st], W * R, rec_pat[st]).reshape(W, R, R, C)
                By = By + By_st.transpose(0, 3, 1, 2)
            wave_link = _link_max(Ax, By) / spec.noc_link_bytes_per_cycle
        if prog_end is not None and W:
            # PUs run their streams without a barrier: wave w ends when every PU has finished its w-th program
            # and the banks and links have served wave w's bytes after wave w-1 ended (a max-plus recurrence)
            pu_done = np.zeros(W)
            np.maximum.at(pu_done, wave, prog_end)
            shared = np.maximum(wave_bank, wave_link)
            acc = np.cumsum(shared)
            ends = np.maximum(np.maximum.accumulate(pu_done - acc) + acc, acc)
            wave_cycles = np.diff(np.r_[0.0, ends])
            wave_pu = np.maximum(pu_done - np.r_[0.0, ends[:-1]], 0.0)
        else:
            wave_cycles = np.max(np.stack([wave_pu, wave_bank, wave_link]), axis=0) if W else np.zeros(0)
        stacked = np.stack([wave_pu, wave_bank, wave_link]) if W else np.zeros((3, 0))
        wave_limit = np.argmax(stacked, axis=0).astype(np.int8)
        wave_begin = np.cumsum(wave_cycles) - wave_cycles
        device = float(wave_cycles.sum())
        cycles = device + overhead

        # --- totals ---------------------------------------------------------------------------------
        with np.errstate(divide="ignore", invalid="ignore"):
            useful_local = np.where(moved > 0, useful * local / moved, 0.0)
        bytes_local = float(useful_local.sum())
        bytes_remote = float(useful.sum()) - bytes_local
        total_flops = float(flops.sum())
        peak_dtype = max(mm_dtypes or ["fp32"], key=spec.peak_macs_per_cycle)
        start = wave_begin[wave] if n else np.zeros(0)
        if prog_end is not None:
            start = prog_end - prog_time  # the PU's stream, without wave barriers
        return LaunchTiming(
            cycles=cycles,
            seconds=spec.cycles_to_seconds(cycles),
            device_cycles=device,
            overhead_cycles=overhead,
            bytes_local=bytes_local,
            bytes_remote=max(bytes_remote, 0.0),
            bytes_moved=float(moved.sum()),
            flops=total_flops,
            dma_cycles=float(prog_dma.sum()),
            compute_cycles=float(prog_comp.sum()),
            per_pu_busy_cycles=pu_time.reshape(W, P).sum(axis=0) if W else np.zeros(P),
            bank_bytes=bank_total,
            roofline_seconds=spec.roofline_seconds(total_flops, bytes_local, max(bytes_remote, 0.0), peak_dtype),
            program_pu=pu,
            program_start=start,
            program_end=start + prog_time,
            program_dma=prog_dma,
            program_compute=prog_comp,
            wave_cycles=wave_cycles,
            wave_limit=wave_limit,
            mapping=mapping,
            clock_ghz=spec.clock_ghz,
            extra={
                "wave_pu_cycles": wave_pu,
                "wave_bank_cycles": wave_bank,
                "wave_link_cycles": wave_link,  # exact when computed, else 0 (the bound showed links cannot limit)
                "links_exact": links_exact,
                "threads": threads,
            },
        )

    owner_bytes = None
    if mapping in ("locality", "auto"):
        owner_bytes = banks_t.aggregate(d_prog, n, rec_pat) if owner_trace is None else \
            _owner_bytes(owner_trace, n, args, spec, kernel)
    if mapping != "auto":
        return _schedule_launch(_map_programs(mapping, n, P, owner_bytes, seed), mapping)
    # auto: owner-computes with balanced load, kept only when it is faster than round robin (item 6)
    rr = _map_programs("round_robin", n, P, None, seed)
    owner = _map_programs("locality", n, P, owner_bytes, seed)
    best = _schedule_launch(rr, mapping)
    best.extra["auto_choice"] = "round_robin"
    tried = [rr]
    candidates = [(owner, "locality")]
    if n <= UNCAPPED_MAX_PROGRAMS_PER_PU * P and owner_bytes is not None and owner_bytes.size:
        remote_bw = min(spec.remote_read_bytes_per_cycle, spec.noc_link_bytes_per_cycle)
        owners = _owners(owner_bytes, P)
        candidates.append((owners, "owner"))
        candidates.append((_weighted_locality(owner_bytes, P, spec.bank_bytes_per_cycle, remote_bw, owners),
                           "weighted locality"))
    for pu, name in candidates:
        if any(np.array_equal(pu, t) for t in tried):
            continue
        tried.append(pu)
        other = _schedule_launch(pu, mapping)
        if other.cycles < best.cycles:
            best = other
            best.extra["auto_choice"] = name
    return best




def _owner_bytes(trace: Any, n: int, args: Any, spec: TargetSpec, kernel: str) -> np.ndarray:
    """Bytes per (program, bank) of the DMA-like records of `trace` (the owner mappings' input)."""
    tr = np.asarray(trace, dtype=np.int64).reshape(-1, TRACE_WORDS)
    dtr = tr[tr[:, 0] <= KIND_SCATTER]
    pats = dma_patterns(dtr, dtr[:, 0] >= KIND_GATHER, args, spec, kernel)
    return PatternTable(pats.banks).aggregate(dtr[:, 1], n, pats.rec_pat)


def simulate_launch(
    metadata: Any, grid: Any, trace: Any, slots: Sequence[int], spec: TargetSpec | None = None
) -> LaunchTiming:
    """Convenience for tests and tools: placements from the marshalled slots, `pu_mapping` and the
    kernel name from the metadata."""
    mapping = str(metadata_value(metadata, "pu_mapping", "round_robin") or "round_robin")
    name = str(metadata_value(metadata, "name", "") or "")
    return simulate_timing(
        trace, grid, arg_buffers_from_slots(metadata, slots), spec, mapping, kernel=f"kernel '{name}'" if name else ""
    )
