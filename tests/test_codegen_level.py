"""LLVM's code generator level per kernel (`backend/llvm_target.codegen_level`): -O0 for kernels without matrix
ops (their cold compile is what a model pays for dozens of kernels), -O3 for kernels with tile dots (their native
inner loops), TRITON_NMP_CODEGEN_LEVEL to force one; the level is part of the backend's cache key."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from triton_nmp.backend import llvm_target
from triton_nmp.errors import NMPCompilationError


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=m)) * 0.5, mask=m)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    a = tl.load(a_ptr + r[:, None] * N + r[None, :])
    b = tl.load(b_ptr + r[:, None] * N + r[None, :])
    tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))


def _scale(x: torch.Tensor) -> tuple[torch.Tensor, object]:
    out = torch.empty_like(x)
    k = _scale_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out, k


def _dot(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, object]:
    c = torch.empty(a.shape[0], b.shape[1])
    k = _dot_kernel[(1,)](a, b, c, N=a.shape[0])
    return c, k


def test_kernels_without_matrix_ops_get_the_fast_code_generator_and_dots_the_optimising_one(monkeypatch):
    monkeypatch.delenv("TRITON_NMP_CODEGEN_LEVEL", raising=False)
    x = torch.randn(1000)
    out, k = _scale(x)
    torch.testing.assert_close(out, torch.exp(x) * 0.5)
    assert k.metadata.nmp_codegen_level == 0
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    c, k = _dot(a, b)
    torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)
    assert k.metadata.nmp_codegen_level == 3


def test_a_forced_level_is_a_new_cache_key_and_gives_the_same_results(monkeypatch):
    monkeypatch.delenv("TRITON_NMP_CODEGEN_LEVEL", raising=False)
    x = torch.randn(3000)
    auto, k_auto = _scale(x)
    from triton.compiler.compiler import make_backend

    compiler = make_backend(triton.runtime.driver.active.get_current_target())
    hash_auto = compiler.hash()
    monkeypatch.setenv("TRITON_NMP_CODEGEN_LEVEL", "2")
    assert compiler.hash() != hash_auto  # an object emitted at another level is never served from the cache
    _scale_kernel.device_caches.clear()  # the JIT's in-process cache (its key has no environment): Triton's disk cache
    forced, k_forced = _scale(x)
    assert k_forced.metadata.nmp_codegen_level == 2 and k_auto.metadata.nmp_codegen_level == 0
    assert torch.equal(forced, auto)


@pytest.mark.parametrize("value", ["fast", "4", "-1"])
def test_a_bad_level_is_refused_with_the_variable_named(monkeypatch, value):
    monkeypatch.setenv("TRITON_NMP_CODEGEN_LEVEL", value)
    with pytest.raises(NMPCompilationError, match=r"TRITON_NMP_CODEGEN_LEVEL=.* is not an LLVM optimisation level"
                                                  r".*use 0, 1, 2 or 3"):
        llvm_target.codegen_level(False)
