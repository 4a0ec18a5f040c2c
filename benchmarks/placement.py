"""Automatic placement (issue 12): ratios against the old defaults, measured in the same run.

1. Kernels out of the box (the sizes of benchmarks/roofline.py, no place() call): simulated time and
   % of the local-bandwidth bound with the default `auto` placement and mapping, against the named
   baseline "interleaved + round_robin" (1 KiB interleaving, programs dealt round robin: the defaults
   before issue 12).
2. The model-level pass on decode-shaped GEMV graphs (`triton_nmp.placement_examples.GemvChain`):
   step time of the plan (measured after `apply`) against the baseline placement and against the
   per-kernel auto placement; the greedy pass against the ILP optimum (CBC) on graphs of up to 50
   kernels; the pass's time (capture + graph + greedy) on a 32-layer decoder-shaped graph.
3. Two targets: the layouts the auto policy picks for the same kernels on nmp-64 and hbm-pim-like.

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
from triton_nmp.placement import clear_placements, lookup, set_default_policy  # noqa: E402
from triton_nmp.placement_examples import GemvChain  # noqa: E402

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
        ilp = pp.solve(g, "ilp") if len(g.kernels) <= 50 else None
        best = ilp or greedy
        pp.apply(best)
        m.step()
        with triton_nmp.profile() as prof:
            out = m.step()
        plan_s = prof.sim_seconds + prof.transfer_seconds  # migrations are part of the step
        assert torch.allclose(out.float(), m.reference(), atol=5e-2, rtol=5e-2)
        clear_placements()
        m2 = GemvChain(layers=layers, d=768, block_n=8, ffn=3072)
        auto = _chain_step(m2, "auto")
        gap = f"{100 * (greedy.seconds / ilp.seconds - 1):.2f}%" if ilp else "n/a"
        rows.append([str(layers), str(len(g.kernels)), f"{base * 1e6:.1f}", f"{auto * 1e6:.1f}",
                     f"{plan_s * 1e6:.1f}", f"{base / plan_s:.2f}x",
                     f"{ilp.seconds * 1e6:.1f}" if ilp else "n/a", f"{greedy.seconds * 1e6:.1f}", gap,
                     f"{ilp.solve_seconds:.2f}" if ilp else "n/a", f"{greedy.solve_seconds:.2f}",
                     f"{g.build_seconds:.2f}"])
        pp.remove()
    print(table(["layers", "kernels", "baseline us", "auto us", "plan us", "plan vs baseline", "ILP us",
                 "greedy us", "greedy gap", "ILP s", "greedy s", "graph s"], rows, set(range(1, 12))))
    print(f"baseline: {BASELINE}; auto: per-kernel auto placement (first use decides); plan: the pass's plan, "
          "applied, measured on the next step")
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


def section_targets() -> None:
    print("\n3. the same kernels on two targets: the layouts the auto policy picks (largest legal BLOCK per target)")
    rows = []
    for target in ("nmp-64", "hbm-pim-like"):
        triton_nmp.activate(target)
        spec = triton_nmp.active_target()
        for block in (4096, 2048, 1024, 512, 256):
            clear_placements()
            set_default_policy("auto")
            n = 1 << 20
            x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
            try:
                ex.add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
            except triton_nmp.NMPError:
                continue
            with triton_nmp.profile() as prof:
                ex.add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
            rec = prof.launches[-1]
            rows.append([spec.name, f"vector_add BLOCK={block}", lookup(x.data_ptr(), n * 4).describe(),
                         rec.mapping, f"{100 * rec.bytes_remote / (rec.bytes_local + rec.bytes_remote):.1f}%",
                         f"{rec.sim_seconds * 1e6:.1f}"])
            break
        clear_placements()
        m = GemvChain(layers=1, d=512, block_n=8 if spec.spm_bytes >= 65536 else 1)
        m.step()
        with pp.capture() as cap:
            m.step()
        plan = pp.solve(cap.graph(), "greedy")
        lay = ", ".join(f"{t.name.split('.')[-1]}={pp.describe_layout(plan.homes[t.id])}" for t in plan.graph.tensors)
        rows.append([spec.name, f"gemv 512x512 BLOCK_N={m.block_n}", lay, "", "", f"{plan.seconds * 1e6:.1f}"])
    triton_nmp.activate("nmp-64")
    print(table(["target", "kernel", "layout chosen", "mapping", "remote", "sim us"], rows, {4, 5}))


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
            section_targets()
    finally:
        set_default_policy(old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
