"""Exceptions raised by triton-nmp.

Every error a user can provoke (bad kernel, bad argument, bad target file) is one of these, with a
message that says what went wrong, where (kernel, argument, Python line) and what to do about it.
"""

from __future__ import annotations


class NMPError(Exception):
    """Base class of every triton-nmp error."""


class NMPCompilationError(NMPError):
    """A kernel cannot be compiled for nmp (unsupported op, unanalysable pattern, too big)."""

    def __init__(self, message: str, *, kernel: str = "", loc: str = "", op: str = "", hint: str = ""):
        self.kernel = kernel
        self.loc = loc
        self.op = op
        self.hint = hint
        parts = []
        if kernel:
            parts.append(f"kernel '{kernel}'")
        if loc:
            parts.append(f"at {loc}")
        head = (" ".join(parts) + ": ") if parts else ""
        text = head + message
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class NMPRuntimeError(NMPError, RuntimeError):
    """A launched kernel failed on the simulator."""


class NMPOutOfBoundsError(NMPRuntimeError):
    """A kernel touched memory outside the tensor an argument points to. Nothing was written outside."""


class NMPDeviceAssertError(NMPRuntimeError, AssertionError):
    """A `tl.device_assert` failed in a kernel."""


class NMPLaunchError(NMPRuntimeError, TypeError):
    """Arguments passed to a kernel launch cannot be marshalled (wrong type, non-CPU tensor, ...)."""


class NMPTargetError(NMPError, ValueError):
    """A target description (preset or TOML file) is malformed."""
