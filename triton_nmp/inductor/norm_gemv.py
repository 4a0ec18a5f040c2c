"""A one-row norm (layer norm, RMSNorm) and the linear after it as one GEMV kernel: the statistics in every program.

In a decode step (one token), GPT-2's `linear(layer_norm(x))` ran as two kernels: a one-program reduction that
normalised the 768 values (Inductor does not realize the residual stream, so it also added up the 3-5 earlier
outputs `x` is the sum of, all read remotely by one PU, ~4.8 us) and the projection's GEMV. The 64 programs of
the GEMV read the whole activation row anyway, so each can reduce it itself: the one-program kernel disappears.

`rewrite(gm)` (run by the `nmp` backend on Dynamo's graph, before AOTAutograd decomposes `layer_norm`) replaces
every `linear(layer_norm(x, ...), w, b)` and `layer_norm(x, ...) @ w` whose `x` has one row at compile time (all
of the norm's users being such products) with `torch.ops.nmp.layer_norm_gemv(x, norm_weight, norm_bias, eps, w_kn,
bias)`, `w_kn` being the [K, N] operand; Llama's RMSNorm (`(xf * rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))
.to(x.dtype) * weight`, `xf = x.float()`) likewise with `torch.ops.nmp.rms_norm_gemv`. Their lowering (`_lower`)
is `gemv.norm_gemv_template`: the statistics (two-pass mean and variance, or the mean of squares, in fp32 over the
row), the normalised row rounded to the input dtype where eager rounds it, then the product; the linear's bias
is added before Inductor's epilogue, so pointwise consumers (GELU) still fuse into it. Because the template
takes `x` as a realized buffer, the residual stream `x = x + proj(...)` becomes a buffer written by the previous
projection's epilogue, and later kernels read one vector instead of recomputing the sum.

Only applied without autograd (inference graphs), for fp16/bf16/fp32 CPU tensors of one dtype with static
shapes, where the template has a legal tile whose K loop is one step (the normalised row is the A tile: K up to
4096); `TRITON_NMP_NORM_GEMV=0` turns it off (the rewritten graph is part of Inductor's cache key).
"""

from __future__ import annotations

import functools
import math
import operator
import os
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["rewrite", "enabled", "layer_norm_gemv", "rms_norm_gemv", "rewrites"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_REWRITES: list[str] = []
_MATMULS = (operator.matmul, torch.matmul, torch.Tensor.matmul, torch.mm)


def enabled() -> bool:
    return os.environ.get("TRITON_NMP_NORM_GEMV", "1") != "0"


def rewrites() -> list[str]:
    """One line per `linear(norm(x))` replaced in this process (for tests and reports)."""
    return list(_REWRITES)


@torch.library.custom_op("nmp::layer_norm_gemv", mutates_args=())
def layer_norm_gemv(x: torch.Tensor, norm_weight: torch.Tensor, norm_bias: torch.Tensor, eps: float,
                    w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`layer_norm(x) @ w (+ bias)` over x's last dimension; w is [K, N]. Eager reference (and the host path)."""
    h = F.layer_norm(x, (x.shape[-1],), norm_weight, norm_bias, eps)
    return torch.matmul(h, w) if bias is None else torch.addmm(bias, h.reshape(-1, h.shape[-1]), w).view(
        *h.shape[:-1], w.shape[1])


@layer_norm_gemv.register_fake
def _(x, norm_weight, norm_bias, eps, w, bias):
    return x.new_empty((*x.shape[:-1], w.shape[1]))


@torch.library.custom_op("nmp::rms_norm_gemv", mutates_args=())
def rms_norm_gemv(x: torch.Tensor, norm_weight: torch.Tensor, eps: float, w: torch.Tensor,
                  bias: torch.Tensor | None) -> torch.Tensor:
    """`rms_norm(x) @ w (+ bias)`, the norm as Llama writes it: `(xf * rsqrt(mean(xf ** 2) + eps)).to(dtype) * nw`
    with xf = x in fp32. Eager reference (and the host path)."""
    xf = x.float()
    h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * norm_weight
    return torch.matmul(h, w) if bias is None else torch.matmul(h, w) + bias


@rms_norm_gemv.register_fake
def _(x, norm_weight, eps, w, bias):
    return x.new_empty((*x.shape[:-1], w.shape[1]))


def _pow2(k: int) -> int:
    return 1 << (k - 1).bit_length()


def _one_step_tiles(n: int, k: int, itemsize: int) -> list[Any]:
    """The one-row template's legal tiles for (1 x k) @ (k x n) whose K loop is one step (BLOCK_K = k rounded up to
    a power of two), the only ones the norm template takes: none when the row does not fit the scratchpad."""
    from triton_nmp.target import active_target

    from . import gemm

    tiles = gemm.gemv_candidates(n, k, itemsize, itemsize, active_target())
    return [t for t in tiles if t.block_k == _pow2(k)]


def _val(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None


def _static_row(v: Any) -> bool:
    """A tensor of static shape whose leading dimensions hold one row."""
    if not isinstance(v, torch.Tensor) or v.dim() < 1:
        return False
    try:
        shape = [int(s) for s in v.shape]
    except TypeError:  # symbolic
        return False
    return math.prod(shape[:-1]) == 1 and shape[-1] > 0


def _layer_norm_args(n: torch.fx.Node) -> tuple[torch.fx.Node, Any, Any, float] | None:
    """(x, weight, bias, eps) of `F.layer_norm(x, (K,), weight, bias, eps)` over the last dimension, else None."""
    if n.op != "call_function" or n.target is not F.layer_norm:
        return None
    names = ("input", "normalized_shape", "weight", "bias", "eps")
    args = dict(zip(names, n.args))
    args.update(n.kwargs)
    x, w, b = args.get("input"), args.get("weight"), args.get("bias")
    xv, wv, bv = _val(x), _val(w), _val(b)
    if not _static_row(xv) or wv is None or bv is None:
        return None
    if list(args.get("normalized_shape", ())) != [xv.shape[-1]] or wv.shape != (xv.shape[-1],) or bv.shape != wv.shape:
        return None
    if xv.dtype not in _DTYPES or wv.dtype != xv.dtype or bv.dtype != xv.dtype or xv.device.type != "cpu":
        return None
    eps = args.get("eps", 1e-5)
    return (x, w, b, float(eps)) if isinstance(eps, (int, float)) else None


def _method(n: Any, name: str) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_method" and n.target == name


def _function(n: Any, *targets: Any) -> bool:
    return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets


def _rms_norm_args(h: torch.fx.Node) -> tuple[torch.fx.Node, Any, float, list[torch.fx.Node]] | None:
    """(x, weight, eps, the norm's nodes) of Llama's RMSNorm `(xf * rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))
    .to(x.dtype) * weight` (either operand order of the last product, xf = `x.float()`), else None."""
    if not _function(h, operator.mul) or len(h.args) != 2:
        return None
    for cast, w in (h.args, h.args[::-1]):
        if not (_method(cast, "to") and len(cast.args) == 2 and not cast.kwargs
                and _function(cast.args[0], operator.mul)):
            continue
        scaled = cast.args[0]
        xf, rsqrt = scaled.args if _function(scaled.args[1], torch.rsqrt) else scaled.args[::-1]
        if not (_method(xf, "float") and len(xf.args) == 1 and _function(rsqrt, torch.rsqrt)):
            continue
        add = rsqrt.args[0]
        if not (_function(add, operator.add) and isinstance(add.args[1], (int, float))):
            continue
        mean = add.args[0]
        if not (_method(mean, "mean") and tuple(mean.args[1:]) in ((-1,), ([-1],), ((-1,),))
                and mean.kwargs == {"keepdim": True}):
            continue
        sq = mean.args[0]
        if not (_method(sq, "pow") and tuple(sq.args) == (xf, 2) and not sq.kwargs):
            continue
        x = xf.args[0]
        xv, wv = _val(x), _val(w)
        if not _static_row(xv) or xv.dtype not in _DTYPES or xv.device.type != "cpu" or cast.args[1] != xv.dtype:
            continue
        if wv is None or wv.shape != (xv.shape[-1],) or wv.dtype != xv.dtype:
            continue
        return x, w, float(add.args[1]), [h, cast, scaled, rsqrt, add, mean, sq, xf]
    return None


def _norm(n: torch.fx.Node) -> tuple[torch.fx.Node, Any, Any, float, list[torch.fx.Node]] | None:
    """(x, weight, bias or None for RMSNorm, eps, the norm's nodes, output first) of a one-row norm, else None."""
    found = _layer_norm_args(n)
    if found is not None:
        return (*found, [n])
    found = _rms_norm_args(n)
    if found is not None:
        x, w, eps, nodes = found
        return x, w, None, eps, nodes
    return None


def _n(product: tuple[Any, Any, bool]) -> int:
    """N of a matched product (the weight is [N, K] when transposed, else [K, N])."""
    w, _, transposed = product
    return int(_val(w).shape[0 if transposed else 1])


def _product(user: torch.fx.Node, ln: torch.fx.Node, dtype: torch.dtype) -> tuple[Any, Any, bool] | None:
    """(weight, bias, transposed) when `user` is `linear(ln, weight[, bias])` (transposed: weight is [N, K]) or
    `ln @ w` with a 2-D w ([K, N]), of `dtype`; else None."""
    if user.op != "call_function" or not user.args or user.args[0] is not ln:
        return None
    if user.target is torch._C._nn.linear and not user.kwargs:
        w = user.args[1] if len(user.args) > 1 else None
        b = user.args[2] if len(user.args) > 2 else None
        wv, bv = _val(w), _val(b)
        if wv is None or wv.dim() != 2 or wv.dtype != dtype or (b is not None and (bv is None or bv.dtype != dtype
                                                                                  or bv.dim() != 1)):
            return None
        return w, b, True
    if user.target in _MATMULS and len(user.args) == 2 and not user.kwargs:
        wv = _val(user.args[1])
        if wv is None or wv.dim() != 2 or wv.dtype != dtype:
            return None
        return user.args[1], None, False
    return None


def rewrite(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> int:
    """Replace one-row `linear(norm(x))` in Dynamo's graph `gm` (see the module docstring); returns how many
    products were replaced. Nothing is done while autograd would record the graph."""
    if not enabled() or (torch.is_grad_enabled()
                         and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)):
        return 0
    graph = gm.graph
    count = 0
    for ln in list(graph.nodes):
        if ln.op not in ("call_function", "call_method") or not ln.users:
            continue
        found = _norm(ln)
        if found is None:
            continue
        x, nw, nb, eps, nodes = found
        dtype = _val(x).dtype
        products = [(u, _product(u, ln, dtype)) for u in ln.users]
        if any(p is None or not _one_step_tiles(_n(p), _val(x).shape[-1], dtype.itemsize) for _, p in products):
            continue
        for user, (w, b, transposed) in products:
            with graph.inserting_before(user):
                w_kn = graph.call_function(torch.t, (w,)) if transposed else w
                if transposed:
                    w_kn.meta["example_value"] = _val(w).t()
                if nb is None:
                    new = graph.call_function(torch.ops.nmp.rms_norm_gemv.default, (x, nw, eps, w_kn, b))
                else:
                    new = graph.call_function(torch.ops.nmp.layer_norm_gemv.default, (x, nw, nb, eps, w_kn, b))
            new.meta.update(user.meta)
            user.replace_all_uses_with(new)
            graph.erase_node(user)
            count += 1
            _REWRITES.append(f"{ln.name} -> {new.name}: {list(_val(x).shape)} @ [{_val(w_kn).shape[0]}, "
                             f"{_val(w_kn).shape[1]}]{' + bias' if b is not None else ''}")
        for n in nodes:  # the norm's own nodes, now unused (an intermediate used elsewhere stays)
            if not n.users:
                graph.erase_node(n)
    if count:
        graph.lint()
        gm.recompile()
    return count


@functools.cache
def register_lowering() -> None:
    """Register Inductor's lowerings of `nmp::layer_norm_gemv` and `nmp::rms_norm_gemv` (once per process)."""
    from torch._inductor.lowering import register_lowering as register

    register(torch.ops.nmp.layer_norm_gemv.default, type_promotion_kind=None)(_lower)
    register(torch.ops.nmp.rms_norm_gemv.default, type_promotion_kind=None)(
        lambda x, norm_weight, eps, w, bias: _lower(x, norm_weight, None, eps, w, bias))


def _lower(x: Any, norm_weight: Any, norm_bias: Any | None, eps: float, w: Any, bias: Any) -> Any:
    """`gemv.norm_gemv_template` for one norm (RMSNorm when `norm_bias` is None) and product."""
    from torch._inductor.kernel.mm_common import mm_args
    from torch._inductor.lowering import view
    from torch._inductor.select_algorithm import autotune_select_algorithm, realize_inputs

    from triton_nmp.placement import default_policy
    from triton_nmp.target import active_target

    from . import gemm
    from .choices import _column_major, record_selection, with_pin
    from .gemv import norm_gemv_template

    size = [int(s) for s in x.get_size()]
    k_dim = size[-1]
    _, n, k, layout, mat1, mat2 = mm_args(view(x, [1, k_dim]), w)
    n, k = int(n), int(k)
    rms = norm_bias is None
    norm = [norm_weight] if rms else [norm_weight, norm_bias]
    others = [realize_inputs(t) for t in (*norm, *([] if bias is None else [bias]))]
    inputs = (mat1, mat2, *others)
    dtype = mat1.get_dtype()
    itemsize = dtype.itemsize
    spec = active_target()
    dname = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, "fp32")
    auto = default_policy() == "auto"
    k_pow2 = _pow2(k)
    # One column block holding the whole share, K steps of the normalised row (`gemm.norm_gemv_tiles`, ranked by
    # `gemm.estimate_norm_gemv`). It was narrow column blocks over one K step (16 columns, 2 stages): a store and a
    # bias load between two blocks' weight DMAs left every DMA but the first exposed (GPT-2 QKV 9.91 -> 9.54 us
    # alone, see benchmarks/README.md).
    tiles = gemm.norm_gemv_tiles(n, k, itemsize, itemsize, spec)
    scored = sorted(((gemm.estimate_norm_gemv(t, n, k, itemsize, itemsize, dname, spec, auto), t) for t in tiles),
                    key=lambda e: (e[0], e[1]))
    if not scored:  # no single block fits with the row: narrow multi-buffered blocks over one K step
        scored = sorted(((gemm.estimate_gemv(t, n, k, itemsize, itemsize, dname, spec, auto), t)
                         for t in _one_step_tiles(n, k, itemsize)),
                        key=lambda e: (e[1].num_stages < 2, e[1].block_n, e[0]))
    # in every mode (max-autotune simulates nothing for these), unless `choices.pinned_tile` names one of them
    kept = with_pin(scored, scored[:1])
    template = norm_gemv_template(rms, bias is not None)
    record_selection("rms_norm_gemv" if rms else "layer_norm_gemv", 1, n, k, 1, dname, len(scored), kept, template.name)
    b_columns = _column_major(mat2)
    choices: list[Any] = []
    for _, t in kept:
        template.maybe_append_choice(
            choices, input_nodes=inputs, layout=layout, num_stages=t.num_stages, num_warps=4,
            BLOCK_N=t.block_n, BLOCK_K=t.block_k, SHARE=t.share, B_COLUMNS=b_columns, EVEN_K=k % t.block_k == 0,
            ACC_TYPE="tl.float32", ALLOW_TF32=False, NORM=True, RMS=rms, HAS_BIAS=bias is not None,
            K_POW2=k_pow2, EPS=float(eps))
    node, _ = autotune_select_algorithm("rms_norm_gemv" if rms else "layer_norm_gemv", choices, list(inputs), layout)
    return view(node, [*size[:-1], n])
