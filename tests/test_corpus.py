"""The library-kernel corpus (`tests/corpus.py`): every config compiles at every LLM size without spilling
(leaner buffers and strip-mining suffice), and a representative subset runs and matches torch.

Compiling is the legality query (frontend + nmpir passes + scratchpad plan, no LLVM), so all configs of
all sizes stay cheap; numerics run at moderate sizes by default and at full sizes under `-m slow`.
"""

from __future__ import annotations

import pytest

from triton_nmp.legality import check_config

from .corpus import BY_NAME, CASES, CorpusCase


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_config_compiles_at_every_size(case: CorpusCase):
    wrong = []
    for hidden in case.sizes:
        for cfg in case.configs(hidden):
            ln = case.launch(hidden, case.rows, cfg, meta=True)
            v = check_config(case.kernel, ln.args, cfg)
            if not v.legal or v.spill_bytes:  # every config fits without spilling to the bank
                wrong.append(f"hidden={hidden} {cfg}: {v.reason}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numerics_at_moderate_size(case: CorpusCase):
    hidden, rows = case.small
    for cfg in case.configs(hidden)[:2]:  # the representative subset: the first two configs the library lists
        case.run(hidden, rows, cfg)


# Cases whose configs at hidden 8192 fit only with leaner buffers (fused reductions, buffers reused
# across fused runs): run once at full width by default, so that path is checked against torch.
LEAN_AT_8192 = ("layer_norm_bwd_block", "rms_norm_bwd_block")


@pytest.mark.parametrize("name", LEAN_AT_8192)
def test_numerics_at_hidden_8192_with_leaner_buffers(name: str):
    case = BY_NAME[name]
    compiled = case.run(8192, 40, case.configs(8192)[0])
    assert compiled.metadata.nmp_spm_bytes <= 262144


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numerics_every_config_at_every_size(case: CorpusCase):
    for hidden in case.sizes:
        for cfg in case.configs(hidden):
            case.run(hidden, max(case.rows, 4), cfg)
