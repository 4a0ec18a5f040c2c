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
def _copy_from_loaded_row(x, y, rows, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    tl.store(y + pid * BLOCK + offs, tl.load(x + tl.load(rows + pid) * BLOCK + offs))


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


def test_an_address_from_loaded_data_is_bounded_by_its_argument(launched_grids):
    """A DMA at a loaded offset (a KV-cache row at a loaded position) is recorded as its elements anywhere in its
    argument: an element gather's record."""
    import torch

    from triton_nmp import abi

    x, rows = torch.arange(256, dtype=torch.float32), torch.tensor([3, 2, 1, 0], dtype=torch.int32)
    y = torch.empty_like(x)
    k = _copy_from_loaded_row[(4,)](x, y, rows, BLOCK=64)
    assert torch.equal(y.view(4, 64), x.view(4, 64).flip(0))
    p, _ = _predicted(k, launched_grids)
    assert not p.exact and p.bound and "address" in p.reason
    gathers = p.trace[p.trace[:, 0] == abi.KIND_GATHER]
    assert sorted(gathers[:, 1].tolist()) == [0, 1, 2, 3] and (gathers[:, 2] == 0).all() and (gathers[:, 4] == 64).all()
    assert (gathers[:, 6] == 1024).all()  # anywhere in x's 1 KiB


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
