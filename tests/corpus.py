"""A corpus of kernels written in the forms real Triton libraries use, at LLM sizes.

Our own kernels (not copies), each in the style a library ships it: Liger-Kernel's 1-D row kernels
(one program per row, BLOCK = next power of two of the row), flash-linear-attention's 2-D block
kernels ([BT x BD] tiles, row blocks of 32/64/128, [BT x BD] gradient accumulators reduced over rows
after the loop), Liger's embedding (2-D blocks, `ids[:, None] * D + cols[None, :]`, atomic backward),
Liger's cross-entropy (online softmax over a 128k vocabulary in blocks, gradient written in place),
Liger's SwiGLU and RoPE, Triton's matmul tutorial (`% M` row wrap, its CUDA config list) and a paged
KV-cache decode read (a block table maps token blocks to pages, vLLM-style).

Each `CorpusCase` says which configs the library would launch at a hidden size (`configs(hidden)`)
and builds a launch for a size and a config: the arguments, the grid and a check against torch.
`tests/test_corpus.py` compiles every config at every size (the legality query: no LLVM, no run)
and runs a representative subset; `benchmarks/scratchpad.py --corpus` reports the scratchpad peak and
the spilled bytes of every case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

HIDDEN_SIZES = (768, 1024, 2048, 4096, 8192)
VOCAB = 128256  # Llama 3's vocabulary


# ------------------------------------------------------------------------------------------ kernels


@triton.jit
def embedding_fwd(table, ids, out, n_ids, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Liger's form: offsets first (`ids[:, None] * D + cols[None, :]`), then one pointer add."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n_ids
    idx = tl.load(ids + offs_m, mask=mask_m, other=0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = mask_m[:, None] & (offs_n < D)[None, :]
    offsets = idx[:, None] * D + offs_n[None, :]
    rows = tl.load(table + offsets, mask=mask, other=0.0)
    tl.store(out + offs_m[:, None] * D + offs_n[None, :], rows, mask=mask)


@triton.jit
def embedding_fwd_ptr_first(table, ids, out, n_ids, D: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr):
    """The pointer-first spelling: `table + ids[:, None] * D + cols[None, :]` adds to a pointer twice."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n_ids
    idx = tl.load(ids + offs_m, mask=mask_m, other=0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = mask_m[:, None] & (offs_n < D)[None, :]
    rows = tl.load(table + idx[:, None] * D + offs_n[None, :], mask=mask, other=0.0)
    tl.store(out + offs_m[:, None] * D + offs_n[None, :], rows, mask=mask)


@triton.jit
def embedding_bwd(grad_out, grad_table, ids, n_ids, D: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < n_ids
    idx = tl.load(ids + offs_m, mask=mask_m, other=0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = mask_m[:, None] & (offs_n < D)[None, :]
    g = tl.load(grad_out + offs_m[:, None] * D + offs_n[None, :], mask=mask, other=0.0)
    tl.atomic_add(grad_table + idx[:, None] * D + offs_n[None, :], g, mask=mask)


@triton.jit
def norm_fwd_row(X, Y, W, B, Mean, Rstd, stride, n_cols, eps, IS_RMS: tl.constexpr, BLOCK: tl.constexpr):
    """Liger/tutorial 1-D row form: one program per row, the whole row in one tile."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if IS_RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=0) / n_cols
        tl.store(Mean + row, mean)
        xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(Rstd + row, rstd)
    y = xc * rstd * w
    if not IS_RMS:
        y += tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def norm_bwd_row(X, W, Mean, Rstd, DY, DX, DW, DB, stride, n_rows, n_cols, rows_per_program,
                 IS_RMS: tl.constexpr, BLOCK: tl.constexpr):
    """Liger's backward: each program walks `rows_per_program` rows, accumulating dW (and dB) partials
    in 1-D tiles; the host sums the partials."""
    pid = tl.program_id(0)
    row_start = pid * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    db = tl.zeros((BLOCK,), dtype=tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    for row in range(row_start, row_end):
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + row)
        if IS_RMS:
            xhat = x * rstd
        else:
            xhat = (x - tl.load(Mean + row)) * rstd
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, axis=0) / n_cols
        if IS_RMS:
            dx = (wdy - xhat * c1) * rstd
        else:
            c2 = tl.sum(wdy, axis=0) / n_cols
            dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(DX + row * stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(DW + pid * n_cols + cols, dw, mask=mask)
    if not IS_RMS:
        tl.store(DB + pid * n_cols + cols, db, mask=mask)


@triton.jit
def norm_fwd_block(X, Y, W, B, Mean, Rstd, eps, T, D: tl.constexpr, IS_RMS: tl.constexpr, BT: tl.constexpr,
                   BD: tl.constexpr):
    """flash-linear-attention's 2-D form: a block of BT rows x BD columns, per-row reductions."""
    i_t = tl.program_id(0)
    o_t = i_t * BT + tl.arange(0, BT)
    o_d = tl.arange(0, BD)
    m_t = o_t < T
    m_d = o_d < D
    m = m_t[:, None] & m_d[None, :]
    x = tl.load(X + o_t[:, None] * D + o_d[None, :], mask=m, other=0.0).to(tl.float32)
    if IS_RMS:
        xbar = tl.where(m_d[None, :], x, 0.0)
    else:
        mean = tl.sum(x, axis=1) / D
        tl.store(Mean + o_t, mean, mask=m_t)
        xbar = tl.where(m_d[None, :], x - mean[:, None], 0.0)
    var = tl.sum(xbar * xbar, axis=1) / D
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(Rstd + o_t, rstd, mask=m_t)
    w = tl.load(W + o_d, mask=m_d).to(tl.float32)
    y = xbar * rstd[:, None] * w[None, :]
    if not IS_RMS:
        y = y + tl.load(B + o_d, mask=m_d).to(tl.float32)[None, :]
    tl.store(Y + o_t[:, None] * D + o_d[None, :], y.to(Y.dtype.element_ty), mask=m)


@triton.jit
def norm_bwd_block(X, W, Mean, Rstd, DY, DX, DW, DB, T, BS, D: tl.constexpr, IS_RMS: tl.constexpr,
                   BT: tl.constexpr, BD: tl.constexpr):
    """flash-linear-attention's 2-D backward: [BT x BD] fp32 dW/dB accumulators over the program's row
    blocks, reduced over rows after the loop."""
    i_s = tl.program_id(0)
    o_d = tl.arange(0, BD)
    m_d = o_d < D
    w = tl.load(W + o_d, mask=m_d).to(tl.float32)
    dw = tl.zeros((BT, BD), dtype=tl.float32)
    db = tl.zeros((BT, BD), dtype=tl.float32)
    end = tl.minimum(i_s * BS + BS, T)
    for i_t in range(i_s * BS, end, BT):
        o_t = i_t + tl.arange(0, BT)
        m_t = o_t < end
        m = m_t[:, None] & m_d[None, :]
        x = tl.load(X + o_t[:, None] * D + o_d[None, :], mask=m, other=0.0).to(tl.float32)
        dy = tl.load(DY + o_t[:, None] * D + o_d[None, :], mask=m, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + o_t, mask=m_t, other=0.0)
        if IS_RMS:
            xhat = x * rstd[:, None]
        else:
            xhat = (x - tl.load(Mean + o_t, mask=m_t, other=0.0)[:, None]) * rstd[:, None]
        xhat = tl.where(m_d[None, :], xhat, 0.0)
        wdy = dy * w[None, :]
        dw += tl.where(m_t[:, None], dy * xhat, 0.0)
        db += tl.where(m_t[:, None], dy, 0.0)
        c1 = tl.sum(xhat * wdy, axis=1) / D
        if IS_RMS:
            dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
        else:
            c2 = tl.sum(wdy, axis=1) / D
            dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(DX + o_t[:, None] * D + o_d[None, :], dx.to(DX.dtype.element_ty), mask=m)
    tl.store(DW + i_s * D + o_d, tl.sum(dw, axis=0), mask=m_d)
    if not IS_RMS:
        tl.store(DB + i_s * D + o_d, tl.sum(db, axis=0), mask=m_d)


@triton.jit
def cross_entropy_fwd_bwd(X, Y, Loss, stride, n_cols, n_non_ignore, ignore_index, BLOCK: tl.constexpr):
    """Liger's form: one program per row; an online max/sum pass over the vocabulary in BLOCK chunks,
    then a second pass that overwrites the logits with their gradient."""
    row = tl.program_id(0).to(tl.int64)
    X += row * stride
    y = tl.load(Y + row)
    if y == ignore_index:
        for i in range(0, n_cols, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(X + offs, 0.0, mask=offs < n_cols)
        tl.store(Loss + row, 0.0)
        return
    m = float("-inf")
    d = 0.0
    x_y = tl.load(X + y).to(tl.float32)
    for i in range(0, n_cols, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        xb = tl.load(X + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(xb, axis=0))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(xb - m_new), axis=0)
        m = m_new
    lse = m + tl.log(d)
    for i in range(0, n_cols, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        xb = tl.load(X + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        g = tl.exp(xb - m) / d / n_non_ignore
        tl.store(X + offs, g.to(X.dtype.element_ty), mask=offs < n_cols)
    tl.debug_barrier()
    g_y = (tl.exp(x_y - m) / d - 1.0) / n_non_ignore
    tl.store(X + y, g_y.to(X.dtype.element_ty))
    tl.store(Loss + row, (lse - x_y) / n_non_ignore)


@triton.jit
def swiglu_fwd(A, B, C, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(A + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * stride + cols, mask=mask, other=0.0)
    c = (a * tl.sigmoid(a)).to(b.dtype) * b
    tl.store(C + row * stride + cols, c, mask=mask)


@triton.jit
def swiglu_bwd(DC, A, B, stride, n_cols, BLOCK: tl.constexpr):
    """Liger's backward: da and db overwrite a and b in place."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dc = tl.load(DC + row * stride + cols, mask=mask, other=0.0)
    a = tl.load(A + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + row * stride + cols, mask=mask, other=0.0)
    sig = tl.sigmoid(a)
    silu = a * sig
    db = dc * silu.to(dc.dtype)
    da = dc * (silu * (1 - sig) + sig).to(dc.dtype) * b
    tl.store(A + row * stride + cols, da, mask=mask)
    tl.store(B + row * stride + cols, db, mask=mask)


@triton.jit
def rope_fwd(Q, K, COS, SIN, q_row_stride, k_row_stride, cos_row_stride, seq_len, n_qh: tl.constexpr,
             n_kh: tl.constexpr, hd: tl.constexpr, pad_n_qh: tl.constexpr, pad_n_kh: tl.constexpr,
             pad_hd: tl.constexpr):
    """Liger's RoPE: one program per token; the token's heads as a [heads x hd/2] tile per half."""
    pid = tl.program_id(0).to(tl.int64)
    Q += pid * q_row_stride
    K += pid * k_row_stride
    cos_row = pid % seq_len
    half = tl.arange(0, pad_hd // 2)
    cmask = half < hd // 2
    cos = tl.load(COS + cos_row * cos_row_stride + half, mask=cmask, other=0.0)
    sin = tl.load(SIN + cos_row * cos_row_stride + half, mask=cmask, other=0.0)
    q1_offs = tl.arange(0, pad_n_qh)[:, None] * hd + half[None, :]
    k1_offs = tl.arange(0, pad_n_kh)[:, None] * hd + half[None, :]
    qmask = (tl.arange(0, pad_n_qh)[:, None] < n_qh) & cmask[None, :]
    kmask = (tl.arange(0, pad_n_kh)[:, None] < n_kh) & cmask[None, :]
    q1 = tl.load(Q + q1_offs, mask=qmask, other=0.0)
    q2 = tl.load(Q + q1_offs + hd // 2, mask=qmask, other=0.0)
    k1 = tl.load(K + k1_offs, mask=kmask, other=0.0)
    k2 = tl.load(K + k1_offs + hd // 2, mask=kmask, other=0.0)
    tl.store(Q + q1_offs, q1 * cos[None, :] - q2 * sin[None, :], mask=qmask)
    tl.store(Q + q1_offs + hd // 2, q2 * cos[None, :] + q1 * sin[None, :], mask=qmask)
    tl.store(K + k1_offs, k1 * cos[None, :] - k2 * sin[None, :], mask=kmask)
    tl.store(K + k1_offs + hd // 2, k2 * cos[None, :] + k1 * sin[None, :], mask=kmask)


@triton.jit
def matmul_tutorial(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                    GROUP_SIZE_M: tl.constexpr):
    """Triton's matmul tutorial (03): grouped program order, rows and columns wrapped with `% M`/`% N`,
    loop-carried pointer tiles."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def matmul_masked(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    """The same matmul with masked rows and columns instead of `% M`: the baseline of the `% M` goal."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_bn[None, :] < N), other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    c_ptrs = c_ptr + stride_cm * offs_am[:, None] + stride_cn * offs_bn[None, :]
    tl.store(c_ptrs, c, mask=(offs_am[:, None] < M) & (offs_bn[None, :] < N))


@triton.jit
def paged_decode_attention(Q, K_cache, V_cache, block_table, seq_lens, Out, scale, max_blocks, stride_kb, stride_kt,
                           stride_kh, n_kv_heads, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
                           BLOCK_T: tl.constexpr):
    """A decode step over a paged KV cache: one program per (sequence, head); token blocks of BLOCK_T
    tokens whose pages come from the block table (a run-time vector of page numbers per block)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    n_heads = tl.num_programs(1)
    kv_head = head // (n_heads // n_kv_heads)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + (seq * n_heads + head) * HEAD_DIM + offs_d).to(tl.float32)
    seq_len = tl.load(seq_lens + seq)
    m = float("-inf")
    den = 0.0
    acc = tl.zeros((HEAD_DIM,), dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_T):
        tok = start + tl.arange(0, BLOCK_T)
        valid = tok < seq_len
        page = tl.load(block_table + seq * max_blocks + tok // PAGE, mask=valid, other=0)
        kv_offs = page[:, None] * stride_kb + (tok % PAGE)[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :]
        k = tl.load(K_cache + kv_offs, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[None, :] * k, axis=1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(V_cache + kv_offs, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        den = den * alpha + tl.sum(p, axis=0)
        m = m_new
    tl.store(Out + (seq * n_heads + head) * HEAD_DIM + offs_d, (acc / den).to(Out.dtype.element_ty))


# ------------------------------------------------------------------------------------------ cases


@dataclass
class Launch:
    """One launch of a corpus kernel: its arguments (constexprs from the config excluded), the grid, and
    a check of the outputs against torch to call after the launch."""

    args: dict[str, Any]
    grid: tuple[int, ...]
    check: Callable[[], None]


@dataclass(frozen=True)
class CorpusCase:
    name: str
    kernel: Any  # a triton JITFunction
    configs: Callable[[int], list[dict]]  # the configs the library launches at a hidden size
    build: Callable[[int, int, dict, Make], Launch]  # (hidden, rows, config, tensor factory) -> launch
    sizes: tuple[int, ...] = HIDDEN_SIZES
    rows: int = 4  # rows (tokens) of a compile-only check
    small: tuple[int, int] = (768, 8)  # (hidden, rows) of the default numerics run
    note: str = ""
    extra: dict = field(default_factory=dict)

    def launch(self, hidden: int, rows: int, config: dict, meta: bool = False, seed: int = 0) -> Launch:
        """The launch for a size and config; `meta`: one-element stand-in tensors, for compile-only checks."""
        return self.build(hidden, rows, config, Make(meta, seed))

    def run(self, hidden: int, rows: int, config: dict):
        """Launch on the active driver and check against torch; returns the compiled kernel."""
        ln = self.launch(hidden, rows, config)
        compiled = self.kernel[ln.grid](**ln.args, **config)
        ln.check()
        return compiled


def _close(actual, expected, rtol=1e-4, atol=1e-4):
    torch.testing.assert_close(actual.float(), expected.float(), rtol=rtol, atol=atol)


def _np2(n: int) -> int:
    return triton.next_power_of_2(n)


class Make:
    """Tensor factory of a launch. With `meta` the tensors are one-element stand-ins of the right dtype:
    a compile-only check needs the argument types, not gigabytes of random data."""

    def __init__(self, meta: bool, seed: int):
        self.meta = meta
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
        if self.meta:
            return torch.empty(1, dtype=dtype)
        return (torch.randn(*shape, generator=self.g) * scale).to(dtype)

    def randint(self, high: int, *shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        if self.meta:
            return torch.empty(1, dtype=dtype)
        return torch.randint(0, high, shape, generator=self.g).to(dtype)

    def zeros(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(1 if self.meta else shape, dtype=dtype)

    def empty(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.empty(1 if self.meta else shape, dtype=dtype)


# embedding ---------------------------------------------------------------------------------------

def _embedding_configs(hidden: int) -> list[dict]:
    b = _np2(min(128, hidden))  # Liger: BLOCK_SIZE_M = BLOCK_SIZE_N = next_power_of_2(min(128, D))
    return [{"BLOCK_M": b, "BLOCK_N": b}]


def _embedding_fwd(id_dtype: torch.dtype, vocab: int = 4096):
    def build(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
        table = mk.randn(vocab, hidden)
        ids = mk.randint(vocab, rows, dtype=id_dtype)
        out = mk.empty(rows, hidden)
        grid = (triton.cdiv(rows, cfg["BLOCK_M"]), triton.cdiv(hidden, cfg["BLOCK_N"]))
        return Launch(dict(table=table, ids=ids, out=out, n_ids=rows, D=hidden), grid,
                      lambda: _close(out, table[ids.long()], 0, 0))
    return build


def _embedding_bwd(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
    vocab = 1000
    ids = mk.randint(vocab, rows)
    grad_out = mk.randn(rows, hidden)
    grad_table = mk.zeros(vocab, hidden)
    grid = (triton.cdiv(rows, cfg["BLOCK_M"]), triton.cdiv(hidden, cfg["BLOCK_N"]))

    def check():
        ref = torch.zeros(vocab, hidden).index_add_(0, ids, grad_out)
        _close(grad_table, ref, 1e-5, 1e-5)
    return Launch(dict(grad_out=grad_out, grad_table=grad_table, ids=ids, n_ids=rows, D=hidden), grid, check)


# norms -----------------------------------------------------------------------------------------------

def _ref_norm(x, w, b, eps, rms):
    x = x.float()
    if rms:
        rstd = torch.rsqrt(x.pow(2).mean(-1) + eps)
        return x * rstd[:, None] * w, None, rstd
    mean = x.mean(-1)
    rstd = torch.rsqrt(((x - mean[:, None]) ** 2).mean(-1) + eps)
    return (x - mean[:, None]) * rstd[:, None] * w + b, mean, rstd


def _row_configs(hidden: int) -> list[dict]:
    return [{"BLOCK": _np2(hidden)}]  # Liger's calculate_settings: the whole row (num_warps ignored on nmp)


def _norm_fwd_check(x, w, b, y, mean, rstd, rms):
    def check():
        ry, rm, rr = _ref_norm(x, w, b, 1e-6, rms)
        _close(y, ry, 1e-4, 1e-4)
        _close(rstd, rr, 1e-4, 1e-4)
        if not rms:
            _close(mean, rm, 1e-5, 1e-5)
    return check


def _norm_fwd_row(rms: bool):
    def build(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
        x, w, b = mk.randn(rows, hidden), mk.randn(hidden), mk.randn(hidden)
        y, mean, rstd = mk.empty(rows, hidden), mk.empty(rows), mk.empty(rows)
        return Launch(dict(X=x, Y=y, W=w, B=b, Mean=mean, Rstd=rstd, stride=hidden, n_cols=hidden, eps=1e-6,
                           IS_RMS=rms), (rows,), _norm_fwd_check(x, w, b, y, mean, rstd, rms))
    return build


def _norm_bwd_inputs(hidden: int, rows: int, rms: bool, mk: Make):
    x, w, dy = mk.randn(rows, hidden), mk.randn(hidden), mk.randn(rows, hidden)
    if mk.meta:
        return x, w, dy, mk.empty(rows), mk.empty(rows)
    _, mean, rstd = _ref_norm(x, w, torch.zeros(hidden), 1e-6, rms)
    return x, w, dy, mean if mean is not None else torch.zeros(rows), rstd


def _norm_bwd_check(x, w, dy, dx, dw, db, rms):
    def check():
        xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        br = torch.zeros_like(w, requires_grad=True)
        _ref_norm(xr, wr, br, 1e-6, rms)[0].backward(dy)
        _close(dx, xr.grad, 1e-3, 1e-3)
        _close(dw.sum(0), wr.grad, 1e-3, 1e-3)
        if not rms:
            _close(db.sum(0), br.grad, 1e-3, 1e-3)
    return check


def _norm_bwd_row(rms: bool):
    def build(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
        x, w, dy, mean, rstd = _norm_bwd_inputs(hidden, rows, rms, mk)
        programs = min(rows, 4)
        dx, dw, db = mk.empty(rows, hidden), mk.zeros(programs, hidden), mk.zeros(programs, hidden)
        return Launch(dict(X=x, W=w, Mean=mean, Rstd=rstd, DY=dy, DX=dx, DW=dw, DB=db, stride=hidden, n_rows=rows,
                           n_cols=hidden, rows_per_program=triton.cdiv(rows, programs), IS_RMS=rms), (programs,),
                      _norm_bwd_check(x, w, dy, dx, dw, db, rms))
    return build


def _block_fwd_configs(hidden: int) -> list[dict]:
    return [{"BT": bt, "BD": _np2(hidden)} for bt in (32, 64, 128)]  # fla layer_norm_fwd_kernel's autotune list


def _block_bwd_configs(hidden: int) -> list[dict]:
    return [{"BT": bt, "BD": _np2(hidden)} for bt in (32, 64)]  # fla layer_norm_bwd_kernel's autotune list


def _norm_fwd_block(rms: bool):
    def build(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
        x, w, b = mk.randn(rows, hidden), mk.randn(hidden), mk.randn(hidden)
        y, mean, rstd = mk.empty(rows, hidden), mk.empty(rows), mk.empty(rows)
        return Launch(dict(X=x, Y=y, W=w, B=b, Mean=mean, Rstd=rstd, eps=1e-6, T=rows, D=hidden, IS_RMS=rms),
                      (triton.cdiv(rows, cfg["BT"]),), _norm_fwd_check(x, w, b, y, mean, rstd, rms))
    return build


def _norm_bwd_block(rms: bool):
    def build(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
        x, w, dy, mean, rstd = _norm_bwd_inputs(hidden, rows, rms, mk)
        programs = min(rows, 2)
        dx, dw, db = mk.empty(rows, hidden), mk.zeros(programs, hidden), mk.zeros(programs, hidden)
        return Launch(dict(X=x, W=w, Mean=mean, Rstd=rstd, DY=dy, DX=dx, DW=dw, DB=db, T=rows,
                           BS=triton.cdiv(rows, programs), D=hidden, IS_RMS=rms), (programs,),
                      _norm_bwd_check(x, w, dy, dx, dw, db, rms))
    return build


# cross-entropy -----------------------------------------------------------------------------------------

def _ce_configs(hidden: int) -> list[dict]:
    return [{"BLOCK": b} for b in (2048, 4096, 32768)]  # Liger's MAX_FUSED_SIZE on npu / xpu / cuda


def _cross_entropy(vocab: int, rows: int, cfg: dict, mk: Make) -> Launch:
    x = mk.randn(rows, vocab)
    y = mk.randint(vocab, rows)
    if not mk.meta:
        y[-1] = -100  # one ignored row
    n = max(int((y != -100).sum()), 1)
    x0 = x.clone()
    loss = mk.empty(rows)

    def check():
        xr = x0.clone().requires_grad_(True)
        ref = torch.nn.functional.cross_entropy(xr, y, ignore_index=-100, reduction="sum") / n
        ref.backward()
        _close(loss.sum(), ref, 1e-4, 1e-4)
        _close(x, xr.grad, 1e-4, 1e-6)
    return Launch(dict(X=x, Y=y, Loss=loss, stride=vocab, n_cols=vocab, n_non_ignore=n, ignore_index=-100),
                  (rows,), check)


# SwiGLU --------------------------------------------------------------------------------------------------

def _intermediate(hidden: int) -> int:
    return 256 * triton.cdiv(8 * hidden // 3, 256)  # Llama's MLP width: 8/3 of hidden, rounded up


def _swiglu_configs(hidden: int) -> list[dict]:
    return [{"BLOCK": _np2(_intermediate(hidden))}]


def _swiglu_fwd(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
    n = _intermediate(hidden)
    a, b, c = mk.randn(rows, n), mk.randn(rows, n), mk.empty(rows, n)
    return Launch(dict(A=a, B=b, C=c, stride=n, n_cols=n), (rows,),
                  lambda: _close(c, torch.nn.functional.silu(a) * b, 1e-5, 1e-5))


def _swiglu_bwd(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
    n = _intermediate(hidden)
    a, b, dc = mk.randn(rows, n), mk.randn(rows, n), mk.randn(rows, n)
    ar, br = a.clone().requires_grad_(True), b.clone().requires_grad_(True)

    def check():
        (torch.nn.functional.silu(ar) * br).backward(dc)
        _close(a, ar.grad, 1e-5, 1e-5)
        _close(b, br.grad, 1e-5, 1e-5)
    return Launch(dict(DC=dc, A=a, B=b, stride=n, n_cols=n), (rows,), check)


# RoPE -------------------------------------------------------------------------------------------------------

def _heads(hidden: int) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim): heads of 128, at most 8 KV heads (grouped-query attention)."""
    return hidden // 128, min(8, hidden // 128), 128


def _rope_configs(hidden: int) -> list[dict]:
    n_qh, n_kh, hd = _heads(hidden)
    return [{"pad_n_qh": _np2(n_qh), "pad_n_kh": _np2(n_kh), "pad_hd": _np2(hd)}]


def _rope(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
    n_qh, n_kh, hd = _heads(hidden)
    q, k = mk.randn(rows, n_qh, hd), mk.randn(rows, n_kh, hd)
    pos = torch.arange(rows, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    q0, k0 = q.clone(), k.clone()

    def rot(t):
        t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
        return t * cos[:, None, :] + torch.cat([-t2, t1], -1) * sin[:, None, :]

    def check():
        _close(q, rot(q0), 1e-5, 1e-5)
        _close(k, rot(k0), 1e-5, 1e-5)
    return Launch(dict(Q=q, K=k, COS=cos, SIN=sin, q_row_stride=n_qh * hd, k_row_stride=n_kh * hd,
                       cos_row_stride=hd, seq_len=rows, n_qh=n_qh, n_kh=n_kh, hd=hd), (rows,), check)


# matmul ---------------------------------------------------------------------------------------------------

# The CUDA fp16 configs of Triton's matmul tutorial (`get_cuda_autotune_config`), GROUP_SIZE_M 8.
MATMUL_CONFIGS = [
    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "num_stages": 3},
    {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 32, "num_stages": 4},
    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "num_stages": 4},
    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "num_stages": 4},
    {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "num_stages": 4},
    {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "num_stages": 4},
    {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "num_stages": 5},
    {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "num_stages": 5},
]


def _matmul_configs(hidden: int) -> list[dict]:
    return [dict(c, GROUP_SIZE_M=8) for c in MATMUL_CONFIGS]


def _matmul(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
    """C[rows x hidden] = A[rows x hidden] @ B[hidden x hidden] in fp16 (a projection)."""
    a = mk.randn(rows, hidden, dtype=torch.float16)
    b = mk.randn(hidden, hidden, dtype=torch.float16, scale=hidden ** -0.5)
    c = mk.empty(rows, hidden, dtype=torch.float16)
    grid = (triton.cdiv(rows, cfg["BLOCK_SIZE_M"]) * triton.cdiv(hidden, cfg["BLOCK_SIZE_N"]),)
    return Launch(dict(a_ptr=a, b_ptr=b, c_ptr=c, M=rows, N=hidden, K=hidden, stride_am=hidden, stride_ak=1,
                       stride_bk=hidden, stride_bn=1, stride_cm=hidden, stride_cn=1), grid,
                  lambda: _close(c, a.float() @ b.float(), 2e-2, 2e-2))


# paged KV cache -------------------------------------------------------------------------------------------

def _paged_configs(hidden: int) -> list[dict]:
    return [{"BLOCK_T": bt, "PAGE": 16} for bt in (16, 32, 64)]


def _paged(hidden: int, rows: int, cfg: dict, mk: Make) -> Launch:
    """`rows` sequences of up to 100 tokens over a shuffled page pool."""
    n_heads, n_kv, hd = _heads(hidden)
    page = cfg["PAGE"]
    max_blocks = triton.cdiv(100, page)
    n_pages = rows * max_blocks + 3
    lens = mk.randint(99, rows, dtype=torch.int32) + 1
    table = (torch.randperm(n_pages, generator=mk.g)[: rows * max_blocks].view(rows, max_blocks).to(torch.int32)
             if not mk.meta else mk.empty(1, dtype=torch.int32))
    kc, vc = mk.randn(n_pages, page, n_kv, hd), mk.randn(n_pages, page, n_kv, hd)
    q, out = mk.randn(rows, n_heads, hd), mk.empty(rows, n_heads, hd)
    scale = hd ** -0.5

    def check():
        rep = n_heads // n_kv
        for s in range(rows):
            n = int(lens[s])
            pages = table[s, : triton.cdiv(n, page)].long()
            k = kc[pages].reshape(-1, n_kv, hd)[:n].repeat_interleave(rep, 1)
            v = vc[pages].reshape(-1, n_kv, hd)[:n].repeat_interleave(rep, 1)
            p = torch.softmax(torch.einsum("hd,thd->ht", q[s], k) * scale, -1)
            _close(out[s], torch.einsum("ht,thd->hd", p, v), 1e-4, 1e-4)
    return Launch(dict(Q=q, K_cache=kc, V_cache=vc, block_table=table, seq_lens=lens, Out=out, scale=scale,
                       max_blocks=max_blocks, stride_kb=page * n_kv * hd, stride_kt=n_kv * hd, stride_kh=hd,
                       n_kv_heads=n_kv, HEAD_DIM=hd), (rows, n_heads), check)


CASES: list[CorpusCase] = [
    CorpusCase("embedding_fwd_i64", embedding_fwd, _embedding_configs, _embedding_fwd(torch.int64), rows=256,
               small=(768, 200), note="nn.Embedding's default int64 ids"),
    CorpusCase("embedding_fwd_i32", embedding_fwd, _embedding_configs, _embedding_fwd(torch.int32), rows=256,
               small=(768, 200)),
    CorpusCase("embedding_fwd_ptr_first", embedding_fwd_ptr_first, _embedding_configs, _embedding_fwd(torch.int64),
               rows=256, small=(768, 200)),
    CorpusCase("embedding_bwd", embedding_bwd, _embedding_configs, _embedding_bwd, rows=256, small=(768, 200)),
    CorpusCase("layer_norm_fwd_row", norm_fwd_row, _row_configs, _norm_fwd_row(False)),
    CorpusCase("rms_norm_fwd_row", norm_fwd_row, _row_configs, _norm_fwd_row(True)),
    CorpusCase("layer_norm_bwd_row", norm_bwd_row, _row_configs, _norm_bwd_row(False)),
    CorpusCase("rms_norm_bwd_row", norm_bwd_row, _row_configs, _norm_bwd_row(True)),
    CorpusCase("layer_norm_fwd_block", norm_fwd_block, _block_fwd_configs, _norm_fwd_block(False), rows=256,
               small=(256, 100)),
    CorpusCase("rms_norm_fwd_block", norm_fwd_block, _block_fwd_configs, _norm_fwd_block(True), rows=256,
               small=(256, 100)),
    CorpusCase("layer_norm_bwd_block", norm_bwd_block, _block_bwd_configs, _norm_bwd_block(False), rows=256,
               small=(256, 100)),
    CorpusCase("rms_norm_bwd_block", norm_bwd_block, _block_bwd_configs, _norm_bwd_block(True), rows=256,
               small=(256, 100)),
    CorpusCase("cross_entropy_128k", cross_entropy_fwd_bwd, _ce_configs,
               lambda h, r, c, mk: _cross_entropy(VOCAB, r, c, mk),
               sizes=(VOCAB,), rows=2, small=(VOCAB, 2), note="hidden is the vocabulary"),
    CorpusCase("swiglu_fwd", swiglu_fwd, _swiglu_configs, _swiglu_fwd),
    CorpusCase("swiglu_bwd", swiglu_bwd, _swiglu_configs, _swiglu_bwd),
    CorpusCase("rope", rope_fwd, _rope_configs, _rope, small=(1024, 8)),
    CorpusCase("matmul_tutorial", matmul_tutorial, _matmul_configs, _matmul, rows=512, small=(768, 256)),
    CorpusCase("paged_kv_decode", paged_decode_attention, _paged_configs, _paged, small=(1024, 2)),
]

BY_NAME = {c.name: c for c in CASES}
