"""Model-level placement: a layout for every tensor, a mapping for every kernel, migrations where they pay.

The graph is what one step of a compiled model (`torch.compile(model, backend="nmp")`, or any sequence
of nmp launches) does: `capture()` records every launch with its static footprint (`triton_nmp.footprint`)
and the tensors behind its pointer arguments. Tensors are weights (never written in the step), state
(read before it is written, e.g. a KV cache) or activations (written first).

The optimisation (after Alpa's ILP over shardings with resharding costs):

* every tensor t gets one home layout a from its candidates L_t (`y[t, a]`, one-hot): the footprint-
  aligned layouts its kernels ask for, replication (a written replica is written to every bank: a
  broadcast store, charged by the timing model), the default interleaving;
* every kernel k runs one strategy s from S_k (`x[k, s]`, one-hot): a layout for each of its tensors,
  costed by the timing model on the kernel's predicted trace with the auto mapping (owner computes,
  never slower than round robin): the layouts the auto layout choice gives under each reference
  mapping, the default interleaving, and the layouts the tensors had when captured. An autotuned
  kernel (`triton_nmp.autotune`) whose tuning cache holds an entry for a strategy's layouts is costed
  by that entry instead: the simulated time of the config tuned for those layouts, which is the
  config its autotuner launches once the plan is applied (its key includes the layouts);
* a kernel whose strategy wants t in layout b != home a migrates it: re-laid out before the kernel and
  back after it, each charged as a transfer (`simulator.transfer.relayout`); linearised with
  w[k, s, t, a] >= x[k, s] + y[t, a] - 1;
* bank capacity: for every bank, the bytes the home layouts put there stay within the bank;
* minimise the step's simulated time: sum of strategy costs and migration costs.

`solve(graph, "ilp")` hands the model to CBC through PuLP (an optional dependency: the `placement`
extra); `solve(graph, "greedy")` is the fast heuristic for large graphs: every tensor takes the layout
its heaviest kernel's best strategy wants, every kernel its best strategy given the homes, then
coordinate descent over tensors (each tensor tries every candidate, re-picking the strategies of its
kernels) until nothing improves; it also descends from a sequential start (kernels in launch order,
each fixing the layouts of the tensors it touches first) and from the captured layouts, and keeps
the best. `apply(plan)` places every tensor in its home layout (weights once,
as at model load; a tensor already there moves nothing) and installs the migrations, which run
around their kernels in every later step.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from triton_nmp.abi import KIND_DMA_LOAD, KIND_DMA_STORE, KIND_GATHER, KIND_SCATTER
from triton_nmp.errors import NMPError
from triton_nmp.placement import DEFAULT_GRANULARITY, Placement
from triton_nmp.target import TargetSpec, active_target

__all__ = ["TensorNode", "KernelNode", "Strategy", "PlacementGraph", "Plan", "capture", "solve", "apply",
           "remove", "Layout"]

Layout = tuple[str, int | None]  # (policy, granularity): the part of a Placement a plan chooses
US = 1e6  # the ILP's objective is in microseconds: in seconds, differences sit below CBC's tolerances


class NMPPlacementPassError(NMPError, RuntimeError):
    """The placement pass cannot run (no solver installed, no launch captured, infeasible capacities)."""


def _layout(pl: Placement) -> Layout:
    return (pl.policy, pl.granularity if pl.policy == "interleaved" else None)


def _placement(lay: Layout, nbytes: int, origin: int = 0) -> Placement:
    return Placement(lay[0], None, lay[1], int(nbytes), int(origin))


def describe_layout(lay: Layout) -> str:
    return f"interleaved {lay[1]} B" if lay[0] == "interleaved" else lay[0]


@dataclass
class TensorNode:
    id: int
    name: str
    nbytes: int
    kind: str  # "weight" | "state" | "activation"
    candidates: list[Layout]
    captured: Layout  # its layout when captured
    ref: Any = field(default=None, repr=False)  # weakref to the tensor
    ptr: int = 0


@dataclass
class Strategy:
    layouts: dict[int, Layout]  # tensor id -> layout this strategy runs with
    seconds: float  # kernel time with these layouts (timing model, auto mapping)
    mapping: str  # the auto mapping's choice
    origin: str  # where the strategy came from ("captured", "auto/round_robin", ...)


@dataclass
class KernelNode:
    index: int
    kernel: str
    grid: tuple[int, int, int]
    tensors: dict[int, str]  # tensor id -> "r", "w" or "rw"
    strategies: list[Strategy]
    exact: bool  # static footprint (else only the captured strategy)


@dataclass
class PlacementGraph:
    tensors: list[TensorNode]
    kernels: list[KernelNode]
    target: str
    bank_bytes: int
    num_banks: int
    migration: dict[tuple[int, Layout, Layout], float] = field(default_factory=dict)  # (bytes, a, b) -> seconds
    build_seconds: float = 0.0

    def migration_seconds(self, t: int, a: Layout, b: Layout) -> float:
        if a == b:
            return 0.0
        key = (self.tensors[t].nbytes, a, b)  # the cost depends on the size and the two layouts only
        if key not in self.migration:
            from triton_nmp.simulator.transfer import relayout

            spec = active_target()
            n = self.tensors[t].nbytes
            there = relayout(_placement(a, n), 0, _placement(b, n), n, spec).seconds
            back = relayout(_placement(b, n), 0, _placement(a, n), n, spec).seconds
            self.migration[key] = there + back
        return self.migration[key]

    def bank_load(self, t: int, lay: Layout) -> np.ndarray:
        n = self.tensors[t].nbytes
        if lay[0] == "replicated":
            return np.full(self.num_banks, float(n))
        return _placement(lay, n).bank_bytes([0], [n], 0, self.num_banks)


# ------------------------------------------------------------------------------------------- capture


@dataclass
class _Launch:
    launcher: Any
    kernel: str
    grid: tuple[int, int, int]
    vals: tuple[int, ...]
    fp: Any
    args: list[tuple[int, int, int, str, Any]]  # (arg index, ptr, nbytes, name, tensor)
    key: Any = None  # what the footprint depends on: grid, scalars, spans (not where the buffers are)
    tuned: Any = None  # (NMPAutotuner, named arguments) when the launch is an autotuned kernel's


class Capture:
    """Launches recorded by `capture()`; `graph()` builds the placement graph from them."""

    def __init__(self, names: dict[int, str] | None = None):
        self.launches: list[_Launch] = []
        self.names = names or {}

    def _observe(self, launcher: Any, args: Any, vals: tuple[int, ...], grid: tuple[int, int, int]) -> None:
        from triton_nmp.footprint import launch_footprint

        key = (grid, launcher._scalars(vals), tuple(vals[slot + 1] for _, slot, _ in launcher._ptr_args))
        fp = launch_footprint(launcher.metadata, launcher.abi.args, vals, grid, key)
        ptrs = []
        for i, slot, name in launcher._ptr_args:
            ptr, nbytes = vals[slot], vals[slot + 1]
            t = launcher._tensor_of(args, i)
            if ptr and nbytes and t is not None:
                ptrs.append((i, ptr, nbytes, name, t))
        from triton_nmp.tuning.layouts import current_launch

        tuned = current_launch()
        self.launches.append(_Launch(launcher, launcher.kernel_name, grid, vals, fp, ptrs,
                                     (launcher._kernel_id, key), tuned))

    def graph(self, spec: TargetSpec | None = None) -> PlacementGraph:
        return build_graph(self, spec or active_target())


@contextlib.contextmanager
def capture(model: Any = None) -> Iterator[Capture]:
    """Record the launches run inside the context (one step of a model). With `model`, weights are
    named after its parameters and buffers."""
    from triton_nmp.driver import launcher as launcher_mod

    names: dict[int, str] = {}
    if model is not None:
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            names.setdefault(t.data_ptr(), n)
    cap = Capture(names)
    launcher_mod.before_launch.append(cap._observe)
    try:
        yield cap
    finally:
        launcher_mod.before_launch.remove(cap._observe)


def _kinds(recs: np.ndarray) -> tuple[bool, bool]:
    loads = bool(np.isin(recs[:, 0], (KIND_DMA_LOAD, KIND_GATHER)).any())
    stores = bool(np.isin(recs[:, 0], (KIND_DMA_STORE, KIND_SCATTER)).any())
    return loads, stores


def build_graph(cap: Capture, spec: TargetSpec) -> PlacementGraph:
    """Tensors, kernels and strategy costs from the captured launches (costs: the timing model on each
    launch's predicted trace; identical launches share their table)."""
    from triton_nmp.auto_layout import candidate_layouts, layouts_per_reference
    from triton_nmp.placement import lookup
    from triton_nmp.simulator.timing import ArgBuffer, simulate_timing

    t0 = time.perf_counter()
    if not cap.launches:
        raise NMPPlacementPassError("placement pass: no nmp launch was captured; run one step of the model "
                                    "inside `with capture():`")
    P = spec.num_pus
    tensors: list[TensorNode] = []
    by_range: dict[tuple[int, int], int] = {}
    access: dict[int, list[str]] = {}
    for ln in cap.launches:
        for i, ptr, nbytes, name, t in ln.args:
            tid = by_range.get((ptr, nbytes))
            if tid is None:
                tid = len(tensors)
                by_range[(ptr, nbytes)] = tid
                cur = lookup(ptr, nbytes)
                captured = _layout(cur) if cur is not None and cur.policy != "auto" else ("interleaved",
                                                                                          DEFAULT_GRANULARITY)
                label = cap.names.get(ptr) or f"{ln.kernel}.{name}"
                tensors.append(TensorNode(tid, label, nbytes, "", [captured], captured, weakref.ref(t), ptr))
            if ln.fp.exact:
                recs = ln.fp.trace[(ln.fp.trace[:, 2] == i) & (ln.fp.trace[:, 0] <= KIND_SCATTER)]
                loads, stores = _kinds(recs) if recs.size else (False, False)
            else:
                loads, stores = True, True
            access.setdefault(tid, []).append(("r" if loads else "") + ("w" if stores else ""))
    for tid, acc in access.items():
        seq = [a for a in acc if a]
        written = any("w" in a for a in seq)
        node = tensors[tid]
        if not written:
            node.kind = "weight"
        elif seq and seq[0].startswith("r"):
            node.kind = "state"
        else:
            node.kind = "activation"

    memo: dict[Any, tuple[float, str]] = {}
    kernels: list[KernelNode] = []
    staged: list[tuple[dict[int, int], dict[int, str], list[tuple[str, dict[int, Layout]]]]] = []
    for ln in cap.launches:
        arg_t = {i: by_range[(ptr, nbytes)] for i, ptr, nbytes, _, _ in ln.args}
        acc = {}
        for i, tid in arg_t.items():
            if ln.fp.exact:
                recs = ln.fp.trace[(ln.fp.trace[:, 2] == i) & (ln.fp.trace[:, 0] <= KIND_SCATTER)]
                lo, st = _kinds(recs) if recs.size else (False, False)
            else:
                lo, st = True, True
            acc[tid] = ("r" if lo else "") + ("w" if st else "") or "-"
        n = ln.grid[0] * ln.grid[1] * ln.grid[2]
        proposals: list[tuple[str, dict[int, Layout]]] = [
            ("captured", {t: tensors[t].captured for t in arg_t.values()})]
        if ln.fp.exact:
            proposals.append(("default", {t: ("interleaved", DEFAULT_GRANULARITY) for t in arg_t.values()}))
            todo = {i: (ptr, nbytes) for i, ptr, nbytes, _, _ in ln.args}
            nargs = max(arg_t) + 1
            per_ref, _ = layouts_per_reference(ln.fp.trace, n, [None] * nargs, todo, spec)
            for ref, choice in per_ref.items():
                lay = {arg_t[i]: _layout(c.placement) for i, c in choice.items()}
                for t in arg_t.values():
                    lay.setdefault(t, tensors[t].captured)
                proposals.append((f"auto/{ref}", lay))
                # the same without copies of tensors the step writes (a replica would be re-made every step)
                kept = {t: (tensors[t].captured if v[0] == "replicated" and tensors[t].kind != "weight" else v)
                        for t, v in lay.items()}
                proposals.append((f"auto/{ref}/no-replicas", kept))
                # and each tensor alone in its footprint layout, the others as captured
                for t, v in lay.items():
                    if v != tensors[t].captured and (v[0] != "replicated" or tensors[t].kind == "weight"):
                        one = {u: tensors[u].captured for u in arg_t.values()}
                        one[t] = v
                        proposals.append((f"auto/{ref}/{tensors[t].name}", one))
            dma = ln.fp.trace[ln.fp.trace[:, 0] <= KIND_SCATTER]
            for i, ptr, nbytes, _, _ in ln.args:
                recs = dma[dma[:, 2] == i]
                if recs.size:
                    for c in candidate_layouts(recs, n, nbytes, ptr, spec):
                        if _layout(c) not in tensors[arg_t[i]].candidates:
                            tensors[arg_t[i]].candidates.append(_layout(c))
            for t, v in proposals[2][1].items():  # auto layouts are candidates of their tensors too
                if v not in tensors[t].candidates:
                    tensors[t].candidates.append(v)
            for t in arg_t.values():  # a vector every program reads may be worth a copy per bank
                if ("replicated", None) not in tensors[t].candidates and tensors[t].nbytes * P <= 64 * spec.bank_bytes:
                    tensors[t].candidates.append(("replicated", None))
        staged.append((arg_t, acc, proposals))
    for k, ln in enumerate(cap.launches):
        arg_t, acc, proposals = staged[k]
        if ln.fp.exact:
            # an activation comes in whatever layout its producer leaves and leaves in the one its consumers
            # want: vary each over its candidates, the rest as the kernel's own best
            for origin, base in [p for p in proposals if p[0].endswith("/no-replicas")]:
                for t, mode in acc.items():
                    if tensors[t].kind != "weight" and mode in ("r", "w"):
                        for c in tensors[t].candidates:
                            if c != base[t]:
                                proposals.append((f"{origin}/{tensors[t].name}={describe_layout(c)}", {**base, t: c}))
        n = ln.grid[0] * ln.grid[1] * ln.grid[2]
        strategies: list[Strategy] = []
        seen: set[tuple] = set()
        for origin, lay in proposals:
            sig = tuple(sorted(lay.items()))
            if sig in seen:
                continue
            seen.add(sig)
            for t, v in lay.items():
                if v not in tensors[t].candidates:
                    tensors[t].candidates.append(v)
            # identical launches on other buffers (the layers of a model) share their cost table
            key = (ln.key, tuple((i, lay[arg_t[i]]) for i in sorted(arg_t)), id(spec))
            if key not in memo:
                if ln.fp.exact:
                    bufs: list[Any] = [None] * (max(arg_t) + 1)
                    for i, ptr, nbytes, name, _ in ln.args:
                        bufs[i] = ArgBuffer(name, ptr, nbytes, _placement(lay[arg_t[i]], nbytes, ptr))
                    tm = simulate_timing(ln.fp.trace, ln.grid, bufs, spec, mapping="auto", kernel=ln.kernel)
                    memo[key] = (tm.seconds, f"auto -> {tm.extra.get('auto_choice', '')}")
                else:
                    memo[key] = (math.nan, "round_robin")
                if ln.tuned is not None:
                    memo[key] = _tuned_cost(ln, {name: lay[arg_t[i]] for i, _, _, name, _ in ln.args}) or memo[key]
            sec, mapping = memo[key]
            strategies.append(Strategy(lay, sec, mapping, origin))
        kernels.append(KernelNode(k, ln.kernel, ln.grid, acc, strategies, bool(ln.fp.exact)))
    for node in tensors:  # a replica must fit in one bank (a written one is written to every copy: broadcast)
        node.candidates = [c for c in node.candidates if c[0] != "replicated" or node.nbytes <= spec.bank_bytes]
        if node.captured not in node.candidates:
            node.candidates.insert(0, node.captured)
    g = PlacementGraph(tensors, kernels, spec.name, spec.bank_bytes, P)
    for kn in kernels:  # a data-dependent launch keeps its captured time, whatever the layouts
        if not kn.exact:
            cap_time = _captured_seconds(cap.launches[kn.index])
            kn.strategies = [Strategy(s.layouts, cap_time, s.mapping, s.origin) for s in kn.strategies[:1]]
    g.build_seconds = time.perf_counter() - t0
    return g


def _tuned_cost(ln: _Launch, layouts: dict[str, Layout]) -> tuple[float, str] | None:
    """The tuning cache's cost of an autotuned launch with its tensors in `layouts`: the simulated time of
    the config tuned for exactly those layouts (`tuning.layouts.tuned_seconds`), which the autotuner
    then launches under the plan; None when that layout was never tuned (the timing model decides)."""
    from triton_nmp.tuning.layouts import tuned_seconds

    tuner, named = ln.tuned
    hit = tuned_seconds(tuner, named, {n: (lay[0], None, lay[1]) for n, lay in layouts.items()})
    return (hit[0], f"tuned: {hit[1]}") if hit is not None else None


def _captured_seconds(ln: _Launch) -> float:
    return 0.0  # not known before the launch is timed; constant across plans, so it does not steer them


# ------------------------------------------------------------------------------------------ solving


@dataclass
class Plan:
    """The pass's result: home layouts, strategies, migrations, predicted step time."""

    homes: dict[int, Layout]
    strategies: dict[int, int]  # kernel index -> strategy index
    seconds: float  # predicted step time (kernels + migrations)
    solver: str
    solve_seconds: float
    graph: PlacementGraph = field(repr=False)
    optimal: bool = False

    def migrations(self) -> list[tuple[int, int, Layout, Layout]]:
        """(kernel index, tensor id, home layout, layout during the kernel)."""
        out = []
        for k, s in self.strategies.items():
            for t, lay in self.graph.kernels[k].strategies[s].layouts.items():
                if lay != self.homes[t]:
                    out.append((k, t, self.homes[t], lay))
        return out

    def to_json(self) -> dict[str, Any]:
        g = self.graph
        return {
            "target": g.target, "solver": self.solver, "optimal": self.optimal, "seconds": self.seconds,
            "solve_seconds": self.solve_seconds, "build_seconds": g.build_seconds,
            "tensors": [{"name": t.name, "kind": t.kind, "bytes": t.nbytes, "layout": describe_layout(self.homes[t.id]),
                         "captured": describe_layout(t.captured), "candidates": len(t.candidates)} for t in g.tensors],
            "kernels": [{"index": k.index, "kernel": k.kernel, "grid": list(k.grid),
                         "strategy": k.strategies[self.strategies[k.index]].origin,
                         "mapping": k.strategies[self.strategies[k.index]].mapping,
                         "seconds": k.strategies[self.strategies[k.index]].seconds,
                         "strategies": len(k.strategies)} for k in g.kernels],
            "migrations": [{"kernel": g.kernels[k].kernel, "index": k, "tensor": g.tensors[t].name,
                            "home": describe_layout(a), "during": describe_layout(b),
                            "seconds": g.migration_seconds(t, a, b)} for k, t, a, b in self.migrations()],
        }

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)


def plan_cost(g: PlacementGraph, homes: dict[int, Layout], strategies: dict[int, int]) -> float:
    total = 0.0
    for k in g.kernels:
        s = k.strategies[strategies[k.index]]
        total += 0.0 if math.isnan(s.seconds) else s.seconds
        for t, lay in s.layouts.items():
            total += g.migration_seconds(t, homes[t], lay)
    return total


def _fits(g: PlacementGraph, homes: dict[int, Layout]) -> bool:
    load = np.zeros(g.num_banks)
    for t, lay in homes.items():
        load += g.bank_load(t, lay)
    return bool(load.max(initial=0.0) <= g.bank_bytes)


def _best_strategy(g: PlacementGraph, k: KernelNode, homes: dict[int, Layout]) -> tuple[int, float]:
    best = (0, math.inf)
    for i, s in enumerate(k.strategies):
        c = (0.0 if math.isnan(s.seconds) else s.seconds) + sum(
            g.migration_seconds(t, homes[t], lay) for t, lay in s.layouts.items())
        if c < best[1]:
            best = (i, c)
    return best


def solve_greedy(g: PlacementGraph, max_rounds: int = 8) -> Plan:
    """The fast heuristic (module docstring): descent from the heaviest kernels' wishes and from the
    captured layouts; the better plan wins, so it is never worse than what was captured."""
    t0 = time.perf_counter()
    starts = (_sequential(g), _wishes(g), {t.id: t.captured for t in g.tensors})
    best = min((_descend(g, h, max_rounds) for h in starts), key=lambda h: plan_cost(g, h, _strategies(g, h)))
    strategies = _strategies(g, best)
    return Plan(best, strategies, plan_cost(g, best, strategies), "greedy", time.perf_counter() - t0, g)


def _strategies(g: PlacementGraph, homes: dict[int, Layout]) -> dict[int, int]:
    return {k.index: _best_strategy(g, k, homes)[0] for k in g.kernels}


def _sequential(g: PlacementGraph) -> dict[int, Layout]:
    """Kernels in launch order, each taking its cheapest strategy given the homes fixed before it and
    fixing the homes of the tensors it touches first (what per-kernel auto placement does, but over
    the kernel's whole strategy set)."""
    homes: dict[int, Layout] = {}
    load = np.zeros(g.num_banks)
    for k in g.kernels:
        best, best_c = None, math.inf
        for s in k.strategies:
            new = {t: lay for t, lay in s.layouts.items() if t not in homes}
            extra = sum((g.bank_load(t, lay) for t, lay in new.items()), np.zeros(g.num_banks))
            if (load + extra).max(initial=0.0) > g.bank_bytes:
                continue
            c = (0.0 if math.isnan(s.seconds) else s.seconds) + sum(
                g.migration_seconds(t, homes[t], lay) for t, lay in s.layouts.items() if t in homes)
            if c < best_c:
                best, best_c, best_extra = new, c, extra
        if best is None:
            return {t.id: t.captured for t in g.tensors}
        homes.update(best)
        load += best_extra
    for t in g.tensors:
        homes.setdefault(t.id, t.captured)
    return homes


def _wishes(g: PlacementGraph) -> dict[int, Layout]:
    """Each tensor in the layout the heaviest kernel using it wants (its cheapest strategy)."""
    homes = {t.id: t.captured for t in g.tensors}
    weight: dict[int, float] = {}
    for k in g.kernels:  # the heaviest kernel's cheapest strategy sets a tensor's first home
        s = min(k.strategies, key=lambda s: 0.0 if math.isnan(s.seconds) else s.seconds)
        for t, lay in s.layouts.items():
            w = s.seconds if not math.isnan(s.seconds) else 0.0
            if w > weight.get(t, -1.0):
                weight[t], homes[t] = w, lay
    for t, lay in homes.items():
        if lay not in g.tensors[t].candidates:
            homes[t] = g.tensors[t].captured
    return homes if _fits(g, homes) else {t.id: t.captured for t in g.tensors}


def _descend(g: PlacementGraph, homes: dict[int, Layout], max_rounds: int) -> dict[int, Layout]:
    """Coordinate descent: each tensor tries every candidate layout (its kernels re-pick their
    strategies), keeping a change that lowers their cost and fits the banks, until none does."""
    homes = dict(homes)
    users: dict[int, list[KernelNode]] = {}
    for k in g.kernels:
        for t in k.strategies[0].layouts:
            users.setdefault(t, []).append(k)
    load = np.zeros(g.num_banks)
    for t, lay in homes.items():
        load += g.bank_load(t, lay)
    for _ in range(max_rounds):
        improved = False
        for node in g.tensors:
            t = node.id
            ks = users.get(t, [])

            def local(lay: Layout, t=t, ks=ks) -> float:
                trial = dict(homes)
                trial[t] = lay
                return sum(_best_strategy(g, k, trial)[1] for k in ks)

            cur_lay, cur = homes[t], local(homes[t])
            for lay in node.candidates:
                if lay == cur_lay:
                    continue
                new_load = load - g.bank_load(t, cur_lay) + g.bank_load(t, lay)
                if new_load.max(initial=0.0) > g.bank_bytes:
                    continue
                c = local(lay)
                if c < cur * (1 - 1e-9):
                    cur, cur_lay, load = c, lay, new_load
            if cur_lay != homes[t]:
                homes[t] = cur_lay
                improved = True
        if not improved:
            break
    return homes


def solve_ilp(g: PlacementGraph, time_limit: float = 120.0) -> Plan:
    """The optimisation of the module docstring, solved by CBC through PuLP."""
    try:
        import pulp
    except ImportError:
        raise NMPPlacementPassError("placement pass: the ILP solver needs PuLP (pip install 'triton-nmp[placement]' "
                                    "or pip install pulp); solve(graph, 'greedy') needs nothing") from None
    with warnings.catch_warnings():  # PuLP 3 deprecates the 2.x API we also support (LpVariable, PULP_CBC_CMD)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _solve_ilp(pulp, g, time_limit)


def _solve_ilp(pulp: Any, g: PlacementGraph, time_limit: float) -> Plan:
    """Migrations are linked to homes and strategies by a transportation polytope per (kernel, tensor):
    u[k, t, a, b] >= 0 with sum_b u = y[t, a] (t's home is a) and sum_a u = z[k, t, b] (the strategies
    of k that want t in b, summed), costed m(a -> b). It is exact at integer points like the product
    linearisation w >= x + y - 1, and its LP relaxation is far tighter (there, w = 0 whenever x, y <= 1/2),
    so CBC proves optimality on graphs of dozens of kernels in seconds."""
    t0 = time.perf_counter()
    prob = pulp.LpProblem("nmp_placement", pulp.LpMinimize)
    y = {(t.id, j): pulp.LpVariable(f"y_{t.id}_{j}", cat="Binary") for t in g.tensors for j in range(len(t.candidates))}
    x = {(k.index, i): pulp.LpVariable(f"x_{k.index}_{i}", cat="Binary") for k in g.kernels
         for i in range(len(k.strategies))}
    cost = []
    for t in g.tensors:
        prob += pulp.lpSum(y[t.id, j] for j in range(len(t.candidates))) == 1
    for k in g.kernels:
        prob += pulp.lpSum(x[k.index, i] for i in range(len(k.strategies))) == 1
        wants: dict[int, dict[Layout, list[int]]] = {}  # tensor -> layout -> strategies wanting it
        for i, s in enumerate(k.strategies):
            cost.append(US * (0.0 if math.isnan(s.seconds) else s.seconds) * x[k.index, i])
            for t, lay in s.layouts.items():
                wants.setdefault(t, {}).setdefault(lay, []).append(i)
        for t, by_lay in wants.items():
            homes = g.tensors[t].candidates
            if all(g.migration_seconds(t, a, b) == 0 for a in homes for b in by_lay):
                continue
            u = {(j, b): pulp.LpVariable(f"u_{k.index}_{t}_{j}_{n}", lowBound=0)
                 for j in range(len(homes)) for n, b in enumerate(by_lay)}
            for b, strategies in by_lay.items():
                prob += pulp.lpSum(u[j, b] for j in range(len(homes))) == pulp.lpSum(x[k.index, i] for i in strategies)
            for j, a in enumerate(homes):
                prob += pulp.lpSum(u[j, b] for b in by_lay) == y[t, j]
                for b in by_lay:
                    m = g.migration_seconds(t, a, b)
                    if m > 0:
                        cost.append(US * m * u[j, b])
    loads = {(t.id, j): g.bank_load(t.id, lay) for t in g.tensors for j, lay in enumerate(t.candidates)}
    for b in range(g.num_banks):
        prob += pulp.lpSum(float(loads[key][b]) * var for key, var in y.items() if loads[key][b]) <= g.bank_bytes
    prob += pulp.lpSum(cost)
    status = prob.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit, gapRel=0.0))
    if pulp.LpStatus[status] not in ("Optimal", "Not Solved") and prob.sol_status not in (1, 2):
        raise NMPPlacementPassError(f"placement pass: the solver found no feasible plan ({pulp.LpStatus[status]}): "
                                    f"the tensors do not fit the banks in any candidate layout")
    homes = {t.id: t.candidates[max(range(len(t.candidates)), key=lambda j: y[t.id, j].value() or 0)]
             for t in g.tensors}
    strategies = {k.index: max(range(len(k.strategies)), key=lambda i: x[k.index, i].value() or 0)
                  for k in g.kernels}
    plan = Plan(homes, strategies, plan_cost(g, homes, strategies), "ilp (CBC)", time.perf_counter() - t0, g,
                optimal=pulp.LpStatus[status] == "Optimal" and prob.sol_status == 1)
    return plan


def solve(g: PlacementGraph, method: str = "auto", **kw: Any) -> Plan:
    """'ilp', 'greedy', or 'auto' (the ILP for graphs of up to 50 kernels when PuLP is installed)."""
    if method == "auto":
        try:
            import pulp  # noqa: F401
        except ImportError:
            method = "greedy"
        else:
            method = "ilp" if len(g.kernels) <= 50 else "greedy"
    if method == "ilp":
        return solve_ilp(g, **kw)
    if method == "greedy":
        return solve_greedy(g, **kw)
    raise NMPPlacementPassError(f"placement pass: unknown method {method!r}; choose 'ilp', 'greedy' or 'auto'")


# ----------------------------------------------------------------------------------------- applying


_installed: list[Any] = []


def apply(plan: Plan) -> dict[str, int]:
    """Place every live tensor of the plan in its home layout and install its migrations; returns counts
    of what moved. Weights and state are copied (host data or another layout: charged); activations
    are written by their kernels, so only their layout is recorded."""
    from triton_nmp import placement as plm
    from triton_nmp.driver import launcher as launcher_mod

    remove()
    moved = {"placed": 0, "unchanged": 0, "gone": 0, "migrations": 0}
    for t in plan.graph.tensors:
        tensor = t.ref() if t.ref is not None else None
        if tensor is None or tensor.data_ptr() != t.ptr:
            moved["gone"] += 1
            continue
        home = plan.homes[t.id]
        cur = plm.lookup(t.ptr, t.nbytes)
        if cur is not None and cur.policy != "auto" and _layout(cur) == home:
            moved["unchanged"] += 1
            continue
        plm.assign(tensor, _placement(home, t.nbytes, t.ptr), copy=t.kind != "activation",
                   why=f"placement pass ({plan.solver}): {t.kind}", name=t.name)
        moved["placed"] += 1
    migr: dict[int, list[tuple[int, Layout, Layout]]] = {}
    for k, t, a, b in plan.migrations():
        migr.setdefault(k, []).append((t, a, b))
    if migr:
        hook = _MigrationHook(plan, migr)
        launcher_mod.before_launch.append(hook.before)
        launcher_mod.after_launch.append(hook.after)
        _installed.append(hook)
        moved["migrations"] = sum(len(v) for v in migr.values())
    return moved


def remove() -> None:
    """Uninstall the migrations of the applied plan (layouts stay)."""
    from triton_nmp.driver import launcher as launcher_mod

    for hook in _installed:
        with contextlib.suppress(ValueError):
            launcher_mod.before_launch.remove(hook.before)
        with contextlib.suppress(ValueError):
            launcher_mod.after_launch.remove(hook.after)
    _installed.clear()


class _MigrationHook:
    """Runs a plan's migrations around their kernels: the k-th launch of a step (steps are counted by
    the kernel sequence: the plan's first kernel starts a step) re-lays its tensors out, and back."""

    def __init__(self, plan: Plan, migr: dict[int, list[tuple[int, Layout, Layout]]]):
        self.plan, self.migr, self.pos = plan, migr, -1
        self.first = plan.graph.kernels[0].kernel

    def _move(self, k: int, forward: bool) -> None:
        from triton_nmp import placement as plm

        for t, a, b in self.migr.get(k, ()):
            node = self.plan.graph.tensors[t]
            tensor = node.ref()
            if tensor is not None:
                lay = b if forward else a
                plm.assign(tensor, _placement(lay, node.nbytes, node.ptr), why="placement pass: migration",
                           name=node.name)

    def before(self, launcher: Any, args: Any, vals: Any, grid: Any) -> None:
        if launcher.kernel_name == self.first and (self.pos < 0 or self.pos >= len(self.plan.graph.kernels) - 1):
            self.pos = 0
        else:
            self.pos += 1
        self._move(self.pos, True)

    def after(self, launcher: Any, args: Any, vals: Any, grid: Any) -> None:
        self._move(self.pos, False)


def asdict_plan(plan: Plan) -> dict[str, Any]:
    return asdict(plan)
