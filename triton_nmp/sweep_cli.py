"""`triton-nmp tune`: run a tuning sweep from a file, or record one from a script's model run.

    triton-nmp tune sweep.toml                         # in process
    triton-nmp tune sweep.toml --engine pool -j 2      # a local process pool
    triton-nmp tune sweep.toml --ray auto              # an embedded local Ray cluster (pip install triton-nmp[ray])
    triton-nmp tune sweep.toml --ray 10.0.0.5:6379     # join a running Ray cluster
    triton-nmp tune --record model.json -- script.py ARGS  # run a script, save the kernels and shapes it tuned

Registered in `cli._SUBCOMMANDS` as "tune" -> (cmd_tune, args_tune).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from triton_nmp.errors import NMPError

__all__ = ["args_tune", "cmd_tune"]


def args_tune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="FILE", nargs="*",
                        help="sweep file (TOML or JSON: kernels, argument shapes and dtypes, configs, targets, "
                             "placements); with --record, the script to run and its arguments, after '--'")
    parser.add_argument("--engine", choices=("in-process", "pool", "ray"), default=None,
                        help="where candidates run (default in-process; --ray implies ray)")
    parser.add_argument("--workers", "-j", type=int, default=None, metavar="N",
                        help="worker processes (pool: default the CPU count; ray auto: the cluster's CPUs)")
    parser.add_argument("--ray", metavar="auto|ADDRESS", default=None,
                        help="run on Ray: 'auto' starts an embedded local cluster, an address joins one")
    parser.add_argument("--targets", metavar="T[,T...]", default=None,
                        help="override the file's targets (preset names or TOML files)")
    parser.add_argument("--cache", metavar="DIR", default=None,
                        help="tuning cache directory (default: $TRITON_NMP_TUNING_CACHE or ~/.cache/triton-nmp/tuning)")
    parser.add_argument("--retries", type=int, default=2, metavar="N",
                        help="re-dispatches of a candidate whose worker died (default 2)")
    parser.add_argument("--fresh", action="store_true",
                        help="measure everything again (ignore entries and journals of earlier runs)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--report", metavar="JSON", default=None, help="also write the per-entry report as JSON")
    parser.add_argument("--record", metavar="OUT", default=None,
                        help="run FILE as a Python script and save the kernels and shapes it launched "
                             "(autotuned kernels, Inductor template choices) as a sweep file OUT")


def _record(args: argparse.Namespace) -> int:
    from triton_nmp.sweep.record import record_script

    if not args.sweep:
        raise NMPError("--record OUT needs the script to run: triton-nmp tune --record OUT -- script.py [ARGS]")
    sweep = record_script(Path(args.sweep[0]), list(args.sweep[1:]))
    sweep.save(args.record)
    n = sum(len(c.configs) for c in sweep.cases)
    print(f"recorded {len(sweep.cases)} kernel launch(es), {n} candidates, to {args.record}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from triton_nmp.sweep import Sweep, engine_from_options, run_sweep
    from triton_nmp.tuning.cache import TuningCache

    if args.record:
        return _record(args)
    if len(args.sweep) != 1:
        given = f"one sweep file at a time, not {len(args.sweep)}: {' '.join(args.sweep)}"
        raise NMPError(given if args.sweep else "give a sweep file: triton-nmp tune FILE (see triton-nmp tune --help)")
    if args.retries < 0:
        raise NMPError(f"--retries must be >= 0, not {args.retries}")
    sweep = Sweep.load(args.sweep[0])
    if args.targets:
        sweep.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    cache = TuningCache(args.cache) if args.cache else TuningCache()
    with engine_from_options(args.engine, args.workers, args.ray, args.retries) as engine:
        report = run_sweep(sweep, engine, cache, progress=not args.no_progress, resume=not args.fresh)
    print(report.table())
    print(f"tuning cache: {cache.directory}")
    if args.report:
        Path(args.report).write_text(json.dumps({"engine": report.engine, "seconds": report.seconds,
                                                 "groups": [g.__dict__ for g in report.groups]}, indent=1) + "\n")
    unstored = [g for g in report.groups if not g.stored and not g.skipped]
    if unstored:
        illegal = sum(1 for g in unstored if g.pruned == g.candidates)
        print(f"{len(unstored)} entr{'y' if len(unstored) == 1 else 'ies'} not stored: no candidate ran "
              f"({illegal} with every config illegal on its target: see PRUNED, `triton_nmp.check_config` "
              f"gives the reasons; the others failed: see FAILED)", file=sys.stderr)
        return 1
    return 0
