"""The nmp Triton backend (entry point `triton.backends` -> nmp): compiler stages and the driver shim."""

from triton_nmp import triton_key_cache as _triton_key_cache

_triton_key_cache.install()  # Triton's source hash from disk in every later process (see that module)
