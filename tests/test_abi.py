"""The compiler/simulator contract (`triton_nmp.abi`) and the byte sizes of IR types."""

import pytest
from llvmlite import ir as llvm_ir

from triton_nmp import abi
from triton_nmp.backend.codegen_scalar import storage_type
from triton_nmp.backend.ir import FLOAT_TYPES, INT_TYPES, Ty, scalar_bytes


def test_context_fields_do_not_overlap():
    assert abi.CTX_PID + 3 <= abi.COUNTERS_BASE
    assert abi.COUNTERS_BASE + len(abi.COUNTERS) <= abi.CTX_TRACE_PTR
    assert abi.MAX_COUNTERS == abi.CTX_TRACE_PTR - abi.COUNTERS_BASE
    assert max(abi.CTX_TRACE_PTR, abi.CTX_TRACE_LEN, abi.CTX_TRACE_CAP, abi.CTX_TRACE_ON) < abi.CTX_WORDS


def test_trace_kinds_and_status_codes_are_distinct():
    kinds = [abi.KIND_DMA_LOAD, abi.KIND_DMA_STORE, abi.KIND_GATHER, abi.KIND_SCATTER, abi.KIND_VEC,
             abi.KIND_MATMUL, abi.KIND_WAIT]
    assert len(set(kinds)) == len(kinds) and 0 not in kinds  # 0 would be an unwritten record
    statuses = [abi.STATUS_OK, abi.STATUS_OUT_OF_BOUNDS, abi.STATUS_ASSERT, abi.STATUS_NO_MEMORY]
    assert len(set(statuses)) == len(statuses) and abi.STATUS_OK == 0


def test_simulator_and_compiler_read_the_same_contract():
    from triton_nmp.backend import codegen
    from triton_nmp.simulator import runtime, timing

    assert codegen.COUNTERS is abi.COUNTERS
    assert runtime.TRACE_WORDS == timing.TRACE_WORDS == abi.TRACE_WORDS
    assert timing.MAPPINGS is abi.PU_MAPPINGS
    assert abi.dtype_code("no-such-type") == abi.DTYPE_CODES["f32"]


@pytest.mark.parametrize("elem", sorted(INT_TYPES) + sorted(FLOAT_TYPES) + ["ptr"])
def test_type_byte_size_is_the_codegen_storage_size(elem):
    ty = Ty(elem, (4, 3), "f32" if elem == "ptr" else None)
    st = storage_type(ty)
    size = st.width // 8 if isinstance(st, llvm_ir.IntType) else (8 if isinstance(st, llvm_ir.DoubleType) else 4)
    assert ty.elem_bytes == size
    assert ty.nbytes == 12 * size
    assert Ty("ptr", (), elem).pointee_bytes == (0 if elem == "ptr" else size)


def test_scalar_bytes_of_a_non_scalar_name_is_zero():
    assert scalar_bytes("!tt.ptr<f32>") == 0 and scalar_bytes(None) == 0
