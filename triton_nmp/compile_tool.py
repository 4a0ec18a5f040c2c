"""Compile one @triton.jit kernel from a Python file for nmp and show or save each IR stage.

    triton-nmp compile kernels.py:add_kernel --signature '*fp32,*fp32,*fp32,i32' --const BLOCK=1024 --stage nmpir

This is how a user traces a wrong result or a slow kernel back through ttir -> nmpir -> llir to the
Python line: every stage keeps `loc(...)` source locations.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from triton_nmp.errors import NMPError

STAGES = ("ttir", "nmpir", "llir", "nmpbin")


class CompileToolError(NMPError):
    """Bad arguments to `triton-nmp compile`."""


@dataclass
class CompileRequest:
    path: Path
    kernel: str
    signature: list[str]
    constexprs: dict[str, object]


def _parse_value(text: str) -> object:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    return text


def parse_request(target: str, signature: str, consts: list[str]) -> CompileRequest:
    if ":" not in target:
        raise CompileToolError(f"expected FILE.py:KERNEL, got '{target}'")
    path_text, kernel = target.rsplit(":", 1)
    path = Path(path_text)
    if not path.is_file():
        raise CompileToolError(f"no such file: {path}")
    sig = [s.strip() for s in signature.split(",") if s.strip()] if signature else []
    constexprs = {}
    for c in consts:
        if "=" not in c:
            raise CompileToolError(f"--const expects NAME=VALUE, got '{c}'")
        k, v = c.split("=", 1)
        constexprs[k.strip()] = _parse_value(v.strip())
    return CompileRequest(path, kernel, sig, constexprs)


def _load_kernel(req: CompileRequest):
    import triton

    spec = importlib.util.spec_from_file_location(req.path.stem, req.path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[req.path.stem] = module
    spec.loader.exec_module(module)
    fn = getattr(module, req.kernel, None)
    if not isinstance(fn, triton.runtime.JITFunction):
        raise CompileToolError(f"'{req.kernel}' in {req.path} is not a @triton.jit function")
    return fn


def compile_stages(req: CompileRequest) -> dict[str, str | bytes]:
    """Compile and return {stage: text or bytes} for every stage of the pipeline."""
    import triton
    from triton.compiler import ASTSource

    fn = _load_kernel(req)
    names = fn.arg_names
    unknown = set(req.constexprs) - set(names)
    if unknown:
        raise CompileToolError(f"--const names {sorted(unknown)} are not parameters of {req.kernel} ({names})")
    free = [n for n in names if n not in req.constexprs]
    if len(req.signature) != len(free):
        raise CompileToolError(
            f"{req.kernel} has {len(free)} non-constexpr parameters ({', '.join(free)}) but --signature gives "
            f"{len(req.signature)} types")
    sig = dict(zip(free, req.signature))
    sig.update({k: "constexpr" for k in req.constexprs})
    sig = {n: sig[n] for n in names}
    consts = {(names.index(k),): v for k, v in req.constexprs.items()}
    target = triton.runtime.driver.active.get_current_target()
    compiled = triton.compile(ASTSource(fn, sig, consts), target=target)
    return {k: compiled.asm[k] for k in STAGES if k in compiled.asm}


def write_stages(stages: dict[str, str | bytes], out_dir: Path, kernel: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for stage, data in stages.items():
        p = out_dir / f"{kernel}.{stage}"
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
        written.append(p)
    return written
