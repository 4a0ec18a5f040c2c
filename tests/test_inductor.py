"""torch.compile through Inductor onto nmp: registration, plain Inductor, compile workers, user Triton kernels,
code that treats Triton's backend name as a torch device, the Inductor workarounds, host fallbacks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton

import triton_nmp
from triton_nmp.errors import NMPError
from triton_nmp.inductor import compiled_graphs, graphs
from triton_nmp.triton_name import cpu_entry_registered

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not cpu_entry_registered(),
    reason="triton-nmp's Triton entry point 'cpu' is not registered: reinstall (pip install -e .) to test this")


def run_python(code: str, tmp_path: Path, extra_env: dict[str, str] | None = None, timeout: int = 600) -> str:
    """Run `code` in a fresh interpreter with empty Inductor/Triton caches; return its stdout (asserting rc 0)."""
    env = dict(os.environ)
    env.update({
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    })
    env.update(extra_env or {})
    script = tmp_path / "script.py"  # a file: @triton.jit needs the source
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc.stdout


def test_backend_name_works_after_install_without_import(tmp_path):
    """`torch.compile(backend="nmp")` resolves through the torch_dynamo_backends entry point."""
    out = run_python("""
        import sys, torch
        assert "triton_nmp" not in sys.modules
        f = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="nmp")
        x = torch.randn(1000)
        torch.testing.assert_close(f(x), torch.sin(x) * 2 + 1)
        from triton_nmp.inductor import compiled_graphs
        print("KERNELS", compiled_graphs()[-1].kernels)
    """, tmp_path)
    assert "KERNELS ['triton_poi_fused_add_mul_sin_0']" in out


def test_plain_inductor_with_triton_cpu_backend_targets_nmp():
    def f(x):
        return torch.relu(x) + torch.cos(x)

    x = torch.randn(3000)
    g = torch.compile(f, options={"cpu_backend": "triton"})
    g(x)  # compile
    with triton_nmp.profile() as prof:
        y = g(x)
    torch.testing.assert_close(y, f(x))
    assert [r.kernel for r in prof.launches] == ["triton_poi_fused_add_cos_relu_0"]
    assert prof.launches[0].sim_seconds > 0


def test_compile_workers_find_the_backend(tmp_path):
    """Kernels compiled by Inductor's worker subprocesses are compiled for nmp (the parent only loads them)."""
    custom = tmp_path / "my-nmp.toml"  # a target only this parent process knows (the workers start without it)
    custom.write_text(triton_nmp.TargetSpec.load("nmp-64").to_toml().replace('name = "nmp-64"', 'name = "my-nmp"'))
    out = run_python(f"""
        import torch, triton_nmp
        from torch._inductor.async_compile import AsyncCompile
        import triton_nmp.backend.compiler as compiler

        parent_compiles = []
        original = compiler.NMPBackend.make_nmpbin
        compiler.NMPBackend.make_nmpbin = staticmethod(lambda *a: parent_compiles.append(1) or original(*a))
        AsyncCompile.warm_pool()
        AsyncCompile.wait_pool_ready()
        assert AsyncCompile.use_process_pool()
        triton_nmp.activate(target="{custom}")
        f = torch.compile(lambda x, y: torch.tanh(x) * y - 1, backend="nmp")
        x, y = torch.randn(500), torch.randn(500)
        torch.testing.assert_close(f(x, y), torch.tanh(x) * y - 1)
        print("PARENT_COMPILES", len(parent_compiles))
        print("ARCH", "'my-nmp:" in triton_nmp.inductor.compiled_graphs()[-1].source_code[0])
    """, tmp_path, {"TORCHINDUCTOR_COMPILE_THREADS": "2", "TRITON_NMP_CACHE_DIR": str(tmp_path / "nmp")})
    assert "PARENT_COMPILES 0" in out and "ARCH True" in out


def test_a_warm_process_starts_no_compile_worker_pool(tmp_path, monkeypatch):
    """A graph AOTAutograd's cache serves compiles nothing, so Inductor's worker pool is not started for it; a real
    compile still runs with Inductor's own compile_threads (restored after the compile)."""
    code = """
        import torch
        from torch._inductor import config
        from torch._inductor.async_compile import AsyncCompile
        threads = config.compile_threads
        f = torch.compile(lambda x, y: torch.tanh(x) * y - 1, backend="nmp")
        x, y = torch.randn(500), torch.randn(500)
        torch.testing.assert_close(f(x, y), torch.tanh(x) * y - 1)
        print("THREADS", threads, "POOLS", AsyncCompile.process_pool.cache_info().currsize,
              "RESTORED", config.compile_threads == threads)
    """
    env = {"TRITON_NMP_CACHE_DIR": str(tmp_path / "nmp"), "TORCHINDUCTOR_COMPILE_THREADS": "2"}
    cold = run_python(code, tmp_path, env)
    warm = run_python(code, tmp_path, env)
    assert "THREADS 2 POOLS 1 RESTORED True" in cold  # the real compile used the pool
    assert "THREADS 2 POOLS 0 RESTORED True" in warm


def test_user_triton_kernel_inside_compiled_function_has_no_graph_break():
    from tests.kernel_library import scaled_add

    def f(x, y):
        return torch.relu(scaled_add(x, y, 0.5)) * 3

    x, y = torch.randn(700), torch.randn(700)
    assert torch._dynamo.explain(f)(x, y).graph_break_count == 0
    g = torch.compile(f, backend="nmp", fullgraph=True)
    torch.testing.assert_close(g(x, y), torch.relu(x + 0.5 * y) * 3)
    assert "_scaled_add_kernel" in compiled_graphs()[-1].kernels


def test_library_that_treats_the_backend_name_as_a_torch_device():
    """`torch.device(backend)`, `getattr(torch, backend)`, `custom_fwd(device_type=backend)` at import."""
    from tests import kernel_library as lib

    assert lib.BACKEND == "cpu" and lib.DEVICE == torch.device("cpu") and lib.device_fn is torch.cpu
    x = torch.randn(300, requires_grad=True)
    y = torch.randn(300, requires_grad=True)
    out = lib.ScaledAdd.apply(x, y, 2.0)
    torch.testing.assert_close(out, x + 2.0 * y)
    out.sum().backward()
    torch.testing.assert_close(y.grad, torch.full_like(y, 2.0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(lib.ScaledAdd.apply(x.detach(), y.detach(), 1.0), x.detach() + y.detach())


def test_the_cpu_entry_defers_to_another_installed_cpu_backend(tmp_path):
    """With a Triton-CPU-like backend installed, "cpu" stays that backend's; nmp goes back to "nmp"."""
    site = tmp_path / "site"
    pkg = site / "fake_triton_cpu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "compiler.py").write_text(textwrap.dedent("""
        from triton.backends.compiler import BaseBackend
        class FakeCPUBackend(BaseBackend):
            @staticmethod
            def supports_target(target):
                return target.backend == "cpu"
            def hash(self): return "fake"
            def parse_options(self, o): return o
            def add_stages(self, *a): pass
            def load_dialects(self, ctx): pass
            def get_module_map(self): return {}
            def get_codegen_implementation(self, o): return {}
            def pack_metadata(self, m): return m
    """))
    (pkg / "driver.py").write_text(textwrap.dedent("""
        from triton.backends.driver import DriverBase
        class FakeCPUDriver(DriverBase):
            @staticmethod
            def is_active(): return False
            def get_current_target(self): pass
            def get_active_torch_device(self): pass
            def map_python_to_cpp_type(self, t): pass
            def get_benchmarker(self): pass
    """))
    dist = site / "fake_triton_cpu-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-triton-cpu\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[triton.backends]\ncpu = fake_triton_cpu\n")
    out = run_python("""
        import torch, triton, triton.backends, triton.language as tl
        assert triton.backends.backends["cpu"].compiler.__name__ == "FakeCPUBackend"
        assert triton.backends.backends["cpu"].driver.__name__ == "FakeCPUDriver"
        print("NAME", triton.runtime.driver.active.get_current_target().backend)

        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)

        x = torch.ones(16)
        k[(1,)](x, BLOCK=16)
        assert torch.equal(x, torch.full((16,), 2.0))
        try:
            torch.compile(lambda x: x + 1, backend="nmp")(x)
        except Exception as e:
            print("ERROR", " ".join(str(e).split()))
    """, tmp_path, {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"})
    assert "NAME nmp" in out
    assert "ERROR" in out and "Triton's 'cpu' backend is 'fake_triton_cpu'" in out


def test_inductor_workarounds_are_installed():
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._inductor.codegen.common import get_device_op_overrides

    triton_nmp.inductor.install()
    line = get_device_op_overrides("cpu").import_get_raw_stream_as("my_stream")
    assert line == "def my_stream(_): return 0"
    compile(textwrap.dedent(f"""
        from torch._dynamo.testing import rand_strided
        {line}
        import torch
    """), "<benchmark module>", "exec")
    with get_interface_for_device("cpu").device(0):
        pass
    props = get_interface_for_device("cpu").get_device_properties()
    assert props.multi_processor_count == triton_nmp.active_target().num_pus


def test_host_fallbacks_are_counted_and_matmuls_stay_on_nmp():
    def f(a, b):
        c = torch.relu(a @ b)
        return torch.linalg.inv(c[:16] + torch.eye(16) * 8), torch.bmm(c.view(2, 16, 16), c.view(2, 16, 16))

    a, b = torch.randn(32, 24), torch.randn(24, 16)
    g = torch.compile(f, backend="nmp")
    got, want = g(a, b), f(a, b)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
    record = compiled_graphs()[-1]
    ops = set(record.fallback_counts())
    assert ops and all("linalg" in op for op in ops), record.summary()
    assert not any("mm" in op for op in ops)
    assert any("triton_tem" in k for k in record.kernels)


def test_a_permuted_matmul_input_is_read_by_dma_in_the_template_prologue():
    # attention's output [heads, tokens, head_dim] back to [tokens, heads * head_dim], then a linear layer:
    # the prologue's `(x // 16) % 4` index math is affine on the template's aligned A tile (no gather)
    def f(o, w):
        return o.transpose(0, 1).reshape(o.shape[1], -1) @ w.t()

    o, w = torch.randn(4, 32, 16), torch.randn(24, 64)
    g = torch.compile(f, backend="nmp")
    g(o, w)  # compile first: the template choices Inductor benchmarks while compiling are launches too
    with triton_nmp.profile() as prof:
        got = g(o, w)
    torch.testing.assert_close(got, f(o, w), rtol=1e-4, atol=1e-4)
    templates = [r for r in prof.launches if r.kernel.startswith("triton_tem")]
    assert len(templates) == 1 and len(prof.launches) == 1, [r.kernel for r in prof.launches]
    assert templates[0].counters.get("gather_elems", 0) == 0


def test_fallback_parser_reads_the_wrapper_call():
    source = textwrap.dedent("""
        def call(args):
            buf0 = empty_strided_cpu((4, 4), (4, 1), torch.float32)
            extern_kernels.mm(arg0_1, arg1_1, out=buf0)
            buf1 = torch.ops.aten.linalg_inv_ex.default(buf0)
            del buf0
            triton_poi_fused_0.run(buf1, 16, stream=stream0)
            return (reinterpret_tensor(buf1, (16,), (1,), 0), )
    """)
    assert [f.op for f in graphs.host_fallbacks_in(source)] == ["extern_kernels.mm", "aten.linalg_inv_ex.default"]


def test_non_cpu_inputs_and_unknown_modes_are_refused():
    with pytest.raises(Exception, match="nmp kernels take CPU tensors"):
        torch.compile(lambda x: x + 1, backend="nmp")(torch.empty(4, device="meta"))
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(lambda x: x * 3, backend="nmp", mode="fastest")(torch.ones(4))


def test_triton_name_is_cpu_and_nmp_target_still_compiles():
    from triton.backends.compiler import GPUTarget

    from triton_nmp.driver import target_arch
    from triton_nmp.triton_name import triton_name

    assert triton_name() == "cpu"
    target = triton.runtime.driver.active.get_current_target()
    assert target == GPUTarget("cpu", target_arch(triton_nmp.active_target()), 1)
    assert isinstance(NMPError("x"), Exception)


def test_warm_process_is_served_by_the_caches_and_still_records_what_runs(tmp_path):
    """A second process with the same caches hits AOTAutograd's cache (no tracing, no lowering, no Triton
    compile) and still records the graph's kernels and host fallbacks."""
    code = """
        import torch, triton_nmp
        from torch._dynamo.utils import counters
        from triton_nmp.inductor import compiled_graphs
        f = torch.compile(lambda x, w: torch.relu(x @ w).sum(-1), backend="nmp")
        x, w = torch.randn(32, 48), torch.randn(48, 40)
        torch.testing.assert_close(f(x, w), torch.relu(x @ w).sum(-1), rtol=1e-4, atol=1e-4)
        g = compiled_graphs()[-1]
        print("AOT_HIT", counters["aot_autograd"]["autograd_cache_hit"], "KERNELS", len(g.kernels),
              "FALLBACKS", len(g.host_fallbacks), "SOURCES", len(g.source_code))
    """
    env = {"TRITON_NMP_CACHE_DIR": str(tmp_path / "nmp"), "TRITON_NMP_TUNING_CACHE": str(tmp_path / "tuning")}
    cold = run_python(code, tmp_path, env).split("AOT_HIT")[-1].split()
    warm = run_python(code, tmp_path, env).split("AOT_HIT")[-1].split()
    assert cold[0] == "0" and warm[0] == "1", (cold, warm)
    assert cold[1:] == warm[1:] and int(cold[2]) >= 1 and cold[4] == "0" and cold[6] == "1", (cold, warm)
