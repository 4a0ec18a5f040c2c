"""`NMPChoices`: Inductor's heuristics on nmp's terms (`torch._inductor.choices.InductorChoices`).

Installed with `config.inductor_choices_class` by the `nmp` backend; Inductor calls it while lowering and
generating code, in the parent process only (its decisions are baked into the generated source, which is what
compile workers see). `uuid()` is part of Inductor's FX graph cache key: it names the target and this
package's sources, so a graph compiled for one nmp target (or an older triton-nmp) is never served for another.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from torch._inductor.choices import InductorChoices

from triton_nmp.target import active_target

__all__ = ["NMPChoices", "sources_hash"]


@functools.cache
def sources_hash() -> str:
    """Hash of the integration's and the compiler's sources (a change re-keys Inductor's caches)."""
    from triton_nmp.backend.compiler import _source_hash

    h = hashlib.sha256(_source_hash().encode())
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


class NMPChoices(InductorChoices):
    """Inductor heuristics for nmp targets."""

    def uuid(self) -> str:
        return f"triton-nmp:{sources_hash()[:16]}:{active_target().hash()[:16]}"
