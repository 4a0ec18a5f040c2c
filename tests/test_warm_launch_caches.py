"""What a launch caches on disk for the next process (next to the kernel in Triton's cache): its footprint
(a warm process neither lowers nor predicts again) and its automatic-layout decisions (no timing model runs
again). A file that cannot be trusted is reported and computed again, never used."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton import knobs

import triton_nmp
import triton_nmp.footprint as footprint
import triton_nmp.layout_cache as layout_cache
from tests.process_state import forget_launch_memos
from triton_nmp.placement import clear_placements, set_default_policy


@triton.jit
def _scale_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))
    _scale_add.device_caches.clear()  # each test compiles into its own cache (and gets a new launcher)
    clear_placements()
    old = set_default_policy("auto")
    yield
    set_default_policy(old)
    clear_placements()


_alive: list[torch.Tensor] = []  # fresh tensors per launch, never freed meanwhile (no address is reused)


def _launch() -> tuple[float, torch.Tensor]:
    """A launch as a process's first: no footprint or layout decision in memory, fresh tensors to place."""
    forget_launch_memos(_scale_add)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(20_000, generator=g), torch.randn(20_000, generator=g)
    out = torch.empty_like(x)
    _alive.extend((x, y, out))
    with triton_nmp.profile() as prof:
        _scale_add[(triton.cdiv(x.numel(), 512),)](x, y, out, x.numel(), BLOCK=512)
    torch.testing.assert_close(out, 2 * x + y)
    return prof.sim_seconds, out


def _cached_files(tmp_path, kind: str = "footprint") -> list:
    return sorted((tmp_path / "triton").rglob(f"_scale_add.{kind}-*"))


def test_a_warm_launch_reads_its_footprint_from_disk(tmp_path, monkeypatch):
    cold, _ = _launch()
    files = _cached_files(tmp_path)
    assert len(files) == 1
    with np.load(files[0]) as z:
        assert bool(z["exact"]) and z["trace"].shape[0] > 0

    def no_lowering(metadata):
        raise AssertionError("a cached footprint must not lower the kernel again")

    monkeypatch.setattr(footprint, "kernel_func", no_lowering)
    warm, _ = _launch()
    assert warm == cold


def test_a_warm_launch_reads_its_layout_decisions_from_disk(tmp_path, monkeypatch):
    cold, _ = _launch()
    decided = triton_nmp.placement.decisions()
    assert len(_cached_files(tmp_path, "layouts")) == 1

    def no_timing(*args):
        raise AssertionError("a cached decision must not run the timing model again")

    monkeypatch.setattr(layout_cache, "choose_checked", no_timing)
    clear_placements()
    warm, _ = _launch()
    assert warm == cold
    assert [d.why for d in triton_nmp.placement.decisions()] == [d.why for d in decided]


def test_an_unreadable_layout_file_is_reported_and_decided_again(tmp_path):
    cold, _ = _launch()
    (path,) = _cached_files(tmp_path, "layouts")
    good = path.read_bytes()
    path.write_text('{"key": "')
    clear_placements()
    with pytest.warns(UserWarning, match=r"ignoring the unreadable layout cache file .*_scale_add\.layouts-.*"
                                         r"choosing the launch's layouts again"):
        again, _ = _launch()
    assert again == cold and path.read_bytes() == good


def _rewrite_key(path, key: str) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["key"] = np.array(key)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another launch"])
def test_an_unreadable_footprint_file_is_reported_and_predicted_again(tmp_path, damage):
    cold, _ = _launch()
    (path,) = _cached_files(tmp_path)
    good = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x00not a footprint" * 10)
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    else:
        _rewrite_key(path, "((1, 1, 1), (), ())")
    with pytest.warns(UserWarning, match=r"ignoring the unreadable footprint cache file .*_scale_add\.footprint-.*"
                                         r"predicting the launch's footprint again"):
        again, _ = _launch()
    assert again == cold
    assert path.read_bytes() == good  # predicted again and written back


def test_the_layout_cache_keeps_every_field_of_a_choice():
    # a decision read from disk must act as the one computed (a lost `spread` flag made warm processes lay
    # decode vectors out differently from cold ones)
    import dataclasses
    import json

    from triton_nmp.auto_layout import LayoutChoice
    from triton_nmp.placement import Placement

    choices = {2: LayoutChoice(Placement("blocked", None, None, 4096, 1000), "why", False, True),
               3: LayoutChoice(Placement("interleaved", None, 2048, 8192, 9000), "other", True, False)}
    back = layout_cache._decode(json.loads(layout_cache._encode(choices, "k")), {2: (1000, 4096), 3: (9000, 8192)})
    assert back == choices
    assert {f.name for f in dataclasses.fields(LayoutChoice)} == {"placement", "reason", "loaded", "spread"}


class _InCompileWorker:
    """`torch._inductor.compile_worker.utils` as seen inside one of Inductor's compile workers."""

    @staticmethod
    def in_toplevel_process() -> bool:
        return False


def test_a_compile_worker_leaves_the_kernel_ir_for_the_launching_process(tmp_path, monkeypatch):
    import sys

    from triton_nmp.backend import pipeline
    from triton_nmp.backend.trace_predict import predict_trace

    monkeypatch.setitem(sys.modules, "torch._inductor.compile_worker.utils", _InCompileWorker)
    _launch()  # compiled "in a worker": the nmpir is pickled into the kernel's metadata
    meta = next(iter(_scale_add.device_caches.values()))[0]
    meta = next(iter(meta.values())).metadata
    assert getattr(meta, footprint.METADATA_FIELD)
    compiled_here = footprint.kernel_func(meta)
    with footprint._lock:
        footprint._funcs.clear()  # the launching process: nothing compiled here

    def no_lowering(*args, **kwargs):
        raise AssertionError("the pickled kernel IR must be loaded, not the TTIR lowered again")

    lower = pipeline.compile_ttir
    monkeypatch.setattr(pipeline, "compile_ttir", no_lowering)
    # Inductor's fresh_cache() / force_disable_caches compile into a temporary Triton cache and restore the old
    # one before the first launch: nothing of the kernel is in the cache the launching process sees
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "another_cache"))
    loaded = footprint.kernel_func(meta)
    args = dict(scalars={"n": 20_000}, spans={"x_ptr": 80_000, "y_ptr": 80_000, "out_ptr": 80_000}, grid=(40, 1, 1))
    assert np.array_equal(predict_trace(loaded, **args).trace, predict_trace(compiled_here, **args).trace)

    # an unreadable pickle: reported, and the TTIR (back in the kernel's cache) is lowered instead
    broken = meta._replace(**{footprint.METADATA_FIELD: "bm90IGEgcGlja2xl"})
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton"))
    monkeypatch.setattr(pipeline, "compile_ttir", lower)
    with footprint._lock:
        footprint._funcs.clear()
    with pytest.warns(UserWarning, match=r"ignoring the unreadable kernel IR in the metadata of kernel '_scale_add' "
                                         r"\(field nmp_nmpir_pickle: error: .*lowering the kernel's TTIR again"):
        again = footprint.kernel_func(broken)
    assert np.array_equal(predict_trace(again, **args).trace, predict_trace(compiled_here, **args).trace)
