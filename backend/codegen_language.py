"""LLVM codegen for the nmpir ops of the wider Triton language (atomics, scans, asserts, ...).

A mixin of `codegen.KernelCodegen`: each `op_nmp_<name>` method emits one nmpir op.
"""

from __future__ import annotations


class LanguageCodegen:
    """Codegen rules for ops beyond the core set; methods are looked up by op name."""
