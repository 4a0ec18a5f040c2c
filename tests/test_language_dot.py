"""tl.dot on nmp: fp32/fp16/bf16/int8/fp64 operands, accumulators, out_dtype, every input_precision,
and batched (3-D) dots, against the interpreter (bf16 against torch: the interpreter's bf16 is not
arithmetic)."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import assert_same, check_vs_interp, run_nmp


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr,
               ACC: tl.constexpr, OUT: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn)
    if ACC:
        c = tl.dot(a, b, tl.full((M, N), 3, OUT), input_precision=PREC, out_dtype=OUT)
    else:
        c = tl.dot(a, b, input_precision=PREC, out_dtype=OUT)
    tl.store(c_ptr + rm * N + rn, c)


def _operands(dt: torch.dtype, M: int, N: int, K: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    if dt.is_floating_point:
        return torch.randn(M * K, generator=g).to(dt), torch.randn(K * N, generator=g).to(dt)
    return (torch.randint(-128, 128, (M * K,), generator=g).to(dt),
            torch.randint(-128, 128, (K * N,), generator=g).to(dt))


CASES = [(torch.float32, tl.float32, torch.float32), (torch.float16, tl.float32, torch.float32),
         (torch.float16, tl.float16, torch.float16), (torch.int8, tl.int32, torch.int32),
         (torch.float64, tl.float64, torch.float64)]


@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("prec", ["ieee", "tf32", "tf32x3"])
@pytest.mark.parametrize("dt,out,odt", CASES, ids=["f32", "f16", "f16-f16acc", "i8", "f64"])
def test_dot_matches_interpreter(dt, out, odt, prec: str, acc: bool) -> None:
    M, N, K = 16, 16, 32
    a, b = _operands(dt, M, N, K)
    tol = {torch.float16: 2e-2, torch.float32: 1e-4, torch.float64: 1e-10}.get(odt, 0)
    check_vs_interp(dot_kernel, (1,), a, b, torch.zeros(M * N, dtype=odt), M=M, N=N, K=K, PREC=prec, ACC=acc,
                    OUT=out, outputs=[2], atol=tol, rtol=tol)


@pytest.mark.parametrize("prec", ["ieee", "bf16x3", "bf16x6"])
def test_dot_bf16_and_bf16_precisions_match_torch(prec: str) -> None:
    M, N, K = 16, 16, 32
    a, b = _operands(torch.bfloat16, M, N, K, seed=1)
    c = run_nmp(dot_kernel, (1,), a, b, torch.zeros(M * N), M=M, N=N, K=K, PREC=prec, ACC=True, OUT=tl.float32)[2]
    ref = a.float().view(M, K) @ b.float().view(K, N) + 3
    torch.testing.assert_close(c.view(M, N), ref, atol=1e-4, rtol=1e-4)


@triton.jit
def batched_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                       STEPS: tl.constexpr):
    rb = tl.arange(0, B)[:, None, None]
    rm = tl.arange(0, M)[None, :, None]
    rn = tl.arange(0, N)[None, None, :]
    rk1 = tl.arange(0, K)[None, None, :]
    rk2 = tl.arange(0, K)[None, :, None]
    acc = tl.zeros((B, M, N), tl.float32)
    for s in range(STEPS):
        a = tl.load(a_ptr + s * B * M * K + rb * M * K + rm * K + rk1)
        b = tl.load(b_ptr + s * B * K * N + rb * K * N + rk2 * N + rn)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rb * M * N + rm * N + rn, acc)


@pytest.mark.parametrize("dt", [torch.float32, torch.float16])
def test_batched_3d_dot_in_a_loop_matches_interpreter(dt: torch.dtype) -> None:
    B, M, N, K, S = 2, 16, 8, 16, 3
    g = torch.Generator().manual_seed(2)
    a = torch.randn(S * B * M * K, generator=g).to(dt)
    b = torch.randn(S * B * K * N, generator=g).to(dt)
    check_vs_interp(batched_dot_kernel, (1,), a, b, torch.zeros(B * M * N), B=B, M=M, N=N, K=K, STEPS=S,
                    outputs=[2], atol=1e-4, rtol=1e-4)


@triton.jit
def batched_int_dot_kernel(a_ptr, b_ptr, c_ptr, B: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rb = tl.arange(0, B)[:, None, None]
    rm = tl.arange(0, M)[None, :, None]
    rn = tl.arange(0, N)[None, None, :]
    a = tl.load(a_ptr + rb * M * K + rm * K + tl.arange(0, K)[None, None, :])
    b = tl.load(b_ptr + rb * K * N + tl.arange(0, K)[None, :, None] * N + rn)
    tl.store(c_ptr + rb * M * N + rm * N + rn, tl.dot(a, b))


def test_batched_int8_dot_is_exact() -> None:
    B, M, N, K = 4, 16, 16, 16
    a, b = _operands(torch.int8, B * M, N, K, seed=3)
    b = torch.randint(-128, 128, (B * K * N,), generator=torch.Generator().manual_seed(4)).to(torch.int8)
    c = run_nmp(batched_int_dot_kernel, (1,), a, b, torch.zeros(B * M * N, dtype=torch.int32), B=B, M=M, N=N, K=K)[2]
    ref = torch.bmm(a.view(B, M, K).int(), b.view(B, K, N).int())
    assert torch.equal(c.view(B, M, N), ref)


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(32, 64, 16), (16, 8, 32), (16, 16, 8)])
def test_dot_register_strips_are_bit_identical_to_the_scalar_nest(monkeypatch, tmp_path, dt, shape) -> None:
    """backend/codegen_matmul: the fp32-accumulator dot keeps blocks of output columns in vector registers
    across the k loop; the same fmuladds in the same order as the scalar i-k-j nest, so bit for bit its
    results (with and without an accumulator operand, 1-4 vectors per strip)."""
    from triton_nmp.backend import codegen_matmul

    M, N, K = shape
    a, b = _operands(dt, M, N, K, seed=3)
    c = torch.empty(M * N, dtype=torch.float32)
    monkeypatch.setattr(triton.knobs.compilation, "always_compile", True)
    monkeypatch.setattr(triton.knobs.cache, "dir", str(tmp_path))  # the scalar build stays out of the cache
    for acc in (False, True):
        dot_kernel.device_caches.clear()  # the JIT's in-memory cache; always_compile skips the file cache
        strips = run_nmp(dot_kernel, (1,), a, b, c, M, N, K, "ieee", acc, tl.float32)[2]
        llir = list(dot_kernel.device_caches[0][0].values())[-1].asm["llir"]
        assert "dot_k_body" in llir  # the strips were emitted (their k loop)
        with monkeypatch.context() as m:
            m.setattr(codegen_matmul, "eligible", lambda *_: False)
            dot_kernel.device_caches.clear()
            scalar = run_nmp(dot_kernel, (1,), a, b, c, M, N, K, "ieee", acc, tl.float32)[2]
            assert "dot_k_body" not in list(dot_kernel.device_caches[0][0].values())[-1].asm["llir"]
            dot_kernel.device_caches.clear()
        assert_same(strips, scalar, what=f"{dt} {shape} acc={acc}")
        ref = a.float().reshape(M, K) @ b.float().reshape(K, N) + (3 if acc else 0)
        torch.testing.assert_close(strips.reshape(M, N), ref, atol=1e-3 * K, rtol=1e-3)
