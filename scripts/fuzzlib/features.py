"""The features a program exercises, read from its live code (after dead-statement removal), for the
coverage table of a run: `load:<dtype>`, `cast:<from>-><to>`, `math:<fn>`, `reduce:<op>`,
`scan:<op>`, `dot:<dtype>`, `dot:kloop`, `loop:<kind>`, `atomic:<op>`, `mask`, `carried_ptr`,
`layout:<kind>`, `grid`, `bf16`, `shift:ashr-unsigned` (a signed value shifted right in an unsigned
type: arithmetically, as TTIR says; the interpreter shifts logically)."""

from __future__ import annotations

from .layout import load_sites
from .program import (
    Atomic,
    Bin,
    Cast,
    Const,
    Dot,
    Full,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Scan,
    Un,
    stmt_exprs,
    walk_exprs,
)
from .typecheck import infer


def features(p: Program) -> set[str]:
    from .minimise import dce
    p = dce(p)
    tags: set[str] = set()
    env: dict = {}

    def visit(body, loop):
        for s in body:
            if isinstance(s, Loop):
                tags.add(f"loop:{s.kind}")
                for name, init in s.carried:
                    env[name] = infer(init, env)
                visit(s.body, s)
                for _, upd in s.updates:
                    for x in walk_exprs(upd):
                        note(x, s)
                continue
            for e in stmt_exprs(s):
                for x in walk_exprs(e):
                    note(x, loop)
            if isinstance(s, Let):
                env[s.name] = infer(s.expr, env)
            if isinstance(s, Atomic):
                tags.add(f"atomic:{s.op}")

    def note(x, loop):
        if isinstance(x, Load):
            tags.add(f"load:{x.dtype}")
            if x.masked:
                tags.add("mask")
            if x.carried_ptr and x.along:
                tags.add("carried_ptr")
        elif isinstance(x, Bin) and x.op == ">>":
            if (infer(x.a, env).d.signed or isinstance(x.a, Const)) and infer(x, env).d.kind == "uint":
                tags.add("shift:ashr-unsigned")
        elif isinstance(x, Cast):
            tags.add(f"cast:{infer(x.a, env).dtype}->{x.dtype}")
        elif isinstance(x, Un) and x.op not in ("neg", "abs", "invert"):
            tags.add(f"math:{x.op}")
        elif isinstance(x, Reduce):
            tags.add(f"reduce:{x.op}")
        elif isinstance(x, Scan):
            tags.add(f"scan:{x.op}")
        elif isinstance(x, Dot):
            tags.add(f"dot:{infer(x.a, env).dtype}")
            if loop is not None:
                tags.add("dot:kloop")
        if isinstance(x, (Load, Full, Cast)) and x.dtype == "bfloat16":
            tags.add("bf16")

    visit(p.body, None)
    for ld, _ in load_sites(p):
        lay = p.layouts[ld.arg] if ld.arg < len(p.layouts) else "contig"
        if lay != "contig":
            tags.add(f"layout:{lay}")
    if p.grid > 1:
        tags.add("grid")
    return tags
