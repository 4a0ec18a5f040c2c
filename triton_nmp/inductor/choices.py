"""`NMPChoices`: Inductor's heuristics on nmp's terms (`torch._inductor.choices.InductorChoices`).

Installed with `config.inductor_choices_class` by the `nmp` backend; Inductor calls it while lowering and
generating code, in the parent process (its decisions are baked into the generated source, which is what
compile workers see).

* `uuid()` is part of Inductor's FX graph cache key: it names the target and this package's sources, so a
  graph compiled for one nmp target (or an older triton-nmp) is never served for another.
* Matmul templates (mm/addmm/bmm/baddbmm): the candidate tiles come from `gemm.candidates` (sized for the
  target's scratchpad and PUs, not triton-cpu's list), are ranked by `gemm.estimate`, and only the best one
  (default mode) or the few `gemm.tuned` picks of the ranking (max-autotune, which then simulates them) become
  Inductor choices; `max_autotune_gemm_search_space="EXHAUSTIVE"` keeps them all (every legal tile simulated).
  A one-row `mm`/`addmm` (a decode step's GEMV) is also offered our one-row template (`gemv.gemv_template`, tiles
  from `gemm.gemv_candidates`, modelled by `gemm.estimate_gemv`), ranked with the mm template's tiles; it takes
  the mm template's per-op arguments (addmm's bias epilogue, prefix arguments, accumulator type).
  After simulating, the fastest tile replaces the model's pick only beyond `gemm.SIMULATED_MARGIN`
  (`override_best_choice`). Every decision is logged in `gemm_selections()` (with the template of each kept
  choice). `pinned_tile(tile)` makes every matmul compiled inside it use that tile (an mm template `gemm.Tile` or
  a one-row `gemm.GemvTile`, when legal for its shape), e.g. to simulate each candidate of one matmul and check the
  model's pick.
* Reductions: the split factor and the block sizes of outer and persistent inner reductions come from
  `reductions` (sized for the PUs and the banks' DMA, not a GPU's threads).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from triton_nmp.source_hash import files_hash
from triton_nmp.target import active_target

from . import gemm

__all__ = ["NMPChoices", "sources_hash", "GemmSelection", "gemm_selections", "pinned_tile"]

_GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")
_MODEL_PICK = "nmp_model_pick"  # annotation of the matmul choice the cost model ranked first


@functools.cache
def sources_hash() -> str:
    """Hash of the integration's and the compiler's sources (a change re-keys Inductor's caches)."""
    from triton_nmp.backend.compiler import _source_hash

    return files_hash(_source_hash(), Path(__file__).parent)


@dataclass
class GemmSelection:
    """One matmul's template choice: its shape, the legal candidates, those kept for Inductor."""

    op: str
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    legal: int
    kept: list[dict[str, int]] = field(default_factory=list)
    estimates_us: list[float] = field(default_factory=list)
    kept_templates: list[str] = field(default_factory=list)  # "mm" (Inductor's) or "nmp_gemv" (`gemv`), per kept


_SELECTIONS: list[GemmSelection] = []


def gemm_selections() -> list[GemmSelection]:
    return list(_SELECTIONS)


def record_selection(op: str, m: int, n: int, k: int, batch: int, dtype: str, legal: int,
                     kept: list[tuple[float, gemm.Tile | gemm.GemvTile]], gemv_name: str = "nmp_gemv") -> None:
    """Log one matmul's choice (`kept`: (modelled seconds, tile) of each choice kept; a one-row tile is of the
    template `gemv_name`) in `gemm_selections()`."""
    _SELECTIONS.append(GemmSelection(
        op, m, n, k, batch, dtype, legal, [_tile_kwargs(t) for _, t in kept], [s * 1e6 for s, _ in kept],
        [gemv_name if isinstance(t, gemm.GemvTile) else "mm" for _, t in kept]))


_PINNED: list[gemm.Tile | gemm.GemvTile] = []


@contextlib.contextmanager
def pinned_tile(tile: gemm.Tile | gemm.GemvTile) -> Iterator[None]:
    """Matmuls compiled inside the context use `tile` (an mm template tile, or a one-row template tile) where it
    is one of their legal candidates (the others keep the model's pick). Part of Inductor's cache key
    (`NMPChoices.uuid`)."""
    _PINNED.append(tile)
    try:
        yield
    finally:
        _PINNED.pop()


def with_pin(scored: list[tuple], kept: list[tuple]) -> list[tuple]:
    """`kept`, or the entry of `scored` (tuples whose second item is the tile) holding the innermost
    `pinned_tile` when there is one."""
    return ([e for e in scored if e[1] == _PINNED[-1]] or kept) if _PINNED else kept


def _hint(x: Any) -> int:
    from torch._inductor.virtualized import V

    return int(V.graph.sizevars.optimization_hint(x, fallback=64))


def _column_major(node: Any) -> bool:
    """Whether a matmul operand's last two dimensions are column-major (`w.T` of a weight stored [N, K])."""
    try:
        stride = [_hint(x) for x in node.get_stride()]
        size = [_hint(x) for x in node.get_size()]
    except (AttributeError, NotImplementedError, TypeError):
        return False
    return len(stride) >= 2 and stride[-2] == 1 and size[-2] > 1 and stride[-1] != 1


_DTYPE_NAMES = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.int8": "int8"}


def _nmp_gemm_heuristic(base: type) -> type:
    """`base` (Inductor's CPU heuristic class for a matmul template) with nmp's tile candidates."""

    class NMPGemmHeuristic(base):  # type: ignore[misc, valid-type]
        def preprocess_mm_configs(self, m: Any, n: Any, k: Any, configs: Any, has_int8_tensor: bool = False,
                                  scale: float = 1.0, exclude: Any = None, dtype_size: int = 0,
                                  op_name: str = "mm", **kwargs: Any):
            size = dtype_size or 4
            for t in gemm.candidates(_hint(m), _hint(n), _hint(k), size, size, active_target()):
                yield self.triton_config(num_stages=t.num_stages, num_warps=4, BLOCK_M=t.block_m,
                                         BLOCK_N=t.block_n, BLOCK_K=t.block_k, GROUP_M=t.group_m)

    NMPGemmHeuristic.__name__ = NMPGemmHeuristic.__qualname__ = f"NMP{base.__name__}"
    return NMPGemmHeuristic


@functools.cache
def _gemm_heuristic(template_uid: str, op_name: str) -> Any:
    from torch._inductor.template_heuristics.registry import get_registered_heuristic_class

    base = get_registered_heuristic_class(template_uid, "cpu", op_name)
    return None if base is None else _nmp_gemm_heuristic(base)()


def _gemm_templates() -> tuple[str, ...]:
    from torch._inductor.kernel.bmm import bmm_template
    from torch._inductor.kernel.mm import mm_template

    return (mm_template.uid, bmm_template.uid)


def _tile_kwargs(t: gemm.Tile | gemm.GemvTile) -> dict[str, int]:
    if isinstance(t, gemm.GemvTile):
        return dict(BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_stages=t.num_stages, SHARE=t.share)
    return dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k, num_stages=t.num_stages)


class NMPChoices(InductorChoices):
    """Inductor heuristics for nmp targets."""

    def uuid(self) -> str:
        from triton_nmp.placement import default_policy

        from .reductions import split_enabled

        pin = f":pin{_PINNED[-1]}" if _PINNED else ""
        split = ":rsplit" if split_enabled() else ""
        return f"triton-nmp:{sources_hash()[:16]}:{active_target().hash()[:16]}:{default_policy()}{pin}{split}"

    def get_template_configs(self, kernel_inputs: Any, templates: list, op_name: str,
                             kwarg_overrides: Any = None) -> list:
        """Inductor's templates plus, for a one-row mm/addmm that may use the mm template, the one-row template
        (`gemv.gemv_template`); `_select_gemm` ranks them together."""
        from torch._inductor.kernel.mm import mm_template

        from .gemv import applies, gemv_template

        if (kernel_inputs.device_type == "cpu" and any(t is mm_template for t in templates)
                and applies(op_name, kernel_inputs)):
            templates = [*templates, gemv_template]
        return super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)

    def get_ktc(self, kernel_inputs: Any, template: Any, op_name: str, kwarg_overrides: Any = None):
        from .gemv import gemv_template

        if template is gemv_template:
            return self._gemv_ktcs(kernel_inputs, op_name, kwarg_overrides)
        if kernel_inputs.device_type == "cpu" and op_name in _GEMM_OPS and template.uid in _gemm_templates():
            heuristic = _gemm_heuristic(template.uid, op_name)
            if heuristic is not None:
                from torch._inductor.kernel_template_choice import make_ktc_generator

                return make_ktc_generator(
                    template=template,
                    cs=heuristic.get_template_configs(kernel_inputs, op_name),
                    extra_kwargs=heuristic.get_extra_kwargs(kernel_inputs, op_name),
                    overrides=kwarg_overrides or {},
                    layout=kernel_inputs.output_layout(),
                    inputs=heuristic.adjust_kernel_inputs(kernel_inputs, op_name),
                )
        return super().get_ktc(kernel_inputs, template, op_name, kwarg_overrides)

    def _gemv_ktcs(self, kernel_inputs: Any, op_name: str, kwarg_overrides: Any = None) -> Iterator[Any]:
        """The one-row template's choices: the mm template's per-op arguments (epilogue, prefix arguments,
        accumulator type) with `gemm.gemv_candidates` tiles."""
        import sympy
        from torch._inductor.kernel.mm import mm_template
        from torch._inductor.kernel_template_choice import make_ktc_generator
        from torch._inductor.template_heuristics.params import DictKernelTemplateParams

        from .gemv import gemv_template

        heuristic = _gemm_heuristic(mm_template.uid, op_name)
        base = next(iter(heuristic.get_template_configs(kernel_inputs, op_name)), None)
        if base is None:
            return iter(())
        common = {key: v for key, v in base.to_kwargs().items()
                  if key not in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K", "num_stages")}
        _, n, k = kernel_inputs.mnk_hinted()
        k_sym = kernel_inputs.mnk_symbolic()[2]
        size = kernel_inputs.dtype().itemsize
        tiles = gemm.gemv_candidates(n, k, size, size, active_target())
        b_columns = _column_major(kernel_inputs.nodes()[-1])
        params = (DictKernelTemplateParams({
            **common, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k, "SHARE": t.share, "num_stages": t.num_stages,
            "B_COLUMNS": b_columns,
            "EVEN_K": V.graph.sizevars.statically_known_true(sympy.Eq(sympy.Mod(k_sym, t.block_k), 0))})
            for t in tiles)
        return make_ktc_generator(template=gemv_template, cs=params,
                                  extra_kwargs=heuristic.get_extra_kwargs(kernel_inputs, op_name),
                                  overrides=kwarg_overrides or {}, layout=kernel_inputs.output_layout(),
                                  inputs=heuristic.adjust_kernel_inputs(kernel_inputs, op_name))

    def _finalize_template_configs(self, template_choices: dict, kernel_inputs: Any, templates: list,
                                   op_name: str, kwarg_overrides: Any = None) -> list:
        choices = super()._finalize_template_configs(template_choices, kernel_inputs, templates, op_name,
                                                     kwarg_overrides)
        if op_name not in _GEMM_OPS or kernel_inputs.device_type != "cpu":
            return choices
        from .gemv import gemv_template

        mine = (*_gemm_templates(), gemv_template.uid)
        ours = [c for c in choices if c.template.uid in mine]
        if not ours:
            return choices
        others = [c for c in choices if c.template.uid not in mine]
        return self._select_gemm(ours, kernel_inputs, op_name) + others

    def _select_gemm(self, ktcs: list, kernel_inputs: Any, op_name: str) -> list:
        spec = active_target()
        m, n, k = kernel_inputs.mnk_hinted()
        batch = kernel_inputs.batch_hinted()
        dtype = kernel_inputs.dtype()
        size = dtype.itemsize
        dname = _DTYPE_NAMES.get(str(dtype), "fp32")

        from triton_nmp.placement import default_policy

        from .gemv import gemv_template

        b_columns = _column_major(kernel_inputs.nodes()[-1])
        auto = default_policy() == "auto"

        def scored_choice(i: int, ktc: Any) -> tuple[float, gemm.Tile | gemm.GemvTile, int]:
            kw = ktc.params.to_kwargs()
            if ktc.template.uid == gemv_template.uid:
                g = gemm.GemvTile(kw["BLOCK_N"], kw["BLOCK_K"], kw["num_stages"], kw["SHARE"])
                return gemm.estimate_gemv(g, n, k, size, size, dname, spec, auto), g, i
            t = gemm.Tile(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], kw["num_stages"], kw.get("GROUP_M", 8))
            return gemm.estimate(t, m, n, k, batch, size, size, dname, spec, b_columns, auto), t, i

        # ties: the mm template first (the one-row template must be faster to win), then smaller tiles
        scored = sorted((scored_choice(i, c) for i, c in enumerate(ktcs)),
                        key=lambda e: (e[0], isinstance(e[1], gemm.GemvTile), astuple(e[1])))
        if inductor_config.max_autotune_gemm_search_space == "EXHAUSTIVE":
            kept = scored  # simulate every legal candidate (to check the model's choice)
        elif inductor_config.max_autotune:
            kept = [scored[j] for j in gemm.tuned([(s, t) for s, t, _ in scored])]
        else:
            kept = scored[:1]
        kept = with_pin(scored, kept)
        ktcs[kept[0][2]].annotations[_MODEL_PICK] = True  # see `override_best_choice`
        record_selection(op_name, m, n, k, batch, dname, len(scored), [(s, t) for s, t, _ in kept])
        return [ktcs[i] for _, _, i in kept]

    def override_best_choice(self, best_choice: Any, timings: dict) -> Any:
        """Of a matmul's simulated tiles, the fastest replaces the model's pick only when it is faster by more than
        `gemm.SIMULATED_MARGIN` (`gemm.prefer_simulated`: each was simulated alone, before fusion)."""
        pick = next((c for c in timings if getattr(c, "annotations", {}).get(_MODEL_PICK)), None)
        if pick is None or pick is best_choice or best_choice not in timings:
            return best_choice
        return best_choice if gemm.prefer_simulated(timings[pick], timings[best_choice]) else pick

    @staticmethod
    def reduction_split_factor(device: Any, reduction_numel_hint: int, numel_hint: int, inner_reduction: bool) -> int:
        """How far to split a reduction with few outputs: `reductions.split_factor` when enabled
        (`reductions.split_enabled`), else Inductor's (sized for a GPU)."""
        from .reductions import split_enabled, split_factor

        if getattr(device, "type", device) != "cpu" or not split_enabled():
            return InductorChoices.reduction_split_factor(device, reduction_numel_hint, numel_hint, inner_reduction)
        return split_factor(active_target(), reduction_numel_hint, numel_hint, inner_reduction).split

    def triton_kernel_kwargs(self, kernel_cls: Any, features: Any, groups: list, kernel_kwargs: dict) -> dict:
        """Persistent inner reductions (and, when enabled, outer ones) get their block sizes fixed at compile time
        (`reductions.inner_block_config`, `reductions.outer_block_config`)."""
        from torch._inductor.codegen.triton import FixedTritonConfig
        from torch._inductor.runtime.hints import ReductionHint

        from .reductions import inner_block_config, outer_block_config, split_enabled

        if (kernel_kwargs.get("fixed_config") is not None or not features.is_reduction()
                or features.contains_op("scan")):
            return kernel_kwargs
        hint = features.get_reduction_hint()
        if hint not in (ReductionHint.OUTER, ReductionHint.INNER):
            return kernel_kwargs
        try:
            numel = int(V.graph.sizevars.optimization_hint(features.numel))
            rnumel = int(V.graph.sizevars.optimization_hint(features.reduction_numel))
        except (TypeError, ValueError):
            return kernel_kwargs
        persistent = kernel_kwargs.get("override_persistent_reduction")
        if persistent is None:
            persistent = self.should_use_persistent_reduction(features, False)
        pus = active_target().num_pus
        if hint == ReductionHint.OUTER and split_enabled():
            config = outer_block_config(pus, numel, rnumel, persistent)
        elif hint == ReductionHint.INNER and persistent:
            config = inner_block_config(pus, numel, rnumel)
            if config["XBLOCK"] == 1:  # one row per program (a decode step's layer norm): Inductor's own config
                return kernel_kwargs
        else:
            return kernel_kwargs
        return {**kernel_kwargs, "fixed_config": FixedTritonConfig(config)}
