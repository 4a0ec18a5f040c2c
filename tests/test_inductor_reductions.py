"""Reductions on nmp's terms (triton_nmp/inductor/reductions.py): split factors that fill the PUs with long
contiguous chunks, and fixed block sizes for outer reductions."""

from __future__ import annotations

import pytest
import torch

import triton_nmp
from triton_nmp.inductor.reductions import outer_block_config, split_factor
from triton_nmp.target import TargetSpec
from triton_nmp.triton_name import cpu_entry_registered

SPEC = TargetSpec.load("nmp-64")


def test_decode_softmax_v_is_split_to_fill_the_pus_in_long_chunks():
    # GPT-2's decode softmax @ V: 12 heads x 64 columns, reduced over a 1024-position cache (Inductor: 256)
    choice = split_factor(SPEC, 1024, 768, inner=False)
    assert choice.split == 16 and choice.programs == 192  # three full waves of 64-row chunks


def test_split_never_cuts_below_a_long_chunk_and_not_when_rows_fill_the_pus():
    assert split_factor(SPEC, 768, 1, inner=True).split == 1  # a decode layer norm: one 768-element run
    big = split_factor(SPEC, 65536, 1, inner=True)
    assert 1 < big.split and 65536 // big.split >= 512
    assert split_factor(SPEC, 64, 768, inner=False).split == 1  # 64 rows: already one chunk
    assert split_factor(SPEC, 1024, 8192, inner=False).split == 1  # 128 column blocks: every PU busy


def test_outer_block_config_reads_whole_rows_and_spreads_small_outputs():
    assert outer_block_config(64, 12288, 64, persistent=True) == {"XBLOCK": 64}
    assert outer_block_config(64, 768, 16, persistent=True) == {"XBLOCK": 16}  # 48 programs, not 12
    assert outer_block_config(64, 12288, 1024, persistent=False) == {"XBLOCK": 64, "R0_BLOCK": 64}


@pytest.mark.skipif(not cpu_entry_registered(), reason="triton-nmp's Triton entry point 'cpu' is not registered")
def test_compiled_decode_attention_uses_nmp_split_and_blocks(monkeypatch, fresh_inductor):
    monkeypatch.setenv("TRITON_NMP_REDUCTION_SPLIT", "1")  # opt-in (see reductions.py)
    def attend(s, v):
        return torch.softmax(s.float(), dim=-1).to(v.dtype) @ v

    g = torch.Generator().manual_seed(0)
    s = torch.randn(12, 1, 1024, generator=g).half()
    v = torch.randn(12, 1024, 64, generator=g).half()
    f = torch.compile(attend, backend="nmp")
    f(s, v)
    with triton_nmp.profile() as prof:
        got = f(s, v)
    torch.testing.assert_close(got, attend(s, v), rtol=2e-2, atol=2e-3)
    grids = [r.grid[0] for r in prof.launches]
    assert 192 in grids, [(r.kernel, r.grid) for r in prof.launches]  # 12 heads x 16 chunks of 64 rows
    assert max(grids) <= 192  # no 256-way split into 4-row partials


def test_inner_block_config_gives_each_pu_several_rows():
    from triton_nmp.inductor.reductions import inner_block_config

    assert inner_block_config(64, 512, 768) == {"XBLOCK": 8}  # a prefill layer norm: 64 programs of 8 rows
    assert inner_block_config(64, 1, 768) == {"XBLOCK": 1}  # a decode layer norm
    assert inner_block_config(64, 4096, 4096) == {"XBLOCK": 2}  # the tile stays within 8192 elements
