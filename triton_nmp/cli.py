"""`triton-nmp` command line.

Each subcommand is one `_cmd_<name>(args) -> int` function plus an `_args_<name>(parser)` function
that declares its options; both are registered in `_SUBCOMMANDS`, the only place to touch when
adding a subcommand. Errors a user can cause (`NMPError`) print one message and exit 1, no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from triton_nmp.errors import NMPError
from triton_nmp.target import DTYPES, TargetSpec, active_target

# ----------------------------------------------------------------------------------- helpers


def _si(value: float, unit: str) -> str:
    """Engineering notation with an SI prefix: 16384e9 FLOP/s -> '16.38 TFLOP/s'."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _binary(nbytes: int) -> str:
    for factor, prefix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= factor:
            return f"{nbytes / factor:g} {prefix}"
    return f"{nbytes} B"


def _load_target(choice: str | None) -> TargetSpec:
    """--target if given, else the active target (which honours $TRITON_NMP_TARGET)."""
    return TargetSpec.load(choice) if choice else active_target()


# ------------------------------------------------------------------------------------- info


def _args_info(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", metavar="NAME_OR_TOML", default=None,
        help="preset name or TOML file (default: $TRITON_NMP_TARGET or nmp-64)",
    )  # fmt: skip


def _cmd_info(args: argparse.Namespace) -> int:
    """Print every field of the target with its unit, then the roofline numbers derived from them."""
    spec = _load_target(args.target)
    out: list[str] = [f"target {spec.name}  ({spec.num_pus} PUs, hash {spec.hash()[:16]})", ""]

    for info in TargetSpec.schema():
        if info.path == "name":
            continue
        value = getattr(spec, info.attr)
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        if info.unit == "bytes":
            shown = f"{value} bytes" + (f" ({_binary(value)})" if value >= 1024 else "")
        elif info.unit:
            shown = f"{shown} {info.unit}"
        out.append(f"  {info.path:<34} {shown:<28} {info.doc}")

    out += [
        "",
        f"roofline (whole machine: {spec.num_pus} PUs at {spec.clock_ghz:g} GHz; 1 MAC = 2 FLOP)",
        f"  aggregate local bank bandwidth     {_si(spec.local_bytes_per_second, 'B/s')}",
        f"  aggregate remote bandwidth         {_si(spec.remote_bytes_per_second, 'B/s')}",
        f"  total scratchpad                   {_binary(spec.spm_bytes * spec.num_pus)}",
        "",
        f"  {'dtype':<6} {'peak MAC/s':>14} {'peak FLOP/s':>15} {'ridge local':>18} {'ridge remote':>19}",
    ]
    for dtype in DTYPES:
        macs = spec.peak_flops(dtype) / 2
        out.append(
            f"  {dtype:<6} {_si(macs, 'MAC/s'):>14} {_si(2 * macs, 'FLOP/s'):>15}"
            f" {spec.ridge_point(dtype):>8.4g} FLOP/byte {spec.ridge_point(dtype, remote=True):>8.4g} FLOP/byte"
        )
    out += [
        "",
        "  A kernel whose FLOP per byte moved is below the ridge point is bandwidth-bound;",
        "  lower bound on time = max(FLOP / peak FLOP/s, local bytes / local B/s, remote bytes / remote B/s).",
    ]
    print("\n".join(out))
    return 0


# ------------------------------------------------------------------------------------- demo


def _args_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=("small", "medium"), default="small", help="problem sizes (default small)")
    parser.add_argument("--target", metavar="NAME_OR_TOML", default=None, help="target (default nmp-64)")
    parser.add_argument("--keep-cache", action="store_true",
                        help="use Triton's kernel cache (default: a fresh one, so compile times are real)")


def _cmd_demo(args: argparse.Namespace) -> int:
    """Compile and run the kernel suite on the simulator; print kernel, shape, correctness, compile time."""
    import os
    import tempfile

    import triton_nmp
    from triton_nmp.demo import run_demo

    triton_nmp.activate(args.target)
    if args.keep_cache:
        return 0 if run_demo(args.size) else 1
    with tempfile.TemporaryDirectory(prefix="triton-nmp-demo-") as cache:
        saved = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = cache
        try:
            return 0 if run_demo(args.size) else 1
        finally:
            if saved is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved


# ---------------------------------------------------------------------------------- compile


def _args_compile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kernel", metavar="FILE.py:KERNEL", help="the @triton.jit function to compile")
    parser.add_argument("--signature", default="", help="types of the non-constexpr parameters, e.g. '*fp32,i32'")
    parser.add_argument("--const", action="append", default=[], metavar="NAME=VALUE", help="a constexpr value")
    parser.add_argument("--stage", choices=("ttir", "nmpir", "llir", "all"), default="nmpir",
                        help="stage to print (default nmpir)")
    parser.add_argument("--out-dir", default=None, help="write every stage to this folder instead")
    parser.add_argument("--target", metavar="NAME_OR_TOML", default=None, help="target (default nmp-64)")


def _cmd_compile(args: argparse.Namespace) -> int:
    from pathlib import Path

    import triton_nmp
    from triton_nmp.compile_tool import compile_stages, parse_request, write_stages

    triton_nmp.activate(args.target)
    req = parse_request(args.kernel, args.signature, args.const)
    stages = compile_stages(req)
    if args.out_dir:
        for p in write_stages(stages, Path(args.out_dir), req.kernel):
            print(p)
        return 0
    for name in ("ttir", "nmpir", "llir") if args.stage == "all" else (args.stage,):
        print(f"// ----- {name} -----")
        print(stages[name])
    return 0


# -------------------------------------------------------------------------------- calibrate


def _args_calibrate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", metavar="NAME_OR_TOML", default=None, help="target (default nmp-64)")
    parser.add_argument("--per-case", type=int, default=10, help="configs simulated per suite case (default 10)")
    parser.add_argument("--full", action="store_true", help="full-size shapes (slower) instead of quick ones")
    parser.add_argument("--dry-run", action="store_true", help="fit and report without storing the coefficients")


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit the cost model's coefficients to simulated measurements for a target and store them."""
    import triton_nmp
    from triton_nmp.costmodel import Calibration
    from triton_nmp.tuning_suite import run_calibration

    triton_nmp.activate(args.target)
    report = run_calibration(args.per_case, quick=not args.full, save=not args.dry_run)
    print(report.table())
    if not args.dry_run:
        print(f"stored in {Calibration.path_for(triton_nmp.active_target())}")
    return 0


# ------------------------------------------------------------------------- calibrate-target


def _args_calibrate_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", metavar="NAME_OR_TOML", default="upmem-like",
                        help="target whose [fit] fields are fitted (default upmem-like)")
    parser.add_argument("--table", metavar="CSV_OR_TOML", default=None,
                        help="measured rows: workload, dpus, elements, ms (default: the bundled UPMEM PrIM table)")
    parser.add_argument("--fit-dpus", metavar="N[,N...]", default=None,
                        help="fit on the rows with these DPU counts, test on the others (default: the smallest)")
    parser.add_argument("--params", metavar="FIELD[,FIELD...]", default=None,
                        help="fields to fit, as TOML paths (default: every field of the target's [fit] table)")
    parser.add_argument("--out", metavar="TOML", default=None, help="write the fitted target to this file")


def _cmd_calibrate_target(args: argparse.Namespace) -> int:
    """Fit a target's free fields (within their declared ranges) to measured kernel times."""
    from pathlib import Path

    from triton_nmp.calibrate_target import fit_target, split_rows
    from triton_nmp.prim import UPMEM_TABLE_PATH, load_table

    spec = TargetSpec.load(args.target)
    rows = load_table(args.table or UPMEM_TABLE_PATH)
    try:
        dpus = {int(x) for x in args.fit_dpus.split(",")} if args.fit_dpus else None
    except ValueError:
        raise NMPError(f"--fit-dpus {args.fit_dpus!r}: expected DPU counts such as 1 or 1,4") from None
    fit_idx, _ = split_rows(rows, dpus)
    params = [p.strip() for p in args.params.split(",")] if args.params else None
    result = fit_target(spec, rows, fit_idx, params)
    print(f"target {spec.name}: fitting on {len(fit_idx)} of {len(rows)} rows")
    print(result.table())
    if args.out:
        Path(args.out).write_text(result.spec.to_toml())
        print(f"fitted target written to {args.out}")
    return 0


# ------------------------------------------------------------------------------------ cache


def _args_cache(parser: argparse.ArgumentParser) -> None:
    from triton_nmp.tuning_cli import args_cache

    args_cache(parser)


def _cmd_cache(args: argparse.Namespace) -> int:
    from triton_nmp.tuning_cli import cmd_cache

    return cmd_cache(args)


# ------------------------------------------------------------------------------------- llm


def _args_llm(parser: argparse.ArgumentParser) -> None:
    from triton_nmp.llm.bench import add_arguments

    add_arguments(parser)


def _cmd_llm(args: argparse.Namespace) -> int:
    """GPT-2 small and a Llama-shaped decoder through torch.compile(backend="nmp"): simulated prefill and decode
    time against the roofline floor, kernels, host fallbacks, tuning, compile and warm-start times."""
    from triton_nmp.llm.bench import run

    return run(args)


# ------------------------------------------------------------------------------------- tune


def _args_tune(parser: argparse.ArgumentParser) -> None:
    from triton_nmp.sweep_cli import args_tune

    args_tune(parser)


def _cmd_tune(args: argparse.Namespace) -> int:
    from triton_nmp.sweep_cli import cmd_tune

    return cmd_tune(args)


# ------------------------------------------------------------------------------ registration

def _args_placement(p: argparse.ArgumentParser) -> None:
    from triton_nmp import placement_cli

    placement_cli.declare(p)


def _cmd_placement(args: argparse.Namespace) -> int:
    from triton_nmp import placement_cli

    return placement_cli.run(args)


# name -> (command, argument declarer, one-line help). Add new subcommands here.
_SUBCOMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None], str]] = {
    "info": (_cmd_info, _args_info, "show a target's parameters and roofline numbers"),
    "demo": (_cmd_demo, _args_demo, "compile and run the kernel suite on the simulator, check against torch"),
    "compile": (_cmd_compile, _args_compile, "compile one kernel and print or save its IR stages"),
    "calibrate": (_cmd_calibrate, _args_calibrate, "fit the tuning cost model to the simulator for a target"),
    "cache": (_cmd_cache, _args_cache, "list, show, clear or export the persistent tuning cache"),
    "llm": (_cmd_llm, _args_llm, "LLM prefill/decode on nmp via torch.compile(backend='nmp'), against the floor"),
    "tune": (_cmd_tune, _args_tune, "run a tuning sweep (file or recorded model run) in process, on a process "
                                    "pool or on Ray; results go to the tuning cache"),
    "calibrate-target": (_cmd_calibrate_target, _args_calibrate_target,
                         "fit a target's free fields to measured kernel times, report the error on held-out rows"),
    "placement": (_cmd_placement, _args_placement, "show a placement plan: layouts, kernel mappings, migrations"),
}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triton-nmp", description="Triton backend for the nmp near-memory machine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (command, declare, help_text) in _SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        declare(p)
        p.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point; returns the exit status (0 ok, 1 user error, 2 usage error)."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    command = getattr(args, "_command", None)
    if command is None:
        parser.print_help()
        return 2
    try:
        return int(command(args) or 0)
    except NMPError as exc:
        print(f"triton-nmp {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
