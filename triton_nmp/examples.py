"""The suite of stock Triton kernels the nmp backend must run, with host wrappers and torch references.

Every kernel is an ordinary `@triton.jit` kernel launched on torch CPU tensors, so the same code runs
on the nmp driver, on Triton's interpreter, or on any other active driver. Together the kernels cover
the access patterns the compiler has to recover (masked tails, strided and transposed tiles, grouped
program ordering, loops carrying pointers and accumulators, reductions, scalar accesses, int64
offsets, 1-D/2-D/3-D grids). Tiles are kept small because each live tile takes scratchpad space.

`CASES` lists one `Case` per kernel variant; `triton_nmp.demo` and `tests/test_kernels.py` run them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

Inputs = dict[str, Any]
Outputs = torch.Tensor | tuple[torch.Tensor, ...]
Size = str | Mapping[str, int]


# ----------------------------------------------------------------------------------------------
# 1. Vector add with a tail mask


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offs < n
    x = tl.load(x_ptr + offs, mask=in_bounds)
    y = tl.load(y_ptr + offs, mask=in_bounds)
    tl.store(out_ptr + offs, x + y, mask=in_bounds)


def add(x: torch.Tensor, y: torch.Tensor, block: int = 1024) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out


# ----------------------------------------------------------------------------------------------
# 2. Fused row softmax


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_bounds = cols < n_cols
    # -inf in the padding keeps it out of both the max and the sum (exp(-inf) == 0).
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=in_bounds, other=-float("inf"))
    shifted = x - tl.max(x, axis=0)
    num = tl.exp(shifted)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=in_bounds)


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=block)
    return out


# ----------------------------------------------------------------------------------------------
# 3. Matmul: tails on M/N/K, GROUP_M swizzle, arbitrary strides, fp32 accumulation


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    # Walk output tiles GROUP_M rows of tiles at a time so consecutive programs share A rows and B columns.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    group = pid // tiles_per_group
    first_m = group * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    within = pid % tiles_per_group
    pid_m = first_m + within % rows_in_group
    pid_n = within // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_tile = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(a_tile, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_tile, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    c_tile = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_tile, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(
    a: torch.Tensor, b: torch.Tensor, block_m: int = 32, block_n: int = 32, block_k: int = 32, group_m: int = 4
) -> torch.Tensor:
    """C = A @ B in A's dtype, accumulated in fp32; A and B may be any strided views (e.g. `b.t()`)."""
    (M, K), (K2, N) = a.shape, b.shape
    assert K == K2, f"inner dimensions differ: {a.shape} @ {b.shape}"
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
    )  # fmt: skip
    return c


# ----------------------------------------------------------------------------------------------
# 4. Layer norm forward: three passes over the row in BLOCK chunks


@triton.jit
def layernorm_fwd_kernel(
    x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, x_row_stride, y_row_stride, n_cols, eps, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride

    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        partial += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(partial, axis=0) / n_cols

    # Two-pass variance: (x - mean)^2 avoids the cancellation of E[x^2] - E[x]^2.
    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        centered = tl.where(cols < n_cols, x - mean, 0.0)
        partial += centered * centered
    var = tl.sum(partial, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)

    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        in_bounds = cols < n_cols
        w = tl.load(w_ptr + cols, mask=in_bounds)
        b = tl.load(b_ptr + cols, mask=in_bounds)
        x = tl.load(x_row + cols, mask=in_bounds, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=in_bounds)


def layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, block: int = 128
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns (y, mean, rstd), the last two per row in fp32 as a backward pass would need them."""
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    layernorm_fwd_kernel[(n_rows,)](x, y, weight, bias, mean, rstd, x.stride(0), y.stride(0), n_cols, eps, BLOCK=block)
    return y, mean, rstd


# ----------------------------------------------------------------------------------------------
# 5. Flash-attention forward (online softmax over K/V blocks)


@triton.jit
def attention_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, seq_len,
    stride_qb, stride_qs, stride_qd,
    stride_kb, stride_ks, stride_kd,
    stride_vb, stride_vs, stride_vd,
    stride_ob, stride_os, stride_od,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = q_ptr + bh * stride_qb
    k_base = k_ptr + bh * stride_kb
    v_base = v_ptr + bh * stride_vb

    q_tile = q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd
    q = tl.load(q_tile, mask=offs_m[:, None] < seq_len, other=0.0)
    # Work in base 2: exp(x * scale) == exp2(x * scale * log2(e)).
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if CAUSAL:
        # Keys past this block's last query row never contribute.
        hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)
    else:
        hi = seq_len
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kt_tile = k_base + offs_n[None, :] * stride_ks + offs_d[:, None] * stride_kd
        kt = tl.load(kt_tile, mask=offs_n[None, :] < seq_len, other=0.0)
        qk = tl.dot(q, kt) * qk_scale
        keep = offs_n[None, :] < seq_len
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        qk = tl.where(keep, qk, -float("inf"))
        # Every row sees key 0 in the first block, so m_new is finite from the first iteration on.
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp2(qk - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        # Zero padding matters here: p is 0 past seq_len, but 0 * garbage could still be NaN.
        v_tile = v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd
        v = tl.load(v_tile, mask=offs_n[:, None] < seq_len, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    out = acc / l_i[:, None]
    o_tile = o_ptr + bh * stride_ob + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_tile, out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float | None = None,
    block_m: int = 32,
    block_n: int = 16,
) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v for q, k, v of shape (batch*heads, seq, head_dim)."""
    bh, seq_len, head_dim = q.shape
    assert head_dim == triton.next_power_of_2(head_dim), "head_dim must be a power of two"
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    o = torch.empty_like(q)
    grid = (triton.cdiv(seq_len, block_m), bh)
    attention_fwd_kernel[grid](
        q, k, v, o, sm_scale, seq_len,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
    )  # fmt: skip
    return o


# ----------------------------------------------------------------------------------------------
# 6. Reductions of a 2-D tile along axis 0 or 1


@triton.jit
def reduce2d_kernel(
    x_ptr, out_ptr, M, N, stride_m, stride_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, AXIS: tl.constexpr, OP: tl.constexpr,
):  # fmt: skip
    # Each program owns a strip of the kept axis; its tile spans the whole reduced axis.
    pid = tl.program_id(0)
    if AXIS == 0:
        offs_m = tl.arange(0, BLOCK_M)
        offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    else:
        offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
    in_bounds = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tile = x_ptr + offs_m[:, None] * stride_m + offs_n[None, :] * stride_n
    # Padding is the identity of the reduction so it never changes the result.
    if OP == "sum":
        x = tl.load(tile, mask=in_bounds, other=0.0)
        r = tl.sum(x, axis=AXIS)
    elif OP == "max":
        x = tl.load(tile, mask=in_bounds, other=-float("inf"))
        r = tl.max(x, axis=AXIS)
    elif OP == "min":
        x = tl.load(tile, mask=in_bounds, other=float("inf"))
        r = tl.min(x, axis=AXIS)
    else:
        tl.static_assert(OP == "argmax", "OP must be sum, max, min or argmax")
        x = tl.load(tile, mask=in_bounds, other=-float("inf"))
        r = tl.argmax(x, axis=AXIS)
    if AXIS == 0:
        tl.store(out_ptr + offs_n, r.to(out_ptr.dtype.element_ty), mask=offs_n < N)
    else:
        tl.store(out_ptr + offs_m, r.to(out_ptr.dtype.element_ty), mask=offs_m < M)


REDUCE_OPS = ("sum", "max", "min", "argmax")


def reduce2d(x: torch.Tensor, op: str, axis: int, block_kept: int = 8) -> torch.Tensor:
    """x.sum/amax/amin/argmax(dim=axis) for a 2-D x; argmax comes back as int32 (Triton's index type)."""
    assert op in REDUCE_OPS and axis in (0, 1)
    M, N = x.shape
    kept = N if axis == 0 else M
    out = torch.empty(kept, dtype=torch.int32 if op == "argmax" else x.dtype, device=x.device)
    if axis == 0:
        block_m, block_n = triton.next_power_of_2(M), block_kept
    else:
        block_m, block_n = block_kept, triton.next_power_of_2(N)
    grid = (triton.cdiv(kept, block_kept),)
    reduce2d_kernel[grid](x, out, M, N, x.stride(0), x.stride(1), BLOCK_M=block_m, BLOCK_N=block_n, AXIS=axis, OP=op)
    return out


def reduce2d_ref(x: torch.Tensor, op: str, axis: int) -> torch.Tensor:
    if op == "sum":
        return x.sum(dim=axis)
    if op == "max":
        return x.amax(dim=axis)
    if op == "min":
        return x.amin(dim=axis)
    return x.argmax(dim=axis).to(torch.int32)


# ----------------------------------------------------------------------------------------------
# 7. 2-D and 3-D grids


@triton.jit
def grid_ids_kernel(out_ptr):
    px = tl.program_id(0)
    py = tl.program_id(1)
    pz = tl.program_id(2)
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    nz = tl.num_programs(2)
    slot = out_ptr + ((pz * ny + py) * nx + px) * 4
    tl.store(slot, px + 10 * py + 100 * pz)
    tl.store(slot + 1, nx)
    tl.store(slot + 2, ny)
    tl.store(slot + 3, nz)


def grid_ids(grid: tuple[int, ...]) -> torch.Tensor:
    """Row (z, y, x) holds [x + 10y + 100z, nx, ny, nz] as seen by that program."""
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    out = torch.full((gz, gy, gx, 4), -1, dtype=torch.int32)
    grid_ids_kernel[tuple(grid)](out)
    return out


def grid_ids_ref(grid: tuple[int, ...]) -> torch.Tensor:
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    z, y, x = torch.meshgrid(torch.arange(gz), torch.arange(gy), torch.arange(gx), indexing="ij")
    ids = x + 10 * y + 100 * z
    counts = [torch.full_like(ids, n) for n in (gx, gy, gz)]
    return torch.stack([ids, *counts], dim=-1).to(torch.int32)


# ----------------------------------------------------------------------------------------------
# 8. Scalar loads and stores


@triton.jit
def scaled_row_sum_kernel(x_ptr, scale_ptr, out_ptr, row_stride, n_cols):
    # Element by element on purpose: no tensors at all, only scalar loads, a scalar loop and a scalar store.
    row = tl.program_id(0)
    scale = tl.load(scale_ptr)
    acc = 0.0
    for j in range(0, n_cols):
        acc += tl.load(x_ptr + row * row_stride + j)
    tl.store(out_ptr + row, acc * scale)


def scaled_row_sum(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """out[i] = scale[0] * sum(x[i, :]), computed one scalar load at a time."""
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    scaled_row_sum_kernel[(n_rows,)](x, scale, out, x.stride(0), n_cols)
    return out


# ----------------------------------------------------------------------------------------------
# 9. int64 offsets


@triton.jit
def strided_rows_kernel(x_ptr, out_ptr, stride_xb, stride_xr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    batch = tl.program_id(1)
    # Widen before multiplying: row * stride in int32 wraps once a tensor spans 2**31 elements.
    x_row = x_ptr + batch.to(tl.int64) * stride_xb + row.to(tl.int64) * stride_xr
    out_row = out_ptr + (batch.to(tl.int64) * n_rows + row) * n_cols
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        in_bounds = cols < n_cols
        x = tl.load(x_row + cols, mask=in_bounds)
        tl.store(out_row + cols, x * 2.0 + 1.0, mask=in_bounds)


def strided_rows(x: torch.Tensor, block: int = 128) -> torch.Tensor:
    """2 * x + 1 for a 3-D view x (batch, rows, cols) with unit column stride, into a contiguous tensor."""
    n_batch, n_rows, n_cols = x.shape
    assert x.stride(2) == 1
    out = torch.empty((n_batch, n_rows, n_cols), dtype=x.dtype, device=x.device)
    strided_rows_kernel[(n_rows, n_batch)](x, out, x.stride(0), x.stride(1), n_rows, n_cols, BLOCK=block)
    return out


def big_stride_view(
    seed: int, n_rows: int, n_cols: int, row_stride: int, batch_stride: int = 2**31 + 64
) -> torch.Tensor:
    """A (1, n_rows, n_cols) fp32 view whose rows sit row_stride elements apart in a mostly untouched storage.

    The batch dimension has size 1, so its stride may legally exceed 2**31: Triton then passes it as an
    i64 argument, and the kernel's offset arithmetic must be int64 throughout. Only the viewed elements
    are written, so the storage's untouched pages cost address space, not memory.
    """
    storage = torch.empty((n_rows - 1) * row_stride + n_cols, dtype=torch.float32)
    view = storage.as_strided((1, n_rows, n_cols), (batch_stride, row_stride, 1))
    view.copy_(torch.randn((1, n_rows, n_cols), generator=_gen(seed)))
    return view


# ----------------------------------------------------------------------------------------------
# References


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float) -> torch.Tensor:
    scores = (q.float() @ k.float().transpose(1, 2)) * sm_scale
    if causal:
        seq = q.shape[1]
        future = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)


def layernorm_ref(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xf = x.float()
    mean = xf.mean(dim=1)
    var = xf.var(dim=1, unbiased=False)
    rstd = torch.rsqrt(var + eps)
    y = torch.nn.functional.layer_norm(xf, (x.shape[1],), weight.float(), bias.float(), eps).to(x.dtype)
    return y, mean, rstd


# ----------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class Case:
    """One kernel variant: how to build its inputs at a size, run it through Triton, and check it with torch.

    `shape` is a template filled from `sizes[size]`; `make_inputs(seed, size)` takes a size name
    ("small", "medium") or an explicit mapping of the same dimension names.
    """

    name: str
    shape: str
    make_inputs: Callable[[int, Size], Inputs]
    run: Callable[[Inputs], Outputs]
    reference: Callable[[Inputs], Outputs]
    atol: float
    rtol: float
    sizes: Mapping[str, Mapping[str, int]]

    def dims(self, size: Size) -> Mapping[str, int]:
        return self.sizes[size] if isinstance(size, str) else size

    def describe(self, size: Size) -> str:
        return self.shape.format(**self.dims(size))


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    max_abs_err: float
    detail: str = ""


def check(out: Outputs, ref: Outputs, atol: float, rtol: float) -> CheckResult:
    """allclose on every output, compared in float64 so integer results (argmax, grid ids) work too."""
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    if len(outs) != len(refs):
        return CheckResult(False, math.inf, f"{len(outs)} outputs, expected {len(refs)}")
    ok, worst = True, 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        if tuple(o.shape) != tuple(r.shape):
            return CheckResult(False, math.inf, f"output {i}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        o64, r64 = o.detach().double(), r.detach().double()
        if o64.numel():
            err = (o64 - r64).abs()
            worst = max(worst, math.inf if err.isnan().any() else float(err.max()))
        ok = ok and torch.allclose(o64, r64, atol=atol, rtol=rtol)
    return CheckResult(ok, worst)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype)


def _case(
    name: str,
    shape: str,
    sizes: Mapping[str, Mapping[str, int]],
    make: Callable[..., Inputs],
    run: Callable[[Inputs], Outputs],
    reference: Callable[[Inputs], Outputs],
    atol: float,
    rtol: float,
) -> Case:
    def make_inputs(seed: int, size: Size) -> Inputs:
        dims = sizes[size] if isinstance(size, str) else size
        return make(seed, **dims)

    return Case(name, shape, make_inputs, run, reference, atol, rtol, sizes)


def _add_inputs(seed: int, n: int) -> Inputs:
    g = _gen(seed)
    return {"x": _randn(g, n), "y": _randn(g, n)}


def _softmax_inputs(seed: int, rows: int, cols: int) -> Inputs:
    return {"x": _randn(_gen(seed), rows, cols) * 3}


def _matmul_inputs(seed: int, M: int, N: int, K: int, dtype: torch.dtype, b_transposed: bool) -> Inputs:
    g = _gen(seed)
    a = _randn(g, M, K, dtype=dtype)
    # b.t() of a contiguous (N, K) tensor: strides (1, K), the non-contiguous operand case.
    b = _randn(g, N, K, dtype=dtype).t() if b_transposed else _randn(g, K, N, dtype=dtype)
    return {"a": a, "b": b}


def _matmul_ref(inp: Inputs) -> torch.Tensor:
    a, b = inp["a"], inp["b"]
    return (a.float() @ b.float()).to(a.dtype)


def _layernorm_inputs(seed: int, rows: int, cols: int) -> Inputs:
    g = _gen(seed)
    return {"x": _randn(g, rows, cols) * 2 + 0.5, "w": _randn(g, cols), "b": _randn(g, cols)}


def _attention_inputs(seed: int, bh: int, seq: int, d: int, dtype: torch.dtype) -> Inputs:
    g = _gen(seed)
    q, k, v = (_randn(g, bh, seq, d, dtype=dtype) for _ in range(3))
    return {"q": q, "k": k, "v": v, "sm_scale": 1.0 / math.sqrt(d)}


def _reduce_inputs(seed: int, M: int, N: int) -> Inputs:
    return {"x": _randn(_gen(seed), M, N)}


def _grid_inputs(seed: int, **dims: int) -> Inputs:
    return {"grid": tuple(dims[k] for k in ("gx", "gy", "gz") if k in dims)}


def _scalar_inputs(seed: int, rows: int, cols: int) -> Inputs:
    g = _gen(seed)
    return {"x": _randn(g, rows, cols), "scale": torch.tensor([0.75], dtype=torch.float32)}


def _int64_inputs(seed: int, rows: int, cols: int, row_stride: int) -> Inputs:
    return {"x": big_stride_view(seed, rows, cols, row_stride)}


def _dtype_tag(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16"}[dtype]


def _build_cases() -> list[Case]:
    cases = [
        _case(
            "vector_add",
            shape="n={n} (BLOCK 1024)",
            sizes={"small": {"n": 10_007}, "medium": {"n": 1_000_003}},
            make=_add_inputs,
            run=lambda i: add(i["x"], i["y"]),
            reference=lambda i: i["x"] + i["y"],
            atol=1e-6,
            rtol=1e-6,
        ),
        _case(
            "softmax",
            shape="{rows}x{cols}",
            sizes={"small": {"rows": 37, "cols": 203}, "medium": {"rows": 512, "cols": 1000}},
            make=_softmax_inputs,
            run=lambda i: softmax(i["x"]),
            reference=lambda i: torch.softmax(i["x"], dim=1),
            atol=1e-6,
            rtol=1e-5,
        ),
    ]
    for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 1e-2)):
        for bt in (False, True):
            cases.append(
                _case(
                    f"matmul-{_dtype_tag(dtype)}{'-bT' if bt else ''}",
                    shape="{M}x{K} @ {K}x{N}" + (" (b.t())" if bt else ""),
                    sizes={"small": {"M": 77, "N": 45, "K": 61}, "medium": {"M": 250, "N": 190, "K": 170}},
                    make=functools.partial(_matmul_inputs, dtype=dtype, b_transposed=bt),
                    run=lambda i: matmul(i["a"], i["b"]),
                    reference=_matmul_ref,
                    atol=tol,
                    rtol=tol,
                )
            )
    cases.append(
        _case(
            "layernorm",
            shape="{rows}x{cols} (BLOCK 128)",
            sizes={"small": {"rows": 19, "cols": 300}, "medium": {"rows": 256, "cols": 2000}},
            make=_layernorm_inputs,
            run=lambda i: layernorm(i["x"], i["w"], i["b"]),
            reference=lambda i: layernorm_ref(i["x"], i["w"], i["b"]),
            atol=1e-4,
            rtol=1e-4,
        )
    )
    for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 1e-2)):
        for causal in (False, True):
            cases.append(
                _case(
                    f"attention-{_dtype_tag(dtype)}{'-causal' if causal else ''}",
                    shape="bh={bh} seq={seq} d={d}",
                    sizes={"small": {"bh": 3, "seq": 45, "d": 16}, "medium": {"bh": 8, "seq": 200, "d": 32}},
                    make=functools.partial(_attention_inputs, dtype=dtype),
                    run=functools.partial(_run_attention, causal=causal),
                    reference=functools.partial(_attention_reference, causal=causal),
                    atol=tol,
                    rtol=tol,
                )
            )
    for op in REDUCE_OPS:
        for axis in (0, 1):
            cases.append(
                _case(
                    f"{op}-axis{axis}",
                    shape="{M}x{N}",
                    sizes={"small": {"M": 27, "N": 45}, "medium": {"M": 1000, "N": 300}},
                    make=_reduce_inputs,
                    run=functools.partial(_run_reduce, op=op, axis=axis),
                    reference=functools.partial(_reduce_reference, op=op, axis=axis),
                    atol=1e-4,
                    rtol=1e-5,
                )
            )
    cases += [
        _case(
            "grid-2d",
            shape="grid {gx}x{gy}",
            sizes={"small": {"gx": 5, "gy": 3}, "medium": {"gx": 64, "gy": 32}},
            make=_grid_inputs,
            run=lambda i: grid_ids(i["grid"]),
            reference=lambda i: grid_ids_ref(i["grid"]),
            atol=0,
            rtol=0,
        ),
        _case(
            "grid-3d",
            shape="grid {gx}x{gy}x{gz}",
            sizes={"small": {"gx": 4, "gy": 3, "gz": 2}, "medium": {"gx": 16, "gy": 8, "gz": 4}},
            make=_grid_inputs,
            run=lambda i: grid_ids(i["grid"]),
            reference=lambda i: grid_ids_ref(i["grid"]),
            atol=0,
            rtol=0,
        ),
        _case(
            "scalar-load-store",
            shape="{rows}x{cols}",
            sizes={"small": {"rows": 13, "cols": 37}, "medium": {"rows": 64, "cols": 100}},
            make=_scalar_inputs,
            run=lambda i: scaled_row_sum(i["x"], i["scale"]),
            reference=lambda i: i["x"].sum(dim=1) * i["scale"][0],
            atol=1e-5,
            rtol=1e-5,
        ),
        _case(
            "int64-offsets",
            shape="1x{rows}x{cols}, strides (2**31+64, {row_stride}, 1)",
            sizes={
                "small": {"rows": 10, "cols": 100, "row_stride": (1 << 20) + 13},
                "medium": {"rows": 40, "cols": 1000, "row_stride": (1 << 20) + 13},
            },
            make=_int64_inputs,
            run=lambda i: strided_rows(i["x"]),
            reference=lambda i: i["x"] * 2 + 1,
            atol=1e-6,
            rtol=1e-6,
        ),
    ]
    return cases


def _run_attention(inp: Inputs, causal: bool) -> torch.Tensor:
    return attention(inp["q"], inp["k"], inp["v"], causal, inp["sm_scale"])


def _attention_reference(inp: Inputs, causal: bool) -> torch.Tensor:
    return attention_ref(inp["q"], inp["k"], inp["v"], causal, inp["sm_scale"])


def _run_reduce(inp: Inputs, op: str, axis: int) -> torch.Tensor:
    return reduce2d(inp["x"], op, axis)


def _reduce_reference(inp: Inputs, op: str, axis: int) -> torch.Tensor:
    return reduce2d_ref(inp["x"], op, axis)


CASES: list[Case] = _build_cases()
CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}
