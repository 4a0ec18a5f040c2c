"""The watchdog: endless kernels stop within their limit with the trace on and off, Ctrl-C interrupts a
long simulation cleanly, and the limits are knobs with clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from triton_nmp.errors import NMPRuntimeError, NMPTimeoutError
from triton_nmp.simulator import runtime, watchdog


@triton.jit
def spin_kernel(flag_ptr, out_ptr):
    v = tl.load(flag_ptr)
    i = 0
    while v == 0:  # nothing ever writes the flag
        v = tl.load(flag_ptr)
        i += 1
    tl.store(out_ptr, i)


@triton.jit
def busy_kernel(x_ptr, out_ptr, n_iter, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(n_iter):
        acc += tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, acc)


@pytest.fixture
def limits():
    old = triton_nmp.set_watchdog()
    yield
    triton_nmp.set_watchdog(max_seconds=old.max_seconds, max_cycles=old.max_cycles)


@pytest.fixture(params=[True, False], ids=["trace_on", "trace_off"])
def tracing(request, monkeypatch):
    monkeypatch.setattr(runtime, "tracing_enabled", request.param)
    return request.param


def _spin_line() -> int:
    import inspect

    src, first = inspect.getsourcelines(spin_kernel.fn)
    return first + next(i for i, line in enumerate(src) if "while v == 0" in line)


def test_endless_kernel_stops_within_its_limit(limits, tracing):
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    spin_kernel[(1,)](torch.ones(1, dtype=torch.int32), out)  # compile outside the timed part
    triton_nmp.set_watchdog(max_seconds=0.3)
    t0 = time.monotonic()
    with pytest.raises(NMPRuntimeError) as info:
        spin_kernel[(1,)](flag, out)
    took = time.monotonic() - t0
    assert took < 5.0
    if isinstance(info.value, NMPTimeoutError):
        msg = str(info.value)
        assert "kernel 'spin_kernel': stopped by the watchdog after more than 0.3 s of host time " \
               "(TRITON_NMP_MAX_SECONDS), in program (0, 0, 0) at " in msg
        assert f"test_watchdog.py:{_spin_line()}:" in msg
        assert "triton_nmp.set_watchdog(max_seconds=...)" in msg
        assert info.value.program_id == (0, 0, 0)
    else:  # with the trace on, a spin loop that records memory traffic may fill the trace first
        assert tracing
        assert "execution trace exceeded its limit" in str(info.value)
        assert "the watchdog's limits still apply" in str(info.value)
    # the process is fine afterwards: the same kernel runs when it can end
    spin_kernel[(1,)](torch.ones(1, dtype=torch.int32), out)
    assert out.item() == 0


def test_simulated_cycle_limit(limits):
    x, out = torch.ones(1024), torch.empty(1024)
    busy_kernel[(1,)](x, out, 3, BLOCK=1024)
    torch.testing.assert_close(out, torch.full((1024,), 3.0))
    # 4 KiB per iteration at 16 B/cycle x 64 PUs: 2,000,000 iterations bound the launch at >= 8e6 cycles
    triton_nmp.set_watchdog(max_cycles=1e6)
    expected = (r"kernel 'busy_kernel': stopped by the watchdog after more than 1e\+06 simulated cycles "
                r"\(TRITON_NMP_MAX_CYCLES\), in program \(0, 0, 0\) at .*test_watchdog.py:\d+.*"
                r"set_watchdog\(max_cycles=\.\.\.\)")
    with pytest.raises(NMPTimeoutError, match=expected):
        busy_kernel[(1,)](x, out, 2_000_000, BLOCK=1024)
    triton_nmp.set_watchdog(max_cycles=0)  # disabled: a long but finite kernel runs
    busy_kernel[(1,)](x, out, 3000, BLOCK=1024)
    torch.testing.assert_close(out, torch.full((1024,), 3000.0))


def test_grid_loop_is_watched_between_programs(limits):
    """Each program ends quickly, but a grid of them takes longer than the limit."""
    x, out = torch.ones(1024), torch.empty(1024)
    busy_kernel[(1,)](x, out, 1, BLOCK=1024)
    triton_nmp.set_watchdog(max_cycles=1e5)
    with pytest.raises(NMPTimeoutError, match=r"simulated cycles .*, in program \(\d+, 0, 0\) at "):
        busy_kernel[(100_000,)](x, out, 1, BLOCK=1024)


def test_limit_applies_in_other_threads(limits):
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    spin_kernel[(1,)](torch.ones(1, dtype=torch.int32), out)
    triton_nmp.set_watchdog(max_seconds=0.3)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            spin_kernel[(1,)](flag, out)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive() and len(errors) == 1
    assert isinstance(errors[0], NMPRuntimeError)


def test_bad_limits_are_named(limits, monkeypatch):
    with pytest.raises(ValueError, match=r"set_watchdog\(max_seconds=-1\): expected a number >= 0"):
        triton_nmp.set_watchdog(max_seconds=-1)
    monkeypatch.setattr(watchdog, "_limits", None)
    monkeypatch.setenv("TRITON_NMP_MAX_SECONDS", "forever")
    with pytest.raises(ValueError, match="TRITON_NMP_MAX_SECONDS='forever' is not a number"):
        watchdog.watchdog_limits()


CTRL_C_CHILD = textwrap.dedent("""
    import sys, time, torch, triton, triton.language as tl
    sys.path.insert(0, {tests!r})
    from test_watchdog import spin_kernel
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    spin_kernel[(1,)](torch.ones(1, dtype=torch.int32), out)
    print("running", flush=True)
    t0 = time.monotonic()
    try:
        spin_kernel[(1,)](flag, out)
    except KeyboardInterrupt:
        print(f"interrupted after {{time.monotonic() - t0:.2f}} s", flush=True)
    spin_kernel[(1,)](torch.ones(1, dtype=torch.int32), out)  # still usable afterwards
    print("ok", out.item(), flush=True)
""")


@pytest.mark.parametrize("trace", ["1", "0"])
def test_ctrl_c_interrupts_a_long_simulation(trace):
    code = CTRL_C_CHILD.format(tests=os.path.dirname(__file__))
    env = dict(os.environ, TRITON_NMP_TRACE=trace, TRITON_NMP_MAX_SECONDS="0", TRITON_NMP_MAX_CYCLES="0")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[0].startswith("interrupted after ") or "execution trace exceeded" in err, (out, err[-2000:])
    assert lines[-1] == "ok 0"
