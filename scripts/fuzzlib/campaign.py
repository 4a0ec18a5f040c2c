"""A long, resumable fuzzing run: seeds `start .. start + count - 1`, one JSON line per kernel.

`results.jsonl` in the output folder is the run's memory: a restarted run skips the seeds it already
holds. Every nmp-attributable failure (and, with `save_all`, every non-ok case) is minimised and
saved as a standalone repro under `repros/<class>/seed<S>.py`. `summary()` prints the triage figures.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from .case import Runner
from .generate import generate
from .minimise import minimise
from .repro import write_repro
from .triage import ATTRIBUTABLE, CLASSES, CaseResult


def done_seeds(results: Path) -> set[int]:
    if not results.exists():
        return set()
    out = set()
    for line in results.read_text().splitlines():
        try:
            out.add(json.loads(line)["seed"])
        except (ValueError, KeyError):
            continue  # a line cut by a kill mid-write
    return out


def forget(out: Path, classes: set[str]) -> int:
    """Drop the results of these classes (kept in results.jsonl.bak), so a run does those seeds again:
    after a fix in nmp or in the oracle."""
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    keep = [line for line in lines if line.strip() and json.loads(line)["cls"] not in classes]
    with (out / "results.jsonl.bak").open("a") as f:
        f.write("\n".join(line for line in lines if line not in keep) + "\n")
    results.write_text("".join(line + "\n" for line in keep))
    return len(lines) - len(keep)


def run(out: Path, start: int, count: int, timeout: float, minimise_failures: bool = True,
        save_all: bool = False, log=print) -> list[CaseResult]:
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    skip = done_seeds(results)
    runner = Runner(out / "work", timeout)
    new: list[CaseResult] = []
    t0 = time.monotonic()
    try:
        for seed in range(start, start + count):
            if seed in skip:
                continue
            p = generate(seed)
            r = runner.run(p, seed=seed)
            if r.cls != "ok" and (r.attributable or save_all) and minimise_failures:
                small, steps = minimise(p, r, runner)
                path = write_repro(out / "repros" / r.cls, seed, small, r)
                r.detail += f"\n[repro: {path} ({steps} minimisation steps)]"
            with results.open("a") as f:
                f.write(json.dumps(asdict(r)) + "\n")
            new.append(r)
            if r.cls != "ok":
                log(f"seed {seed}: {r.cls} {r.reason} {r.detail.splitlines()[0][:200] if r.detail else ''}")
            if len(new) % 100 == 0:
                rate = len(new) / (time.monotonic() - t0)
                log(f"{len(new) + len(skip)} done ({rate:.2f} kernels/s)")
    finally:
        runner.close()
    return new


def summary(out: Path) -> str:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    by_cls = Counter(r["cls"] for r in rows)
    reasons = Counter((r["cls"], r["reason"]) for r in rows if r["cls"] != "ok")
    tags = Counter(("cast" if t.startswith("cast:") else t) for r in rows for t in r["tags"])
    casts = {t for r in rows for t in r["tags"] if t.startswith("cast:")}
    checked = sum(r["checked"] for r in rows)
    undetermined = sum(r["undetermined"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    n = max(len(rows), 1)
    nmp_s, interp_s = (sum(r.get(k, 0.0) for r in rows) / n for k in ("nmp_seconds", "interp_seconds"))
    lines = [f"{len(rows)} kernels, {seconds / n:.2f} s each (nmp child {nmp_s:.2f} s, interpreter child "
             f"{interp_s:.2f} s, in parallel); {checked} output elements compared, "
             f"{undetermined} undetermined (not compared)",
             f"nmp-attributable: {sum(by_cls[c] for c in ATTRIBUTABLE)} "
             + " ".join(f"{c}={by_cls[c]}" for c in ATTRIBUTABLE),
             "not attributable: " + " ".join(f"{c}={by_cls[c]}" for c in CLASSES if c not in ATTRIBUTABLE)]
    for (c, reason), n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {c:15s} {n:6d}  {reason[:100]}")
    feats = [(t, k) for t, k in tags.items() if ":" in t or t == "cast"]
    lines.append("coverage (kernels per feature): " + ", ".join(f"{t} {k}" for t, k in sorted(feats))
                 + f"; {len(casts)} distinct cast pairs")
    return "\n".join(lines)
