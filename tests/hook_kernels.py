"""Kernels for the autotuning-hook tests (Triton needs @jit functions in a source file)."""

import triton
import triton.language as tl

HUGE = 1 << 17

CONFIGS = [triton.Config({"BLOCK": b}) for b in (256, 1024, HUGE)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def plain_autotuned_norm(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # x / max(x) over the block: the whole tile stays live, so BLOCK=HUGE cannot fit the scratchpad.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, x - tl.max(x, axis=0), mask=offs < n)
