"""Tuning-sweep scaling: a 100-candidate sweep on a process pool of 1 and 2 workers (and Ray), same picks.

The sweep is a GEMM (fp16, 128x512 @ 512x512) over BLOCK_M x BLOCK_N x BLOCK_K x num_stages = 100
configs; every candidate is a cold compile (each run gets an empty Triton cache) plus its simulation, as in a
first tuning run. Rows:

* pool, 1 worker: the baseline every ratio is against (same engine code, one process);
* pool, 2 workers;
* pool, 2 workers, one worker killed (SIGKILL) when half of the candidates are in: the sweep completes,
  the killed worker's candidate runs again elsewhere, every candidate is stored;
* ray, 2 CPUs (embedded local cluster), with --ray, when Ray is installed.

"CPU s" is the CPU time the run's processes got and "cores used" that over the wall time: on an idle
2-core machine 2 workers use close to 2 cores; on a shared one, what the others leave.

"same picks" compares every entry's winner and every candidate's simulated time with the baseline's.
Wall-clock ratios need the 2 cores to ourselves: the load average is printed before and after each run;
on a shared machine run with --nice and --repeats and read the best pair (the machine's other work then
slows both runs alike). Simulated times are deterministic whatever the load.

    python benchmarks/sweep.py                      # 1 vs 2 workers, plus the kill row
    python benchmarks/sweep.py --repeats 3 --ray    # best of 3 pairs, and a Ray row
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, table  # noqa: E402

from triton_nmp.sweep import Sweep, engine_from_options, run_sweep  # noqa: E402
from triton_nmp.tuning.cache import TuningCache  # noqa: E402

M, N, K = 128, 512, 512


def gemm_sweep(quick: bool) -> Sweep:
    tiles = {"BLOCK_M": [16, 32, 64, 128, 256], "BLOCK_N": [32, 64, 128, 256, 512], "BLOCK_K": [32, 64]}
    if quick:
        tiles = {"BLOCK_M": [16, 32], "BLOCK_N": [64, 128], "BLOCK_K": [32, 64]}
    tensor = {"dtype": "float16"}
    return Sweep.from_dict({"kernel": [{
        "name": "gemm-128x512x512",
        "kernel": "triton_nmp.examples:matmul_kernel",
        "grid": "(cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N),)",
        "key": ["M", "N", "K"],
        "args": {"a_ptr": {"shape": [M, K], **tensor}, "b_ptr": {"shape": [K, N], **tensor},
                 "c_ptr": {"shape": [M, N], **tensor, "init": "zeros"}, "M": M, "N": N, "K": K,
                 "stride_am": K, "stride_ak": 1, "stride_bk": N, "stride_bn": 1, "stride_cm": N, "stride_cn": 1,
                 "GROUP_M": 4},
        "space": {"tiles": tiles, "num_stages": [1, 2], "pu_mapping": ["round_robin"]},
    }]})


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished descendants (workers are joined when an engine closes)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def one_run(label: str, engine_args: dict, quick: bool, kill: bool = False) -> dict:
    """A cold sweep (fresh Triton cache and tuning cache) on a new engine; wall time includes worker start."""
    with tempfile.TemporaryDirectory(prefix="sweep-bench-") as tmp:
        os.environ["TRITON_CACHE_DIR"] = str(Path(tmp) / "triton")
        cache = TuningCache(Path(tmp) / "tuning")
        killed: list[int] = []
        before = load()
        cpu0 = _cpu_seconds()
        t0 = time.perf_counter()
        with engine_from_options(**engine_args) as engine:
            def on_result(task, result, done, total):
                if kill and not killed and done >= total // 2 and engine.busy_pids():
                    killed.append(engine.busy_pids()[0])
                    os.kill(killed[0], signal.SIGKILL)

            report = run_sweep(gemm_sweep(quick), engine, cache, progress=False, on_result=on_result)
        wall = time.perf_counter() - t0
        cpu = _cpu_seconds() - cpu0
        entries = {e.id: {str(c.config): c.simulated_seconds for c in e.candidates} for e in cache.entries()}
        stored = sum(len(v) for v in entries.values()) + sum(len(e.pruned) for e in cache.entries())
    return {"label": label, "wall": wall, "cpu": cpu, "report": report, "entries": entries, "stored": stored,
            "killed": len(killed), "load": f"{before} -> {load()}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="1-vs-2-worker pairs to run (best pair shown)")
    parser.add_argument("--nice", type=int, default=0, help="os.nice() increment for this process and its workers")
    parser.add_argument("--ray", action="store_true", help="add a row on an embedded Ray cluster of 2 CPUs")
    parser.add_argument("--no-kill", action="store_true", help="skip the killed-worker row")
    parser.add_argument("--quick", action="store_true", help="16 candidates instead of 100 (a smoke run)")
    args = parser.parse_args()
    if args.nice:
        os.nice(args.nice)
    print(machine_line())
    pairs = []
    for _ in range(args.repeats):
        one = one_run("pool, 1 worker", {"engine": "pool", "workers": 1}, args.quick)
        two = one_run("pool, 2 workers", {"engine": "pool", "workers": 2}, args.quick)
        pairs.append((one, two))
        print(f"  pair: 1 worker {one['wall']:.1f} s (load {one['load']}), 2 workers {two['wall']:.1f} s "
              f"(load {two['load']}): {one['wall'] / two['wall']:.2f}x", flush=True)
    base, two = max(pairs, key=lambda p: p[0]["wall"] / p[1]["wall"])
    rows_runs = [base, two]
    if not args.no_kill:
        rows_runs.append(one_run("pool, 2 workers, 1 killed halfway", {"engine": "pool", "workers": 2}, args.quick,
                                 kill=True))
    if args.ray:
        from triton_nmp.sweep.ray_engine import ray_available

        if ray_available():
            rows_runs.append(one_run("ray (embedded), 2 CPUs", {"engine": "ray", "ray": "auto", "workers": 2},
                                     args.quick))
        else:
            print("  (no Ray row: Ray is not installed; pip install 'triton-nmp[ray]')")
    n = base["report"].candidates
    rows = []
    for r in rows_runs:
        rep = r["report"]
        rows.append([r["label"], f"{r['wall']:.1f}", f"{base['wall'] / r['wall']:.2f}x", f"{r['cpu']:.0f}",
                     f"{r['cpu'] / r['wall']:.2f}", str(rep.measured),
                     f"{r['stored']}/{n}", str(rep.retries), "yes" if r["entries"] == base["entries"] else "NO",
                     r["load"]])
    print(f"\n{n}-candidate sweep (cold compiles), ratio = 1-worker wall time / row's wall time")
    print(table(["engine", "wall s", "ratio", "CPU s", "cores used", "measured", "stored", "retried",
                 "same picks+times", "load 1/5/15 min"], rows, {1, 2, 3, 4, 5, 6, 7}))
    print("CPU s: CPU time of the run's processes (workers, their LLVM children, the parent; Ray's own workers "
          "are not children and not counted); cores used = CPU s / wall s, what the machine's other load left us")
    ratios = [p[0]["wall"] / p[1]["wall"] for p in pairs]
    if len(ratios) > 1:
        print(f"2-vs-1 ratios over {len(ratios)} pairs: " + ", ".join(f"{x:.2f}" for x in ratios))
    best = base["report"].groups[0]
    print(f"pick: {best.best} ({best.best_seconds * 1e6:.2f} us simulated)")
    return 0 if all(r[8] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
