"""Differential testing: random Triton kernels run on nmp and under Triton's interpreter must agree.

Hypothesis draws seeds; `gen_kernel(seed)` builds a kernel from each: 1 to 3 input tensors of
random dtypes, a 1-D or 2-D block shape, masked or unmasked loads (random bounds and `other`
values), an expression tree over them (arithmetic, min/max, comparisons, where, casts, abs, constants
with Triton's promotion rules), and optionally a reduction (sum/max/min/argmax/argmin/xor_sum) along
a random axis. The kernel is written as Python source to a temporary module (Triton needs source
files), imported, launched on nmp, and run by the interpreter server (`test_language_harness`);
integer results must be bit-identical, float results equal within a tolerance scaled to the result's
magnitude (summation order differs).

Values stay small (|leaf| <= 8, depth <= 3) so float results stay finite in fp16 and float->int casts
stay in range (nmp saturates like GPUs where the interpreter wraps through numpy). The default run is a
fixed, bounded set of examples; `-m slow` runs a long randomized search. Half of the kernels also store
a second, earlier result (`w`) computed from the same loads: that shape found the scratchpad planner
reusing a tile in place inside a fused elementwise run while a later op of the run still read it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import random
import sys
import tempfile
from dataclasses import dataclass, field

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_language_harness import run_interp, run_nmp

DTYPES = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
          "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
FLOAT_BITS = {"float16": 16, "float32": 32, "float64": 64}
_MODULE_DIR = tempfile.mkdtemp(prefix="nmp_diff_")


@dataclass
class Expr:
    src: str
    is_float: bool
    fbits: int = 0  # widest float type involved (Triton's promotion)
    is_bool: bool = False


@dataclass
class KernelSpec:
    rank: int
    shape: tuple[int, ...]
    inputs: list[str]  # dtype names
    masked: list[bool]
    others: list[int]
    bounds: tuple[int, ...]
    body: list[str] = field(default_factory=list)
    result: Expr | None = None
    reduce: str | None = None
    axis: int = 0
    extra: Expr | None = None  # a second output, computed before `v` from the same loads


def _promote(a: Expr, b: Expr) -> tuple[bool, int]:
    if a.is_float or b.is_float:
        return True, max(a.fbits, b.fbits)
    return False, 0


def _is_const(e: Expr) -> bool:
    return e.src.lstrip("-").replace(".", "").isdigit()


def gen_expr(rng: random.Random, leaves: list[Expr], depth: int, top: bool = False) -> Expr:
    """A random expression tree; constants never meet only constants (Python would fold them)."""
    if depth == 0 or (rng.random() < 0.2 and not top):
        r = rng.random()
        if r < 0.8:
            return rng.choice(leaves)
        if r < 0.9:
            return Expr(str(rng.randint(-4, 4)), False)
        return Expr(repr(rng.choice([0.5, -1.25, 2.0])), True, 32)
    kind = rng.choices(["bin", "minmax", "where", "unary", "cast", "bit"], [5, 2, 2, 1, 2, 1])[0]
    a = gen_expr(rng, leaves, depth - 1)
    if kind == "unary":
        if _is_const(a):
            return a
        return Expr(f"(-{a.src})", a.is_float, a.fbits) if rng.random() < 0.5 else \
            Expr(f"tl.abs({a.src})", a.is_float, a.fbits)
    if kind == "cast":
        if _is_const(a):
            return a
        if a.is_float and rng.random() < 0.5:
            # float -> int only on values known to be small: a loaded leaf
            leaf = rng.choice(leaves)
            if not leaf.is_float:
                return leaf
            dt = rng.choice(["int16", "int32", "int64"])
            return Expr(f"{leaf.src}.to(tl.{dt})", False)
        dt = rng.choice(["float16", "float32", "float64", "int32", "int64"])
        if dt.startswith("int") and a.is_float:
            dt = "float32"
        return Expr(f"{a.src}.to(tl.{dt})", dt.startswith("float"), FLOAT_BITS.get(dt, 0))
    b = gen_expr(rng, leaves, depth - 1)
    if _is_const(a) and _is_const(b):
        return a
    fl, fb = _promote(a, b)
    if kind == "bin":
        op = rng.choice(["+", "-", "*", "/"])
        if op == "/":
            return Expr(f"({a.src} / (tl.abs({b.src}) + 1))", True, fb or 32)
        return Expr(f"({a.src} {op} {b.src})", fl, fb)
    if kind == "minmax":
        fn = rng.choice(["tl.minimum", "tl.maximum"])
        return Expr(f"{fn}({a.src}, {b.src})", fl, fb)
    if kind == "bit":
        if fl:
            return Expr(f"({a.src} + {b.src})", fl, fb)
        return Expr(f"({a.src} {rng.choice(['&', '|', '^'])} {b.src})", False)
    c = gen_expr(rng, leaves, depth - 1)
    if _is_const(b) and _is_const(c):
        return b
    fl2, fb2 = _promote(b, c)
    cmp = rng.choice(["<", "<=", ">", ">=", "==", "!="])
    return Expr(f"tl.where({a.src} {cmp} {b.src}, {b.src}, {c.src})", fl2, fb2)


def gen_kernel(seed: int, with_extra: bool = False) -> KernelSpec:
    """A random kernel spec from a seed (hypothesis draws and shrinks the seeds)."""
    rng = random.Random(seed)
    rank = rng.randint(1, 2)
    shape = (rng.choice([4, 8, 16, 32]),) if rank == 1 else (rng.choice([2, 4, 8]), rng.choice([2, 4, 8, 16]))
    n_in = rng.randint(1, 3)
    inputs = [rng.choice(list(DTYPES)) for _ in range(n_in)]
    masked = [rng.random() < 0.6 for _ in range(n_in)]
    others = [rng.randint(-3, 3) for _ in range(n_in)]
    bounds = tuple(rng.randint(0, d) if rng.random() < 0.7 else d for d in shape)
    spec = KernelSpec(rank, shape, inputs, masked, others, bounds)
    leaves = [Expr(f"x{i}", dt.startswith("float"), FLOAT_BITS.get(dt, 0)) for i, dt in enumerate(inputs)]
    spec.result = gen_expr(rng, leaves, rng.randint(1, 3), top=True)
    if _is_const(spec.result):
        spec.result = leaves[0]
    if with_extra and rng.random() < 0.5:
        spec.extra = gen_expr(rng, leaves, rng.randint(1, 2), top=True)
        if _is_const(spec.extra):
            spec.extra = None
    if rng.random() < (0.5 if rank == 2 else 0.3):
        ops = ["sum", "max", "min", "argmax", "argmin"] + ([] if spec.result.is_float else ["xor_sum"])
        spec.reduce = rng.choice(ops)
        spec.axis = rng.randint(0, rank - 1)
    return spec


def render(spec: KernelSpec, name: str) -> str:
    args = ", ".join([f"x{i}_ptr" for i in range(len(spec.inputs))] + ["out_ptr", "out2_ptr", "n0", "n1"])
    lines = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}({args}):"]
    if spec.rank == 1:
        (n,) = spec.shape
        lines += [f"    r0 = tl.arange(0, {n})", "    offs = r0", "    m = r0 < n0"]
    else:
        m_, n_ = spec.shape
        lines += [f"    r0 = tl.arange(0, {m_})[:, None]", f"    r1 = tl.arange(0, {n_})[None, :]",
                  f"    offs = r0 * {n_} + r1", "    m = (r0 < n0) & (r1 < n1)"]
    for i, (masked, other) in enumerate(zip(spec.masked, spec.others)):
        if masked:
            lines.append(f"    x{i} = tl.load(x{i}_ptr + offs, mask=m, other={other})")
        else:
            lines.append(f"    x{i} = tl.load(x{i}_ptr + offs)")
    if spec.extra is not None:
        lines.append(f"    w = {spec.extra.src}")
    lines.append(f"    v = {spec.result.src}")
    if spec.extra is not None:
        lines.append("    tl.store(out2_ptr + offs, w, mask=m)")
    if spec.reduce is None:
        lines.append("    tl.store(out_ptr + offs, v, mask=m)")
    else:
        lines.append(f"    v = tl.{spec.reduce}(v, {spec.axis})")
        if spec.rank == 1:
            lines.append("    tl.store(out_ptr, v)")
        else:
            keep = 1 - spec.axis
            lines.append(f"    ro = tl.arange(0, {spec.shape[keep]})")
            lines.append(f"    tl.store(out_ptr + ro, v, mask=ro < n{keep})")
    return "\n".join(lines) + "\n"


def load_kernel(source: str, name: str):
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    mod_name = f"nmp_diff_{digest}"
    path = os.path.join(_MODULE_DIR, mod_name + ".py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(source)
    if _MODULE_DIR not in sys.path:
        sys.path.insert(0, _MODULE_DIR)
    return getattr(importlib.import_module(mod_name), name)


def make_inputs(spec: KernelSpec, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for dt in spec.inputs:
        numel = 1
        for d in spec.shape:
            numel *= d
        if dt.startswith("float"):
            x = ((torch.rand(numel, generator=g) * 16 - 8) * 4).round() / 4
        else:
            x = torch.randint(-8, 9, (numel,), generator=g)
        out.append(x.to(DTYPES[dt]))
    return out


def run_spec(spec: KernelSpec, seed: int = 0) -> None:
    name = "diff_kernel"
    source = render(spec, name)
    kernel = load_kernel(source, name)
    inputs = make_inputs(spec, seed)
    is_float = spec.result.is_float and spec.reduce not in ("argmax", "argmin")
    out_dt = torch.float64 if is_float else torch.int64
    numel = 1
    for d in spec.shape:
        numel *= d
    out = torch.zeros(numel, dtype=out_dt)
    out2 = torch.zeros(numel, dtype=torch.float64 if spec.extra is not None and spec.extra.is_float else torch.int64)
    n0 = spec.bounds[0]
    n1 = spec.bounds[1] if spec.rank == 2 else 0
    args = [*inputs, out, out2, n0, n1]
    got_all = run_nmp(kernel, (1,), *args)
    ref_all = run_interp(kernel, (1,), *args)
    checks = [(len(inputs), spec.result.fbits or 32)]
    if spec.extra is not None:
        checks.append((len(inputs) + 1, spec.extra.fbits or 32))
    for k, fbits in checks:
        got, ref = got_all[k], ref_all[k]
        if got.dtype.is_floating_point:
            tol = {16: 2e-3, 32: 2e-6, 64: 1e-12}[fbits] * (1 + ref.abs().max().item())
            ok = torch.allclose(got, ref, atol=tol, rtol=0, equal_nan=True)
        else:
            ok = torch.equal(got, ref)
        if not ok:
            bad = (got != ref).nonzero()[:5].flatten().tolist()
            raise AssertionError(f"nmp and the interpreter differ in output {k - len(inputs)} at {bad}: "
                                 f"{got[bad].tolist()} vs {ref[bad].tolist()}\ninputs: "
                                 f"{[t.tolist() for t in inputs]}\nn0={n0} n1={n1}\nkernel:\n{source}")


SETTINGS = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.filter_too_much])


@settings(max_examples=int(os.environ.get("NMP_DIFF_EXAMPLES", "30")), derandomize=True, **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_kernels_match_interpreter(seed: int) -> None:
    run_spec(gen_kernel(seed, with_extra=True), seed)


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("NMP_DIFF_SLOW_EXAMPLES", "500")), **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_kernels_match_interpreter_long(seed: int) -> None:
    run_spec(gen_kernel(seed, with_extra=True), seed)


def test_renderer_produces_the_expected_kernel() -> None:
    spec = KernelSpec(2, (4, 8), ["int32", "float16"], [True, False], [1, 0], (3, 5),
                      result=Expr("tl.where(x0 < x1, x1, (x0 * 2))", True, 16), reduce="sum", axis=1)
    src = render(spec, "k")
    assert "x0 = tl.load(x0_ptr + offs, mask=m, other=1)" in src and "v = tl.sum(v, 1)" in src
    run_spec(spec)
