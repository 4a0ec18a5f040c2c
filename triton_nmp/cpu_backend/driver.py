"""The driver class Triton finds under the name "cpu" (see `triton_nmp.triton_name`).

`NMPCPUDriver` is the nmp driver; it claims to be active only when selected by name
(`TRITON_DEFAULT_BACKEND=cpu`), because the "nmp" entry's driver is already the active one by default and Triton
requires exactly one. Inductor activates it explicitly (`set_driver_to_cpu`). When another backend owns "cpu",
this module exposes that backend's driver class instead.
"""

import importlib as _importlib
import os as _os

from triton_nmp.triton_name import foreign_cpu_backend as _foreign_cpu_backend

_foreign = _foreign_cpu_backend()

if _foreign is not None:
    from triton.backends import DriverBase as _DriverBase
    from triton.backends import _find_concrete_subclasses

    _cls = _find_concrete_subclasses(_importlib.import_module(f"{_foreign.value}.driver"), _DriverBase)
    globals()[_cls.__name__] = _cls
    del _cls  # Triton looks for exactly one backend class in this module
else:
    from triton_nmp.driver import driver as _nmp_driver

    class NMPCPUDriver(_nmp_driver.NMPDriver):
        """The nmp driver, as Triton's "cpu" driver."""

        @staticmethod
        def is_active() -> bool:
            return _os.environ.get("TRITON_DEFAULT_BACKEND") == "cpu"
