"""Our Triton versions of PrIM workloads, run on a target and re-timed cheaply for validation.

PrIM (Gomez-Luna et al., "Benchmarking a New Paradigm", IEEE Access 2022; CMU-SAFARI/prim-benchmarks)
is the benchmark suite real UPMEM hardware was measured with. The kernels here are written from its
descriptions, not from its code, in the way PrIM organises the work: one program per hardware thread
(tasklet), each streaming its contiguous share of the DPU's data through the scratchpad in 1 KiB
blocks (PrIM's BL=10), every tensor in its own DPU's bank (`place(..., "blocked")`, `pu_mapping=
"blocked"`), GEMV's vector replicated in every bank. Work PrIM's host does between kernels (the scan
of per-DPU totals) is done here on the host too and is not part of the kernel time.

    VA        c = a + b                       uint32 (int32 bits)   1 kernel
    RED       sum(x)                          uint64                1 kernel (per-thread partial sums)
    GEMV      y = A @ x, A m x 64             uint32                1 kernel
    SCAN-SSA  inclusive scan: block scans, add  uint64              2 kernels
    SCAN-RSS  inclusive scan: reduce, scan      uint64              2 kernels

`run_workload` executes a workload functionally (results checked against torch) and keeps each
launch's execution trace, so `WorkloadRun.seconds(spec)` re-times it for any target that differs only
in timing fields in milliseconds: what `benchmarks/validation.py` and `triton-nmp calibrate-target`
need. The table of measured rows lives in `triton_nmp/data/upmem_prim.csv` (see `load_table`).
"""

from __future__ import annotations

import csv
import dataclasses
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

from triton_nmp.errors import NMPError
from triton_nmp.target import TargetSpec, active_target, set_active_target

__all__ = ["MeasuredRow", "WORKLOADS", "WorkloadRun", "load_table", "machine", "run_workload", "UPMEM_TABLE_PATH"]

UPMEM_TABLE_PATH = Path(__file__).resolve().parent / "data" / "upmem_prim.csv"
BLOCK_BYTES = 1024  # PrIM's MRAM<->WRAM transfer size (BL=10)
GEMV_COLS = 64  # the table's GEMV: m x 64 matrix (uPIMulator's GEMV configuration)
GEMV_ROWS = 4  # rows per step: 4 x 64 x 4 B = 1 KiB


class PrimError(NMPError):
    """A workload name, size or table row that this module cannot run."""


# ------------------------------------------------------------------------------------- kernels


@triton.jit
def va_kernel(a_ptr, b_ptr, c_ptr, per_prog, BLOCK: tl.constexpr):
    base = tl.program_id(0) * per_prog
    for start in range(0, per_prog, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        tl.store(c_ptr + offs, tl.load(a_ptr + offs) + tl.load(b_ptr + offs))


@triton.jit
def red_kernel(x_ptr, out_ptr, per_prog, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * per_prog
    acc = tl.sum(tl.load(x_ptr + base + tl.arange(0, BLOCK)), axis=0)
    for start in range(BLOCK, per_prog, BLOCK):
        acc += tl.sum(tl.load(x_ptr + base + start + tl.arange(0, BLOCK)), axis=0)
    tl.store(out_ptr + pid, acc)


@triton.jit
def gemv_kernel(a_ptr, x_ptr, y_ptr, rows_per_prog, N: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + cols)
    base = tl.program_id(0) * rows_per_prog
    for r in range(0, rows_per_prog, ROWS):
        rows = base + r + tl.arange(0, ROWS)
        a = tl.load(a_ptr + rows[:, None] * N + cols[None, :])
        tl.store(y_ptr + rows, tl.sum(a * x[None, :], axis=1))


@triton.jit
def block_scan_kernel(x_ptr, y_ptr, sums_ptr, total_ptr, per_prog, BLOCK: tl.constexpr):
    """SSA's first pass: an inclusive scan of every block on its own; sums[block] = its last prefix
    (read back from memory: Triton has no cheaper way to take one element out of a tile), and
    total[pid] = the sum of the program's share."""
    pid = tl.program_id(0)
    base = pid * per_prog
    total = tl.load(sums_ptr + base // BLOCK) * 0
    for start in range(0, per_prog, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), axis=0))
        last = tl.load(y_ptr + base + start + BLOCK - 1)
        tl.store(sums_ptr + (base + start) // BLOCK, last)
        total += last
    tl.store(total_ptr + pid, total)


@triton.jit
def block_add_kernel(y_ptr, sums_ptr, offset_ptr, per_prog, BLOCK: tl.constexpr):
    """SSA's second pass: every block gets the sum of everything before it (the program's offset
    from the host plus its earlier blocks' sums)."""
    pid = tl.program_id(0)
    base = pid * per_prog
    carry = tl.load(offset_ptr + pid)
    for start in range(0, per_prog, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(y_ptr + offs) + carry)
        carry += tl.load(sums_ptr + (base + start) // BLOCK)


@triton.jit
def carry_scan_kernel(x_ptr, y_ptr, offset_ptr, per_prog, BLOCK: tl.constexpr):
    """RSS's second pass: an inclusive scan of the program's share starting from its offset; the
    running carry is the last prefix of the previous block, read back."""
    pid = tl.program_id(0)
    base = pid * per_prog
    carry = tl.load(offset_ptr + pid)
    for start in range(0, per_prog, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.cumsum(tl.load(x_ptr + offs), axis=0) + carry)
        carry = tl.load(y_ptr + base + start + BLOCK - 1)


# ---------------------------------------------------------------------------------- capturing


@dataclass
class Launch:
    """One kernel launch as the timing model needs it again: trace, grid, argument placements."""

    kernel: str
    grid: tuple[int, int, int]
    trace: Any
    buffers: list[Any]
    mapping: str


@dataclass
class WorkloadRun:
    """A workload executed once on `dpus` PUs of a target; re-timed by `seconds` for other targets."""

    workload: str
    dpus: int
    elements: int
    launches: list[Launch] = field(default_factory=list)

    def seconds(self, spec: TargetSpec) -> float:
        """Simulated kernel time (launch overheads included) of the captured launches on `spec`
        restricted to this run's DPUs. `spec` may differ from the run's target in timing fields only:
        the traces are not re-recorded."""
        from triton_nmp.simulator.timing import simulate_timing

        target = machine(spec, self.dpus)
        return sum(simulate_timing(la.trace, la.grid, la.buffers, target, la.mapping, kernel=la.kernel).seconds
                   for la in self.launches)


def machine(spec: TargetSpec, dpus: int) -> TargetSpec:
    """`spec` restricted to `dpus` PUs in one row (a UPMEM allocation of `dpus` DPUs)."""
    if not 1 <= dpus <= spec.num_pus:
        raise PrimError(f"{dpus} DPUs requested; target {spec.name} has {spec.num_pus} PUs")
    return dataclasses.replace(spec, mesh_rows=1, mesh_cols=dpus)


def _launch(run: WorkloadRun, kernel: Any, programs: int, **args: Any) -> None:
    from triton_nmp.driver.device import clock
    from triton_nmp.simulator.timing import arg_buffers

    clock.clear_memo()  # a repeated launch must execute (and so record its trace), not be replayed
    compiled = kernel[(programs,)](**args, pu_mapping="blocked", num_stages=1)
    result = compiled.run.last_result
    if result is None or result.trace is None:
        raise PrimError(f"kernel '{kernel.__name__}' left no execution trace (is TRITON_NMP_TRACE=0 set?)")
    tensors = {k: v for k, v in args.items() if hasattr(v, "data_ptr")}
    run.launches.append(Launch(kernel.__name__, (programs, 1, 1), result.trace.copy(),
                               arg_buffers(compiled.metadata, tensors), "blocked"))


def _check(name: str, got: Any, want: Any) -> None:
    import torch

    if not torch.equal(got, want):
        bad = int((got != want).sum())
        raise PrimError(f"{name}: {bad} of {want.numel()} results differ from torch; the simulator is wrong")


# ---------------------------------------------------------------------------------- workloads


def _per_program(elements: int, programs: int, block: int, what: str) -> int:
    if elements % (programs * block):
        raise PrimError(f"{what}: {elements} elements do not split into {programs} programs of whole "
                        f"{block}-element blocks; use a multiple of {programs * block}")
    return elements // programs


def _va(run: WorkloadRun, programs: int, gen: Any) -> None:
    import torch

    from triton_nmp.placement import place

    n, block = run.elements, BLOCK_BYTES // 4
    per = _per_program(n, programs, block, "VA")
    a, b = (place(torch.randint(0, 1 << 20, (n,), dtype=torch.int32, generator=gen), "blocked") for _ in "ab")
    c = place(torch.empty_like(a), "blocked")
    _launch(run, va_kernel, programs, a_ptr=a, b_ptr=b, c_ptr=c, per_prog=per, BLOCK=block)
    _check("VA", c, a + b)


def _red(run: WorkloadRun, programs: int, gen: Any) -> None:
    import torch

    from triton_nmp.placement import place

    n, block = run.elements, BLOCK_BYTES // 8
    per = _per_program(n, programs, block, "RED")
    x = place(torch.randint(0, 1 << 20, (n,), dtype=torch.int64, generator=gen), "blocked")
    partial = place(torch.empty(programs, dtype=torch.int64), "blocked")
    _launch(run, red_kernel, programs, x_ptr=x, out_ptr=partial, per_prog=per, BLOCK=block)
    _check("RED", partial.sum().reshape(1), x.sum().reshape(1))


def _gemv(run: WorkloadRun, programs: int, gen: Any) -> None:
    import torch

    from triton_nmp.placement import place

    m = run.elements
    rows = _per_program(m, programs, GEMV_ROWS, "GEMV")
    a = place((torch.arange(m * GEMV_COLS, dtype=torch.int32) % 50).reshape(m, GEMV_COLS), "blocked")
    x = place(torch.arange(GEMV_COLS, dtype=torch.int32) % 50, "replicated")
    y = place(torch.empty(m, dtype=torch.int32), "blocked")
    _launch(run, gemv_kernel, programs, a_ptr=a, x_ptr=x, y_ptr=y, rows_per_prog=rows, N=GEMV_COLS,
            ROWS=GEMV_ROWS)
    _check("GEMV", y, (a.long() @ x.long()).to(torch.int32))


def _scan_inputs(run: WorkloadRun, programs: int, gen: Any) -> tuple[Any, Any, int, int]:
    import torch

    from triton_nmp.placement import place

    n, block = run.elements, BLOCK_BYTES // 8
    per = _per_program(n, programs, block, run.workload)
    x = place(torch.randint(0, 1 << 20, (n,), dtype=torch.int64, generator=gen), "blocked")
    y = place(torch.empty_like(x), "blocked")
    return x, y, per, block


def _exclusive(totals: Any) -> Any:
    """The host's step between the kernels: exclusive scan of the per-program totals, replicated."""
    import torch

    from triton_nmp.placement import place

    return place(torch.cumsum(totals, 0) - totals, "replicated")


def _scan_ssa(run: WorkloadRun, programs: int, gen: Any) -> None:
    import torch

    from triton_nmp.placement import place

    x, y, per, block = _scan_inputs(run, programs, gen)
    sums = place(torch.empty(run.elements // block, dtype=torch.int64), "blocked")
    totals = place(torch.empty(programs, dtype=torch.int64), "blocked")
    _launch(run, block_scan_kernel, programs, x_ptr=x, y_ptr=y, sums_ptr=sums, total_ptr=totals, per_prog=per,
            BLOCK=block)
    _launch(run, block_add_kernel, programs, y_ptr=y, sums_ptr=sums, offset_ptr=_exclusive(totals), per_prog=per,
            BLOCK=block)
    _check("SCAN-SSA", y, torch.cumsum(x, 0))


def _scan_rss(run: WorkloadRun, programs: int, gen: Any) -> None:
    import torch

    from triton_nmp.placement import place

    x, y, per, block = _scan_inputs(run, programs, gen)
    totals = place(torch.empty(programs, dtype=torch.int64), "blocked")
    _launch(run, red_kernel, programs, x_ptr=x, out_ptr=totals, per_prog=per, BLOCK=block)
    _launch(run, carry_scan_kernel, programs, x_ptr=x, y_ptr=y, offset_ptr=_exclusive(totals), per_prog=per,
            BLOCK=block)
    _check("SCAN-RSS", y, torch.cumsum(x, 0))


WORKLOADS: dict[str, Callable[[WorkloadRun, int, Any], None]] = {
    "VA": _va, "RED": _red, "GEMV": _gemv, "SCAN-SSA": _scan_ssa, "SCAN-RSS": _scan_rss,
}


def run_workload(workload: str, dpus: int, elements: int, spec: TargetSpec | str | None = None) -> WorkloadRun:
    """Run `workload` on `elements` (GEMV: matrix rows) spread over `dpus` PUs of `spec` (default: the
    active target), one program per hardware thread (`issue.threads`); results are checked against
    torch. The active target is restored afterwards."""
    import torch

    if workload not in WORKLOADS:
        raise PrimError(f"unknown workload '{workload}'; expected one of {', '.join(WORKLOADS)}")
    base = TargetSpec.load(spec) if isinstance(spec, str) else (spec or active_target())
    target = machine(base, dpus)
    run = WorkloadRun(workload, dpus, elements)
    previous = set_active_target(target)
    try:
        WORKLOADS[workload](run, dpus * target.issue_threads, torch.Generator().manual_seed(0))
    finally:
        set_active_target(previous)
    return run


# -------------------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class MeasuredRow:
    """One measured kernel time: `elements` in total over `dpus` DPUs (GEMV: matrix rows)."""

    workload: str
    dpus: int
    elements: int
    ms: float
    source: str = ""

    @property
    def label(self) -> str:
        return f"{self.workload} {self.dpus} DPU{'s' if self.dpus > 1 else ''} {self.elements:,}"


def load_table(path: str | Path = UPMEM_TABLE_PATH) -> list[MeasuredRow]:
    """Measured rows from a CSV (columns workload, dpus, elements, ms[, source]) or a TOML file
    (`[[row]]` tables with the same keys); a bad row raises an error naming the file and row."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PrimError(f"cannot read table '{path}': {exc}") from None
    if path.suffix == ".toml":
        try:
            raw = tomllib.loads(text).get("row", [])
        except tomllib.TOMLDecodeError as exc:
            raise PrimError(f"table '{path}' is not valid TOML: {exc}") from None
    else:
        raw = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    rows = []
    for i, r in enumerate(raw, 1):
        try:
            row = MeasuredRow(str(r["workload"]).strip(), int(r["dpus"]), int(r["elements"]), float(r["ms"]),
                              str(r.get("source") or "").strip())
        except (KeyError, TypeError, ValueError) as exc:
            raise PrimError(f"table '{path}' row {i}: {exc!r}; expected workload, dpus, elements, ms") from None
        if row.workload not in WORKLOADS or row.dpus < 1 or row.elements < 1 or not row.ms > 0:
            raise PrimError(f"table '{path}' row {i} ({row.label}, {row.ms} ms): expected a workload of "
                            f"{', '.join(WORKLOADS)}, dpus >= 1, elements >= 1 and ms > 0")
        rows.append(row)
    if not rows:
        raise PrimError(f"table '{path}' has no rows")
    return rows
