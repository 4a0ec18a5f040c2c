"""Launch graphs (driver/launch_graph.py, torch.compile mode="reduce-overhead"): warm-up, capture, replay.

A replayed call charges the host launch overhead once and the target's device dispatch cost for every
further kernel; results are those of ordinary launches, divergence and host computations are handled.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import triton_nmp
from triton_nmp.driver.device import CounterEstimate, graph_dispatched
from triton_nmp.driver.launch_graph import LaunchGraph, signature
from triton_nmp.target import TargetSpec


@triton.jit
def _scale(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a, mask=mask)


def _step(x: torch.Tensor, grids: tuple[int, ...] = (4, 4, 4)) -> torch.Tensor:
    """Three dependent launches (x*2, *3, *5) with the given grids (blocks of 256 or more)."""
    y = x
    for g, a in zip(grids, (2.0, 3.0, 5.0)):
        out = torch.empty_like(y)
        _scale[(g,)](y, out, y.numel(), a, BLOCK=triton.next_power_of_2(triton.cdiv(y.numel(), g)))
        y = out
    return y


def _profiled(graph: LaunchGraph, x: torch.Tensor, grids=(4, 4, 4)):
    with triton_nmp.profile() as prof, graph.call(signature((x,))):
        y = _step(x, grids)
    return y, prof


def test_replay_charges_one_host_launch_and_a_dispatch_per_further_kernel():
    spec = TargetSpec()
    x = torch.randn(1024)
    g = LaunchGraph("three kernels")
    warm, p_warm = _profiled(g, x)
    cap, p_cap = _profiled(g, x)
    rep, p_rep = _profiled(g, x)
    assert [r.launch for r in p_warm.launches] == ["host"] * 3
    assert [r.launch for r in p_cap.launches] == ["host"] * 3
    assert [r.launch for r in p_rep.launches] == ["host", "graph", "graph"]
    saved = 2 * (spec.launch_overhead_us - spec.launch_graph_dispatch_us) * 1e-6
    assert p_rep.sim_seconds == pytest.approx(p_cap.sim_seconds - saved, rel=1e-9)
    assert p_warm.sim_seconds == pytest.approx(p_cap.sim_seconds, rel=1e-9)
    torch.testing.assert_close(rep, x * 30.0)
    assert torch.equal(rep, warm) and torch.equal(rep, cap)
    assert (g.replays, g.diverged) == (1, 0)
    summary = p_rep.summary()
    assert "2 of 3 launches dispatched from replayed launch graphs (mode='reduce-overhead' or 'max-autotune'): " \
           "1 us device dispatch each instead of the 5 us host launch" in summary
    events = [e for e in p_rep.trace_events() if e.get("cat") == "launch"]
    assert [e["args"]["dispatch"] for e in events] == ["host", "graph", "graph"]


def test_a_replay_that_stops_matching_its_capture_is_charged_as_host_launches_from_there():
    x = torch.randn(1024)
    g = LaunchGraph()
    _profiled(g, x)
    _profiled(g, x)
    y, prof = _profiled(g, x, grids=(4, 2, 4))  # the second kernel's grid differs from the capture
    assert [r.launch for r in prof.launches] == ["host", "host", "host"]
    assert (g.replays, g.diverged) == (1, 1)
    torch.testing.assert_close(y, x * 30.0)
    _, prof = _profiled(g, x)  # the capture is kept: the next matching call replays again
    assert [r.launch for r in prof.launches] == ["host", "graph", "graph"]


def test_each_input_signature_warms_up_and_captures_on_its_own():
    g = LaunchGraph()
    a, b = torch.randn(1024), torch.randn(512)
    for x in (a, a, b):
        _profiled(g, x)
    _, prof = _profiled(g, b)  # b's second call captures
    assert {r.launch for r in prof.launches} == {"host"}
    _, prof = _profiled(g, b)
    assert [r.launch for r in prof.launches] == ["host", "graph", "graph"]
    assert signature((a,)) != signature((b,)) and signature((a,)) == signature((torch.zeros(1024),))


def test_a_graph_that_computes_on_the_host_never_replays_and_says_why():
    g = LaunchGraph(host_ops=("aten.sort.default", "extern_kernels.mm"))
    x = torch.randn(1024)
    for _ in range(3):
        _, prof = _profiled(g, x)
    assert {r.launch for r in prof.launches} == {"host"}
    assert g.reason == "not captured: it computes on the host (aten.sort.default, extern_kernels.mm)"
    assert g.replays == 0


def test_launches_outside_a_graph_and_in_other_threads_are_host_launches():
    import threading

    g = LaunchGraph()
    x = torch.randn(1024)
    _profiled(g, x)
    _profiled(g, x)
    seen: list[str] = []

    def other() -> None:
        with triton_nmp.profile() as prof:
            _step(x)
        seen.extend(r.launch for r in prof.launches)

    with g.call(signature((x,))):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        _step(x)
    assert seen == ["host"] * 3
    with triton_nmp.profile() as prof:
        _step(x)
    assert {r.launch for r in prof.launches} == {"host"}


def test_graph_dispatched_replaces_the_launch_overhead_of_an_estimate():
    spec = TargetSpec()
    est = CounterEstimate(cycles=7000, seconds=7e-6, bytes_local=0, bytes_remote=0, flops=0, dma_cycles=2000,
                          compute_cycles=0, roofline_seconds=0.0, overhead_cycles=5000.0)
    out = graph_dispatched(est, spec)
    assert (out.cycles, out.overhead_cycles) == (3000, 1000.0)
    assert out.seconds == pytest.approx(3e-6)


def test_a_target_file_without_graph_dispatch_charges_graph_kernels_the_launch_overhead(tmp_path):
    text = TargetSpec.load("nmp-64").to_toml()
    assert "graph_dispatch_us = 1.0" in text
    path = tmp_path / "old.toml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("graph_dispatch_us")))
    spec = TargetSpec.load(str(path))
    assert spec.launch_graph_dispatch_us == spec.launch_overhead_us == 5.0


def test_torch_compile_reduce_overhead_replays_the_compiled_graph():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64),
                                torch.nn.LayerNorm(64))
    x = torch.randn(4, 64)
    compiled = torch.compile(model, backend="nmp", mode="reduce-overhead")
    plain = torch.compile(model, backend="nmp")
    with torch.no_grad():
        ref = model(x)
        profs = []
        for _ in range(3):
            with triton_nmp.profile() as prof:
                out = compiled(x)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
            profs.append(prof)
        plain(x)
        with triton_nmp.profile() as p_plain:
            plain(x)
    n = len(profs[2].launches)
    assert n >= 2
    assert [r.launch for r in profs[1].launches] == ["host"] * n
    assert [r.launch for r in profs[2].launches] == ["host"] + ["graph"] * (n - 1)
    assert {r.launch for r in p_plain.launches} == {"host"}
    spec = TargetSpec()
    saved = (n - 1) * (spec.launch_overhead_us - spec.launch_graph_dispatch_us) * 1e-6
    assert profs[2].sim_seconds == pytest.approx(p_plain.sim_seconds - saved, rel=1e-6)
    record = triton_nmp.inductor.compiled_graphs()[-2]
    assert record.mode == "reduce-overhead"
    assert "launch graph: 1 replays, 0 diverged" in record.summary()


@pytest.mark.parametrize("mode, graphed", [("max-autotune", True), ("max-autotune-no-cudagraphs", False)])
def test_max_autotune_replays_launch_graphs_as_inductors_mode_uses_cuda_graphs(mode, graphed):
    # torch._inductor.list_mode_options(): "max-autotune" sets triton.cudagraphs, "max-autotune-no-cudagraphs" not
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64))
    x = torch.randn(2, 32)
    compiled = torch.compile(model, backend="nmp", mode=mode)
    with torch.no_grad():
        ref = model(x)
        for _ in range(3):
            with triton_nmp.profile() as prof:
                out = compiled(x)
            torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    n = len(prof.launches)
    assert [r.launch for r in prof.launches] == (["host"] + ["graph"] * (n - 1) if graphed else ["host"] * n)
    record = triton_nmp.inductor.compiled_graphs()[-1]
    assert record.mode == mode and (record.launch_graph is not None) == graphed


def test_greedy_generation_under_reduce_overhead_gives_eagers_tokens_and_replays_every_decode_step():
    import copy

    from triton_nmp.llm import build, greedy_generate

    torch._dynamo.reset()
    model = build("llama-tiny", torch.float16, std=0.3)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="nmp", mode="reduce-overhead")
    prompt = torch.randint(0, model.cfg.vocab, (1, 12), generator=torch.Generator().manual_seed(1))
    want = greedy_generate(model, model, prompt, 6)
    got = greedy_generate(twin, compiled, prompt, 6)
    assert got.tokens == want.tokens and len(set(want.tokens)) > 2
    for g, w in zip(got.decode_logits, want.decode_logits):
        torch.testing.assert_close(g, w, atol=5e-2, rtol=5e-2)
    decode = triton_nmp.inductor.compiled_graphs()[-1]
    assert decode.launch_graph is not None and not decode.launch_graph.reason
    # 6 decode steps: warm-up, capture, then replays, none diverging
    assert (decode.launch_graph.replays, decode.launch_graph.diverged) == (3, 0), decode.summary()
