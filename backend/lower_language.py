"""TTIR -> nmpir lowering of the wider Triton language (atomics, scans, tensor descriptors, ...).

A mixin of `lower_nmpir.Lowering`: each `op_<dialect>_<name>` method lowers one TTIR op. Kept apart
from the core conversion so the core (access analysis, loops, DMA) stays small.
"""

from __future__ import annotations


class LanguageLowering:
    """Lowering rules for ops beyond the core set; methods are looked up by op name."""
