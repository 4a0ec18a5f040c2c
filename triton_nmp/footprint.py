"""A launch's static footprint: the trace predicted from nmpir before the kernel runs.

Placement decisions (which bank holds a tensor's bytes, which PU runs which program) have to be made
before a launch runs on real hardware, so they may only use what is known beforehand: the kernel's
code, its scalar arguments, its grid and its buffers' sizes. `backend.trace_predict` turns exactly
that into the DMA records every program will issue; when a record depends on loaded data (a gather
through loaded indices, a data-dependent loop bound), the prediction says so (`exact` False) and
placement falls back to footprint-free choices (round-robin mapping, the default layout). When only branches
depend on loaded data (a program that skips work its data makes void, such as decode attention's chunks past
the position), the records of both sides are a sound bound (`bound` True, `placeable`): placement follows it
as it follows an exact footprint (programs go where the bytes they may move live), and whatever needs the bytes
a run really moves (bytes a launch overwrites) keeps to exact footprints.

The nmpir of a kernel comes from the compile in this process (`register_kernel`, called by the nmpir
stage) or, for a kernel compiled by one of Inductor's compile workers, from the pickle the worker put in
the kernel's metadata, or else (any other kernel loaded from Triton's cache or compiled by another
process) from the TTIR in Triton's cache, lowered again (once per kernel and process).

Predictions are also kept on disk, next to the kernel in Triton's cache (`<name>.footprint-<key>.npz`), so a
warm process neither lowers nor predicts again. A launch's prediction reads only the kernel (whose Triton
hash covers the target, the options, Triton's version and the compiler's sources), the grid, the scalar
arguments and the pointer spans; the file name hashes those and this module's source, and the file (a
`side_cache` file) repeats the launch key, which is checked on load. A file that cannot be read (truncated,
wrong contents, a CRC error) is reported with a warning naming it and predicted again.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import pickle
import struct
import sys
import threading
import warnings
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from triton_nmp import abi
from triton_nmp.abi import metadata_value
from triton_nmp.side_cache import SideCache

__all__ = ["Footprint", "register_kernel", "kernel_func", "launch_footprint"]

_MAX_CACHED = 512
METADATA_FIELD = "nmp_nmpir_pickle"  # set by compile workers only, see register_kernel
_FILES = SideCache("footprint", "npz", "footprint", "prediction", "predicting the launch's footprint again")


@dataclass(frozen=True)
class Footprint:
    """Predicted records of one launch (`triton_nmp.abi` layout), or why there are none."""

    trace: np.ndarray | None  # exact, or (bound) every record the launch may issue
    exact: bool
    reason: str = ""
    bound: bool = False

    @property
    def placeable(self) -> bool:
        """Whether placement may follow `trace`: exact, or a superset of what a run moves."""
        return self.trace is not None and (self.exact or self.bound)


_lock = threading.Lock()
_funcs: dict[str, Any] = {}  # metadata hash -> nmpir Func (None: could not be recovered)
_footprints: OrderedDict[Any, Footprint] = OrderedDict()


def register_kernel(metadata: dict, func: Any) -> None:
    """Remember the nmpir of a kernel compiled in this process (the nmpir stage calls this). In one of
    Inductor's compile workers it is also pickled into the kernel's metadata (`METADATA_FIELD`, zlib + base64):
    the process that launches the kernel then loads it (<1 ms) instead of lowering the TTIR again (20-90 ms
    per kernel, at its first launch: part of a model's cold compile). The metadata travels with the kernel
    wherever Inductor or Triton's cache take it; a file next to the kernel did not: Inductor's
    `force_disable_caches` and `fresh_cache()` compile into a temporary Triton cache and restore the old one
    before the first launch, which then found neither pickle nor TTIR and mapped every kernel round robin."""
    kernel_hash = metadata.get("hash", "")
    if not kernel_hash:
        return
    with _lock:
        _funcs[kernel_hash] = func
    workers = sys.modules.get("torch._inductor.compile_worker.utils")
    if workers is None or workers.in_toplevel_process():
        return
    try:
        data = zlib.compress(pickle.dumps(func, protocol=pickle.HIGHEST_PROTOCOL), 1)
    except (RecursionError, pickle.PicklingError):  # the launching process lowers the TTIR instead
        return
    metadata[METADATA_FIELD] = base64.b64encode(data).decode("ascii")


def _pickled(metadata: Any) -> Any:
    """The nmpir a compile worker pickled into this kernel's metadata, or None (none, or one that does not
    load: reported)."""
    text = metadata_value(metadata, METADATA_FIELD)
    if not text:
        return None
    try:
        return pickle.loads(zlib.decompress(base64.b64decode(text, validate=True)))
    except Exception as e:  # noqa: BLE001 - anything unreadable: lower the TTIR instead
        warnings.warn(f"triton-nmp: ignoring the unreadable kernel IR in the metadata of kernel "
                      f"'{metadata_value(metadata, 'name')}' (field {METADATA_FIELD}: {type(e).__name__}: {e}); "
                      "lowering the kernel's TTIR again", stacklevel=3)
        return None


def _from_cache(metadata: Any) -> Any:
    """The nmpir of a kernel compiled elsewhere: pickled by the compile worker, else lowered again from the
    TTIR Triton cached for it."""
    from triton.runtime.cache import get_cache_manager

    from triton_nmp.backend.pipeline import PassContext, compile_ttir
    from triton_nmp.target import compiled_target

    h, name = metadata_value(metadata, "hash"), metadata_value(metadata, "name")
    if not h or not name:
        return None
    func = _pickled(metadata)
    if func is not None:
        return func
    path = get_cache_manager(h).get_file(f"{name}.ttir")
    if path is None:
        return None
    with open(path) as f:
        ttir = f.read()
    spec = compiled_target(metadata)
    if spec is None:
        return None
    ctx = PassContext(spec, int(metadata_value(metadata, "num_stages", 2) or 2))
    return compile_ttir(ttir, ctx).kernel


def kernel_func(metadata: Any) -> Any:
    """The nmpir Func of a compiled kernel, or None when it cannot be had."""
    h = metadata_value(metadata, "hash")
    with _lock:
        if h in _funcs:
            return _funcs[h]
    try:
        func = _from_cache(metadata)
    except Exception:  # noqa: BLE001 - a kernel we cannot re-lower simply has no static footprint
        func = None
    with _lock:
        _funcs[h] = func
    return func


@functools.cache
def _module_hash() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _read(path: str) -> tuple[str, Footprint]:
    with np.load(path, allow_pickle=False) as z:
        trace, exact, reason, key = z["trace"], bool(z["exact"]), str(z["reason"]), str(z["key"])
        bound = bool(z["bound"])
    if trace.dtype != np.int64 or trace.ndim != 2 or trace.shape[1] != abi.TRACE_WORDS:
        raise ValueError(f"trace of dtype {trace.dtype} and shape {trace.shape}")
    return key, Footprint(trace if exact or bound else None, exact, reason, bound)


def _encode(fp: Footprint, key: str) -> bytes:
    buf = io.BytesIO()
    trace = fp.trace if fp.trace is not None else np.zeros((0, abi.TRACE_WORDS), dtype=np.int64)
    np.savez(buf, trace=trace.astype(np.int64, copy=False), exact=np.array(fp.exact), reason=np.array(fp.reason),
             bound=np.array(fp.bound), key=np.array(key))
    return buf.getvalue()


_unpack_d = struct.Struct("<d").unpack
_pack_q = struct.Struct("<q").pack


def _predict(metadata: Any, args: Any, vals: tuple[int, ...], grid: tuple[int, int, int]) -> Footprint | None:
    """Predict a launch's trace from the kernel's nmpir (None: the nmpir is not available)."""
    from triton_nmp.backend.trace_predict import predict_trace

    func = kernel_func(metadata)
    if func is None:
        return None
    scalars: dict[str, int | float] = {}
    spans: dict[str, int] = {}
    i = 0
    for a in args:
        if a.kind == "ptr":
            spans[a.name] = int(vals[i + 1])
            i += 2
        else:
            v = vals[i]
            scalars[a.name] = _unpack_d(_pack_q(v))[0] if a.kind == "float" else int(v)
            i += 1
    try:
        pred = predict_trace(func, scalars, spans, grid)
    except Exception as e:  # noqa: BLE001 - an op the predictor does not model: no static footprint
        return Footprint(None, False, f"the trace predictor cannot follow this kernel ({type(e).__name__}: {e})")
    return Footprint(pred.trace if pred.exact or pred.bound else None, pred.exact, pred.reason, pred.bound)


def launch_footprint(metadata: Any, args: Any, vals: tuple[int, ...], grid: tuple[int, int, int],
                     key: Any) -> Footprint:
    """The predicted trace of a launch from its marshalled slot values (`args`: the KernelABI's
    ArgInfos, a pointer taking two slots [data_ptr, span]), memoised per kernel and `key` (the
    launcher's: grid, scalar values and pointer spans, which is all the prediction reads), in this process
    and on disk."""
    where = _FILES.file(metadata, lambda: repr(key), salt=_module_hash())
    key = (metadata_value(metadata, "hash"), key)
    with _lock:
        hit = _footprints.get(key)
        if hit is not None:
            _footprints.move_to_end(key)
            return hit
    fp = _FILES.load(where, _read) if where is not None else None
    if fp is None:
        fp = _predict(metadata, args, vals, grid)
        if fp is None:
            fp = Footprint(None, False,
                           "the kernel's nmpir is not available (compiled elsewhere, not in Triton's cache)")
        elif where is not None:
            _FILES.store(where, _encode(fp, where.key))
    with _lock:
        _footprints[key] = fp
        while len(_footprints) > _MAX_CACHED:
            _footprints.popitem(last=False)
    return fp
