"""LLMs on nmp: GPT-2 small and a Llama-shaped decoder compiled with `torch.compile(backend="nmp")`.

Per model and compile mode ("default": one config per kernel from nmp's heuristics and cost model;
"reduce-overhead": default's kernels, each step replayed as a launch graph (one host launch per step, a device
dispatch per further kernel); "max-autotune": matmul tiles chosen on simulated time, replayed as launch graphs
too, as Inductor's mode has CUDA graphs; "max-autotune-no-cudagraphs" without), in fresh processes:

* prefill (batch 1, --prompt tokens): simulated ms; decode (one token at position --prompt, attending over the
  static KV cache of --cache positions): simulated us per token;
* the floor: max(FLOPs / peak FLOP/s of the dtype, (weights + KV-cache bytes) / aggregate local bank
  bandwidth), and the ratio to it (the baseline of this benchmark: what the machine cannot beat);
* kernels per step, host fallbacks (ATen calls left on the host), launches simulated to tune;
* cold compile (first call minus a warm call, empty Inductor/Triton/nmp/tuning caches) and warm-process start
  (a second process with those caches: from the moment the benchmark starts it, interpreter start and every import
  included, to the first prefill logits; the model's weights are the checkpoint the cold process saved, memory-
  mapped as a deployment loads one: `triton_nmp.llm.weights`);
* re-laid out MiB/ms/steps: under the auto policy, tensors the prefill laid out move to the layouts decode reads
  them fastest in once decode's accrued loss pays for each move (`triton_nmp.relayout`): the bytes moved, their
  simulated time and the decode steps profiled before the measured step, the first that moves the same as the
  step before it (nothing, or only tensors each step allocates afresh; "+": still changing after
  MAX_SETTLE_STEPS). A step's time includes its own transfers (host writes of its inputs, re-layouts).

    triton-nmp llm                                 # gpt2 + llama, fp16, all three modes
    triton-nmp llm --models gpt2 --modes default --plot breakdown.png
    python benchmarks/llm.py ...                   # the same

Simulated times are deterministic; compile and start times are host wall-clock on this machine.
"""

from __future__ import annotations

import time

T_PROCESS = time.time()  # noqa: E402  (unless the parent says when it started this process: START_ENV)

import argparse  # noqa: E402
import ast  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

from triton_nmp.report import machine_line, table  # noqa: E402

DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
START_ENV = "TRITON_NMP_BENCH_STARTED"  # time.time() when the parent started a worker process
MAX_SETTLE_STEPS = 12  # decode steps profiled at most before the measured one while tensors still move


@dataclass
class StepResult:
    sim_seconds: float  # kernels and the step's transfers (host writes of inputs, re-layouts)
    kernels: list[tuple[str, float]]  # (Inductor kernel name, simulated seconds) per launch
    launches: int
    host_fallbacks: list[str]
    roofline_seconds: float
    transfer_seconds: float = 0.0


@dataclass
class RunResult:
    model: str
    mode: str
    dtype: str
    prompt: int
    cache: int
    prefill: StepResult
    decode: StepResult
    first_call_seconds: float  # prefill compile + first run
    warm_call_seconds: float  # a second prefill call
    decode_first_call_seconds: float
    decode_warm_call_seconds: float
    start_to_logits_seconds: float  # process start to the first prefill logits
    build_seconds: float  # building (cold) or loading (warm) the model's weights, part of the above
    tuning_simulated: int
    tuning_benchmarks: int
    gemm_legal: int = 0
    gemm_kept: int = 0  # matmul choices offered to Inductor, every call counted (12 layers: 12 times)
    gemm_kept_distinct: int = 0  # ... once per distinct matmul (Inductor simulates each only once)
    extra: dict = field(default_factory=dict)

    @property
    def cold_compile_seconds(self) -> float:
        """Compile time of the prefill and decode graphs: first calls minus warm calls."""
        return (self.first_call_seconds - self.warm_call_seconds + self.decode_first_call_seconds
                - self.decode_warm_call_seconds)


def _step(prof, graph) -> StepResult:
    return StepResult(
        sim_seconds=prof.sim_seconds + prof.transfer_seconds,  # data moved inside the step counts
        transfer_seconds=prof.transfer_seconds,
        kernels=[(r.kernel, r.sim_seconds) for r in prof.launches],
        launches=len(prof.launches),
        host_fallbacks=[f.op for f in graph.host_fallbacks],
        roofline_seconds=sum(r.roofline_seconds for r in prof.launches),
    )


def worker(model_name: str, mode: str, dtype_name: str, prompt_len: int, cache: int,
           placement_pass: bool = False, weights: str = "") -> RunResult:
    """One process: build (or load from `weights`, see `triton_nmp.llm.weights`), compile, run and profile
    prefill and one decode step. With `placement_pass`, the
    model-level placement pass (`triton_nmp.placement_pass`, greedy) is run on a captured decode step after
    compiling and its plan applied (weights laid out once, as at load) before both steps are profiled."""
    import copy

    import torch

    import triton_nmp
    from triton_nmp.inductor import choices, compiled_graphs, reset_tuning_stats, tuning_stats
    from triton_nmp.llm import CONFIGS, build
    from triton_nmp.llm.weights import cached_build

    dtype = getattr(torch, dtype_name)
    cfg = CONFIGS[model_name]
    if cfg.max_positions != cache:
        import dataclasses

        CONFIGS[model_name] = dataclasses.replace(cfg, max_positions=cache)
    t_build = time.perf_counter()
    model = cached_build(weights, model_name, dtype) if weights else build(model_name, dtype)
    build_seconds = time.perf_counter() - t_build
    reset_tuning_stats()
    compiled = torch.compile(model, backend="nmp", mode=mode)
    ids = torch.randint(0, model.cfg.vocab, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(ids)
        t1 = time.perf_counter()
        start_to_logits = time.time() - float(os.environ.get(START_ENV, T_PROCESS))
        compiled(ids)
        t2 = time.perf_counter()
        with triton_nmp.profile() as prof:
            compiled(ids)
        prefill = _step(prof, compiled_graphs()[-1])
        token = torch.zeros(1, 1, dtype=torch.int64)
        pos = torch.tensor([prompt_len], dtype=torch.int64)
        t3 = time.perf_counter()
        compiled(token, pos)
        t4 = time.perf_counter()
        compiled(token, pos)
        t5 = time.perf_counter()
        # the auto policy moves a tensor to the layout decode reads it fastest in once decode's accrued loss
        # pays for the move (`triton_nmp.relayout`): measure the first step that moves what the step before
        # it moved (nothing, or only tensors a step allocates afresh), and report what moved on the way
        moved_bytes, moved_seconds, steps, before = 0, 0.0, 0, []
        while True:
            with triton_nmp.profile() as prof:
                compiled(token, pos)
            moves = [t for t in prof.transfers if t.kind == "relayout"]
            pattern = sorted((t.tensor, t.src, t.dst) for t in moves)
            settled = pattern == before
            if settled or steps >= MAX_SETTLE_STEPS:
                break
            before = pattern
            steps += 1
            moved_bytes += sum(t.nbytes for t in moves)
            moved_seconds += sum(t.sim_seconds for t in moves)
        decode = _step(prof, compiled_graphs()[-1])
        extra = {"placement": triton_nmp.placement.default_policy(),  # TRITON_NMP_PLACEMENT, else "auto"
                 "settle_steps": steps, "relayout_bytes": moved_bytes, "relayout_seconds": moved_seconds,
                 "settled": settled}
        if placement_pass:
            from triton_nmp import placement_pass as pp

            t6 = time.perf_counter()
            with pp.capture(model) as cap:
                compiled(token, pos)
            plan = pp.solve(cap.graph(), "greedy")
            pp.apply(plan)
            extra = {"placement": "pass", "pass_seconds": time.perf_counter() - t6,
                     "plan_migrations": len(plan.migrations())}
            compiled(token, pos)  # the plan's layouts are in place: nothing moves in the profiled steps
            with triton_nmp.profile() as prof:
                compiled(token, pos)
            decode = _step(prof, compiled_graphs()[-1])
            compiled(ids)
            with triton_nmp.profile() as prof:
                compiled(ids)
            prefill = _step(prof, compiled_graphs()[-2])
    stats = tuning_stats()
    sel = choices.gemm_selections()
    del copy
    return RunResult(model_name, mode, dtype_name, prompt_len, cache, prefill, decode, t1 - t0, t2 - t1, t4 - t3,
                     t5 - t4, start_to_logits, build_seconds, stats.simulated, stats.benchmarks,
                     sum(s.legal for s in sel), sum(len(s.kept) for s in sel), _distinct_kept(sel), extra)


def _distinct_kept(selections: list) -> int:
    """Matmul choices offered to Inductor, counted once per distinct (op, shape, dtype)."""
    distinct = {(s.op, s.m, s.n, s.k, s.batch, s.dtype): len(s.kept) for s in selections}
    return sum(distinct.values())


def floor_seconds(model_name: str, dtype_name: str, tokens: int, attended: int, cache: int) -> tuple[float, float]:
    """(compute floor, memory floor) of one step over `tokens` new tokens attending to `attended` positions."""
    import torch

    from triton_nmp.llm import CONFIGS
    from triton_nmp.llm.models import GPT2Config
    from triton_nmp.target import active_target

    spec = active_target()
    cfg = CONFIGS[model_name]
    size = torch.empty((), dtype=getattr(torch, dtype_name)).element_size()
    d, hd, L = cfg.hidden, cfg.head_dim, cfg.layers
    if isinstance(cfg, GPT2Config):
        layer_w = d * 3 * d + d * d + 2 * d * 4 * d
        head_w = cfg.vocab * d
        other_w = cfg.max_positions * d
    else:
        layer_w = d * d * 2 + 2 * d * cfg.kv_heads * hd + 3 * d * cfg.ffn
        head_w = 2 * cfg.vocab * d  # embedding + untied LM head
        other_w = 0
    weights = (L * layer_w + head_w + other_w) * size
    matmul_macs = tokens * (L * layer_w + cfg.vocab * d)
    attn_macs = L * 2 * tokens * attended * cfg.heads * hd
    flops = 2 * (matmul_macs + attn_macs)
    kv = 2 * L * cfg.kv_heads * hd * size * (tokens if attended == tokens else cache)
    compute = flops / spec.peak_flops(DTYPES[dtype_name])
    memory = (weights + kv) / spec.local_bytes_per_second
    return compute, memory


def run_worker_process(args, model: str, mode: str, cache_dir: Path) -> RunResult:
    env = dict(os.environ)
    env.update({
        "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"),
        "TRITON_CACHE_DIR": str(cache_dir / "triton"),
        "TRITON_NMP_TUNING_CACHE": str(cache_dir / "tuning"),
        "TRITON_NMP_CACHE_DIR": str(cache_dir / "nmp"),  # cost-model calibration and target descriptions too
    })
    cmd = [sys.executable, "-m", "triton_nmp.llm.bench", "--worker", model, mode, args.dtype, str(args.prompt),
           str(args.cache), "--weights", str(cache_dir / "weights")]
    cmd += ["--placement-pass"] if args.placement_pass else []
    env[START_ENV] = repr(time.time())
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {model}/{mode} failed:\n{proc.stderr[-4000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    data["prefill"] = StepResult(**data["prefill"])
    data["decode"] = StepResult(**data["decode"])
    return RunResult(**data)


def plot_breakdown(results: list[RunResult], path: str) -> None:
    """Stacked bars: per model/mode/step, simulated time per Inductor kernel kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def kind(name: str) -> str:
        for prefix, label in (("triton_tem", "matmul templates"), ("triton_per", "persistent reductions"),
                              ("triton_red", "reductions"), ("triton_poi", "pointwise"),
                              ("triton_unk", "reductions")):  # a fixed config (nmp reductions) is named "unk"
            if name.startswith(prefix):
                return label
        return "other"

    kinds = ["matmul templates", "persistent reductions", "reductions", "pointwise", "other"]
    steps = (("prefill", "ms", 1e3), ("decode", "us per token", 1e6))
    fig, axes = plt.subplots(1, 2, figsize=(max(7, 2.4 * len(results) + 3), 4.5))
    for ax, (step, unit, scale) in zip(axes, steps):
        labels, per_kind = [], {k: [] for k in kinds}
        for r in results:
            per = {k: 0.0 for k in kinds}
            for name, sec in getattr(r, step).kernels:
                per[kind(name)] += sec * scale
            labels.append(f"{r.model}\n{r.mode}\n{r.dtype}")
            for k in kinds:
                per_kind[k].append(per[k])
        bottom = [0.0] * len(results)
        for k in kinds:
            ax.bar(range(len(results)), per_kind[k], bottom=bottom, label=k)
            bottom = [x + y for x, y in zip(bottom, per_kind[k])]
        ax.set_xticks(range(len(results)), labels, fontsize=7)
        ax.set_ylabel(f"simulated {unit}")
        ax.set_title(f"{step}: simulated time by Inductor kernel kind", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def report(results: list[RunResult]) -> str:
    rows = []
    for r in results:
        pc, pm = floor_seconds(r.model, r.dtype, r.prompt, r.prompt, r.cache)
        dc, dm = floor_seconds(r.model, r.dtype, 1, r.cache, r.cache)
        pf, df = max(pc, pm), max(dc, dm)
        rows.append([
            r.model, r.mode, r.extra.get("placement", "auto"), r.dtype,
            f"{r.prefill.sim_seconds * 1e3:.2f}", f"{pf * 1e3:.2f}", f"{r.prefill.sim_seconds / pf:.2f}x",
            f"{r.decode.sim_seconds * 1e6:.0f}", f"{df * 1e6:.0f}", f"{r.decode.sim_seconds / df:.2f}x",
            f"{r.prefill.launches}/{r.decode.launches}",
            str(len(r.prefill.host_fallbacks) + len(r.decode.host_fallbacks)),
            str(r.tuning_simulated),
            f"{r.cold_compile_seconds:.1f}",
            f"{r.extra.get('warm_start', float('nan')):.1f}",
            f"{r.extra.get('relayout_bytes', 0) / 2**20:.0f}/{r.extra.get('relayout_seconds', 0) * 1e3:.2f}/"
            f"{r.extra.get('settle_steps', 0)}" + ("" if r.extra.get("settled", True) else "+"),
        ])
    header = ["model", "mode", "placement", "dtype", "prefill ms", "floor ms", "ratio", "decode us/tok", "floor us",
              "ratio", "kernels p/d", "host fb", "tune sims", "cold compile s", "warm start s",
              "re-laid out MiB/ms/steps"]
    return table(header, rows, right=set(range(4, len(header))))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--modes", default="default,reduce-overhead,max-autotune",
                   help="torch.compile modes (reduce-overhead: default's kernels replayed as launch graphs)")
    p.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--cache", type=int, default=1024)
    p.add_argument("--plot", default="", help="write the per-kernel breakdown plot (PNG) here")
    p.add_argument("--json", default="", help="write the raw results here")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--check-choice", action="store_true",
                   help="instead: simulate every legal tile of one layer's matmuls (first model) and compare with "
                        "the tiles max-autotune simulates")
    p.add_argument("--placement-pass", action="store_true",
                   help="run the model-level placement pass on a captured decode step before profiling (weights laid "
                        "out for decode once, as at load) instead of the default auto placement alone")
    p.add_argument("--weights", default="", help=argparse.SUPPRESS)  # the worker's checkpoint directory
    p.add_argument("--worker", nargs=5, metavar=("MODEL", "MODE", "DTYPE", "PROMPT", "CACHE"), help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="triton-nmp llm", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """The benchmark for parsed arguments (also `triton-nmp llm`)."""
    if args.worker:
        model, mode, dtype, prompt, cache = args.worker
        r = worker(model, mode, dtype, int(prompt), int(cache), args.placement_pass, args.weights)
        print(json.dumps(asdict(r)))
        return 0
    print(machine_line())
    if args.check_choice:
        model = args.models.split(",")[0]
        rows = choice_check(model, args.dtype, args.prompt)
        print(table(["matmul (MxKxN)", "legal tiles", "simulated by tuning", "best of all us", "tuned us",
                     "tuned/best", "default us", "default/best"],
                    [[f"{r['m']}x{r['k']}x{r['n']}", str(r["legal"]), str(r["simulated_by_tuning"]),
                      f"{r['best_ms'] * 1e3:.1f}", f"{r['tuned_ms'] * 1e3:.1f}", f"{r['tuned_ms'] / r['best_ms']:.3f}",
                      f"{r['default_ms'] * 1e3:.1f}", f"{r['default_ms'] / r['best_ms']:.3f}"] for r in rows],
                    right=set(range(1, 8))))
        return 0
    results = []
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            with tempfile.TemporaryDirectory(prefix="nmp-llm-") as tmp:
                cold = run_worker_process(args, model, mode, Path(tmp))
                warm = run_worker_process(args, model, mode, Path(tmp))
            cold.extra["warm_start"] = warm.start_to_logits_seconds
            cold.extra["warm_build"] = warm.build_seconds
            cold.extra["warm_tuning_simulated"] = warm.tuning_simulated
            results.append(cold)
            print(f"{model}/{mode}: done (warm process simulated {warm.tuning_simulated} launches to tune)",
                  flush=True)
    print(report(results))
    for r in results:
        print(f"{r.model}/{r.mode}: matmul candidates legal {r.gemm_legal}, offered {r.gemm_kept} "
              f"({r.gemm_kept_distinct} for distinct matmuls); "
              f"tuning simulated {r.tuning_simulated} launches in {r.tuning_benchmarks} benchmarks; "
              f"warm process: {r.extra['warm_tuning_simulated']}, weights loaded in {r.extra['warm_build']:.2f} s "
              f"(built in {r.build_seconds:.2f} s cold); "
              + (f"placement pass {r.extra['pass_seconds']:.1f} s, {r.extra['plan_migrations']} migrations; "
                 if "pass_seconds" in r.extra else "")
              + "host fallbacks "
              f"{sorted(set(r.prefill.host_fallbacks + r.decode.host_fallbacks)) or 'none'}")
    if args.plot:
        plot_breakdown(results, args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- is Inductor's matmul choice close to the best of its candidate set? ----------------------------------------


def layer_matmuls(model_name: str, tokens: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of the matmuls of one layer's linear projections."""
    from triton_nmp.llm import CONFIGS
    from triton_nmp.llm.models import GPT2Config

    cfg = CONFIGS[model_name]
    d = cfg.hidden
    if isinstance(cfg, GPT2Config):
        return [(tokens, d, 3 * d), (tokens, d, d), (tokens, d, 4 * d), (tokens, 4 * d, d)]
    kv = cfg.kv_heads * cfg.head_dim
    return [(tokens, d, d), (tokens, d, kv), (tokens, d, cfg.ffn), (tokens, cfg.ffn, d)]


def tile_timing_saver(timings: dict[tuple[int, int, int, int], float]):
    """An Inductor autotuning feedback saver that records each template choice's time by its tile
    (BLOCK_M, BLOCK_N, BLOCK_K, num_stages). Extra positional arguments (torch 2.13 adds precompile
    times as a sixth) are accepted and ignored, so they can never overwrite `timings`."""

    def saver(t, name, input_nodes, choices, profiled_time, *_more) -> None:
        for choice, ms in t.items():
            kw = getattr(choice, "log_info", {}) or {}
            try:
                bm, bk, bn = ast.literal_eval(kw["tile_shape"])  # Inductor logs (BLOCK_M, BLOCK_K, BLOCK_N)
                key = (int(bm), int(bn), int(bk), int(kw["num_stages"]))
            except (KeyError, TypeError, ValueError, SyntaxError):
                continue
            timings[key] = float(ms)

    return saver


def choice_check(model_name: str, dtype_name: str, tokens: int) -> list[dict]:
    """Simulate every legal tile of each of one layer's matmuls (EXHAUSTIVE), and compare the best of all with
    the best among the candidates max-autotune would simulate (`gemm.tuned`: the cost model's few best)."""
    import torch
    from torch._inductor import select_algorithm

    import triton_nmp
    from triton_nmp.inductor import gemm

    dtype = getattr(torch, dtype_name)
    spec = triton_nmp.active_target()
    rows = []
    for m, k, n in layer_matmuls(model_name, tokens):
        timings: dict[tuple[int, int, int, int], float] = {}
        saver = tile_timing_saver(timings)
        select_algorithm.add_feedback_saver(saver)
        try:
            a = torch.randn(m, k, dtype=dtype)
            b = torch.randn(k, n, dtype=dtype)
            torch._dynamo.reset()
            torch.compile(lambda x, y: x @ y, backend="nmp",
                          options={"max_autotune": True, "max_autotune_gemm_search_space": "EXHAUSTIVE",
                                   "fx_graph_cache": False, "autotune_local_cache": False})(a, b)
        finally:
            select_algorithm.clear_feedback_savers()
        size = dtype.itemsize
        legal = gemm.candidates(m, n, k, size, size, spec)
        scored = sorted((gemm.estimate(t, m, n, k, 1, size, size, DTYPES[dtype_name], spec), t) for t in legal)
        ranked = [t for _, t in scored]
        top = [ranked[i] for i in gemm.tuned(scored)]
        measured = {t: timings.get((t.block_m, t.block_n, t.block_k, t.num_stages)) for t in legal}
        if not any(v is not None for v in measured.values()):
            raise RuntimeError(
                f"--check-choice: Inductor reported no timing for any of the {len(legal)} legal tiles of the "
                f"{m}x{k}x{n} matmul ({len(timings)} timed choices; their log_info did not match our tiles): "
                "check that Inductor's choices log a 'tile_shape' (BLOCK_M, BLOCK_K, BLOCK_N)")
        best = min(v for v in measured.values() if v is not None)
        fastest = min(v for t in top if (v := measured[t]) is not None)
        pick = measured[ranked[0]]  # what Inductor keeps unless a simulated tile is clearly faster
        picked = fastest if pick is None or gemm.prefer_simulated(pick, fastest) else pick
        rows.append({"m": m, "k": k, "n": n, "legal": len(legal), "simulated_by_tuning": len(top),
                     "best_ms": best, "tuned_ms": picked, "default_ms": measured[ranked[0]]})
    return rows
