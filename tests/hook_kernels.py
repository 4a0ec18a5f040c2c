"""Kernels for the autotuning-hook tests (Triton needs @jit functions in a source file)."""

import triton
import triton.language as tl

HUGE = 1 << 17

CONFIGS = [triton.Config({"BLOCK": b}) for b in (256, 1024, HUGE)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def plain_autotuned_norm(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # x minus x reversed within the block (tl.gather: any element may need any other), so the whole tile must
    # be in the scratchpad at once: BLOCK=HUGE can neither be strip-mined nor staged through the spill area.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x - tl.gather(x, BLOCK - 1 - tl.arange(0, BLOCK), 0), mask=offs < n)
