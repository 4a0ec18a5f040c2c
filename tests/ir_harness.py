"""Textual IR tests: the nmpir round trip and the per-pass cases of `tests/ir/`.

A case is one file, `<pass dir>/<name>.nmpir` (input is nmpir) or `.ttir` (input is TTIR text):

    // PASSES: sink-address-computations          the passes to run, in order (names in pipeline.py)
    // OPTIONS: target=nmp-64 num_stages=2 chunk=64  optional: PassContext fields (defaults shown);
                                                     spm_bytes=N: the target with an N-byte scratchpad
    // CHECK: <text>          a later output line contains <text> (whitespace runs compare equal)
    // CHECK-NEXT: <text>     the line right after the previous match contains <text>
    // CHECK-NOT: <text>      no line between the previous match and the next one contains <text>
    <the input IR>

The output is the module as `print_module` writes it, after the scratchpad plan when a pass made one
(as in `compiled.asm["nmpir"]`), what spilled, and the grid-pipeline decision when `pipeline-grid` ran.
The nmpir input is verified before the passes run.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from triton_nmp.backend.ir import Block, Module, Op, Value
from triton_nmp.backend.nmpir import print_module, verify
from triton_nmp.backend.nmpir_parser import parse_module
from triton_nmp.backend.pipeline import PASSES_BY_NAME, PassContext, run_passes
from triton_nmp.backend.ttir_import import import_ttir
from triton_nmp.target import TargetSpec

CASES_DIR = Path(__file__).parent / "ir"


# -- round trip ------------------------------------------------------------------------------------------
def assert_round_trip(mod: Module) -> None:
    """print -> parse -> print gives the same text, and the parsed module is the same IR."""
    text = print_module(mod)
    parsed = parse_module(text)
    again = print_module(parsed)
    assert again == text, f"nmpir does not print back the same after parsing:\n{_first_diff(text, again)}"
    assert_same_ir(mod, parsed)


def _first_diff(a: str, b: str) -> str:
    for k, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {k + 1}:\n  printed: {x}\n  re-read: {y}"
    return "(one text is a prefix of the other)"


def _same_value(x, y) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, float) and math.isnan(x):
        return math.isnan(y)
    if isinstance(x, tuple):
        return len(x) == len(y) and all(_same_value(a, b) for a, b in zip(x, y))
    return x == y


def assert_same_ir(a: Module, b: Module) -> None:
    """Same functions, ops, attributes (with their Python types), types, locations and use-def edges."""
    vmap: dict[int, Value] = {}

    def bind(xs: list[Value], ys: list[Value], where: str) -> None:
        assert len(xs) == len(ys), f"{where}: {len(xs)} values vs {len(ys)}"
        for x, y in zip(xs, ys):
            assert x.type == y.type, f"{where}: %{x.name} has type {x.type}, re-read {y.type}"
            vmap[id(x)] = y

    def block(x: Block, y: Block, where: str) -> None:
        bind(x.args, y.args, where + " block arguments")
        assert len(x.ops) == len(y.ops), f"{where}: {len(x.ops)} ops vs {len(y.ops)}"
        for ox, oy in zip(x.ops, y.ops):
            op(ox, oy, where)

    def op(x: Op, y: Op, where: str) -> None:
        where = f"{where} / {x.name} at {x.loc}"
        assert x.name == y.name and x.loc == y.loc, where
        attrs = {k: v for k, v in x.attrs.items() if not k.startswith("_")}  # `_` attributes are not printed
        assert attrs.keys() == y.attrs.keys() and all(_same_value(v, y.attrs[k]) for k, v in attrs.items()), \
            f"{where}: attributes {attrs} re-read as {y.attrs}"
        assert [vmap.get(id(o)) for o in x.operands] == y.operands, f"{where}: operands differ"
        assert len(x.regions) == len(y.regions), where
        for rx, ry in zip(x.regions, y.regions):
            assert len(rx.blocks) == len(ry.blocks), where
            for bx, by in zip(rx.blocks, ry.blocks):
                block(bx, by, where)
        bind(x.results, y.results, where + " results")

    assert [f.name for f in a.funcs] == [f.name for f in b.funcs]
    for fa, fb in zip(a.funcs, b.funcs):
        bind(fa.args, fb.args, f"@{fa.name} arguments")
        block(fa.body, fb.body, f"@{fa.name}")


# -- per-pass cases --------------------------------------------------------------------------------------
@dataclass
class Case:
    path: Path
    passes: list[str]
    options: dict[str, str]
    checks: list[tuple[str, str]] = field(default_factory=list)  # (CHECK | CHECK-NEXT | CHECK-NOT, text)
    text: str = ""


_DIRECTIVE = re.compile(r"^\s*//\s*(PASSES|OPTIONS|CHECK|CHECK-NEXT|CHECK-NOT):(.*)$")


def read_case(path: Path) -> Case:
    case = Case(path, [], {}, text=path.read_text())
    for line in case.text.splitlines():
        m = _DIRECTIVE.match(line)
        if m is None:
            continue
        kind, rest = m.group(1), m.group(2).strip()
        if kind == "PASSES":
            case.passes += [p.strip() for p in rest.split(",") if p.strip()]
        elif kind == "OPTIONS":
            case.options.update(kv.split("=", 1) for kv in rest.split())
        else:
            case.checks.append((kind, rest))
    unknown = [p for p in case.passes if p not in PASSES_BY_NAME]
    if not case.passes or unknown:
        raise ValueError(f"{path}: '// PASSES:' must name passes of backend/pipeline.py (unknown: {unknown})")
    if not case.checks:
        raise ValueError(f"{path}: no '// CHECK:' lines")
    return case


def run_case(case: Case) -> str:
    """Run the case's passes on its input; returns the printed output."""
    opts = dict(case.options)
    spec = TargetSpec.load(opts.pop("target", "nmp-64"))
    if "spm_bytes" in opts:  # a smaller scratchpad, so a case on small tiles needs legalization
        spec = dataclasses.replace(spec, spm_bytes=int(opts.pop("spm_bytes")))
    ctx = PassContext(spec, int(opts.pop("num_stages", 2)), chunk=int(opts.pop("chunk", 0)))
    if opts:
        raise ValueError(f"{case.path}: unknown options {sorted(opts)}")
    if case.path.suffix == ".ttir":
        mod = import_ttir(case.text)
    else:
        mod = parse_module(case.text)
        verify(mod, "parsing the test input")
    mod = run_passes(mod, ctx, [PASSES_BY_NAME[p] for p in case.passes])
    text = print_module(mod)
    if "pipeline-grid" in case.passes:
        text = f"// grid pipeline: {ctx.grid_pipeline[1]}\n" + text
    if ctx.spill is not None:
        text = ctx.spill.summary() + "\n" + text
    return ctx.plan.summary() + "\n" + text if ctx.plan is not None else text


def _norm(s: str) -> str:
    return " ".join(s.split())


def check_output(case: Case, output: str) -> None:
    """FileCheck-style matching of the case's CHECK lines against `output`; raises AssertionError."""
    lines = [_norm(x) for x in output.splitlines()]
    pos = 0  # next line to search from
    last = -1  # line of the previous match
    forbidden: list[str] = []
    for kind, text in case.checks:
        want = _norm(text)
        if kind == "CHECK-NOT":
            forbidden.append(want)
            continue
        if kind == "CHECK-NEXT":
            hit = last + 1 if last + 1 < len(lines) and want in lines[last + 1] else None
        else:
            hit = next((k for k in range(pos, len(lines)) if want in lines[k]), None)
        if hit is None:
            where = "on the line after the previous match" if kind == "CHECK-NEXT" else f"from output line {pos + 1}"
            raise AssertionError(f"{case.path.name}: {kind}: '{text}' not found {where}\n--- output ---\n{output}")
        _check_not(case, forbidden, lines, last + 1, hit, output)
        forbidden = []
        last, pos = hit, hit + 1
    _check_not(case, forbidden, lines, last + 1, len(lines), output)


def _check_not(case: Case, forbidden: list[str], lines: list[str], start: int, end: int, output: str) -> None:
    for want in forbidden:
        for k in range(start, end):
            if want in lines[k]:
                raise AssertionError(f"{case.path.name}: CHECK-NOT: '{want}' found on output line {k + 1}\n"
                                     f"--- output ---\n{output}")


def all_cases() -> list[Path]:
    return sorted(p for p in CASES_DIR.rglob("*") if p.suffix in (".nmpir", ".ttir"))
