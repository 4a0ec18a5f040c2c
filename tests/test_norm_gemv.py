"""A one-row `linear(layer_norm(x))` as one GEMV with the norm's statistics inside (`triton_nmp.inductor.norm_gemv`):
numerics against eager for every float dtype, odd K, with and without the linear's bias, a fused GELU epilogue,
the LM head's `@ w.t()` form; what is left alone (several rows, the norm used elsewhere); and in GPT-2's decode
step no layer-norm kernel is left."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import triton_nmp
from triton_nmp.inductor import choices, norm_gemv
from triton_nmp.triton_name import cpu_entry_registered

pytestmark = pytest.mark.skipif(
    not cpu_entry_registered(),
    reason="triton-nmp's Triton entry point 'cpu' is not registered: reinstall (pip install -e .) to test this")

FRESH = {"fx_graph_cache": False, "autotune_local_cache": False}
TOL = {torch.float16: 2e-2, torch.bfloat16: 6e-2, torch.float32: 1e-4}


def _compiled(fn, *args):
    """(output, rewrites, selections, launches of a second call) of `fn(*args)` compiled for nmp."""
    rewrites, selections = len(norm_gemv.rewrites()), len(choices.gemm_selections())
    with torch.no_grad():
        compiled = torch.compile(fn, backend="nmp", options=FRESH)
        out = compiled(*args)
        with triton_nmp.profile() as prof:
            compiled(*args)
    return out, norm_gemv.rewrites()[rewrites:], choices.gemm_selections()[selections:], prof.launches


@pytest.mark.parametrize("k,n,dtype,bias,gelu", [
    (256, 512, torch.float16, True, True),     # GPT-2's MLP-up form: GELU fused after the bias
    (100, 300, torch.bfloat16, True, False),   # K not a power of two: the row is padded and masked
    (96, 1000, torch.float32, False, False),   # no linear bias
])
def test_layer_norm_linear_on_one_row_is_one_kernel_matching_eager(fresh_inductor, k, n, dtype, bias, gelu):
    torch.manual_seed(0)
    ln, lin = torch.nn.LayerNorm(k).to(dtype), torch.nn.Linear(k, n, bias=bias).to(dtype)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)

    def fn(t):
        y = lin(ln(t))
        return F.gelu(y, approximate="tanh") if gelu else y

    x = torch.randn(1, 1, k, dtype=dtype) * 3 + 1  # a mean and a scale the norm must remove
    out, rewrites, sel, launches = _compiled(fn, x)
    assert len(rewrites) == 1 and f"@ [{k}, {n}]" in rewrites[0], rewrites
    assert [s.kept_templates for s in sel] == [["nmp_layer_norm_gemv" + ("_bias" if bias else "")]], sel
    assert len(launches) == 1 and launches[0].grid[0] > 1, [r.kernel for r in launches]  # no norm kernel
    if gelu:
        assert "gelu" in launches[0].kernel
    with torch.no_grad():
        want = fn(x)
    assert out.dtype == dtype and out.shape == (1, 1, n)
    torch.testing.assert_close(out.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_lm_head_form_and_a_residual_stream_read_by_two_norm_gemvs(fresh_inductor):
    """`ln(x) @ w.t()` (GPT-2's tied LM head) is rewritten too; the residual `x + proj(h)` both norm GEMVs read is
    one buffer (the first GEMV's epilogue), not recomputed."""
    torch.manual_seed(0)
    k = 128
    ln1, ln2 = torch.nn.LayerNorm(k).half(), torch.nn.LayerNorm(k).half()
    proj = torch.nn.Linear(k, k).half()
    w = (torch.randn(640, k) * k ** -0.5).half()

    def fn(x):
        x = x + proj(ln1(x))
        return ln2(x) @ w.t()

    x = torch.randn(1, 1, k, dtype=torch.float16)
    out, rewrites, _, launches = _compiled(fn, x)
    assert len(rewrites) == 2, rewrites
    names = [r.kernel for r in launches]
    assert len(names) == 2 and all(k.startswith("triton_tem_") for k in names), names
    with torch.no_grad():
        torch.testing.assert_close(out.float(), fn(x).float(), atol=2e-2, rtol=2e-2)


def test_several_rows_a_norm_used_elsewhere_or_autograd_are_left_to_inductor(fresh_inductor):
    torch.manual_seed(0)
    ln, lin = torch.nn.LayerNorm(64), torch.nn.Linear(64, 96)

    def shared(t):
        h = ln(t)
        return lin(h) + h.sum(-1, keepdim=True)  # the norm has another user

    wide_ln, wide_lin = torch.nn.LayerNorm(5000), torch.nn.Linear(5000, 16)  # no one-step tile for K = 5000
    cases = [(lambda t: lin(ln(t)), torch.randn(1, 2, 64)), (shared, torch.randn(1, 1, 64)),  # two rows (prefill)
             (lambda t: wide_lin(wide_ln(t)), torch.randn(1, 1, 5000))]
    for fn, x in cases:
        out, rewrites, _, _ = _compiled(fn, x)
        assert rewrites == []
        with torch.no_grad():
            torch.testing.assert_close(out, fn(x), atol=1e-4, rtol=1e-4)
    before = len(norm_gemv.rewrites())
    x = torch.randn(1, 1, 64)
    torch.compile(lambda t: lin(ln(t)), backend="nmp", options=FRESH)(x).sum().backward()  # training: untouched
    assert len(norm_gemv.rewrites()) == before and lin.weight.grad is not None


def test_gpt2_decode_step_has_no_layer_norm_kernel_and_matches_eager(fresh_inductor):
    from triton_nmp.llm import build

    model = build("gpt2-tiny", torch.float16, std=0.3)
    compiled = torch.compile(model, backend="nmp", options=FRESH)
    ids = torch.randint(0, model.cfg.vocab, (1, 8), generator=torch.Generator().manual_seed(0))
    tok, pos = torch.tensor([[7]]), torch.tensor([8])
    with torch.no_grad():
        compiled(ids)
        ref = build("gpt2-tiny", torch.float16, std=0.3)
        ref(ids)
        with triton_nmp.profile() as prof:
            out = compiled(tok, pos)
        want = ref(tok, pos)
    names = [r.kernel for r in prof.launches]
    assert not any("native_layer_norm" in k or k.startswith("triton_per_") for k in names), names
    # per layer qkv, attention out, MLP up and down, then the LM head: every norm inside one of them
    assert sum(k.startswith("triton_tem_") for k in names) == 4 * model.cfg.layers + 1, names
    torch.testing.assert_close(out, want, atol=3e-2, rtol=3e-2)
    assert torch.equal(out.argmax(-1), want.argmax(-1))


@pytest.mark.parametrize("k,n,dtype", [(256, 384, torch.float16), (100, 200, torch.float32)])
def test_rms_norm_linear_on_one_row_is_one_kernel_matching_eager(fresh_inductor, k, n, dtype):
    """Llama's RMSNorm (as `triton_nmp.llm.models` writes it) before q/k/v-style linears: one kernel each."""
    from triton_nmp.llm.models import _RMSNorm

    torch.manual_seed(0)
    norm = _RMSNorm(k, 1e-6).to(dtype)
    q, v = torch.nn.Linear(k, n, bias=False).to(dtype), torch.nn.Linear(k, n // 2, bias=False).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)

    def fn(t):
        h = norm(t)
        return q(h), v(h)

    x = torch.randn(1, 1, k, dtype=dtype) * 3
    (oq, ov), rewrites, sel, launches = _compiled(fn, x)
    assert len(rewrites) == 2, rewrites
    assert [s.kept_templates for s in sel] == [["nmp_rms_norm_gemv"]] * 2, sel
    assert len(launches) == 2 and all(r.kernel.startswith("triton_tem_") for r in launches), launches
    with torch.no_grad():
        wq, wv = fn(x)
    torch.testing.assert_close(oq.float(), wq.float(), atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(ov.float(), wv.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("k,n,dtype,bias,block_k,rms", [
    (512, 512, torch.float16, True, 128, False),   # four K steps of the normalised row, the bias in the prologue
    (300, 300, torch.bfloat16, True, 128, False),  # K = 2 x 128 + 44: the last step masked, odd share (5 columns)
    (384, 1000, torch.float32, False, 128, False),  # no linear bias, 16 columns a program
    (512, 384, torch.float16, False, 256, True),   # RMSNorm
])
def test_norm_gemv_k_steps_of_the_row_match_eager(fresh_inductor, k, n, dtype, bias, block_k, rms):
    """The norm GEMV's K loop over slices of the normalised row (BLOCK_K below K rounded up, one column block of
    the whole share: `gemm.norm_gemv_tiles`), pinned, against eager."""
    from triton_nmp.inductor import gemm
    from triton_nmp.llm.models import _RMSNorm
    from triton_nmp.target import active_target

    torch.manual_seed(0)
    norm = _RMSNorm(k, 1e-6).to(dtype) if rms else torch.nn.LayerNorm(k).to(dtype)
    lin = torch.nn.Linear(k, n, bias=bias).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        if not rms:
            norm.bias.uniform_(-0.5, 0.5)
    itemsize = dtype.itemsize
    tiles = gemm.norm_gemv_tiles(n, k, itemsize, itemsize, active_target())
    tile = next(t for t in tiles if t.block_k == block_k and t.num_stages == 2)
    assert tile.block_n >= tile.share and tile.block_k < 1 << (k - 1).bit_length()

    def fn(t):
        return lin(norm(t))

    x = torch.randn(1, 1, k, dtype=dtype) * 3 + 1
    with choices.pinned_tile(tile):
        out, rewrites, sel, launches = _compiled(fn, x)
    assert len(rewrites) == 1 and len(launches) == 1, (rewrites, launches)
    assert sel[-1].kept == [dict(BLOCK_N=tile.block_n, BLOCK_K=block_k, num_stages=2, SHARE=tile.share)], sel
    with torch.no_grad():
        want = fn(x)
    torch.testing.assert_close(out.float(), want.float(), atol=TOL[dtype], rtol=TOL[dtype])


def test_norm_gemv_model_picks_one_block_of_the_share_over_k_steps():
    """GPT-2's QKV and MLP-up: the model's tile holds a program's whole share in one block (one bias load, one
    store) and steps over K in the grid-pipelined half of the scratchpad."""
    from triton_nmp.inductor import gemm
    from triton_nmp.target import active_target

    spec = active_target()
    for n, k in ((2304, 768), (3072, 768)):
        tiles = gemm.norm_gemv_tiles(n, k, 2, 2, spec)
        best = min(tiles, key=lambda t: gemm.estimate_norm_gemv(t, n, k, 2, 2, "fp16", spec))
        assert best.block_n >= best.share and best.block_k == 256 and best.num_stages == 2, best
    assert gemm.norm_gemv_tiles(50257, 768, 2, 2, spec) == []  # the LM head: 1024-column blocks, short K steps
