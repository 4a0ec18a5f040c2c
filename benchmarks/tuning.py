"""Cost-model-guided tuning against exhaustive simulation, over the tuning suite (8 LLM-shaped cases).

For each case: the legality query prunes the config space; "exhaustive" simulates every legal config;
"guided" ranks the legal configs with the calibrated cost model and simulates only the top 10%, then
picks the best simulated one. Printed per case: space and legal sizes, configs simulated, guided pick
vs exhaustive best (ratio of simulated times), Kendall tau of model vs simulator, tuned vs the
kernel's default config, and wall times. Simulated cycles are deterministic; wall times are noisy.

    python benchmarks/tuning.py            # full-size shapes (several minutes on 2 cores)
    python benchmarks/tuning.py --quick    # smaller shapes, same spaces
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from triton_nmp import tuning_suite as ts
from triton_nmp.costmodel import CostModel, kendall_tau
from triton_nmp.legality import check_config


def run(quick: bool, top_frac: float, only: list[str] | None) -> int:
    model = CostModel()
    rows = []
    for case in ts.cases(quick):
        if only and case.name not in only:
            continue
        args = case.args()
        t0 = time.perf_counter()
        legal = [c for c in case.space if check_config(case.kernel, args, c).legal]
        t_legal = time.perf_counter() - t0
        t0 = time.perf_counter()
        predicted = [model.predict(case.kernel, args, c, case.grid).seconds for c in legal]
        t_model = time.perf_counter() - t0
        t0 = time.perf_counter()
        simulated = [ts.simulate(case, c) for c in legal]
        t_exhaustive = time.perf_counter() - t0
        k = max(1, int(top_frac * len(legal)))  # like Triton's top_k: rounds down, at least one
        ranked = sorted(range(len(legal)), key=lambda i: predicted[i])[:k]
        pick = min(ranked, key=lambda i: simulated[i])
        best = min(range(len(legal)), key=lambda i: simulated[i])
        default = ts.simulate(case, case.default)
        rows.append(dict(case=case.name, shape=case.note, space=len(case.space), legal=len(legal), sim=k,
                         ratio=simulated[pick] / simulated[best], tau=kendall_tau(predicted, simulated),
                         speedup=default / simulated[pick], best_us=simulated[best] * 1e6,
                         default_us=default * 1e6, t_legal=t_legal, t_model=t_model, t_exh=t_exhaustive,
                         config=f"{legal[pick].kwargs} stages={legal[pick].num_stages}"))
        print(f"[{case.name}] done: {len(legal)} legal configs, exhaustive simulation {t_exhaustive:.1f} s",
              file=sys.stderr, flush=True)
    hdr = (f"{'case':<17} {'shape':<28} {'space':>5} {'legal':>5} {'sim':>4} {'%sim':>5} {'pick/best':>9} "
           f"{'tau':>6} {'vs default':>10} {'best us':>9} {'legal s':>7} {'model s':>7} {'exh. s':>7}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['case']:<17} {r['shape']:<28} {r['space']:>5} {r['legal']:>5} {r['sim']:>4} "
              f"{100 * r['sim'] / r['legal']:>4.0f}% {r['ratio']:>9.4f} {r['tau']:>6.3f} {r['speedup']:>9.2f}x "
              f"{r['best_us']:>9.2f} {r['t_legal']:>7.2f} {r['t_model']:>7.2f} {r['t_exh']:>7.1f}")
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    worst = max(r["ratio"] for r in rows)
    print()
    print(f"pick/best geometric mean {geo:.4f} (goal <= 1.02), worst {worst:.4f} (goal <= 1.05); "
          f"simulated {sum(r['sim'] for r in rows)} of {sum(r['legal'] for r in rows)} legal configs "
          f"(goal <= 10%); min Kendall tau {min(r['tau'] for r in rows):.3f} (goal >= 0.8)")
    print(warm_cache_lookup())
    print("picked configs:")
    for r in rows:
        print(f"  {r['case']:<17} {r['config']}  ({r['default_us']:.2f} us default -> {r['best_us']:.2f} us best)")
    return 0


def warm_cache_lookup() -> str:
    """Tune one case through `triton_nmp.autotune` with a fresh persistent cache, then time a new process-like
    lookup (new autotuner object: empty in-memory cache) that must come from disk without simulating."""
    import tempfile

    import triton_nmp
    from triton_nmp.tuning import TuningCache

    case = ts.cases(quick=True)[1]
    args = case.args()
    names = case.kernel.arg_names
    positional = [args[n] for n in names if n in args and n != "GROUP_M"]
    with tempfile.TemporaryDirectory() as d:
        cold = triton_nmp.autotune(case.space, key=["M", "N", "K"], cache=TuningCache(d), progress=False)(case.kernel)
        t0 = time.perf_counter()
        cold[case.grid](*positional, GROUP_M=args["GROUP_M"])
        t_cold = time.perf_counter() - t0
        lookups = []
        for _ in range(5):
            warm = triton_nmp.autotune(case.space, key=["M", "N", "K"], cache=TuningCache(d),
                                       progress=False)(case.kernel)
            warm[case.grid](*positional, GROUP_M=args["GROUP_M"])
            assert warm.last_lookup.source == "disk"
            lookups.append(warm.last_lookup.seconds)
    lookups.sort()
    return (f"warm persistent-cache launch ({case.name}, {len(case.space)} configs): config selected from disk in "
            f"{1e3 * lookups[len(lookups) // 2]:.2f} ms median (goal < 5 ms), no simulation; cold tuning took "
            f"{t_cold:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller shapes")
    ap.add_argument("--top", type=float, default=0.1, help="fraction of legal configs simulated (default 0.1)")
    ap.add_argument("--case", action="append", help="only this case (repeatable)")
    args = ap.parse_args()
    return run(args.quick, args.top, args.case)


if __name__ == "__main__":
    sys.exit(main())
