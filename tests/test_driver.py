"""Tests of the nmp driver and simulator runtime against hand-written objects that follow the ABI.

Each kernel below is LLVM IR written by hand the way the compiler will emit it:
`int64_t entry(int64_t *slots, int64_t gx, int64_t gy, int64_t gz, int64_t *ctx)` looping over all
programs natively. The tests do not need the nmp compiler.
"""

from __future__ import annotations

import math
import struct
import time
from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import llvmlite.binding as llvm
import pytest
import torch
from triton.backends.compiler import GPUTarget

from triton_nmp.driver import NMPDriver, NMPLauncher, NMPUtils, device_interface
from triton_nmp.errors import NMPDeviceAssertError, NMPLaunchError, NMPOutOfBoundsError, NMPRuntimeError
from triton_nmp.simulator import loader, runtime
from triton_nmp.target import active_target
from triton_nmp.triton_name import triton_name

# ----------------------------------------------------------------------------------------------
# Hand-written kernels

# out[i] = i (int32) for every program i (linear id), bounds-checked against the span; counts programs
# in ctx[8] and stored bytes in ctx[9]. On an overflow it reports status 1 the way generated code does.
PID_IR = r"""
define i64 @pid_kernel_helper(i64 %x) {
  ret i64 %x
}

define i64 @pid_entry(ptr %slots, i64 %gx, i64 %gy, i64 %gz, ptr %ctx) {
entry:
  %base_i = load i64, ptr %slots
  %base = inttoptr i64 %base_i to ptr
  %spanp = getelementptr i64, ptr %slots, i64 1
  %span = load i64, ptr %spanp
  %gxy = mul i64 %gx, %gy
  %n = mul i64 %gxy, %gz
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %ok]
  %done = icmp sge i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %lo = mul i64 %i, 4
  %hi = add i64 %lo, 4
  %oob = icmp sgt i64 %hi, %span
  br i1 %oob, label %fail, label %ok
ok:
  %p = getelementptr i8, ptr %base, i64 %lo
  %v = trunc i64 %i to i32
  store i32 %v, ptr %p
  %c0p = getelementptr i64, ptr %ctx, i64 8
  %c0 = load i64, ptr %c0p
  %c0n = add i64 %c0, 1
  store i64 %c0n, ptr %c0p
  %c1p = getelementptr i64, ptr %ctx, i64 9
  %c1 = load i64, ptr %c1p
  %c1n = add i64 %c1, 4
  store i64 %c1n, ptr %c1p
  %next = add i64 %i, 1
  br label %loop
fail:
  store i64 1, ptr %ctx
  %s1 = getelementptr i64, ptr %ctx, i64 1
  store i64 0, ptr %s1
  %s2 = getelementptr i64, ptr %ctx, i64 2
  store i64 0, ptr %s2
  %s3 = getelementptr i64, ptr %ctx, i64 3
  store i64 %lo, ptr %s3
  %s4 = getelementptr i64, ptr %ctx, i64 4
  store i64 %hi, ptr %s4
  %px = urem i64 %i, %gx
  %q = udiv i64 %i, %gx
  %py = urem i64 %q, %gy
  %pz = udiv i64 %i, %gxy
  %s5 = getelementptr i64, ptr %ctx, i64 5
  store i64 %px, ptr %s5
  %s6 = getelementptr i64, ptr %ctx, i64 6
  store i64 %py, ptr %s6
  %s7 = getelementptr i64, ptr %ctx, i64 7
  store i64 %pz, ptr %s7
  ret i64 1
exit:
  ret i64 0
}
"""

# out[0] = expf((float)x): checks that libm calls resolve.
EXP_IR = r"""
declare float @expf(float)

define i64 @exp_entry(ptr %slots, i64 %gx, i64 %gy, i64 %gz, ptr %ctx) {
  %b = load i64, ptr %slots
  %out = inttoptr i64 %b to ptr
  %xp = getelementptr i64, ptr %slots, i64 2
  %xbits = load i64, ptr %xp
  %xd = bitcast i64 %xbits to double
  %xf = fptrunc double %xd to float
  %e = call float @expf(float %xf)
  store float %e, ptr %out
  ret i64 0
}
"""

# out[i] = a + b * i for i over all programs: a float slot (double bits) and an int slot.
AFFINE_IR = r"""
define i64 @affine_kernel(ptr %slots, i64 %gx, i64 %gy, i64 %gz, ptr %ctx) {
entry:
  %b0 = load i64, ptr %slots
  %out = inttoptr i64 %b0 to ptr
  %ap = getelementptr i64, ptr %slots, i64 2
  %abits = load i64, ptr %ap
  %ad = bitcast i64 %abits to double
  %a = fptrunc double %ad to float
  %bp = getelementptr i64, ptr %slots, i64 3
  %b64 = load i64, ptr %bp
  %b = sitofp i64 %b64 to float
  %gxy = mul i64 %gx, %gy
  %n = mul i64 %gxy, %gz
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %body]
  %done = icmp sge i64 %i, %n
  br i1 %done, label %exit, label %body
body:
  %fi = sitofp i64 %i to float
  %m = fmul float %b, %fi
  %v = fadd float %a, %m
  %p = getelementptr float, ptr %out, i64 %i
  store float %v, ptr %p
  %next = add i64 %i, 1
  br label %loop
exit:
  ret i64 0
}
"""

# Copies (status, site, lo, hi) from its int slots into ctx, blaming argument 0 and the last program:
# lets the tests drive the error decoding.
REPORT_IR = r"""
define i64 @report_entry(ptr %slots, i64 %gx, i64 %gy, i64 %gz, ptr %ctx) {
  %p2 = getelementptr i64, ptr %slots, i64 2
  %status = load i64, ptr %p2
  %p3 = getelementptr i64, ptr %slots, i64 3
  %site = load i64, ptr %p3
  %p4 = getelementptr i64, ptr %slots, i64 4
  %lo = load i64, ptr %p4
  %p5 = getelementptr i64, ptr %slots, i64 5
  %hi = load i64, ptr %p5
  store i64 %status, ptr %ctx
  %c1 = getelementptr i64, ptr %ctx, i64 1
  store i64 %site, ptr %c1
  %c2 = getelementptr i64, ptr %ctx, i64 2
  store i64 0, ptr %c2
  %c3 = getelementptr i64, ptr %ctx, i64 3
  store i64 %lo, ptr %c3
  %c4 = getelementptr i64, ptr %ctx, i64 4
  store i64 %hi, ptr %c4
  %x = sub i64 %gx, 1
  %y = sub i64 %gy, 1
  %z = sub i64 %gz, 1
  %c5 = getelementptr i64, ptr %ctx, i64 5
  store i64 %x, ptr %c5
  %c6 = getelementptr i64, ptr %ctx, i64 6
  store i64 %y, ptr %c6
  %c7 = getelementptr i64, ptr %ctx, i64 7
  store i64 %z, ptr %c7
  ret i64 %status
}
"""

UNRESOLVED_IR = r"""
declare float @nmp_test_no_such_function(float)

define i64 @bad_entry(ptr %slots, i64 %gx, i64 %gy, i64 %gz, ptr %ctx) {
  %r = call float @nmp_test_no_such_function(float 1.0)
  ret i64 0
}
"""


def emit(ir: str, reloc: str = "default") -> bytes:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(ir)
    mod.verify()
    tm = llvm.Target.from_default_triple().create_target_machine(reloc=reloc)
    return tm.emit_object(mod)


KernelMetadata = namedtuple(
    "KernelMetadata",
    sorted(
        [
            "name",
            "nmp_entry",
            "nmp_args",
            "nmp_sites",
            "nmp_counters",
            "shared",
            "num_warps",
            "num_stages",
            "num_ctas",
            "target",
        ]
    ),
)


def make_metadata(name: str, entry: str, args: list[tuple[str, str, str]], sites=(), counters=()) -> Any:
    spec = active_target()
    return KernelMetadata(
        name=name,
        nmp_entry=entry,
        nmp_args=[{"name": n, "kind": k, "ty": t} for n, k, t in args],
        nmp_sites=[dict(s) for s in sites],
        nmp_counters=list(counters),
        shared=0,
        num_warps=4,
        num_stages=1,
        num_ctas=1,
        target=GPUTarget("nmp", f"{spec.name}:{spec.hash()[:16]}", 1),
    )


PID_SITES = [{"op": "tt.store", "loc": "/src/k.py:12:9", "arg": "out_ptr"}]
PID_META = make_metadata("pid_kernel", "pid_entry", [("out_ptr", "ptr", "*i32")], PID_SITES, ["programs", "bytes"])
PID_SRC = SimpleNamespace(name="pid_kernel", signature={"out_ptr": "*i32", "BLOCK": "constexpr"})


class Kernel:
    """A loaded hand-written kernel with its launcher, as Triton's CompiledKernel would hold them."""

    def __init__(self, ir: str, src: Any, metadata: Any, reloc: str = "default"):
        self.launcher = NMPLauncher(src, metadata)
        self.module, self.function, *_ = NMPUtils().load_binary(metadata.name, emit(ir, reloc), 0, 0)

    def __getitem__(self, grid: tuple[int, int, int]):
        def run(*args: Any, enter=None, exit=None, launch_metadata=None) -> None:
            self.launcher(*grid, 0, self.function, None, launch_metadata, enter, exit, *args)

        return run


@pytest.fixture(scope="module")
def pid_kernel() -> Kernel:
    return Kernel(PID_IR, PID_SRC, PID_META)


# ----------------------------------------------------------------------------------------------
# Loading and running


@pytest.mark.parametrize("reloc", ["default", "pic"])
def test_pid_kernel_runs_every_program(reloc: str) -> None:
    k = Kernel(PID_IR, PID_SRC, PID_META, reloc)
    out = torch.full((2 * 3 * 4,), -1, dtype=torch.int32)
    k[(2, 3, 4)](out, 128)
    assert out.tolist() == list(range(24))
    assert k.launcher.last_result.counters == {"programs": 24, "bytes": 96}
    assert k.launcher.last_result.grid == (2, 3, 4)


def test_entry_resolved_from_metadata_not_kernel_name(pid_kernel: Kernel) -> None:
    obj = pid_kernel.module
    assert set(obj.symbols.functions) == {"pid_entry", "pid_kernel_helper"}
    assert loader.object_for_address(pid_kernel.function) is obj
    assert pid_kernel.launcher.abi.entry == "pid_entry"


def test_runtime_run_grid_directly() -> None:
    obj = loader.load_object(emit(PID_IR), "pid_kernel_direct")  # its own name: not shared with other tests' loads
    try:
        fn = runtime.entry_function(obj.address("pid_entry"))
        out = torch.zeros(5, dtype=torch.int32)
        abi = runtime.KernelABI.from_metadata(PID_META)
        res = runtime.run_grid(fn, runtime.make_slots([out.data_ptr(), 20]), (5, 1, 1), abi, [20])
        assert out.tolist() == [0, 1, 2, 3, 4]
        assert res == runtime.LaunchResult((5, 1, 1), 0, {"programs": 5, "bytes": 20}, res.host_seconds)
    finally:
        obj.close()
    assert obj.closed and loader.object_for_address(obj.key_address) is None
    with pytest.raises(loader.NMPLoadError, match="unloaded"):
        obj.address("pid_entry")


def test_expf_resolves_from_libm() -> None:
    meta = make_metadata("exp_kernel", "exp_entry", [("out", "ptr", "*fp32"), ("x", "float", "fp32")])
    k = Kernel(EXP_IR, SimpleNamespace(signature={"out": "*fp32", "x": "fp32"}), meta)
    out = torch.zeros(1)
    k[(1, 1, 1)](out, 1.5)
    assert out.item() == pytest.approx(math.exp(1.5), rel=1e-6)


def test_float_and_int_slots() -> None:
    meta = make_metadata(
        "affine_kernel", "affine_kernel", [("out", "ptr", "*fp32"), ("a", "float", "fp32"), ("b", "int", "i32")]
    )
    src = SimpleNamespace(signature={"out": "*fp32", "a": "fp32", "N": "constexpr", "b": "i32"})
    k = Kernel(AFFINE_IR, src, meta)
    out = torch.zeros(6)
    k[(3, 2, 1)](out, 0.5, 64, -2)
    assert out.tolist() == [0.5 - 2 * i for i in range(6)]


def test_zero_grid_runs_nothing(pid_kernel: Kernel) -> None:
    seen: list[Any] = []
    runtime.add_launch_listener(lambda *a: seen.append(a))
    try:
        out = torch.full((4,), -1, dtype=torch.int32)
        for grid in [(0, 1, 1), (4, 0, 1), (4, 1, 0)]:
            pid_kernel[grid](out, 1)
        assert out.tolist() == [-1] * 4
        assert seen == []
        assert pid_kernel.launcher.last_result.counters == {}
    finally:
        runtime._listeners.clear()


def test_negative_grid_rejected(pid_kernel: Kernel) -> None:
    with pytest.raises(NMPLaunchError, match="negative grid"):
        pid_kernel[(-1, 1, 1)](torch.zeros(4, dtype=torch.int32), 1)


def test_launch_hooks_and_listeners(pid_kernel: Kernel) -> None:
    calls: list[tuple[str, Any]] = []
    seen: list[tuple[Any, tuple[int, int, int], runtime.LaunchResult]] = []

    def listener(meta: Any, grid: tuple[int, int, int], result: runtime.LaunchResult) -> None:
        seen.append((meta, grid, result))

    runtime.add_launch_listener(listener)
    try:
        out = torch.zeros(8, dtype=torch.int32)
        pid_kernel[(8, 1, 1)](
            out,
            1,
            enter=lambda m: calls.append(("enter", m)),
            exit=lambda m: calls.append(("exit", m)),
            launch_metadata="LM",
        )
    finally:
        runtime.remove_launch_listener(listener)
    runtime.remove_launch_listener(listener)  # removing twice is harmless
    assert calls == [("enter", "LM"), ("exit", "LM")]
    assert len(seen) == 1
    meta, grid, result = seen[0]
    assert meta is PID_META and grid == (8, 1, 1)
    assert result.counters == {"programs": 8, "bytes": 32}


def test_exit_hook_not_called_on_failure(pid_kernel: Kernel) -> None:
    calls: list[str] = []
    with pytest.raises(NMPOutOfBoundsError):
        pid_kernel[(8, 1, 1)](
            torch.zeros(4, dtype=torch.int32),
            1,
            enter=lambda m: calls.append("enter"),
            exit=lambda m: calls.append("exit"),
        )
    assert calls == ["enter"]


def test_launch_overhead_is_small(pid_kernel: Kernel) -> None:
    out = torch.zeros(1, dtype=torch.int32)
    run = pid_kernel[(1, 1, 1)]
    for _ in range(50):
        run(out, 1)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        run(out, 1)
    per_launch = (time.perf_counter() - t0) / n
    assert per_launch < 100e-6, f"{per_launch * 1e6:.1f} us per launch"


# ----------------------------------------------------------------------------------------------
# Device errors


def test_real_out_of_bounds_report(pid_kernel: Kernel) -> None:
    out = torch.full((1000,), 7, dtype=torch.int32)
    guard = torch.full((1100,), 7, dtype=torch.int32)
    view = guard[:1000]  # the bytes after the view exist: they must stay untouched
    msg = (
        r"kernel 'pid_kernel': tt\.store of argument 'out_ptr' touches bytes \[4000, 4004\) but the tensor "
        r"spans \[0, 4000\) bytes, at /src/k\.py:12:9, program \(0, 0, 2\); no memory outside the tensor was "
        r"accessed\. Check the mask of this access\."
    )
    with pytest.raises(NMPOutOfBoundsError, match=msg) as info:
        pid_kernel[(10, 50, 3)](view, 1)
    assert (guard[1000:] == 7).all()
    err = info.value
    assert (err.arg, err.byte_range, err.span_bytes, err.program_id) == ("out_ptr", (4000, 4004), 4000, (0, 0, 2))
    assert isinstance(err, NMPRuntimeError)
    del out


REPORT_SITES = [
    {"op": "tt.load", "loc": "/path/k.py:12:9", "arg": "x_ptr"},
    {"op": "tt.assert", "loc": "/path/k.py:20:4", "arg": "", "msg": "x must be positive"},
]
REPORT_META = make_metadata(
    "add_kernel",
    "report_entry",
    [
        ("x_ptr", "ptr", "*fp32"),
        ("status", "int", "i64"),
        ("site", "int", "i32"),
        ("lo", "int", "i64"),
        ("hi", "int", "i64"),
    ],
    REPORT_SITES,
)
REPORT_SRC = SimpleNamespace(
    signature={"x_ptr": "*fp32", "status": "i64", "site": "i32", "lo": "i64", "hi": "i64", "BLOCK": "constexpr"}
)


@pytest.fixture(scope="module")
def report_kernel() -> Kernel:
    return Kernel(REPORT_IR, REPORT_SRC, REPORT_META)


def test_out_of_bounds_decoding(report_kernel: Kernel) -> None:
    x = torch.zeros(1000)
    msg = (
        r"kernel 'add_kernel': tt\.load of argument 'x_ptr' touches bytes \[4096, 8192\) but the tensor spans "
        r"\[0, 4000\) bytes, at /path/k\.py:12:9, program \(3, 0, 0\); no memory outside the tensor was accessed\."
    )
    with pytest.raises(NMPOutOfBoundsError, match=msg):
        report_kernel[(4, 1, 1)](x, 1, 0, 4096, 8192, 1024)


def test_negative_offsets_are_reported(report_kernel: Kernel) -> None:
    with pytest.raises(NMPOutOfBoundsError, match=r"touches bytes \[-8, 0\)"):
        report_kernel[(1, 1, 1)](torch.zeros(4), 1, 0, -8, 0, 1)


def test_device_assert_decoding(report_kernel: Kernel) -> None:
    msg = (
        r"kernel 'add_kernel': device assertion failed \(x must be positive\) at /path/k\.py:20:4, program \(1, 2, 0\)"
    )
    with pytest.raises(NMPDeviceAssertError, match=msg):
        report_kernel[(2, 3, 1)](torch.zeros(4), 2, 1, 0, 0, 1)
    with pytest.raises(AssertionError):  # still an AssertionError for code that catches those
        report_kernel[(2, 3, 1)](torch.zeros(4), 2, 1, 0, 0, 1)


def test_unknown_status(report_kernel: Kernel) -> None:
    with pytest.raises(NMPRuntimeError, match="unknown status 9"):
        report_kernel[(1, 1, 1)](torch.zeros(4), 9, 0, 0, 0, 1)


def test_success_after_failure(report_kernel: Kernel) -> None:
    report_kernel[(1, 1, 1)](torch.zeros(4), 0, 0, 0, 0, 1)
    assert report_kernel.launcher.last_result.status == 0


# ----------------------------------------------------------------------------------------------
# Loader errors (must raise, never crash the process)


def test_unresolved_symbol_is_an_error_not_a_crash() -> None:
    with pytest.raises(loader.NMPLoadError, match="nmp_test_no_such_function"):
        loader.load_object(emit(UNRESOLVED_IR), "bad_kernel")


@pytest.mark.parametrize("data", [b"", b"not an object", b"\x7fELF" + b"\0" * 12])
def test_garbage_object_rejected(data: bytes) -> None:
    with pytest.raises(loader.NMPLoadError):
        loader.load_object(data, "bad_kernel")


def test_truncated_object_rejected() -> None:
    data = emit(PID_IR)
    with pytest.raises(loader.NMPLoadError, match="truncated|malformed"):
        loader.load_object(data[: len(data) // 2], "pid_kernel")


def test_missing_entry_symbol() -> None:
    meta = make_metadata("pid_kernel", "no_such_entry", [("out_ptr", "ptr", "*i32")])
    k = Kernel(PID_IR, PID_SRC, meta)
    with pytest.raises(loader.NMPLoadError, match=r"entry symbol 'no_such_entry' is not defined.*pid_entry"):
        k[(1, 1, 1)](torch.zeros(1, dtype=torch.int32), 1)


def test_launch_after_unload_raises() -> None:
    meta = PID_META._replace(name="pid_kernel_unload")  # a name of its own: no other test holds this object
    k = Kernel(PID_IR, PID_SRC, meta)
    twin = Kernel(PID_IR, PID_SRC, meta)  # the same binary loaded twice (two CompiledKernels) shares the code
    assert twin.module is k.module and k.module.refs == 2
    out = torch.zeros(1, dtype=torch.int32)
    k[(1, 1, 1)](out, 1)
    NMPUtils().unload_module(twin.module)  # one holder lets go: the other still runs
    k[(1, 1, 1)](out, 1)
    NMPUtils().unload_module(k.module)
    with pytest.raises(loader.NMPLoadError, match="unloaded"):
        k[(1, 1, 1)](out, 1)


# ----------------------------------------------------------------------------------------------
# Argument marshalling


def _bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def launcher_for(signature: dict[str, Any], name: str = "k") -> NMPLauncher:
    meta = KernelMetadata(
        name=name,
        nmp_entry="",
        nmp_args=[],
        nmp_sites=[],
        nmp_counters=[],
        shared=0,
        num_warps=1,
        num_stages=1,
        num_ctas=1,
        target=None,
    )
    return NMPLauncher(SimpleNamespace(signature=signature), meta)


def test_marshal_scalars_and_tensors() -> None:
    sig = {
        "x": "*fp32",
        "n": "i32",
        "big": "u64",
        "neg": "i64",
        "flag": "u1",
        "alpha": "fp32",
        "beta": "fp64",
        "h": "fp16",
        "BLOCK": "constexpr",
        "y": "*i8",
    }
    lz = launcher_for(sig)
    x = torch.zeros(10)
    y = torch.zeros(3, dtype=torch.int8)
    vals = lz.marshal([x, 7, 2**64 - 1, -(2**63), True, 0.25, 1e300, 2, 128, y])
    assert vals == [x.data_ptr(), 40, 7, -1, -(2**63), 1, _bits(0.25), _bits(1e300), _bits(2.0), y.data_ptr(), 3]
    assert lz.num_slots == len(vals)
    assert [a.name for a in lz.abi.args] == ["x", "n", "big", "neg", "flag", "alpha", "beta", "h", "y"]


def test_marshal_none_pointer_and_empty_tensor() -> None:
    lz = launcher_for({"a": "*fp32", "b": "*fp32"})
    e = torch.zeros(0)
    assert lz.marshal([None, e]) == [0, 0, e.data_ptr(), 0]


def test_marshal_strided_views() -> None:
    lz = launcher_for({"a": "*fp32"})
    base = torch.zeros(4, 6)
    view = base[1:, ::2]  # rows 1..3, every other column
    assert lz.marshal([view]) == [view.data_ptr(), ((3 - 1) * 6 + (3 - 1) * 2 + 1) * 4]
    t = base.t()
    assert lz.marshal([t]) == [t.data_ptr(), 24 * 4]
    expanded = torch.zeros(1, 5).expand(3, 5)  # stride 0: every row is the same memory
    assert lz.marshal([expanded]) == [expanded.data_ptr(), 5 * 4]
    scalar = torch.tensor(3.0)
    assert lz.marshal([scalar]) == [scalar.data_ptr(), 4]


def test_marshal_tuples_flattened_recursively() -> None:
    sig = {"pair": ("*fp32", "constexpr", ("i32", "fp32")), "n": "i64"}
    lz = launcher_for(sig)
    a = torch.zeros(2)
    assert lz.marshal([(a, 16, (5, 1.0)), 3]) == [a.data_ptr(), 8, 5, _bits(1.0), 3]
    assert [a.name for a in lz.abi.args] == ["pair[0]", "pair[2][0]", "pair[2][1]", "n"]
    with pytest.raises(NMPLaunchError, match=r"argument 'pair\[2\]\[0\]': expects a tuple"):
        lz.marshal([(a, 16, 5), 3])


def test_tensor_wrapper_is_unwrapped() -> None:
    import triton

    lz = launcher_for({"a": "*fp8e4nv"})
    base = torch.zeros(8, dtype=torch.uint8)
    assert lz.marshal([triton.reinterpret(base, triton.language.float8e4nv)]) == [base.data_ptr(), 8]


def test_error_non_cpu_tensor() -> None:
    lz = launcher_for({"x_ptr": "*fp32"}, name="add_kernel")
    with pytest.raises(NMPLaunchError, match=r"kernel 'add_kernel', argument 'x_ptr': is a tensor on device 'meta'"):
        lz.marshal([torch.empty(4, device="meta")])


def test_error_wrong_types() -> None:
    lz = launcher_for({"x_ptr": "*fp32", "n": "i32", "alpha": "fp32"}, name="add_kernel")
    x = torch.zeros(4)
    with pytest.raises(
        NMPLaunchError, match=r"argument 'x_ptr': expects a torch.Tensor on the CPU \(\*fp32\), got int"
    ):
        lz.marshal([1234, 1, 1.0])
    with pytest.raises(NMPLaunchError, match=r"argument 'n': expects an integer \(i32\), got float"):
        lz.marshal([x, 1.5, 1.0])
    with pytest.raises(NMPLaunchError, match=r"argument 'alpha': expects a float \(fp32\), got str"):
        lz.marshal([x, 1, "one"])
    with pytest.raises(NMPLaunchError, match=r"kernel 'add_kernel' takes 3 arguments \(x_ptr, n, alpha\), got 2"):
        lz.marshal([x, 1])


@pytest.mark.parametrize(
    ("ty", "value"), [("i32", 2**31), ("i32", -(2**31) - 1), ("u8", -1), ("u8", 256), ("i64", 2**63), ("u1", 2)]
)
def test_error_int_overflow(ty: str, value: int) -> None:
    lz = launcher_for({"n": ty})
    with pytest.raises(NMPLaunchError, match=rf"argument 'n': value {value} does not fit its type {ty}"):
        lz.marshal([value])


def test_error_tensordesc() -> None:
    # host descriptors are supported (tests/test_language_descriptors.py); a non-descriptor is refused
    lz = launcher_for({"desc": "tensordesc<fp32[16, 16]>"})
    assert lz.num_slots == 2 + 4 * 2 + 2  # base [ptr, span], shape/strides twice, padding, tf32 flags
    with pytest.raises(NMPLaunchError, match=r"argument 'desc': expects a triton.tools.tensor_descriptor"):
        lz.marshal([object()])


def test_abi_mismatch_detected_at_init() -> None:
    meta = make_metadata("k", "e", [("x", "int", "i32")])
    with pytest.raises(NMPLaunchError, match="disagree on the argument ABI"):
        NMPLauncher(SimpleNamespace(signature={"x": "*fp32"}), meta)


def test_too_many_counters_rejected() -> None:
    meta = make_metadata("k", "e", [], counters=[f"c{i}" for i in range(runtime.MAX_COUNTERS + 1)])
    with pytest.raises(NMPLaunchError, match="counters"):
        NMPLauncher(SimpleNamespace(signature={}), meta)


# ----------------------------------------------------------------------------------------------
# Driver


def test_driver_target_and_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    d = NMPDriver()
    spec = active_target()
    assert NMPDriver.is_active()  # this test machine has no GPU
    monkeypatch.setenv("TRITON_DEFAULT_BACKEND", "nmp")
    assert NMPDriver.is_active()
    # Triton's name for the backend of CPU tensors ("cpu" unless another backend owns it: triton_nmp.triton_name)
    assert d.get_current_target() == GPUTarget(triton_name(), f"{spec.name}:{spec.hash()[:16]}", 1)
    assert d.get_active_torch_device() == torch.device("cpu")
    assert (d.get_current_device(), d.get_current_stream(0)) == (0, 0)
    d.set_current_device(0)
    with pytest.raises(ValueError):
        d.set_current_device(1)
    props = d.utils.get_device_properties(0)
    assert props["multiprocessor_count"] == spec.num_pus
    assert props["max_shared_mem"] == spec.spm_bytes
    assert (props["warpSize"], props["max_num_regs"], props["nmp_target"]) == (1, 65536, spec.name)
    assert d.launcher_cls is NMPLauncher
    assert d.map_python_to_cpp_type("*fp32") == "void*"
    assert d.map_python_to_cpp_type("i32") == "int32_t"
    assert d.map_python_to_cpp_type("fp16") == "double"
    with pytest.raises(NotImplementedError):
        d.allocate_default_profile_scratch(16, 16, 0)


def test_backend_shim_exposes_one_concrete_driver() -> None:
    from triton.backends import _find_concrete_subclasses
    from triton.backends.driver import DriverBase

    import triton_nmp.backend.driver as shim

    assert _find_concrete_subclasses(shim, DriverBase) is NMPDriver


def test_load_binary_contract() -> None:
    utils = NMPUtils()
    module, function, n_regs, n_spills, n_max_threads = utils.load_binary("pid_kernel_contract", emit(PID_IR), 0, 0)
    assert (n_regs, n_spills) == (1, 0) and n_max_threads >= 1 << 20  # n_regs > 0: portable code divides by it
    assert loader.object_for_address(function) is module
    utils.unload_module(module)
    assert module.closed


def test_device_interface_and_do_bench() -> None:
    import triton.runtime as trt
    from triton.testing import do_bench

    ev0, ev1 = device_interface.Event(enable_timing=True), device_interface.Event(enable_timing=True)
    ev0.record()
    time.sleep(0.002)
    ev1.record()
    device_interface.synchronize()
    # no nmp launch in between: host-only work is timed on the host's wall clock
    assert 2.0 <= ev0.elapsed_time(ev1) < 1000.0
    assert device_interface.current_device() == 0

    d = NMPDriver()
    cache = d.get_empty_cache_for_benchmark()
    assert cache.device.type == "cpu" and cache.numel() * cache.element_size() <= 1 << 20
    cache.fill_(3)
    d.clear_cache(cache)
    assert not cache.any()

    k = Kernel(PID_IR, PID_SRC, PID_META)
    out = torch.zeros(64, dtype=torch.int32)
    prev = trt.driver._active
    trt.driver.set_active(d)
    try:
        from triton_nmp.driver.benchmarker import do_bench as sim_bench

        assert d.get_benchmarker() is sim_bench
        ms = do_bench(lambda: k[(64, 1, 1)](out, 1), warmup=1, rep=5)
    finally:
        trt.driver._active = prev
    assert 0 < ms < 50
    assert out.tolist() == list(range(64))


def test_unload_inside_load_does_not_deadlock() -> None:
    """A CompiledKernel finalizer (run by the GC at any allocation, e.g. inside `load_object` while it
    holds the loader lock) unloads another object on the same thread: that must not block."""
    import threading

    first = loader.load_object(emit(PID_IR), "pid_kernel_reenter")
    done = threading.Event()

    def reenter() -> None:
        with loader._lock:  # what `load_object` holds when the collector runs the finalizer
            first.close()
        done.set()

    t = threading.Thread(target=reenter, daemon=True)
    t.start()
    t.join(timeout=30)
    assert done.is_set(), "unloading while the loader lock is held deadlocked"
    assert first.closed
