"""Small models for the placement pass's examples, tests and benchmark, written as plain Triton kernels.

`GemvChain`: `layers` matrix-vector products in a row (decode-style: one token through linear layers
stored like nn.Linear, [out, in] row-major), fp16, each program BLOCK_N output rows.
`FanOut`: one GEMV makes a hidden vector h that `readers` GEMVs then read (a token's hidden state read
by several projections or experts): whether h is worth a copy in every bank (written by broadcast
stores once, read locally by every reader) depends on the target (benchmarks/placement.py, section 3).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["gemv_kernel", "GemvChain", "FanOut"]


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    w = tl.load(w_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < N) & (ks[None, :] < K), other=0.0)
    x = tl.load(x_ptr + ks, mask=ks < K, other=0.0)
    y = tl.sum(w.to(tl.float32) * x[None, :].to(tl.float32), axis=1)
    tl.store(y_ptr + rows, y.to(tl.float16), mask=rows < N)


class GemvChain:
    """`layers` GEMVs of width `d` (with `ffn`, every layer is d -> d, d -> ffn, ffn -> d: the linear
    layers of a decoder block); `step()` runs them on the input vector."""

    def __init__(self, layers: int = 4, d: int = 512, block_n: int = 8, seed: int = 0, ffn: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.d, self.block_n = d, block_n
        shapes = [(d, d), (ffn, d), (d, ffn)] * layers if ffn else [(d, d)] * layers  # (out, in)
        self.ws = [torch.randn(n, k, generator=g, dtype=torch.float16) / k**0.5 for n, k in shapes]
        self.x = torch.randn(d, generator=g, dtype=torch.float16)
        self.acts = [torch.empty(n, dtype=torch.float16) for n, _ in shapes]

    def step(self) -> torch.Tensor:
        h = self.x
        for w, a in zip(self.ws, self.acts):
            n, k = w.shape
            bk = triton.next_power_of_2(k)
            bn = min(self.block_n, max(1, 16384 // bk))  # an fp32 product tile of at most 64 KiB
            gemv_kernel[(triton.cdiv(n, bn),)](w, h, a, n, k, BLOCK_N=bn, BLOCK_K=bk)
            h = a
        return h

    def reference(self) -> torch.Tensor:
        h = self.x.float()
        for w in self.ws:
            h = (w.float() @ h).half().float()
        return h


class FanOut:
    """h = W0 x, then y_i = W_i h for `readers` GEMVs (all d x d, fp16, one output row per program)."""

    def __init__(self, readers: int = 4, d: int = 256, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.d = d
        self.ws = [torch.randn(d, d, generator=g, dtype=torch.float16) / d**0.5 for _ in range(readers + 1)]
        self.x = torch.randn(d, generator=g, dtype=torch.float16)
        self.h = torch.empty(d, dtype=torch.float16)
        self.ys = [torch.empty(d, dtype=torch.float16) for _ in range(readers)]

    def step(self) -> list[torch.Tensor]:
        d = self.d
        gemv_kernel[(d,)](self.ws[0], self.x, self.h, d, d, BLOCK_N=1, BLOCK_K=triton.next_power_of_2(d))
        for w, y in zip(self.ws[1:], self.ys):
            gemv_kernel[(d,)](w, self.h, y, d, d, BLOCK_N=1, BLOCK_K=triton.next_power_of_2(d))
        return self.ys

    def reference(self) -> list[torch.Tensor]:
        h = (self.ws[0].float() @ self.x.float()).half().float()
        return [(w.float() @ h).half().float() for w in self.ws[1:]]
