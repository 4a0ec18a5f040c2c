"""Putting the Inductor integration in place, once per process (`install`; see the package docstring)."""

from __future__ import annotations

__all__ = ["install", "installed"]

_installed = False


def install() -> None:
    """Make Inductor's CPU + Triton path target nmp on nmp's terms (idempotent; see the modules)."""
    global _installed
    if _installed:
        return
    from triton_nmp.errors import NMPError
    from triton_nmp.triton_name import cpu_entry_registered, foreign_cpu_backend

    foreign = foreign_cpu_backend()
    if foreign is not None:
        raise NMPError(
            f"Triton's 'cpu' backend is '{foreign.value}' (installed by another package), so Inductor's CPU "
            f"kernels go there, not to nmp; uninstall it to compile PyTorch models for nmp")
    if not cpu_entry_registered():
        raise NMPError("triton-nmp's Triton entry point 'cpu' is not registered (an install older than this "
                       "source tree); reinstall triton-nmp (pip install -e .) to compile PyTorch models for nmp")
    from . import benchmarking, device, workarounds

    device.install()
    workarounds.install()
    benchmarking.install()
    from triton_nmp.source_keys import install_torch_key

    install_torch_key()  # torch's source hash from disk (Inductor's first cache lookup needs it)
    _installed = True


def installed() -> bool:
    return _installed
