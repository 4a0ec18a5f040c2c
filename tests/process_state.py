"""Test helper: make a kernel's next launch behave as a fresh process's first (what the disk caches serve)."""

from __future__ import annotations

from typing import Any


def forget_launch_memos(jit_fn: Any) -> None:
    """Drop the in-memory footprints and the launchers' layout and re-layout memos of `jit_fn`'s compiled
    kernels, so the next launch reads them from disk or computes them again."""
    from triton_nmp import footprint

    with footprint._lock:
        footprint._footprints.clear()
    for cache in jit_fn.device_caches.values():
        for kernel in cache[0].values():
            if kernel._run is not None:
                kernel._run._layout_memo.clear()
                kernel._run._relayout_memo.clear()
