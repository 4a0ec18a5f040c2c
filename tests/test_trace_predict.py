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
