"""Bytes to banks: which bank serves each byte a launch's DMA-like trace records move (items 1 and 2 of
the timing model, `simulator/timing.py`: runs mapped to banks by the argument's `Placement`, moved
bytes rounded to whole granules from aligned addresses; the spill area and replicated tensors are local
to the PU that moves the bytes).

Records with equal access patterns move the same bytes per bank, so `dma_patterns` computes each
pattern once and `PatternTable` sums the patterns' vectors per program, PU or wave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from triton_nmp.abi import KIND_DMA_STORE, KIND_GATHER, KIND_SCATTER, SPILL_ARG, TRACE_WORDS
from triton_nmp.errors import NMPRuntimeError
from triton_nmp.placement_registry import Placement
from triton_nmp.target import TargetSpec

__all__ = ["ArgBuffer", "DmaPatterns", "PatternTable", "dma_patterns", "footprint_bank_bytes"]


@dataclass(frozen=True)
class ArgBuffer:
    """One pointer argument of a launch: its host range and the placement of the bytes."""

    name: str
    data_ptr: int
    nbytes: int
    placement: Placement | None  # None: the default (interleaved from the argument's first byte)

    @property
    def base(self) -> int:
        """Position of the argument's first byte inside its placed range."""
        return self.data_ptr - self.placement.origin if self.placement is not None else 0


def _expand(rows: np.ndarray, period: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold each record's rows by the period of their pattern: (record, row j, weight) for
    j < min(rows, period), weight = how many rows share row j's pattern."""
    n_exp = np.minimum(rows, period)
    rec = np.repeat(np.arange(rows.size), n_exp)
    first = np.cumsum(n_exp) - n_exp
    j = np.arange(rec.size, dtype=np.int64) - first[rec]
    t, r = period[rec], rows[rec]
    return rec, j, (r // t + (j < r % t)).astype(np.float64)


def _group_rows(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Group equal key rows: (group id per row, index of each group's first row)."""
    order = np.lexsort(cols[::-1])
    new = np.zeros(order.size, dtype=bool)
    new[:1] = True
    for c in cols:
        sc = c[order]
        new[1:] |= sc[1:] != sc[:-1]
    gid_sorted = np.cumsum(new) - 1
    inverse = np.empty(order.size, dtype=np.int64)
    inverse[order] = gid_sorted
    return inverse, order[new]


def _runs_to_banks(
    pl: Placement, run_group: np.ndarray, start: np.ndarray, length: np.ndarray, w: np.ndarray, groups: int, P: int
) -> np.ndarray:
    """Weighted bytes per bank of runs [start, start+length), summed per group: (groups, P). Runs inside
    one chunk (most tile rows) go straight to their bank; the others are split exactly with
    `Placement.cumulative_terms` (F(end) - F(start) per bank)."""
    size = pl.chunk_size(P)
    if size:
        whole = (start % size) + length <= size
        if pl.policy == "blocked":
            whole |= start >= (P - 1) * size  # the last bank also holds the tail
    else:
        whole = np.ones(start.size, dtype=bool)
    out = np.bincount(run_group[whole] * P + pl.bank_of(start[whole], P), weights=(w * length)[whole],
                      minlength=groups * P).reshape(groups, P).astype(np.float64)  # fmt: skip
    if whole.all():
        return out
    cut = ~whole
    start, length, w, g = start[cut], length[cut], w[cut], run_group[cut]
    x = np.concatenate([start + length, start])
    g = np.concatenate([g, g])
    sw = np.concatenate([w, -w])
    uniform, k, below, rest = pl.cumulative_terms(x, P)
    out += np.cumsum(np.bincount(g * (P + 1) + k, weights=sw * below, minlength=groups * (P + 1))
                     .reshape(groups, P + 1)[:, ::-1], axis=1)[:, ::-1][:, 1:]  # fmt: skip
    out += np.bincount(g * P + k, weights=sw * rest, minlength=groups * P).reshape(groups, P)
    out += np.bincount(g, weights=sw * uniform, minlength=groups)[:, None]
    return np.maximum(out, 0.0)


@dataclass
class DmaPatterns:
    """DMA records grouped by access pattern: records with equal keys move the same bytes per bank,
    so bank distributions are computed once per pattern (a matmul's thousands of tile loads have a
    few dozen patterns)."""

    rec_pat: np.ndarray  # pattern id per DMA record
    banks: np.ndarray  # (patterns, P) moved bytes per bank; zero rows for replicated patterns
    useful: np.ndarray  # per pattern
    moved: np.ndarray
    replicated: np.ndarray  # bool per pattern


def _broadcast(b: np.ndarray, u: np.ndarray, mv: np.ndarray, rep: bool, bcast: bool,
               P: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Pattern rows for `emit`: a broadcast store (to a replicated argument) moves its bytes into every
    bank (one copy local, P - 1 over the mesh), so it counts P times the bytes, spread over all banks."""
    if not bcast:
        return b, u, mv, rep
    return np.repeat(np.asarray(mv, dtype=np.float64)[:, None], P, axis=1), u * P, mv * P, False


def _arg_name(args: Sequence[ArgBuffer | None] | None, a: int) -> str:
    if args is not None and 0 <= a < len(args) and args[a] is not None:
        return args[a].name
    return f"#{a}"


def dma_patterns(
    tr: np.ndarray, is_gather: np.ndarray, args: Sequence[ArgBuffer | None] | None, spec: TargetSpec, kernel: str
) -> DmaPatterns:
    """Bytes per bank, useful and moved bytes of the DMA-like records (module docstring, items 1-2)."""
    P = spec.num_pus
    A, G = spec.dma_alignment_bytes, spec.dma_granule_bytes
    rec_pat = np.zeros(tr.shape[0], dtype=np.int64)
    banks: list[np.ndarray] = []
    useful: list[np.ndarray] = []
    moved: list[np.ndarray] = []
    rep: list[np.ndarray] = []
    npat = 0
    arg = tr[:, 2]
    is_store = (tr[:, 0] == KIND_DMA_STORE) | (tr[:, 0] == KIND_SCATTER)
    who = kernel or "kernel"

    def emit(sel: np.ndarray, inverse: np.ndarray, b: np.ndarray, u: np.ndarray, mv: np.ndarray, r: bool) -> None:
        nonlocal npat
        rec_pat[sel] = inverse + npat
        banks.append(b)
        useful.append(u.astype(np.float64))
        moved.append(mv.astype(np.float64))
        rep.append(np.full(u.size, r))
        npat += u.size

    for a in np.unique(arg).tolist():
        if a == SPILL_ARG:  # the spill area: in the bank of the PU that moves the bytes
            sel = np.flatnonzero(arg == a)
            d = tr[sel]
            o, rows, L, S = d[:, 3], d[:, 4], d[:, 5], d[:, 6]
            merge = (S == L) & (rows > 1)  # contiguous rows: one run
            L = np.where(merge, rows * L, L)
            rows = np.where(merge, 1, rows)
            S = np.where(merge, L, S)
            inv, first = _group_rows([o % A, S % A, rows, L])
            o, rows, L, S = o[first], rows[first], L[first], S[first]
            rec, j, w = _expand(rows, A // np.gcd(S % A, A))
            start = o[rec] + j * S[rec]
            mv = np.bincount(rec, weights=w * (-(-(start % A + L[rec]) // G) * G), minlength=first.size)
            emit(sel, inv, np.zeros((first.size, P)), rows * L, mv, True)
            continue
        if args is not None and not 0 <= a < len(args):
            raise NMPRuntimeError(
                f"{who}: the trace moves argument #{a} but the launch has {len(args)} arguments; "
                f"the compiler and the timing model disagree on the argument ABI"
            )
        buf = args[a] if args is not None else None
        pl, base = (buf.placement, buf.base) if buf is not None and buf.placement is not None else (Placement(), 0)
        if pl.policy == "auto":  # a layout not chosen yet (the launcher resolves it): the default
            pl = Placement(extent=pl.extent, origin=pl.origin)
        name = _arg_name(args, a)
        sel = np.flatnonzero(arg == a)
        if pl.policy == "bank" and not 0 <= int(pl.bank or 0) < P:
            raise NMPRuntimeError(
                f"{who}: argument '{name}' is placed on bank {pl.bank} but target {spec.name} has {P} banks; "
                f"place it again for this target"
            )
        is_rep = pl.policy == "replicated"
        # stores to a replicated argument write every copy (a broadcast: one copy per bank)
        parts = [(sel, False)]
        if is_rep and is_store[sel].any():
            parts = [(sel[~is_store[sel]], False), (sel[is_store[sel]], True)]
        for part, bcast in parts:
            if not part.size:
                continue
            g_sel, d_sel = part[is_gather[part]], part[~is_gather[part]]
            if g_sel.size:  # gathers: n elements of e bytes spread uniformly over [lo, hi)
                g = tr[g_sel]
                inv, first = _group_rows([g[:, 3], g[:, 6], g[:, 4], g[:, 5]])
                cnt, esz = g[first, 4], g[first, 5]
                lo = base + g[first, 3]
                hi = np.maximum(base + g[first, 6], lo + esz)
                u, mv = cnt * esz, cnt * (-(-esz // G) * G)
                ids = np.arange(first.size)
                if is_rep:
                    b = np.zeros((first.size, P))
                else:
                    b = _runs_to_banks(pl, ids, lo, hi - lo, mv / (hi - lo), ids.size, P)
                emit(g_sel, inv, *_broadcast(b, u, mv, is_rep, bcast, P))
            if not d_sel.size:
                continue
            d = tr[d_sel]
            o, rows, L, S = base + d[:, 3], d[:, 4], d[:, 5], d[:, 6]
            merge = (S == L) & (rows > 1)  # contiguous rows: one run
            L = np.where(merge, rows * L, L)
            rows = np.where(merge, 1, rows)
            S = np.where(merge, L, S)
            if pl.policy == "interleaved":
                per = int(pl.granularity or 1) * P
                lc = math.lcm(per, A)
                key = [o % lc, S % lc, rows, L]
            elif pl.policy == "blocked":
                chunk = pl.chunk_bytes(P)
                span = (rows - 1) * S
                first_c = np.minimum((o + np.minimum(span, 0)) // chunk, P - 1)
                last_c = np.minimum((o + np.maximum(span, 0) + L - 1) // chunk, P - 1)
                single = first_c == last_c
                key = [single.astype(np.int64), np.where(single, first_c, o), np.where(single, o % A, S),
                       np.where(single, S % A, 0), rows, L]  # fmt: skip
            else:  # one bank, or replicated: only alignment matters
                key = [o % A, S % A, rows, L]
            inv, first = _group_rows(key)
            o, rows, L, S = o[first], rows[first], L[first], S[first]
            u = rows * L
            # moved bytes: rows fold with the period of (start mod alignment)
            rec, j, w = _expand(rows, A // np.gcd(S % A, A))
            start = o[rec] + j * S[rec]
            mv = np.bincount(rec, weights=w * (-(-(start % A + L[rec]) // G) * G), minlength=first.size)
            if is_rep:
                b = np.zeros((first.size, P))
            else:
                if pl.policy == "interleaved":
                    period = per // np.gcd(S % per, per)
                elif pl.policy == "blocked":
                    period = np.where(single[first], 1, rows)
                else:
                    period = np.ones_like(rows)
                rec, j, w = _expand(rows, period)
                with np.errstate(divide="ignore", invalid="ignore"):
                    scale = np.where(u > 0, mv / u, 0.0)
                b = _runs_to_banks(pl, rec, o[rec] + j * S[rec], L[rec], w * scale[rec], first.size, P)
            emit(d_sel, inv, *_broadcast(b, u, mv, is_rep, bcast, P))
    if not banks:
        return DmaPatterns(rec_pat, np.zeros((0, P)), np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
    return DmaPatterns(rec_pat, np.concatenate(banks), np.concatenate(useful), np.concatenate(moved),
                       np.concatenate(rep))


def footprint_bank_bytes(trace: Any, n: int, args: Sequence[ArgBuffer | None] | None,
                         spec: TargetSpec) -> np.ndarray:
    """(programs, banks): moved bytes each program's DMA-like records take from or bring to each bank
    under the arguments' placements (a replicated argument counts in no bank: it is local to every PU).
    What the locality and auto mappings, and the auto layout choice, weigh."""
    tr = np.asarray(trace, dtype=np.int64).reshape(-1, TRACE_WORDS)
    dtr = tr[tr[:, 0] <= KIND_SCATTER]
    if not dtr.size:
        return np.zeros((n, spec.num_pus))
    pats = dma_patterns(dtr, dtr[:, 0] >= KIND_GATHER, args, spec, "")
    return PatternTable(pats.banks).aggregate(dtr[:, 1], n, pats.rec_pat)


class PatternTable:
    """Per-pattern vectors (patterns x k) with a sparse (CSR) view for sums over records."""

    def __init__(self, dense: np.ndarray):
        self.dense = dense
        nz_p, self.cols = np.nonzero(dense)
        self.vals = dense[nz_p, self.cols]
        self.nnz = np.bincount(nz_p, minlength=dense.shape[0])
        self.indptr = np.r_[0, np.cumsum(self.nnz)]

    def aggregate(self, group: np.ndarray, n_groups: int, pat: np.ndarray) -> np.ndarray:
        """Sum of the vectors of patterns pat[i] per group[i]: (n_groups, k). Dense path: count
        (group, pattern) pairs and multiply by the table (few patterns); sparse path: scatter each
        record's non-zeros (many patterns, e.g. one-bank vectors of blocked tensors)."""
        npat, k = self.dense.shape
        if group.size == 0 or n_groups == 0:
            return np.zeros((n_groups, k))
        nnz = self.nnz[pat]
        total = int(nnz.sum())
        if n_groups * npat * (k + 8) <= 64 * max(total, group.size):
            counts = np.bincount(group * npat + pat, minlength=n_groups * npat).reshape(n_groups, npat)
            return counts @ self.dense
        rec = np.repeat(np.arange(group.size), nnz)
        pos = np.arange(total) - np.repeat(np.cumsum(nnz) - nnz, nnz) + np.repeat(self.indptr[pat], nnz)
        flat = np.bincount(group[rec] * k + self.cols[pos], weights=self.vals[pos], minlength=n_groups * k)
        return flat.reshape(n_groups, k)
