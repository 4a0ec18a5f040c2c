"""The shape of the code: no import cycles between the modules of backend/, driver/ and simulator/, and
no module of backend/, driver/, simulator/ or triton_nmp/ over 800 lines (one job each; see
docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"backend": "triton_nmp.backend", "driver": "triton_nmp.driver", "simulator": "triton_nmp.simulator",
            "triton_nmp": "triton_nmp"}
MAX_LINES = 800


def _module_name(folder: str, path: Path) -> str:
    """The dotted name of a module file under one of the PACKAGES folders (subpackages included)."""
    parts = [PACKAGES[folder], *path.relative_to(ROOT / folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    out = {}
    for folder in PACKAGES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            out[_module_name(folder, path)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level or inside functions (a lazy import
    is still a dependency). Importing a name from a package counts as importing that package."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.stem == "__init__" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]], scope: tuple[str, ...]) -> list[list[str]]:
    """Strongly connected components of more than one module among the modules under `scope`
    (package __init__ modules, which only re-export, are left out)."""
    nodes = [n for n in graph if n.startswith(scope) and not n.endswith(tuple(PACKAGES.values()))]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", ["triton_nmp.backend", "triton_nmp.driver", "triton_nmp.simulator"])
def test_no_import_cycles(package):
    assert _cycles(import_graph(), (package + ".",)) == []


def test_no_import_cycles_across_backend_driver_and_simulator():
    scope = ("triton_nmp.backend.", "triton_nmp.driver.", "triton_nmp.simulator.")
    assert _cycles(import_graph(), scope) == []


def test_the_cycle_finder_finds_cycles():
    graph = {"triton_nmp.backend.a": {"triton_nmp.backend.b"}, "triton_nmp.backend.b": {"triton_nmp.backend.a"},
             "triton_nmp.backend.c": set()}
    assert _cycles(graph, ("triton_nmp.backend.",)) == [["triton_nmp.backend.a", "triton_nmp.backend.b"]]


def test_modules_have_one_job_and_stay_small():
    big = {str(p.relative_to(ROOT)): n for folder in PACKAGES for p in (ROOT / folder).rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}
