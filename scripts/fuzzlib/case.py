"""Run one program against every reference and classify it.

`Runner.run(program)` writes the case (kernel.py, data.pt) into a scratch folder, starts it on the
nmp server and, unless the program uses bf16 (the interpreter's bf16 arithmetic is wrong in Triton
3.9), on the interpreter server, evaluates the torch oracle meanwhile, compares, and returns a
`triage.CaseResult`. The folder is removed unless `keep` is set.
"""

from __future__ import annotations

import shutil
import time
import traceback
from pathlib import Path

import torch

from .evaluate import expected
from .generate import uses_bf16
from .inputs import launch_args, make, output_indices
from .oracle import compare_all
from .program import Program
from .render import render
from .runner import Server
from .triage import CaseResult, classify


class Runner:
    def __init__(self, workdir: Path, timeout: float = 60.0, interp: bool = True):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nmp = Server("nmp", timeout)
        self.interp = Server("interp", timeout) if interp else None
        self.n = 0

    def close(self) -> None:
        self.nmp.close()
        if self.interp is not None:
            self.interp.close()

    def prepare(self, p: Program, case_dir: Path):
        case_dir.mkdir(parents=True, exist_ok=True)
        (case_dir / "kernel.py").write_text(render(p))
        data = make(p)
        args, kwargs = launch_args(data)
        torch.save((args, kwargs, p.grid, output_indices(data)), case_dir / "data.pt")
        return data

    def run(self, p: Program, keep: bool = False, seed: int | None = None) -> CaseResult:
        t0 = time.monotonic()
        self.n += 1
        case_dir = self.workdir / f"case{self.n}"
        if case_dir.exists():
            shutil.rmtree(case_dir)
        seed = p.data_seed if seed is None else seed
        try:
            data = self.prepare(p, case_dir)
        except Exception as e:  # noqa: BLE001 - a generator/renderer bug, reported as such
            return CaseResult(seed, "invalid", type(e).__name__, traceback.format_exc()[-2000:], tags=list(p.notes))
        use_interp = self.interp is not None and not uses_bf16(p)
        self.nmp.submit(case_dir)
        if use_interp:
            self.interp.submit(case_dir)
        exps, exp_err = None, ""
        try:
            exps = expected(p, data)
        except Exception:  # noqa: BLE001 - an oracle gap, classified
            exp_err = traceback.format_exc()[-1500:]
        nmp = self.nmp.result()
        interp = self.interp.result() if use_interp else None
        dtypes = data.out_dtypes
        got = ref = None
        if nmp.status == "ok":
            got = torch.load(case_dir / "out_nmp.pt", weights_only=False)
        if interp is not None and interp.status == "ok":
            ref = torch.load(case_dir / "out_interp.pt", weights_only=False)
        vs_torch = vs_interp = None
        if got is not None:
            if exps is not None:
                vs_torch = compare_all(got, exps, None, dtypes)
                if ref is not None:
                    vs_interp = compare_all(got, exps, ref, dtypes)
            elif ref is not None:
                vs_interp = compare_all(got, None, ref, dtypes)
        tags = list(p.notes) + (["torch-only"] if not use_interp else [])
        r = classify(seed, tags, nmp, interp, exps is not None, vs_torch, vs_interp, round(time.monotonic() - t0, 3))
        if r.cls == "oracle_error":
            r.detail = exp_err
        if not keep:
            shutil.rmtree(case_dir, ignore_errors=True)
        else:
            r.detail += f"\n[case folder: {case_dir}]"
        return r
