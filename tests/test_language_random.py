"""tl.rand / randn / randint / randint4x / philox on nmp. The language implements Philox in Triton code
(umulhi, unsigned multiply/add/xor), so the integer streams and the uniform floats must be
bit-identical to the interpreter (and to a Python Philox). Normals go through log/sqrt/cos/sin: the
interpreter computes those with numpy's SIMD float32 kernels, which are not correctly rounded (about
one result in five differs from the C library's in the last place), so normals match to a few ulp."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.test_language_harness import check_vs_interp, run_nmp

M32 = 0xFFFFFFFF

# Philox needs long fused elementwise runs; the core's scratchpad planner lets an op of such a run
# overwrite in place a tile a later op of the same run still reads (wrong random numbers).


def philox_ref(seed: int, c0: int, c1: int, c2: int, c3: int, rounds: int = 10) -> tuple[int, int, int, int]:
    k0, k1 = seed & M32, (seed >> 32) & M32
    a, b = 0xD2511F53, 0xCD9E8D57
    for _ in range(rounds):
        _c0, _c2 = c0, c2
        c0 = ((b * _c2) >> 32) ^ c1 ^ k0
        c2 = ((a * _c0) >> 32) ^ c3 ^ k1
        c1 = (b * _c2) & M32
        c3 = (a * _c0) & M32
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def _s32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


@triton.jit
def random_kernel(o_ptr, seed, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if OP == "rand":
        tl.store(o_ptr + offs, tl.rand(seed, offs), mask=m)
    elif OP == "randn":
        tl.store(o_ptr + offs, tl.randn(seed, offs), mask=m)
    elif OP == "randint":
        tl.store(o_ptr + offs, tl.randint(seed, offs), mask=m)
    elif OP == "randint4x":
        a, b, c, d = tl.randint4x(seed, offs)
        tl.store(o_ptr + offs, a ^ (b << 1) ^ (c << 2) ^ (d << 3), mask=m)
    elif OP == "rand4x":
        a, b, c, d = tl.rand4x(seed, offs)
        tl.store(o_ptr + offs, a + b * 2 + c * 4 + d * 8, mask=m)
    elif OP == "randn4x":
        a, b, c, d = tl.randn4x(seed, offs)
        tl.store(o_ptr + offs, a * b + c * d, mask=m)
    elif OP == "philox":
        a, b, c, d = tl.philox(seed, offs, offs * 3, offs + 7, offs ^ 5)
        tl.store(o_ptr + offs, a ^ b ^ c ^ d, mask=m)
    elif OP == "rand_int64_offsets":
        tl.store(o_ptr + offs, tl.rand(seed, offs.to(tl.int64) * 1000003), mask=m)
    elif OP == "few_rounds":
        tl.store(o_ptr + offs, tl.randint(seed, offs, n_rounds=3), mask=m)


SEEDS = [0, 123, 2**31 - 5, 2**40 + 17]
EXACT = ["rand", "randint", "randint4x", "rand4x", "philox", "rand_int64_offsets", "few_rounds"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", EXACT)
def test_random_streams_are_bit_identical_to_interpreter(op: str, seed: int) -> None:
    dt = torch.int32 if op in ("randint", "randint4x", "philox", "few_rounds") else torch.float32
    check_vs_interp(random_kernel, (4,), torch.zeros(100, dtype=dt), seed, 100, OP=op, BLOCK=32)


@pytest.mark.parametrize("op", ["randn", "randn4x"])
def test_normals_match_interpreter_to_a_few_ulp(op: str) -> None:
    check_vs_interp(random_kernel, (4,), torch.zeros(100), 42, 100, OP=op, BLOCK=32, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("seed", [7, 2**33 + 1])
def test_randint_matches_python_philox(seed: int) -> None:
    out = run_nmp(random_kernel, (2,), torch.zeros(64, dtype=torch.int32), seed, 64, OP="randint", BLOCK=32)[0]
    assert out.tolist() == [_s32(philox_ref(seed, i, 0, 0, 0)[0]) for i in range(64)]
