"""nmp's side of Triton's backend autotuning hooks (upstream_patches/triton/0001, 0002).

With the patches applied, Triton asks the active driver for these hooks, so every `@triton.autotune`
kernel on nmp gets legality pruning, the calibrated cost model and a placement-aware tuning key
without per-kernel arguments. On stock Triton nothing calls them, and users pass
`triton_nmp.prune_configs_by(...)` or use `triton_nmp.autotune(...)` instead.
"""

from __future__ import annotations

from typing import Any

DEFAULT_TOP_K = 0.1


class NMPAutotuneHooks:
    def prune_configs_by(self, kernel: Any) -> dict | None:
        """The `prune_configs_by` dict for a kernel that brings no pruning of its own."""
        from triton_nmp.tuning import prune_configs_by

        return prune_configs_by(top_k=DEFAULT_TOP_K)

    def tuning_key_extra(self, kernel: Any, named_args: dict) -> tuple:
        """Where each tensor argument lives: a config tuned for one placement is not reused for another."""
        from triton_nmp.placement import placement_signature

        tensors = [v for v in named_args.values() if hasattr(v, "data_ptr") and hasattr(v, "dtype")]
        return tuple(placement_signature(*tensors)) if tensors else ()


hooks = NMPAutotuneHooks()
