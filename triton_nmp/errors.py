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
        Exception.__init__(self, text)  # not super(): subclasses may also derive from Triton's errors


class NMPRuntimeError(NMPError, RuntimeError):
    """A launched kernel failed on the simulator."""


class NMPOutOfBoundsError(NMPRuntimeError):
    """A kernel touched memory outside the tensor an argument points to. Nothing was written outside."""


class NMPDeviceAssertError(NMPRuntimeError, AssertionError):
    """A `tl.device_assert` failed in a kernel."""


class NMPTimeoutError(NMPRuntimeError, TimeoutError):
    """The watchdog stopped a launch that ran past its host-time or simulated-cycle limit."""


class NMPLaunchError(NMPRuntimeError, TypeError):
    """Arguments passed to a kernel launch cannot be marshalled (wrong type, non-CPU tensor, ...)."""


class NMPTargetError(NMPError, ValueError):
    """A target description (preset or TOML file) is malformed."""


def _out_of_resources_base() -> type:
    try:
        from triton.runtime.errors import OutOfResources

        return OutOfResources
    except ImportError:  # pragma: no cover - triton is a dependency
        return Exception


class NMPScratchpadOverflowError(NMPCompilationError, _out_of_resources_base()):
    """A kernel's tiles do not fit the scratchpad. Also a Triton `OutOfResources`, so Triton's own
    autotuner skips such a config (as it does on GPUs) instead of failing the whole tuning run."""

    def __init__(self, message: str, *, required: int, limit: int, kernel: str = ""):
        NMPCompilationError.__init__(self, message, kernel=kernel)
        self.required = required
        self.limit = limit
        self.name = "scratchpad"
        self._text = Exception.__str__(self)

    def __str__(self) -> str:
        return self._text

    def __reduce__(self):
        return (_rebuild_overflow, (self._text, self.required, self.limit))


def _rebuild_overflow(text: str, required: int, limit: int) -> NMPScratchpadOverflowError:
    err = NMPScratchpadOverflowError.__new__(NMPScratchpadOverflowError)
    Exception.__init__(err, text)
    err.kernel = err.loc = err.op = err.hint = ""
    err.required, err.limit, err.name, err._text = required, limit, "scratchpad", text
    return err


class NMPSpillWarning(UserWarning):
    """A kernel's tiles did not fit the scratchpad, so some live in a spill area in the PU's own bank and
    move by DMA (charged by the timing model). Emitted once per compiled kernel; smaller BLOCK_* sizes
    avoid the traffic."""
