"""The persistent tuning cache on disk: file format, corrupt and foreign files, concurrent writers
(separate processes), merging, and the `triton-nmp cache` command functions."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import warnings
from typing import Any

import pytest

from triton_nmp.placement import place
from triton_nmp.tuning import TuningCache, TuningCacheWarning, autotune
from triton_nmp.tuning.cache import FORMAT, Candidate, Entry, EntryKey
from triton_nmp.tuning_cli import args_cache, cmd_cache


def make_key(n: int, kernel: str = "k", policy: str = "interleaved") -> EntryKey:
    return EntryKey(kernel=kernel, source_hash="ab" * 32, key={"n": n}, dtypes={"x": "torch.float32"},
                    target="nmp-64", target_hash="cd" * 32, placements={"x": [policy, None, 1024]},
                    space="0123456789abcdef", version="0.1.0")


def make_entry(n: int, blocks=(64, 128), winner_block=128, simulated=True, kernel: str = "k") -> Entry:
    cands = [Candidate({"kwargs": {"BLOCK": b}, "options": {"num_stages": 1}}, simulated,
                       (1e-6 / b) if simulated else None, 1.1e-6 / b, [n // b, 1, 1]) for b in blocks]
    return Entry(make_key(n, kernel), cands, list(blocks).index(winner_block), args={"n": n})


def _writer(directory: str, first: int, count: int, shared_block: int) -> None:
    """One tuner process: its own entries, plus a candidate for an entry every process shares."""
    cache = TuningCache(directory)
    for i in range(first, first + count):
        cache.store(make_entry(i))
        cache.store(make_entry(10_000, blocks=(shared_block,), winner_block=shared_block))


# -------------------------------------------------------------------------------- file format


def test_store_and_lookup_one_file_per_entry(tmp_path):
    cache = TuningCache(tmp_path)
    path = cache.store(make_entry(1024))
    assert path.parent.name == "k-" + "ab" * 8 and path.name == make_key(1024).digest() + ".json"
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["winner"] == 1
    assert data["candidates"][0]["config"] == {"kwargs": {"BLOCK": 64}, "options": {"num_stages": 1}}
    hit = cache.lookup(make_key(1024))
    assert hit is not None and hit.best.config["kwargs"]["BLOCK"] == 128
    assert cache.lookup(make_key(2048)) is None
    assert cache.lookup(make_key(1024, policy="blocked")) is None
    assert not list(tmp_path.glob("**/*.tmp"))  # the temp file became the entry


def test_infinite_times_are_stored_as_null(tmp_path):
    entry = make_entry(64)
    entry.candidates[0].simulated_seconds = float("inf")
    path = TuningCache(tmp_path).store(entry)
    assert "Infinity" not in path.read_text()
    assert TuningCache(tmp_path).lookup(make_key(64)).candidates[0].simulated_seconds is None


@pytest.mark.parametrize("content", [
    "{ not json",
    json.dumps({"format": FORMAT, "schema": 999, "entries": {}}),
    json.dumps({"format": "someone-else", "schema": 1}),
    json.dumps([1, 2, 3]),
])
def test_corrupt_or_foreign_file_is_ignored_with_a_warning_and_rewritten(tmp_path, content):
    cache = TuningCache(tmp_path)
    path = cache.store(make_entry(512))
    path.write_text(content)
    with pytest.warns(TuningCacheWarning, match="ignoring tuning cache file"):
        assert TuningCache(tmp_path).lookup(make_key(512)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewrite itself is silent
        TuningCache(tmp_path).store(make_entry(512))
    assert Entry.from_json(json.loads(path.read_text())).id == make_key(512).digest()


def test_entry_whose_id_does_not_match_its_key_is_foreign(tmp_path):
    path = TuningCache(tmp_path).store(make_entry(8))
    data = json.loads(path.read_text())
    data["key"]["key"] = {"n": 9}  # edited by hand: would select a config for the wrong shape
    path.write_text(json.dumps(data))
    with pytest.warns(TuningCacheWarning, match="does not match"):
        assert TuningCache(tmp_path).lookup(make_key(8)) is None


def test_corrupt_file_during_autotune_warns_retunes_and_rewrites(tmp_path):
    import torch

    from tests.test_tuning import CountingBench, _space, check, fake_model, grid, tuned_shift

    n = 4096
    x, y, out = (place(t, "interleaved") for t in (torch.randn(n), torch.randn(n), torch.empty(n)))
    cache_dir = tmp_path / "c"
    autotune(_space(), key=["n"], top_k=2, model=fake_model, cache=cache_dir, do_bench=CountingBench())(
        tuned_shift)[grid](x, y, out, n)
    (path,) = cache_dir.glob("*/*.json")
    path.write_text('{"format": "triton-nmp-tuning-cache", "schema": 1, "candid')  # a torn write from elsewhere
    bench = CountingBench()
    kernel = autotune(_space(), key=["n"], top_k=2, model=fake_model, cache=cache_dir, do_bench=bench)(tuned_shift)
    with pytest.warns(TuningCacheWarning):
        kernel[grid](x, y, out, n)
    check(out, x, y, kernel)
    assert kernel.last_lookup.source == "tuned" and bench.calls == 2
    assert Entry.from_json(json.loads(path.read_text())).best.config["kwargs"]["BLOCK"] == 4096


# -------------------------------------------------------------------------------- concurrency


def test_concurrent_writer_processes_keep_every_entry(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), first, 15, block))
             for first, block in ((0, 32), (100, 64))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = TuningCache(tmp_path)
    entries = {e.key.key["n"]: e for e in cache.entries()}
    assert set(entries) == set(range(15)) | set(range(100, 115)) | {10_000}
    shared = entries[10_000]  # both processes' candidates, merged under the lock
    assert sorted(c.config["kwargs"]["BLOCK"] for c in shared.candidates) == [32, 64]
    assert shared.best.config["kwargs"]["BLOCK"] == 64  # fastest measured of the union
    assert not list(tmp_path.glob("**/*.tmp"))


def test_merge_prefers_measurements_over_predictions(tmp_path):
    cache = TuningCache(tmp_path)
    cache.store(make_entry(7, blocks=(64, 128), winner_block=128))
    cache.store(make_entry(7, blocks=(64, 256), winner_block=64, simulated=False))  # a predict-only rerun
    merged = cache.lookup(make_key(7))
    by_block = {c.config["kwargs"]["BLOCK"]: c for c in merged.candidates}
    assert set(by_block) == {64, 128, 256}
    assert by_block[64].simulated and not by_block[256].simulated
    assert merged.best.config["kwargs"]["BLOCK"] == 128


# ---------------------------------------------------------------------------------------- CLI


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="triton-nmp cache")
    args_cache(parser)
    return cmd_cache(parser.parse_args(list(argv)))


def test_cli_ls_show_export_clear(tmp_path, capsys, monkeypatch):
    cache = TuningCache(tmp_path)
    cache.store(make_entry(256, kernel="alpha"))
    cache.store(make_entry(512, kernel="beta"))
    d = str(tmp_path)

    assert _cli("--dir", d, "ls") == 0
    out = capsys.readouterr().out
    assert "2 entries" in out and "alpha" in out and "beta" in out and "BLOCK=128" in out

    entry_id = make_key(512, "beta").digest()
    assert _cli("--dir", d, "show", entry_id[:8]) == 0
    out = capsys.readouterr().out
    assert f"entry {entry_id}" in out and "kernel beta" in out and "n=512" in out
    assert out.index("BLOCK=128") < out.index("BLOCK=64")  # fastest first
    assert _cli("--dir", d, "show", "alpha") == 0  # by kernel name
    assert "kernel alpha" in capsys.readouterr().out
    from triton_nmp.errors import NMPError

    with pytest.raises(NMPError, match="no tuning cache entry"):
        _cli("--dir", d, "show", "nosuchthing")

    assert _cli("--dir", d, "export", str(tmp_path / "out.csv")) == 0
    assert "wrote 4 rows" in capsys.readouterr().out
    assert (tmp_path / "out.csv").read_text().count("\n") == 5

    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(NMPError, match="without --yes"):
        _cli("--dir", d, "clear")
    assert len(list(cache.entries())) == 2
    assert _cli("--dir", d, "clear", "--yes") == 0
    assert "deleted 2 files" in capsys.readouterr().out
    assert list(TuningCache(tmp_path).entries()) == []


def test_cli_uses_the_environment_cache_by_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TUNING_CACHE", str(tmp_path))
    TuningCache().store(make_entry(64))
    assert _cli("ls") == 0
    assert f"tuning cache {tmp_path}: 1 entry" in capsys.readouterr().out


# -------------------------------------------------------------------------------- temp files of killed writers


def _leave_temp(directory, name: str, age_s: float):
    """A temp file as a writer killed mid-write leaves it, last written `age_s` seconds ago."""
    import os
    import time

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text('{"format": "triton-nmp-tuning-cache", "candid')
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def test_store_collects_stale_temp_files_but_never_fresh_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TUNING_TMP_AGE", "600")
    cache = TuningCache(tmp_path)
    own_dir = cache.kernel_dir(make_key(1))
    other_dir = cache.kernel_dir(make_key(1, kernel="other"))
    stale = [_leave_temp(own_dir, ".aaaa.x1.tmp", 3600), _leave_temp(other_dir, ".bbbb.x2.tmp", 601)]
    fresh = [_leave_temp(own_dir, ".cccc.x3.tmp", 5), _leave_temp(other_dir, ".dddd.x4.tmp", 599)]
    assert {t.path for t in cache.stale_temp_files()} == set(stale)
    cache.store(make_entry(1))
    assert not any(p.exists() for p in stale)  # in the stored entry's folder and in every other one
    assert all(p.exists() for p in fresh)  # may belong to a live writer
    assert cache.stale_temp_files() == []
    assert cache.lookup(make_key(1)) is not None


def test_cache_ls_reports_stale_temp_files(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TUNING_TMP_AGE", "60")
    cache = TuningCache(tmp_path)
    cache.store(make_entry(7))
    _leave_temp(cache.kernel_dir(make_key(7)), ".eeee.x5.tmp", 120)
    capsys.readouterr()
    assert _cli("--dir", str(tmp_path), "ls") == 0
    out = capsys.readouterr().out
    assert ("1 stale temporary file (0.0 MB) left by killed writers, older than 60 s: "
            "the next store collects them") in out


def test_bad_temp_age_setting_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_NMP_TUNING_TMP_AGE", "soon")
    with pytest.raises(ValueError, match="TRITON_NMP_TUNING_TMP_AGE='soon' is not a number of seconds"):
        TuningCache(tmp_path).store(make_entry(3))


def _writer_stopped_mid_write(directory: str, stopped: Any) -> None:
    """Store five entries, then rewrite the first and stop halfway through its temp file (setting `stopped`)
    until the parent SIGKILLs this process there. Stopping on purpose, not killing at a random moment: a kill
    racing the writer lands after its rename as often as not on a loaded machine."""
    import json
    import time

    cache = TuningCache(directory)
    for i in range(5):
        cache.store(make_entry(100 + i))

    def half_dump(obj: Any, f: Any, **kw: Any) -> None:
        text = json.dumps(obj, **kw)
        f.write(text[: len(text) // 2])
        f.flush()
        stopped.set()
        time.sleep(600)

    json.dump = half_dump
    cache.store(make_entry(100, blocks=(256,), winner_block=256))


def test_writers_killed_mid_write_leave_nothing_after_the_age_limit(tmp_path, monkeypatch):
    import os
    import signal
    import time

    ctx = multiprocessing.get_context("spawn")
    stopped = ctx.Event()
    p = ctx.Process(target=_writer_stopped_mid_write, args=(str(tmp_path), stopped))
    p.start()
    try:
        assert stopped.wait(120), "the writer never reached its temp file"
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.join()
    (left,) = tmp_path.glob("*/.*.tmp")
    assert 0 < left.stat().st_size
    cache = TuningCache(tmp_path)
    assert [c.config["kwargs"]["BLOCK"] for c in cache.lookup(make_key(100)).candidates] == [64, 128]  # whole
    cache.store(make_entry(1))  # the dead writer's lock is free; its young temp file is left alone
    assert list(tmp_path.glob("*/.*.tmp")) == [left]
    time.sleep(0.05)
    monkeypatch.setenv("TRITON_NMP_TUNING_TMP_AGE", "0.01")
    cache = TuningCache(tmp_path)
    cache.store(make_entry(2))
    assert list(tmp_path.glob("*/.*.tmp")) == []
    assert sorted(e.key.key["n"] for e in cache.entries()) == [1, 2, 100, 101, 102, 103, 104]  # all readable
