"""The static trace predictor (front half of the cost model) reproduces the simulator's traces exactly."""

import struct

import numpy as np
import pytest
import triton
import triton.language as tl

from triton_nmp import examples as ex
from triton_nmp.backend.pipeline import PassContext, compile_ttir
from triton_nmp.backend.trace_predict import predict_trace
from triton_nmp.target import spec_for_arch


def _scalars_and_spans(meta, slots):
    scalars, spans, i = {}, {}, 0
    for a in meta.nmp_args:
        if a["kind"] == "ptr":
            spans[a["name"]] = slots[i + 1]
            i += 2
        elif a["kind"] == "float":
            scalars[a["name"]] = struct.unpack("<d", struct.pack("<q", slots[i]))[0]
            i += 1
        else:
            scalars[a["name"]] = slots[i]
            i += 1
    return scalars, spans


def _compiled(meta):
    for f in vars(ex).values():
        if isinstance(f, triton.runtime.JITFunction) and f.fn.__name__ == meta.name:
            for dc in f.device_caches.values():
                for k in dc[0].values():
                    if k.metadata.hash == meta.hash:
                        return k
    raise LookupError(meta.name)


@pytest.mark.parametrize("case", ["vector_add", "softmax", "matmul-fp16-bT", "layernorm", "attention-fp16-causal",
                                  "argmax-axis0", "grid-3d", "int64-offsets"])
def test_predicted_trace_equals_simulated_trace(case, launched_grids):
    c = ex.CASES_BY_NAME[case]
    c.run(c.make_inputs(0, "small"))
    slots, grid, meta, result = launched_grids[-1]
    k = _compiled(meta)
    mod = compile_ttir(k.asm["ttir"], PassContext(spec_for_arch(k.metadata.target.arch), k.metadata.num_stages))
    scalars, spans = _scalars_and_spans(meta, slots)
    p = predict_trace(mod.kernel, scalars, spans, grid)
    assert p.exact, p.reason
    assert np.array_equal(p.trace, result.trace)


@triton.jit(debug=True)
def _copy_checked(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.device_assert(offs < n, "in range")  # a tensor condition: Inductor's indirect indexing emits these
    tl.store(y + offs, tl.load(x + offs))


def test_device_asserts_do_not_stop_the_prediction(launched_grids):
    """`nmp.assert` records nothing in the trace; the predictor once evaluated its tensor condition as a scalar
    (KeyError), so every Inductor kernel with an indirect-index check fell back to round-robin mapping."""
    import torch

    x = torch.arange(256, dtype=torch.float32)
    y = torch.empty_like(x)
    k = _copy_checked[(4,)](x, y, 256, BLOCK=64)
    assert torch.equal(x, y)
    slots, grid, meta, result = launched_grids[-1]
    mod = compile_ttir(k.asm["ttir"], PassContext(spec_for_arch(k.metadata.target.arch), k.metadata.num_stages))
    assert "tt.assert" in k.asm["ttir"]
    scalars, spans = _scalars_and_spans(meta, slots)
    p = predict_trace(mod.kernel, scalars, spans, grid)
    assert p.exact, p.reason
    assert np.array_equal(p.trace, result.trace)


@triton.jit
def _copy_if_flagged(x, y, flags, BLOCK: tl.constexpr):
    """Programs whose flag is 0 skip their work: a branch on loaded data, as decode attention's masked-off chunks."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if tl.load(flags + pid) != 0:
        tl.store(y + offs, tl.load(x + offs) * 2)


@triton.jit
def _copy_to_loaded_row(x, y, rows, BLOCK: tl.constexpr):
    """Program p copies x's row p to y's row rows[p] when that is not negative: a store at a loaded offset, inside
    a branch on loaded data (as decode attention's KV-cache write)."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    row = tl.load(rows + pid)
    if row >= 0:
        tl.store(y + row * BLOCK + offs, tl.load(x + pid * BLOCK + offs))


def _predicted(k, launched_grids):
    slots, grid, meta, result = launched_grids[-1]
    mod = compile_ttir(k.asm["ttir"], PassContext(spec_for_arch(k.metadata.target.arch), k.metadata.num_stages))
    scalars, spans = _scalars_and_spans(meta, slots)
    return predict_trace(mod.kernel, scalars, spans, grid), result.trace


def test_a_branch_on_loaded_data_predicts_a_bound_of_both_sides(launched_grids):
    """Not exact, but every record a run issues is predicted (the skipped programs' loads and stores too)."""
    import torch

    x, flags = torch.arange(256, dtype=torch.float32), torch.tensor([1, 0, 1, 0], dtype=torch.int32)
    y = torch.zeros_like(x)
    k = _copy_if_flagged[(4,)](x, y, flags, BLOCK=64)
    assert torch.equal(y.view(4, 64)[0::2], x.view(4, 64)[0::2] * 2) and not y.view(4, 64)[1::2].any()
    p, real = _predicted(k, launched_grids)
    assert not p.exact and p.bound and "depends on loaded data" in p.reason
    predicted = {tuple(r) for r in p.trace.tolist()}
    assert all(tuple(r) in predicted for r in real.tolist())
    assert len(predicted) > len({tuple(r) for r in real.tolist()})  # programs 1 and 3's copy, not run
    assert set(p.trace[:, 1].tolist()) == {0, 1, 2, 3}


def test_an_address_from_loaded_data_in_a_branch_on_it_is_bounded_by_its_argument(launched_grids):
    """Inside a branch on loaded data, a DMA at a loaded offset is recorded as its elements anywhere in its
    argument (an element scatter's record); outside one (an embedding's row gather) there is no bound
    (tests/test_auto_placement.py: the fallback to round robin)."""
    import torch

    from triton_nmp import abi

    x, rows = torch.arange(256, dtype=torch.float32), torch.tensor([3, -1, 1, 0], dtype=torch.int32)
    y = torch.zeros_like(x)
    k = _copy_to_loaded_row[(4,)](x, y, rows, BLOCK=64)
    assert torch.equal(y.view(4, 64)[[3, 1, 0]], x.view(4, 64)[[0, 2, 3]]) and not y.view(4, 64)[2].any()
    p, _ = _predicted(k, launched_grids)
    assert not p.exact and p.bound and "depends on loaded data" in p.reason
    scatters = p.trace[p.trace[:, 0] == abi.KIND_SCATTER]
    assert sorted(scatters[:, 1].tolist()) == [0, 1, 2, 3] and (scatters[:, 3] == 0).all()
    assert (scatters[:, 4] == 64).all() and (scatters[:, 6] == 1024).all()  # 64 elements anywhere in y's 1 KiB


@triton.jit
def _sum_first_rows(x, y, counts, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    """Program p sums the first counts[p] elements of its row, BLOCK at a time (a KV cache read up to a position)."""
    pid = tl.program_id(0)
    n = tl.load(counts + pid)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(STEPS):
        acc += tl.load(x + pid * STEPS * BLOCK + i * BLOCK + offs, mask=i * BLOCK + offs < n, other=0.0)
    tl.store(y + pid, tl.sum(acc, 0))


def test_a_box_bounded_by_loaded_data_is_bounded_by_its_tile(launched_grids):
    """A load whose extent comes from data loaded before the loop (rows up to a loaded count) moves at most its
    whole tile: the prediction is that bound, each record a superset of the real one at the same offset, and the
    loop's loads stay multi-buffered (prefetched after the first step)."""
    import torch

    from triton_nmp import abi

    x, counts = torch.arange(512, dtype=torch.float32), torch.tensor([0, 70, 256, 5], dtype=torch.int32)
    y = torch.zeros(4)
    k = _sum_first_rows[(4,)](x, y, counts, STEPS=4, BLOCK=32)
    want = torch.stack([x.view(4, 128)[p, :min(int(c), 128)].sum() for p, c in enumerate(counts)])
    assert torch.equal(y, want)
    p, real = _predicted(k, launched_grids)
    assert not p.exact and p.bound and "mask of the access" in p.reason and "depends on loaded data" in p.reason
    loads = p.trace[(p.trace[:, 0] == abi.KIND_DMA_LOAD) & (p.trace[:, 2] == 0)]  # x's records
    assert len(loads) == 16 and (loads[:, 5] == 128).all()  # every step's whole tile, for every program
    assert (loads[:, 7] & abi.FLAG_PREFETCHED != 0).sum() == 12  # steps 1..3 prefetched
    moved = real[(real[:, 0] == abi.KIND_DMA_LOAD) & (real[:, 2] == 0)]
    assert len(moved) == 3 + 4 + 1 and moved[-1, 5] == 20  # program 0 moves nothing; 70 -> 3 steps; 256 -> 4; 5 -> 1
    predicted = {(r[1], r[3]) for r in loads.tolist()}
    assert all((r[1], r[3]) in predicted for r in moved.tolist())


@triton.jit
def _count_down(x, y):
    n = tl.load(x + tl.program_id(0))
    i = 0
    while n > 0:
        n -= 1
        i += 1
    tl.store(y + tl.program_id(0), i)


def test_a_loop_on_loaded_data_is_no_bound(launched_grids):
    import torch

    x, y = torch.tensor([2, 0, 5], dtype=torch.int32), torch.zeros(3, dtype=torch.int32)
    k = _count_down[(3,)](x, y)
    assert y.tolist() == [2, 0, 5]
    p, _ = _predicted(k, launched_grids)
    assert not p.exact and not p.bound and "while" in p.reason
