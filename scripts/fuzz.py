#!/usr/bin/env python3
"""Differential fuzzer: random Triton kernels on nmp against Triton's interpreter and a torch oracle.

    python scripts/fuzz.py --count 10000 --seed 0 --out fuzz-out       # a long run (resumable)
    python scripts/fuzz.py --summary --out fuzz-out                     # its triage figures
    python scripts/fuzz.py --show 1234                                  # print the program of a seed
    python scripts/fuzz.py --one 1234 --keep                            # run one seed, keep its folder
    python scripts/fuzz.py --count 10000 --out fuzz-out --rerun mismatch,torch_differs   # after a fix

Each kernel is generated from its seed (`scripts/fuzzlib/generate.py`), run in a forked process per
kernel on nmp and under the interpreter (`--timeout` seconds each, the process group killed after),
evaluated by the torch oracle, and triaged (`scripts/fuzzlib/triage.py`): crash / hang /
compile_error / runtime_error / mismatch are nmp-attributable; references that disagree with each
other are classified, not dropped. Every nmp-attributable failure is minimised and saved as a
standalone repro under `<out>/repros/<class>/`. Results append to `<out>/results.jsonl`; a rerun with
the same --out skips the seeds already there. Use your own TRITON_CACHE_DIR: every kernel is new.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.fuzzlib import campaign  # noqa: E402
from scripts.fuzzlib.case import Runner  # noqa: E402
from scripts.fuzzlib.generate import generate  # noqa: E402
from scripts.fuzzlib.render import render  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=100, help="kernels to run (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument("--out", type=Path, default=Path("fuzz-out"), help="results folder (default fuzz-out)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per kernel and mode (default 120)")
    ap.add_argument("--no-minimise", action="store_true", help="save failures without minimising them")
    ap.add_argument("--save-all", action="store_true", help="also minimise and save non-attributable cases")
    ap.add_argument("--summary", action="store_true", help="print the triage figures of --out and stop")
    ap.add_argument("--show", type=int, metavar="SEED", help="print the kernel of a seed and stop")
    ap.add_argument("--one", type=int, metavar="SEED", help="run one seed and print its result")
    ap.add_argument("--keep", action="store_true", help="with --one: keep the case folder")
    ap.add_argument("--rerun", metavar="CLASSES", help="comma-separated classes whose seeds run again (after a fix)")
    a = ap.parse_args(argv)
    if a.show is not None:
        p = generate(a.show)
        print(render(p) + f"\n# grid={p.grid} grid_dim={p.grid_dim} bounds={dict(p.bounds)} layouts={p.layouts}"
              f" const_strides={p.const_strides} data={p.data_kind}\n# features: {', '.join(p.notes)}")
        return 0
    if a.one is not None:
        runner = Runner(a.out / "work", a.timeout)
        try:
            r = runner.run(generate(a.one), keep=a.keep, seed=a.one)
        finally:
            runner.close()
        print(f"seed {a.one}: {r.cls} {r.reason}\n{r.detail}")
        return 1 if r.attributable else 0
    if a.rerun:
        print(f"running {campaign.forget(a.out, set(a.rerun.split(',')))} seeds again")
    if not a.summary:
        new = campaign.run(a.out, a.seed, a.count, a.timeout, not a.no_minimise, a.save_all)
        print(f"ran {len(new)} kernels")
    print(campaign.summary(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
