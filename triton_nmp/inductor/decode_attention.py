"""Decode attention as one split-KV (flash-decoding) kernel pair, by a post-grad pass over Inductor's graph.

A decode step attends one query row per head over the whole static KV cache: `softmax(q k^T * scale + mask) v`
with M = 1. Inductor lowers each M = 1 bmm on CPU devices to mul + sum (`kernel/bmm.py: tuned_bmm`) and the
softmax to two more reductions, so a GPT-2 layer ran four kernels: scores (an inner reduction over the head
dimension), the softmax statistics over 12 rows (12 programs for 64 PUs), and softmax @ V split by Inductor's GPU
heuristic into 256 partial sums per output that a fourth kernel adds up, about 25 us per layer for 3 MB of cache.

`DecodeAttentionPass` (installed as `post_grad_custom_pre_pass` by the `nmp` backend) finds that pattern in the
post-grad graph and replaces it with two Triton kernels, inserted as user-defined kernels
(`triton_kernel_wrapper_functional`, which Inductor reinplaces and launches like its own):

* `_partial`: one program per (KV head, chunk of `BLOCK_T` cache rows) streams its K and V rows (one contiguous
  run each, so automatic placement puts them in one bank and the program on that bank's PU), computes the
  scores of every query head that shares the KV head (grouped heads: the repeated cache is never
  materialised), their chunk max and exp-sum, and the unnormalised `p @ v` row. A chunk whose mask entries are
  all -inf (past a decode step's position) loads neither K nor V: its max is -inf and its sum 0, so the work is
  bounded by the position (the branch is on loaded data: placement follows the footprint's bound, see
  `triton_nmp.footprint`). Programs run in blocks of ceil(programs / PUs), rotated at a head's end so that every
  PU starts with its earliest positions (the live chunks share the first wave);
* `_partial_runs` (one query row per KV head, the usual case; `_partial` for grouped heads): the same partials
  from one program per PU, over that PU's run of ceil(chunks / PUs) consecutive chunks (contiguous K and V
  bytes, so placement still puts them in the PU's bank). It reads its chunks' mask first and takes from it each
  chunk's bound (one past the last position left); then a loop of one step per chunk loads the K and V rows
  below the bound (rows past a decode step's position are not moved, a chunk past it loads nothing) and
  computes the chunk's partial when it has a row left. The loads' bounds come from data loaded before the
  loop, so the compiler multi-buffers them (a chunk streams in while the previous one computes): the work
  is bounded by the position without a data-dependent branch around the loads, which in `_partial` keeps the
  simulator from overlapping any of a program's loads with compute. The partials are stored once, after the
  loop (a store inside it would end the pipeline stage);
* `_combine`: one program per query head rescales the chunks' rows by `exp(m_c - m)` and divides by the sum
  (a skipped chunk's row, never written, has weight 0).

The mask is one buffer for every layer: its strides are fixed once before the calls (`_realized`), else
Inductor's fixed-stride constraint on user-defined kernels computes it again for each layer.

The step's cache writes are folded in when K and V are `index_put(cache, [None, None, pos], new)` of a static
cache graph input `[1, G, T, D]` that only the attention reads (and the functionalised copy back into the
input): `_partial` takes the cache inputs themselves as outputs (`tensors_to_clone`), the program whose chunk
holds `pos` stores the new rows and uses them in place of the cache's (`_partial_runs`: stores them before its
loop, whose loads then read them back; a negative `pos` counts from the end, one outside the cache fails a
device assert), and the copy back reads `_partial`'s output, so Inductor's reinplacing
writes the cache in place, as it did the index_put: two kernels fewer per layer.

The scores follow the graph's own rounding: the bmm's output dtype, the scale applied before or after the cast
to fp32, the additive mask (any tensor broadcast over heads and positions). The probabilities are not rounded
to the value dtype before `@ v` (as eager does); the result differs from eager by that rounding.
The pattern is matched on logical values, not on view chains: K's and V's operands are traced back through view,
expand and clone ops to their source, and the chain is replayed on an index tensor to prove that head `g`
reads source head `g // rep`. Anything else (prefill's M > 1, attention weights used elsewhere, other score
epilogues) is left to Inductor. `TRITON_NMP_DECODE_ATTENTION=0` turns the pass off (part of its cache key).
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl
from torch._inductor.custom_graph_pass import CustomGraphPass

__all__ = ["DecodeAttentionPass", "enabled", "chunk_rows", "combine_slices", "rewrites"]

aten = torch.ops.aten
prims = torch.ops.prims

_VIEWS = {aten.reshape.default, aten.view.default, aten.expand.default, aten.permute.default,
          aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.default, aten._unsafe_view.default,
          aten.alias.default, aten.clone.default}
_SHAPE_ONLY = {aten.reshape.default, aten.view.default, aten.expand.default, aten.unsqueeze.default,
               aten.squeeze.dim, aten.squeeze.default, aten._unsafe_view.default}
_DTYPES = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}


def enabled() -> bool:
    return os.environ.get("TRITON_NMP_DECODE_ATTENTION", "1") != "0"


@triton.jit
def _round(x, DT: tl.constexpr):
    """`x` (fp32) rounded to the graph's dtype code `DT` (0 fp16, 1 bf16, 2 fp32) and back."""
    if DT == 0:
        x = x.to(tl.float16).to(tl.float32)
    elif DT == 1:
        x = x.to(tl.bfloat16).to(tl.float32)
    return x


@triton.jit
def _partial(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, ml_ptr, kn_ptr, vn_ptr, pos_ptr,
             sq_g, sq_d, sk_g, sk_t, sk_d, sv_g, sv_t, sv_d, smask_g, smask_t, skn_g, skn_d, svn_g, svn_d, scale,
             CHUNKS: tl.constexpr, BLOCK_T: tl.constexpr, D: tl.constexpr, REP: tl.constexpr,
             SCORE_DT: tl.constexpr, SCALE_MODE: tl.constexpr, HAS_MASK: tl.constexpr, QROWS: tl.constexpr,
             PER_PU: tl.constexpr, WRITE: tl.constexpr):
    # programs in runs of PER_PU (the blocked mapping of the cache's chunks onto PUs); a run that crosses a
    # head's end is rotated so its earliest positions come first: every PU's first program is its chunk most
    # likely left by the mask (a decode step's chunks past the position do nothing but end a PU's queue)
    lin = tl.program_id(1) * CHUNKS + tl.program_id(0)
    first = lin - lin % PER_PU
    run = tl.minimum(PER_PU, CHUNKS * tl.num_programs(1) - first)
    wrap = (CHUNKS - first % CHUNKS) % CHUNKS
    wrap = tl.where(wrap < run, wrap, 0)
    chunk = first + (lin - first + wrap) % run
    c = chunk % CHUNKS
    gkv = chunk // CHUNKS
    t = c * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, D)
    row = c * 0 - 1  # the cache row this program writes (none: -1)
    kn = tl.zeros([D], k_ptr.dtype.element_ty)
    vn = tl.zeros([D], v_ptr.dtype.element_ty)
    if WRITE:  # the step's `cache[:, :, pos] = new` for K and V, by the program whose chunk holds pos
        pos = tl.load(pos_ptr).to(tl.int32)
        pos = tl.where(pos < 0, pos + CHUNKS * BLOCK_T, pos)
        tl.device_assert((pos >= 0) & (pos < CHUNKS * BLOCK_T), "index out of bounds: pos outside the KV cache")
        if pos // BLOCK_T == c:
            kn = tl.load(kn_ptr + gkv * skn_g + d * skn_d)
            vn = tl.load(vn_ptr + gkv * svn_g + d * svn_d)
            tl.store(k_ptr + gkv * sk_g + pos * sk_t + d * sk_d, kn)
            tl.store(v_ptr + gkv * sv_g + pos * sv_t + d * sv_d, vn)
            row = pos
    if REP == 1:  # one query row: vector products (the matrix unit would pad it to 16 rows)
        base = gkv * CHUNKS + c
        add = tl.zeros([BLOCK_T], tl.float32)
        if HAS_MASK:
            add = tl.load(mask_ptr + gkv * smask_g + t * smask_t).to(tl.float32)
        if tl.max(add, 0) > float("-inf"):  # a chunk the mask leaves some position of: K and V are read
            k = _with_row(tl.load(k_ptr + gkv * sk_g + t[:, None] * sk_t + d[None, :] * sk_d), t, row, kn,
                          WRITE).to(tl.float32)
            v = _with_row(tl.load(v_ptr + gkv * sv_g + t[:, None] * sv_t + d[None, :] * sv_d), t, row, vn,
                          WRITE).to(tl.float32)
            q = tl.load(q_ptr + gkv * sq_g + d * sq_d).to(tl.float32)
            s = _epilogue(tl.sum(k * q[None, :], 1), scale, SCORE_DT, SCALE_MODE) + add
            m = tl.max(s, 0)
            p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m))
            tl.store(o_ptr + base * D + d, tl.sum(p[:, None] * v, 0))
            tl.store(ml_ptr + base * 2 + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, m, tl.sum(p, 0)))
        else:  # every position masked off: no loads, the chunk's weight is exp(-inf) = 0 (o is not read)
            tl.store(ml_ptr + base * 2 + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, float("-inf"), 0.0))
    else:  # the query rows of every head sharing this KV head, on the matrix unit (padded to 16 rows)
        r = tl.arange(0, QROWS)
        g = gkv * REP + r
        base = g * CHUNKS + c
        two = tl.arange(0, 2)
        add = tl.zeros([QROWS, BLOCK_T], tl.float32)
        if HAS_MASK:
            add = tl.load(mask_ptr + g[:, None] * smask_g + t[None, :] * smask_t, mask=r[:, None] < REP,
                          other=float("-inf")).to(tl.float32)
        if tl.max(tl.max(add, 1), 0) > float("-inf"):
            k = _with_row(tl.load(k_ptr + gkv * sk_g + t[:, None] * sk_t + d[None, :] * sk_d), t, row, kn, WRITE)
            v = _with_row(tl.load(v_ptr + gkv * sv_g + t[:, None] * sv_t + d[None, :] * sv_d), t, row, vn, WRITE)
            q = tl.load(q_ptr + g[:, None] * sq_g + d[None, :] * sq_d, mask=r[:, None] < REP, other=0.0)
            s = _epilogue(tl.dot(q.to(k.dtype), tl.trans(k), input_precision="ieee"), scale, SCORE_DT,
                          SCALE_MODE) + tl.where(r[:, None] < REP, add, 0.0)
            m = tl.max(s, 1)
            p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m)[:, None])
            o = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            tl.store(o_ptr + base[:, None] * D + d[None, :], o, mask=r[:, None] < REP)
            tl.store(ml_ptr + base[:, None] * 2 + two[None, :],
                     tl.where(two[None, :] == 0, m[:, None], tl.sum(p, 1)[:, None]), mask=r[:, None] < REP)
        else:
            tl.store(ml_ptr + base[:, None] * 2 + two[None, :],
                     tl.where(two[None, :] == 0, float("-inf"), 0.0) + tl.zeros([QROWS, 2], tl.float32),
                     mask=r[:, None] < REP)


@triton.jit
def _partial_runs(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, ml_ptr, kn_ptr, vn_ptr, pos_ptr,
                  sq_g, sq_d, sk_g, sk_t, sk_d, sv_g, sv_t, sv_d, smask_g, smask_t, skn_g, skn_d, svn_g, svn_d, scale,
                  CHUNKS: tl.constexpr, BLOCK_T: tl.constexpr, D: tl.constexpr,
                  SCORE_DT: tl.constexpr, SCALE_MODE: tl.constexpr, HAS_MASK: tl.constexpr,
                  PER_PU: tl.constexpr, RUN: tl.constexpr, TOTAL: tl.constexpr, WRITE: tl.constexpr):
    # one program per PU: the run of PER_PU chunks [first, first + run) of the cache (chunk `lin` is head
    # lin // CHUNKS, rows (lin % CHUNKS) * BLOCK_T...), at most two heads A and B (PER_PU <= CHUNKS)
    first = tl.program_id(0) * PER_PU
    run = tl.minimum(PER_PU, TOTAL - first)
    ga = first // CHUNKS
    gb = (first + run - 1) // CHUNKS
    d = tl.arange(0, D)
    jr = tl.arange(0, RUN)
    gj = (first + jr) // CHUNKS
    tj = ((first + jr) % CHUNKS)[:, None] * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
    # his[j]: one past chunk j's last position the mask leaves; the loop's loads are bounded by it (data loaded
    # before the loop: the next rows stream in while this step computes), so past a decode step's position
    # nothing is moved
    if HAS_MASK:
        amask = tl.load(mask_ptr + gj[:, None] * smask_g + tj * smask_t, mask=(jr < run)[:, None],
                        other=float("-inf")).to(tl.float32)
        his = tl.max(tl.where(amask > float("-inf"), tj, -1), 1) + 1
    else:
        his = tl.where(jr < run, tl.max(tj, 1) + 1, 0)
    hia = tl.max(tl.where(gj == ga, his, 0), 0)
    hib = tl.max(tl.where(gj == gb, his, 0), 0)
    qa = tl.load(q_ptr + ga * sq_g + d * sq_d).to(tl.float32)
    qb = tl.load(q_ptr + gb * sq_g + d * sq_d).to(tl.float32)
    if WRITE:  # the step's `cache[:, :, pos] = new` for K and V of heads A and B, when the run holds pos's chunk
        pos = tl.load(pos_ptr).to(tl.int32)
        pos = tl.where(pos < 0, pos + CHUNKS * BLOCK_T, pos)
        tl.device_assert((pos >= 0) & (pos < CHUNKS * BLOCK_T), "index out of bounds: pos outside the KV cache")
        la = ga * CHUNKS + pos // BLOCK_T
        if (la >= first) & (la < first + run):
            tl.store(k_ptr + ga * sk_g + pos * sk_t + d * sk_d, tl.load(kn_ptr + ga * skn_g + d * skn_d))
            tl.store(v_ptr + ga * sv_g + pos * sv_t + d * sv_d, tl.load(vn_ptr + ga * svn_g + d * svn_d))
        lb = gb * CHUNKS + pos // BLOCK_T
        if (gb != ga) & (lb >= first) & (lb < first + run):
            tl.store(k_ptr + gb * sk_g + pos * sk_t + d * sk_d, tl.load(kn_ptr + gb * skn_g + d * skn_d))
            tl.store(v_ptr + gb * sv_g + pos * sv_t + d * sv_d, tl.load(vn_ptr + gb * svn_g + d * svn_d))
    m_t = tl.full([RUN], float("-inf"), tl.float32)
    den_t = tl.zeros([RUN], tl.float32)
    acc_t = tl.zeros([RUN, D], tl.float32)
    for j in range(PER_PU):  # one chunk per step: K and V rows below its bound, one DMA each
        lin = first + j
        gkv = lin // CHUNKS
        t0 = lin % CHUNKS * BLOCK_T
        lim = tl.where(j < run, tl.where(gkv == ga, hia, hib), 0)
        ts = t0 + tl.arange(0, BLOCK_T)
        live = ts < lim
        k = tl.load(k_ptr + gkv * sk_g + ts[:, None] * sk_t + d[None, :] * sk_d, mask=live[:, None], other=0.0)
        v = tl.load(v_ptr + gkv * sv_g + ts[:, None] * sv_t + d[None, :] * sv_d, mask=live[:, None], other=0.0)
        if t0 < lim:  # a chunk the mask leaves some row of (the written row is read back from the cache)
            sel = jr == j
            q = tl.where(gkv == ga, qa, qb)
            s = _epilogue(tl.sum(k.to(tl.float32) * q[None, :], 1), scale, SCORE_DT, SCALE_MODE).to(tl.float32)
            if HAS_MASK:
                s += tl.sum(tl.where(sel[:, None], amask, 0.0), 0)
            m = tl.max(s, 0)
            p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m))
            den_t = tl.where(sel, tl.sum(p, 0), den_t)
            acc_t = tl.where(sel[:, None], tl.sum(p[:, None] * v.to(tl.float32), 0)[None, :], acc_t)
            m_t = tl.where(sel, m, m_t)
    # chunk lin's partial is row lin of o and ml (one query row per KV head: lin = head * CHUNKS + chunk)
    tl.store(o_ptr + (first + jr)[:, None] * D + d[None, :], acc_t, mask=(jr < run)[:, None])
    two = tl.arange(0, 2)
    tl.store(ml_ptr + (first + jr)[:, None] * 2 + two[None, :],
             tl.where(two[None, :] == 0, m_t[:, None], den_t[:, None]), mask=(jr < run)[:, None])


@triton.jit
def _with_row(x, t, row, new, WRITE: tl.constexpr):
    """The chunk `x` ([BLOCK_T, D] rows `t`) with row `row` replaced by `new`: the row this program writes is
    used as written, without reading back its own store."""
    if WRITE:
        if row >= 0:  # only the writing program pays for the select
            x = tl.where(t[:, None] == row, new[None, :], x)
    return x


@triton.jit
def _epilogue(s, scale, SCORE_DT: tl.constexpr, SCALE_MODE: tl.constexpr):
    """The graph's score epilogue on the fp32 dot products `s`: rounded to the bmm's dtype and scaled (the mask
    is added by the caller)."""
    s = _round(s, SCORE_DT)
    if SCALE_MODE == 1:  # scaled in the bmm's dtype, then cast to fp32
        s = _round(s * scale, SCORE_DT)
    elif SCALE_MODE == 2:  # cast to fp32, then scaled
        s = s * scale
    return s


@triton.jit
def _combine(o_ptr, ml_ptr, out_ptr, so_g, so_d, CHUNKS: tl.constexpr, D: tl.constexpr, DS: tl.constexpr):
    # program (head, slice of DS output columns): the slices of a head spread over PUs, each reads the head's
    # chunk statistics and its columns of every chunk's row. (Reading only the chunks up to the last one with a
    # position left would make the footprint data-dependent, and automatic placement then replicates the output
    # for the next GEMV, whose storage Inductor reuses for a layer norm's output: 24 us more per step.)
    g = tl.program_id(0)
    c = tl.arange(0, CHUNKS)
    d = tl.program_id(1) * DS + tl.arange(0, DS)
    two = tl.arange(0, 2)
    ml = tl.load(ml_ptr + (g * CHUNKS + c[:, None]) * 2 + two[None, :])
    m = tl.max(tl.where(two[None, :] == 0, ml, float("-inf")), 1)
    w = tl.exp(m - tl.max(m, 0))
    den = tl.sum(w * tl.sum(tl.where(two[None, :] == 1, ml, 0.0), 1), 0)
    o = tl.load(o_ptr + (g * CHUNKS + c[:, None]) * D + d[None, :])
    o = tl.sum(tl.where(w[:, None] > 0, w[:, None] * o, 0.0), 0) / den  # a masked-off chunk's row is not written
    tl.store(out_ptr + g * so_g + d * so_d, o.to(out_ptr.dtype.element_ty))


def combine_slices(heads: int, d: int, num_pus: int) -> int:
    """Output columns per `_combine` program: a head's columns split over up to num_pus // heads PUs, in slices
    of at least 16 columns (a power of two)."""
    slices = 1
    while slices * 2 * heads <= num_pus and d // (slices * 2) >= 16:
        slices *= 2
    return d // slices


def chunk_rows(kv_groups: int, t: int, d: int, num_pus: int, bytes_per_cycle: float, setup_cycles: float) -> int:
    """Cache rows per program: the power of two dividing `t` whose programs (K and V rows of one chunk, one
    DMA each) stream in the fewest cycles, in waves over the PUs."""
    best, best_cycles = 0, float("inf")
    rows = 16
    while rows <= min(t, 256):
        if t % rows == 0 and rows * d <= 16384:
            programs = kv_groups * (t // rows)
            waves = -(-programs // num_pus)
            cycles = waves * (2 * setup_cycles + 2 * rows * d * 2 / bytes_per_cycle)
            if cycles < best_cycles:
                best, best_cycles = rows, cycles
        rows *= 2
    return best


@dataclass
class _Match:
    pv: torch.fx.Node  # the softmax @ V bmm
    q: torch.fx.Node  # [G, 1, D]
    k_src: torch.fx.Node  # logically [G / rep, T, D]
    v_src: torch.fx.Node
    rep: int
    scale: float
    scale_mode: int  # 0 none, 1 in the score dtype, 2 in fp32
    score_dtype: torch.dtype
    mask: torch.fx.Node | None
    mask_strides: tuple[int, int]  # per flattened head, per position
    writes: tuple[_CacheWrite, _CacheWrite] | None = None  # K's and V's cache writes, folded into `_partial`


@dataclass
class _CacheWrite:
    """`index_put(cache, [None, None, pos], new)` of a static cache [1, G, T, D] that the attention reads: the
    step's row, written by `_partial` (the cache mutated in place, as Inductor reinplaces the index_put)."""

    put: torch.fx.Node
    cache: torch.fx.Node  # the graph input (a buffer)
    pos: torch.fx.Node  # one integer position
    new: torch.fx.Node  # [1, G, 1, D] or [G, 1, D]


_REWRITES: list[str] = []


def rewrites() -> list[str]:
    """One line per decode attention replaced in this process (for tests and reports)."""
    return list(_REWRITES)


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _single(n: torch.fx.Node) -> bool:
    return len(n.users) == 1


def _strip_shape(n: torch.fx.Node) -> torch.fx.Node:
    """Back through ops that only reshape (no permutation, no copy) with a single user."""
    while n.op == "call_function" and n.target in _SHAPE_ONLY and _single(n):
        n = n.args[0]
    return n


def _is_last_dim(dims: Any, rank: int) -> bool:
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, rank - 1)


def _source(n: torch.fx.Node, g: int, t: int, d: int, transposed: bool) -> tuple[torch.fx.Node, int] | None:
    """(source node, rep) such that operand `n` (logically [g, d, t] if `transposed` else [g, t, d]) reads
    head `i // rep` of the source viewed as [g / rep, t, d]; None if it does not. Proved by replaying the view
    chain on an index tensor."""
    chain = []
    src = n
    while src.op == "call_function" and src.target in _VIEWS and _single(src):
        chain.append(src)
        src = src.args[0]
        if not isinstance(src, torch.fx.Node):
            return None
    sval = _val(src)
    if sval is None or sval.numel() % (t * d) or any(not isinstance(s, int) for s in sval.shape):
        return None
    gkv = sval.numel() // (t * d)
    if g % gkv:
        return None
    rep = g // gkv
    idx = torch.arange(sval.numel(), dtype=torch.int32 if sval.numel() < 2**31 else torch.int64).view(sval.shape)
    x = idx
    for node in reversed(chain):
        x = node.target(x, *node.args[1:], **node.kwargs)
    want = idx.view(gkv, t, d).repeat_interleave(rep, 0)
    if transposed:
        want = want.transpose(1, 2)
    if tuple(x.shape) != tuple(want.shape) or not torch.equal(x, want):
        return None
    try:  # the source's storage indexed as [gkv, t, d]
        torch.empty_strided(sval.shape, sval.stride(), device="meta").view(gkv, t, d)
    except RuntimeError:
        return None
    return src, rep


def _match(pv: torch.fx.Node) -> _Match | None:
    p3, v3 = pv.args[0], pv.args[1]
    pval, vval, oval = _val(p3), _val(v3), _val(pv)
    if pval is None or vval is None or oval is None or pval.dim() != 3 or pval.shape[1] != 1:
        return None
    g, _, t = pval.shape
    d = vval.shape[2]
    if not all(isinstance(x, int) for x in (g, t, d)) or d & (d - 1) or d > 256 or t % 16:
        return None
    if pval.dtype not in _DTYPES or vval.dtype != pval.dtype:
        return None
    # softmax output (optionally cast) -> div(exp, sum(exp)) with exp = exp(x - amax(x))
    n = _strip_shape(p3)
    if n.target == prims.convert_element_type.default and _single(n):
        n = n.args[0]
    if n.target != aten.div.Tensor or not _single(n):
        return None
    ex, den = n.args
    if not _reduces(den, aten.sum.dim_IntList, ex) or ex.target != aten.exp.default or len(ex.users) != 2:
        return None
    sub = ex.args[0]
    if sub.target != aten.sub.Tensor or not _single(sub) or not _reduces(sub.args[1], aten.amax.default, sub.args[0]):
        return None
    x, amax = sub.args
    xval = _val(x)
    if xval is None or xval.dtype != torch.float32 or len(x.users) != 2 or xval.shape[-1] != t:
        return None
    if not (_is_last_dim(amax.args[1], xval.dim()) and _is_last_dim(den.args[1], xval.dim())):
        return None
    # the score epilogue, backwards: [add mask] [mul scale] convert [mul scale] from the bmm's output
    mask = None
    n = x
    if n.target == aten.add.Tensor:
        a, b = n.args
        score_side = a if isinstance(a, torch.fx.Node) and _depends_on_bmm(a) else b
        mask = b if score_side is a else a
        if not isinstance(mask, torch.fx.Node) or _val(mask) is None:
            return None
        n = score_side
    scale, scale_mode = 1.0, 0
    steps = []
    while True:
        n = _strip_shape(n) if n is not x else n
        if not _single(n) and n is not x:
            return None
        scaled = any(kind == "mul" for kind, _ in steps)
        if n.target == aten.mul.Tensor and isinstance(n.args[1], (int, float)) and not scaled:
            steps.append(("mul", float(n.args[1])))
            n = n.args[0]
        elif n.target == prims.convert_element_type.default:
            steps.append(("cvt", n.args[1]))
            n = n.args[0]
        elif n.target == aten.bmm.default:
            break
        else:
            return None
    qk = n
    score_dtype = _val(qk).dtype
    converted = False
    for kind, arg in reversed(steps):  # forward order
        if kind == "cvt":
            if arg != torch.float32 or converted:
                return None
            converted = True
        else:
            scale, scale_mode = arg, (2 if converted or score_dtype == torch.float32 else 1)
    if score_dtype not in _DTYPES or (score_dtype != torch.float32 and not converted):
        return None
    q3, kt3 = qk.args
    qval = _val(q3)
    if qval is None or tuple(qval.shape) != (g, 1, d) or qval.dtype != score_dtype:
        return None
    ks = _source(kt3, g, t, d, transposed=True)
    vs = _source(v3, g, t, d, transposed=False)
    if ks is None or vs is None or ks[1] != vs[1]:
        return None
    kw, vw = _cache_write(ks[0], g // ks[1], t, d), _cache_write(vs[0], g // ks[1], t, d)
    writes = (kw, vw) if kw is not None and vw is not None and kw.pos is vw.pos and kw.cache is not vw.cache \
        else None
    mask_strides = (0, 0)
    if mask is not None:
        mval = _val(mask)
        if xval.numel() != g * t or mval.dtype not in _DTYPES:
            return None
        try:  # the mask broadcast over the scores, indexed as [g, t]
            mask_strides = torch.empty_strided(mval.shape, mval.stride(), device="meta").expand(
                xval.shape).view(g, t).stride()
        except RuntimeError:
            return None
    return _Match(pv, q3, ks[0], vs[0], ks[1], scale, scale_mode, score_dtype, mask, tuple(mask_strides), writes)


def _cache_write(n: torch.fx.Node, gkv: int, t: int, d: int) -> _CacheWrite | None:
    """`n` as the write of one position into a static cache graph input, whose only other users copy it back
    into that input (the functionalised in-place write); None otherwise."""
    if n.target != aten.index_put.default or len(n.args) < 3:
        return None
    cache, indices, new = n.args[:3]
    if (n.args[3] if len(n.args) > 3 else n.kwargs.get("accumulate", False)):
        return None
    if not isinstance(cache, torch.fx.Node) or cache.op != "placeholder" or not isinstance(new, torch.fx.Node):
        return None
    cval, nval = _val(cache), _val(new)
    if cval is None or nval is None or tuple(cval.shape) != (1, gkv, t, d) or not cval.is_contiguous():
        return None
    if (1,) * (4 - nval.dim()) + tuple(nval.shape) != (1, gkv, 1, d) or nval.dtype != cval.dtype:
        return None  # the new rows, [1, G, 1, D] or [G, 1, D]
    if not isinstance(indices, (list, tuple)) or len(indices) != 3 or indices[0] is not None or \
            indices[1] is not None or not isinstance(indices[2], torch.fx.Node):
        return None
    pval = _val(indices[2])
    if pval is None or pval.numel() != 1 or pval.dim() != 1 or pval.dtype not in (torch.int32, torch.int64):
        return None
    others = [u for u in n.users if not (u.target == aten.copy_.default and u.args[0] is cache and u.args[1] is n)]
    if len(others) != 1:  # the attention's read of the cache, nothing else
        return None
    return _CacheWrite(n, cache, indices[2], new)


def _reduces(n: Any, target: Any, of: torch.fx.Node) -> bool:
    """Whether `n` is a single-user `target` reduction of `of` (the softmax's amax and sum)."""
    return isinstance(n, torch.fx.Node) and n.target == target and n.args[0] is of and _single(n)


def _depends_on_bmm(n: torch.fx.Node) -> bool:
    for _ in range(8):
        if n.target == aten.bmm.default:
            return True
        if n.op != "call_function" or not n.args or not isinstance(n.args[0], torch.fx.Node):
            return False
        n = n.args[0]
    return False


def _gkv_strides(val: torch.Tensor, gkv: int, t: int, d: int) -> tuple[int, int, int]:
    return torch.empty_strided(val.shape, val.stride(), device="meta").view(gkv, t, d).stride()


def _replace(graph: torch.fx.Graph, mt: _Match) -> None:
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_functional

    from triton_nmp.target import active_target

    spec = active_target()
    oval = _val(mt.pv)
    g, _, d = oval.shape
    kval, vval, qval = _val(mt.k_src), _val(mt.v_src), _val(mt.q)
    t = kval.numel() * mt.rep // (g * d)
    gkv = g // mt.rep
    block_t = chunk_rows(gkv, t, d, spec.num_pus, spec.bank_bytes_per_cycle, spec.dma_setup_cycles)
    chunks = t // block_t
    sk, sv = _gkv_strides(kval, gkv, t, d), _gkv_strides(vval, gkv, t, d)
    fake = oval.fake_mode
    with fake:
        o_val = torch.empty((g, chunks, d), dtype=torch.float32)
        ml_val = torch.empty((g, chunks, 2), dtype=torch.float32)
        out_val = torch.empty((g, 1, d), dtype=oval.dtype)

    def empty(val: torch.Tensor) -> torch.fx.Node:
        e = graph.call_function(aten.empty.memory_format, (list(val.shape),),
                                {"dtype": val.dtype, "device": oval.device})
        e.meta["val"] = val
        return e

    def hop(kernel: Any, grid: tuple[int, ...], tensors: dict[str, torch.fx.Node], consts: dict[str, Any],
            outs: list[str]) -> dict[str, torch.fx.Node]:
        node = graph.call_function(triton_kernel_wrapper_functional, (), {
            "kernel_idx": kernel_side_table.add_kernel(kernel),
            "constant_args_idx": kernel_side_table.add_constant_args(consts),
            "grid": [grid], "tma_descriptor_metadata": {}, "kwargs": tensors, "tensors_to_clone": outs})
        with fake:
            node.meta["val"] = {k: torch.empty_like(_val(tensors[k])) for k in outs}
        res = {}
        for k in outs:
            res[k] = graph.call_function(operator.getitem, (node, k))
            res[k].meta["val"] = node.meta["val"][k]
        return res

    with graph.inserting_before(mt.pv):
        o, ml = empty(o_val), empty(ml_val)
        tensors = {"q_ptr": mt.q, "k_ptr": mt.k_src, "v_ptr": mt.v_src, "o_ptr": o, "ml_ptr": ml}
        consts = {"mask_ptr": None} if mt.mask is None else {}
        if mt.mask is not None:
            tensors["mask_ptr"] = mt.mask
        outs = ["o_ptr", "ml_ptr"]
        skn, svn = (0, 0), (0, 0)
        if mt.writes is not None:
            kw, vw = mt.writes
            tensors.update(k_ptr=kw.cache, v_ptr=vw.cache, kn_ptr=kw.new, vn_ptr=vw.new, pos_ptr=kw.pos)
            outs += ["k_ptr", "v_ptr"]
            skn, svn = _val(kw.new).stride(), _val(vw.new).stride()
            skn, svn = (skn[-3], skn[-1]), (svn[-3], svn[-1])
        else:
            consts.update(kn_ptr=None, vn_ptr=None, pos_ptr=None)
        consts.update(sq_g=qval.stride(0), sq_d=qval.stride(2), sk_g=sk[0], sk_t=sk[1], sk_d=sk[2],
                      sv_g=sv[0], sv_t=sv[1], sv_d=sv[2], smask_g=mt.mask_strides[0], smask_t=mt.mask_strides[1],
                      skn_g=skn[0], skn_d=skn[1], svn_g=svn[0], svn_d=svn[1], scale=mt.scale,
                      CHUNKS=chunks, BLOCK_T=block_t, D=d, REP=mt.rep, SCORE_DT=_DTYPES[mt.score_dtype],
                      SCALE_MODE=mt.scale_mode, HAS_MASK=mt.mask is not None,
                      QROWS=max(16, 1 << (mt.rep - 1).bit_length()), PER_PU=-(-chunks * gkv // spec.num_pus),
                      WRITE=mt.writes is not None)
        per_pu = consts["PER_PU"]
        if mt.rep == 1 and per_pu <= chunks:  # one program per PU over its run of chunks
            consts.update(RUN=1 << (per_pu - 1).bit_length(), TOTAL=chunks * gkv)
            for key in ("QROWS", "REP"):
                del consts[key]
            part = hop(_partial_runs, (-(-chunks * gkv // per_pu), 1, 1), tensors, consts, outs)
        else:
            part = hop(_partial, (chunks, gkv, 1), tensors, consts, outs)
        out = empty(out_val)
        ds = combine_slices(g, d, spec.num_pus)
        res = hop(_combine, (g, d // ds, 1), {"o_ptr": part["o_ptr"], "ml_ptr": part["ml_ptr"], "out_ptr": out},
                  {"so_g": out_val.stride(0), "so_d": out_val.stride(2), "CHUNKS": chunks, "D": d, "DS": ds},
                  ["out_ptr"])
    if mt.writes is not None:  # the cache copied back into its input is `_partial`'s (Inductor reinplaces it)
        for w, key in zip(mt.writes, ("k_ptr", "v_ptr")):
            for u in list(w.put.users):
                if u.target == aten.copy_.default:
                    u.replace_input_with(w.put, part[key])
    mt.pv.replace_all_uses_with(res["out_ptr"])
    _REWRITES.append(f"decode attention: {g} heads (rep {mt.rep}), {t} positions, head dim {d}, "
                     f"{chunks} chunks of {block_t} rows" + (", K/V cache writes folded in" if mt.writes else ""))


def _realized(graph: torch.fx.Graph, mask: torch.fx.Node, shared: dict[torch.fx.Node, torch.fx.Node]) -> torch.fx.Node:
    """The mask as one buffer that every layer's `_partial` reads: Inductor constrains a user-defined kernel's
    inputs to their FX strides (`triton_kernel_default_layout_constraint`), which computes an unrealized pointwise
    mask into a new buffer for each call; fixing its strides once, before the calls, makes one buffer (one kernel
    per step instead of one per layer) without relaxing the constraint for users' own kernels."""
    if mask not in shared:
        val = _val(mask)
        with graph.inserting_after(mask):
            fixed = graph.call_function(prims.inductor_force_stride_order.default, (mask, list(val.stride())))
        fixed.meta["val"] = val
        shared[mask] = fixed
    return shared[mask]


class DecodeAttentionPass(CustomGraphPass):
    """Replaces decode attention (M = 1) in a post-grad graph with `_partial` + `_combine`."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        if not enabled():
            return
        matches = []
        for node in graph.nodes:
            if node.op == "call_function" and node.target == aten.bmm.default:
                try:
                    mt = _match(node)
                except (RuntimeError, ValueError, TypeError, AttributeError, IndexError):
                    mt = None
                if mt is not None:
                    matches.append(mt)
        shared: dict[torch.fx.Node, torch.fx.Node] = {}
        for mt in matches:
            if mt.mask is not None:
                mt.mask = _realized(graph, mt.mask, shared)
            _replace(graph, mt)
        if matches:
            graph.eliminate_dead_code()

    def uuid(self) -> str:
        from .choices import sources_hash  # the integration's sources (this module's among them) and the compiler's

        return f"{sources_hash()[:16]}:{int(enabled())}"
