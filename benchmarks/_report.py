"""The benchmark scripts' report helpers (they live in `triton_nmp.report`, so `triton-nmp llm` has them too)."""

from triton_nmp.report import machine_line, table

__all__ = ["machine_line", "table"]
