"""Tuning sweeps (triton_nmp.sweep): sweep files, engines, worker deaths, resuming, the cache they fill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
import triton

import triton_nmp
from tests import sweep_kernels as sk
from triton_nmp.driver.device import clock
from triton_nmp.sweep import NMPSweepError, Sweep, engine_from_options, make_plan, run_sweep
from triton_nmp.tuning.cache import TuningCache

N = 65536
ARGS = {"x_ptr": {"shape": [N], "dtype": "float32"}, "y_ptr": {"shape": [N], "dtype": "float32"},
        "out_ptr": {"shape": [N], "dtype": "float32", "init": "zeros"}, "n": N, "alpha": 0.5}


def scale_add_sweep(**extra) -> Sweep:
    kernel = {"kernel": "tests.sweep_kernels:scale_add_tuned", "grid": "(cdiv(n, BLOCK),)", "args": ARGS}
    return Sweep.from_dict({"kernel": [{**kernel, **extra}]})


def entry_times(cache: TuningCache) -> dict[str, dict[str, float | None]]:
    from triton_nmp.tuning.configs import config_label

    return {e.id: {config_label(c.config): c.simulated_seconds for c in e.candidates} for e in cache.entries()}


# ------------------------------------------------------------------------------------ sweep files


def test_sweep_file_errors_name_the_field(tmp_path):
    def load(text: str) -> Sweep:
        p = tmp_path / "s.toml"
        p.write_text(text)
        return Sweep.load(p)

    with pytest.raises(NMPSweepError, match="does not exist"):
        Sweep.load(tmp_path / "missing.toml")
    with pytest.raises(NMPSweepError, match="not valid TOML"):
        load("[[kernel]\n")
    with pytest.raises(NMPSweepError, match="no \\[\\[kernel\\]\\] tables"):
        load("targets = ['nmp-64']\n")
    with pytest.raises(NMPSweepError, match="cannot import no_such_module"):
        load('[[kernel]]\nkernel = "no_such_module:k"\ngrid = "(1,)"\n')
    with pytest.raises(NMPSweepError, match="not a @triton.jit kernel"):
        load('[[kernel]]\nkernel = "tests.sweep_kernels:scale_add_grid"\ngrid = "(1,)"\n')
    base = '[[kernel]]\nkernel = "tests.sweep_kernels:scale_add_tuned"\ngrid = "(cdiv(n, BLOCK),)"\n'
    with pytest.raises(NMPSweepError, match=r"no value for argument\(s\) \['x_ptr'"):
        load(base)
    with pytest.raises(NMPSweepError, match="unknown dtype 'float33'"):
        load(base + 'args = {x_ptr = {shape = [4], dtype = "float33"}}\n')
    with pytest.raises(NMPSweepError, match=r"\['bogus'\] are not parameters of scale_add_tuned"):
        load(base + "args = {bogus = 1}\n")
    with pytest.raises(NMPSweepError, match="unknown placement 'sideways'"):
        Sweep.from_dict({"kernel": [{"kernel": "tests.sweep_kernels:scale_add_tuned", "grid": "(1,)",
                                     "args": ARGS}], "placements": ["sideways"]})
    with pytest.raises(NMPSweepError, match="no grid"):
        Sweep.from_dict({"kernel": [{"kernel": "tests.sweep_kernels:scale_add_tuned", "args": ARGS}]})
    with pytest.raises(NMPSweepError, match="no configs"):
        Sweep.from_dict({"kernel": [{"kernel": "tests.sweep_kernels:scale_add_kernel", "grid": "(1,)",
                                     "args": ARGS}]})
    bad_grid = Sweep.from_dict({"kernel": [{"kernel": "tests.sweep_kernels:scale_add_tuned", "args": ARGS,
                                            "grid": "(cdiv(n, BLOK),)"}]})
    with pytest.raises(NMPSweepError, match="grid>: cannot evaluate .*NameError"):
        make_plan(bad_grid)


def test_sweep_file_space_targets_and_placements(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text("""
targets = ["nmp-64", "upmem-like"]
placements = ["interleaved", {x_ptr = "bank:3", "*" = "blocked"}]
[[kernel]]
name = "axpy"
kernel = "tests.sweep_kernels:scale_add_kernel"
grid = "(cdiv(n, BLOCK),)"
key = ["n"]
args = {x_ptr = {shape = [1024], dtype = "fp32"}, y_ptr = {shape = [1024], dtype = "fp32"}, \
out_ptr = {shape = [1024], dtype = "fp32", init = "zeros"}, n = "len(x_ptr)", alpha = 2.0}
space = {tiles = {BLOCK = [256, 512]}, num_stages = [1], pu_mapping = ["round_robin"]}
""")
    sweep = Sweep.load(p)
    plan = make_plan(sweep)
    assert len(plan.groups) == 4 and len(plan.tasks) == 8  # 2 targets x 2 placements x 2 configs
    placements = {json.dumps(g.key.placements, sort_keys=True) for g in plan.groups}
    assert len(placements) == 2
    assert {g.key.target for g in plan.groups} == {"nmp-64", "upmem-like"}
    assert [t.grid for t in plan.groups[0].tasks] == [(4, 1, 1), (2, 1, 1)]
    again = make_plan(Sweep.load(p))
    assert [t.id for t in again.tasks] == [t.id for t in plan.tasks]  # stable task ids (journal resumes)


# ---------------------------------------------------------------------- in process: the cache it fills


def test_sweep_fills_the_cache_a_later_autotune_launch_reads(tmp_path):
    cache = TuningCache(tmp_path / "tc")
    report = run_sweep(scale_add_sweep(), cache=cache, progress=False)
    (group,) = report.groups
    assert group.stored and group.candidates == len(sk.SCALE_ADD_SPACE) and group.failed == 0
    (entry,) = list(cache.entries())
    assert all(c.simulated and c.simulated_seconds > 0 for c in entry.candidates)
    assert all(c.predicted_seconds is not None for c in entry.candidates)

    tuner = triton_nmp.autotune(sk.SCALE_ADD_SPACE, key=["n"], top_k=1.0, cache=cache)(sk.scale_add_kernel)
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    clock.flush()
    before = clock.stats.executed
    tuner[lambda m: (triton.cdiv(N, m["BLOCK"]),)](x, y, out, N, 0.5)
    clock.flush()
    assert tuner.last_lookup.source == "disk" and tuner.last_lookup.entry_id == entry.id
    assert clock.stats.executed - before == 1  # the launch itself: no candidate was simulated
    assert triton_nmp.tuning.config_label(tuner.best_config) == group.best
    torch.testing.assert_close(out, 0.5 * x + y)

    # the same sweep again finds every entry complete and measures nothing
    again = run_sweep(scale_add_sweep(), cache=cache, progress=False)
    assert again.measured == 0 and again.groups[0].skipped


def test_sweep_journal_resumes_after_the_parent_dies(tmp_path):
    cache = TuningCache(tmp_path / "tc")

    class ParentDied(Exception):
        pass

    def die_after_five(task, result, done, total):
        if done == 5:
            raise ParentDied

    with pytest.raises(ParentDied):
        run_sweep(scale_add_sweep(), cache=cache, progress=False, on_result=die_after_five)
    assert list(cache.entries()) == []  # a partial group is never served as an entry
    (journal,) = (cache.directory / ".sweeps").glob("*.jsonl")
    assert len(journal.read_text().splitlines()) == 5
    report = run_sweep(scale_add_sweep(), cache=cache, progress=False)
    assert report.resumed == 5 and report.measured == len(sk.SCALE_ADD_SPACE) - 5
    assert report.groups[0].stored and not journal.exists()


# ----------------------------------------------------------------------------- the process pool


def test_pool_same_picks_and_a_killed_worker_loses_nothing(tmp_path, monkeypatch):
    """2 pool workers give the in-process picks and times; a worker killed mid-task halfway through: its
    candidate runs again on another worker and every candidate is stored."""
    reference = TuningCache(tmp_path / "ref")
    ref = run_sweep(scale_add_sweep(), cache=reference, progress=False)

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # cold: workers are busy compiling
    cache = TuningCache(tmp_path / "tc")
    killed = []
    with engine_from_options("pool", workers=2) as engine:
        def kill_one_halfway(task, result, done, total):
            busy = engine.busy_pids()
            if not killed and done >= total // 2 and busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])

        report = run_sweep(scale_add_sweep(), engine, cache, progress=False, on_result=kill_one_halfway)
        assert killed and engine.deaths == 1 and killed[0] not in engine.worker_pids()
    assert report.retries == 1 and report.measured == len(sk.SCALE_ADD_SPACE)
    assert report.picks() == ref.picks()
    assert entry_times(cache) == entry_times(reference)  # every candidate stored, same simulated times


def test_engine_options_errors():
    with pytest.raises(NMPSweepError, match="unknown sweep engine 'gpu'"):
        engine_from_options("gpu")
    with pytest.raises(NMPSweepError, match="--workers must be at least 1"):
        engine_from_options("pool", workers=0)
    with pytest.raises(NMPSweepError, match="cannot be combined with --engine pool"):
        engine_from_options("pool", ray="auto")


# ------------------------------------------------------------------------------------- the CLI


def test_cli_tune(tmp_path, capsys):
    from triton_nmp.cli import main

    p = tmp_path / "s.json"
    p.write_text(json.dumps({"kernel": [{"kernel": "tests.sweep_kernels:scale_add_tuned", "args": ARGS,
                                         "grid": "(cdiv(n, BLOCK),)",
                                         "configs": [{"kwargs": {"BLOCK": 512}, "num_stages": 1}]}]}))
    assert main(["tune", str(p), "--cache", str(tmp_path / "tc"), "--no-progress",
                 "--report", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "scale_add_tuned" in out and "BLOCK=512 num_stages=1" in out and "1 measured" in out
    assert json.loads((tmp_path / "r.json").read_text())["groups"][0]["stored"] is True
    assert main(["tune", str(tmp_path / "nope.toml")]) == 1
    assert "nope.toml does not exist" in capsys.readouterr().err
    assert main(["tune"]) == 1
    assert "give a sweep file" in capsys.readouterr().err


# ------------------------------------------------------------- autotuners on the configured engine


@pytest.fixture(scope="module")
def pool2():
    engine = engine_from_options("pool", workers=2)
    yield engine
    engine.close()


@pytest.fixture
def configured(pool2):
    from triton_nmp.sweep import set_engine

    previous = set_engine(pool2)
    yield pool2
    set_engine(previous)


def _launch(tuner, placement: str | None = None) -> tuple[int, torch.Tensor]:
    """Launch `tuner` on fresh data (placed by `placement`, else left to the default policy); returns the nmp
    launches this process executed, and the output."""
    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    if placement is not None:
        for t in (x, y, out):
            triton_nmp.place(t, placement)
    clock.flush()
    before = clock.stats.executed
    tuner[lambda m: (triton.cdiv(N, m["BLOCK"]),)](x, y, out, N, 0.5)
    clock.flush()
    torch.testing.assert_close(out, 0.5 * x + y)
    return clock.stats.executed - before, out


def test_nmp_autotune_benchmarks_on_the_configured_engine(tmp_path, configured):
    """Same picks and times as in process. The tensors are placed: left to the "auto" policy, in process every
    candidate runs on the layout the first candidate's launch chose, while on the engine (as in a sweep) each
    candidate is measured on fresh copies laid out for its own launch."""
    from triton_nmp.sweep import set_engine

    ref_cache, cache = TuningCache(tmp_path / "ref"), TuningCache(tmp_path / "pool")
    previous = set_engine(None)
    ref = triton_nmp.autotune(sk.SCALE_ADD_SPACE, key=["n"], top_k=1.0, cache=ref_cache)(sk.scale_add_kernel)
    launched_in_process, _ = _launch(ref, "blocked")
    set_engine(previous)
    assert launched_in_process > len(sk.SCALE_ADD_SPACE)  # every candidate ran here

    pooled = triton_nmp.autotune(sk.SCALE_ADD_SPACE, key=["n"], top_k=1.0, cache=cache)(sk.scale_add_kernel)
    launched, _ = _launch(pooled, "blocked")
    assert launched == 1  # candidates ran on the pool's workers; this process only launched the winner
    assert pooled.last_lookup.source == "tuned" and pooled.best_config.kwargs == ref.best_config.kwargs
    assert entry_times(cache) == entry_times(ref_cache)


def test_tuning_on_the_engine_leaves_the_callers_tensors_where_they_are(tmp_path, configured):
    """Shipping a live launch to workers must not move the caller's storage (pickling a tensor for another
    process moves it to shared memory in place): before, a tensor placed "blocked" came back unplaced and was
    laid out again by the auto policy, charged as a host write."""
    from triton_nmp.placement import placement_of
    from triton_nmp.placement_registry import extent_bytes

    x, y, out = torch.randn(N), torch.randn(N), torch.empty(N)
    for t in (x, y, out):
        triton_nmp.place(t, "blocked")
    ptrs = [t.data_ptr() for t in (x, y, out)]
    tuner = triton_nmp.autotune(sk.SCALE_ADD_SPACE, key=["n"], top_k=1.0, cache=TuningCache(tmp_path / "c"))(
        sk.scale_add_kernel)
    with triton_nmp.profile() as prof:
        tuner[lambda m: (triton.cdiv(N, m["BLOCK"]),)](x, y, out, N, 0.5)
    torch.testing.assert_close(out, 0.5 * x + y)
    assert len(prof.launches) == 1  # the candidates ran on the workers
    assert [t.data_ptr() for t in (x, y, out)] == ptrs and not any(t.is_shared() for t in (x, y, out))
    assert [placement_of(t.data_ptr(), extent_bytes(t)).policy for t in (x, y, out)] == ["blocked"] * 3
    assert prof.transfers == []


def test_stock_autotune_reads_sweep_entries_and_uses_the_engine(tmp_path, configured):
    from triton_nmp.sweep import set_engine

    def stock(cache_dir):
        return triton.autotune(sk.SCALE_ADD_SPACE, key=["n"], prune_configs_by=triton_nmp.prune_configs_by(
            top_k=1.0, cache=cache_dir))(sk.scale_add_kernel)

    # a sweep's entries: a stock triton.autotune launch simulates nothing
    swept = TuningCache(tmp_path / "swept")
    report = run_sweep(scale_add_sweep(), cache=swept, progress=False)
    previous = set_engine(None)
    try:
        tuner = stock(swept.directory)
        launched, _ = _launch(tuner)
        assert launched == 1 and triton_nmp.tuning.config_label(tuner.best_config) == report.groups[0].best
    finally:
        set_engine(previous)

    # an empty cache and the engine configured: measured on the workers, stored, and the same winner
    fresh = TuningCache(tmp_path / "fresh")
    tuner = stock(fresh.directory)
    launched, _ = _launch(tuner)
    assert launched == 1 and triton_nmp.tuning.config_label(tuner.best_config) == report.groups[0].best
    assert entry_times(fresh) == entry_times(swept)


def test_kernel_workers_cannot_import_is_benchmarked_in_process(tmp_path, configured):
    @triton.jit
    def local_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: triton.language.constexpr):
        offs = triton.language.program_id(0) * BLOCK + triton.language.arange(0, BLOCK)
        m = offs < n
        x = triton.language.load(x_ptr + offs, mask=m)
        triton.language.store(out_ptr + offs, alpha * x + triton.language.load(y_ptr + offs, mask=m), mask=m)

    tuner = triton_nmp.autotune(sk.SCALE_ADD_SPACE[:4], key=["n"], top_k=1.0, cache=tmp_path / "c")(local_kernel)
    with pytest.warns(UserWarning, match="not used for this kernel: kernel 'local_kernel' is defined inside a "
                                         "function.*benchmarking in process"):
        launched, _ = _launch(tuner)
    assert launched > 4


# ------------------------------------------------------------------ Inductor on the configured engine


LATER_COMPILE = """
import json, torch
from triton_nmp.inductor import tuning_stats
from triton_nmp.sweep import integrate
hits = []
lookup = integrate.cached_choice_ms
integrate.cached_choice_ms = lambda bmreq: hits.append(lookup(bmreq)) or hits[-1]
a, b = torch.randn(160, 96), torch.randn(96, 224)
out = torch.compile(lambda x, y: x @ y, backend="nmp", options={"fx_graph_cache": False, "max_autotune": True})(a, b)
torch.testing.assert_close(out, a @ b, atol=1e-4, rtol=1e-4)
print(json.dumps({"hits": sum(h is not None for h in hits), "simulated": tuning_stats().benchmarks}))
"""


def test_inductor_template_choices_on_the_engine_then_from_the_cache(tmp_path, configured, monkeypatch,
                                                                    fresh_inductor):
    from triton_nmp.inductor import reset_tuning_stats, tuning_stats
    from triton_nmp.sweep import integrate
    from triton_nmp.triton_name import cpu_entry_registered

    if not cpu_entry_registered():
        pytest.skip("triton-nmp's Triton entry point 'cpu' is not registered: reinstall (pip install -e .)")
    monkeypatch.setenv("TRITON_NMP_TUNING_CACHE", str(tmp_path / "tc"))
    a, b = torch.randn(160, 96), torch.randn(96, 224)  # shapes no other test compiles (Inductor memoises choices)
    options = {"fx_graph_cache": False, "max_autotune": True}
    counts = {"shipped": 0, "hits": 0, "measured": 0}
    ship, lookup = integrate.InductorEnginePool.benchmark, integrate.cached_choice_ms

    def counting_ship(self, choices):
        counts["shipped"] += len(choices)
        return ship(self, choices)

    def counting_lookup(bmreq):
        ms = lookup(bmreq)
        counts["hits"] += ms is not None
        return ms

    monkeypatch.setattr(integrate.InductorEnginePool, "benchmark", counting_ship)
    monkeypatch.setattr(integrate, "cached_choice_ms", counting_lookup)

    reset_tuning_stats()
    out = torch.compile(lambda x, y: x @ y, backend="nmp", options=options)(a, b)
    torch.testing.assert_close(out, a @ b, atol=1e-4, rtol=1e-4)
    assert counts["shipped"] >= 2 and counts["hits"] == 0
    assert tuning_stats().benchmarks == 0  # every template choice was benchmarked on the pool's workers
    choices = [e for e in TuningCache(tmp_path / "tc").entries() if e.key.space == "inductor-template"]
    assert len(choices) == counts["shipped"] and all(e.best.simulated_seconds > 0 for e in choices)

    # a later compile in another process, Inductor's own caches cold, no engine: the tuning cache serves every
    # choice and nothing is simulated
    later = tmp_path / "later.py"
    later.write_text(LATER_COMPILE)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-2"), "TRITON_NMP_SWEEP_ENGINE": ""}
    done = subprocess.run([sys.executable, str(later)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"hits": len(choices), "simulated": 0}


# ------------------------------------------------------------------------------ recorded sweeps

SCRIPT = '''
import torch, triton, triton.language as tl, triton_nmp

@triton_nmp.autotune(triton_nmp.config_space(tiles={"BLOCK": (256, 1024)}, num_stages=(1,), pu_mapping=(
    "round_robin", "locality")), key=["n"], top_k=1.0, cache=False)
@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

if __name__ == "__main__":
    for n in (3000, 8192, 3000):
        x = torch.randn(n)
        out = torch.empty_like(x)
        double[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
        assert torch.equal(out, 2 * x)
'''


def test_record_a_script_then_sweep_what_it_launched(tmp_path, capsys):
    from triton_nmp.cli import main

    script = tmp_path / "model_run.py"
    script.write_text(SCRIPT)
    recorded = tmp_path / "recorded.json"
    assert main(["tune", "--record", str(recorded), "--", str(script)]) == 0
    assert "recorded 2 kernel launch(es), 8 candidates" in capsys.readouterr().out
    sweep = Sweep.load(recorded)
    assert [c.args["n"] for c in sweep.cases] == [3000, 8192]  # each (kernel, shapes) once
    assert sweep.cases[0].kernel.path == str(script.resolve()) and sweep.cases[0].grids[0] == (12, 1, 1)
    cache = tmp_path / "tc"
    assert main(["tune", str(recorded), "--cache", str(cache), "--no-progress"]) == 0
    assert "8 measured" in capsys.readouterr().out and len(list(TuningCache(cache).entries())) == 2
    assert main(["tune", "--record", str(tmp_path / "x.json")]) == 1
    assert "needs the script to run" in capsys.readouterr().err
