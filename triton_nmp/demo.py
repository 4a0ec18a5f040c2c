"""Run every kernel of `triton_nmp.examples` on the active Triton driver and print what the hardware would do:
correctness against torch, simulated time and the fraction of the roofline floor it reaches (from a profile of
the second launch), compile time. Then a small GPT-2-shaped model compiled with `torch.compile(backend="nmp")`
and its profile, per Inductor kernel.

The first launch of a case pays for compilation (or a load from Triton's cache) plus one run; a second
launch with the same shapes hits the in-memory kernel cache. Their difference estimates compile time.
A case that shares a compiled kernel with an earlier case (same kernel, dtypes and specialization)
shows a small first-launch time: that is what happened, not a measurement error.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TextIO

from .examples import CASES, Case, check


@dataclass
class DemoRow:
    name: str
    shape: str
    ok: bool
    max_abs_err: float
    first_ms: float
    cached_ms: float
    error: str = ""
    sim_seconds: float = float("nan")  # simulated time of the second launch (all its kernel launches)
    roofline_seconds: float = float("nan")  # the roofline floor of the same launches

    @property
    def compile_ms(self) -> float:
        return max(self.first_ms - self.cached_ms, 0.0)

    @property
    def roofline_fraction(self) -> float:
        return self.roofline_seconds / self.sim_seconds if self.sim_seconds > 0 else float("nan")

    @property
    def verdict(self) -> str:
        if self.error:
            return f"NO ({self.error})"
        return f"{'yes' if self.ok else 'NO'} (max err {self.max_abs_err:.1e})"


def _driver_name() -> str:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return "Triton interpreter"
    import triton

    try:
        drv = triton.runtime.driver.active
    except RuntimeError as e:  # no driver at all: say so in the header, the cases will fail individually
        return f"none ({e})"
    return type(drv).__name__


def run_case(case: Case, size: str, seed: int = 0) -> DemoRow:
    """Run one case twice (first launch, cached and profiled launch) and check the first result against torch."""
    from triton_nmp.profiler import profile

    shape = case.describe(size)
    try:
        inputs = case.make_inputs(seed, size)
        t0 = time.perf_counter()
        out = case.run(inputs)
        t1 = time.perf_counter()
        with profile() as prof:
            case.run(inputs)
        t2 = time.perf_counter()
        result = check(out, case.reference(inputs), case.atol, case.rtol)
    except Exception as e:  # one broken case must not hide the others' results
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if os.environ.get("TRITON_NMP_DEMO_TRACEBACK"):
            traceback.print_exc()
        return DemoRow(case.name, shape, False, float("nan"), float("nan"), float("nan"), msg[:100])
    roofline = sum(r.roofline_seconds for r in prof.launches) if prof.launches else float("nan")
    return DemoRow(case.name, shape, result.ok, result.max_abs_err, (t1 - t0) * 1e3, (t2 - t1) * 1e3, result.detail,
                   prof.sim_seconds if prof.launches else float("nan"), roofline)


def format_table(rows: list[DemoRow]) -> str:
    headers = ("kernel", "shape", "correct", "sim time us", "% roofline", "compile+run ms", "compile ms")
    body = [
        (r.name, r.shape, r.verdict, f"{r.sim_seconds * 1e6:.1f}", f"{100 * r.roofline_fraction:.1f}%",
         f"{r.first_ms:.1f}", f"{r.compile_ms:.1f}") for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    numeric = {3, 4, 5, 6}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(b) for b in body)])


def run_model_demo(out: TextIO = sys.stdout, prompt_tokens: int = 32) -> bool:
    """A tiny GPT-2 (2 layers, hidden 64) compiled with torch.compile(backend="nmp"): logits vs eager, and the
    profile of one prefill per Inductor kernel. True iff the logits match."""
    import copy

    import torch

    from triton_nmp.llm import build
    from triton_nmp.profiler import profile

    model = build("gpt2-tiny", torch.float32, std=0.3)
    compiled = torch.compile(copy.deepcopy(model), backend="nmp")
    ids = torch.randint(0, model.cfg.vocab, (1, prompt_tokens), generator=torch.Generator().manual_seed(0))
    print(f"\nA model: GPT-2 (2 layers, hidden 64, vocab 512), prefill of {prompt_tokens} tokens, "
          f"torch.compile(model, backend=\"nmp\")", file=out)
    with torch.no_grad():
        t0 = time.perf_counter()
        got = compiled(ids)
        t1 = time.perf_counter()
        with profile() as prof:
            compiled(ids)
        want = model(ids)
    err = (got - want).abs().max().item()
    ok = bool(torch.allclose(got, want, atol=1e-4, rtol=1e-4))
    from triton_nmp.inductor import compiled_graphs

    graph = compiled_graphs()[-1]
    print(prof.summary(), file=out)
    roofline = sum(r.roofline_seconds for r in prof.launches)
    print(f"logits match eager: {'yes' if ok else 'NO'} (max err {err:.1e}); {graph.summary()}; first call "
          f"{t1 - t0:.1f} s; simulated {prof.sim_seconds * 1e6:.1f} us, {100 * roofline / prof.sim_seconds:.1f}% "
          f"of the roofline floor", file=out)
    return ok


def run_demo(size: str = "small", out: TextIO = sys.stdout, model: bool = True) -> bool:
    """Run all cases at `size` ("small" or "medium"), print the table to `out`, then (with `model`) the compiled
    model demo; True iff all are correct."""
    if size not in ("small", "medium"):
        raise ValueError(f"size must be 'small' or 'medium', got {size!r}")
    print(f"triton-nmp demo: {len(CASES)} kernels, size={size}, driver={_driver_name()}", file=out)
    rows = []
    for case in CASES:
        rows.append(run_case(case, size))
    print(format_table(rows), file=out)
    failed = [r.name for r in rows if not r.ok]
    total_first = sum(r.first_ms for r in rows if r.first_ms == r.first_ms)
    summary = f"{len(rows) - len(failed)}/{len(rows)} correct; first launches took {total_first / 1e3:.2f} s in all"
    if failed:
        summary += "; failed: " + ", ".join(failed)
    print(summary, file=out)
    out.flush()
    model_ok = True
    if model:
        try:
            model_ok = run_model_demo(out)
        except Exception as e:  # the kernel table above stands on its own
            print(f"model demo failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:200]}", file=out)
            model_ok = False
    out.flush()
    return not failed and model_ok
