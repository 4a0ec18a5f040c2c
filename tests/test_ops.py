"""The nmpir op table: named operands, and a verifier that knows every op."""

import pytest

from triton_nmp.backend.ir import Block, Builder, Func, Module, Region, Ty, Value, clone_region
from triton_nmp.backend.nmpir import verify
from triton_nmp.backend.ops import OPS, Operands, make_operands, op_def
from triton_nmp.errors import NMPCompilationError

I64 = Ty("i64")


def _kernel_with(build) -> Module:
    body = Block()
    x = body.add_arg("x_ptr", Ty("ptr", (), "f32"))
    build(Builder(body), x)
    return Module([Func("k", body.args, [], body)])


def _dma_load(b: Builder, x: Value, guarded: bool = False):
    attrs = {"rank": 2, "arg": "x_ptr"}
    if guarded:
        attrs["guarded"] = True
    c = [b.const(i) for i in range(5)]
    guard = b.const(True, Ty("i1")) if guarded else None
    ops = make_operands("nmp.dma_load", attrs, base=x, offset=c[0], strides=c[1:3], bounds=c[3:5], guard=guard)
    return b.op("nmp.dma_load", ops, [Ty("f32", (4, 8))], attrs), c, guard


def test_dma_operands_by_name():
    seen = {}

    def build(b, x):
        seen["op"], seen["c"], seen["guard"] = _dma_load(b, x, guarded=True)

    verify(_kernel_with(build), "test")
    d, c = Operands(seen["op"]), seen["c"]
    assert d.base.name == "x_ptr" and d.offset is c[0]
    assert d.strides == c[1:3] and d.bounds == c[3:5] and d.guard is seen["guard"] and d.other is None
    assert Operands(seen["op"]).replaced(bounds=[c[4], c[3]])[4:6] == [c[4], c[3]]


def test_verifier_rejects_an_unknown_op():
    with pytest.raises(NMPCompilationError, match=r"nmpir verifier after test: nmp.frobnicate: not an nmpir op"):
        verify(_kernel_with(lambda b, x: b.op("nmp.frobnicate", [x])), "test")


def test_verifier_rejects_a_dma_with_operands_missing():
    def build(b, x):
        op, _, _ = _dma_load(b, x)
        op.operands.pop()

    layout = r"\(base offset strides\[rank\] bounds\[rank\] guard\?guarded index\?indexed other\?has_other\)"
    with pytest.raises(NMPCompilationError, match=rf"nmp.dma_load: expected 6 operands {layout} for rank 2, found 5"):
        verify(_kernel_with(build), "test")


def test_verifier_rejects_a_dma_without_rank():
    def build(b, x):
        op, _, _ = _dma_load(b, x)
        del op.attrs["rank"]

    with pytest.raises(NMPCompilationError, match="attribute 'rank' .* is missing"):
        verify(_kernel_with(build), "test")


def test_scalar_ops_keep_their_ttir_names_and_tt_addptr_is_nmp_addptr():
    assert op_def("arith.addi").layout == "args*" and op_def("math.exp") is not None
    assert op_def("tt.addptr") is None and op_def("nmp.addptr") is OPS["nmp.addptr"]


def test_atomic_compare_and_swap_has_a_compare_operand():
    def build(b, x):
        p = b.op("nmp.splat", [x], [Ty("ptr", (4,), "f32")]).result
        v = b.op("nmp.const", [], [Ty("f32", (4,))], {"value": 1.0}).result
        b.op("nmp.atomic", [x, p, v, v], [Ty("f32", (4,))], {"kind": "cas", "arg": "x_ptr"})
        b.op("nmp.atomic", [x, p, v], [Ty("f32", (4,))], {"kind": "add", "arg": "x_ptr"})

    mod = _kernel_with(build)
    verify(mod, "test")
    cas, add = mod.kernel.body.ops[-2:]
    assert Operands(cas).cmp is cas.operands[2] and Operands(cas).value is cas.operands[3]
    assert Operands(add).cmp is None and Operands(add).value is add.operands[2] and Operands(add).mask is None


def test_verifier_rejects_a_region_shared_by_two_ops():
    """One Region object in two ops defines its values twice (strip-mining did this with the combine
    region of a reduction it cloned; the printed IR then named two values alike)."""
    def build(b, x):
        t = b.op("nmp.const", [], [Ty("f32", (4,))], {"value": 1.0}).result
        combine = Block()
        acc, v = combine.add_arg("a", Ty("f32")), combine.add_arg("b", Ty("f32"))
        s = Builder(combine).op("arith.addf", [acc, v], [Ty("f32")]).result
        Builder(combine).op("nmp.yield", [s])
        region = Region([combine])
        b.op("nmp.reduce", [t], [Ty("f32")], {"axis": 0}, [region])
        b.op("nmp.reduce", [t], [Ty("f32")], {"axis": 0}, [region])

    with pytest.raises(NMPCompilationError, match="nmp.reduce: %a is defined twice"):
        verify(_kernel_with(build), "test")
    mod = _kernel_with(build)
    second = mod.kernel.body.ops[-1]
    second.regions = [clone_region(r) for r in second.regions]
    verify(mod, "test")


# Strings of the form "nmp.*" that are not op names: the printed function header, and the prefix of the
# two DMA ops (`name.startswith("nmp.dma")`).
NOT_OP_NAMES = {"nmp.func", "nmp.dma"}


def _nmp_string_literals():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for folder in ("backend", "driver", "simulator", "triton_nmp"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "ops.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("nmp."):
                    yield f"{path.relative_to(root)}:{node.lineno}", node.value


def test_every_nmp_op_name_the_compiler_spells_is_in_the_op_table():
    """Passes compare op names as strings (`op.name == "nmp.gather"`); a misspelt one would silently never
    match, so every such literal must name an op of the table."""
    seen = list(_nmp_string_literals())
    assert len(seen) > 100  # the scan found the compiler's op names
    unknown = [f"{where}: {name}" for where, name in seen
               if " " not in name and name not in NOT_OP_NAMES and op_def(name) is None]
    assert unknown == []
