"""Kernel/shape cases with config spaces, shared by `triton-nmp calibrate` and benchmarks/tuning.py.

Each case is an LLM-shaped launch (GEMV/GEMM at d=768 and d=4096, softmax over a vocabulary-sized
row, layer norm, attention) with a space of configs over tile sizes, multi-buffering depth and the
program-to-PU mapping. `simulate()` measures a config on the simulator: it compiles the config, runs
its timing-only variant when the kernel has one (same trace as a full run, see
`backend.timing_only`), else the full kernel, and charges the trace with the timing model. The
mapping only changes timing, so one run serves every mapping of the same compiled code.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

from triton_nmp import examples as ex
from triton_nmp.target import TargetSpec, active_target

MAPPINGS = ("round_robin", "locality")


@triton.jit
def softmax_rows_kernel(out_ptr, in_ptr, stride, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Two-pass softmax over rows of any length: ROWS rows per program, columns in BLOCK chunks."""
    for r in range(ROWS):
        row = tl.program_id(0) * ROWS + r
        if row < n_rows:
            m = tl.full([BLOCK], -float("inf"), tl.float32)
            s = tl.zeros([BLOCK], tl.float32)
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
                m_new = tl.maximum(m, x)
                s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
                m = m_new
            row_max = tl.max(m, axis=0)
            denom = tl.sum(s * tl.exp(m - row_max), axis=0)
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(in_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
                y = tl.exp(x - row_max) / denom
                tl.store(out_ptr + row * stride + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@dataclass
class TuningCase:
    name: str
    kernel: Any
    make_args: Callable[[], dict[str, Any]]
    grid: Callable[[dict[str, Any]], tuple[int, ...]]
    space: list[triton.Config]
    default: triton.Config
    note: str = ""
    _args: dict[str, Any] | None = field(default=None, repr=False)

    def args(self) -> dict[str, Any]:
        if self._args is None:
            self._args = self.make_args()
        return self._args


def _cfg(mapping: str = "round_robin", num_stages: int = 2, **kw: int) -> triton.Config:
    return triton.Config(dict(kw, pu_mapping=mapping), num_stages=num_stages)


def _space(axes: dict[str, tuple], stages: tuple[int, ...], keep: Callable[[dict], bool] = lambda d: True):
    out = []
    names = list(axes)
    for values in itertools.product(*(axes[n] for n in names)):
        d = dict(zip(names, values))
        if not keep(d):
            continue
        for s in stages:
            for m in MAPPINGS:
                out.append(_cfg(m, s, **d))
    return out


def _matmul_case(name: str, M: int, N: int, K: int, axes: dict[str, tuple], stages=(1, 2, 3)) -> TuningCase:
    def make():
        g = torch.Generator().manual_seed(0)
        a = torch.randn(M, K, generator=g).half()
        b = torch.randn(K, N, generator=g).half()
        c = torch.empty(M, N, dtype=torch.float16)
        return dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=a.stride(0), stride_ak=a.stride(1),
                    stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0), stride_cn=c.stride(1),
                    GROUP_M=8)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    return TuningCase(name, ex.matmul_kernel, make, grid, _space(axes, stages),
                      _cfg(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32), f"{M}x{K} @ {K}x{N} fp16")


def _softmax_case(rows: int, cols: int) -> TuningCase:
    def make():
        x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(0))
        return dict(out_ptr=torch.empty_like(x), in_ptr=x, stride=x.stride(0), n_rows=rows, n_cols=cols)

    def grid(meta):
        return (triton.cdiv(rows, meta["ROWS"]),)

    axes = {"ROWS": (1, 2, 4, 8), "BLOCK": (256, 512, 1024, 2048, 4096)}
    return TuningCase("softmax", softmax_rows_kernel, make, grid, _space(axes, (1, 2, 3)),
                      _cfg(ROWS=1, BLOCK=1024), f"{rows}x{cols} fp32")


def _layernorm_case(rows: int, cols: int) -> TuningCase:
    def make():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, cols, generator=g)
        return dict(x_ptr=x, y_ptr=torch.empty_like(x), w_ptr=torch.randn(cols, generator=g),
                    b_ptr=torch.randn(cols, generator=g), mean_ptr=torch.empty(rows), rstd_ptr=torch.empty(rows),
                    x_row_stride=cols, y_row_stride=cols, n_cols=cols, eps=1e-5)

    def grid(meta):
        return (rows,)

    axes = {"BLOCK": (64, 128, 256, 512, 1024, 2048, 4096)}
    space = _space(axes, (1, 2, 3)) + [_cfg("blocked", s, BLOCK=b) for b in axes["BLOCK"] for s in (1, 2, 3)]
    return TuningCase("layernorm", ex.layernorm_fwd_kernel, make, grid, space, _cfg(BLOCK=128),
                      f"{rows}x{cols} fp32")


def _attention_case(name: str, bh: int, seq: int, d: int, causal: bool) -> TuningCase:
    def make():
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(bh, seq, d, generator=g).half() for _ in range(3))
        o = torch.empty_like(q)
        return dict(q_ptr=q, k_ptr=k, v_ptr=v, o_ptr=o, sm_scale=1.0 / math.sqrt(d), seq_len=seq,
                    stride_qb=q.stride(0), stride_qs=q.stride(1), stride_qd=q.stride(2),
                    stride_kb=k.stride(0), stride_ks=k.stride(1), stride_kd=k.stride(2),
                    stride_vb=v.stride(0), stride_vs=v.stride(1), stride_vd=v.stride(2),
                    stride_ob=o.stride(0), stride_os=o.stride(1), stride_od=o.stride(2), HEAD_DIM=d, CAUSAL=causal)

    def grid(meta):
        return (triton.cdiv(seq, meta["BLOCK_M"]), bh)

    axes = {"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (16, 32, 64, 128)}
    return TuningCase(name, ex.attention_fwd_kernel, make, grid, _space(axes, (1, 2)),
                      _cfg(BLOCK_M=32, BLOCK_N=16), f"bh={bh} seq={seq} d={d} fp16" + (" causal" if causal else ""))


def cases(quick: bool = False) -> list[TuningCase]:
    """The suite: 8 cases. `quick` shrinks shapes (same spaces) for a fast smoke run."""
    s = 4 if quick else 1
    mm_small = {"BLOCK_M": (1, 16), "BLOCK_N": (32, 64, 128, 256), "BLOCK_K": (64, 128, 256)}
    mm_big = {"BLOCK_M": (32, 64, 128), "BLOCK_N": (32, 64, 128), "BLOCK_K": (32, 64)}
    return [
        _matmul_case("gemv-768", 1, 768, 768, mm_small, (1, 2)),
        _matmul_case("gemm-768", 256 // s, 768, 768, mm_big),
        _matmul_case("gemv-4096", 1, 4096 // s, 4096 // s, mm_small, (1, 2)),
        _matmul_case("gemm-4096", 128 // s, 4096 // s, 4096 // s, mm_big),
        _softmax_case(1024 // s, 8192 // s),
        _layernorm_case(512 // s, 4096 // s),
        _attention_case("attention", 8 // s, 512 // s, 64, False),
        _attention_case("attention-causal", 8 // s, 512 // s, 64, True),
    ]


# -- measurement on the simulator ------------------------------------------------------------------


@dataclass
class Measured:
    seconds: dict[str, float]  # per mapping
    timing_only: bool


_RUNS: dict[tuple, Measured] = {}


def simulate(case: TuningCase, config: triton.Config, spec: TargetSpec | None = None) -> float:
    """Simulated seconds of `config` on `case` (runs the kernel once per compiled variant)."""
    from triton_nmp.simulator import loader, runtime
    from triton_nmp.simulator.timing import arg_buffers_from_slots, simulate_timing

    spec = spec or active_target()
    kw = dict(config.kwargs)
    mapping = kw.pop("pu_mapping", "round_robin")
    from triton_nmp.placement import placement_signature

    args = case.args()
    tensors = [v for v in args.values() if hasattr(v, "data_ptr")]
    key = (case.name, tuple(sorted(kw.items())), config.num_stages, spec.hash(), placement_signature(*tensors))
    if key not in _RUNS:
        meta = {**args, **kw}
        grid = case.grid(meta)
        k = case.kernel.warmup(**args, **kw, num_stages=config.num_stages, grid=grid, timing_variant=True)
        launcher = k.run
        vals = launcher.marshal([meta[n] for n in case.kernel.arg_names])
        entry = k.metadata.nmp_timing_entry or k.metadata.nmp_entry
        obj = loader.load_object(k.asm["nmpbin"], k.metadata.name)
        fn = runtime.entry_function(obj.address(entry))
        g3 = tuple(list(grid) + [1] * (3 - len(grid)))
        result = runtime.run_grid(fn, runtime.make_slots(vals), g3, runtime.KernelABI.from_metadata(k.metadata))
        buffers = arg_buffers_from_slots(k.metadata, vals)
        secs = {m: simulate_timing(result.trace, g3, buffers, spec, mapping=m, kernel=k.metadata.name).seconds
                for m in ("round_robin", "blocked", "locality")}
        obj.close()
        _RUNS[key] = Measured(secs, bool(k.metadata.nmp_timing_entry))
    return _RUNS[key].seconds[mapping]


@triton.jit
def ragged_row_sum_kernel(x_ptr, lengths_ptr, out_ptr, stride, BLOCK: tl.constexpr):
    """Row sums over ragged rows: the loop bound is loaded, so the trace depends on data."""
    row = tl.program_id(0)
    n = tl.load(lengths_ptr + row)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def ragged_case(rows: int = 256, cols: int = 2048) -> TuningCase:
    """A data-dependent kernel: calibrates the cost model's fallback path."""

    def make():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(rows, cols, generator=g)
        lengths = torch.randint(cols // 4, cols, (rows,), generator=g, dtype=torch.int32)
        return dict(x_ptr=x, lengths_ptr=lengths, out_ptr=torch.empty(rows), stride=cols)

    def grid(meta):
        return (rows,)

    axes = {"BLOCK": (64, 128, 256, 512, 1024, 2048)}
    return TuningCase("ragged-row-sum", ragged_row_sum_kernel, make, grid, _space(axes, (1, 2)),
                      _cfg(BLOCK=128), f"{rows} ragged rows of <= {cols} fp32")


@dataclass
class CalibrationReport:
    calibration: Any
    points: list
    seconds: float

    def table(self) -> str:
        c = self.calibration
        lines = [f"cost-model calibration for target {c.target} ({len(self.points)} simulated configs, "
                 f"{self.seconds:.1f} s)",
                 f"  {'path':<9} {'samples':>7} {'a':>8} {'b':>7} {'R^2':>7} {'tau':>7} {'median |err|':>13}"]
        for name, f in (("exact", c.exact), ("fallback", c.fallback)):
            lines.append(f"  {name:<9} {f.samples:>7} {f.a:>8.4f} {f.b:>7.4f} {f.r2:>7.4f} {f.kendall_tau:>7.4f} "
                         f"{100 * f.median_abs_error:>12.2f}%")
        return "\n".join(lines)


def run_calibration(per_case: int = 10, quick: bool = True, spec: TargetSpec | None = None,
                    save: bool = True) -> CalibrationReport:
    """Simulate `per_case` configs of every suite case (evenly spread over its legal space), fit, store."""
    import time

    from triton_nmp.costmodel import CalibrationPoint, CostModel, calibrate
    from triton_nmp.legality import check_config

    spec = spec or active_target()
    t0 = time.perf_counter()
    model = CostModel(spec)
    points = []
    for case in cases(quick) + [ragged_case()]:
        args = case.args()
        legal = [c for c in case.space if check_config(case.kernel, args, c, spec).legal]
        step = max(1, len(legal) // per_case)
        for config in legal[::step][:per_case]:
            p = model.predict_raw(case.kernel, args, config, case.grid)
            s = simulate(case, config, spec)
            points.append(CalibrationPoint(case.name, str(config), p.raw_seconds, s, p.exact))
    cal = calibrate(points, spec, save=save)
    return CalibrationReport(cal, points, time.perf_counter() - t0)
