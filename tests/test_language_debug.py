"""Debugging ops on nmp: tl.device_print (printf through the C library, in Triton's GPU format),
tl.device_assert (compiled with debug=True; raises NMPDeviceAssertError naming the message and line),
tl.static_assert / tl.static_print (frontend only), and inline assembly (a clear "not supported")."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from triton_nmp.errors import NMPCompilationError, NMPDeviceAssertError


@triton.jit
def debug_kernel(x_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    if OP == "print":
        tl.device_print("x=", x, pid)
    elif OP == "print_hex":
        tl.device_print("hx", x, hex=True)
    elif OP == "print_scalars":
        tl.device_print("s", pid, n)
    elif OP == "print_2d":
        tl.device_print("m", tl.reshape(x, (2, BLOCK // 2)).to(tl.int32))
    elif OP == "python_print":
        print("hello", pid)
    elif OP == "assert":
        tl.device_assert(x < 100, "x too big")
    elif OP == "assert_masked":
        tl.device_assert(x < 100, "masked", mask=offs < 2)
    elif OP == "assert_scalar":
        tl.device_assert(pid < 2, "pid small")
    elif OP == "static":
        tl.static_assert(BLOCK >= 4, "block too small")
        tl.static_print("static BLOCK", BLOCK)


def test_device_print_format(capfd) -> None:
    x = torch.arange(4, dtype=torch.float32) * 1.5
    debug_kernel[(2,)](x, 4, OP="print", BLOCK=4)
    out = capfd.readouterr().out.splitlines()
    assert out[:5] == ["pid (0, 0, 0) idx (0) x=: (operand 0) 0.000000",
                       "pid (0, 0, 0) idx (1) x=: (operand 0) 1.500000",
                       "pid (0, 0, 0) idx (2) x=: (operand 0) 3.000000",
                       "pid (0, 0, 0) idx (3) x=: (operand 0) 4.500000",
                       "pid (0, 0, 0) idx () x=: (operand 1) 0"]
    assert out[9] == "pid (1, 0, 0) idx () x=: (operand 1) 1" and len(out) == 10


def test_device_print_hex_scalars_and_2d(capfd) -> None:
    x = torch.tensor([0.0, 1.5, -2.0, 3.0])
    debug_kernel[(1,)](x, 4, OP="print_hex", BLOCK=4)
    assert capfd.readouterr().out.splitlines() == [
        "pid (0, 0, 0) idx (0) hx: 0x00000000", "pid (0, 0, 0) idx (1) hx: 0x3fc00000",
        "pid (0, 0, 0) idx (2) hx: 0xc0000000", "pid (0, 0, 0) idx (3) hx: 0x40400000"]
    debug_kernel[(2,)](x, 4, OP="print_scalars", BLOCK=4)
    assert capfd.readouterr().out.splitlines() == [
        "pid (0, 0, 0) idx () s: (operand 0) 0", "pid (0, 0, 0) idx () s: (operand 1) 4",
        "pid (1, 0, 0) idx () s: (operand 0) 1", "pid (1, 0, 0) idx () s: (operand 1) 4"]
    debug_kernel[(1,)](x, 4, OP="print_2d", BLOCK=4)
    assert capfd.readouterr().out.splitlines() == [
        "pid (0, 0, 0) idx (0, 0) m: 0", "pid (0, 0, 0) idx (0, 1) m: 1",
        "pid (0, 0, 0) idx (1, 0) m: -2", "pid (0, 0, 0) idx (1, 1) m: 3"]
    debug_kernel[(1,)](x, 4, OP="python_print", BLOCK=4)  # print() in a kernel is device_print
    assert capfd.readouterr().out.splitlines() == ["pid (0, 0, 0) idx () hello: 0"]


@pytest.mark.parametrize("op,msg,program", [("assert", "x too big", 0), ("assert_scalar", "pid small", 2)])
def test_device_assert_raises_with_message_and_line(op: str, msg: str, program: int) -> None:
    x = torch.arange(4, dtype=torch.float32) * 50
    with pytest.raises(NMPDeviceAssertError, match=rf"device assertion failed \({msg}\) at .*test_language_debug.py:"
                                                   rf"\d+:\d+, program \({program}, 0, 0\)"):
        debug_kernel[(3,)](x, 4, OP=op, BLOCK=4, debug=True)
    debug_kernel[(3,)](x, 4, OP=op, BLOCK=4)  # without debug=True, Triton drops device_assert


def test_device_assert_respects_its_mask() -> None:
    x = torch.tensor([1.0, 2.0, 500.0, 600.0])
    debug_kernel[(1,)](x, 4, OP="assert_masked", BLOCK=4, debug=True)  # the failing lanes are masked off
    with pytest.raises(NMPDeviceAssertError, match="masked"):
        debug_kernel[(1,)](x.flip(0), 4, OP="assert_masked", BLOCK=4, debug=True)


def test_static_assert_and_static_print(capfd, monkeypatch) -> None:
    monkeypatch.setattr(triton.knobs.compilation, "always_compile", True)  # static_print runs at compile time
    debug_kernel[(1,)](torch.zeros(4), 4, OP="static", BLOCK=4)
    assert "static BLOCK 4" in capfd.readouterr().out
    with pytest.raises(triton.compiler.errors.CompilationError, match="block too small"):
        debug_kernel[(1,)](torch.zeros(2), 2, OP="static", BLOCK=2)


@triton.jit
def asm_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(x_ptr + offs, y)


def test_inline_asm_is_a_clear_error() -> None:
    with pytest.raises(NMPCompilationError, match="inline assembly .* is not supported on nmp"):
        asm_kernel[(1,)](torch.zeros(4), BLOCK=4)
