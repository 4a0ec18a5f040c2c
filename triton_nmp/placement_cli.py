"""`triton-nmp placement show`: every decision of a placement plan, as a table.

    triton-nmp placement show PLAN.json                 # a plan saved by Plan.save()
    triton-nmp placement show --example gemv-chain      # capture, solve and show a built-in example
    triton-nmp placement show --log                     # the decisions taken in this process so far
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from triton_nmp.errors import NMPError

__all__ = ["declare", "run", "format_plan"]


def format_plan(doc: dict[str, Any]) -> str:
    """The plan (Plan.to_json()) as text: tensors with their layouts, kernels with their strategies and
    mappings, migrations, totals."""
    out = [f"placement plan for {doc['target']}: solver {doc['solver']}{' (optimal)' if doc.get('optimal') else ''}, "
           f"predicted step {doc['seconds'] * 1e6:.1f} us, graph built in {doc.get('build_seconds', 0):.2f} s, "
           f"solved in {doc['solve_seconds']:.2f} s"]
    out.append("")
    out.append(f"{'tensor':<44} {'kind':<10} {'bytes':>11} {'layout':<20} {'was':<20} {'cands':>5}")
    for t in doc["tensors"]:
        out.append(f"{t['name'][:44]:<44} {t['kind']:<10} {t['bytes']:>11} {t['layout']:<20} {t['captured']:<20} "
                   f"{t['candidates']:>5}")
    out.append("")
    out.append(f"{'#':>4} {'kernel':<48} {'grid':<14} {'strategy':<28} {'mapping':<22} {'us':>9}")
    for k in doc["kernels"]:
        grid = "x".join(str(g) for g in k["grid"])
        out.append(f"{k['index']:>4} {k['kernel'][:48]:<48} {grid:<14} {k['strategy'][:28]:<28} {k['mapping']:<22} "
                   f"{k['seconds'] * 1e6:>9.2f}")
    out.append("")
    if doc["migrations"]:
        out.append("migrations (re-laid out before the kernel and back after it):")
        for m in doc["migrations"]:
            out.append(f"  #{m['index']} {m['kernel']}: {m['tensor']} {m['home']} -> {m['during']} "
                       f"({m['seconds'] * 1e6:.1f} us)")
    else:
        out.append("migrations: none (no re-layout pays for itself)")
    return "\n".join(out)


def declare(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["show"], help="what to do")
    p.add_argument("plan", nargs="?", help="a plan saved as JSON (Plan.save)")
    p.add_argument("--example", choices=["gemv-chain"], help="capture and solve a built-in example")
    p.add_argument("--layers", type=int, default=4, help="layers of the example")
    p.add_argument("--solver", default="auto", choices=["auto", "ilp", "greedy"])
    p.add_argument("--target", default=None, help="target preset or TOML file")
    p.add_argument("--save", default="", help="also write the plan as JSON here")
    p.add_argument("--log", action="store_true", help="list the placement decisions taken in this process")


def run(args: argparse.Namespace) -> int:
    if args.plan:
        try:
            with open(args.plan) as f:
                doc = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise NMPError(f"cannot read plan '{args.plan}': {e}; write one with Plan.save(path) or --save") from None
        print(format_plan(doc))
        return 0
    if args.example:
        import triton_nmp
        from triton_nmp import placement_pass as pp
        from triton_nmp.placement_examples import GemvChain

        triton_nmp.activate(args.target)
        model = GemvChain(layers=args.layers)
        model.step()
        with pp.capture() as cap:
            model.step()
        plan = pp.solve(cap.graph(), args.solver)
        if args.save:
            plan.save(args.save)
        print(format_plan(plan.to_json()))
        return 0
    if args.log:
        from triton_nmp.placement import decisions

        for d in decisions():
            print(f"{d.tensor}: {d.layout} ({d.why}){' [' + d.transfer + ']' if d.transfer else ''}")
        return 0
    raise NMPError("placement show: give a plan file, --example NAME or --log")
