"""Decode attention (one query row over a static KV cache) compiled as the split-KV kernel pair of
`triton_nmp.inductor.decode_attention`, against eager torch; what the pass leaves to Inductor."""

from __future__ import annotations

import math

import pytest
import torch

import triton_nmp
from triton_nmp.inductor import decode_attention
from triton_nmp.inductor.decode_attention import DecodeAttentionPass, chunk_rows, combine_slices, rewrites

T = 256


def _attend(q, k, v, mask, scale_first=True):
    """The attention of triton_nmp/llm/models.py: two matmuls and a softmax, grouped KV heads repeated."""
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    s = q @ k.transpose(-1, -2)
    s = (s * (1.0 / math.sqrt(q.shape[-1]))).float() if scale_first else s.float() * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s + mask
    return torch.softmax(s, dim=-1).to(v.dtype) @ v


def _decode(q, kc, vc, pos):
    keep = torch.arange(kc.shape[2])[None, :] <= pos[:, None]
    return _attend(q, kc, vc, torch.zeros(keep.shape).masked_fill(~keep, float("-inf")))


def _inputs(heads, kv_heads, dtype, t=1, d=64):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, heads, t, d, generator=g).to(dtype), torch.randn(1, kv_heads, T, d, generator=g).to(dtype),
            torch.randn(1, kv_heads, T, d, generator=g).to(dtype))


def _compiled(f, *args):
    before = len(rewrites())
    with triton_nmp.profile() as prof:
        out = torch.compile(f, backend="nmp")(*args)
    return out, rewrites()[before:], [r.kernel for r in prof.launches]


@pytest.mark.parametrize("heads,kv_heads", [(12, 12), (16, 4)])
def test_fp16_decode_attention_is_one_kernel_pair_and_matches_eager(fresh_inductor, heads, kv_heads):
    q, kc, vc = _inputs(heads, kv_heads, torch.float16)
    pos = torch.tensor([100])
    out, done, kernels = _compiled(_decode, q, kc, vc, pos)
    rows = chunk_rows(kv_heads, T, 64, 64, 16, 100)
    causal = ", causal mask from the position, q in one load" if heads == kv_heads else ""  # `_partial_runs` only
    assert done == [f"decode attention: {heads} heads (rep {heads // kv_heads}), {T} positions, head dim 64, "
                    f"{T // rows} chunks of {rows} rows{causal}"]
    assert kernels.count("_partial_runs" if heads == kv_heads else "_partial") == 1  # one query row: a run per PU
    assert (len([k for k in kernels if "masked_fill" in k]) == 0) == (heads == kv_heads), kernels
    assert kernels.count("_combine") == 1
    assert not any("bmm" in k or "softmax" in k for k in kernels)  # Inductor's reductions are gone
    torch.testing.assert_close(out.float(), _decode(q, kc, vc, pos).float(), atol=2e-3, rtol=2e-3)


def test_fp32_scaled_after_the_cast_with_a_mask_per_head(fresh_inductor):
    q, kc, vc = _inputs(4, 4, torch.float32, d=32)
    mask = torch.randn(1, 4, 1, T)  # one row per head (without a mask Inductor itself makes fp32 attention SDPA)

    def f(q, k, v, mask):
        return _attend(q, k, v, mask, scale_first=False)

    out, done, _ = _compiled(f, q, kc, vc, mask)
    assert len(done) == 1
    torch.testing.assert_close(out, f(q, kc, vc, mask), atol=1e-5, rtol=1e-5)


def test_prefill_and_returned_probabilities_are_left_to_inductor(fresh_inductor):
    q, kc, vc = _inputs(4, 4, torch.float16, t=8)  # M = 8: prefill
    out, done, _ = _compiled(lambda q, k, v: _attend(q, k, v, None), q, kc, vc)
    assert done == []
    torch.testing.assert_close(out.float(), _attend(q, kc, vc, None).float(), atol=2e-3, rtol=2e-3)

    def with_weights(q, k, v):  # the probabilities have a second user
        p = torch.softmax((q @ k.transpose(-1, -2)).float(), dim=-1)
        return p.to(v.dtype) @ v, p

    q1 = q[:, :, :1].contiguous()
    (o, p), done, _ = _compiled(with_weights, q1, kc, vc)
    assert done == []
    torch.testing.assert_close(o.float(), with_weights(q1, kc, vc)[0].float(), atol=2e-3, rtol=2e-3)


def test_switch_off_is_in_the_cache_key(monkeypatch):
    on = DecodeAttentionPass().uuid()
    monkeypatch.setenv("TRITON_NMP_DECODE_ATTENTION", "0")
    assert not decode_attention.enabled() and DecodeAttentionPass().uuid() != on


def test_chunk_rows_fill_every_pu_in_whole_waves():
    assert chunk_rows(12, 1024, 64, 64, 16, 100) == 64  # GPT-2: 192 programs, three per PU
    assert chunk_rows(4, 1024, 128, 64, 16, 100) * 128 <= 16384
    assert 4 * 1024 // chunk_rows(4, 1024, 128, 64, 16, 100) >= 64  # Llama's 4 KV heads still fill 64 PUs


def test_combine_slices_spread_a_head_over_free_pus():
    assert combine_slices(12, 64, 64) == 16  # GPT-2: 12 heads x 4 slices of 16 columns on 64 PUs
    assert combine_slices(16, 128, 64) == 32  # Llama-shaped: 16 heads x 4 slices
    assert combine_slices(64, 64, 64) == 64 and combine_slices(8, 16, 64) == 16  # no PU free; no slice < 16


def test_heads_repeated_in_another_order_are_not_read_as_grouped(fresh_inductor):
    """`repeat` tiles the KV heads (head h reads KV head h % kv_heads), not `repeat_interleave`'s h // rep: the
    replayed view chain must not be taken for grouped heads: the kernels read the materialised repeat (and run
    without a mask)."""
    q, kc, vc = _inputs(8, 2, torch.float16)

    def tiled(q, k, v):
        k, v = k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1)
        return torch.softmax((q @ k.transpose(-1, -2)).float(), dim=-1).to(v.dtype) @ v

    out, done, _ = _compiled(tiled, q, kc, vc)
    assert len(done) == 1 and "8 heads (rep 1)" in done[0]
    torch.testing.assert_close(out.float(), tiled(q, kc, vc).float(), atol=2e-3, rtol=2e-3)


def test_rows_past_the_position_are_skipped_at_every_position(fresh_inductor):
    """The mask leaves positions [0, pos]: K and V rows after pos are not loaded (the launch moves one row of K and
    V per head more per position), and the result equals eager at the first position, both sides of a chunk
    boundary and the last position."""
    q, kc, vc = _inputs(12, 12, torch.float16)
    f = torch.compile(_decode, backend="nmp")
    rows = chunk_rows(12, T, 64, 64, 16, 100)
    moved = {}
    for pos in (0, rows - 1, rows, T - 1):
        p = torch.tensor([pos])
        with triton_nmp.profile() as prof:
            out = f(q, kc, vc, p)
        torch.testing.assert_close(out.float(), _decode(q, kc, vc, p).float(), atol=2e-3, rtol=2e-3)
        part = [r for r in prof.launches if r.kernel == "_partial_runs"]
        assert len(part) == 1 and part[0].mapping.startswith("auto")  # mapped by the footprint's bound
        moved[pos] = part[0].bytes_local + part[0].bytes_remote
        comb = [r for r in prof.launches if r.kernel == "_combine"]
        assert len(comb) == 1 and comb[0].grid == (12, 64 // combine_slices(12, 64, 64), 1)
        assert comb[0].mapping.startswith("auto")  # an exact footprint (see _combine)
    kv_row = 2 * 12 * 64 * 2  # K and V of one position of every head
    assert moved[rows - 1] - moved[0] == (rows - 1) * kv_row  # one chunk live: exactly the rows up to pos
    assert moved[rows] - moved[rows - 1] >= kv_row
    assert (T - 1) * kv_row <= moved[T - 1] - moved[0] < T * kv_row + 12 * (T // rows) * 1024


def test_grouped_heads_skip_masked_chunks(fresh_inductor):
    q, kc, vc = _inputs(16, 4, torch.float16)
    f = torch.compile(_decode, backend="nmp")
    for pos in (0, 130):
        p = torch.tensor([pos])
        torch.testing.assert_close(f(q, kc, vc, p).float(), _decode(q, kc, vc, p).float(), atol=2e-3, rtol=2e-3)


def test_one_mask_kernel_for_every_layer(fresh_inductor):
    """Inductor computes an unrealized pointwise input of a user kernel into a new buffer per call: the pass
    fixes the mask's strides once, so two layers' attentions read one mask computed by one kernel (a mask that is
    not `arange <= pos`: here the positions from `lo` on)."""
    q, kc, vc = _inputs(12, 12, torch.float16)

    def two_layers(q, k, v, lo):
        keep = torch.arange(k.shape[2])[None, :] >= lo[:, None]
        mask = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
        return _attend(_attend(q, k, v, mask), k, v, mask)

    lo = torch.tensor([70])
    out, done, kernels = _compiled(two_layers, q, kc, vc, lo)
    assert len(done) == 2 and kernels.count("_partial_runs") == 2 and not any("causal" in r for r in done)
    assert len([k for k in kernels if "masked_fill" in k]) == 1, kernels
    torch.testing.assert_close(out.float(), two_layers(q, kc, vc, lo).float(), atol=2e-3, rtol=2e-3)


def test_a_causal_mask_is_taken_from_the_position_at_every_position(fresh_inductor):
    """`zeros.masked_fill(~(arange(T) <= pos), -inf)` of a graph input `pos` is not computed nor read: `_partial_runs`
    bounds its rows by pos itself (no mask kernel, no mask bytes moved) and equals eager at the first position,
    both sides of a chunk boundary, the last one, and past both ends (no position left: NaN as eager; all left).
    Masks it must not take for causal (the same shape from another position, or `<` instead of `<=`) are read."""
    q, kc, vc = _inputs(12, 12, torch.float16)
    f = torch.compile(_decode, backend="nmp")
    rows = chunk_rows(12, T, 64, 64, 16, 100)
    before = len(rewrites())
    for pos in (0, rows - 1, rows, T - 1, T + 5, -1):
        p = torch.tensor([pos])
        with triton_nmp.profile() as prof:
            out = f(q, kc, vc, p)
        torch.testing.assert_close(out.float(), _decode(q, kc, vc, p).float(), atol=2e-3, rtol=2e-3, equal_nan=True)
        assert out.isnan().all() == (pos < 0)
        kernels = [r.kernel for r in prof.launches]
        assert kernels == ["_partial_runs", "_combine"], kernels
    assert rewrites()[before:] and all("causal mask from the position" in r for r in rewrites()[before:])

    def strict(q, k, v, pos):  # positions before pos only: not the causal pattern
        keep = torch.arange(k.shape[2])[None, :] < pos[:, None]
        return _attend(q, k, v, torch.zeros(keep.shape).masked_fill(~keep, float("-inf")))

    def shifted(q, k, v, pos):  # a computed position: read as a mask
        return _decode(q, k, v, pos + 1)

    for fn in (strict, shifted):
        p = torch.tensor([rows])
        out, done, kernels = _compiled(fn, q, kc, vc, p)
        assert len(done) == 1 and "causal" not in done[0] and any("masked_fill" in k or "lt" in k for k in kernels)
        torch.testing.assert_close(out.float(), fn(q, kc, vc, p).float(), atol=2e-3, rtol=2e-3)


def _write_and_attend(q, kc, vc, kn, vn, pos):
    """A decode step's cache write then attention, as triton_nmp/llm/models.py does it (caches mutated in place)."""
    kc[:, :, pos] = kn
    vc[:, :, pos] = vn
    keep = torch.arange(kc.shape[2])[None, :] <= torch.where(pos < 0, pos + kc.shape[2], pos)[:, None]
    return _attend(q, kc, vc, torch.zeros(keep.shape).masked_fill(~keep, float("-inf")))


@pytest.mark.parametrize("heads,kv_heads", [(12, 12), (16, 4)])
def test_cache_writes_are_folded_into_the_attention_kernel(fresh_inductor, heads, kv_heads):
    """`cache[:, :, pos] = new` for K and V runs inside `_partial` (no index_put kernel), in place; the caches and
    the result equal eager's at a chunk's first row, inside a chunk and at -1 (the last row)."""
    q, kc, vc = _inputs(heads, kv_heads, torch.float16)
    g = torch.Generator().manual_seed(1)
    kn, vn = (torch.randn(1, kv_heads, 1, 64, generator=g).to(torch.float16) for _ in range(2))
    f = torch.compile(_write_and_attend, backend="nmp")
    rows = chunk_rows(kv_heads, T, 64, 64, 16, 100)
    for pos in (rows, 77, -1):
        p = torch.tensor([pos])
        kc1, vc1, kc2, vc2 = kc.clone(), vc.clone(), kc.clone(), vc.clone()
        before = len(rewrites())
        with triton_nmp.profile() as prof:
            out = f(q, kc1, vc1, kn, vn, p)
        want = _write_and_attend(q, kc2, vc2, kn, vn, p)
        torch.testing.assert_close(out.float(), want.float(), atol=2e-3, rtol=2e-3)
        assert torch.equal(kc1, kc2) and torch.equal(vc1, vc2)
        kernels = [r.kernel for r in prof.launches]
        assert any(k.startswith("_partial") for k in kernels) and not any("index_put" in k for k in kernels), kernels
        if pos == rows:
            assert rewrites()[before:] and rewrites()[-1].endswith("K/V cache writes folded in")


@pytest.mark.parametrize("heads", [24, 48])
def test_runs_of_chunks_across_heads_match_eager(fresh_inductor, heads):
    """`_partial_runs` with three chunks per PU, runs crossing a head's end (24 heads: 8 chunks of 32 rows per head;
    48: 4 of 64), so that a run writes pos's row in its second head; the result and the written caches equal
    eager's at the first row, both sides of a chunk boundary and the last row."""
    q, kc, vc = _inputs(heads, heads, torch.float16)
    g = torch.Generator().manual_seed(1)
    kn, vn = (torch.randn(1, heads, 1, 64, generator=g).to(torch.float16) for _ in range(2))
    rows = chunk_rows(heads, T, 64, 64, 16, 100)
    assert -(-(T // rows) * heads // 64) == 3
    f, attend = torch.compile(_write_and_attend, backend="nmp"), torch.compile(_decode, backend="nmp")
    for pos in (0, rows - 1, rows, T - 1):
        p = torch.tensor([pos])
        kc1, vc1, kc2, vc2 = kc.clone(), vc.clone(), kc.clone(), vc.clone()
        with triton_nmp.profile() as prof:
            out = f(q, kc1, vc1, kn, vn, p)
        torch.testing.assert_close(out.float(), _write_and_attend(q, kc2, vc2, kn, vn, p).float(), atol=2e-3,
                                   rtol=2e-3)
        assert torch.equal(kc1, kc2) and torch.equal(vc1, vc2)
        assert [r.grid for r in prof.launches if r.kernel == "_partial_runs"] == [(64, 1, 1)]
        torch.testing.assert_close(attend(q, kc, vc, p).float(), _decode(q, kc, vc, p).float(), atol=2e-3,
                                   rtol=2e-3)


def test_a_position_outside_the_cache_is_an_error(fresh_inductor):
    q, kc, vc = _inputs(12, 12, torch.float16)
    kn = vn = torch.zeros(1, 12, 1, 64, dtype=torch.float16)
    f = torch.compile(_write_and_attend, backend="nmp")
    f(q, kc.clone(), vc.clone(), kn, vn, torch.tensor([3]))
    with pytest.raises(triton_nmp.errors.NMPDeviceAssertError,
                       match=r"kernel '_partial(_runs)?': device assertion failed \(index out of bounds: pos outside"):
        f(q, kc.clone(), vc.clone(), kn, vn, torch.tensor([T]))


@pytest.mark.parametrize("heads", [12, 24])
def test_q_and_new_rows_of_one_projection_are_loaded_together(fresh_inductor, heads):
    """q, k and v split from one projection (GPT-2's c_attn): `_partial_runs` reads a run's q rows and the new K
    and V rows in one load from the projection's output (both heads of a run crossing a head's end); the result
    and the written caches equal eager's at the first row, both sides of a chunk boundary and the last row."""
    d = 64
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 1, 32, generator=g).to(torch.float16)
    w = (torch.randn(32, 3 * heads * d, generator=g) / 8).to(torch.float16)
    kc = torch.randn(1, heads, T, d, generator=g).to(torch.float16)
    vc = torch.randn(1, heads, T, d, generator=g).to(torch.float16)

    def step(x, w, kc, vc, pos):
        q, k, v = (x @ w).split(heads * d, dim=-1)
        q, k, v = (z.view(1, 1, heads, d).transpose(1, 2) for z in (q, k, v))
        kc[:, :, pos] = k
        vc[:, :, pos] = v
        return _decode(q, kc, vc, pos)

    f = torch.compile(step, backend="nmp")
    rows = chunk_rows(heads, T, d, 64, 16, 100)
    before = len(rewrites())
    for pos in (0, rows - 1, rows, T - 1):
        p = torch.tensor([pos])
        kc1, vc1, kc2, vc2 = kc.clone(), vc.clone(), kc.clone(), vc.clone()
        out = f(x, w, kc1, vc1, p)
        torch.testing.assert_close(out.float(), step(x, w, kc2, vc2, p).float(), atol=2e-3, rtol=2e-3)
        # the new rows are the compiled projection's (its rounding, not eager matmul's); every other row untouched
        torch.testing.assert_close(kc1, kc2, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(vc1, vc2, atol=1e-3, rtol=1e-3)
        others = torch.arange(T) != pos % T
        assert torch.equal(kc1[:, :, others], kc[:, :, others]) and torch.equal(vc1[:, :, others], vc[:, :, others])
        assert not torch.equal(kc1[:, :, pos], kc[:, :, pos]) and not torch.equal(vc1[:, :, pos], vc[:, :, pos])
    done = rewrites()[before:]
    assert done and all(r.endswith("K/V cache writes folded in, causal mask from the position, q and the new K/V "
                                   "rows in one load") for r in done), done
