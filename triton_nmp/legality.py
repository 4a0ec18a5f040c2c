"""Fast legality query for tuning: does a config compile and fit the scratchpad, and how much it uses.

Running the whole pipeline (LLVM included) for every candidate config costs 100+ ms; the tuner needs
the answer for dozens of configs. The query runs Triton's frontend to TTIR once per
(kernel, argument types, constexprs) and caches the TTIR text; each config then only costs the nmpir
lowering and the scratchpad plan (options such as `num_stages` and `pu_mapping` do not change TTIR).
Verdicts are cached per (kernel, specialisation, config).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

from triton_nmp.errors import NMPError, NMPScratchpadOverflowError
from triton_nmp.target import TargetSpec, active_target, target_arch

_TTIR_CACHE: dict[tuple, str | Exception] = {}
_VERDICTS: dict[tuple, Verdict] = {}
_MODULES: dict[tuple, Any] = {}
_BINDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # kernel -> Triton's argument binder

_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "pu_mapping", "maxnreg")


@dataclass(frozen=True)
class Verdict:
    """The answer for one config: legal or not, why, its peak scratchpad bytes per program and the bytes
    it spills to the bank (a spilling config is legal: the cost model charges its traffic)."""

    legal: bool
    reason: str
    spm_peak_bytes: int
    budget: int
    seconds: float = 0.0
    spill_bytes: int = 0  # the spill area per program in the PU's bank (tiles that did not fit; 0: none)


def _specialise(kernel, make_backend, values: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any]]:
    """(signature, constexprs) of a launch of `kernel` with `values`, as Triton's JIT specialises it: its own
    binder (`create_function_from_signature`, the function `JITFunction.run` calls) decides each argument's
    type and which values become constants (constexprs, None, an int equal to 1 unless do_not_specialize),
    so the query compiles the TTIR the launch would."""
    from triton.runtime.jit import create_function_from_signature

    binder = _BINDERS.get(kernel)
    if binder is None:
        binder = _BINDERS[kernel] = create_function_from_signature(kernel.signature, kernel.params, make_backend())
    try:
        bound, specialization, _ = binder(**values)
    except Exception as exc:  # an argument Triton cannot type (e.g. an object that is not a tensor or number)
        raise NMPError(f"cannot infer Triton types for the arguments of {kernel.fn.__name__}: {exc}") from None
    signature = {p.name: spec[0] for p, spec in zip(kernel.params, specialization)}
    return signature, {n: bound[n] for n, ty in signature.items() if ty == "constexpr"}


def _config_parts(config: Any) -> tuple[dict, dict]:
    if config is None:
        return {}, {}
    if isinstance(config, dict):
        kwargs = dict(config)
        options = {k: kwargs.pop(k) for k in _OPTION_KEYS if k in kwargs}
        return kwargs, options
    kwargs = dict(getattr(config, "kwargs", {}) or {})
    options = {k: getattr(config, k) for k in ("num_warps", "num_stages", "num_ctas") if getattr(config, k, None)}
    options.update({k: kwargs.pop(k) for k in _OPTION_KEYS if k in kwargs})
    return kwargs, options


def _ttir(kernel, signature: dict, constexprs: dict, target, backend, options) -> str:
    from triton._C.libtriton import ir
    from triton.compiler import ASTSource

    names = kernel.arg_names
    consts = {(names.index(k),): v for k, v in constexprs.items()}
    src = ASTSource(kernel, signature, consts)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    mod = src.make_ir(target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                      context)
    mod = backend.make_ttir(mod, {}, options)
    return str(mod)


def check_config(kernel, args: dict[str, Any] | tuple | list, config: Any = None,
                 spec: TargetSpec | None = None) -> Verdict:
    """Is `config` (a `triton.Config` or a dict of kwargs and options) legal for `kernel` on `args`?

    `args` maps parameter names to values (or lists them in order); the config supplies the remaining
    constexprs and options. Never raises for an illegal config: the reason is in the verdict.
    """
    return lower_config(kernel, args, config, spec)[0]


def lower_config(kernel, args: dict[str, Any] | tuple | list, config: Any = None,
                 spec: TargetSpec | None = None) -> tuple[Verdict, Any, Any]:
    """`check_config` plus, for legal configs, the nmpir module (multi-buffering marked) and options."""
    from triton.backends.compiler import GPUTarget

    from triton_nmp.backend.compiler import NMPBackend
    from triton_nmp.backend.pipeline import PassContext, compile_ttir

    t0 = time.perf_counter()
    spec = spec or active_target()
    names = list(kernel.arg_names)
    values = dict(zip(names, args)) if isinstance(args, (tuple, list)) else dict(args)
    kwargs, options = _config_parts(config)
    values.update(kwargs)
    missing = [n for n in names if n not in values]
    if missing:
        raise NMPError(f"check_config({kernel.fn.__name__}): no value for parameters {missing}")
    target = GPUTarget("nmp", target_arch(spec), 1)
    signature, constexprs = _specialise(kernel, lambda: NMPBackend(target), {n: values[n] for n in names})
    key_sig = (kernel.cache_key, tuple(signature.items()), tuple(sorted((k, repr(v)) for k, v in constexprs.items())))
    vkey = key_sig + (tuple(sorted(options.items())), spec.hash())
    if vkey in _VERDICTS:
        return _VERDICTS[vkey], *_MODULES.get(vkey, (None, None))
    backend = NMPBackend(target)
    try:
        opts = backend.parse_options(dict(options))
    except NMPError as e:
        verdict = Verdict(False, str(e), 0, spec.spm_bytes_per_program, time.perf_counter() - t0)
        _VERDICTS[vkey] = verdict
        return verdict, None, None
    if key_sig not in _TTIR_CACHE:
        try:
            _TTIR_CACHE[key_sig] = _ttir(kernel, signature, constexprs, target, backend, opts)
        except Exception as e:  # the frontend rejects this config (static_assert, bad shapes, ...)
            _TTIR_CACHE[key_sig] = e
    ttir = _TTIR_CACHE[key_sig]
    if isinstance(ttir, Exception):
        lines = [ln.strip() for ln in str(ttir).splitlines() if ln.strip()]
        verdict = Verdict(False, f"does not compile: {lines[-1] if lines else type(ttir).__name__}", 0,
                          spec.spm_bytes_per_program, time.perf_counter() - t0)
    else:
        ctx = PassContext.from_options(opts)  # the spec is `spec`: opts.arch names it
        try:  # the whole nmpir pipeline: it buffers less deeply, then strip-mines, what can be made to fit
            nmp = compile_ttir(ttir, ctx)
        except NMPScratchpadOverflowError as e:
            reason = (f"scratchpad overflow: needs {e.required} bytes per program, "
                      f"target '{spec.name}' has {spec.spm_bytes_per_program}")
            verdict = Verdict(False, reason, e.required, spec.spm_bytes_per_program, time.perf_counter() - t0)
        except NMPError as e:
            verdict = Verdict(False, f"does not compile for nmp: {e}", 0, spec.spm_bytes_per_program,
                              time.perf_counter() - t0)
        else:
            spill = ctx.spill.area_bytes if ctx.spill is not None else 0
            verdict = Verdict(True, "fits" if not spill else f"fits with {spill} bytes spilled to the bank",
                              ctx.plan.peak_bytes, spec.spm_bytes_per_program, time.perf_counter() - t0, spill)
            _MODULES[vkey] = (nmp, opts)
    _VERDICTS[vkey] = verdict
    return verdict, *_MODULES.get(vkey, (None, None))


def clear_cache() -> None:
    _TTIR_CACHE.clear()
    _VERDICTS.clear()
    _MODULES.clear()
