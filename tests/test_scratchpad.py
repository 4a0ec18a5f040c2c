"""Scratchpad planning, the compile-time budget check, multi-buffering and the legality query."""

import time

import pytest
import torch
import triton
import triton.language as tl

from triton_nmp.errors import NMPCompilationError, NMPError
from triton_nmp.legality import check_config, clear_cache

from . import pipeline_kernels as pk


def test_plan_reuses_dead_buffers_and_reports_peak():
    n = 4096
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    k = pk.big_add_kernel[(4,)](x, y, out, n, BLOCK=1024)
    torch.testing.assert_close(out, x + y)
    # x and y tiles (4 KiB each) are live together; x + y reuses x's space: peak is 2 tiles, not 3.
    assert k.metadata.shared == 8192
    assert "// scratchpad plan: peak 8192 bytes" in k.asm["nmpir"]


def test_kernel_over_the_budget_is_refused_at_compile_time_with_live_buffers():
    """A scan over a 512 KiB tile: its input and result cannot be staged in pieces, so even spilling cannot
    fit it; the error lists the tiles at the peak and says why they cannot spill or split."""
    n = 1 << 17
    x, out = torch.randn(n), torch.empty(n)
    with pytest.raises(NMPCompilationError, match=r"(?s)scratchpad overflow: the kernel needs 1048576 bytes.*"
                       r"has 262144 bytes, and spilling tiles to the PU's bank does not make it fit.*"
                       r"tile<131072xf32> 524288 B .*pipeline_kernels\.py:.*"
                       r"a scan at .*pipeline_kernels\.py:\d+:\d+: no piece-wise staging exists for it.*"
                       r"Use smaller BLOCK_\* sizes"):
        pk.big_cumsum_kernel[(1,)](x, out, BLOCK=n)


def test_oversized_reduction_is_strip_mined_with_partial_results():
    n = (1 << 17) - 77
    x, out = torch.randn(n), torch.empty(1)
    k = pk.big_sum_kernel[(1,)](x, out, n, BLOCK=1 << 17)
    torch.testing.assert_close(out[0], (x * x).sum(), rtol=1e-4, atol=1e-3)
    assert k.metadata.shared <= 262144 and "strip_mined" in k.asm["nmpir"]


def test_oversized_elementwise_kernel_is_strip_mined_to_fit():
    n = (1 << 17) + 123  # two programs, a tail in the second
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    k = pk.big_add_kernel[(2,)](x, y, out, n, BLOCK=1 << 17)
    assert torch.equal(out, x + y)
    assert k.metadata.shared <= 262144
    assert "strip_mined = 32768" in k.asm["nmpir"]


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_multibuffering_charges_stage_buffers_and_keeps_results(stages):
    BM = BN = BK = 32
    K = 128
    a, b = torch.randn(BM, K), torch.randn(K, BN)
    c = torch.empty(BM, BN)
    k = pk.dot_loop_kernel[(1,)](a, b, c, K, BM=BM, BN=BN, BK=BK, num_stages=stages)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    tile = BM * BK * 4
    acc = BM * BN * 4
    assert k.metadata.shared == acc + 2 * stages * tile  # acc in place, a and b rings of `stages` buffers
    if stages > 1:
        assert f"x {stages} stages" in k.asm["nmpir"]


def test_too_deep_multibuffering_is_made_shallower_not_refused():
    """num_stages is a request: 8 rings of 16 KiB a/b tiles plus the accumulator exceed 256 KiB, so the
    loads are buffered 7 deep (the deepest that fits) and the legality query agrees."""
    BM = BN = BK = 64
    K = 256
    a, b = torch.randn(BM, K), torch.randn(K, BN)
    c = torch.empty(BM, BN)
    k = pk.dot_loop_kernel[(1,)](a, b, c, K, BM=BM, BN=BN, BK=BK, num_stages=8)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    tile, acc = BM * BK * 4, BM * BN * 4
    assert k.metadata.nmp_num_stages == 7
    assert k.metadata.shared == acc + 2 * 7 * tile <= 262144
    assert "x 7 stages" in k.asm["nmpir"]
    verdict = check_config(pk.dot_loop_kernel, dict(a_ptr=a, b_ptr=b, c_ptr=c, K=K),
                           triton.Config({"BM": BM, "BN": BN, "BK": BK}, num_stages=8))
    assert verdict.legal and verdict.spm_peak_bytes == k.metadata.shared


def test_legality_query_prunes_oversized_configs_fast():
    clear_cache()
    n = 1 << 20
    x, y, out = torch.empty(n), torch.empty(n), torch.empty(n)
    args = dict(x_ptr=x, y_ptr=y, out_ptr=out, n=n)
    t0 = time.perf_counter()
    small = check_config(pk.big_add_kernel, args, triton.Config({"BLOCK": 1024}))
    cold = time.perf_counter() - t0
    big = check_config(pk.big_center_kernel, dict(x_ptr=x, out_ptr=out, n=n), {"BLOCK": 1 << 17})
    mined = check_config(pk.big_add_kernel, args, {"BLOCK": 1 << 17})
    assert small.legal and small.spm_peak_bytes == 8192
    assert big.legal and big.spill_bytes == 524288 and "spilled" in big.reason  # x - max(x): x spills
    assert mined.legal and mined.spm_peak_bytes == 262144  # made to fit by strip-mining
    assert cold < 2.0
    warm = []
    for stages in (1, 2, 3):  # same TTIR: only lowering and planning run
        t0 = time.perf_counter()
        check_config(pk.dot_loop_kernel, dict(a_ptr=x, b_ptr=y, c_ptr=out, K=128),
                     triton.Config({"BM": 32, "BN": 32, "BK": 32}, num_stages=stages))
        warm.append(time.perf_counter() - t0)
    assert min(warm[1:]) < 0.1


def test_legality_query_reports_frontend_errors_as_illegal():
    x = torch.empty(64)
    v = check_config(pk.big_add_kernel, dict(x_ptr=x, y_ptr=x, out_ptr=x, n=64), {"BLOCK": 48})
    assert not v.legal and "does not compile" in v.reason


def test_misaligned_and_odd_sized_dma_is_correct_and_charged_whole_granules():
    import triton_nmp

    base = triton_nmp.place(torch.randn(4096 + 64, dtype=torch.float16), "interleaved")  # views inherit it
    n = 4001  # odd size, not a multiple of the 32-byte granule
    results = {}
    for name, src in (("aligned", base[:n]), ("misaligned", base[1:n + 1])):  # 2-byte offset: misaligned
        out = torch.empty(n, dtype=torch.float16)
        with triton_nmp.profile() as prof:
            pk.copy_kernel[(triton.cdiv(n, 512),)](src, out, n, BLOCK=512)
        assert torch.equal(out, src)
        results[name] = prof.launches[-1].timing
    aligned, misaligned = results["aligned"], results["misaligned"]
    useful = 2 * n * 2  # bytes read + written
    assert aligned.bytes_local + aligned.bytes_remote == useful
    assert misaligned.bytes_moved > aligned.bytes_moved >= useful  # whole granules from aligned addresses
    assert misaligned.cycles >= aligned.cycles


@triton.jit
def _single_dot_kernel(x_ptr, y_ptr, z_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, M)[:, None] * K + tl.arange(0, K)[None, :])
    y = tl.load(y_ptr + tl.arange(0, K)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(z_ptr + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :], tl.dot(x, y))


def test_dot_result_takes_its_zero_accumulators_buffer():
    """A dot outside a loop accumulates into its result from a zero tile that dies there: one MxN buffer,
    not two (128x256 fp32 fits 256 KiB only so)."""
    M, N, K = 128, 256, 32
    x, y, z = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
    k = _single_dot_kernel[(1,)](x, y, z, M=M, N=N, K=K)
    torch.testing.assert_close(z, x @ y, rtol=1e-4, atol=1e-4)
    assert k.metadata.shared == (M * N + M * K + K * N) * 4


@triton.jit
def _leaky_relu_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, tl.where(x >= 0, x, x * 0.01))


def test_uniform_constants_take_no_scratchpad():
    """`x * 0.01` and `x >= 0` use the constants as scalars: no 0.01 / 0.0 tiles live all kernel long,
    and the compare/multiply/select stay one fused run whose result takes x's buffer (x is read there for
    the last time): one buffer."""
    x = torch.randn(64, 64)
    y = torch.empty_like(x)
    k = _leaky_relu_kernel[(1,)](x, y, N=64)
    assert torch.equal(y, torch.where(x >= 0, x, x * 0.01))
    assert k.metadata.shared == 64 * 64 * 4
    assert "nmp.const" not in k.asm["nmpir"]


@triton.jit
def _indirect_kernel(x_ptr, idx_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    idx = tl.load(idx_ptr + offs)
    tl.store(o_ptr + offs, tl.load(x_ptr + idx * 2 + 1, mask=idx < 50, other=-1.0))


@triton.jit
def _scatter_add_kernel(x_ptr, val_ptr, NUM: tl.constexpr):
    off = tl.arange(0, NUM)
    offset = off[:, None] * NUM + off[None, :]
    tl.atomic_add(x_ptr + offset // 2, tl.load(val_ptr + offset))


def test_gather_addresses_stay_in_registers():
    """The address arithmetic of a gather is fused into the gather's element loop: no 8-byte pointer
    tile in the scratchpad, only the index tile and the result."""
    x, idx, out = torch.randn(200), torch.randperm(64).to(torch.int32), torch.empty(64)
    k = _indirect_kernel[(1,)](x, idx, out, N=64)
    ref = torch.where(idx < 50, x[(idx * 2 + 1).clamp(max=199).long()], torch.tensor(-1.0))
    assert torch.equal(out, ref)
    assert "xptr>" not in k.asm["nmpir"].split("nmp.func")[0]  # the plan lists no pointer tile
    assert k.metadata.shared == 64 * 4 * 2


def test_scatter_add_of_a_128x128_tile_fits():
    """Triton's test_tensor_atomic_add_non_exclusive_offset at 128: the pointer tile of the atomic is
    never stored, so the kernel fits 256 KiB (it needed 345 KiB)."""
    x, val = torch.zeros(64, 128), torch.randn(128 * 128)
    k = _scatter_add_kernel[(1,)](x, val, NUM=128)
    torch.testing.assert_close(x.reshape(-1), val[0::2] + val[1::2])
    assert k.metadata.shared <= 262144


# -- leaner buffers: kernels that fit only when reductions and iotas join the fused runs around them ----

@triton.jit
def _row_softmax_sum_kernel(x_ptr, w_ptr, s_ptr, R: tl.constexpr, C: tl.constexpr):
    rows, cols = tl.arange(0, R), tl.arange(0, C)
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :])
    m = tl.max(x, axis=1)
    w = tl.load(w_ptr + cols)
    tl.store(s_ptr + rows, tl.sum(tl.exp(x - m[:, None]) * w[None, :], axis=1))
    tl.store(x_ptr + rows[:, None] * C + cols[None, :], x - m[:, None])


@triton.jit
def _column_dot_kernel(x_ptr, w_ptr, s_ptr, R: tl.constexpr, C: tl.constexpr):
    rows, cols = tl.arange(0, R), tl.arange(0, C)
    x = tl.load(x_ptr + rows[:, None] * C + cols[None, :])
    w = tl.load(w_ptr + rows)
    tl.store(s_ptr + cols, tl.sum(x * w[:, None] + 1.0, axis=0))
    tl.store(x_ptr + rows[:, None] * C + cols[None, :], x * 2.0)


@triton.jit
def _masked_square_sum_kernel(x_ptr, s_ptr, i_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    ok = offs < n
    tl.store(s_ptr, tl.sum(tl.where(ok, x * x, 0.0), axis=0))
    tl.store(i_ptr, tl.argmax(tl.where(ok, x * 3.0, -1e30), axis=0))


def test_reduction_fused_with_its_run_fits_a_row_block_a_stored_exp_tile_would_not():
    """exp(x - max) * w is a 128 KiB tile beside the 128 KiB x: it fits only when the row sum combines the
    elements as the run computes them (a broadcast in the run: the loop nest path)."""
    R, C = 32, 1024
    x, w, s = torch.randn(R, C), torch.randn(C), torch.empty(R)
    x0 = x.clone()
    k = _row_softmax_sum_kernel[(1,)](x, w, s, R=R, C=C)
    centered = x0 - x0.max(1, keepdim=True).values
    torch.testing.assert_close(s, (torch.exp(centered) * w).sum(1), rtol=1e-4, atol=1e-4)
    assert torch.equal(x, centered)
    assert "fused = True" in k.asm["nmpir"] and k.metadata.shared <= 262144


def test_column_reduction_fused_and_a_later_use_of_the_input():
    R, C = 128, 256
    x, w, s = torch.randn(R, C), torch.randn(R), torch.empty(C)
    x0 = x.clone()
    k = _column_dot_kernel[(1,)](x, w, s, R=R, C=C)
    torch.testing.assert_close(s, (x0 * w[:, None] + 1.0).sum(0), rtol=1e-4, atol=1e-3)
    assert torch.equal(x, x0 * 2.0)
    assert "fused = True" in k.asm["nmpir"] and k.metadata.shared <= 262144


def test_iota_and_reductions_fused_into_one_dimensional_runs():
    """`offs < n` from an iota and two masked reductions (a sum and an argmax, whose index input is an
    iota too) over a 32768-element fp32 tile: no index, mask or product tile is stored."""
    n = 30000
    x, s, i = torch.randn(n), torch.empty(1), torch.empty(1, dtype=torch.int32)
    k = _masked_square_sum_kernel[(1,)](x, s, i, n, BLOCK=32768)
    torch.testing.assert_close(s[0], (x * x).sum(), rtol=1e-4, atol=1e-2)
    assert int(i[0]) == int((x * 3.0).argmax())
    nmpir = k.asm["nmpir"]
    assert "nmp.iota  {start = 0, axis = 0, fused = True}" in nmpir and "strip_mined" not in nmpir
    assert k.metadata.shared <= 262144


@triton.jit
def _unit_stride_kernel(x_ptr, out_ptr, stride, BLOCK: tl.constexpr):
    tl.static_assert(stride == 1, "needs the stride specialized to the constant 1")
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride))


def test_legality_query_specializes_integers_equal_to_one_as_the_jit_does():
    """Triton's JIT compiles an integer argument equal to 1 as a constant; the legality query must judge
    that same kernel, not one with a run-time 1."""
    x, out = torch.randn(64), torch.empty(64)
    _unit_stride_kernel[(1,)](x, out, 1, BLOCK=64)
    assert torch.equal(out, x)
    assert check_config(_unit_stride_kernel, dict(x_ptr=x, out_ptr=out, stride=1), {"BLOCK": 64}).legal
    other = check_config(_unit_stride_kernel, dict(x_ptr=x, out_ptr=out, stride=2), {"BLOCK": 64})
    assert not other.legal and "does not compile" in other.reason



_unspecialized_stride_kernel = triton.jit(_unit_stride_kernel.fn, do_not_specialize=["stride"])


def test_legality_query_takes_the_specialisation_from_triton():
    """The query binds arguments with Triton's own binder: `do_not_specialize` keeps a 1 a run-time value
    (its static_assert cannot be decided), and an argument Triton cannot type is an NMPError naming the kernel."""
    x, out = torch.randn(64), torch.empty(64)
    verdict = check_config(_unspecialized_stride_kernel, dict(x_ptr=x, out_ptr=out, stride=1), {"BLOCK": 64})
    assert not verdict.legal and "could not be determined at compile-time" in verdict.reason
    with pytest.raises(NMPError, match="cannot infer Triton types for the arguments of _unit_stride_kernel"):
        check_config(_unspecialized_stride_kernel, dict(x_ptr=x, out_ptr=object(), stride=1), {"BLOCK": 64})
