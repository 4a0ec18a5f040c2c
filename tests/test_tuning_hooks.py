"""Backend autotuning hooks: active with Triton + upstream_patches/triton, fallbacks on stock Triton.

`upstream_patches/check` runs this file against a patched copy of Triton, plain pytest against the
installed (stock) one; each test states which of the two it covers.
"""

import inspect

import pytest
import torch
import triton
import triton.runtime.autotuner as autotuner_mod

import triton_nmp
from triton_nmp.driver.autotune_hooks import hooks

from . import hook_kernels as hk

PATCHED = "get_autotune_hooks" in inspect.getsource(autotuner_mod)


def _run(x):
    out = torch.empty_like(x)
    hk.plain_autotuned_norm[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
    return out


def _reference(x, block):
    pad = (-x.numel()) % block
    t = torch.nn.functional.pad(x, (0, pad), value=0.0).view(-1, block)
    return (t - t.flip(1)).flatten()[: x.numel()]


def test_driver_offers_hooks():
    drv = triton_nmp.activate()
    h = drv.get_autotune_hooks()
    spec = h.prune_configs_by(None)
    assert set(spec) == {"early_config_prune", "perf_model", "top_k"}
    x = torch.randn(8)
    assert h.tuning_key_extra(None, {"x": x, "n": 8}) == triton_nmp.placement_signature(x)


@pytest.mark.skipif(not PATCHED, reason="needs Triton with upstream_patches/triton applied")
def test_patched_triton_prunes_ranks_and_keys_by_placement_without_kernel_arguments():
    hk.plain_autotuned_norm.cache.clear()
    x = torch.randn(5000)
    out = _run(x)
    best = hk.plain_autotuned_norm.best_config.kwargs["BLOCK"]
    assert best != hk.HUGE  # pruned as illegal, never compiled
    torch.testing.assert_close(out, _reference(x, best))
    keys = set(hk.plain_autotuned_norm.cache)
    triton_nmp.place(x, "blocked")
    _run(x)
    assert len(set(hk.plain_autotuned_norm.cache) - keys) >= 1  # a new placement re-tunes


@pytest.mark.skipif(PATCHED, reason="stock Triton only")
def test_stock_triton_skips_oversized_configs_as_out_of_resources_and_falls_back_explicitly():
    hk.plain_autotuned_norm.cache.clear()
    x = torch.randn(5000)
    out = _run(x)  # the oversized config raises OutOfResources, which Triton's autotuner skips
    best = hk.plain_autotuned_norm.best_config.kwargs["BLOCK"]
    assert best != hk.HUGE
    torch.testing.assert_close(out, _reference(x, best))
    # The explicit fallback: the same kernel body with nmp's pruning and cost model.
    tuned = triton.autotune(configs=hk.CONFIGS, key=["n"], prune_configs_by=triton_nmp.prune_configs_by(top_k=2))(
        hk.plain_autotuned_norm.fn)
    y = torch.empty_like(x)
    tuned[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
    assert tuned.best_config.kwargs["BLOCK"] != hk.HUGE
    assert any("scratchpad overflow" in reason for _, reason in triton_nmp.last_pruned(tuned))


def test_hooks_module_is_importable_without_tuning_side_effects():
    assert hooks.tuning_key_extra(None, {"n": 3}) == ()
