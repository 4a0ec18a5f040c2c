"""Triton entry point `cpu = triton_nmp.cpu_backend`: nmp under Triton's name for CPU tensors.

See `triton_nmp.triton_name` for why, and for how this entry defers to another installed "cpu" backend.
"""
