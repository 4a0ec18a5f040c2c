"""Tutorial-style kernels and host code, written the way portable Triton code is, run unchanged on nmp.

Triton's official tutorials are what most people copy from, so their *host-side idioms* matter as much as
their kernels: grid lambdas reading `meta`, the driver's device properties and a pre-compiled kernel's
`n_regs`/`metadata.shared` feeding occupancy arithmetic, `@triton.autotune` with configs that carry other
backends' options, spin locks built on `tl.atomic_cas`, `torch.autograd.Function` wrappers. The kernels
below are our own implementations of the same algorithms (vector add, persistent fused softmax, grouped
matmul with a fused activation, layer norm forward/backward, flash-attention forward), checked against
torch and, where cheap, against Triton's interpreter.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tests.test_language_harness import run_interp, run_nmp
from triton_nmp.errors import NMPSpillWarning

TOL = {torch.float32: 1e-4, torch.float16: 1e-2}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def device() -> torch.device:
    """The active driver's torch device, looked up the way portable host code does (CPU on nmp)."""
    return triton.runtime.driver.active.get_active_torch_device()


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype).to(device())


# ----------------------------------------------------------------------------------------------
# 1. Vector add: one program per BLOCK_SIZE chunk, the grid computed from the launch's meta-parameters


@triton.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    block_start = tl.program_id(axis=0) * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    inside = offsets < n_elements  # the last block hangs over the end of the vectors
    x = tl.load(x_ptr + offsets, mask=inside)
    y = tl.load(y_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, x + y, mask=inside)


def vector_add(x: torch.Tensor, y: torch.Tensor, block_size: int = 1024) -> torch.Tensor:
    assert x.device == y.device == device()
    out = torch.empty_like(x)
    n = out.numel()

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(n, meta["BLOCK_SIZE"]),)

    vector_add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)
    return out


@pytest.mark.parametrize("n", [1, 127, 1024, 4097, 98_431])
def test_vector_add(n: int) -> None:
    x, y = randn(n, seed=1), randn(n, seed=2)
    assert torch.equal(vector_add(x, y), x + y)


def test_vector_add_small_block_vs_interpreter() -> None:
    x, y = randn(300, seed=3), randn(300, seed=4)
    out = torch.empty_like(x)
    got = run_nmp(vector_add_kernel, (triton.cdiv(300, 64),), x, y, out, 300, BLOCK_SIZE=64)[2]
    ref = run_interp(vector_add_kernel, (triton.cdiv(300, 64),), x, y, out, 300, BLOCK_SIZE=64)[2]
    assert torch.equal(got, x + y) and torch.equal(ref, x + y)


def test_vector_add_do_bench() -> None:
    # Every tutorial ends with a benchmark: do_bench reports simulated milliseconds, so GB/s is computable.
    x, y = randn(50_000, seed=5), randn(50_000, seed=6)
    # warmup/rep are simulated ms: the defaults (25/100) would repeat this 10 us kernel ~10000 times.
    ms, min_ms, max_ms = triton.testing.do_bench(lambda: vector_add(x, y), warmup=0.1, rep=0.5,
                                                 quantiles=[0.5, 0.2, 0.8])  # fmt: skip
    assert 0 < min_ms <= ms <= max_ms
    gbps = 3 * x.numel() * x.element_size() * 1e-9 / (ms * 1e-3)
    assert math.isfinite(gbps) and gbps > 0


def test_do_bench_of_a_torch_baseline() -> None:
    """Tutorial benchmarks time the torch baseline with do_bench too: launching no nmp kernel, it is timed
    on the host's wall clock (a simulated 0 ms made Triton's do_bench divide by zero)."""
    x, y = randn(50_000, seed=5), randn(50_000, seed=6)
    ms = triton.testing.do_bench(lambda: x + y, warmup=5, rep=20)
    assert 0 < ms < 1000


# ----------------------------------------------------------------------------------------------
# 2. Fused softmax, persistent: as many programs as the device can keep resident, each striding over rows


@triton.jit
def softmax_kernel(
    out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
    BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr,
):  # fmt: skip
    first_row = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(first_row, n_rows, row_step, num_stages=num_stages):
        cols = tl.arange(0, BLOCK_SIZE)
        inside = cols < n_cols
        # -inf padding drops out of both the max and the sum (exp(-inf) == 0).
        row = tl.load(in_ptr + row_idx * in_row_stride + cols, mask=inside, other=-float("inf"))
        shifted = row - tl.max(row, axis=0)
        numerator = tl.exp(shifted)
        denominator = tl.sum(numerator, axis=0)
        tl.store(out_ptr + row_idx * out_row_stride + cols, numerator / denominator, mask=inside)


def device_facts() -> dict[str, int]:
    """What portable host code reads from the driver to size a persistent launch."""
    dev = device()
    props = triton.runtime.driver.active.utils.get_device_properties(dev.index or 0)
    return {k: props[k] for k in ("multiprocessor_count", "max_shared_mem", "max_num_regs", "warpSize")}


def softmax(x: torch.Tensor, num_warps: int = 8) -> tuple[torch.Tensor, dict[str, int]]:
    """Row softmax; also returns the launch arithmetic so the test can check what the driver reported."""
    facts = device_facts()
    n_rows, n_cols = x.shape
    block_size = triton.next_power_of_2(n_cols)
    num_stages = 4 if facts["max_shared_mem"] > 200_000 else 2
    y = torch.empty_like(x)
    # Compile without launching, then size the grid from what the compiled kernel uses.
    kernel = softmax_kernel.warmup(
        y, x, x.stride(0), y.stride(0), n_rows, n_cols,
        BLOCK_SIZE=block_size, num_stages=num_stages, num_warps=num_warps, grid=(1,),
    )  # fmt: skip
    kernel._init_handles()
    n_regs, n_spills, smem = kernel.n_regs, kernel.n_spills, kernel.metadata.shared
    occupancy = facts["max_num_regs"] // (n_regs * facts["warpSize"] * num_warps)
    occupancy = min(occupancy, facts["max_shared_mem"] // smem)
    num_programs = min(facts["multiprocessor_count"] * occupancy, n_rows)
    kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, block_size, num_stages)
    launch = {"n_regs": n_regs, "n_spills": n_spills, "shared": smem, "occupancy": occupancy,
              "num_programs": num_programs}  # fmt: skip
    return y, launch


def test_device_facts() -> None:
    from triton_nmp.target import active_target

    spec = active_target()
    assert device() == torch.device("cpu")
    assert device_facts() == {"multiprocessor_count": spec.num_pus, "max_shared_mem": spec.spm_bytes,
                              "max_num_regs": 65536, "warpSize": 1}  # fmt: skip


def test_compiled_kernel_register_facts() -> None:
    """Regression: load_binary reported n_regs == 0, so the occupancy arithmetic above divided by zero.

    nmp has no register file limiting how many programs a PU keeps resident, so the register term must
    never be the tighter bound: the scratchpad (metadata.shared) is."""
    x = randn(4, 100)
    kernel = softmax_kernel.warmup(torch.empty_like(x), x, 100, 100, 4, 100, BLOCK_SIZE=128, num_stages=2,
                                   num_warps=32, grid=(1,))  # fmt: skip
    kernel._init_handles()
    facts = device_facts()
    assert kernel.n_regs > 0 and kernel.n_spills == 0
    by_regs = facts["max_num_regs"] // (kernel.n_regs * facts["warpSize"] * 32)
    assert by_regs >= facts["max_shared_mem"] // kernel.metadata.shared >= 1


@pytest.mark.parametrize("rows,cols", [(1, 1), (37, 203), (200, 64), (130, 781)])
def test_softmax_persistent(rows: int, cols: int) -> None:
    x = randn(rows, cols, seed=rows) * 3
    y, launch = softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), atol=1e-6, rtol=1e-5)
    assert launch["n_regs"] > 0 and launch["n_spills"] == 0
    assert 0 < launch["shared"] <= device_facts()["max_shared_mem"]
    assert launch["occupancy"] == device_facts()["max_shared_mem"] // launch["shared"]  # the scratchpad binds
    assert 1 <= launch["num_programs"] <= rows


def test_softmax_tutorial_widest_row() -> None:
    """The tutorial's widest benchmark row (N=12800: a 64 KiB fp32 row) at its num_stages=4 (picked because
    max_shared_mem > 200000): four row buffers plus the exp tile exceed the 256 KiB scratchpad, so the
    compiler multi-buffers less deeply instead of refusing the kernel."""
    x = randn(2, 12_800, seed=8)
    y, _ = softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), atol=1e-6, rtol=1e-5)
    k = softmax_kernel.warmup(y, x, x.stride(0), y.stride(0), 2, 12_800, BLOCK_SIZE=16384, num_stages=4, grid=(1,))
    assert 1 <= k.metadata.nmp_num_stages < 4
    assert k.metadata.shared <= device_facts()["max_shared_mem"]


def test_softmax_widest_row_two_stages() -> None:
    x = randn(3, 12_800, seed=8)
    y = torch.empty_like(x)
    softmax_kernel[(2,)](y, x, x.stride(0), y.stride(0), 3, 12_800, BLOCK_SIZE=16384, num_stages=2)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), atol=1e-6, rtol=1e-5)


def test_softmax_more_rows_than_programs() -> None:
    # One program, many rows: every row is reached by the tl.range stride loop alone.
    x = randn(23, 50, seed=5)
    y = torch.empty_like(x)
    softmax_kernel[(1,)](y, x, x.stride(0), y.stride(0), 23, 50, BLOCK_SIZE=64, num_stages=3)
    torch.testing.assert_close(y, torch.softmax(x, dim=1), atol=1e-6, rtol=1e-5)


def test_softmax_vs_interpreter() -> None:
    # The first 37 columns of a contiguous 11x40 tensor (the harness clones arguments, so no sliced views).
    x = randn(11, 40, seed=6)
    y = torch.empty(11, 37)
    args = (y, x, x.stride(0), y.stride(0), 11, 37)
    got = run_nmp(softmax_kernel, (3,), *args, BLOCK_SIZE=64, num_stages=2)[0]
    ref = run_interp(softmax_kernel, (3,), *args, BLOCK_SIZE=64, num_stages=2)[0]
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got, torch.softmax(x[:, :37], dim=1), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# 3. Grouped matmul, autotuned, with a fused activation


@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


@triton.jit
def grouped_matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, ACTIVATION: tl.constexpr,
):  # fmt: skip
    # Programs walk C tile-column by tile-column inside bands of GROUP_SIZE_M tile-rows, so programs that
    # run together reuse the same A rows and B columns (L2 reuse on a GPU, bank locality here).
    pid = tl.program_id(axis=0)
    tiles_m = tl.cdiv(M, BLOCK_SIZE_M)
    tiles_n = tl.cdiv(N, BLOCK_SIZE_N)
    band_tiles = GROUP_SIZE_M * tiles_n
    band = pid // band_tiles
    band_first_m = band * GROUP_SIZE_M
    band_height = min(tiles_m - band_first_m, GROUP_SIZE_M)
    pid_m = band_first_m + (pid % band_tiles) % band_height
    pid_n = (pid % band_tiles) // band_height

    # Rows/columns past M/N wrap around (modulo) instead of being masked: they load valid memory and the
    # results that depend on them are never stored.
    rows_a = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    cols_b = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    ks = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + rows_a[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_b[None, :] * stride_bn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        k_left = K - k * BLOCK_SIZE_K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        acc = leaky_relu(acc)
    c = acc.to(tl.float16)

    rows_c = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols_c = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + rows_c[:, None] * stride_cm + cols_c[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rows_c[:, None] < M) & (cols_c[None, :] < N))


# Small blocks keep tuning fast. The second config carries AMD's options the way portable code passes
# them on any non-CUDA target; the last one needs far more than the 256 KiB scratchpad: its accumulator
# spills to the PU's bank, so it runs, slower by the spill traffic the timing model charges.
MATMUL_CONFIGS = [
    triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 2},
                  num_stages=2, num_warps=4),
    triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 4,
                   "waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2}, num_stages=2, num_warps=8),
    triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 8},
                  num_stages=3, num_warps=4),
    triton.Config({"BLOCK_SIZE_M": 256, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 8},
                  num_stages=3, num_warps=8),
]  # fmt: skip
SPILLS = MATMUL_CONFIGS[-1]

grouped_matmul_autotuned = triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])(grouped_matmul_kernel)


def matmul(a: torch.Tensor, b: torch.Tensor, activation: str = "") -> torch.Tensor:
    assert a.shape[1] == b.shape[0], "incompatible dimensions"
    assert a.dtype == b.dtype == torch.float16
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    grouped_matmul_autotuned[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        ACTIVATION=activation,
    )  # fmt: skip
    return c


def matmul_ref(a: torch.Tensor, b: torch.Tensor, activation: str = "") -> torch.Tensor:
    c = a.float() @ b.float()
    if activation == "leaky_relu":
        c = F.leaky_relu(c, 0.01)
    return c.half()


@pytest.fixture
def fresh_foreign_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning about other backends' options is once per process: forget earlier ones."""
    from triton_nmp.backend import compiler

    monkeypatch.setattr(compiler, "_warned", set())


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_matmul_autotuned(activation: str, fresh_foreign_warnings: None) -> None:
    M, N, K = 45 + len(activation), 70, 61  # a new tuning key per activation: each run tunes afresh
    a, b = randn(M, K, dtype=torch.float16, seed=1), randn(K, N, dtype=torch.float16, seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = matmul(a, b, activation)
    torch.testing.assert_close(c, matmul_ref(a, b, activation), atol=1e-2, rtol=1e-2)

    # AMD's options were accepted; each was warned about once, not per config or per launch.
    foreign = [str(w.message) for w in caught if "another Triton backend" in str(w.message)]
    assert sorted(foreign) == sorted(f"launch option '{k}' is defined by another Triton backend and has no "
                                     f"effect on nmp" for k in ("waves_per_eu", "matrix_instr_nonkdim", "kpack"))
    # Every config was benchmarked with a finite simulated time, the one that spills too (ranked by its
    # real cost, spill traffic included, not skipped); it is not the winner.
    timings = grouped_matmul_autotuned.configs_timings
    assert set(timings) == set(MATMUL_CONFIGS)
    assert all(math.isfinite(timings[cfg][0]) and timings[cfg][0] > 0 for cfg in MATMUL_CONFIGS)
    assert grouped_matmul_autotuned.best_config is not SPILLS
    assert timings[SPILLS][0] > timings[grouped_matmul_autotuned.best_config][0]


def test_matmul_config_bigger_than_the_scratchpad_spills_and_is_right() -> None:
    # 256x256x256 blocks: the fp32 accumulator alone is the whole scratchpad, so it lives in the PU's bank
    # and the dot runs row block by row block (the one-time warning is in tests/test_spilling.py).
    a, b = randn(40, 30, dtype=torch.float16), randn(30, 20, dtype=torch.float16)
    c = torch.empty(40, 20, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NMPSpillWarning)
        k = grouped_matmul_kernel[(1,)](
            a, b, c, 40, 20, 30, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            ACTIVATION="", **SPILLS.all_kwargs(),
        )  # fmt: skip
    torch.testing.assert_close(c, matmul_ref(a, b, ""), atol=1e-2, rtol=1e-2)
    assert k.metadata.nmp_spm_bytes <= device_facts()["max_shared_mem"] < k.metadata.nmp_spill_bytes
    assert any(t.startswith("%acc") for t in k.metadata.nmp_spilled)


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_matmul_vs_interpreter(activation: str) -> None:
    M, N, K = 20, 36, 40
    a, b = randn(M, K, dtype=torch.float16, seed=3), randn(K, N, dtype=torch.float16, seed=4)
    c = torch.empty(M, N, dtype=torch.float16)
    meta = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 2, "ACTIVATION": activation}
    grid = (triton.cdiv(M, 16) * triton.cdiv(N, 16),)
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    got = run_nmp(grouped_matmul_kernel, grid, *args, **meta)[2]
    ref = run_interp(grouped_matmul_kernel, grid, *args, **meta)[2]
    torch.testing.assert_close(got, ref, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(got, matmul_ref(a, b, activation), atol=1e-2, rtol=1e-2)


# ----------------------------------------------------------------------------------------------
# 4. Layer norm, forward and backward; dW/dB partial sums guarded by a spin lock


@triton.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, row_stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * row_stride
    Y += row * row_stride
    total = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        total += tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(total, axis=0) / N
    # Variance from centred values, not E[x^2] - E[x]^2, which cancels badly.
    sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        centred = tl.where(cols < N, x - mean, 0.0)
        sq += centred * centred
    rstd = 1 / tl.sqrt(tl.sum(sq, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        inside = cols < N
        w = tl.load(W + cols, mask=inside)
        b = tl.load(B + cols, mask=inside)
        x = tl.load(X + cols, mask=inside, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=inside)


@triton.jit
def layer_norm_bwd_dx_kernel(
    DX, DY, PartialDW, PartialDB, X, W, Mean, Rstd, Lock, row_stride, N,
    GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    inside = cols < N
    X += row * row_stride
    DY += row * row_stride
    DX += row * row_stride
    # Rows share GROUP_SIZE_M partial-sum rows; Lock[g] guards row g, Count[g] says whether it holds data yet.
    group = row % GROUP_SIZE_M
    Lock += group
    Count = Lock + GROUP_SIZE_M
    PartialDW += group * N + cols
    PartialDB += group * N + cols

    x = tl.load(X + cols, mask=inside, other=0.0).to(tl.float32)
    dy = tl.load(DY + cols, mask=inside, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=inside).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(inside, (x - mean) * rstd, 0.0)
    wdy = tl.where(inside, w * dy, 0.0)
    # dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy*xhat))
    c_xhat = tl.sum(xhat * wdy, axis=0) / N
    c_one = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c_xhat + c_one)) * rstd
    tl.store(DX + cols, dx.to(DX.dtype.element_ty), mask=inside)

    # The partial buffers may be fp16 (as in Triton's tutorial) or fp32: accumulate in their dtype.
    dw = (dy * xhat).to(PartialDW.dtype.element_ty)
    db = dy.to(PartialDB.dtype.element_ty)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)  # first writer: the buffer row holds garbage, overwrite it
    else:
        dw += tl.load(PartialDW, mask=inside)
        db += tl.load(PartialDB, mask=inside)
    tl.store(PartialDW, dw, mask=inside)
    tl.store(PartialDB, db, mask=inside)
    tl.atomic_xchg(Lock, 0)


@triton.jit
def layer_norm_bwd_dwdb_kernel(
    PartialDW, PartialDB, DW, DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr
):
    # Each program sums BLOCK_SIZE_N columns of the [M, N] partial buffers.
    cols = tl.program_id(0) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_SIZE_M):
        rows = start + tl.arange(0, BLOCK_SIZE_M)
        inside = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(PartialDW + offs, mask=inside, other=0.0)
        db += tl.load(PartialDB + offs, mask=inside, other=0.0)
    tl.store(DW + cols, tl.sum(dw, axis=0).to(DW.dtype.element_ty), mask=cols < N)
    tl.store(DB + cols, tl.sum(db, axis=0).to(DB.dtype.element_ty), mask=cols < N)


class LayerNorm(torch.autograd.Function):
    """layer_norm over the last dimension with Triton kernels for both directions."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor,
                bias: torch.Tensor, eps: float) -> torch.Tensor:  # fmt: skip
        x2d = x.reshape(-1, x.shape[-1])
        M, N = x2d.shape
        y = torch.empty_like(x2d)
        mean = torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        block_size = triton.next_power_of_2(N)
        num_warps = min(max(block_size // 256, 1), 8)  # meaningless on nmp, passed as portable code does
        layer_norm_fwd_kernel[(M,)](x2d, y, weight, bias, mean, rstd, x2d.stride(0), N, eps, BLOCK_SIZE=block_size,
                                    num_warps=num_warps)  # fmt: skip
        ctx.save_for_backward(x2d, weight, bias, mean, rstd)
        ctx.block_size, ctx.x_shape = block_size, x.shape
        return y.view_as(x)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, w, b, mean, rstd = ctx.saved_tensors
        M, N = x.shape
        # Fewer partial rows for small N: more rows per lock, less buffer to reduce afterwards.
        group_size_m = 16 if N <= 1024 else 64
        locks = torch.zeros(2 * group_size_m, dtype=torch.int32, device=w.device)  # [Lock..., Count...]
        partial_dw = torch.empty((group_size_m, N), dtype=torch.float32, device=w.device)
        partial_db = torch.empty((group_size_m, N), dtype=torch.float32, device=w.device)
        dw = torch.empty((N,), dtype=w.dtype, device=w.device)
        db = torch.empty((N,), dtype=w.dtype, device=w.device)
        dy = dy.reshape(-1, N).contiguous()
        dx = torch.empty_like(dy)
        layer_norm_bwd_dx_kernel[(M,)](
            dx, dy, partial_dw, partial_db, x, w, mean, rstd, locks, x.stride(0), N,
            GROUP_SIZE_M=group_size_m, BLOCK_SIZE_N=ctx.block_size,
        )  # fmt: skip

        def grid(meta: dict[str, Any]) -> tuple[int]:
            return (triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

        # With M < GROUP_SIZE_M only the first M partial rows were written; the rest is uninitialised memory.
        layer_norm_bwd_dwdb_kernel[grid](partial_dw, partial_db, dw, db, min(group_size_m, M), N,
                                         BLOCK_SIZE_M=8, BLOCK_SIZE_N=32, num_ctas=1)  # fmt: skip
        return dx.view(ctx.x_shape), None, dw, db, None


def layer_norm(x: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:  # fmt: skip
    return LayerNorm.apply(x, normalized_shape, weight, bias, eps)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("M,N", [(37, 100), (5, 16), (70, 33)])
def test_layer_norm_fwd_bwd(dtype: torch.dtype, M: int, N: int) -> None:
    eps = 1e-5
    x = (randn(M, N, seed=1) * 2 + 0.5).to(dtype)
    w, b = randn(N, dtype=dtype, seed=2), randn(N, dtype=dtype, seed=3)
    dy = (0.1 * randn(M, N, seed=4)).to(dtype)

    xs, ws, bs = (t.clone().requires_grad_(True) for t in (x, w, b))
    y = layer_norm(xs, (N,), ws, bs, eps)
    y.backward(dy)

    # Reference in fp32 from the same (possibly fp16) values, rounded to the working dtype at the end.
    xr, wr, br = (t.float().requires_grad_(True) for t in (x, w, b))
    yr = F.layer_norm(xr, (N,), wr, br, eps)
    yr.backward(dy.float())

    tol = TOL[dtype]
    assert y.dtype == xs.grad.dtype == ws.grad.dtype == bs.grad.dtype == dtype
    torch.testing.assert_close(y, yr.to(dtype), atol=tol, rtol=tol)
    torch.testing.assert_close(xs.grad, xr.grad.to(dtype), atol=tol, rtol=tol)
    torch.testing.assert_close(ws.grad, wr.grad.to(dtype), atol=tol, rtol=tol)
    torch.testing.assert_close(bs.grad, br.grad.to(dtype), atol=tol, rtol=tol)


def test_layer_norm_3d_input() -> None:
    # (batch, seq, hidden) activations: normalised over the last dimension, gradients in the input's shape.
    x = randn(2, 5, 24, seed=13).requires_grad_(True)
    w, b = randn(24, seed=14).requires_grad_(True), randn(24, seed=15).requires_grad_(True)
    dy = randn(2, 5, 24, seed=16)
    layer_norm(x, (24,), w, b).backward(dy)
    grads = [t.grad for t in (x, w, b)]
    xr, wr, br = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
    F.layer_norm(xr, (24,), wr, br).backward(dy)
    for got, want in zip(grads, (xr.grad, wr.grad, br.grad)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_layer_norm_bwd_vs_interpreter(dtype: torch.dtype) -> None:
    # The lock kernel on its own, with partial buffers in the input dtype as Triton's tutorial keeps them and
    # prefilled with garbage: only the Count flags keep the garbage out. Elementwise results must be identical.
    M, N, G = 13, 20, 4
    x, dy, w = randn(M, N, dtype=dtype, seed=5), randn(M, N, dtype=dtype, seed=6), randn(N, dtype=dtype, seed=7)
    xf = x.float()
    mean, rstd = xf.mean(dim=1), torch.rsqrt(xf.var(dim=1, unbiased=False) + 1e-5)
    garbage = torch.full((G, N), 123.0, dtype=dtype)
    args = (torch.empty(M, N, dtype=dtype), dy, garbage, garbage, x, w, mean, rstd,
            torch.zeros(2 * G, dtype=torch.int32), x.stride(0), N)  # fmt: skip
    got = run_nmp(layer_norm_bwd_dx_kernel, (M,), *args, GROUP_SIZE_M=G, BLOCK_SIZE_N=32)
    ref = run_interp(layer_norm_bwd_dx_kernel, (M,), *args, GROUP_SIZE_M=G, BLOCK_SIZE_N=32)
    torch.testing.assert_close(got[0], ref[0], atol=TOL[dtype] / 10, rtol=TOL[dtype] / 10)
    assert torch.equal(got[2], ref[2]) and torch.equal(got[3], ref[3])
    assert torch.equal(got[8], ref[8]) and torch.equal(got[8], torch.tensor([0] * G + [1] * G, dtype=torch.int32))
    xhat = (xf - mean[:, None]) * rstd[:, None]
    groups = torch.arange(M) % G
    torch.testing.assert_close(got[2].float(), torch.zeros(G, N).index_add_(0, groups, dy.float() * xhat),
                               atol=TOL[dtype], rtol=TOL[dtype])  # fmt: skip
    torch.testing.assert_close(got[3].float(), torch.zeros(G, N).index_add_(0, groups, dy.float()),
                               atol=TOL[dtype], rtol=TOL[dtype])  # fmt: skip


def test_layer_norm_fwd_and_dwdb_vs_interpreter() -> None:
    M, N = 9, 45
    x, w, b = randn(M, N, seed=8) * 2 + 1, randn(N, seed=9), randn(N, seed=10)
    args = (x, torch.empty(M, N), w, b, torch.empty(M), torch.empty(M), x.stride(0), N, 1e-5)
    # BLOCK_SIZE < N here: the forward's loops take several chunks per row.
    got = run_nmp(layer_norm_fwd_kernel, (M,), *args, BLOCK_SIZE=16)
    ref = run_interp(layer_norm_fwd_kernel, (M,), *args, BLOCK_SIZE=16)
    for i in (1, 4, 5):
        torch.testing.assert_close(got[i], ref[i], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], F.layer_norm(x, (N,), w, b, 1e-5), atol=1e-5, rtol=1e-5)

    partial_dw, partial_db = randn(11, N, seed=11), randn(11, N, seed=12)
    args = (partial_dw, partial_db, torch.empty(N), torch.empty(N), 11, N)
    got = run_nmp(layer_norm_bwd_dwdb_kernel, (triton.cdiv(N, 16),), *args, BLOCK_SIZE_M=4, BLOCK_SIZE_N=16)
    ref = run_interp(layer_norm_bwd_dwdb_kernel, (triton.cdiv(N, 16),), *args, BLOCK_SIZE_M=4, BLOCK_SIZE_N=16)
    for i, want in ((2, partial_dw.sum(dim=0)), (3, partial_db.sum(dim=0))):
        torch.testing.assert_close(got[i], ref[i], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# 5. Fused attention forward (flash attention): online softmax over key blocks, in base 2


@triton.jit
def _attn_fwd_inner(
    acc, l_i, m_i, q, K_block_ptr, V_block_ptr, offs_m, lo, hi, seq_len, stride_kn, stride_vn, qk_scale,
    BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr,
):  # fmt: skip
    offs_n = tl.arange(0, BLOCK_N)
    k_ptrs = K_block_ptr + lo * stride_kn
    v_ptrs = V_block_ptr + lo * stride_vn
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptrs, mask=cols[:, None] < seq_len, other=0.0)
        qk = tl.dot(q, tl.trans(k))
        keep = cols[None, :] < seq_len
        if DIAGONAL:
            keep = keep & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(keep, qk * qk_scale, -float("inf"))
        # Running max and sum: rescale what was accumulated so far when the max grows.
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptrs, mask=cols[:, None] < seq_len, other=0.0)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        k_ptrs += BLOCK_N * stride_kn
        v_ptrs += BLOCK_N * stride_vn
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(
    Q, K, V, Out, LSE, sm_scale, H, seq_len,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):  # fmt: skip
    tl.static_assert(BLOCK_M % BLOCK_N == 0, "the diagonal band must be whole key blocks")
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_base = Q + off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_base = K + off_z.to(tl.int64) * stride_kz + off_h.to(tl.int64) * stride_kh
    v_base = V + off_z.to(tl.int64) * stride_vz + off_h.to(tl.int64) * stride_vh
    o_base = Out + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk, mask=offs_m[:, None] < seq_len,
                other=0.0)  # fmt: skip
    k_ptrs = k_base + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk
    v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk

    m_i = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504  # exp(x) == exp2(x * log2(e))
    if CAUSAL:
        # Blocks strictly below the diagonal need no mask; the diagonal band does.
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, 0, start_m * BLOCK_M, seq_len,
                                        stride_kn, stride_vn, qk_scale, BLOCK_N, False)  # fmt: skip
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq_len)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, start_m * BLOCK_M, hi, seq_len,
                                        stride_kn, stride_vn, qk_scale, BLOCK_N, True)  # fmt: skip
    else:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_ptrs, v_ptrs, offs_m, 0, seq_len, seq_len,
                                        stride_kn, stride_vn, qk_scale, BLOCK_N, False)  # fmt: skip
    out = acc / l_i[:, None]
    # log2 of each row's softmax denominator (in units of the scaled scores): what a backward pass needs.
    tl.store(LSE + off_hz * seq_len + offs_m, m_i + tl.math.log2(l_i), mask=offs_m < seq_len)
    o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, out.to(Out.type.element_ty), mask=offs_m[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
              block_m: int = 16, block_n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """softmax(q k^T * sm_scale) v for (batch, heads, seq, head_dim) tensors, and the per-row log2-sum-exp2."""
    Z, H, seq_len, head_dim = q.shape
    assert k.shape == v.shape == q.shape and head_dim in (16, 32, 64)
    o = torch.empty_like(q)
    lse = torch.empty((Z, H, seq_len), dtype=torch.float32, device=q.device)

    def grid(meta: dict[str, Any]) -> tuple[int, int, int]:
        return (triton.cdiv(seq_len, meta["BLOCK_M"]), Z * H, 1)

    attn_fwd_kernel[grid](
        q, k, v, o, lse, sm_scale, H, seq_len,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
    )  # fmt: skip
    return o, lse


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                  sm_scale: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    qf, kf, vf = q.float(), k.float(), v.float()
    out = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=sm_scale)
    scores = (qf @ kf.transpose(-1, -2)) * sm_scale
    if causal:
        seq = q.shape[2]
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    return out.to(q.dtype), torch.logsumexp(scores, dim=-1) / math.log(2)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("Z,H,seq,d,block_m,block_n", [(2, 3, 37, 16, 16, 16), (1, 2, 50, 32, 32, 16)])
def test_attention(dtype: torch.dtype, causal: bool, Z: int, H: int, seq: int, d: int, block_m: int,
                   block_n: int) -> None:  # fmt: skip
    q, k, v = (randn(Z, H, seq, d, dtype=dtype, seed=s) for s in (1, 2, 3))
    sm_scale = 0.5 / math.sqrt(d)
    o, lse = attention(q, k, v, causal, sm_scale, block_m, block_n)
    o_ref, lse_ref = attention_ref(q, k, v, causal, sm_scale)
    assert o.dtype == dtype
    torch.testing.assert_close(o, o_ref, atol=TOL[dtype], rtol=TOL[dtype])
    # The scores are computed from the same (fp16 or fp32) q and k, in fp32 either way.
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-4)


def test_attention_strided_qkv() -> None:
    # q, k, v as views of one packed (batch, seq, 3, heads, head_dim) projection: no copies, odd strides.
    qkv = randn(2, 29, 3, 2, 16, seed=7)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=2))
    assert not q.is_contiguous()
    o, lse = attention(q, k, v, True, 0.25)
    o_ref, lse_ref = attention_ref(q, k, v, True, 0.25)
    torch.testing.assert_close(o, o_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-4)


def test_attention_vs_interpreter() -> None:
    Z, H, seq, d = 1, 2, 21, 16
    q, k, v = (randn(Z, H, seq, d, seed=s) for s in (4, 5, 6))
    o, lse = torch.empty_like(q), torch.empty(Z, H, seq)
    args = (q, k, v, o, lse, 0.25, H, seq, *q.stride(), *k.stride(), *v.stride(), *o.stride())
    meta = {"HEAD_DIM": d, "BLOCK_M": 16, "BLOCK_N": 8, "CAUSAL": True}
    got = run_nmp(attn_fwd_kernel, (2, Z * H), *args, **meta)
    ref = run_interp(attn_fwd_kernel, (2, Z * H), *args, **meta)
    for i in (3, 4):
        torch.testing.assert_close(got[i], ref[i], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[3], attention_ref(q, k, v, True, 0.25)[0], atol=1e-4, rtol=1e-4)
