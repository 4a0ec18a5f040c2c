"""Harness for the language tests: run one kernel on nmp and under Triton's interpreter, compare.

`TRITON_INTERPRET` is read when a kernel is decorated, and the language's own `@jit` helpers (random,
libdevice, the combine functions) are decorated when `triton.language` is imported, so the
interpreter cannot share a process with the nmp backend. One interpreter *server* subprocess per test
session (started lazily) imports the test module by path with `TRITON_INTERPRET=1`, runs the kernel
named in a request on the tensors of a `torch.save` file and saves them back. Its stdout (the
interpreter's `device_print` output) is returned with the result.

This module has no tests of its own; it is named `test_language_*` to sit with the tests that use it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import torch

SERVER_TIMEOUT = float(os.environ.get("NMP_INTERP_TIMEOUT", "120"))


class InterpreterFailed(RuntimeError):
    """The kernel raised under Triton's interpreter; the message is the interpreter's error."""


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple):
        return tuple(_clone(y) for y in x)
    return x


class InterpreterServer:
    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.tmp = tempfile.mkdtemp(prefix="nmp_interp_")
        self.n = 0

    def _start(self) -> None:
        env = dict(os.environ)
        env["TRITON_INTERPRET"] = "1"
        env.pop("TRITON_DEFAULT_BACKEND", None)
        self.proc = subprocess.Popen([sys.executable, __file__, "--server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, bufsize=1)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def call(self, kernel, grid, args, kwargs) -> tuple[list, dict, str]:
        """Run `kernel[grid](*args, **kwargs)` under the interpreter; returns the arguments afterwards
        (tensors hold the kernel's writes) and the printed output."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        fn = getattr(kernel, "fn", kernel)
        self.n += 1
        path = os.path.join(self.tmp, f"req{self.n}.pt")
        torch.save((list(args), dict(kwargs)), path)
        req = {"file": inspect.getfile(fn), "name": fn.__name__, "grid": list(grid), "path": path}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], SERVER_TIMEOUT)
        if not ready:
            self.proc.kill()
            self.proc = None
            raise TimeoutError(f"the interpreter did not finish {fn.__name__} in {SERVER_TIMEOUT} s")
        line = self.proc.stdout.readline()
        if not line:
            self.proc = None
            raise RuntimeError("the interpreter server died")
        resp = json.loads(line)
        if not resp["ok"]:
            raise InterpreterFailed(resp["error"])
        out_args, out_kwargs = torch.load(path, weights_only=False)
        os.unlink(path)
        return out_args, out_kwargs, resp["stdout"]


_server: InterpreterServer | None = None


def server() -> InterpreterServer:
    global _server
    if _server is None:
        _server = InterpreterServer()
        import atexit

        atexit.register(_server.close)
    return _server


def run_interp(kernel, grid, *args, **kwargs):
    """The kernel's arguments after an interpreter run (inputs cloned, the caller's left untouched)."""
    out_args, out_kwargs, _ = server().call(kernel, grid, [_clone(a) for a in args],
                                            {k: _clone(v) for k, v in kwargs.items()})
    return out_args


def run_nmp(kernel, grid, *args, **kwargs):
    args = [_clone(a) for a in args]
    kernel[tuple(grid)](*args, **{k: _clone(v) for k, v in kwargs.items()})
    return args


def assert_same(a: torch.Tensor, b: torch.Tensor, atol: float = 0.0, rtol: float = 0.0, what: str = "") -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    if a.dtype.is_floating_point:
        if atol == 0 and rtol == 0:
            nan = torch.isnan(a) & torch.isnan(b)
            # +0 and -0 compare equal: require the same sign too (NaNs of either sign are equal)
            same = ((a == b) & (torch.signbit(a) == torch.signbit(b))) | nan
            if not bool(same.all()):
                bad = (~same).nonzero()[:5].tolist()
                raise AssertionError(f"{what}: not bit-identical at {bad}: "
                                     f"{[a[tuple(i)].item() for i in bad]} vs {[b[tuple(i)].item() for i in bad]}")
        else:
            torch.testing.assert_close(a, b, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{what}: {m}")
    else:
        if not torch.equal(a, b):
            bad = (a != b).nonzero()[:5].tolist()
            raise AssertionError(f"{what}: differs at {bad}: {[a[tuple(i)].item() for i in bad]} vs "
                                 f"{[b[tuple(i)].item() for i in bad]}")


def check_vs_interp(kernel, grid, *args, atol: float = 0.0, rtol: float = 0.0, outputs=None, **kwargs):
    """Run on nmp and under the interpreter; every tensor argument (or those at `outputs`) must match."""
    got = run_nmp(kernel, grid, *args, **kwargs)
    ref = run_interp(kernel, grid, *args, **kwargs)
    idx = outputs if outputs is not None else [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    for i in idx:
        assert_same(got[i], ref[i], atol, rtol, what=f"{getattr(kernel, '__name__', 'kernel')} argument {i}")
    return got, ref


# -- server side ------------------------------------------------------------------------------------------


def _serve() -> None:
    import triton  # noqa: F401  (TRITON_INTERPRET=1 is set by the parent)

    proto = sys.stdout
    sys.stdout = sys.stderr
    modules: dict[str, object] = {}
    for line in sys.stdin:
        req = json.loads(line)
        buf = io.StringIO()
        try:
            path = req["file"]
            mod = modules.get(path)
            if mod is None:
                # import under the module's package name (tests/ is a package) from its root
                d, parts = Path(path).parent, [Path(path).stem]
                while (d / "__init__.py").exists():
                    parts.insert(0, d.name)
                    d = d.parent
                if str(d) not in sys.path:
                    sys.path.insert(0, str(d))
                mod = importlib.import_module(".".join(parts))
                modules[path] = mod
            kernel = getattr(mod, req["name"])
            args, kwargs = torch.load(req["path"], weights_only=False)
            with contextlib.redirect_stdout(buf):
                kernel[tuple(req["grid"])](*args, **kwargs)
            torch.save((args, kwargs), req["path"])
            resp = {"ok": True, "stdout": buf.getvalue()}
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the test
            resp = {"ok": False, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}",
                    "stdout": buf.getvalue()}
        proto.write(json.dumps(resp) + "\n")
        proto.flush()


if __name__ == "__main__" and "--server" in sys.argv:
    _serve()
