"""The Dynamo backend `nmp`: Inductor with Triton code generation for CPU tensors, compiled for nmp.

Registered through the `torch_dynamo_backends` entry point, so `torch.compile(model, backend="nmp")` works
after `pip install` without importing triton_nmp. `mode` takes Inductor's names: "default" (one config per
kernel chosen by nmp's heuristics and cost model: nothing is simulated while compiling), "max-autotune" (the
cost model's top candidates of each matmul are simulated and the fastest in simulated time wins);
"reduce-overhead" (default's kernels, each compiled graph run as a launch graph: captured on its first call,
then replayed with one host launch and a device-side dispatch per further kernel, as CUDA graphs do; see
`triton_nmp.driver.launch_graph`). As in Inductor's own modes (`torch._inductor.list_mode_options()`),
"max-autotune" is max-autotune with launch graphs (Inductor's `triton.cudagraphs`) and
"max-autotune-no-cudagraphs" without. `options` are Inductor config options, applied over the backend's own.

Matmuls and batched matmuls go through Inductor's Triton templates (`max_autotune_gemm_backends="TRITON"`),
never to host ATen kernels; whatever still runs on the host is counted per graph (`graphs.CompiledGraph`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from triton_nmp.driver.launch_graph import LaunchGraph
from triton_nmp.errors import NMPError

from . import graphs, norm_gemv
from .installation import install

__all__ = ["nmp", "MODES", "config_patches"]

# max-autotune simulates a matmul's few best tiles by the model (`gemm.tuned`) and takes the fastest there and
# then; it does not defer the choice to benchmark each template with and without its epilogue fused
# (`benchmark_epilogue_fusion`): as in default mode the epilogue is fused (it saves the output's round trip
# through the banks and a launch), and each fusion benchmark compiled and ran both variants natively per layer
_MAX_AUTOTUNE = {"max_autotune": True, "benchmark_epilogue_fusion": False}
# the modes whose compiled graphs replay as launch graphs: Inductor's modes with `triton.cudagraphs`
LAUNCH_GRAPH_MODES = ("reduce-overhead", "max-autotune")
MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {},
    "max-autotune": _MAX_AUTOTUNE,
    "max-autotune-no-cudagraphs": _MAX_AUTOTUNE,
}


def config_patches(mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """The Inductor config the backend compiles with for `mode` and the user's `options`."""
    from .choices import NMPChoices
    from .decode_attention import DecodeAttentionPass

    name = mode or "default"
    if name not in MODES:
        raise NMPError(f"torch.compile(backend='nmp'): unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    patches: dict[str, Any] = {
        "cpu_backend": "triton",
        "inductor_choices_class": NMPChoices,
        # matmuls through Inductor's Triton templates, not host ATen: in default mode the heuristics offer one
        # config, so nothing is benchmarked
        "max_autotune_gemm": True,
        "max_autotune_gemm_backends": "TRITON",
        "coordinate_descent_tuning": False,
        "triton.autotune_pointwise": False,  # one config per pointwise kernel: nothing simulated to pick it
        # mix-order reductions assert on a split reduction whose input is pointwise (a decode-step bmm with
        # M=1, lowered to mul+sum on CPU devices): `ir.Reduction.create`'s _find_split_reduction in 2.13
        "triton.mix_order_reduction": False,
        "triton.cudagraphs": False,
        # pointwise prologues fuse into matmul templates: the view arithmetic of the attention output's
        # transpose back to [tokens, heads * head_dim] (`(x // 64) % 12`) is affine on the template's aligned
        # A tile (backend/access_split.py), so the A panel is one strided DMA and the copy kernel disappears
        # (GPT-2's attention projection: 58 + 92 us unfused, 92 us fused; 894 us when it was a gather)
        "prologue_fusion": True,
        # decode attention (M = 1 over a static KV cache) as one split-KV kernel pair, not Inductor's four
        # reductions (decode_attention.py)
        "post_grad_custom_pre_pass": DecodeAttentionPass(),
    }
    patches.update(MODES[name])
    from triton_nmp.sweep.integrate import inductor_patches  # the tuning cache and a configured sweep engine

    patches.update(inductor_patches())
    patches.update(options or {})
    if patches.get("max_autotune") and "benchmark_epilogue_fusion" not in (options or {}):
        patches.update(_MAX_AUTOTUNE)  # max_autotune passed as an option tunes as the mode does
    return patches


def _check_inputs(example_inputs: Any) -> None:
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            raise NMPError(f"torch.compile(backend='nmp'): graph input {i} is on device '{x.device}'; nmp kernels "
                           f"take CPU tensors (nmp is simulated on the host): move the model and inputs to 'cpu'")


def nmp(gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str | None = None,
        options: dict[str, Any] | None = None) -> Any:
    """Compile `gm` with Inductor for nmp (the `torch_dynamo_backends` entry point)."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    from torch._inductor.virtualized import V

    install()
    _check_inputs(example_inputs)
    # one-row linear(layer_norm(x)) as one GEMV with the norm inside (norm_gemv.py), before AOTAutograd decomposes it
    norm_gemv.register_lowering()
    norm_gemv.rewrite(gm, list(example_inputs))
    patches = config_patches(mode, options)
    record = graphs.CompiledGraph(dynamo_graph=gm, example_inputs=list(example_inputs), mode=mode or "default")
    # A graph AOTAutograd's cache serves loads its kernels from Triton's cache and compiles nothing, yet Inductor
    # would start its compile worker pool for it (a sidecar and workers that each import torch: seconds of CPU
    # beside a warm process's own work, GPT-2's warm start 11-21 -> 9-16 s on 2 shared CPUs). So loads run with
    # compile_threads=1, and a real compile (`inner_compile`, a cache miss) with Inductor's own setting. A user's
    # options={"compile_threads": n} applies to both.
    pool_threads = None if "compile_threads" in patches else config.compile_threads
    if pool_threads is not None:
        patches["compile_threads"] = 1

    def inner_compile(graph: torch.fx.GraphModule, inputs: Any, **kwargs: Any) -> Any:
        with config.patch(compile_threads=pool_threads) if pool_threads is not None else contextlib.nullcontext():
            out = compile_fx_inner(graph, inputs, **kwargs)
        record.aten_graphs.append(graph)
        return out

    t0 = time.perf_counter()
    try:
        # AOTAutograd's cache (on by default) serves a warm process without tracing or lowering; the generated
        # code is recorded either way (graphs.recording). Off with the FX graph cache: a user who turns that off
        # (options={"fx_graph_cache": False}) asks for a real compile, which AOTAutograd's hit would skip.
        aot_cache = functorch_config.enable_autograd_cache and patches.get("fx_graph_cache", config.fx_graph_cache)
        # Inductor memoises its heuristics object (`V.choices`) per thread the first time a compile asks for it,
        # from the `inductor_choices_class` in force then: after a plain Inductor compile in this thread, the
        # patched config alone would leave the stock heuristics in charge (and a plain compile after this one
        # would inherit nmp's). The handler is set for this compile only, before the config patch, so the one
        # it restores is the unpatched default.
        with (V.set_choices_handler(patches["inductor_choices_class"]()), graphs.recording(record),
              config.patch(patches), functorch_config.patch(enable_autograd_cache=aot_cache)):
            compiled = compile_fx(gm, example_inputs, inner_compile=inner_compile)
    finally:
        record.compile_seconds = time.perf_counter() - t0
        graphs.keep(record)
    if mode in LAUNCH_GRAPH_MODES:
        record.launch_graph = LaunchGraph(f"graph {len(graphs.compiled_graphs())}",
                                          tuple(f.op for f in record.host_fallbacks))
        return record.launch_graph.wrap(compiled)
    return compiled
