"""Which name nmp goes by in Triton: `"cpu"`, unless another installed Triton backend claims it.

Why `"cpu"`. nmp kernels take torch *CPU* tensors, and two kinds of code turn Triton's backend name into
a torch device:

* PyTorch itself: Inductor's CPU path compiles for `GPUTarget("cpu", ...)`, `torch.utils._triton.has_triton()`
  is true on CPU only when `triton.backends.backends` has a `"cpu"` entry (otherwise a user's `@triton.jit`
  kernel inside `torch.compile` graph-breaks), and generated modules activate `backends["cpu"].driver`;
* Triton kernel libraries: `getattr(torch, backend)`, `torch.amp.custom_fwd(device_type=backend)`,
  `torch.device(backend)` with `backend = driver.active.get_current_target().backend`.

A name torch does not know (`"nmp"`) fails all of these, and making it a torch device (PrivateUse1) would move
the tensors off the CPU, which the simulator reads directly. So nmp registers a second Triton entry point,
`cpu = triton_nmp.cpu_backend`, and the active nmp driver reports `GPUTarget("cpu", "<target>:<hash>", 1)`.
The `"nmp"` entry point stays (explicit `GPUTarget("nmp", ...)`, `TRITON_DEFAULT_BACKEND=nmp`).

What a second name could break, and how it is avoided:

* Triton-CPU (or any backend) installed alongside also registers `"cpu"`. Triton keeps one backend per name
  and which entry wins depends on discovery order, so nmp never competes: when another distribution provides
  a `"cpu"` backend, `triton_nmp.cpu_backend` re-exports *that* backend's classes (whichever entry Triton reads
  last, `"cpu"` is the other backend) and nmp reports `"nmp"` again. Inductor's CPU path then uses the other
  backend; `torch.compile(backend="nmp")` refuses with a message saying so.
* Triton requires exactly one active driver and exactly one compiler per target: the `"cpu"` entry's driver
  is active only when selected with `TRITON_DEFAULT_BACKEND=cpu` (the `"nmp"` entry's driver is the default
  one), and each entry's compiler accepts only its own name.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

__all__ = ["CPU_ENTRY", "triton_name", "foreign_cpu_backend", "cpu_entry_registered", "owns_cpu_name",
           "foreign_backend_class"]

CPU_ENTRY = "triton_nmp.cpu_backend"  # our `triton.backends` entry point value for the name "cpu"


@functools.cache
def _cpu_entries() -> tuple[EntryPoint, ...]:
    return tuple(ep for ep in entry_points(group="triton.backends") if ep.name == "cpu")


def foreign_cpu_backend() -> EntryPoint | None:
    """The `triton.backends` entry point named "cpu" that is not ours (Triton-CPU), if one is installed."""
    return next((ep for ep in _cpu_entries() if ep.value != CPU_ENTRY), None)


def cpu_entry_registered() -> bool:
    """Our "cpu" entry point is installed (an install older than it has only "nmp": reinstall to get it)."""
    return any(ep.value == CPU_ENTRY for ep in _cpu_entries())


def foreign_backend_class(module: str, base: type) -> type | None:
    """The other "cpu" backend's class in its `compiler` or `driver` module (Triton's lookup), or None."""
    ep = foreign_cpu_backend()
    if ep is None:
        return None
    import importlib

    from triton.backends import _find_concrete_subclasses

    return _find_concrete_subclasses(importlib.import_module(f"{ep.value}.{module}"), base)


def owns_cpu_name() -> bool:
    """True when nmp is Triton's "cpu" backend in this environment."""
    return cpu_entry_registered() and foreign_cpu_backend() is None


def triton_name() -> str:
    """The backend name the nmp driver reports in its `GPUTarget`."""
    return "cpu" if owns_cpu_name() else "nmp"
