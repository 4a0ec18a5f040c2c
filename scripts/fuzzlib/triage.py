"""Failure classes of one kernel and how a run's outcomes map to them.

nmp-attributable (the goal is none of these): `crash` (the nmp child died: signal, hard exit),
`hang` (no result within the time limit), `compile_error` (nmp refused or failed to compile a
program the references run), `runtime_error` (the launch raised), `mismatch` (nmp differs from
every reference that ran).

Not attributable, each classified and counted, never dropped: `ok`; `invalid` (Triton's front end
rejects the program in both modes: a generator bug); `interp_differs` (nmp agrees with torch, the
interpreter does not; the reason names the known interpreter behaviour when it is one: fp16
partial sums in numpy's cumsum/axis-0 sum, float->int casts that wrap, `int8 >> uint8` shifted
logically where TTIR's `arith.shrsi` shifts arithmetically); `interp_error` (the
interpreter cannot run what nmp and torch agree on; `interp-atomic-dtype`: libtriton's native atomic
helpers that the interpreter calls reject the element type, "Unsupported data type");
`torch_differs` (nmp agrees with the interpreter, the torch oracle does not: an oracle gap to look
at); `oracle_error` (the torch oracle raised; nmp was compared with the interpreter under a
fallback tolerance and agreed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ATTRIBUTABLE = ("crash", "hang", "compile_error", "runtime_error", "mismatch")
CLASSES = ATTRIBUTABLE + ("ok", "invalid", "interp_differs", "interp_error", "torch_differs", "oracle_error")
FRONTEND_ERRORS = ("triton.compiler.errors.CompilationError", "triton.compiler.errors.CompileTimeAssertionFailure")


@dataclass
class CaseResult:
    seed: int
    cls: str
    reason: str = ""
    detail: str = ""
    seconds: float = 0.0
    tags: list[str] = field(default_factory=list)
    checked: int = 0
    undetermined: int = 0
    nmp_seconds: float = 0.0
    interp_seconds: float = 0.0

    @property
    def attributable(self) -> bool:
        return self.cls in ATTRIBUTABLE

    def signature(self) -> str:
        """What must stay the same while minimising: the class, and for errors the exception type."""
        return f"{self.cls}:{self.reason}" if self.cls in ("compile_error", "runtime_error", "crash") else self.cls


def _frontend_raised(message: str) -> bool:
    """The error comes from Triton's language front end (semantic/core), shared by every backend."""
    tb = message.split("\n--\n")[-1]
    frames = [line for line in tb.splitlines() if line.strip().startswith("File ")]
    return bool(frames) and "/triton/language/" in frames[-1] and not any("/backend/" in f for f in frames)


def known_interp_reason(tags: list[str]) -> str:
    """The documented interpreter behaviour a disagreement most likely comes from."""
    if "shift:ashr-unsigned" in tags:
        return "interp-lshr-for-ashr"  # numpy right_shift on the promoted unsigned array shifts logically
    narrow = any(t in tags for t in ("load:float16", "cast:float32->float16", "cast:float64->float16"))
    if narrow and any(t.startswith(("scan:", "reduce:sum", "reduce:comb_add", "dot:float16")) for t in tags):
        return "interp-fp16-partials"  # numpy cumsum / axis-0 sum / generic reduce round each partial to fp16
    if any(t.startswith("cast:float") and "->int" in t or "->uint" in t for t in tags):
        return "interp-float-to-int-wraps"  # numpy wraps out-of-range conversions; nmp saturates (GPUs)
    return "interp-other"


def classify(seed, tags, nmp, interp, exp_ok: bool, vs_torch, vs_interp, seconds) -> CaseResult:
    """nmp/interp: runner.Outcome (interp None when it was not run: bf16); vs_*: oracle.Verdict or None."""
    r = CaseResult(seed, "ok", seconds=seconds, tags=list(tags), nmp_seconds=nmp.seconds,
                   interp_seconds=interp.seconds if interp is not None else 0.0)
    def first(o) -> str:  # the error without its traceback
        return o.message.split("\n--\n")[0][:1500] if o.message else ""

    if nmp.status == "timeout":
        r.cls, r.detail = "hang", nmp.message
        return r
    if nmp.status == "crash":
        r.cls, r.reason, r.detail = "crash", nmp.message.split(" ")[-1] if "signal" in nmp.message else "exit", \
            nmp.message
        return r
    if nmp.status == "error":
        if nmp.etype in FRONTEND_ERRORS and interp is not None and interp.status == "error" \
                and interp.etype in FRONTEND_ERRORS:
            r.cls, r.reason, r.detail = "invalid", nmp.etype, first(nmp)
            return r
        if nmp.etype in FRONTEND_ERRORS and _frontend_raised(nmp.message):
            r.cls, r.reason, r.detail = "invalid", nmp.etype, first(nmp)
            return r
        r.cls = "compile_error" if nmp.phase == "compile" else "runtime_error"
        r.reason, r.detail = nmp.etype, nmp.message[:4000]
        return r
    for v in (vs_torch, vs_interp):
        if v is not None:
            r.checked, r.undetermined = v.checked, v.undetermined
            break
    torch_ok = vs_torch is None or vs_torch.ok
    interp_ran = interp is not None and interp.status == "ok"
    interp_ok = vs_interp is None or vs_interp.ok
    if not exp_ok:  # no torch expectation: the interpreter alone (fallback tolerance)
        if interp_ran and not interp_ok:
            r.cls, r.detail = "mismatch", vs_interp.detail
        else:
            r.cls, r.reason = "oracle_error", "torch oracle raised"
        return r
    if torch_ok and interp_ok:
        if interp is not None and interp.status != "ok":
            r.cls, r.detail = "interp_error", first(interp)
            r.reason = ("interp-atomic-dtype" if "Unsupported data type" in interp.message and
                        any(t.startswith("atomic:") for t in tags) else interp.etype)
        return r
    if not torch_ok and interp_ran and interp_ok:
        r.cls, r.detail = "torch_differs", vs_torch.detail
        return r
    if torch_ok and interp_ran and not interp_ok:
        r.cls, r.reason, r.detail = "interp_differs", known_interp_reason(tags), vs_interp.detail
        return r
    r.cls = "mismatch"
    r.detail = (vs_torch.detail if not torch_ok else "") + (" | vs interpreter: " + vs_interp.detail
                                                            if vs_interp is not None and not interp_ok else "")
    return r
