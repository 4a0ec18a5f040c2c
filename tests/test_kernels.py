"""The kernel suite of `triton_nmp.examples` against torch, on whatever Triton driver is active.

Shapes are small (fast on the simulator and on Triton's interpreter) but never multiples of the block
sizes, so every masked tail path runs. `TRITON_INTERPRET=1 pytest tests/test_kernels.py` validates the
kernels themselves independently of the nmp compiler.
"""

from __future__ import annotations

import io
import math

import pytest
import torch

from triton_nmp import examples as ex
from triton_nmp.examples import CASES, Case, check

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
TOL = {torch.float32: 1e-4, torch.float16: 1e-2}


def assert_close(out: ex.Outputs, ref: ex.Outputs, atol: float, rtol: float) -> None:
    result = check(out, ref, atol, rtol)
    assert result.ok, f"max abs error {result.max_abs_err:.3e} (atol {atol}, rtol {rtol}) {result.detail}"


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ----------------------------------------------------------------------------------------------
# Registry


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_small(case: Case) -> None:
    inputs = case.make_inputs(0, "small")
    assert_close(case.run(inputs), case.reference(inputs), case.atol, case.rtol)


def test_registry_covers_every_kernel_family() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    for prefix in ("vector_add", "softmax", "matmul-", "layernorm", "attention-", "sum-", "max-", "min-", "argmax-",
                   "grid-2d", "grid-3d", "scalar-", "int64-"):  # fmt: skip
        assert any(n.startswith(prefix) for n in names), prefix
    for case in CASES:
        assert set(case.sizes) == {"small", "medium"}
        case.describe("medium")  # every template names only its own dimensions


def test_check_reports_mismatches() -> None:
    a = torch.zeros(3)
    assert check(a, a.clone(), 0, 0).ok
    bad = check(a, torch.tensor([0.0, 0.5, 0.0]), 1e-3, 0)
    assert not bad.ok and bad.max_abs_err == pytest.approx(0.5)
    assert not check(a, torch.zeros(4), 1, 1).ok
    assert not check((a, a), a, 1, 1).ok


# ----------------------------------------------------------------------------------------------
# Per-kernel variations


@pytest.mark.parametrize("n", [1, 1000, 1025, 4099])
def test_add_tails(n: int) -> None:
    x, y = _randn(n, seed=1), _randn(n, seed=2)
    assert torch.equal(ex.add(x, y, block=1024), x + y)


@pytest.mark.parametrize("rows,cols", [(1, 1), (5, 64), (9, 130)])
def test_softmax_shapes(rows: int, cols: int) -> None:
    x = _randn(rows, cols) * 4
    assert_close(ex.softmax(x), torch.softmax(x, dim=1), 1e-6, 1e-5)


def test_softmax_strided_rows() -> None:
    # Every other row of a wider buffer: the row stride differs from n_cols.
    x = _randn(14, 80)[::2, :50]
    assert_close(ex.softmax(x), torch.softmax(x, dim=1), 1e-6, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_matmul_layouts(dtype: torch.dtype, layout: str) -> None:
    M, N, K = 70, 41, 53
    a = _randn(K, M, dtype=dtype, seed=1).t() if layout[0] == "t" else _randn(M, K, dtype=dtype, seed=1)
    b = _randn(N, K, dtype=dtype, seed=2).t() if layout[1] == "t" else _randn(K, N, dtype=dtype, seed=2)
    c = ex.matmul(a, b)
    assert c.dtype == dtype
    assert_close(c, (a.float() @ b.float()).to(dtype), TOL[dtype], TOL[dtype])


@pytest.mark.parametrize("M,N,K,group_m", [(160, 33, 40, 4), (97, 100, 16, 3), (5, 7, 3, 8), (33, 33, 33, 1)])
def test_matmul_grouping_and_tails(M: int, N: int, K: int, group_m: int) -> None:
    # Tile rows not divisible by GROUP_M leave a short last group: every output tile must still be written once.
    a, b = _randn(M, K, seed=3), _randn(K, N, seed=4)
    assert_close(ex.matmul(a, b, group_m=group_m), a @ b, 1e-4, 1e-4)


def test_matmul_blocks_16() -> None:
    a, b = _randn(40, 50, dtype=torch.float16, seed=5), _randn(50, 30, dtype=torch.float16, seed=6)
    c = ex.matmul(a, b, block_m=16, block_n=16, block_k=16)
    assert_close(c, (a.float() @ b.float()).half(), 1e-2, 1e-2)


@pytest.mark.parametrize("rows,cols,block", [(7, 128, 128), (3, 257, 64), (4, 50, 128)])
def test_layernorm_shapes(rows: int, cols: int, block: int) -> None:
    x, w, b = _randn(rows, cols, seed=1) * 3 + 1, _randn(cols, seed=2), _randn(cols, seed=3)
    assert_close(ex.layernorm(x, w, b, block=block), ex.layernorm_ref(x, w, b), 1e-4, 1e-4)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bh,seq,d,block_m,block_n", [(2, 37, 16, 16, 16), (1, 50, 32, 32, 16), (2, 20, 16, 16, 32)])
def test_attention(dtype: torch.dtype, causal: bool, bh: int, seq: int, d: int, block_m: int, block_n: int) -> None:
    q, k, v = (_randn(bh, seq, d, dtype=dtype, seed=s) for s in (1, 2, 3))
    scale = 0.5 / math.sqrt(d)
    o = ex.attention(q, k, v, causal, scale, block_m=block_m, block_n=block_n)
    assert o.dtype == dtype
    assert_close(o, ex.attention_ref(q, k, v, causal, scale), TOL[dtype], TOL[dtype])


def test_attention_strided_heads() -> None:
    # q, k, v as views of one packed (bh, seq, 3, d) buffer: unit head_dim stride, seq stride 3*d.
    qkv = _randn(2, 29, 3, 16, seed=7)
    q, k, v = qkv.unbind(dim=2)
    o = ex.attention(q, k, v, causal=True)
    assert_close(o, ex.attention_ref(q, k, v, True, 1 / math.sqrt(16)), 1e-4, 1e-4)


@pytest.mark.parametrize("op", ex.REDUCE_OPS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("M,N", [(13, 29), (1, 40), (33, 1)])
def test_reduce(op: str, axis: int, M: int, N: int) -> None:
    x = _randn(M, N, seed=M * N)
    assert_close(ex.reduce2d(x, op, axis), ex.reduce2d_ref(x, op, axis), 1e-5, 1e-5)


@pytest.mark.parametrize("op", ex.REDUCE_OPS)
def test_reduce_transposed_input(op: str) -> None:
    x = _randn(30, 21, seed=9).t()
    assert_close(ex.reduce2d(x, op, 1), ex.reduce2d_ref(x, op, 1), 1e-5, 1e-5)


@pytest.mark.parametrize("grid", [(1,), (6,), (3, 4), (1, 5), (2, 3, 4), (1, 1, 3)], ids=str)
def test_grid_ids(grid: tuple[int, ...]) -> None:
    assert torch.equal(ex.grid_ids(grid), ex.grid_ids_ref(grid))


@pytest.mark.parametrize("rows,cols", [(1, 1), (4, 9)])
def test_scalar_load_store(rows: int, cols: int) -> None:
    x, scale = _randn(rows, cols), torch.tensor([-2.5])
    assert_close(ex.scaled_row_sum(x, scale), x.sum(dim=1) * scale, 1e-5, 1e-5)


def test_int64_offsets() -> None:
    x = ex.big_stride_view(0, n_rows=6, n_cols=200, row_stride=(3 << 20) + 5)
    assert x.stride(0) > 2**31  # Triton passes this argument as i64
    assert_close(ex.strided_rows(x, block=64), x * 2 + 1, 0, 0)


# ----------------------------------------------------------------------------------------------
# Demo


def test_demo_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton_nmp import demo

    few = [ex.CASES_BY_NAME["vector_add"], ex.CASES_BY_NAME["grid-2d"]]
    monkeypatch.setattr(demo, "CASES", few)
    buf = io.StringIO()
    assert demo.run_demo("small", out=buf)
    text = buf.getvalue()
    assert "vector_add" in text and "grid-2d" in text and "yes" in text and "compile+run ms" in text
    assert "sim time us" in text and "% roofline" in text
    # ends with a model compiled with torch.compile(backend="nmp") and its per-Inductor-kernel profile (layer
    # norms are persistent reductions, "triton_unk_" when nmp fixes their block sizes at compile time)
    assert 'backend="nmp"' in text and "triton_tem_" in text and ("triton_per_" in text or "triton_unk_" in text)
    assert "logits match eager: yes" in text and "host fallbacks: none" in text


def test_demo_reports_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton_nmp import demo

    base = ex.CASES_BY_NAME["vector_add"]
    wrong = Case("wrong", base.shape, base.make_inputs, base.run, lambda i: i["x"] - i["y"], 0, 0, base.sizes)

    def boom(inputs: ex.Inputs) -> torch.Tensor:
        raise RuntimeError("kernel exploded")

    broken = Case("broken", base.shape, base.make_inputs, boom, base.reference, 0, 0, base.sizes)
    monkeypatch.setattr(demo, "CASES", [base, wrong, broken])
    buf = io.StringIO()
    assert not demo.run_demo("small", out=buf, model=False)
    text = buf.getvalue()
    assert "NO (max err" in text and "kernel exploded" in text and "failed: wrong, broken" in text
