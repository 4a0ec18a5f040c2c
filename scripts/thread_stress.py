"""Stress compilation and launch from many threads (and processes) at once, checking every result.

Each run is cold: a fresh process, a fresh Triton cache directory and kernels whose source no cache
has seen. Per run, three scenarios start their threads together (a barrier) so first launches
(compile, LLVM, load) overlap as much as possible:

  different   thread i compiles and launches its own kernel k_i
  specialise  thread i launches one kernel with constexpr C = i (one specialisation per thread)
  same        every thread launches one kernel with one specialisation (one compiled kernel, its
              handles initialised by whichever threads get there)

Each thread then launches its kernel a few more times; every output is compared with torch, and a
profile around the run must have recorded every launch. A thread that does not finish within
--stall-seconds counts as a stall.

    python scripts/thread_stress.py --runs 100 --threads 8          # the reliability goal
    python scripts/thread_stress.py --runs 3 --processes 3          # processes sharing one cache dir

Exit status 0 only when every run had 0 wrong results, 0 errors and 0 stalls.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

N = 3000  # not a multiple of BLOCK: masks matter
REPEATS = 3


@dataclass
class RunResult:
    launches: int = 0
    wrong: int = 0
    errors: list[str] = field(default_factory=list)
    stalls: int = 0
    profiled: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.wrong == 0 and not self.errors and self.stalls == 0 and self.profiled == self.launches


def _kernel_module(threads: int, salt: str, folder: Path):
    """Write and import a module of fresh kernels (the salt makes their source new to every cache)."""
    parts = [
        "import triton\nimport triton.language as tl\n",
        textwrap.dedent(f"""
        @triton.jit
        def spec_kernel(x_ptr, out_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
            # salt {salt}
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * C + 1.0, mask=m)

        @triton.jit
        def same_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            # salt {salt}
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            x = tl.load(x_ptr + offs, mask=m)
            tl.store(out_ptr + offs, x * x - tl.load(y_ptr + offs, mask=m), mask=m)
        """),
    ]
    for i in range(threads):
        parts.append(textwrap.dedent(f"""
        @triton.jit
        def k{i}(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            # salt {salt}
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * {i + 2}.0 + tl.load(y_ptr + offs, mask=m),
                     mask=m)
        """))
    path = folder / f"stress_kernels_{salt}.py"
    path.write_text("".join(parts))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def run_once(threads: int, stall_seconds: float) -> RunResult:
    """One cold run of the three scenarios in this process."""
    import torch
    import triton

    import triton_nmp

    folder = Path(tempfile.mkdtemp(prefix="nmp-stress-"))
    kernels = _kernel_module(threads, uuid.uuid4().hex[:12], folder)
    result = RunResult()
    lock = threading.Lock()
    block = 256
    grid = (triton.cdiv(N, block),)

    def scenario(name: str, work) -> None:
        barrier = threading.Barrier(threads)

        def body(i: int) -> None:
            try:
                x, y = torch.randn(N, generator=torch.Generator().manual_seed(i)), torch.randn(N)
                barrier.wait(timeout=stall_seconds)
                for _ in range(REPEATS):
                    out = torch.empty(N)
                    expected = work(i, x, y, out)
                    bad = int((~torch.isclose(out, expected, rtol=1e-6, atol=1e-6)).sum())
                    with lock:
                        result.launches += 1
                        result.wrong += bad
            except Exception:
                with lock:
                    result.errors.append(f"{name}[{i}]: {traceback.format_exc(limit=4)}")

        pool = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(threads)]
        for t in pool:
            t.start()
        deadline = time.monotonic() + stall_seconds
        for t in pool:
            t.join(max(deadline - time.monotonic(), 0))
        with lock:
            result.stalls += sum(t.is_alive() for t in pool)

    def different(i, x, y, out):
        getattr(kernels, f"k{i}")[grid](x, y, out, N, BLOCK=block)
        return x * (i + 2) + y

    def specialise(i, x, y, out):
        kernels.spec_kernel[grid](x, out, N, C=i + 1, BLOCK=block)
        return x * (i + 1) + 1.0

    def same(i, x, y, out):
        kernels.same_kernel[grid](x, y, out, N, BLOCK=block)
        return x * x - y

    t0 = time.perf_counter()
    with triton_nmp.profile() as prof:
        for name, work in (("different", different), ("specialise", specialise), ("same", same)):
            scenario(name, work)
    result.profiled = len(prof.launches)
    result.seconds = time.perf_counter() - t0
    return result


def _child(args: argparse.Namespace, cache_dir: str) -> subprocess.Popen:
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    cmd = [sys.executable, __file__, "--one", "--threads", str(args.threads),
           "--stall-seconds", str(args.stall_seconds)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="cold runs, each in a fresh process and cache dir")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--processes", type=int, default=1, help="processes per run, sharing one Triton cache dir")
    ap.add_argument("--stall-seconds", type=float, default=120.0, help="a thread running longer is a stall")
    ap.add_argument("--one", action="store_true", help="(internal) one run in this process, JSON on stdout")
    args = ap.parse_args(argv)
    if args.one:
        res = run_once(args.threads, args.stall_seconds)
        print(json.dumps(asdict(res)))
        sys.stdout.flush()
        os._exit(0 if res.ok else 1)  # a stalled daemon thread must not keep the process alive

    totals = RunResult()
    failed_runs = 0
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="nmp-stress-cache-") as cache_dir:
            children = [_child(args, cache_dir) for _ in range(args.processes)]
            for child in children:
                try:
                    out, err = child.communicate(timeout=args.stall_seconds * 4 + 60)
                except subprocess.TimeoutExpired:
                    child.kill()
                    out, err = child.communicate()
                    totals.stalls += 1
                    failed_runs += 1
                    print(f"run {run}: a process stalled", flush=True)
                    continue
                try:
                    res = RunResult(**{k: v for k, v in json.loads(out.strip().splitlines()[-1]).items()})
                except (ValueError, IndexError):
                    totals.errors.append(f"run {run}: process exited {child.returncode}: {err[-2000:]}")
                    failed_runs += 1
                    print(f"run {run}: process failed (exit {child.returncode})\n{err[-2000:]}", flush=True)
                    continue
                totals.launches += res.launches
                totals.wrong += res.wrong
                totals.errors += res.errors
                totals.stalls += res.stalls
                totals.profiled += res.profiled
                failed_runs += not res.ok
                status = "ok" if res.ok else f"FAILED: {res.wrong} wrong, {len(res.errors)} errors, {res.stalls} stalls"
                print(f"run {run}: {res.launches} launches checked in {res.seconds:.1f} s, {status}", flush=True)
                for e in res.errors[:3]:
                    print(textwrap.indent(e, "    "), flush=True)
    print(f"\n{args.runs} cold runs x {args.processes} process(es) x {args.threads} threads x 3 scenarios: "
          f"{totals.launches} launches checked, {totals.wrong} wrong results, {len(totals.errors)} errors, "
          f"{totals.stalls} stalls, {failed_runs} failed runs")
    return 0 if failed_runs == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
