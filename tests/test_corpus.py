"""The library-kernel corpus (`tests/corpus.py`): every config compiles at every LLM size, and a
representative subset runs and matches torch.

Compiling is the legality query (frontend + nmpir passes + scratchpad plan, no LLVM), so all configs of
all sizes stay cheap; numerics run at moderate sizes by default and at full sizes under `-m slow`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from triton_nmp.legality import check_config

from .corpus import CASES, CorpusCase


# Configs the compiler still refuses (scratchpad overflow): case -> predicate on (hidden, config). The
# test asserts they ARE refused, with the overflow message, so this list cannot go stale.
def _always(hidden: int, cfg: dict) -> bool:
    return True


NOT_YET: dict[str, Callable[[int, dict], bool]] = {
    "layer_norm_bwd_block": lambda h, c: h == 8192,
    "rms_norm_bwd_block": lambda h, c: h == 8192,
}


def _expected_refused(case: CorpusCase, hidden: int, cfg: dict) -> bool:
    rule = NOT_YET.get(case.name)
    return rule is not None and rule(hidden, cfg)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_config_compiles_at_every_size(case: CorpusCase):
    wrong = []
    for hidden in case.sizes:
        for cfg in case.configs(hidden):
            ln = case.launch(hidden, case.rows, cfg, meta=True)
            v = check_config(case.kernel, ln.args, cfg)
            refused = _expected_refused(case, hidden, cfg)
            if v.legal == refused or (refused and "scratchpad overflow" not in v.reason):
                wrong.append(f"hidden={hidden} {cfg}: {'fits' if v.legal else v.reason}")
    assert not wrong, "\n".join(wrong)


def _small_configs(case: CorpusCase) -> list[dict]:
    hidden, _ = case.small
    return [c for c in case.configs(hidden) if not _expected_refused(case, hidden, c)]


@pytest.mark.parametrize("case", [c for c in CASES if _small_configs(c)], ids=lambda c: c.name)
def test_numerics_at_moderate_size(case: CorpusCase):
    hidden, rows = case.small
    configs = _small_configs(case)
    for cfg in configs[:2]:  # the representative subset: the first two configs the library lists
        case.run(hidden, rows, cfg)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_numerics_every_config_at_every_size(case: CorpusCase):
    for hidden in case.sizes:
        for cfg in case.configs(hidden):
            if not _expected_refused(case, hidden, cfg):
                case.run(hidden, max(case.rows, 4), cfg)
