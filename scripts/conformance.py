#!/usr/bin/env python3
"""Run Triton's own language tests on nmp and under Triton's interpreter, and compare.

Triton's `python/test/unit/language/test_core.py` and `test_standard.py` (take them from the Triton
release that is installed, v3.9.0; they are not part of this repository) run with `--device cpu`.
The tests marked `interpreter` are the ones Triton's interpreter is meant to pass on CPU tensors; this
script runs that subset (or every test with --all) twice, in two pytest processes that run side by
side: once on the nmp driver and once with TRITON_INTERPRET=1. It prints, per test function, how many
parametrizations passed, failed, were skipped or timed out in each mode, the totals, and the tests
that pass under the interpreter but not on nmp, with the first line of each error.

    python scripts/conformance.py --tests /path/to/triton/python/test/unit/language
    python scripts/conformance.py --tests DIR -k "test_bin_op or test_reduce" --timeout 60
    python scripts/conformance.py --tests DIR --mode nmp --files test_standard.py

Every test gets a time limit (--timeout, seconds). A test still running then is reported as a
timeout: the pytest process is stopped and restarted after that test, so a hang (in Python code or
in a native kernel) never stops the run. Results stream to a JSON-lines file per mode (--out), so a run
that was interrupted can be summarised again with --report-only. Before a stuck worker is killed its
Python stacks are dumped into <out>/<mode>.log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from pathlib import Path

# ---------------------------------------------------------------------------------------------------
# The pytest plugin each worker process loads: the --device option and fixture of Triton's conftest,
# the interpreter marker, a per-test alarm, resumable result recording.

PLUGIN = textwrap.dedent(
    r'''
    import faulthandler, json, os, signal, time
    import pytest

    # `kill -USR1` dumps every thread's Python stack into the log (the supervisor does so before it
    # kills a worker stuck in a test, so the log shows where it hung)
    _STACKS = open(os.environ.get("NMP_CONFORMANCE_STACKS", os.devnull), "a")
    faulthandler.register(signal.SIGUSR1, file=_STACKS, all_threads=True)

    _OUT = os.environ["NMP_CONFORMANCE_OUT"]
    _DONE = os.environ.get("NMP_CONFORMANCE_DONE", "")
    _TIMEOUT = float(os.environ.get("NMP_CONFORMANCE_TIMEOUT", "0"))


    def _write(rec):
        with open(_OUT, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()


    def pytest_addoption(parser):
        try:
            parser.addoption("--device", action="store", default="cpu")
        except ValueError:  # a conftest of the test tree already defines it
            pass


    def pytest_configure(config):
        config.addinivalue_line("markers", "interpreter: runs under Triton's interpreter")
        config.addinivalue_line("markers", "cpu: runs on CPU")


    @pytest.fixture
    def device(request):
        return request.config.getoption("--device")


    @pytest.fixture
    def fresh_knobs():
        yield


    def pytest_collection_modifyitems(config, items):
        if not _DONE or not os.path.exists(_DONE):
            return
        done = set(open(_DONE).read().split("\n"))
        keep = [it for it in items if it.nodeid not in done]
        if len(keep) != len(items):
            config.hook.pytest_deselected(items=[it for it in items if it.nodeid in done])
            items[:] = keep


    class _Timeout(BaseException):
        pass


    def _alarm(signum, frame):
        raise _Timeout(f"test exceeded {_TIMEOUT:.0f} s")


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        _write({"nodeid": item.nodeid, "event": "start", "t": time.time()})
        yield


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item):
        if _TIMEOUT > 0:
            signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, _TIMEOUT)
        try:
            yield
        finally:
            if _TIMEOUT > 0:
                signal.setitimer(signal.ITIMER_REAL, 0)


    def pytest_runtest_logreport(report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            outcome = report.outcome
            msg = ""
            if report.failed:
                text = str(report.longrepr)
                if "_Timeout" in text or "test exceeded" in text:
                    outcome = "timeout"
                lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
                msg = (lines[0][1:].strip() if lines else text.strip().splitlines()[-1:][0] if text.strip() else "")
            elif report.skipped:
                msg = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
            if hasattr(report, "wasxfail"):
                outcome = "xfail" if report.skipped else "xpass"
            _write({"nodeid": report.nodeid, "event": "result", "outcome": outcome, "msg": msg[:300],
                    "duration": round(report.duration, 3)})
    '''
)

MODES = ("nmp", "interpreter")


def _func_name(nodeid: str) -> str:
    """`test_core.py::test_bin_op[int8-int16-+]` -> `test_core.py::test_bin_op`."""
    return nodeid.split("[", 1)[0]


def _records(path: Path) -> dict[str, dict]:
    """Final state per test id: its result, or 'timeout' for a test that started and never finished."""
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec["event"] == "start":
            out.setdefault(rec["nodeid"], {"outcome": "running", "msg": ""})
        elif rec["event"] == "timeout":
            out[rec["nodeid"]] = {"outcome": "timeout", "msg": rec.get("msg", "")}
        else:
            out[rec["nodeid"]] = rec
    return out


def run_mode(mode: str, args, workdir: Path) -> subprocess.Popen | None:
    """Start (or resume) the pytest worker of one mode; returns the process."""
    out = workdir / f"{mode}.jsonl"
    done = workdir / f"{mode}.done"
    recs = _records(out)
    done.write_text("\n".join(k for k, v in recs.items() if v["outcome"] != "running"))
    env = dict(os.environ)
    env["NMP_CONFORMANCE_OUT"] = str(out)
    env["NMP_CONFORMANCE_DONE"] = str(done)
    env["NMP_CONFORMANCE_TIMEOUT"] = str(args.timeout)
    env["NMP_CONFORMANCE_STACKS"] = str(workdir / f"{mode}.log")
    env["PYTHONPATH"] = os.pathsep.join([str(workdir), str(args.tests), env.get("PYTHONPATH", "")])
    if mode == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
        env.setdefault("TRITON_DEFAULT_BACKEND", "nmp")
    cmd = [sys.executable, "-m", "pytest", *[str(Path(args.tests) / f) for f in args.files], "-p",
           "nmp_conformance_plugin", "-p", "no:cacheprovider", "-q", "--no-header", "-o", "addopts=",
           "--device", "cpu", "-W", "ignore"]
    cmd += ["-p", "no:randomly"] if args.no_randomly else []
    if not args.all:
        cmd += ["-m", "interpreter"]
    if args.k:
        cmd += ["-k", args.k]
    log = open(workdir / f"{mode}.log", "a")
    return subprocess.Popen(cmd, cwd=str(args.tests), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def supervise(args, workdir: Path) -> None:
    """Run every mode to completion: a worker whose current test overran the time limit (a native
    hang the in-process alarm cannot interrupt) is killed, the test marked 'timeout', and restarted."""
    modes = [m for m in MODES if args.mode in (m, "both")]
    procs = {m: run_mode(m, args, workdir) for m in (modes if not args.serial else modes[:1])}
    pending = [] if not args.serial else modes[1:]
    grace = args.timeout * 1.5 + 30
    while procs:
        time.sleep(1)
        for mode, p in list(procs.items()):
            out = workdir / f"{mode}.jsonl"
            if p.poll() is not None:
                recs = _records(out)
                stuck = [k for k, v in recs.items() if v["outcome"] == "running"]
                if stuck and p.returncode not in (0, 1, 5):
                    # the process died inside a test (a crash): record it and go on after it
                    with open(out, "a") as f:
                        for k in stuck:
                            f.write(json.dumps({"nodeid": k, "event": "timeout",
                                                "msg": f"worker died or was killed (exit {p.returncode})"}) + "\n")
                    procs[mode] = run_mode(mode, args, workdir)
                    continue
                del procs[mode]
                if pending:
                    nxt = pending.pop(0)
                    procs[nxt] = run_mode(nxt, args, workdir)
                continue
            # a test that started long ago and has not finished: kill the worker, resume after it
            last_start = None
            for line in reversed(out.read_text().splitlines() if out.exists() else []):
                rec = json.loads(line)
                if rec["event"] == "start":
                    last_start = rec
                    break
                break
            if last_start is not None and time.time() - last_start["t"] > grace:
                with open(workdir / f"{mode}.log", "a") as log:
                    log.write(f"\n=== {last_start['nodeid']} still running after {grace:.0f} s; stacks:\n")
                os.kill(p.pid, signal.SIGUSR1)
                time.sleep(3)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                with open(out, "a") as f:
                    f.write(json.dumps({"nodeid": last_start["nodeid"], "event": "timeout",
                                        "msg": f"no result after {grace:.0f} s (killed)"}) + "\n")
                procs[mode] = run_mode(mode, args, workdir)
        if args.progress:
            counts = {m: len(_records(workdir / f"{m}.jsonl")) for m in modes}
            print("\r" + "  ".join(f"{m}: {c} tests" for m, c in counts.items()), end="", flush=True)
    if args.progress:
        print()


def report(args, workdir: Path) -> int:
    modes = [m for m in MODES if args.mode in (m, "both")]
    recs = {m: _records(workdir / f"{m}.jsonl") for m in modes}
    funcs: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: {m: defaultdict(int) for m in modes})
    for m in modes:
        for nodeid, rec in recs[m].items():
            outcome = rec["outcome"]
            if outcome == "running":
                outcome = "timeout"
            funcs[_func_name(nodeid)][m][outcome] += 1
    cols = ("passed", "failed", "skipped", "timeout")

    def cell(c: dict[str, int]) -> str:
        return "/".join(str(c.get(k, 0)) for k in cols)

    header = f"{'test function':60s} " + " ".join(f"{m + ' ' + '/'.join(k[0] for k in cols):>22s}" for m in modes)
    lines = [header, "-" * len(header)]
    totals = {m: defaultdict(int) for m in modes}
    for name in sorted(funcs):
        row = f"{name[-60:]:60s} "
        for m in modes:
            row += f"{cell(funcs[name][m]):>22s} "
            for k, v in funcs[name][m].items():
                totals[m][k] += v
        lines.append(row.rstrip())
    lines.append("-" * len(header))
    lines.append(f"{'total':60s} " + " ".join(f"{cell(totals[m]):>22s}" for m in modes))
    for m in modes:
        t = totals[m]
        ran = t.get("passed", 0) + t.get("failed", 0) + t.get("timeout", 0)
        rate = 100.0 * t.get("passed", 0) / ran if ran else 0.0
        lines.append(f"{m}: {t.get('passed', 0)} passed, {t.get('failed', 0)} failed, {t.get('skipped', 0)} skipped, "
                     f"{t.get('timeout', 0)} timed out ({rate:.1f}% of those that ran)")
    if len(modes) == 2:
        gaps = [(k, r) for k, r in recs["nmp"].items()
                if r["outcome"] in ("failed", "timeout", "running")
                and recs["interpreter"].get(k, {}).get("outcome") == "passed"]
        lines.append(f"\npass under the interpreter, not on nmp: {len(gaps)}")
        by_msg: dict[str, list[str]] = defaultdict(list)
        for k, r in gaps:
            by_msg[(r.get("msg") or r["outcome"])[:160]].append(k)
        for msg, ids in sorted(by_msg.items(), key=lambda kv: -len(kv[1]))[: args.max_gaps]:
            lines.append(f"  {len(ids):5d} x {msg}")
            lines.append(f"          e.g. {ids[0]}")
    text = "\n".join(lines)
    print(text)
    (workdir / "summary.txt").write_text(text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", required=True, type=Path,
                    help="folder holding Triton's test_core.py and test_standard.py (python/test/unit/language)")
    ap.add_argument("--files", nargs="+", default=["test_core.py", "test_standard.py"])
    ap.add_argument("-k", default="", help="pytest -k expression selecting tests")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test (default 120)")
    ap.add_argument("--mode", choices=("both", "nmp", "interpreter"), default="both")
    ap.add_argument("--all", action="store_true", help="also run tests not marked 'interpreter'")
    ap.add_argument("--serial", action="store_true", help="run the modes one after the other (default: in parallel)")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: a new temporary folder)")
    ap.add_argument("--report-only", action="store_true", help="summarise the results already in --out")
    ap.add_argument("--max-gaps", type=int, default=40, help="distinct failure messages to list")
    ap.add_argument("--no-randomly", action="store_true", help="pass -p no:randomly (if pytest-randomly is installed)")
    ap.add_argument("--quiet", dest="progress", action="store_false", help="no progress line")
    args = ap.parse_args(argv)
    args.tests = args.tests.resolve()
    missing = [f for f in args.files if not (args.tests / f).exists()]
    if missing:
        ap.error(f"{', '.join(missing)} not found in {args.tests}")
    workdir = args.out or Path(tempfile.mkdtemp(prefix="nmp_conformance_"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "nmp_conformance_plugin.py").write_text(PLUGIN)
    if not args.report_only:
        t0 = time.time()
        supervise(args, workdir)
        print(f"ran in {time.time() - t0:.0f} s; results in {workdir}")
    return report(args, workdir)


if __name__ == "__main__":
    sys.exit(main())
