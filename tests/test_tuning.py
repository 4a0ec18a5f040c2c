"""Tuning: search spaces, legality pruning, the perf-model adapter, triton_nmp.autotune with the
persistent cache and placement-aware keys, and the exported table.

Most tests replace measuring with a counting fake (`do_bench=`) so they check the tuner's logic
without compiling every config; the tests that measure use a few small configs.
"""

from __future__ import annotations

import csv
import json
import math
import time
import warnings

import pytest
import torch
import triton
import triton.language as tl

from triton_nmp.placement import clear_placements, place
from triton_nmp.tuning import (
    Entry,
    NMPTuningError,
    TuningCache,
    autotune,
    config_label,
    config_space,
    export_table,
    last_pruned,
    prune_configs_by,
    prune_illegal,
    prune_with_reasons,
)
from triton_nmp.tuning.configs import config_from_record, config_identity, config_record
from triton_nmp.tuning.context import resolve_grid


@triton.jit
def tuned_shift(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = x + y - x reversed within the program's block. The reversal (tl.gather) may read any element
    of x for any other, so the whole x tile must be in the scratchpad at once: a block too big for it
    can neither be strip-mined nor staged in pieces through the spill area, and must be pruned."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y - tl.gather(x, BLOCK - 1 - tl.arange(0, BLOCK), 0), mask=m)


def check(out, x, y, kernel, n=None):
    """`out` is tuned_shift's result with the block size the autotuner chose."""
    n = n or x.numel()
    block = kernel.best_config.kwargs["BLOCK"]
    xs = x[:n].view(-1, block)
    want = (xs + y[:n].view(-1, block) - xs.flip(1)).reshape(-1)
    torch.testing.assert_close(out[:n], want)


@triton.jit
def tuned_scale(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * alpha)
    else:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)


N = 1 << 14
HUGE = 1 << 17  # 3 fp32 tiles of 512 KiB: far over nmp-64's 256 KiB scratchpad


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


class CountingBench:
    """A do_bench that never runs the kernel: a fixed fake time per BLOCK, counting calls."""

    def __init__(self, ms_of=lambda block: 1.0 / block):
        self.calls = 0
        self.ms_of = ms_of
        self.blocks: list[int] = []

    def __call__(self, kernel_call, quantiles=None, **_):
        self.calls += 1
        frame_config = _bench_config()
        self.blocks.append(frame_config.kwargs["BLOCK"])
        t = self.ms_of(frame_config.kwargs["BLOCK"])
        return [t, t, t]


def _bench_config():
    """The config Autotuner._bench is measuring (its keyword argument `config`)."""
    import sys

    f = sys._getframe(2)
    while f is not None and "config" not in f.f_locals:
        f = f.f_back
    return f.f_locals["config"]


def fake_model(kernel, named_args, config, grid):
    """Predicts that bigger blocks are faster, ignoring the mapping."""
    return 1e-6 / config.kwargs["BLOCK"] + (1e-12 if config.kwargs.get("pu_mapping") == "blocked" else 0.0)


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TUNING_CACHE", str(tmp_path / "default-cache"))
    clear_placements()
    yield
    clear_placements()


@pytest.fixture
def data():
    """Arguments in the default interleaving, placed before tuning: these tests are about the config axis
    (arguments still open to the auto policy make the layout a search axis too: test_tuning_layouts.py)."""
    torch.manual_seed(0)
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    for t in (x, y, out):
        place(t, "interleaved")
    return x, y, out


def _space(blocks=(256, 1024, 4096), mappings=("round_robin", "blocked")):
    return config_space(tiles={"BLOCK": blocks}, num_stages=(1,), pu_mapping=mappings)


# ------------------------------------------------------------------------------- search space


def test_config_space_is_the_filtered_product():
    configs = config_space(tiles={"BLOCK_M": (32, 64), "BLOCK_K": (32, 64, 128)},
                           constraint=lambda p: p["BLOCK_K"] <= p["BLOCK_M"], num_warps=1)
    # 3 (M, K) pairs with K <= M, x 3 stages x 3 mappings
    assert len(configs) == 3 * 3 * 3
    assert all(c.kwargs["BLOCK_K"] <= c.kwargs["BLOCK_M"] for c in configs)
    assert {c.num_stages for c in configs} == {1, 2, 3}
    assert {c.kwargs["pu_mapping"] for c in configs} == {"round_robin", "blocked", "locality"}
    assert all(c.num_warps == 1 for c in configs)
    assert len({config_identity(c) for c in configs}) == len(configs)
    assert config_label(configs[0]) == "BLOCK_M=32 BLOCK_K=32 num_stages=1 pu_mapping=round_robin"


def test_config_space_axes_can_be_left_to_the_compiler():
    configs = config_space(tiles={"BLOCK": (64, 64, 128)}, num_stages=None, pu_mapping=None)
    assert [c.kwargs for c in configs] == [{"BLOCK": 64}, {"BLOCK": 128}]  # duplicates dropped
    assert all(c.num_stages is None for c in configs)
    with pytest.raises(Exception, match="rejected all 2"):
        config_space(tiles={"BLOCK": (64, 128)}, num_stages=None, pu_mapping=None, constraint=lambda p: False)


def test_config_records_round_trip():
    c = triton.Config({"BLOCK": 128, "pu_mapping": "locality"}, num_stages=2, num_warps=4)
    rec = config_record(c)
    assert rec["kwargs"] == {"BLOCK": 128} and rec["options"]["pu_mapping"] == "locality"
    assert config_from_record(json.loads(json.dumps(rec))) == c


def test_resolve_grid_pads_and_calls():
    assert resolve_grid((4,), {}) == (4, 1, 1)
    assert resolve_grid(lambda m: (m["n"] // m["B"], 2), {"n": 64, "B": 16}) == (4, 2, 1)


# ---------------------------------------------------------------------------- legality pruning


def test_oversized_block_is_pruned_with_its_reason(data):
    x, y, out = data
    configs = _space(blocks=(256, HUGE), mappings=("round_robin",))
    named = {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": N}
    kept, pruned = prune_with_reasons(tuned_shift, configs, named, {"grid": grid, "warmup": False})
    assert [c.kwargs["BLOCK"] for c in kept] == [256]
    assert len(pruned) == 1 and pruned[0].config.kwargs["BLOCK"] == HUGE
    assert "scratchpad overflow" in pruned[0].reason
    config, reason = last_pruned(tuned_shift)[0]  # (config, reason) pairs
    assert config.kwargs["BLOCK"] == HUGE and reason.startswith("scratchpad overflow")


def test_prune_illegal_works_inside_stock_triton_autotune(data):
    x, y, out = data
    bench = CountingBench()
    kernel = triton.autotune(_space(blocks=(256, 1024, HUGE)), key=["n"], do_bench=bench,
                             prune_configs_by={"early_config_prune": prune_illegal})(tuned_shift)
    kernel[grid](x, y, out, N)
    check(out, x, y, kernel)
    assert sorted(set(bench.blocks)) == [256, 1024]  # the huge configs were never measured
    assert {c.kwargs["BLOCK"] for c, _ in last_pruned(kernel)} == {HUGE}


def test_nothing_legal_is_a_clear_error(data):
    x, y, out = data
    kernel = autotune(_space(blocks=(HUGE, 2 * HUGE)), key=["n"], cache=False, do_bench=CountingBench())(tuned_shift)
    with pytest.raises(NMPTuningError, match=r"(?s)no legal config for kernel 'tuned_shift' among 4.*"
                                             r"BLOCK=131072 .*scratchpad overflow"):
        kernel[grid](x, y, out, N)


def test_heuristics_values_reach_the_legality_query_and_the_model(data):
    x, _, out = data
    seen = []

    def model(kernel, named_args, config, grid_):
        seen.append(named_args["EVEN"])
        return fake_model(kernel, named_args, config, grid_)

    even = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(tuned_scale)
    kernel = autotune(_space(blocks=(256, 1024, 3 * 256)), key=["n"], top_k=2, model=model, cache=False,
                      do_bench=CountingBench())(even)
    n = 1536  # a multiple of 256, not of 1024
    out.zero_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # legality is decided for every config: no "unknown" warning
        kernel[grid](x, out, n, 2.0)
    torch.testing.assert_close(out[:n], 2.0 * x[:n])
    assert sorted(set(seen)) == [False, True]
    reasons = {c.kwargs["BLOCK"]: r for c, r in last_pruned(kernel)}
    assert set(reasons) == {768}
    assert reasons[768].startswith("does not compile")  # tl.arange needs a power of 2


def test_prune_illegal_outside_an_autotuner_says_how_to_use_it():
    with pytest.raises(NMPTuningError, match="early_config_prune"):
        prune_illegal(_space(), {"n": 1})


# ------------------------------------------------------------------------------- perf model


def test_prune_configs_by_keeps_top_k_by_the_model_in_stock_autotune(data):
    x, y, out = data
    seen = []

    def model(kernel, named_args, config, grid_):
        seen.append((kernel.__name__, set(named_args), grid_))
        return fake_model(kernel, named_args, config, grid_)

    bench = CountingBench()
    pcb = prune_configs_by(top_k=2, model=model)
    assert set(pcb) == {"early_config_prune", "perf_model", "top_k"} and pcb["top_k"] == 2
    kernel = triton.autotune(_space(), key=["n"], prune_configs_by=pcb, do_bench=bench)(tuned_shift)
    kernel[grid](x, y, out, N)
    check(out, x, y, kernel)
    assert bench.calls == 2 and bench.blocks == [4096, 4096]  # the model's two best
    assert {s[0] for s in seen} == {"tuned_shift"}
    assert all(s[1] == {"x_ptr", "y_ptr", "out_ptr", "n"} for s in seen)  # BLOCK comes with the config
    assert {s[2] for s in seen} == {(N // b, 1, 1) for b in (256, 1024, 4096)}  # grid evaluated per config


def test_top_k_fraction_keeps_at_least_one_and_rejects_nonsense(data):
    x, y, out = data
    bench = CountingBench()
    kernel = autotune(_space(), key=["n"], top_k=0.1, model=fake_model, cache=False, do_bench=bench)(tuned_shift)
    kernel[grid](x, y, out, N)
    assert bench.calls == 0  # int(6 * 0.1) = 0 -> 1 config: nothing to measure
    assert kernel.best_config.kwargs == {"BLOCK": 4096, "pu_mapping": "round_robin"}
    with pytest.raises(ValueError):
        prune_configs_by(top_k=1.5)
    with pytest.raises(ValueError):
        prune_configs_by(top_k=0)


def test_default_model_is_the_cost_model(data, monkeypatch):
    costmodel = pytest.importorskip("triton_nmp.costmodel")
    calls = []
    monkeypatch.setattr(costmodel, "predict_seconds", lambda *a: calls.append(a) or 1e-6)
    x, y, out = data
    kernel = autotune(_space(blocks=(256, 1024)), key=["n"], top_k=1.0, cache=False,
                      do_bench=CountingBench())(tuned_shift)
    kernel[grid](x, y, out, N)
    assert len(calls) == 4


def test_a_failing_model_warns_and_everything_is_measured(data):
    x, y, out = data

    def broken(*_):
        raise RuntimeError("model exploded")

    bench = CountingBench()
    kernel = autotune(_space(), key=["n"], top_k=2, model=broken, cache=False, do_bench=bench)(tuned_shift)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel[grid](x, y, out, N)
    messages = [str(w.message) for w in caught]
    assert any("model exploded" in m for m in messages)
    assert any("measuring all 6" in m for m in messages)
    assert all(w.filename == __file__ for w in caught)  # pointing at the launch, not at the tuner
    assert bench.calls == 6


# ------------------------------------------------------------------------ autotune and the cache


def test_cold_tune_stores_every_candidate_and_warm_launch_skips_tuning(data, tmp_path):
    x, y, out = data
    cache = TuningCache(tmp_path / "cache")
    cold_bench = CountingBench()
    configs = _space(blocks=(256, 1024, 4096, HUGE))
    kernel = autotune(configs, key=["n"], top_k=4, model=fake_model, cache=cache, do_bench=cold_bench)(tuned_shift)
    kernel[grid](x, y, out, N)
    check(out, x, y, kernel)
    assert kernel.last_lookup.source == "tuned" and cold_bench.calls == 4
    (entry,) = cache.entries()
    assert entry.key.kernel == "tuned_shift" and entry.key.key == {"n": N}
    assert len(entry.candidates) == 6 and len(entry.pruned) == 2  # 6 legal, 2 over the scratchpad
    assert "scratchpad overflow" in entry.pruned[0]["reason"]
    measured = [c for c in entry.candidates if c.simulated]
    assert len(measured) == 4 and all(c.predicted_seconds is not None for c in entry.candidates)
    assert entry.best.simulated and entry.best.config["kwargs"]["BLOCK"] == 4096
    assert entry.best.simulated_seconds == pytest.approx(1e-3 / 4096)
    assert entry.args["x_ptr"] == {"shape": [N], "stride": [1], "dtype": "torch.float32"}

    warm_bench = CountingBench()
    again = autotune(configs, key=["n"], top_k=4, model=fake_model, cache=TuningCache(tmp_path / "cache"),
                     do_bench=warm_bench)(tuned_shift)
    out.zero_()
    again[grid](x, y, out, N)
    check(out, x, y, again)
    assert warm_bench.calls == 0 and again.last_lookup.source == "disk"
    assert again.last_lookup.seconds < 0.05, again.last_lookup  # the strict 5 ms bound: next test
    assert again.best_config == kernel.best_config
    assert len(again.configs_timings) == 4  # the stored measurements, as Triton would show them
    again[grid](x, y, out, N)
    assert again.last_lookup.source == "memory"


def test_warm_lookup_is_fast_over_many_launches(data, tmp_path):
    """The lookup (key, file read, match) stays well under 5 ms; median over fresh autotuners."""
    x, y, out = data
    cache_dir = tmp_path / "cache"
    configs = _space()
    autotune(configs, key=["n"], top_k=2, model=fake_model, cache=cache_dir, do_bench=CountingBench())(
        tuned_shift)[grid](x, y, out, N)
    times = []
    for _ in range(5):
        k = autotune(configs, key=["n"], top_k=2, model=fake_model, cache=cache_dir,
                     do_bench=CountingBench())(tuned_shift)
        k[grid](x, y, out, N)
        assert k.last_lookup.source == "disk"
        times.append(k.last_lookup.seconds)
    assert sorted(times)[2] < 5e-3, times


def test_changed_shape_or_space_retunes(data, tmp_path):
    x, y, out = data
    bench = CountingBench()
    kw = dict(key=["n"], top_k=2, model=fake_model, cache=tmp_path / "c", do_bench=bench)
    autotune(_space(), **kw)(tuned_shift)[grid](x, y, out, N)
    autotune(_space(), **kw)(tuned_shift)[grid](x, y, out, N // 2)  # new key value
    autotune(_space(blocks=(256, 512)), **kw)(tuned_shift)[grid](x, y, out, N)  # new search space
    assert bench.calls == 6
    assert len(list(TuningCache(tmp_path / "c").entries())) == 3


def test_placement_change_retunes_and_is_keyed_separately(data, tmp_path):
    x, y, out = data
    bench = CountingBench()
    kernel = autotune(_space(), key=["n"], top_k=2, model=fake_model, cache=tmp_path / "c", do_bench=bench)(tuned_shift)
    kernel[grid](x, y, out, N)
    assert bench.calls == 2
    kernel[grid](x, y, out, N)
    assert bench.calls == 2 and kernel.last_lookup.source == "memory"
    place(x, "blocked")
    kernel[grid](x, y, out, N)
    assert bench.calls == 4 and kernel.last_lookup.source == "tuned"  # same shapes, new placement
    check(out, x, y, kernel)
    entries = list(TuningCache(tmp_path / "c").entries())
    assert sorted(e.key.placements["x_ptr"][0] for e in entries) == ["blocked", "interleaved"]
    assert all(e.key.placements["y_ptr"][0] == "interleaved" for e in entries)
    fresh = autotune(_space(), key=["n"], top_k=2, model=fake_model, cache=tmp_path / "c", do_bench=bench)(tuned_shift)
    fresh[grid](x, y, out, N)
    assert bench.calls == 4 and fresh.last_lookup.source == "disk"


def test_views_at_different_bank_offsets_are_tuned_and_keyed_separately(tmp_path):
    """Two halves of one blocked tensor read different banks: the second must not be served the first's
    entry (it was, when the key held only the layout's policy)."""
    torch.manual_seed(0)
    half = N // 2
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    for t in (x, y, out):
        place(t, "blocked")
    bench = CountingBench()
    kernel = autotune(_space(), key=["n"], top_k=2, model=fake_model, cache=tmp_path / "c", do_bench=bench)(tuned_shift)
    kernel[grid](x[:half], y[:half], out[:half], half)
    assert bench.calls == 2
    kernel[grid](x[half:], y[half:], out[half:], half)
    assert bench.calls == 4 and kernel.last_lookup.source == "tuned"
    check(out[half:], x[half:], y[half:], kernel)
    kernel[grid](x[half:], y[half:], out[half:], half)
    assert bench.calls == 4 and kernel.last_lookup.source == "memory"
    keys = sorted(str(e.key.placements["x_ptr"]) for e in TuningCache(tmp_path / "c").entries())
    assert len(keys) == 2 and "at" in keys[0] + keys[1]


def test_real_measurements_pick_a_winner_and_compile_errors_time_as_inf(data, tmp_path):
    """Measured on the simulator; a config the compiler refuses (legality pruning disabled by the
    user's own early_config_prune) is timed as inf and recorded, not raised."""
    x, y, out = data
    keep_all = {"early_config_prune": lambda configs, named_args, **kw: configs}
    kernel = autotune(_space(blocks=(256, 2048, HUGE), mappings=("round_robin",)), key=["n"],
                      cache=tmp_path / "c", prune_configs_by=keep_all)(tuned_shift)
    kernel[grid](x, y, out, N)
    check(out, x, y, kernel)
    (entry,) = TuningCache(tmp_path / "c").entries()
    by_block = {c.config["kwargs"]["BLOCK"]: c for c in entry.candidates}
    assert by_block[HUGE].simulated and by_block[HUGE].simulated_seconds is None
    assert "scratchpad overflow" in by_block[HUGE].error
    assert by_block[256].simulated_seconds > 0 and by_block[2048].simulated_seconds > 0
    assert entry.best.simulated_seconds == min(by_block[b].simulated_seconds for b in (256, 2048))
    assert entry.best.predicted_seconds is None  # no perf model in this space


def test_progress_bar_only_for_more_than_a_handful(data, capsys):
    x, y, out = data
    big = autotune(_space(), key=["n"], top_k=1.0, model=fake_model, cache=False, do_bench=CountingBench())(tuned_shift)
    big[grid](x, y, out, N)
    assert "tuning tuned_shift" in capsys.readouterr().err
    quiet = autotune(_space(), key=["n"], top_k=1.0, model=fake_model, cache=False, progress=False,
                     do_bench=CountingBench())(tuned_shift)
    quiet[grid](x, y, out, N // 2)
    small = autotune(_space(), key=["n"], top_k=3, model=fake_model, cache=False, do_bench=CountingBench())(tuned_shift)
    small[grid](x, y, out, N // 4)
    assert "tuning tuned_shift" not in capsys.readouterr().err


# ------------------------------------------------------------------------------------ export


def test_export_table_json_and_csv(data, tmp_path):
    x, y, out = data
    cache = TuningCache(tmp_path / "c")
    kw = dict(key=["n"], top_k=2, model=fake_model, cache=cache, do_bench=CountingBench())
    autotune(_space(), **kw)(tuned_shift)[grid](x, y, out, N)
    place(y, bank=3)
    autotune(_space(), **kw)(tuned_shift)[grid](x, y, out, N)

    n_rows = export_table(tmp_path / "t.json", "json", cache=cache)
    rows = json.loads((tmp_path / "t.json").read_text())
    assert n_rows == len(rows) == 12  # 2 entries x 6 legal configs
    assert sum(r["winner"] for r in rows) == 2 and sum(r["simulated"] for r in rows) == 4
    banks = {r["placements"]["y_ptr"][0] for r in rows}
    assert banks == {"interleaved", "bank"}
    winner = next(r for r in rows if r["winner"])
    assert winner["kernel"] == "tuned_shift" and winner["key"] == {"n": N} and winner["kwargs"]["BLOCK"] == 4096
    assert winner["simulated_seconds"] == pytest.approx(1e-3 / 4096)
    assert winner["predicted_seconds"] == pytest.approx(fake_model(None, {}, triton.Config({"BLOCK": 4096}), None))
    assert all(r["simulated_seconds"] is None for r in rows if not r["simulated"])

    assert export_table(tmp_path / "t.csv", cache=cache) == 12  # format from the suffix
    with open(tmp_path / "t.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 12 and table[0].keys() >= {"kernel", "placements", "kwargs", "simulated_seconds",
                                                     "predicted_seconds", "winner"}
    assert {json.loads(r["placements"])["y_ptr"][0] for r in table} == banks
    won = [r for r in table if r["winner"] == "True"]
    assert len(won) == 2 and all(math.isclose(float(r["simulated_seconds"]), 1e-3 / 4096) for r in won)
    assert all(r["simulated_seconds"] == "" for r in table if r["simulated"] == "False")
    with pytest.raises(ValueError):
        export_table(tmp_path / "t.txt", "xml", cache=cache)


def test_entries_survive_a_json_round_trip(data, tmp_path):
    x, y, out = data
    cache = TuningCache(tmp_path / "c")
    autotune(_space(), key=["n"], top_k=2, model=fake_model, cache=cache, do_bench=CountingBench())(
        tuned_shift)[grid](x, y, out, N)
    (entry,) = cache.entries()
    again = Entry.from_json(json.loads(json.dumps(entry.to_json())))
    assert again.id == entry.id and again.to_json() == entry.to_json()


def test_default_cache_dir_follows_the_environment(data, tmp_path, monkeypatch):
    x, y, out = data
    monkeypatch.setenv("TRITON_NMP_TUNING_CACHE", str(tmp_path / "env-cache"))
    t0 = time.perf_counter()
    autotune(_space(), key=["n"], top_k=2, model=fake_model, do_bench=CountingBench())(tuned_shift)[grid](x, y, out, N)
    assert time.perf_counter() - t0 < 30
    assert len(list((tmp_path / "env-cache").glob("tuned_shift-*/*.json"))) == 1


@pytest.mark.parametrize("elem", ["ptr", "f64"])
def test_fallback_estimate_charges_a_pointer_tile_eight_bytes_per_element(elem: str) -> None:
    """The op-count estimate (used when the trace cannot be predicted) moves a tile's real bytes: a tile
    of pointers is 8 bytes per element like an f64 tile (it was charged 1 byte per element)."""
    from triton_nmp.backend.ir import Block, Func, Op, Ty, Value
    from triton_nmp.costmodel import _fallback_seconds
    from triton_nmp.target import TargetSpec

    spec = TargetSpec.load("nmp-64")
    arg = Value("x", Ty("ptr", (), "f32"))
    i64 = [Value(n, Ty("i64")) for n in ("off", "stride", "bound")]
    body = Block([arg, *i64])
    tile = Ty(elem, (4096,), "f32" if elem == "ptr" else None)
    load = Op("nmp.dma_load", [arg, *i64], [], {"rank": 1})
    load.results.append(Value("t", tile, load))
    body.ops.append(load)
    seconds = _fallback_seconds(Func("k", body.args, [], body), {}, spec, 1)
    moved = spec.dma_setup_cycles + 4096 * 8 / spec.bank_bytes_per_cycle
    assert seconds == pytest.approx(spec.cycles_to_seconds(moved) + spec.launch_overhead_us * 1e-6)
