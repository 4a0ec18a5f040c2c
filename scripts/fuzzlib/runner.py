"""Run generated kernels on nmp or under Triton's interpreter, one forked process per kernel.

A `Server` is a long-lived Python process (`python -m scripts.fuzzlib.runner nmp|interp`) that has
imported torch and Triton once (with `TRITON_INTERPRET=1` for the interpreter: it is read at import
and decoration time, so the two modes cannot share a process). For each request it forks a child in
its own process group that imports the case's `kernel.py`, loads `data.pt`, compiles (nmp: `warmup`,
so a compile error is told apart from a run-time one) and launches the kernel, and saves the outputs
to `out_<mode>.pt`. The server waits for the child at most `timeout` seconds, then kills the whole
group (the child's LLVM workers included). The reply says ok / error (phase, exception type, message)
/ crash (signal or exit code) / timeout. A crash never takes the server down; a dead server is
restarted by the client.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    status: str  # ok | error | crash | timeout
    phase: str = ""  # compile | run (errors)
    etype: str = ""
    message: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return self.__dict__.copy()


class Server:
    """Client side: one server process of a mode, restarted when it dies."""

    def __init__(self, mode: str, timeout: float, env: dict | None = None):
        self.mode = mode
        self.timeout = timeout
        self.env = env
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if self.mode == "interp":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen([sys.executable, "-m", "scripts.fuzzlib.runner", self.mode],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                     bufsize=1, cwd=str(ROOT))

    def submit(self, case_dir: Path) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        case = str(case_dir.resolve())  # the server runs in ROOT: a relative --out would point elsewhere
        self.proc.stdin.write(json.dumps({"dir": case, "timeout": self.timeout}) + "\n")
        self.proc.stdin.flush()

    def result(self) -> Outcome:
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout + 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close(kill=True)
            return Outcome("crash", message=f"the {self.mode} server died or stalled")
        return Outcome(**json.loads(line))

    def run(self, case_dir: Path) -> Outcome:
        self.submit(case_dir)
        return self.result()

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                self.proc.kill()
        self.proc.wait()
        self.proc = None


# -- server side -------------------------------------------------------------------------------------


def _child(mode: str, case_dir: Path) -> None:
    """Runs in the forked child: compile and launch, save outputs and a status file."""
    import importlib.util

    import torch
    status = {"status": "ok"}
    phase = "compile"
    try:
        spec = importlib.util.spec_from_file_location(f"fuzzcase_{os.getpid()}", case_dir / "kernel.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        args, kwargs, grid, outs = torch.load(case_dir / "data.pt", weights_only=False)
        if mode == "nmp":
            mod.kernel.warmup(*args, grid=(grid,), **kwargs)
        phase = "run"
        mod.kernel[(grid,)](*args, **kwargs)
        torch.save([args[k] for k in outs], case_dir / f"out_{mode}.pt")
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the supervisor
        tb = traceback.format_exc()
        cause = f"\ncaused by {type(e.__cause__).__name__}: {e.__cause__}"[:1500] if e.__cause__ else ""
        status = {"status": "error", "phase": phase, "etype": f"{type(e).__module__}.{type(e).__name__}",
                  "message": f"{str(e)[:3000]}{cause}\n--\n{tb[-3000:]}"}
    (case_dir / f"status_{mode}.json").write_text(json.dumps(status))


_WARMUP = """import triton
import triton.language as tl


@triton.jit
def warm(x, y, N: tl.constexpr):
    tl.store(y + tl.arange(0, N), tl.load(x + tl.arange(0, N)) + 1)
"""


def _warm_up() -> None:
    """Compile and run one tiny kernel in the server, so every child starts with Triton's source hash
    (`triton_key`, half a second), the backend's imports and an LLVM worker already there. The worker
    is shared by the children one at a time (the server forks the next child only after the previous
    one ended); a child killed mid-request could leave it half-answered, so the server exits after a
    timeout or crash and the client starts a fresh one."""
    import importlib.util
    import shutil
    import tempfile

    import torch
    tmp = Path(tempfile.mkdtemp(prefix="fuzz_warm_"))
    try:  # the JIT reads the source at decoration; the file is not needed after the launch
        path = tmp / "warm.py"
        path.write_text(_WARMUP)
        spec = importlib.util.spec_from_file_location("fuzz_warm", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        x = torch.zeros(8)
        mod.warm[(1,)](x, torch.empty(8), N=8)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _serve(mode: str) -> None:
    import torch  # noqa: F401
    import triton  # noqa: F401
    if mode == "nmp":
        import triton_nmp  # noqa: F401
        _warm_up()
    torch.set_num_threads(1)
    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        req = json.loads(line)
        case_dir = Path(req["dir"])
        status_file = case_dir / f"status_{mode}.json"
        if status_file.exists():
            status_file.unlink()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            code = 0
            try:
                _child(mode, case_dir)
            except BaseException:  # noqa: BLE001
                code = 3
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        deadline = t0 + req["timeout"]
        result = None
        while True:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                result = {"status": "timeout", "message": f"no result after {req['timeout']:.0f} s"}
                break
            time.sleep(0.005)
        try:  # the child's own helpers (LLVM workers) go with it
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if result is None:
            if os.WIFSIGNALED(st):
                result = {"status": "crash", "message": f"killed by signal {os.WTERMSIG(st)}"}
            elif status_file.exists():
                result = json.loads(status_file.read_text())
            else:
                result = {"status": "crash", "message": f"exited with code {os.WEXITSTATUS(st)} and no result"}
        result["seconds"] = round(time.monotonic() - t0, 3)
        out.write(json.dumps(result) + "\n")
        out.flush()
        if result["status"] in ("timeout", "crash"):
            return  # shared helpers may be in any state: the client starts a fresh server


if __name__ == "__main__":
    _serve(sys.argv[1])
