"""The shape of the code: no import cycles among the modules of backend/, driver/, simulator/ and
triton_nmp/ (all its subpackages; lazy imports inside functions count), and no module there over 800
lines (one job each; see docs/architecture.md)."""

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


def _resolve(target: str, mods: dict[str, Path]) -> str | None:
    """The project module an import of `target` loads (a name inside a module resolves to the module)."""
    while target and target not in mods:
        target = target.rpartition(".")[0]
    return target or None


def _imports(path: Path, package: str) -> list[tuple[ast.stmt, str, list[str]]]:
    """(statement, absolute module, imported names) of every import in the file, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.extend((node, a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.append((node, base, [a.name for a in node.names]))
    return out


def _package(name: str, path: Path) -> str:
    return name if path.stem == "__init__" else name.rpartition(".")[0]


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, at module level or inside functions (a lazy import
    is still a dependency). `from P import name` depends on the submodule P.name if there is one, else
    on the submodule P's __init__ re-exports `name` from, else on P's __init__ itself (which defines it)."""
    mods = _modules()
    reexports: dict[str, dict[str, str]] = {}  # package -> {name: submodule it comes from}
    for name, path in mods.items():
        if path.stem == "__init__":
            found = {}
            for node, base, names in _imports(path, name):
                if node.col_offset == 0 and base.startswith(name + ".") and base in mods:  # module level
                    found.update(dict.fromkeys(names, base))
            reexports[name] = found
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for _, base, names in _imports(path, _package(name, path)):
            for n in names or [None]:
                if n is None:
                    target = base
                elif f"{base}.{n}" in mods:
                    target = f"{base}.{n}"
                else:
                    target = reexports.get(base, {}).get(n, base)
                module = _resolve(target, mods)
                if module is not None and module != name:
                    deps.add(module)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]], scope: tuple[str, ...]) -> list[list[str]]:
    """Strongly connected components of more than one module among the modules under `scope`. Left
    out: `triton_nmp` itself (the public API, which every module's import runs first) and the
    backend/driver/simulator package __init__ modules, which only re-export."""
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


def test_no_import_cycles_anywhere_in_triton_nmp():
    assert _cycles(import_graph(), ("triton_nmp.",)) == []


def test_the_import_graph_counts_lazy_imports_and_re_exports():
    graph = import_graph()
    assert "triton_nmp.sweep.integrate" in graph["triton_nmp.tuning.stock"]  # imported inside a function
    # `from triton_nmp.tuning import prune_configs_by`: the module the package re-exports it from
    assert "triton_nmp.tuning.stock" in graph["triton_nmp.driver.autotune_hooks"]
    assert "triton_nmp.inductor.installation" in graph["triton_nmp.inductor.backend"]


def test_the_cycle_finder_finds_cycles():
    graph = {"triton_nmp.backend.a": {"triton_nmp.backend.b"}, "triton_nmp.backend.b": {"triton_nmp.backend.a"},
             "triton_nmp.backend.c": set()}
    assert _cycles(graph, ("triton_nmp.backend.",)) == [["triton_nmp.backend.a", "triton_nmp.backend.b"]]


def test_modules_have_one_job_and_stay_small():
    big = {str(p.relative_to(ROOT)): n for folder in PACKAGES for p in (ROOT / folder).rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}
