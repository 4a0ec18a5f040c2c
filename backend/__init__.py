"""The nmp Triton backend (entry point `triton.backends` -> nmp): compiler stages and the driver shim."""
