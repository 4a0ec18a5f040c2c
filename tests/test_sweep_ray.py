"""The Ray engine on an embedded local cluster sized for a 2-core machine (skipped without Ray: the process
pool, which keeps the same engine contract, is tested in test_sweep.py)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.test_sweep import entry_times, scale_add_sweep
from triton_nmp.sweep import run_sweep
from triton_nmp.sweep.ray_engine import RAY_REQUIREMENT, ray_available
from triton_nmp.tuning.cache import TuningCache

pytestmark = pytest.mark.skipif(not ray_available(), reason=f"Ray is not installed (pip install 'triton-nmp[ray]' "
                                                            f"or {RAY_REQUIREMENT}); the process-pool engine is "
                                                            f"tested in tests/test_sweep.py instead")

SMALL = [{"kwargs": {"BLOCK": b, "pu_mapping": "round_robin"}, "num_stages": 1} for b in (256, 1024)]


@pytest.fixture(scope="module")
def ray_engine():
    from triton_nmp.sweep.ray_engine import RayEngine

    engine = RayEngine("auto", workers=2)
    yield engine
    engine.close()


def test_ray_smoke_same_picks_as_in_process(tmp_path, ray_engine):
    ref_cache, cache = TuningCache(tmp_path / "ref"), TuningCache(tmp_path / "ray")
    ref = run_sweep(scale_add_sweep(configs=SMALL), cache=ref_cache, progress=False)
    report = run_sweep(scale_add_sweep(configs=SMALL), ray_engine, cache, progress=False)
    assert ray_engine.workers == 2 and "embedded local cluster" in report.engine
    assert report.measured == len(SMALL) and report.picks() == ref.picks()
    assert entry_times(cache) == entry_times(ref_cache)


@pytest.mark.slow
def test_ray_worker_killed_halfway_every_result_stored(tmp_path, ray_engine):
    ref_cache, cache = TuningCache(tmp_path / "ref"), TuningCache(tmp_path / "ray")
    ref = run_sweep(scale_add_sweep(), cache=ref_cache, progress=False)
    killed = []

    def kill_one_halfway(task, result, done, total):
        if not killed and done >= total // 2:
            pid = int(result.worker.rpartition(":")[2])  # busy with its next candidate by now
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    report = run_sweep(scale_add_sweep(), ray_engine, cache, progress=False, on_result=kill_one_halfway)
    assert killed and report.retries >= 1
    assert report.picks() == ref.picks() and entry_times(cache) == entry_times(ref_cache)


def test_joining_an_address_nothing_listens_at_fails_fast():
    import socket

    from triton_nmp.sweep import NMPSweepError
    from triton_nmp.sweep.ray_engine import RayEngine

    with socket.socket() as s:  # a loopback port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NMPSweepError, match=f"cannot reach the Ray cluster at '127.0.0.1:{port}'"):
        RayEngine(f"127.0.0.1:{port}")
    with pytest.raises(NMPSweepError, match="expected 'auto' or a cluster address HOST:PORT"):
        RayEngine("somewhere")
