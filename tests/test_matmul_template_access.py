"""The access forms of Inductor's matmul template (`x @ w.T` of `nn.Linear`) on nmp.

* A column-major tile (dimension -2 contiguous: the B tile of a weight stored [N, K]) is moved by its
  columns and transposed in the scratchpad by the vector unit; it used to be charged as one DMA row per
  element (a 32-byte granule per 2-byte element), about 8x slower than the same matmul with B row-major.
* A load reads a stride-0 dimension once (the bias of the template's epilogue, `bias[None, :]` as a
  [BLOCK_M, BLOCK_N] tile) and replicates it in the scratchpad.
* Loop-invariant code motion (`backend/hoist.py`): the row offsets of a `% M` row gather, recomputed in
  every iteration by the template, move before the loop, so the loop's prefetched loads form one batch
  that overlaps the matrix unit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from triton_nmp import abi
from triton_nmp.backend.pipeline import PassContext, compile_ttir
from triton_nmp.backend.trace_predict import predict_trace
from triton_nmp.opclass import OP_ALU
from triton_nmp.target import spec_for_arch


@triton.jit
def linear_kernel(a_ptr, w_ptr, c_ptr, M, N, K, W_T: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """c = a @ w.T (w stored [N, K], W_T) or a @ w (w stored [K, N]), with the template's `% M` rows."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // grid_n
    pid_n = pid % grid_n
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = rk + k * BLOCK_K
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :])
        if W_T:
            b = tl.load(w_ptr + kk[:, None] + rn[None, :] * K)
        else:
            b = tl.load(w_ptr + kk[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + cm[:, None] * N + cn[None, :], acc.to(tl.float16))


M, N, K, BM, BN, BK = 128, 128, 128, 32, 64, 32


def _run(w_t: bool):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=g).half()
    w = torch.randn(N, K, generator=g).half()
    c = torch.empty(M, N, dtype=torch.float16)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    with triton_nmp.profile() as prof:
        k = linear_kernel[grid](a, w if w_t else w.t().contiguous(), c, M, N, K, W_T=w_t, BLOCK_M=BM, BLOCK_N=BN,
                                BLOCK_K=BK, num_stages=2)
    torch.testing.assert_close(c.float(), a.float() @ w.float().t(), atol=2e-2, rtol=2e-3)
    return k, prof.launches[-1]


def test_column_major_tile_moves_by_columns_and_is_transposed_in_the_scratchpad(launched_grids):
    k, _ = _run(w_t=True)
    slots, grid, _, result = launched_grids[-1]
    trace = result.trace
    w_loads = np.flatnonzero((trace[:, 0] == abi.KIND_DMA_LOAD) & (trace[:, 2] == 1))  # arg 1: w_ptr
    assert w_loads.size == grid[0] * (K // BK)
    rec = trace[w_loads[0]]
    assert rec[4:7].tolist() == [BN, BK * 2, K * 2]  # BN columns of BK contiguous halves, K apart
    nxt = trace[w_loads + 1]
    assert (nxt[:, 0] == abi.KIND_VEC).all()
    assert nxt[0, 2:7].tolist() == [BK * BN, 0, abi.dtype_code("f16"), OP_ALU, abi.REARRANGE_ACCESSES]
    a_loads = trace[(trace[:, 0] == abi.KIND_DMA_LOAD) & (trace[:, 2] == 0)]
    assert (a_loads[:, 4:7] == [BM, BK * 2, K * 2]).all()  # row-major: no transpose
    # the static predictor (cost model, auto mapping) records the same
    mod = compile_ttir(k.asm["ttir"], PassContext(spec_for_arch(k.metadata.target.arch), 2))
    spans = {"a_ptr": slots[1], "w_ptr": slots[3], "c_ptr": slots[5]}
    p = predict_trace(mod.kernel, {"M": M, "N": N, "K": K}, spans, grid)
    assert p.exact, p.reason
    assert np.array_equal(p.trace, trace)


def test_x_at_w_transposed_costs_about_what_row_major_w_costs():
    _, col = _run(w_t=True)
    _, row = _run(w_t=False)
    assert col.sim_seconds < 1.15 * row.sim_seconds, (col.sim_seconds, row.sim_seconds)


def _loop_body(nmpir: str) -> str:
    start = nmpir.index("scf.for")
    return nmpir[start:nmpir.index("scf.yield", start)]


def test_row_offsets_of_the_template_are_hoisted_out_of_the_k_loop():
    k, launch = _run(w_t=True)
    body = _loop_body(k.asm["nmpir"])
    assert "nmp.dma_load" in body and "nmp.vec" not in body, body
    # the two prefetched loads are adjacent: one batch overlapping the matmul of the previous iteration
    ops = re.findall(r"= (nmp\.\w+|arith\.\w+)", body)
    tiles = [o for o in ops if o.startswith("nmp.")]
    assert tiles == ["nmp.dma_load", "nmp.dma_load", "nmp.matmul"], tiles


@triton.jit
def invariant_division_kernel(x_ptr, o_ptr, d, n_iter, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(n_iter):
        q = offs // d  # invariant but a division: stays in the loop (the loop may run zero times)
        s = offs * 3 + 1  # invariant: hoisted
        acc += tl.load(x_ptr + offs + i * BLOCK).to(tl.float32) * q.to(tl.float32) + s.to(tl.float32)
    tl.store(o_ptr + offs, acc)


@pytest.mark.parametrize("d,n_iter", [(2, 3), (0, 0)])
def test_invariant_code_motion_keeps_divisions_in_the_loop_and_results_unchanged(d, n_iter):
    x = torch.arange(3 * 64, dtype=torch.float32)
    o = torch.empty(64)
    k = invariant_division_kernel[(1,)](x, o, d, n_iter, BLOCK=64)
    offs = torch.arange(64)
    want = torch.zeros(64)
    for i in range(n_iter):
        want += x[i * 64:(i + 1) * 64] * (offs // d).float() + (offs * 3 + 1).float()
    torch.testing.assert_close(o, want)
    body = _loop_body(k.asm["nmpir"])
    assert "nmp.vec arith.divsi" in body and "nmp.vec arith.muli" not in body, body


@triton.jit
def bias_epilogue_kernel(b_ptr, c_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    idx_n = rn[None, :] + rm[:, None] * 0
    bias = tl.load(b_ptr + tl.broadcast_to(idx_n, [BLOCK_M, BLOCK_N]), mask=idx_n < N)
    tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], bias.to(tl.float32) * 2.0)


def test_a_broadcast_load_reads_its_row_once_and_replicates_it(launched_grids):
    b = torch.randn(64).half()
    c = torch.empty(32, 64)
    k = bias_epilogue_kernel[(1,)](b, c, 64, BLOCK_M=32, BLOCK_N=64)
    torch.testing.assert_close(c, (b.float() * 2.0).expand(32, 64))
    slots, grid, _, result = launched_grids[-1]
    trace = result.trace
    assert trace[0, 0] == abi.KIND_DMA_LOAD and trace[0, 4:6].tolist() == [1, 64 * 2]  # one row of 64 halves
    assert trace[1, 0] == abi.KIND_VEC and trace[1, 2:7].tolist() == [32 * 64, 0, abi.dtype_code("f16"), OP_ALU,
                                                                       abi.REARRANGE_ACCESSES]
    mod = compile_ttir(k.asm["ttir"], PassContext(spec_for_arch(k.metadata.target.arch), 2))
    p = predict_trace(mod.kernel, {"N": 64}, {"b_ptr": slots[1], "c_ptr": slots[3]}, grid)
    assert p.exact, p.reason
    assert np.array_equal(p.trace, trace)
