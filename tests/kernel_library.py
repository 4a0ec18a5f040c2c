"""A small Triton kernel library written the way real ones are (FlagGems, Liger-Kernel style): at import it turns
Triton's backend name into a torch device and uses it in the three usual ways. Used by tests/test_inductor.py.
"""

import torch
import triton
import triton.language as tl

BACKEND = triton.runtime.driver.active.get_current_target().backend
DEVICE = torch.device(BACKEND)  # form 1: torch.device(backend)
device_fn = getattr(torch, BACKEND)  # form 2: getattr(torch, backend), e.g. for synchronize()


@triton.jit
def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + alpha * y, mask=m)


def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=DEVICE)
    n = x.numel()
    _scaled_add_kernel[(triton.cdiv(n, 256),)](x, y, out, alpha, n, BLOCK=256)
    device_fn.synchronize()
    return out


class ScaledAdd(torch.autograd.Function):
    """x + alpha * y with a Triton forward and backward; autocast-aware like library ops."""

    @staticmethod
    @torch.amp.custom_fwd(device_type=BACKEND)  # form 3: custom_fwd(device_type=backend)
    def forward(ctx, x, y, alpha):
        ctx.alpha = alpha
        return scaled_add(x, y, alpha)

    @staticmethod
    @torch.amp.custom_bwd(device_type=BACKEND)
    def backward(ctx, grad):
        return grad, scaled_add(torch.zeros_like(grad), grad, ctx.alpha), None
