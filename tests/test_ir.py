"""IR you can test: the nmpir parser (print -> parse -> print) and the per-pass cases of tests/ir/."""

import math

import pytest

from triton_nmp.backend.ir import Block, Builder, Func, Loc, Module, Ty
from triton_nmp.backend.nmpir import print_module
from triton_nmp.backend.nmpir_parser import parse_module
from triton_nmp.errors import NMPCompilationError

from .ir_harness import all_cases, assert_round_trip, check_output, read_case, run_case


@pytest.mark.parametrize("path", all_cases(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ir_case(path):
    case = read_case(path)
    check_output(case, run_case(case))


def test_there_are_cases_for_the_passes_the_issue_names():
    dirs = {p.parent.name for p in all_cases()}
    assert {"access-analysis", "pointer-selects", "strip-mining", "scratchpad-reuse", "address-sinking"} <= dirs
    # and for the passes and rungs of legalization that came later
    assert {"dead-code-elimination", "hoist-loop-invariants", "place-cheap-tiles", "leaner-buffers",
            "row-strip-mining", "spilling", "legalization", "pipeline-grid"} <= dirs


def test_attributes_of_every_kind_round_trip():
    body = Block()
    x = body.add_arg("x", Ty("ptr", (), "f32"))
    b = Builder(body, Loc("/tmp/k.py", 3, 7))
    attrs = {"msg": 'index "i" out of range: 1', "prefix": "", "word": "arith.addi", "looks_true": "True",
             "number_text": "12", "i": -3, "f": 1e-05, "big": 1.5e300, "inf": float("inf"), "ninf": float("-inf"),
             "nan": float("nan"), "flag": False, "none": None, "order": (1, 0), "nested": ((1, "a b"), ()),
             "unicode": "größe"}
    t = b.op("nmp.splat", [x], [Ty("ptr", (2, 3), "f32")], attrs).result
    b.op("nmp.print", [t], [], {"prefix": " x: ", "hex": False, "signed": (1,)}, loc=Loc())
    mod = Module([Func("k", body.args, [], body)])
    assert_round_trip(mod)
    again = parse_module(print_module(mod)).kernel.body.ops[0].attrs
    assert math.isnan(again["nan"]) and again["msg"] == attrs["msg"] and again["nested"] == ((1, "a b"), ())


def test_parser_reports_the_line_of_a_use_before_definition():
    text = "nmp.func @k(%x: i32) {\n  %y = arith.addi %x, %z : i32\n}\n"
    with pytest.raises(NMPCompilationError, match="nmpir line 2: %z is used before it is defined"):
        parse_module(text)


def test_a_failing_check_fails(tmp_path):
    case_file = tmp_path / "c.nmpir"
    case_file.write_text("// PASSES: dead-code-elimination\n// CHECK: arith.muli\n"
                         "nmp.func @k(%x: i32) {\n  %y = arith.addi %x, %x : i32\n  nmp.return\n}\n")
    case = read_case(case_file)
    out = run_case(case)
    assert "arith.addi" not in out  # dead code is gone
    with pytest.raises(AssertionError, match="CHECK: 'arith.muli' not found"):
        check_output(case, out)
