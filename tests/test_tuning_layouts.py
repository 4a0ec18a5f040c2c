"""The layout axis of tuning (issue 12 part 4): config x mapping x layout, keys that include the layout,
the winner's layouts applied and charged, warm lookups that simulate nothing, and the placement pass
reading tuned costs per layout. Measurements are real simulations (small vector adds)."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from triton_nmp import placement_pass as pp
from triton_nmp.placement import clear_placements, decisions, lookup, place
from triton_nmp.tuning import TuningCache, autotune, config_space

N = 1 << 16


@triton.jit
def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


# round robin only: the mapping cannot follow the data, so the layout decides which bytes are local
CONFIGS = config_space(tiles={"BLOCK": (1024, 4096)}, num_stages=(1,), pu_mapping=("round_robin",))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TUNING_CACHE", str(tmp_path / "default-cache"))
    old = triton_nmp.default_placement()
    triton_nmp.set_default_placement("auto")
    clear_placements()
    yield
    clear_placements()
    triton_nmp.set_default_placement(old)


def _args():
    return torch.randn(N), torch.randn(N), torch.empty(N)


class CountingSim:
    """Triton's do_bench on nmp (the simulated time), counting the candidates measured."""

    def __init__(self):
        self.calls = 0

    def __call__(self, fn, quantiles=None, **kw):
        from triton.testing import do_bench

        self.calls += 1
        return do_bench(fn, quantiles=quantiles, **kw)


def test_search_picks_the_local_layout_with_simulated_numbers_and_charges_it(tmp_path):
    x, y, out = _args()
    bench = CountingSim()
    kernel = autotune(CONFIGS, key=["n"], top_k=6, cache=tmp_path / "c", do_bench=bench)(vadd)
    with triton_nmp.profile() as prof:
        kernel[grid](x, y, out, N)
    torch.testing.assert_close(out, x + y)
    block = kernel.best_config.kwargs["BLOCK"]
    # every argument in chunks of one program's block: each program's bytes in its PU's bank
    for t in (x, y, out):
        pl = lookup(t.data_ptr(), N * 4)
        assert pl.policy == "interleaved" and pl.granularity == block * 4 and pl.chosen
    assert prof.launches[-1].bytes_remote == 0
    # applying the layout moved the inputs' host data into the banks: charged and in the profile
    assert sorted(t.kind for t in prof.transfers) == ["host_write", "host_write"]
    assert sum("autotuner layout search" in d.why for d in decisions()) == 3
    entries = list(TuningCache(tmp_path / "c").entries())
    (searched,) = [e for e in entries if e.key.placements["x_ptr"][0] == "auto"]
    # 2 configs x (default, footprint-aligned; "blocked" loses to the aligned chunks): all simulated (top_k=6)
    assert len(searched.candidates) == 4 and bench.calls == 4
    assert searched.best.layouts["x_ptr"] == {"layout": ["interleaved", None, block * 4], "read": True}
    assert searched.best.layouts["out_ptr"]["read"] is False
    assert kernel.last_lookup.layouts == searched.best.layouts  # the tuner reports the layouts it applied
    default = [c for c in searched.candidates if c.layouts["x_ptr"]["layout"] == ["interleaved", None, 1024]]
    assert len(default) == 2 and all(c.simulated for c in default)
    # the simulator agrees with the choice: the default interleaving is slower for every config
    assert min(c.simulated_seconds for c in default) > 1.3 * searched.best.simulated_seconds
    # and every simulated layout has an entry keyed by it
    concrete = {tuple(e.key.placements["x_ptr"]) for e in entries} - {("auto", None, None)}
    assert ("interleaved", None, block * 4) in concrete and ("interleaved", None, 1024) in concrete


def test_the_model_ranks_pairs_so_few_are_simulated(tmp_path):
    x, y, out = _args()
    bench = CountingSim()
    kernel = autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=bench)(vadd)
    kernel[grid](x, y, out, N)
    assert bench.calls == 2  # as many as configs would be simulated without the layout axis
    (searched,) = [e for e in TuningCache(tmp_path / "c").entries() if e.key.placements["x_ptr"][0] == "auto"]
    simulated = [c for c in searched.candidates if c.simulated]
    assert len(simulated) == 2 and all(c.layouts["x_ptr"]["layout"][2] != 1024 for c in simulated)
    assert lookup(x.data_ptr(), N * 4).granularity == kernel.best_config.kwargs["BLOCK"] * 4


def test_warm_cache_simulates_nothing_and_applies_the_tuned_layout(tmp_path):
    x, y, out = _args()
    autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=CountingSim())(vadd)[grid](x, y, out, N)
    tuned = lookup(x.data_ptr(), N * 4)
    clear_placements()
    x2, y2, out2 = _args()  # open again: the "auto" entry serves the config and its layouts
    bench = CountingSim()
    kernel = autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=bench)(vadd)
    with triton_nmp.profile() as prof:
        kernel[grid](x2, y2, out2, N)
    torch.testing.assert_close(out2, x2 + y2)
    assert bench.calls == 0 and kernel.last_lookup.source == "disk" and kernel.last_lookup.layouts
    assert len(prof.launches) == 1  # the launch itself, nothing simulated for tuning
    assert lookup(x2.data_ptr(), N * 4).layout_signature() == tuned.layout_signature()
    assert sorted(t.kind for t in prof.transfers) == ["host_write", "host_write"]  # applied, charged
    kernel[grid](x2, y2, out2, N)  # laid out now: its concrete key is in memory
    assert kernel.last_lookup.source == "memory" and bench.calls == 0
    fresh = autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=bench)(vadd)
    fresh[grid](x2, y2, out2, N)  # and on disk (the entry of that simulated layout)
    assert fresh.last_lookup.source == "disk" and bench.calls == 0


def test_key_includes_the_layout_two_layouts_two_entries(tmp_path):
    bench = CountingSim()
    for gran in (1024, 4096 * 4):
        clear_placements()
        x, y, out = _args()
        for t in (x, y, out):
            place(t, "interleaved", granularity=gran)
        kernel = autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=bench)(vadd)
        kernel[grid](x, y, out, N)
        assert kernel.last_lookup.source == "tuned"  # the other layout's winner is not served
        assert lookup(x.data_ptr(), N * 4).granularity == gran  # placed data is never moved by tuning
    assert bench.calls == 4
    entries = list(TuningCache(tmp_path / "c").entries())
    assert sorted(e.key.placements["x_ptr"][2] for e in entries) == [1024, 4096 * 4]
    assert all(e.best.layouts is None for e in entries)


def test_a_layout_the_auto_policy_chose_keys_as_that_layout(tmp_path):
    x, y, out = _args()
    vadd[(N // 1024,)](x, y, out, N, BLOCK=1024)  # auto: chunks of 4 KiB
    assert lookup(x.data_ptr(), N * 4).chosen
    kernel = autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=CountingSim(),
                      layouts=True)(vadd)
    kernel[grid](x, y, out, N)
    (entry,) = TuningCache(tmp_path / "c").entries()
    assert entry.key.placements["x_ptr"] == ["interleaved", None, 4096] and entry.best.layouts is None


def test_without_the_layout_axis_the_launch_lays_out_and_both_keys_are_stored(tmp_path):
    x, y, out = _args()
    bench = CountingSim()
    kernel = autotune(CONFIGS, key=["n"], top_k=2, cache=tmp_path / "c", do_bench=bench, layouts=False)(vadd)
    kernel[grid](x, y, out, N)
    assert bench.calls == 2
    keys = sorted(e.key.placements["x_ptr"][0] for e in TuningCache(tmp_path / "c").entries())
    assert keys == ["auto", "interleaved"]
    kernel[grid](x, y, out, N)
    assert kernel.last_lookup.source == "memory" and bench.calls == 2


def test_the_placement_pass_reads_tuned_costs_per_layout(tmp_path):
    x, y, out = _args()
    kernel = autotune(CONFIGS, key=["n"], top_k=6, cache=tmp_path / "c", do_bench=CountingSim())(vadd)
    kernel[grid](x, y, out, N)
    with pp.capture() as cap:
        kernel[grid](x, y, out, N)
    g = cap.graph()
    (k,) = g.kernels
    tuned = [s for s in k.strategies if s.mapping.startswith("tuned: ")]
    assert tuned, [(s.origin, s.mapping) for s in k.strategies]
    cache = TuningCache(tmp_path / "c")
    for s in tuned:
        lay = s.layouts[next(t.id for t in g.tensors if t.ptr == x.data_ptr())]
        (entry,) = [e for e in cache.entries()
                    if e.key.placements["x_ptr"] == [lay[0], None, lay[1]] and e.key.placements["y_ptr"][0] != "auto"
                    and all(e.key.placements[n] == [lay[0], None, lay[1]] for n in ("y_ptr", "out_ptr"))]
        assert s.seconds == entry.best.simulated_seconds
    plan = pp.solve(g, "greedy")
    assert plan.seconds == pytest.approx(min(s.seconds for s in k.strategies))
