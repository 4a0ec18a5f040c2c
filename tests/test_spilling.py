"""Spilling, the last rung of legalization: tiles that do not fit the scratchpad live in a spill area in the
PU's own bank and move by DMA (backend/spill.py). Kernels here cannot be strip-mined (a reduction over
a whole tile is needed before its elements are used again), so nothing but spilling makes them fit."""

import dataclasses
import warnings

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
import triton_nmp.driver.launcher as launcher_mod
from triton_nmp.backend.pipeline import PassContext, compile_ttir
from triton_nmp.backend.trace_predict import predict_trace
from triton_nmp.costmodel import CostModel
from triton_nmp.errors import NMPSpillWarning
from triton_nmp.legality import check_config
from triton_nmp.target import spec_for_arch
from triton_nmp.tuning import prune_with_reasons

from . import pipeline_kernels as pk

BUDGET = 262144  # nmp-64's scratchpad per program


@pytest.fixture(autouse=True)
def _warn_again():
    """The spill warning is once per kernel and process: each test here sees it afresh."""
    launcher_mod._SPILL_WARNED.clear()
    yield


@triton.jit
def _scaled_accumulate_kernel(x_ptr, out_ptr, K, R: tl.constexpr, C: tl.constexpr):
    """acc += x * sum(x) over K tiles of R x C: the sum needs the whole of x before the update."""
    r, c = tl.arange(0, R), tl.arange(0, C)
    acc = tl.zeros((R, C), dtype=tl.float32)
    for k in range(K):
        x = tl.load(x_ptr + k * R * C + r[:, None] * C + c[None, :])
        acc += x * tl.sum(tl.sum(x, axis=1), axis=0)
    tl.store(out_ptr + r[:, None] * C + c[None, :], acc)


@triton.jit
def _normalized_dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """c = a @ b / max(a @ b): a 512 KiB fp32 result, divided by its own maximum."""
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + m[:, None] * N + n[None, :], c / tl.max(tl.max(c, axis=1), axis=0))


def test_a_tile_larger_than_the_scratchpad_spills_and_is_staged_in_pieces(launched_grids):
    """x - max(x) over a 512 KiB tile: x lives in the spill area; the load, the max (partial maxima carried
    from piece to piece), the subtraction and the store run in pieces that fit; one warning names the tile
    and its line; the profile shows the spilled bytes, which the timing model charges."""
    n = (1 << 17) - 5
    x, out = torch.randn(n), torch.empty(n)
    seen = launched_grids
    with warnings.catch_warnings(record=True) as caught, triton_nmp.profile() as prof:
        warnings.simplefilter("always")
        k = pk.big_center_kernel[(1,)](x, out, n, BLOCK=1 << 17)
        pk.big_center_kernel[(1,)](x, out, n, BLOCK=1 << 17)  # cached: no second warning
    torch.testing.assert_close(out, x - x.max())
    spilled = [w for w in caught if issubclass(w.category, NMPSpillWarning)]
    assert len(spilled) == 1
    assert "%x_4: tile<131072xf32> 524288 B" in str(spilled[0].message)
    assert "pipeline_kernels.py:90" in str(spilled[0].message)
    assert k.metadata.nmp_spm_bytes <= BUDGET and k.metadata.nmp_spill_bytes == 524288
    assert k.metadata.nmp_spilled == ["%x_4: tile<131072xf32> 524288 B (" + pk.__file__ + ":90:9)"]
    nmpir = k.asm["nmpir"]
    assert "// spill area: 524288 bytes per program" in nmpir and "spill_pieces" in nmpir
    rec = prof.launches[-1]
    # x is written to its slot once and read back by the max, the subtraction and the store; the
    # subtraction writes it back in place: 5 x 512 KiB, and every byte is charged as local DMA traffic
    assert rec.spill_bytes == 5 * (1 << 17) * 4
    assert rec.bytes_local + rec.bytes_remote == 2 * n * 4 + rec.spill_bytes
    assert "spilled: big_center_kernel" in prof.summary()
    # the cost model predicts exactly what the simulator recorded, spill records included
    slots, grid, meta, result = seen[-1]
    mod = compile_ttir(k.asm["ttir"], PassContext(spec_for_arch(k.metadata.target.arch), k.metadata.num_stages))
    spans = {"x_ptr": slots[1], "out_ptr": slots[3]}
    pred = predict_trace(mod.kernel, {"n": n}, spans, grid)
    assert pred.exact and np.array_equal(pred.trace, result.trace)
    assert (result.trace[:, 2] == triton_nmp.abi.SPILL_ARG).sum() > 0


def test_loop_carried_accumulator_spills_and_is_updated_in_its_slot():
    R, C, K = 256, 512, 3
    x, out = torch.randn(K, R, C), torch.empty(R, C)
    with pytest.warns(NMPSpillWarning, match=r"%acc: tile<256x512xf32>"):
        k = _scaled_accumulate_kernel[(1,)](x, out, K, R=R, C=C)
    torch.testing.assert_close(out, sum(x[i] * x[i].sum() for i in range(K)), rtol=1e-3, atol=1e-2)
    assert k.metadata.nmp_spm_bytes <= BUDGET
    assert {t.split(":")[0] for t in k.metadata.nmp_spilled} == {"%acc", "%x_11"}


def test_dot_result_spills_and_the_dot_runs_row_block_by_row_block():
    M, N, K = 256, 512, 64
    a, b, c = torch.randn(M, K).half(), torch.randn(K, N).half(), torch.empty(M, N)
    with pytest.warns(NMPSpillWarning):
        k = _normalized_dot_kernel[(1,)](a, b, c, M=M, N=N, K=K)
    ref = a.float() @ b.float()
    torch.testing.assert_close(c, ref / ref.max(), rtol=1e-3, atol=1e-3)
    assert [t.split(":")[0] for t in k.metadata.nmp_spilled] == ["%c"]  # a and b stay in the scratchpad
    assert k.metadata.nmp_spm_bytes <= BUDGET and "nmp.matmul" in k.asm["nmpir"]


def test_spill_area_larger_than_the_bank_is_refused_naming_why():
    from triton_nmp import legality
    from triton_nmp.errors import NMPScratchpadOverflowError

    spec = dataclasses.replace(triton_nmp.active_target(), bank_bytes=256 * 1024)
    x = torch.empty(1 << 17)
    v = check_config(pk.big_center_kernel, dict(x_ptr=x, out_ptr=x, n=x.numel()), {"BLOCK": 1 << 17}, spec=spec)
    assert not v.legal and "scratchpad overflow" in v.reason and v.spill_bytes == 0
    ttir = next(t for t in legality._TTIR_CACHE.values() if isinstance(t, str) and "@big_center_kernel" in t)
    with pytest.raises(NMPScratchpadOverflowError, match=r"(?s)spill area of 524288 bytes per program .*"
                       r"a bank of target 'nmp-64' has 262144 bytes.*%x_4: tile<131072xf32>"):
        compile_ttir(ttir, PassContext(spec, 1))


def test_a_spilling_config_is_kept_by_pruning_and_ranked_by_its_cost():
    """The autotuner's legality pruning keeps a config that spills, and the cost model prices its spill
    traffic: its prediction equals the simulated time, and it ranks behind a config that fits."""
    n = 1 << 17
    x, out = torch.randn(n), torch.empty(n)
    configs = [triton.Config({"BLOCK": 1 << 12}), triton.Config({"BLOCK": n})]
    named = {"x_ptr": x, "out_ptr": out, "n": n}
    kept, pruned = prune_with_reasons(pk.big_center_kernel, configs, named, {"grid": (1,), "warmup": False})
    assert len(kept) == 2 and not pruned
    model = CostModel()
    small, big = (model.predict_raw(pk.big_center_kernel, named, c, (1,)) for c in configs)
    assert small.exact and big.exact and big.seconds > small.seconds
    with triton_nmp.profile() as prof:
        pk.big_center_kernel[(1,)](x, out, n, BLOCK=n)
    assert prof.launches[-1].sim_seconds == pytest.approx(big.raw_seconds, rel=1e-9)


@triton.jit
def _center_blocks_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x - tl.max(x, axis=0))


def test_every_program_spills_its_own_tiles():
    """Three programs, each with its own 512 KiB tile in the spill area: no program sees another's."""
    n = 1 << 17
    x, out = torch.randn(3, n), torch.empty(3, n)
    _center_blocks_kernel[(3,)](x, out, BLOCK=n)
    torch.testing.assert_close(out, x - x.max(dim=1, keepdim=True).values)


# The example kernels on nmp-64 with a 2 KiB scratchpad instead of 256 KiB: every rung of legalization
# (leaner buffers, strip-mining, spilling in pieces) runs on kernels with loops, fused runs, reductions,
# dots and online softmax; the results must not change. The dots of fp32 matmul need their whole B tile
# (4 KiB) beside a piece of A: no staging fits 2 KiB, and the refusal says so.
TINY_CASES = ["softmax", "layernorm", "attention-fp32", "attention-fp16-causal", "argmax-axis0", "sum-axis1",
              "matmul-fp32"]


@pytest.mark.parametrize("name", TINY_CASES)
def test_example_kernels_on_a_tiny_scratchpad_keep_their_results(name):
    from triton_nmp import examples as ex
    from triton_nmp.errors import NMPScratchpadOverflowError
    from triton_nmp.target import TargetSpec, set_active_target

    case = ex.CASES_BY_NAME[name]
    previous = set_active_target(dataclasses.replace(TargetSpec.load("nmp-64"), spm_bytes=2048))
    try:
        inputs = case.make_inputs(0, "small")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NMPSpillWarning)
            if name == "matmul-fp32":
                with pytest.raises(NMPScratchpadOverflowError, match=r"(?s)tl.dot at .*already staged in \d+ pieces"):
                    case.run(inputs)
                return
            with triton_nmp.profile() as prof:
                out = case.run(inputs)
        result = ex.check(out, case.reference(inputs), case.atol, case.rtol)
        assert result.ok, result
        assert all(rec.spm_peak_bytes <= 2048 for rec in prof.launches)
    finally:
        set_active_target(previous)
