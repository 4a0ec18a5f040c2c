"""Decode attention as one split-KV (flash-decoding) kernel pair, by a post-grad pass over Inductor's graph.

A decode step attends one query row per head over the whole static KV cache: `softmax(q k^T * scale + mask) v`
with M = 1. Inductor lowers each M = 1 bmm on CPU devices to mul + sum (`kernel/bmm.py: tuned_bmm`) and the
softmax to two more reductions, so a GPT-2 layer ran four kernels: scores (an inner reduction over the head
dimension), the softmax statistics over 12 rows (12 programs for 64 PUs), and softmax @ V split by Inductor's GPU
heuristic into 256 partial sums per output that a fourth kernel adds up, about 25 us per layer for 3 MB of cache.

`DecodeAttentionPass` (installed as `post_grad_custom_pre_pass` by the `nmp` backend) finds that pattern in the
post-grad graph and replaces it with two Triton kernels (in `decode_attention_kernels`), inserted as user-defined
kernels (`triton_kernel_wrapper_functional`, which Inductor reinplaces and launches like its own):

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
  loop (a store inside it would end the pipeline stage). A causal mask of a graph input `pos`
  (`arange(T) <= pos`, `_causal_pos`) is not read: the bounds come from `pos` itself and rows past it get -inf,
  so the mask is not computed either (a DMA or two per program and a launch per step fewer). When q and the new
  K and V rows are slices of one buffer (a fused qkv projection, `_fused_rows`), a program loads its heads' q, k
  and v rows in one DMA instead of four (a DMA is ~100 cycles of setup before its bytes);
* `_combine`: one program per query head rescales the chunks' rows by `exp(m_c - m)` and divides by the sum
  (a skipped chunk's row, never written, has weight 0).

A mask that is read is one buffer for every layer: its strides are fixed once before the calls (`_realized`), else
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
from torch._inductor.custom_graph_pass import CustomGraphPass

from .decode_attention_kernels import _combine, _partial, _partial_runs

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
    causal_pos: torch.fx.Node | None = None  # the mask is `arange(T) <= pos` of this 1-element graph input


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


@dataclass
class _Plan:
    """How a match is split: heads, positions, head dim, KV heads, chunk rows, chunks, chunks per PU, and whether
    `_partial_runs` (one program per PU) computes the partials."""

    g: int
    t: int
    d: int
    gkv: int
    block_t: int
    chunks: int
    per_pu: int
    runs: bool


def _plan(mt: _Match) -> _Plan:
    from triton_nmp.target import active_target

    spec = active_target()
    g, _, d = _val(mt.pv).shape
    t = _val(mt.k_src).numel() * mt.rep // (g * d)
    gkv = g // mt.rep
    block_t = chunk_rows(gkv, t, d, spec.num_pus, spec.bank_bytes_per_cycle, spec.dma_setup_cycles)
    chunks = t // block_t
    per_pu = -(-chunks * gkv // spec.num_pus)
    return _Plan(g, t, d, gkv, block_t, chunks, per_pu, mt.rep == 1 and per_pu <= chunks)


def _causal_pos(mask: torch.fx.Node, t: int) -> torch.fx.Node | None:
    """The graph input `pos` (one integer) when `mask` is a decode step's causal mask over the cache,
    `zeros([1, t]).masked_fill(~(arange(t) <= pos), -inf)` (post-grad: `where(~le(iota, pos), -inf, 0)`, or
    `where(le(iota, pos), 0, -inf)`): `_partial_runs` then bounds its loads by pos itself, with no mask to compute
    or read. None for any other mask (read as a tensor), and for a computed pos (a user kernel's input is
    computed into a buffer per call)."""
    if mask.target != aten.where.self or len(mask.args) != 3:
        return None
    cond, keep_val, drop_val = mask.args
    if isinstance(cond, torch.fx.Node) and cond.target == aten.bitwise_not.default:
        cond, keep_val, drop_val = cond.args[0], drop_val, keep_val
    mval = _val(mask)
    if mval is None or mval.numel() != t or mval.shape[-1] != t or mval.dtype not in _DTYPES:
        return None
    if _constant(keep_val) != 0.0 or _constant(drop_val) != float("-inf"):
        return None
    if not isinstance(cond, torch.fx.Node) or cond.target != aten.le.Tensor:
        return None
    iota, pos = (_strip_views(a) for a in cond.args)
    if not isinstance(iota, torch.fx.Node) or iota.target != prims.iota.default or tuple(iota.args) != (t,) or \
            iota.kwargs.get("start", 0) != 0 or iota.kwargs.get("step", 1) != 1:
        return None
    pval = _val(pos)
    if not isinstance(pos, torch.fx.Node) or pos.op != "placeholder" or pval is None or pval.numel() != 1 or \
            pval.dtype not in (torch.int32, torch.int64):
        return None
    # the iota along the mask's last dimension, pos broadcast over it: `le` of [.., t] and [.., 1]
    if _val(cond.args[0]) is None or _val(cond.args[0]).shape[-1] != t or _val(cond.args[1]).shape[-1] != 1:
        return None
    return pos


def _constant(n: Any) -> float | None:
    """The value of a Python scalar or of an `aten.full` node, else None."""
    if isinstance(n, (int, float)) and not isinstance(n, bool):
        return float(n)
    if isinstance(n, torch.fx.Node) and n.target == aten.full.default and isinstance(n.args[1], (int, float)):
        return float(n.args[1])
    return None


def _strip_views(n: Any) -> Any:
    """Back through ops that only reshape (whatever their users)."""
    while isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in _SHAPE_ONLY:
        n = n.args[0]
    return n


_INDEXING = _VIEWS | {aten.split.Tensor, aten.split_with_sizes.default, aten.slice.Tensor, operator.getitem}


def _rows_of(n: torch.fx.Node, heads: int, d: int) -> tuple[torch.fx.Node, int, int, int] | None:
    """(base, offset, head stride, column stride), in elements, when the values of `n` (heads x d) are elements
    `offset + h * head_stride + j * column_stride` of the contiguous node `base` it is taken from by views, splits,
    slices and clones; None otherwise. Proved by replaying the chain on an index tensor."""
    chain = []
    src = n
    while isinstance(src, torch.fx.Node) and src.op == "call_function" and src.target in _INDEXING:
        if src.target == operator.getitem and (not isinstance(src.args[0], torch.fx.Node) or src.args[0].target
                                               not in (aten.split.Tensor, aten.split_with_sizes.default)):
            return None  # an item of another op's results (a user kernel's outputs)
        chain.append(src)
        src = src.args[0]
    sval = _val(src)
    if not chain or not isinstance(src, torch.fx.Node) or not isinstance(sval, torch.Tensor) or \
            not sval.is_contiguous() or \
            any(not isinstance(s, int) for s in sval.shape) or sval.numel() >= 2**31:
        return None
    x = torch.arange(sval.numel(), dtype=torch.int64).view(sval.shape)
    for node in reversed(chain):
        x = node.target(x, *node.args[1:], **node.kwargs)
    if not isinstance(x, torch.Tensor) or x.numel() != heads * d:
        return None
    x = x.reshape(heads, d)
    off = int(x[0, 0])
    sh = int(x[1, 0]) - off if heads > 1 else d
    sd = int(x[0, 1]) - off if d > 1 else 1
    want = off + torch.arange(heads)[:, None] * sh + torch.arange(d)[None, :] * sd
    return (src, off, sh, sd) if torch.equal(x, want) else None


def _fused_rows(mt: _Match, g: int, d: int) -> tuple[torch.fx.Node, int, int] | None:
    """(base, q's offset, step) when q's rows and the new K and V rows (if written) sit in one buffer, head after
    head (head stride d, contiguous columns), K's `step` elements after q's and V's `step` after K's, as a fused
    qkv projection leaves them: `_partial_runs` then loads a run's q, k and v rows in one DMA."""
    rq = _rows_of(mt.q, g, d)
    if rq is None or rq[2] != d or rq[3] != 1:
        return None
    if mt.writes is None:
        return rq[0], rq[1], 0
    rk, rv = _rows_of(mt.writes[0].new, g, d), _rows_of(mt.writes[1].new, g, d)
    if rk is None or rv is None or rk[0] is not rq[0] or rv[0] is not rq[0] or rk[2:] != (d, 1) or rv[2:] != (d, 1):
        return None
    step = rk[1] - rq[1]
    if step < g * d or rv[1] - rk[1] != step:  # disjoint rows, evenly spaced
        return None
    return rq[0], rq[1], step


def _replace(graph: torch.fx.Graph, mt: _Match) -> None:
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_functional

    from triton_nmp.target import active_target

    spec = active_target()
    oval = _val(mt.pv)
    qval = _val(mt.q)
    pl = _plan(mt)
    g, d, t, gkv, block_t, chunks = pl.g, pl.d, pl.t, pl.gkv, pl.block_t, pl.chunks
    kval, vval = _val(mt.k_src), _val(mt.v_src)
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
        causal = mt.causal_pos is not None
        consts = {"mask_ptr": None} if mt.mask is None or causal else {}
        if mt.mask is not None and not causal:
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
                      SCALE_MODE=mt.scale_mode, HAS_MASK=mt.mask is not None and not causal,
                      QROWS=max(16, 1 << (mt.rep - 1).bit_length()), PER_PU=pl.per_pu,
                      WRITE=mt.writes is not None)
        per_pu = pl.per_pu
        fused = None
        if pl.runs:  # one program per PU over its run of chunks
            same = causal and mt.writes is not None and mt.writes[0].pos is mt.causal_pos
            if causal and not same:
                tensors["mpos_ptr"] = mt.causal_pos
            else:
                consts["mpos_ptr"] = None
            consts.update(RUN=1 << (per_pu - 1).bit_length(), TOTAL=chunks * gkv, CAUSAL=causal, SAME_POS=same,
                          QKV=False, q_off=0, qkv_step=0)
            fused = _fused_rows(mt, g, d)
            if fused is not None:  # q (and the new K and V rows) read from their common buffer, one DMA
                base, q_off, step = fused
                tensors["q_ptr"] = base
                for key in ("kn_ptr", "vn_ptr"):
                    if key in tensors:
                        del tensors[key]
                        consts[key] = None
                consts.update(QKV=True, q_off=q_off, qkv_step=step)
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
                     f"{chunks} chunks of {block_t} rows" + (", K/V cache writes folded in" if mt.writes else "")
                     + (", causal mask from the position" if mt.causal_pos is not None else "")
                     + ((", q and the new K/V rows in one load" if mt.writes else ", q in one load")
                        if fused is not None else ""))


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
            if mt.mask is not None and _plan(mt).runs:
                mt.causal_pos = _causal_pos(mt.mask, _plan(mt).t)
            if mt.mask is not None and mt.causal_pos is None:
                mt.mask = _realized(graph, mt.mask, shared)
            _replace(graph, mt)
        if matches:
            graph.eliminate_dead_code()

    def uuid(self) -> str:
        from .choices import sources_hash  # the integration's sources (this module's among them) and the compiler's

        return f"{sources_hash()[:16]}:{int(enabled())}"
