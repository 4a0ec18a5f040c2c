"""The one-row matmul template (`triton_nmp.inductor.gemv`): numerics against torch at odd sizes and every float
dtype, with Inductor's epilogues and prologues fused into it, its cost model against the mm template's, and its
selection for GPT-2's decode projections."""

from __future__ import annotations

import pytest
import torch

import triton_nmp
from triton_nmp.inductor import choices, gemm
from triton_nmp.triton_name import cpu_entry_registered

pytestmark = pytest.mark.skipif(
    not cpu_entry_registered(),
    reason="triton-nmp's Triton entry point 'cpu' is not registered: reinstall (pip install -e .) to test this")

FRESH = {"fx_graph_cache": False, "autotune_local_cache": False}
TOL = {torch.float16: 2e-2, torch.bfloat16: 6e-2, torch.float32: 1e-4}
_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def _best_gemv(n: int, k: int, dtype: torch.dtype) -> gemm.GemvTile:
    spec, size = triton_nmp.active_target(), dtype.itemsize
    return min(gemm.gemv_candidates(n, k, size, size, spec),
               key=lambda t: (gemm.estimate_gemv(t, n, k, size, size, _NAMES[dtype], spec), t))


def _compile_one(fn, *args, pin=None):
    """`fn(*args)` compiled for nmp (one matmul), its selection and launches."""
    before = len(choices.gemm_selections())
    with torch.no_grad():
        if pin is None:
            out = torch.compile(fn, backend="nmp", options=FRESH)(*args)
        else:
            with choices.pinned_tile(pin):
                out = torch.compile(fn, backend="nmp", options=FRESH)(*args)
        with triton_nmp.profile() as prof:  # second call: the compiled graph's launches
            torch.compile(fn, backend="nmp", options=FRESH)(*args)
    sel = choices.gemm_selections()[before:]
    assert len(sel) == 1, sel
    return out, sel[0], prof


@pytest.mark.parametrize("n,k,dtype,epilogue", [
    (50257, 64, torch.float16, "none"),       # GPT-2's vocabulary: 786 columns per PU, the last PU's 711
    (2304, 768, torch.float16, "bias_gelu"),  # GPT-2's QKV with the MLP's epilogue
    (1000, 100, torch.bfloat16, "bias"),      # K not a multiple of any BLOCK_K: masked K steps
    (1000, 96, torch.float32, "bias_gelu_residual"),
    (777, 64, torch.float32, "row_major"),    # B stored [K, N]: the [1, K] x [K, BLOCK_N] form
])
def test_gemv_template_matches_torch(fresh_inductor, n, k, dtype, epilogue):
    torch.manual_seed(0)
    x = torch.randn(1, k, dtype=dtype)
    w = (torch.randn(n, k) * k ** -0.5).to(dtype)
    b = torch.randn(n, dtype=dtype)
    r = torch.randn(1, n, dtype=dtype)
    fns = {
        "none": (lambda x, w: x @ w.t(), (x, w)),
        "bias": (lambda x, w, b: torch.addmm(b, x, w.t()), (x, w, b)),
        "bias_gelu": (lambda x, w, b: torch.nn.functional.gelu(torch.addmm(b, x, w.t())), (x, w, b)),
        "bias_gelu_residual": (lambda x, w, b, r: torch.nn.functional.gelu(torch.addmm(b, x, w.t())) + r,
                               (x, w, b, r)),
        "row_major": (lambda x, w: x @ w, (x, w.t().contiguous())),
    }
    fn, args = fns[epilogue]
    out, sel, prof = _compile_one(fn, *args, pin=_best_gemv(n, k, dtype))
    assert sel.kept_templates == ["nmp_gemv"] and sel.m == 1
    want = fn(*(a.double() for a in args))
    torch.testing.assert_close(out.double(), want, atol=TOL[dtype], rtol=TOL[dtype])
    assert out.dtype == dtype
    share = gemm.gemv_share(n, triton_nmp.active_target())
    assert {r.grid for r in prof.launches if r.kernel.startswith("triton_tem_")} == {(-(-n // share), 1, 1)}


@pytest.mark.parametrize("n,k", [(2304, 768), (768, 3072)])  # GPT-2's QKV and MLP-down
def test_gpt2_decode_projection_takes_the_one_row_template_on_every_pu(fresh_inductor, n, k):
    """Fails if the one-row template is not chosen for a GPT-2-shaped decode GEMV (a Linear on one token)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n).half()
    x = torch.randn(1, 1, k, dtype=torch.float16)
    out, sel, prof = _compile_one(lin, x)
    torch.testing.assert_close(out.float(), lin(x).float(), atol=2e-2, rtol=2e-2)
    assert (sel.op, sel.m, sel.n, sel.k) == ("addmm", 1, n, k)
    assert sel.kept_templates == ["nmp_gemv"], sel
    assert [r.grid for r in prof.launches if r.kernel.startswith("triton_tem_")] == [(64, 1, 1)]


def test_layer_norm_prologue_stays_fused_into_the_one_row_template(fresh_inductor, monkeypatch):
    """Without the norm GEMV rewrite (tests/test_norm_gemv.py), the normalisation still fuses as a prologue."""
    monkeypatch.setenv("TRITON_NMP_NORM_GEMV", "0")
    torch.manual_seed(0)
    ln, lin = torch.nn.LayerNorm(256).half(), torch.nn.Linear(256, 512).half()
    x = torch.randn(1, 1, 256, dtype=torch.float16)
    out, sel, prof = _compile_one(lambda t: torch.nn.functional.gelu(lin(ln(t))), x)
    torch.testing.assert_close(out.float(), torch.nn.functional.gelu(lin(ln(x))).float(), atol=2e-2, rtol=2e-2)
    assert sel.kept_templates == ["nmp_gemv"]
    templates = [r.kernel for r in prof.launches if r.kernel.startswith("triton_tem_")]
    assert len(templates) == 1 and "layer_norm" in templates[0] and "gelu" in templates[0], templates


def test_gemv_candidates_fit_the_scratchpad_and_beat_the_mm_template_on_decode_shapes():
    spec = triton_nmp.active_target()
    for n, k in ((2304, 768), (3072, 768), (768, 3072), (768, 768), (50257, 768)):
        tiles = gemm.gemv_candidates(n, k, 2, 2, spec)
        assert tiles and all(gemm.gemv_spm_bytes(t, 2, 2) <= spec.spm_bytes for t in tiles)
        assert {t.share for t in tiles} == {-(-n // spec.num_pus)}
        gemv = min(gemm.estimate_gemv(t, n, k, 2, 2, "fp16", spec) for t in tiles)
        mm = min(gemm.estimate(t, 1, n, k, 1, 2, 2, "fp16", spec, True) for t in gemm.candidates(1, n, k, 2, 2, spec))
        assert gemv < mm, (n, k, gemv, mm)
        floor = n * k * 2 / (spec.num_pus * spec.bank_bytes_per_cycle)  # cycles of the weight at local bandwidth
        device = gemv - spec.launch_overhead_us * 1e-6
        assert spec.cycles_to_seconds(floor) < device < spec.cycles_to_seconds(2.5 * floor)
    # with the weight interleaved (no "auto" placement) the model charges remote reads: slower, same ranking terms
    t = gemm.gemv_candidates(2304, 768, 2, 2, spec)[0]
    assert gemm.estimate_gemv(t, 2304, 768, 2, 2, "fp16", spec, auto_placement=False) > \
        gemm.estimate_gemv(t, 2304, 768, 2, 2, "fp16", spec)


def test_more_than_one_row_or_a_dynamic_row_count_keeps_the_mm_template(fresh_inductor):
    """The template computes one row: two rows, or a row count only known at run time, never get it."""
    torch.manual_seed(0)
    w = torch.randn(300, 64)
    for rows, dynamic in ((2, False), (3, True)):
        x = torch.randn(rows, 64)
        before = len(choices.gemm_selections())
        with torch.no_grad():
            out = torch.compile(lambda x, w: x @ w.t(), backend="nmp", options=FRESH, dynamic=dynamic)(x, w)
        torch.testing.assert_close(out, x @ w.t(), atol=1e-4, rtol=1e-4)
        sel = choices.gemm_selections()[before:]
        assert len(sel) == 1 and sel[0].kept_templates == ["mm"], sel
        assert sel[0].legal == len(gemm.candidates(sel[0].m, 300, 64, 4, 4, triton_nmp.active_target()))
