"""Thread safety: concurrent compilation (LLVM worker pool), loading, launching and profiling.

The cold multi-thread and multi-process stress runs `scripts/thread_stress.py` in fresh processes
with fresh cache directories (the same script runs the long goal: 100 cold runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from triton_nmp.backend import llvm_target
from triton_nmp.errors import NMPCompilationError
from triton_nmp.simulator import loader

ROOT = Path(__file__).resolve().parents[1]
STRESS = ROOT / "scripts" / "thread_stress.py"

_IR = """
define i32 @nmp_threads_probe(i32 %a) {
  %b = mul i32 %a, %a
  ret i32 %b
}
"""


def _stress(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, str(STRESS), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def test_cold_eight_thread_stress():
    out = _stress("--runs", "1", "--threads", "8")
    assert "0 wrong results, 0 errors, 0 stalls, 0 failed runs" in out


def test_processes_share_one_cache_dir():
    out = _stress("--runs", "1", "--threads", "2", "--processes", "3")
    assert "0 wrong results, 0 errors, 0 stalls, 0 failed runs" in out


def test_pool_lends_each_thread_its_own_worker(monkeypatch):
    monkeypatch.setenv("TRITON_NMP_LLVM_WORKERS", "3")
    pool = llvm_target._WorkerPool()
    held, release = [], threading.Event()
    ready = threading.Barrier(4)

    def hold():
        with pool.take() as w:
            held.append(w)
            ready.wait(timeout=30)
            release.wait(timeout=30)

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for t in threads:
        t.start()
    ready.wait(timeout=30)
    try:
        assert len({id(w) for w in held}) == 3  # three threads, three workers, nobody shares pipes
        assert pool.spawned == 3
    finally:
        release.set()
        for t in threads:
            t.join()
        pool.close()


def test_pool_caps_workers_and_reuses_them(monkeypatch):
    monkeypatch.setenv("TRITON_NMP_LLVM_WORKERS", "1")
    pool = llvm_target._WorkerPool()
    try:
        with pool.take() as a:
            reply = a.request(("optimize", _IR, llvm_target.cpu_name(), 1, True), 60)
        with pool.take() as b:
            assert b is a
        assert reply[0] == "ok" and "mul" in reply[1] and reply[2][:4] == b"\x7fELF"
        assert pool.spawned == 1
    finally:
        pool.close()


def test_worker_crash_is_recovered_with_a_warning(monkeypatch):
    pool = llvm_target._WorkerPool()
    monkeypatch.setattr(llvm_target, "_pool", pool)
    request, calls = llvm_target._Worker.request, []

    def dies_first_time(self, req, timeout):
        calls.append(req[4])  # ("optimize", ir, cpu, opt_level, vectorize, codegen_level)
        if len(calls) == 1:  # as if LLVM aborted while vectorising: the worker is gone mid-request
            self.proc.kill()
            self.proc.wait()
        return request(self, req, timeout)

    monkeypatch.setattr(llvm_target._Worker, "request", dies_first_time)
    with pytest.warns(UserWarning, match="LLVM crashed while vectorising kernel 'probe'.*without loop vectorisation"):
        text = llvm_target.optimize(_IR, "probe")
    assert "nmp_threads_probe" in text
    assert calls == [True, False]  # vectorising, then again without, in a fresh worker
    assert pool.spawned == 2
    assert llvm_target.emit_object(text, "probe")[:4] == b"\x7fELF"
    pool.close()


def test_worker_timeout_is_reported_as_time_not_crash(monkeypatch):
    pool = llvm_target._WorkerPool()
    monkeypatch.setattr(llvm_target, "_pool", pool)
    monkeypatch.setenv("TRITON_NMP_LLVM_TIMEOUT", "0")
    with pytest.warns(UserWarning, match="did not finish optimising kernel 'slow' within 0 s"):
        with pytest.raises(NMPCompilationError, match="kernel 'slow': LLVM did not finish optimising this kernel "
                                                      "within 0 s.*raise TRITON_NMP_LLVM_TIMEOUT"):
            llvm_target.optimize(_IR, "slow")
    pool.close()


@pytest.mark.parametrize("guard", ["1", "0"])
def test_ir_that_does_not_verify_is_a_compiler_bug_error(monkeypatch, guard):
    monkeypatch.setenv("TRITON_NMP_LLVM_GUARD", guard)
    with pytest.raises(NMPCompilationError, match="kernel 'bad': generated LLVM IR does not verify"):
        llvm_target.optimize("define i32 @f() {\n  ret i64 0\n}\n", "bad")


def test_in_process_compilation_from_threads(monkeypatch):
    monkeypatch.setenv("TRITON_NMP_LLVM_GUARD", "0")
    outs: list[str] = []

    def work(i: int) -> None:
        outs.append(llvm_target.optimize(_IR.replace("probe", f"probe{i}"), f"k{i}"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outs) == 6
    assert all(sum(f"@probe{i}(" in o or f"@nmp_threads_probe{i}(" in o for o in outs) == 1 for i in range(6))


def _object_bytes(name: str) -> bytes:
    text = llvm_target.optimize(_IR.replace("nmp_threads_probe", name), name)
    return llvm_target.emit_object(text, name)


def test_loader_shares_one_object_between_concurrent_loads():
    data = _object_bytes("nmp_shared_probe")
    objs: list[loader.LoadedObject] = []
    barrier = threading.Barrier(4)

    def load() -> None:
        barrier.wait(timeout=30)
        objs.append(loader.load_object(data, "nmp_shared_probe"))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = objs[0]
    assert all(o is first for o in objs) and first.refs == 4
    for o in objs[:3]:
        o.close()
    assert not first.closed and first.address("nmp_shared_probe")  # still callable by its last holder
    objs[3].close()
    assert first.closed
    with pytest.raises(loader.NMPLoadError, match="the object of kernel 'nmp_shared_probe' was unloaded"):
        first.address("nmp_shared_probe")


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * C, mask=m)


def test_launches_and_profile_from_threads():
    """Warm launches of several specialisations from 6 threads: every result right, every launch profiled."""
    import triton_nmp

    n, block, reps = 1000, 128, 5
    for c in range(1, 4):  # compile first: this test is about launching
        _scale_kernel[(triton.cdiv(n, block),)](torch.ones(n), torch.empty(n), n, C=c, BLOCK=block)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            x = torch.randn(n)
            for _ in range(reps):
                out = torch.empty(n)
                c = i % 3 + 1
                _scale_kernel[(triton.cdiv(n, block),)](x, out, n, C=c, BLOCK=block)
                torch.testing.assert_close(out, x * c)
        except BaseException as e:
            errors.append(e)

    with triton_nmp.profile() as prof:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert len(prof.launches) == 6 * reps
    assert all(rec.cycles > 0 for rec in prof.launches)


def test_forked_child_compiles_with_its_own_workers():
    code = (
        "import os, torch, triton, triton.language as tl\n"
        "from triton_nmp.backend import llvm_target\n"
        "llvm_target.prewarm()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    assert not llvm_target._pool._idle\n"
        "    text = llvm_target.optimize(" + repr(_IR) + ", 'child')\n"
        "    os._exit(0 if 'nmp_threads_probe' in text else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "assert os.waitstatus_to_exitcode(status) == 0, status\n"
        "print('ok', llvm_target.optimize(" + repr(_IR) + ", 'parent').count('mul'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok 1"
