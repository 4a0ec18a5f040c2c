from triton_nmp.driver.driver import NMPDriver  # noqa: F401  (Triton looks for one concrete DriverBase here)
