"""Validation of the `upmem-like` preset against real UPMEM hardware on PrIM workloads.

Baseline: kernel times measured on real UPMEM DPUs (16 tasklets, 350 MHz) by the uPIMulator authors
for PrIM's VA, GEMV, RED, SCAN-SSA and SCAN-RSS (`triton_nmp/data/upmem_prim.csv`, with its source).
Measured: our own Triton versions of those workloads (`triton_nmp/prim.py`) compiled by triton-nmp
and simulated on `upmem-like` restricted to the row's DPU count, at the row's sizes. Per row the
ratio simulated / hardware; then the mean absolute error and the worst row, and weak scaling (per-DPU
time from 1 to 4 DPUs at constant work per DPU). Simulated times are deterministic.

    python benchmarks/validation.py                # the table's sizes (2M-8M elements; ~1 min)
    python benchmarks/validation.py --scale 0.125  # 1/8 of the sizes, seconds (sizes are rounded)
    python benchmarks/validation.py --table my.csv --target my.toml

Goals (issue #17): mean absolute error <= 15%, no row off by more than 35%, VA and RED per-DPU time
flat (within 2%) from 1 to 4 DPUs.
"""

from __future__ import annotations

import argparse
import sys
import time

from triton_nmp.prim import UPMEM_TABLE_PATH, load_table, run_workload
from triton_nmp.target import TargetSpec


def _scaled(elements: int, workload: str, dpus: int, scale: float) -> int:
    if scale == 1.0:
        return elements
    grain = dpus * 16 * (4 if workload == "GEMV" else 256)
    return max(grain, round(elements * scale / grain) * grain)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="upmem-like", help="preset name or TOML file (default upmem-like)")
    ap.add_argument("--table", default=str(UPMEM_TABLE_PATH), help="CSV/TOML of measured rows")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each row's size (hardware ms scaled too)")
    args = ap.parse_args(argv)
    spec = TargetSpec.load(args.target)
    rows = load_table(args.table)
    print(f"target {spec.name}: {spec.num_pus} PUs at {spec.clock_ghz * 1e3:.0f} MHz, "
          f"{spec.issue_threads} threads/PU;"
          f" table {args.table} ({len(rows)} rows){'' if args.scale == 1 else f'; sizes x{args.scale}'}")
    head = (f"{'workload':<10}{'DPUs':>5}{'elements':>11}{'hw ms':>10}{'sim ms':>10}{'ratio':>8}{'error':>8}"
            f"{'host s':>8}")
    print(head)
    print("-" * len(head))
    errors, per_dpu = [], {}
    for row in rows:
        n = _scaled(row.elements, row.workload, row.dpus, args.scale)
        hw = row.ms * n / row.elements
        t0 = time.perf_counter()
        sim = run_workload(row.workload, row.dpus, n, spec).seconds(spec) * 1e3
        host = time.perf_counter() - t0
        err = sim / hw - 1
        errors.append(abs(err))
        per_dpu.setdefault(row.workload, {})[row.dpus] = sim * row.dpus / n
        print(f"{row.workload:<10}{row.dpus:>5}{n:>11,}{hw:>10.3f}{sim:>10.3f}{sim / hw:>8.3f}{err:>+8.1%}{host:>8.1f}")
    mae, worst = sum(errors) / len(errors), max(errors)
    print(f"\nmean absolute error {mae:.1%} (goal <= 15%), worst row {worst:.1%} (goal <= 35%)")
    flat = True
    for wl in ("VA", "RED"):
        t = per_dpu.get(wl, {})
        if 1 in t and 4 in t:
            change = t[4] / t[1] - 1
            flat &= abs(change) <= 0.02
            print(f"weak scaling {wl}: per-DPU time 1 -> 4 DPUs {change:+.2%} (goal: flat, within 2%)")
    return 0 if mae <= 0.15 and worst <= 0.35 and flat else 1


if __name__ == "__main__":
    sys.exit(main())
