"""Program times of a launch pipelined across its grid loop (`abi.FLAG_GRID_PIPELINED`, decided by
backend/grid_pipeline.py): each PU's programs run as one stream, with a DMA queue that overlaps them.

Item 5 of `simulator.timing` charges a program on its own: synchronous DMAs and compute one after the
other, prefetched loads overlapped with the compute before them. In a pipelined kernel the compiled grid
loop also issues the loads that lead the PU's next program (before any compute or store of that
program) while the current one runs, into the second copy of their tiles, and posts its stores without
waiting for them. Modelled per PU, in program order (the mapping's order: wave by wave):

* one DMA queue: a record issued at time `i` with setup latency `L` (its descriptor batches'
  `dma_setup_cycles` + hops, as in item 3) and transfer time `X` (moved bytes over the bank or remote
  rate) completes at  c = max(i + L, q) + X,  q = the completion of the record queued before it (the
  setup of a descriptor overlaps the transfers still in flight; transfers go one at a time);
* the program's instruction stream: compute advances it; a synchronous DMA waits for the prefetches
  issued before it and for its own completion (a run of synchronous loads with nothing
  between them is issued at once and waited for after the last: the kernel's addresses do not depend on
  loaded data); a prefetched load (item 5: it feeds the next compute segment) is issued where the
  compute run before it starts, when the buffer it fills is free again (two buffers), and that next
  segment waits for it; a posted store is issued and not waited for, but a compute segment waits for the
  store two before the last (the stored tiles are double-buffered); a WAIT waits for every prefetch;
  a leading load is issued when the program two before it on the PU has finished (its tile copy is
  free again), and the program waits for it before its first other record;
* the PU is done when its last program is and its queue has drained.

A program's time is the advance of its PU's finish time over the previous program's. The wave model
(item 7) then drops its barrier: wave w ends when every PU has finished its w-th program and the banks
and links have served wave w's bytes after wave w-1 ended. Without queued work a record costs exactly
what item 3 charges, so the model only differs where the pipeline overlaps work. The loop runs over
the positions of the per-PU streams (consecutive compute records merged), vectorised over PUs.
"""

from __future__ import annotations

import numpy as np

from triton_nmp.abi import (
    FLAG_GRID_PIPELINED,
    FLAG_PREFETCHED,
    KIND_DMA_LOAD,
    KIND_DMA_STORE,
    KIND_MATMUL,
    KIND_SCATTER,
    KIND_VEC,
    KIND_WAIT,
)

__all__ = ["is_pipelined", "stream_program_times"]

# _BATCH: a sync load another one follows; _PRE_NOW: a prefetched load no compute precedes in its program
_COMP, _SYNC, _PRE, _POST, _LEAD, _BATCH, _PRE_NOW, _WAIT, _NOP = range(9)


def is_pipelined(kind: np.ndarray, flags: np.ndarray) -> bool:
    """Whether the trace comes from a kernel pipelined across its grid loop."""
    dma = kind <= KIND_SCATTER
    return bool(dma.any() and np.any((flags[dma] & FLAG_GRID_PIPELINED) != 0))


def stream_program_times(kind: np.ndarray, prog: np.ndarray, flags: np.ndarray, comp: np.ndarray,
                         lat: np.ndarray, xfer: np.ndarray, pu: np.ndarray, wave: np.ndarray,
                         n: int, P: int) -> tuple[np.ndarray, np.ndarray]:
    """Per program: the advance of its PU's finish time, and that finish time (cycles from the launch's
    start). Records sorted by program, in trace order; per record `comp` compute cycles, `lat`/`xfer` DMA
    setup and transfer cycles."""
    m = kind.size
    idx = np.arange(m)
    is_comp = (kind == KIND_VEC) | (kind == KIND_MATMUL)
    grid = (flags & FLAG_GRID_PIPELINED) != 0
    pre = (flags & FLAG_PREFETCHED) != 0
    is_load, is_store = kind == KIND_DMA_LOAD, kind == KIND_DMA_STORE
    # leading loads: a program's loads before its first other record
    cand = is_load & grid & ~pre
    non = (~cand).astype(np.int64)
    excl = np.cumsum(non) - non
    first = np.searchsorted(prog, np.arange(n))  # records are sorted by program
    lead = cand & (excl == excl[first[prog]])
    typ = np.full(m, _SYNC, dtype=np.int64)
    typ[is_comp] = _COMP
    typ[is_load & pre] = _PRE
    typ[is_store & grid] = _POST
    typ[lead] = _LEAD
    typ[kind == KIND_WAIT] = _WAIT
    # a synchronous load followed by another one: both are issued, the last is waited for
    nxt_sync_load = np.r_[(typ[1:] == _SYNC) & is_load[1:] & (prog[1:] == prog[:-1]), False] if m else typ
    typ[(typ == _SYNC) & is_load & nxt_sync_load] = _BATCH
    # a prefetched load is issued where the compute run before it starts: it moves in front of that run
    run_start = is_comp & ~np.r_[False, is_comp[:-1] & (prog[1:] == prog[:-1])] if m else is_comp
    last_run = np.maximum.accumulate(np.where(run_start, idx, -1)) if m else idx
    has_run = last_run >= first[prog]
    typ[(typ == _PRE) & ~has_run] = _PRE_NOW
    key = np.where((typ == _PRE) & has_run, 2 * last_run - 1, 2 * idx)
    # stream order per PU: program w's leading loads right before program w-1's other records
    w = wave[prog]
    slot = np.where(lead, np.maximum(w - 1, 0), w)
    phase = np.where(lead, np.where(w > 0, 1, 0), 2)
    rpu = pu[prog]
    order = np.lexsort((idx, key, phase, slot, rpu))
    typ, rprog, rpu = typ[order], prog[order], rpu[order]
    c, L, X = comp[order], lat[order], xfer[order]
    # merge consecutive compute records of one program into one segment
    cont = np.zeros(m, dtype=bool)
    if m:
        cont[1:] = (typ[1:] == _COMP) & (typ[:-1] == _COMP) & (rprog[1:] == rprog[:-1])
    g = np.cumsum(~cont) - 1
    keep = ~cont
    c = np.bincount(g, weights=c, minlength=int(g[-1]) + 1 if m else 0)
    typ, rprog, rpu, L, X = typ[keep], rprog[keep], rpu[keep], L[keep], X[keep]
    k = typ.size
    body = typ != _LEAD
    prev_body = np.zeros(k, dtype=bool)
    same = np.zeros(k, dtype=bool)
    if k:
        same[1:] = rprog[1:] == rprog[:-1]
        prev_body[1:] = body[:-1] & same[1:]
    body_start = body & ~prev_body
    last_body = np.zeros(k, dtype=bool)
    if k:
        nxt_body = np.r_[body[1:] & (rprog[1:] == rprog[:-1]), False]
        last_body = body & ~nxt_body
    # run each distinct PU stream once (PUs with equal costs in equal order finish alike)
    rw = wave[rprog]
    bounds = np.r_[0, np.cumsum(np.bincount(rpu, minlength=P))]
    ords = np.lexsort((wave, pu))  # programs by PU, in wave order
    pbounds = np.r_[0, np.cumsum(np.bincount(pu, minlength=P))]
    cols = (typ, c, L, X, body_start, last_body, rw)
    runs: dict[bytes, tuple[list[float], list[float], float]] = {}
    end, hc, finish = np.full(n, -1.0), np.zeros(n), np.zeros(P)
    for p in range(P):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        if lo == hi:
            continue
        progs = ords[pbounds[p]:pbounds[p + 1]]
        key = b"".join(x[lo:hi].tobytes() for x in cols) + progs.size.to_bytes(8, "little")
        if key not in runs:
            runs[key] = _run_stream(*(x[lo:hi].tolist() for x in cols), progs.size)
        e_w, h_w, finish[p] = runs[key]
        end[progs], hc[progs] = e_w, h_w
    # programs in PU order: a program's end is at least its leading loads' and the previous program's
    e = np.maximum(end, hc)[ords]
    pu_o = pu[ords]
    last = np.r_[pu_o[1:] != pu_o[:-1], True] if n else np.zeros(0, dtype=bool)
    e[last] = np.maximum(e[last], finish[pu_o[last]])
    e = _segmented_cummax(e, pu_o)
    start = np.r_[0.0, e[:-1]] if n else e
    newpu = np.r_[True, pu_o[1:] != pu_o[:-1]] if n else np.zeros(0, dtype=bool)
    start[newpu] = 0.0
    out, ends = np.empty(n), np.empty(n)
    out[ords] = e - start
    ends[ords] = e
    return out, ends


def _run_stream(typ: list, c: list, L: list, X: list, body_start: list, last_body: list, rw: list,
                waves: int) -> tuple[list[float], list[float], float]:
    """One PU's stream (module docstring): end of each program's records and of its leading loads, by
    wave, and the PU's finish time."""
    t = q = pend = pend_next = sprev = slast = 0.0
    hc, end = [0.0] * waves, [-1.0] * waves
    for ty, cc, ll, xx, bs, lb, w in zip(typ, c, L, X, body_start, last_body, rw):
        if bs and hc[w] > t:  # a program's first other record waits for its leading loads
            t = hc[w]
        if ty == _COMP:  # a compute segment waits for its prefetches; those issued before it are the next's
            if pend > t:
                t = pend
            if sprev > t:
                t = sprev
            t += cc
            pend, pend_next = pend_next, 0.0
        elif ty == _WAIT:
            t = max(t, pend, pend_next)
        elif ty != _NOP:
            if (ty == _SYNC or ty == _BATCH) and pend > t:
                t = pend
            done = t + ll
            if q > done:
                done = q
            done += xx
            q = done
            if ty == _SYNC:
                t = done
            elif ty == _PRE:
                if done > pend_next:
                    pend_next = done
            elif ty == _PRE_NOW:
                if done > pend:
                    pend = done
            elif ty == _POST:
                sprev, slast = slast, done
            elif ty == _LEAD and done > hc[w]:
                hc[w] = done
        if lb:
            end[w] = t
    return end, hc, max(t, q, pend, pend_next)


def _segmented_cummax(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running maximum of `x` restarting where `seg` changes (x >= 0, seg sorted)."""
    if not x.size:
        return x
    span = float(x.max()) + 1.0
    off = (np.cumsum(np.r_[True, seg[1:] != seg[:-1]]) - 1) * span
    return np.maximum.accumulate(x + off) - off
