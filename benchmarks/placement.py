"""Automatic placement (issue 12): ratios against the old defaults, measured in the same run.

1. Kernels out of the box (the sizes of benchmarks/roofline.py, no place() call): simulated time and
   % of the local-bandwidth bound with the default `auto` placement and mapping, against the named
   baseline "interleaved + round_robin" (1 KiB interleaving, programs dealt round robin: the defaults
   before issue 12).
2. The model-level pass on decode-shaped GEMV graphs (`triton_nmp.placement_examples.GemvChain`):
   step time of the plan (measured after `apply`) against the baseline placement and against the
   per-kernel auto placement; the greedy pass against the ILP optimum (CBC, with whether CBC proved
   optimality) on graphs of up to 50 kernels, on nmp-64 and on hbm-pim-like; the pass's time
   (capture + graph + greedy) on a 32-layer decoder-shaped graph.
3. Two targets where the best layout differs: a hidden vector h written by one GEMV and read by F
   GEMVs (`placement_examples.FanOut`): the ILP's home for h on nmp-64 and hbm-pim-like by F, the step
   time with h replicated vs the best other home, and both applied and simulated at F = 4.

    python benchmarks/placement.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import machine_line, table  # noqa: E402

import triton_nmp  # noqa: E402
from triton_nmp import examples as ex  # noqa: E402
from triton_nmp import placement_pass as pp  # noqa: E402
from triton_nmp.placement import clear_placements, set_default_policy  # noqa: E402
from triton_nmp.placement_examples import FanOut, GemvChain  # noqa: E402

BASELINE = "interleaved + round_robin"


def _kernels(quick: bool) -> list[tuple[str, Callable[[str], Callable[[], object]]]]:
    s = 4 if quick else 1
    n = (16 << 20) // s
    rows_sm, rows_ln = 4096 // s, 2048 // s

    def vadd(mapping: str):
        x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
        return lambda: ex.add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096, pu_mapping=mapping)

    def softmax(mapping: str):
        x = torch.randn(rows_sm, 1024)
        out = torch.empty_like(x)
        return lambda: ex.softmax_kernel[(rows_sm,)](out, x, 1024, 1024, 1024, BLOCK=1024, pu_mapping=mapping)

    def layernorm(mapping: str):
        x, w, b = torch.randn(rows_ln, 4096), torch.randn(4096), torch.randn(4096)
        y, mean, rstd = torch.empty_like(x), torch.empty(rows_ln), torch.empty(rows_ln)
        return lambda: ex.layernorm_fwd_kernel[(rows_ln,)](x, y, w, b, mean, rstd, 4096, 4096, 4096, 1e-5,
                                                           BLOCK=1024, pu_mapping=mapping)

    return [(f"vector_add n={n} fp32 BLOCK=4096", vadd), (f"softmax {rows_sm}x1024 fp32", softmax),
            (f"layernorm {rows_ln}x4096 fp32 BLOCK=1024", layernorm)]


def _time_launch(make: Callable[[str], Callable[[], object]], policy: str, mapping: str):
    clear_placements()
    set_default_policy(policy)
    fn = make(mapping)
    fn()  # first launch: compiles, places (host writes), ...
    with triton_nmp.profile() as prof:
        fn()  # ... the launch measured runs on placed data
    return prof.launches[-1]


def section_kernels(quick: bool) -> None:
    spec = triton_nmp.active_target()
    rows = []
    for name, make in _kernels(quick):
        base = _time_launch(make, "interleaved", "round_robin")
        auto = _time_launch(make, "auto", "auto")
        local = spec.roofline_seconds(auto.flops, auto.bytes_local + auto.bytes_remote, 0.0, "fp32")
        rows.append([name, f"{base.sim_seconds * 1e6:.1f}", f"{100 * local / base.sim_seconds:.1f}%",
                     f"{auto.sim_seconds * 1e6:.1f}", f"{100 * local / auto.sim_seconds:.1f}%",
                     f"{100 * auto.bytes_remote / max(1, auto.bytes_local + auto.bytes_remote):.1f}%", auto.mapping,
                     f"{base.sim_seconds / auto.sim_seconds:.2f}x"])
    print(f"\n1. kernels out of the box on {spec.name} (no place() call); baseline: {BASELINE}")
    print(table(["kernel", "baseline us", "% local", "auto us", "% local", "remote", "auto mapping",
                 "speedup"], rows, {1, 2, 3, 4, 5, 7}))
    print("% local = local-bandwidth bound (flops at peak, every byte at local bank bandwidth) / simulated time")


def _chain_step(model: GemvChain, policy: str) -> float:
    set_default_policy(policy)
    model.step()
    with triton_nmp.profile() as prof:
        model.step()
    return prof.sim_seconds


def _graph(model: GemvChain | FanOut) -> pp.PlacementGraph:
    set_default_policy("interleaved")
    model.step()
    with pp.capture() as cap:
        model.step()
    return cap.graph()


def _gap(greedy: pp.Plan, ilp: pp.Plan) -> str:
    return f"{100 * (greedy.seconds / ilp.seconds - 1):.2f}%"


def section_pass(quick: bool) -> None:
    print("\n2. model-level pass on decode-shaped GEMV graphs (fp16, d=768, ffn=3072, 3 GEMVs per layer)")
    rows = []
    for layers in ((1, 4) if quick else (1, 4, 8, 16)):
        clear_placements()
        m = GemvChain(layers=layers, d=768, block_n=8, ffn=3072)
        base = _chain_step(m, "interleaved")
        with pp.capture() as cap:
            m.step()
        g = cap.graph()
        greedy = pp.solve(g, "greedy")
        ilp = pp.solve(g, "ilp", time_limit=ILP_SECONDS)
        pp.apply(ilp)
        m.step()
        with triton_nmp.profile() as prof:
            out = m.step()
        plan_s = prof.sim_seconds + prof.transfer_seconds  # migrations are part of the step
        assert torch.allclose(out.float(), m.reference(), atol=5e-2, rtol=5e-2)
        clear_placements()
        m2 = GemvChain(layers=layers, d=768, block_n=8, ffn=3072)
        auto = _chain_step(m2, "auto")
        rows.append([str(layers), str(len(g.kernels)), f"{base * 1e6:.1f}", f"{auto * 1e6:.1f}",
                     f"{plan_s * 1e6:.1f}", f"{base / plan_s:.2f}x", f"{ilp.seconds * 1e6:.1f}",
                     "yes" if ilp.optimal else "no", f"{greedy.seconds * 1e6:.1f}", _gap(greedy, ilp),
                     f"{ilp.solve_seconds:.2f}", f"{greedy.solve_seconds:.2f}", f"{g.build_seconds:.2f}"])
        pp.remove()
    print(table(["layers", "kernels", "baseline us", "auto us", "plan us", "plan vs baseline", "ILP us", "proven",
                 "greedy us", "greedy gap", "ILP s", "greedy s", "graph s"], rows, set(range(1, 13)) - {7}))
    print(f"baseline: {BASELINE}; auto: per-kernel auto placement (first use decides); plan: the ILP's plan, "
          "applied, measured on the next step; proven: CBC proved the plan optimal (gap 0) within "
          f"{ILP_SECONDS:.0f} s")
    section_gap(quick)
    layers = 8 if quick else 32
    clear_placements()
    set_default_policy("auto")
    m = GemvChain(layers=layers, d=768, block_n=8, ffn=3072)
    m.step()
    t0 = time.perf_counter()
    with pp.capture() as cap:
        m.step()
    t1 = time.perf_counter()
    g = cap.graph()
    plan = pp.solve(g, "greedy")
    t2 = time.perf_counter()
    print(f"{layers}-layer graph ({len(g.kernels)} kernels, {len(g.tensors)} tensors): capture step {t1 - t0:.2f} s "
          f"(simulated run), graph + costs {g.build_seconds:.2f} s, greedy {plan.solve_seconds:.2f} s; "
          f"pass total {t2 - t1:.2f} s (goal < 10 s)")


ILP_SECONDS = 60.0


def section_gap(quick: bool) -> None:
    """Greedy vs the proven optimum over graph sizes up to 50 kernels, on both targets."""
    print("\n2b. greedy vs the ILP optimum by graph size (costs only: no plan applied)")
    rows = []
    families = [("nmp-64", "GEMV chain d=768 ffn=3072, 3 per layer", (1, 2, 4, 8, 12, 16),
                 lambda n: GemvChain(layers=n, d=768, block_n=8, ffn=3072)),
                ("hbm-pim-like", "GEMV chain d=512 BLOCK_N=1", (3, 12, 25, 50),
                 lambda n: GemvChain(layers=n, d=512, block_n=1)),
                ("nmp-64", "FanOut d=256, F readers of h", (3, 5, 7, 16, 49), lambda n: FanOut(readers=n - 1, d=256)),
                ("hbm-pim-like", "FanOut d=256, F readers of h", (3, 5, 7, 16, 49),
                 lambda n: FanOut(readers=n - 1, d=256))]
    try:
        for target, shape, sizes, make in families:
            triton_nmp.activate(target)
            for n in sizes[:2] if quick else sizes:
                clear_placements()
                g = _graph(make(n))
                greedy, ilp = pp.solve(g, "greedy"), pp.solve(g, "ilp", time_limit=ILP_SECONDS)
                rows.append([target, shape, str(len(g.kernels)), str(len(g.tensors)), f"{ilp.seconds * 1e6:.2f}",
                             "yes" if ilp.optimal else "no", f"{ilp.solve_seconds:.2f}", f"{greedy.seconds * 1e6:.2f}",
                             _gap(greedy, ilp), f"{greedy.solve_seconds:.2f}"])
    finally:
        triton_nmp.activate("nmp-64")
    print(table(["target", "graph", "kernels", "tensors", "ILP us", "proven", "ILP s", "greedy us", "greedy gap",
                 "greedy s"], rows, {2, 3, 4, 6, 7, 8, 9}))
    print("greedy gap = greedy plan's predicted step time / the ILP's - 1 (goal: within 2% up to 50 kernels)")


def _restricted(g: pp.PlacementGraph, tensor: pp.TensorNode, layouts: list) -> pp.Plan:
    """The ILP's optimum with `tensor`'s home limited to `layouts`."""
    keep = tensor.candidates
    tensor.candidates = layouts
    try:
        return pp.solve(g, "ilp", time_limit=ILP_SECONDS)
    finally:
        tensor.candidates = keep


def section_targets(quick: bool) -> None:
    d = 256
    print(f"\n3. two targets, one model: h = W0 x, then F GEMVs read h (FanOut, fp16, d={d}, one row per program); "
          "the ILP's home for h")
    rows, flips, costs = [], {}, {}
    for target in ("nmp-64", "hbm-pim-like"):
        triton_nmp.activate(target)
        for readers in (1, 2, 4) if quick else (1, 2, 3, 4, 6, 8):
            clear_placements()
            m = FanOut(readers=readers, d=d)
            g = _graph(m)
            h = next(t for t in g.tensors if t.ptr == m.h.data_ptr())
            best = pp.solve(g, "ilp", time_limit=ILP_SECONDS)
            rep = _restricted(g, h, [("replicated", None)])
            other = _restricted(g, h, [c for c in h.candidates if c[0] != "replicated"])
            home = pp.describe_layout(best.homes[h.id])
            if home == "replicated":
                flips.setdefault(target, readers)
            measured = ""
            if readers == 4:  # both homes applied and run on the simulator
                times = []
                for plan in (rep, other):
                    pp.apply(plan)
                    m.step()
                    with triton_nmp.profile() as prof:
                        ys = m.step()
                    assert all(torch.allclose(y.float(), r, atol=5e-2, rtol=5e-2) for y, r in zip(ys, m.reference()))
                    times.append(prof.sim_seconds + prof.transfer_seconds)
                    pp.remove()
                measured = f"{times[0] * 1e6:.2f} / {times[1] * 1e6:.2f}"
            costs.setdefault(target, {})[readers] = (rep.seconds, other.seconds)
            rows.append([target, str(readers), home, f"{rep.seconds * 1e6:.2f}",
                         f"{other.seconds * 1e6:.2f} ({pp.describe_layout(other.homes[h.id])})",
                         f"{other.seconds / rep.seconds:.3f}", measured])
    triton_nmp.activate("nmp-64")
    print(table(["target", "readers F", "best home of h", "h replicated us", "h not replicated us (best)",
                 "not/replicated", "simulated rep / not"], rows, {1, 3, 5}))
    print("us: the step's predicted time (ILP optimum with h's home fixed); simulated: both plans applied and run")
    print("replication pays from F = " + ", ".join(f"{t}: {f}" for t, f in flips.items()))
    for target, c in costs.items():  # from F = 1 and 2: what one more reader saves, what the copies cost
        saving = (c[2][1] - c[1][1]) - (c[2][0] - c[1][0])
        extra = c[1][0] - c[1][1] + saving
        print(f"{target}: a local copy saves {saving * 1e6:.2f} us per reader kernel; writing h to every bank costs "
              f"{extra * 1e6:.2f} us more than writing it once: break-even at {extra / saving:.1f} readers")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sections", default="1,2,3")
    args = ap.parse_args()
    print(machine_line())
    triton_nmp.activate("nmp-64")
    old = triton_nmp.default_placement()
    try:
        if "1" in args.sections:
            section_kernels(args.quick)
        if "2" in args.sections:
            section_pass(args.quick)
        if "3" in args.sections:
            section_targets(args.quick)
    finally:
        set_default_policy(old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
