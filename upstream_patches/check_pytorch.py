#!/usr/bin/env python3
"""Check the PyTorch patches in upstream_patches/pytorch/ against the installed torch (v2.13.0).

Builds a scratch copy of the installed `torch` package laid out as the PyTorch repository (`torch/` at the root,
tests under `test/`): Python sources are copied, compiled parts (`_C`, `lib/`) symlinked; the files the patches
touch are committed as the baseline. Then:

  1. applies every upstream_patches/pytorch/*.patch in order (`git apply --check`, then `git apply`), and after
     each one runs the tests the patches have added so far (CPU only), importing the patched copy;
  2. checks that `git am` of the series gives the same tree, and lints the added lines (ruff's pyflakes and
     syntax rules; 120 columns, PyTorch's flake8 limit);
  3. checks that triton-nmp's plugin-side workarounds see each fix as present in the patched copy (so they
     switch themselves off once PyTorch ships the fixes).

Run by upstream_patches/check after the Triton series; exits non-zero if any step fails.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
PATCHES = sorted((HERE / "pytorch").glob("*.patch"))
EXPECTED_VERSION = "2.13.0"
GIT = ["git", "-c", "user.name=upstream-check", "-c", "user.email=upstream-check@localhost",
       "-c", "core.autocrlf=false", "-c", "init.defaultBranch=main"]
RUFF = ["--isolated", "--select", "E4,E7,E9,F", "--line-length", "120"]

PLUGIN = '''
import os

import pytest


def pytest_configure(config):
    import torch
    root = os.environ["NMP_CHECK_TORCH_ROOT"]
    if not os.path.abspath(torch.__file__).startswith(root + os.sep):
        raise pytest.UsageError(f"imported {torch.__file__}, not the patched copy under {root}")
'''

WORKAROUND_PROBE = '''
import torch, os
assert torch.__file__.startswith(os.environ["NMP_CHECK_TORCH_ROOT"]), torch.__file__
from torch._dynamo.device_interface import CpuInterface
from triton_nmp.inductor import workarounds
with CpuInterface.device(0):
    pass
print("raw_stream_fixed", workarounds.raw_stream_fixed_upstream())
print("cpu_benchmark_routed", workarounds.cpu_benchmark_routed_upstream())
'''


def run(cmd, **kwargs):
    start = time.time()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900, **kwargs)
    return proc.returncode, proc.stdout, time.time() - start


def record(results, name, ok, detail="", secs=0.0, output=""):
    status = "PASS" if ok else "FAIL"
    results.append((name, status))
    print(f"[{status}] {name}" + (f" -- {detail}" if detail else "") + (f" ({secs:.1f}s)" if secs else ""), flush=True)
    if output and not ok:
        print("\n".join("       | " + line for line in output.rstrip().splitlines()[-60:]), flush=True)


def installed_torch():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import os, torch; print(os.path.dirname(os.path.abspath(torch.__file__))); print(torch.__version__)"
    rc, out, _ = run([sys.executable, "-c", code], env=env, cwd=tempfile.gettempdir())
    if rc != 0:
        sys.exit(f"cannot import the installed torch:\n{out}")
    path, version = out.strip().splitlines()[-2:]
    return Path(path), version


def copy_package(src, dst):
    """Python sources are copied (the patches change them); everything else is symlinked."""
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            if f.endswith(".py"):
                shutil.copy2(os.path.join(root, f), target / f)
            else:
                os.symlink(os.path.join(root, f), target / f)


def _ruff_count(path, cwd):
    rc, out, _ = run([sys.executable, "-m", "ruff", "check", *RUFF, "--output-format", "concise", str(path)],
                     cwd=cwd)
    return sum(1 for line in out.splitlines() if re.match(r".+:\d+:\d+: ", line))


def touched(patch):
    text = patch.read_text()
    old = re.findall(r"^--- a/(\S+)", text, re.M)
    new = re.findall(r"^\+\+\+ b/(\S+)", text, re.M)
    return old, [p for p in new if p not in old]


def added_lines(patch):
    return [line[1:] for line in patch.read_text().splitlines() if line.startswith("+") and not line.startswith("+++")]


def main():
    results = []
    started = time.time()
    src, version = installed_torch()
    print(f"installed torch {version} at {src}")
    print(f"patches: {', '.join(p.name for p in PATCHES) or 'none'}")
    if not PATCHES:
        sys.exit("no patches in upstream_patches/pytorch/")
    if not version.startswith(EXPECTED_VERSION):
        sys.exit(f"the PyTorch patches are against v{EXPECTED_VERSION}; installed torch is {version}")
    tmp = Path(tempfile.mkdtemp(prefix="nmp-upstream-check-torch-"))
    try:
        copy_package(src, tmp / "torch")
        (tmp / "harness").mkdir()
        (tmp / "harness" / "nmp_check_torch_plugin.py").write_text(PLUGIN)
        (tmp / "pytest.ini").write_text("[pytest]\n")
        run(GIT + ["init", "-q"], cwd=tmp)
        baseline_files = sorted({f for p in PATCHES for f in touched(p)[0]})
        missing = [f for f in baseline_files if not (tmp / f).is_file()]
        if missing:
            sys.exit(f"files the patches change are not in torch {version}: {missing}")
        run(GIT + ["add", "--"] + baseline_files, cwd=tmp)
        rc, out, _ = run(GIT + ["commit", "-q", "-m", f"torch {version} (installed package)"], cwd=tmp)
        if rc != 0:
            sys.exit(f"cannot commit the baseline:\n{out}")
        baseline = run(GIT + ["rev-parse", "HEAD"], cwd=tmp)[1].strip()

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp), str(tmp / "harness")])
        env["NMP_CHECK_TORCH_ROOT"] = str(tmp / "torch")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor-cache")

        tests, applied, changed = [], True, []
        for patch in PATCHES:
            rc, out, secs = run(GIT + ["apply", "--check", str(patch)], cwd=tmp)
            if rc != 0:
                record(results, f"{patch.name}: git apply --check", False, "does not apply", secs, out)
                applied = False
                break
            run(GIT + ["apply", str(patch)], cwd=tmp)
            old, new = touched(patch)
            changed += old + new
            run(GIT + ["add", "--"] + old + new, cwd=tmp)
            run(GIT + ["commit", "-q", "-m", patch.name], cwd=tmp)
            stat = run(GIT + ["diff", "--shortstat", "HEAD~1", "HEAD"], cwd=tmp)[1].strip()
            record(results, f"{patch.name}: applies", True, stat)
            tests += [tmp / f for f in new if f.startswith("test/") and f.endswith(".py")]
            if not tests:
                record(results, f"{patch.name}: tests", False, "the series adds no test up to this patch")
                continue
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "nmp_check_torch_plugin",
                   "-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp), *map(str, tests)]
            rc, out, secs = run(cmd, env=env, cwd=tmp)
            tail = [line for line in out.strip().splitlines() if line.strip()][-1:] or [""]
            record(results, f"{patch.name}: tests of patches 1..{PATCHES.index(patch) + 1}", rc == 0,
                   tail[0].strip("= "), secs, out)
        if applied:
            patched = run(GIT + ["rev-parse", "HEAD^{tree}"], cwd=tmp)[1].strip()
            run(GIT + ["checkout", "-q", "-b", "am", baseline], cwd=tmp)
            rc, out, secs = run(GIT + ["am", "-q"] + [str(p) for p in PATCHES], cwd=tmp)
            am_tree = run(GIT + ["rev-parse", "HEAD^{tree}"], cwd=tmp)[1].strip()
            record(results, "git am of the series", rc == 0 and am_tree == patched,
                   "same tree as git apply" if am_tree == patched else "different tree", secs, out)
            long_lines = [line for p in PATCHES for line in added_lines(p) if len(line) > 120]
            record(results, "added lines fit in 120 columns", not long_lines, "; ".join(long_lines[:3]))
            # ruff: new files clean; changed files gain no diagnostic over v2.13.0 (some have old ones)
            new_diags, outs = 0, []
            for f in sorted({f for f in changed if f.endswith(".py")}):
                after = _ruff_count(tmp / f, tmp)
                base = tmp / ".baseline" / f
                base.parent.mkdir(parents=True, exist_ok=True)
                rc, text, _ = run(GIT + ["show", f"{baseline}:{f}"], cwd=tmp)
                base.write_text(text if rc == 0 else "")
                before = _ruff_count(base, tmp)
                if after > before:
                    new_diags += after - before
                    outs.append(f"{f}: {before} -> {after} diagnostics")
            record(results, "ruff: no new diagnostics in the changed files", new_diags == 0, "; ".join(outs))
            rc, out, secs = run([sys.executable, "-c", WORKAROUND_PROBE], env=env, cwd=PROJECT)
            ok = rc == 0 and "raw_stream_fixed True" in out and "cpu_benchmark_routed True" in out
            record(results, "triton-nmp's workarounds see the fixes (and stand down)", ok,
                   " ".join(out.split()[-4:]) if rc == 0 else "", secs, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    failed = [r for r in results if r[1] == "FAIL"]
    print(f"\nsummary: {len(results) - len(failed)} passed, {len(failed)} failed in {time.time() - started:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
