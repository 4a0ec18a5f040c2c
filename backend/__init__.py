"""The nmp Triton backend (entry point `triton.backends` -> nmp): compiler stages and the driver shim."""

from triton_nmp import source_keys as _source_keys

_source_keys.install()  # Triton's source hash from disk in every later process (see that module)
