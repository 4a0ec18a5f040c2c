"""Liger-Kernel's public ops on nmp, unchanged, on CPU tensors (skipped when the package is absent).

Install it next to Triton without letting it touch triton or torch:
`pip install --no-deps liger-kernel==0.8.5`. Each case runs an op forward and backward through Liger's
own autograd functions (its Triton kernels compile for nmp and run on the simulator) and compares the
outputs and gradients with torch. Failures that are the library's own are marked `xfail` with the
reason (`LIBRARY_OWN`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

liger = pytest.importorskip("liger_kernel", reason="Liger-Kernel is not installed (pip install --no-deps liger-kernel)")

from liger_kernel.transformers import functional as LF  # noqa: E402


@dataclass(frozen=True)
class LigerCase:
    name: str
    inputs: Callable[[torch.Generator], tuple]  # tensors that need gradients first
    liger: Callable[..., torch.Tensor]
    torch_ref: Callable[..., torch.Tensor]
    grads: int = 1  # how many leading inputs get gradients checked
    tol: float = 1e-4
    backward: bool = True


def _t(*shape, g, scale=1.0, dtype=torch.float32):
    return (torch.randn(shape, generator=g) * scale).to(dtype)


H, ROWS = 1024, 8


def _rms_ref(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope_ref(q, k, cos, sin):
    def rot(t):
        t1, t2 = t.chunk(2, -1)
        return t * cos + torch.cat([-t2, t1], -1) * sin
    return rot(q), rot(k)


def _rope_inputs(g):
    bsz, n_qh, n_kh, seq, hd = 2, 8, 2, 16, 64
    q, k = _t(bsz, n_qh, seq, hd, g=g), _t(bsz, n_kh, seq, hd, g=g)
    pos = torch.arange(seq, dtype=torch.float32)
    ang = pos[:, None] / (10000 ** (torch.arange(0, hd, 2) / hd))[None, :]
    emb = torch.cat([ang, ang], -1)
    return q, k, emb.cos()[None], emb.sin()[None]


def _ce_inputs(g, vocab=32000):
    x = _t(ROWS, vocab, g=g)
    y = torch.randint(0, vocab, (ROWS,), generator=g)
    y[1] = -100
    return x, y


def _flce_inputs(g, vocab=4096):
    x, w = _t(ROWS, 256, g=g), _t(vocab, 256, g=g, scale=0.05)
    y = torch.randint(0, vocab, (ROWS,), generator=g)
    return x, w, y


def _dist_inputs(g, vocab=4096):
    a = torch.log_softmax(_t(ROWS, vocab, g=g), -1)
    b = torch.log_softmax(_t(ROWS, vocab, g=g), -1)
    return a, b


def _jsd_ref(student_logp, teacher_logp, beta=0.5):
    m = torch.log(beta * teacher_logp.exp() + (1 - beta) * student_logp.exp())
    kl_t = F.kl_div(m, teacher_logp, reduction="sum", log_target=True)
    kl_s = F.kl_div(m, student_logp, reduction="sum", log_target=True)
    return (beta * kl_t + (1 - beta) * kl_s) / student_logp.shape[0]


def _two_linear_inputs(g, vocab=4096):
    """A student (input, weight) pair and a teacher pair, the fused linear losses' operands."""
    return (*_flce_inputs(g, vocab)[:2], *_flce_inputs(g, vocab)[:2])


MROPE_SECTION = [8, 12, 12]  # Qwen2-VL's temporal/height/width split of the rotary half-dimension


def _mrope_inputs(g):
    bsz, n_qh, n_kh, seq, hd = 2, 8, 2, 16, 64
    q, k = _t(bsz, n_qh, seq, hd, g=g), _t(bsz, n_kh, seq, hd, g=g)
    pos = torch.stack([torch.arange(seq, dtype=torch.float32) * (i + 1) for i in range(3)])[:, None].expand(3, bsz, seq)
    ang = pos[..., None] / (10000 ** (torch.arange(0, hd, 2) / hd))
    emb = torch.cat([ang, ang], -1)
    return q, k, emb.cos(), emb.sin()


def _mrope_ref(q, k, cos, sin):
    """Each rotary section takes its angles from one of the three position axes (as in transformers)."""
    def pick(t):
        return torch.cat([m[i % 3] for i, m in enumerate(t.split(MROPE_SECTION * 2, -1))], -1).unsqueeze(1)
    return _rope_ref(q, k, pick(cos), pick(sin))


CASES = [
    LigerCase("rms_norm", lambda g: (_t(ROWS, H, g=g), _t(H, g=g)),
              lambda x, w: LF.liger_rms_norm(x, w, 1e-6, in_place=False), _rms_ref, grads=2),
    LigerCase("rms_norm_4096", lambda g: (_t(ROWS, 4096, g=g), _t(4096, g=g)),
              lambda x, w: LF.liger_rms_norm(x, w, 1e-6, in_place=False), _rms_ref, grads=2),
    LigerCase("layer_norm", lambda g: (_t(ROWS, H, g=g), _t(H, g=g), _t(H, g=g)),
              lambda x, w, b: LF.liger_layer_norm(x, w, b, 1e-6),
              lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-6), grads=3),
    LigerCase("fused_add_rms_norm", lambda g: (_t(ROWS, H, g=g), _t(ROWS, H, g=g), _t(H, g=g)),
              lambda x, r, w: LF.liger_fused_add_rms_norm(x, r, w, 1e-6, in_place=False)[0],
              lambda x, r, w: _rms_ref(x + r, w), grads=3),
    LigerCase("poly_norm", lambda g: (_t(ROWS, H, g=g), _t(3, g=g, scale=0.3), _t(g=g)),
              lambda x, w, b: LF.liger_poly_norm(x, w, b, 1e-6, in_place=False),
              lambda x, w, b: sum(w[i] * _rms_ref(x ** (3 - i), 1.0) for i in range(3)) + b, grads=3, tol=1e-3),
    LigerCase("group_norm", lambda g: (_t(4, 32, 64, g=g), _t(32, g=g), _t(32, g=g)),
              lambda x, w, b: LF.liger_group_norm(x, w, b, 32, 8, 1e-6),
              lambda x, w, b: F.group_norm(x, 8, w, b, 1e-6), grads=3, tol=1e-3),
    LigerCase("dyt", lambda g: (_t(ROWS, H, g=g), torch.tensor(0.5), _t(H, g=g), _t(H, g=g)),
              LF.liger_dyt, lambda x, a, gm, bt: gm * torch.tanh(a * x) + bt, grads=4),
    LigerCase("dyt_forward", lambda g: (_t(ROWS, H, g=g), torch.tensor(0.5), _t(H, g=g), _t(H, g=g)),
              LF.liger_dyt, lambda x, a, gm, bt: gm * torch.tanh(a * x) + bt, backward=False),
    LigerCase("swiglu", lambda g: (_t(ROWS, 2816, g=g), _t(ROWS, 2816, g=g)),
              LF.liger_swiglu, lambda a, b: F.silu(a) * b, grads=2),
    LigerCase("geglu", lambda g: (_t(ROWS, 2816, g=g), _t(ROWS, 2816, g=g)),
              LF.liger_geglu, lambda a, b: F.gelu(a, approximate="tanh") * b, grads=2),
    LigerCase("relu_squared", lambda g: (_t(ROWS, H, g=g),), LF.liger_relu_squared, lambda x: F.relu(x) ** 2),
    LigerCase("softmax", lambda g: (_t(ROWS, H, g=g),), LF.liger_softmax, lambda x: torch.softmax(x, -1)),
    LigerCase("sparsemax", lambda g: (_t(ROWS, 256, g=g),), lambda x: LF.liger_sparsemax(x, -1),
              lambda x: _sparsemax_ref(x), tol=1e-4),
    LigerCase("rope", _rope_inputs, lambda q, k, c, s: LF.liger_rope(q, k, c, s),
              lambda q, k, c, s: _rope_ref(q, k, c, s), grads=2),
    LigerCase("cross_entropy", _ce_inputs, LF.liger_cross_entropy,
              lambda x, y: F.cross_entropy(x, y, ignore_index=-100)),
    LigerCase("cross_entropy_label_smoothing", _ce_inputs,
              lambda x, y: LF.liger_cross_entropy(x, y, label_smoothing=0.1),
              lambda x, y: F.cross_entropy(x, y, ignore_index=-100, label_smoothing=0.1)),
    LigerCase("fused_linear_cross_entropy", _flce_inputs, LF.liger_fused_linear_cross_entropy,
              lambda x, w, y: F.cross_entropy(x @ w.T, y), grads=2, tol=1e-3),
    LigerCase("kl_div", _dist_inputs, lambda a, b: LF.liger_kl_div(a, b, reduction="batchmean", log_target=True),
              lambda a, b: F.kl_div(a, b, reduction="batchmean", log_target=True)),
    LigerCase("jsd", _dist_inputs, lambda a, b: LF.liger_jsd(a, b), _jsd_ref),
    LigerCase("tvd", lambda g: tuple(torch.softmax(_t(ROWS, 4096, g=g), -1) for _ in range(2)),
              lambda p, q: LF.liger_tvd(p, q, reduction="batchmean"),
              lambda p, q: 0.5 * (p - q).abs().sum() / p.shape[0]),
    LigerCase("fused_linear_jsd", _two_linear_inputs, LF.liger_fused_linear_jsd,
              lambda sx, sw, tx, tw: _jsd_ref(torch.log_softmax(sx @ sw.T, -1), torch.log_softmax(tx @ tw.T, -1)),
              grads=2, tol=1e-3),
    LigerCase("fused_linear_kl_div", lambda g: (*_flce_inputs(g)[:2], torch.softmax(_t(ROWS, 4096, g=g), -1)),
              LF.liger_fused_linear_kl_div,
              lambda x, w, q: F.kl_div(torch.log_softmax(x @ w.T, -1), q, reduction="batchmean"), grads=2, tol=1e-3),
    LigerCase("modulated_rms_norm", lambda g: (_t(ROWS, H, g=g), _t(H, g=g), _t(ROWS, H, g=g)),
              lambda x, w, s: LF.liger_modulated_rms_norm(x, w, s, None, 1e-6, in_place=False),
              lambda x, w, s: _rms_ref(x, w) * (1 + s), grads=3),
    LigerCase("qwen2vl_mrope", _mrope_inputs, lambda q, k, c, s: LF.liger_qwen2vl_mrope(q, k, c, s, MROPE_SECTION),
              _mrope_ref, grads=2),
    LigerCase("embedding", lambda g: (_t(4096, H, g=g), torch.randint(0, 4096, (4, 64), generator=g)),
              lambda w, i: liger.ops.LigerEmbeddingFunction.apply(w, i), lambda w, i: F.embedding(i, w)),
]


def _sparsemax_ref(x):
    z, _ = torch.sort(x, -1, descending=True)
    k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    cs = z.cumsum(-1)
    support = (1 + k * z) > cs
    ks = support.sum(-1, keepdim=True)
    tau = (cs.gather(-1, ks - 1) - 1) / ks
    return torch.clamp(x - tau, min=0)


# Failures that are the library's own (not nmp's): case name -> reason.
LIBRARY_OWN: dict[str, str] = {
    "dyt": "Liger's DyT backward sizes its partial-sum buffers by the device's SM count and only knows "
           "cuda/xpu/npu devices (ops/dyt.py: NUM_SMS unbound for a CPU tensor); its forward runs (dyt_forward)",
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_liger_op_forward_and_backward(case: LigerCase):
    if case.name in LIBRARY_OWN:
        pytest.xfail(LIBRARY_OWN[case.name])
    g = torch.Generator().manual_seed(0)
    inputs = case.inputs(g)
    mine = [t.clone().requires_grad_(i < case.grads and t.is_floating_point()) for i, t in enumerate(inputs)]
    ref = [t.clone().requires_grad_(i < case.grads and t.is_floating_point()) for i, t in enumerate(inputs)]
    out, expect = case.liger(*mine), case.torch_ref(*ref)
    outs = out if isinstance(out, tuple) else (out,)
    expects = expect if isinstance(expect, tuple) else (expect,)
    for o, e in zip(outs, expects):
        torch.testing.assert_close(o, e, rtol=case.tol, atol=case.tol)
    if not case.backward:
        return
    seeds = [_t(*o.shape, g=g) for o in outs]
    sum((o * s).sum() for o, s in zip(outs, seeds)).backward()
    sum((e * s).sum() for e, s in zip(expects, seeds)).backward()
    for i in range(case.grads):
        if mine[i].requires_grad:
            torch.testing.assert_close(mine[i].grad, ref[i].grad, rtol=case.tol * 10, atol=case.tol * 10,
                                       msg=lambda m, i=i: f"gradient of input {i}: {m}")


def test_liger_kernels_ran_on_nmp():
    """The ops above went through nmp (not a CPU fallback of the library): a Liger kernel leaves a binary
    compiled by the nmp backend (its metadata names the simulator's entry point) in its JIT cache."""
    from liger_kernel.ops.rms_norm import _rms_norm_forward_kernel

    x, w = torch.randn(2, 64), torch.randn(64)
    LF.liger_rms_norm(x, w, 1e-6, in_place=False)
    kernels = [k for cache in _rms_norm_forward_kernel.device_caches.values() for k in cache[0].values()]
    assert kernels and all(str(k.metadata.nmp_entry).startswith("nmp_grid_") for k in kernels)
    assert math.isfinite(float(x.sum()))
