"""The driver class Triton finds under the name "cpu" (see `triton_nmp.triton_name`).

`NMPCPUDriver` is the nmp driver; it claims to be active only when selected by name
(`TRITON_DEFAULT_BACKEND=cpu`), because the "nmp" entry's driver is already the active one by default and Triton
requires exactly one. Inductor activates it explicitly (`set_driver_to_cpu`). When another backend owns "cpu",
this module exposes that backend's driver class instead.
"""

import os as _os

from triton.backends.driver import DriverBase as _DriverBase

from triton_nmp.triton_name import foreign_backend_class as _foreign_backend_class

_cls = _foreign_backend_class("driver", _DriverBase)
if _cls is not None:
    globals()[_cls.__name__] = _cls  # another package owns "cpu": Triton finds its driver here
else:
    from triton_nmp.driver import driver as _nmp_driver

    class NMPCPUDriver(_nmp_driver.NMPDriver):
        """The nmp driver, as Triton's "cpu" driver."""

        @staticmethod
        def is_active() -> bool:
            return _os.environ.get("TRITON_DEFAULT_BACKEND") == "cpu"

del _cls  # Triton takes the one backend class it finds in this module
