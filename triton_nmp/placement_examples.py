"""Small models for the placement pass's examples, tests and benchmark, written as plain Triton kernels.

`GemvChain`: `layers` matrix-vector products in a row (decode-style: one token through linear layers
stored like nn.Linear, [out, in] row-major), fp16, each program BLOCK_N output rows.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["gemv_kernel", "GemvChain"]


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, K)
    w = tl.load(w_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < N, other=0.0)
    x = tl.load(x_ptr + ks)
    y = tl.sum(w.to(tl.float32) * x[None, :].to(tl.float32), axis=1)
    tl.store(y_ptr + rows, y.to(tl.float16), mask=rows < N)


class GemvChain:
    """`layers` GEMVs of width `d`; `step()` runs them on the input vector."""

    def __init__(self, layers: int = 4, d: int = 512, block_n: int = 8, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.d, self.block_n = d, block_n
        self.ws = [torch.randn(d, d, generator=g, dtype=torch.float16) / d**0.5 for _ in range(layers)]
        self.x = torch.randn(d, generator=g, dtype=torch.float16)
        self.acts = [torch.empty(d, dtype=torch.float16) for _ in range(layers)]

    def step(self) -> torch.Tensor:
        h = self.x
        for w, a in zip(self.ws, self.acts):
            gemv_kernel[(triton.cdiv(self.d, self.block_n),)](w, h, a, self.d, K=self.d, BLOCK_N=self.block_n)
            h = a
        return h

    def reference(self) -> torch.Tensor:
        h = self.x.float()
        for w in self.ws:
            h = (w.float() @ h).half().float()
        return h
