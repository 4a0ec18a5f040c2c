"""The contract between the compiled kernel and the simulator, in one place.

The compiler (`backend/codegen*.py`, `backend/trace_predict.py`) writes these numbers into generated
code and predicted traces; the simulator (`simulator/runtime.py`, `simulator/timing.py`) reads them
back. Change a value here and both sides change together; a kernel compiled against other values is
not loadable (the compiler's source hash is part of Triton's cache key).

Entry point of a compiled kernel::

    int64_t nmp_grid_<kernel>(int64_t *slots, int64_t gx, int64_t gy, int64_t gz, int64_t *ctx)

`ctx` is CTX_WORDS zeroed int64 words:

    [CTX_STATUS]                 status (STATUS_*), 0 on success
    [CTX_SITE]                   index of the failing op in metadata["nmp_sites"]
    [CTX_ARG]                    index of the argument in metadata["nmp_args"]
    [CTX_LO], [CTX_HI]           offending byte range [lo, hi) (or assertion operands)
    [CTX_PID .. CTX_PID + 2]     program id (x, y, z) of the failing program
    [COUNTERS_BASE + i]          counter COUNTERS[i] (work done, summed over programs)
    [CTX_TRACE_PTR]              malloc'ed array of TRACE_WORDS-word trace records (the runtime frees it)
    [CTX_TRACE_LEN]              records written
    [CTX_TRACE_CAP]              capacity of the array, in records (at most MAX_TRACE_RECORDS)
    [CTX_TRACE_ON]               non-zero: record the trace
    [CTX_WD_*]                   the watchdog's words (simulator/watchdog.py documents them)
    [CTX_SPILL_PTR]              the spill area of the running program (its grid entry allocates it)

A trace record is [kind, program, f0, ..., f5] (TRACE_WORDS words), in program order:

    KIND_DMA_LOAD/STORE   [arg, first byte, rows, row bytes, row stride, flags]   (flags: FLAG_*;
                          arg SPILL_ARG: the program's spill area; a column-major box is recorded by
                          its columns, a load's stride-0 dimensions once, plus a KIND_VEC record that
                          rearranges the box in the scratchpad, see REARRANGE_ACCESSES)
    KIND_GATHER/SCATTER   [arg, 0, elements, element bytes, argument span]
    KIND_VEC              [elements, reduce-like (0/1), dtype code, op class, scratchpad accesses per
                           element of the loop it opens (0: inside an already charged fused loop)]
                          (op classes: triton_nmp.opclass; accesses: backend/loop_cost.py)
    KIND_MATMUL           [M, N, K, dtype code of the inputs]
    KIND_WAIT             [] (ends a pipeline stage)
"""

from __future__ import annotations

from typing import Any

# -- context block -----------------------------------------------------------------------------------
CTX_WORDS = 80
CTX_STATUS, CTX_SITE, CTX_ARG, CTX_LO, CTX_HI, CTX_PID = 0, 1, 2, 3, 4, 5
COUNTERS_BASE = 8
CTX_TRACE_PTR, CTX_TRACE_LEN, CTX_TRACE_CAP, CTX_TRACE_ON = 48, 49, 50, 51
MAX_COUNTERS = CTX_TRACE_PTR - COUNTERS_BASE
# The watchdog (simulator/watchdog.py): ticks left before the next check, loop iterations checked so far,
# host monotonic deadline (ns, 0: none), when to look at signals next (ns), whether to (main thread),
# a stop request, the simulated-cycle limit and its cost coefficients (doubles), a parked exception.
CTX_WD_TICKS, CTX_WD_ITERS, CTX_WD_DEADLINE_NS, CTX_WD_NEXT_SIGNAL_NS, CTX_WD_SIGNALS, CTX_WD_STOP = range(52, 58)
CTX_WD_CYCLE_LIMIT, CTX_WD_C_BYTE, CTX_WD_C_MAC, CTX_WD_C_VEC, CTX_WD_C_ITER = range(58, 63)
CTX_WD_EXC = 64  # three words: type, value, traceback (owned references, PyErr_Fetch)
CTX_SPILL_PTR = 67  # the spill area of the running program (allocated by the grid entry, freed at its end)
WATCHDOG_TICKS = 1024  # back-edges and programs between two checks
SIGNAL_CHECK_NS = 50_000_000  # at most 20 GIL acquisitions per second to look for Ctrl-C

# Counters the compiled code accumulates in ctx[COUNTERS_BASE:], in this order (metadata["nmp_counters"]).
COUNTERS = ("programs", "dma_loads", "dma_load_bytes", "dma_stores", "dma_store_bytes", "gather_elems",
            "scatter_elems", "vec_elems", "macs", "spill_bytes")
# DMA records and error reports name the spill area (tiles that did not fit the scratchpad, in the running
# PU's own bank) with this argument index; its bytes are always local to the PU that moves them.
SPILL_ARG = -1

# -- status codes --------------------------------------------------------------------------------------
STATUS_OK, STATUS_OUT_OF_BOUNDS, STATUS_ASSERT, STATUS_NO_MEMORY = 0, 1, 2, 3
STATUS_TIMEOUT, STATUS_CYCLE_LIMIT, STATUS_INTERRUPTED = 4, 5, 6  # the watchdog stopped the launch

# -- execution trace -----------------------------------------------------------------------------------
TRACE_WORDS = 8
MAX_TRACE_RECORDS = 1 << 24  # 1 GiB of trace; beyond it the launch fails with STATUS_NO_MEMORY
KIND_DMA_LOAD, KIND_DMA_STORE, KIND_GATHER, KIND_SCATTER, KIND_VEC, KIND_MATMUL, KIND_WAIT = range(1, 8)
FLAG_PREFETCHED = 1  # DMA flags bit 0: issued one pipeline stage ahead (multi-buffered load)
# A DMA box moved transposed (column-major: dimension -2 contiguous, moved by columns) or not whole (a load's
# stride-0 dimensions, a broadcast, read once) is rearranged in the scratchpad by the vector unit: a KIND_VEC
# record of the box's elements, op class ALU, one load and one store per element.
REARRANGE_ACCESSES = 2
# DMA flags bit 1: the kernel is pipelined across its grid loop (backend/grid_pipeline.py): a load that leads its
# program was issued by the PU's previous program, a store is posted (the program does not wait for it)
FLAG_GRID_PIPELINED = 2

# Element type of a vector or matrix record (pointers are 64-bit integers).
DTYPE_CODES = {"f32": 0, "f16": 1, "bf16": 2, "f64": 3, "i8": 4, "i16": 5, "i32": 6, "i64": 7, "i1": 8, "ptr": 7}


def metadata_value(metadata: Any, key: str, default: Any = None) -> Any:
    """A key of a compiled kernel's metadata, which arrives as Triton's namedtuple (a fresh compile) or as a
    dict (loaded from the cache's JSON, or built by tools)."""
    if isinstance(metadata, dict):
        return metadata.get(key, default)
    return getattr(metadata, key, default)


def dtype_code(elem: str) -> int:
    """The trace's code of an element type name (f32's code for types without one of their own)."""
    return DTYPE_CODES.get(elem, 0)


# -- program -> PU mappings (the `pu_mapping` compile option, applied by the timing model) ---------------
PU_MAPPINGS: tuple[str, ...] = ("auto", "round_robin", "blocked", "locality", "random")
