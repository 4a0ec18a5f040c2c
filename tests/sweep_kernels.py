"""Kernels the sweep tests and benchmarks/sweep.py tune (module level, so sweep workers can import them)."""

from __future__ import annotations

import triton
import triton.language as tl

import triton_nmp


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, alpha * x + y, mask=m)


SCALE_ADD_SPACE = triton_nmp.config_space(tiles={"BLOCK": (128, 256, 512, 1024)}, num_stages=(1, 2),
                                          pu_mapping=("round_robin", "locality"))

scale_add_tuned = triton_nmp.autotune(SCALE_ADD_SPACE, key=["n"], top_k=1.0)(scale_add_kernel)


def scale_add_grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)
