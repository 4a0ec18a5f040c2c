"""Multi-buffering and scratchpad use of matmul 1024^3 fp16, the legality query's speed, and the
scratchpad of the library-kernel corpus.

Table 1: per tile size and num_stages (1 = no multi-buffering), the simulated time, the speedup
over num_stages=1 of the same tiles (the baseline, measured in this run), and the scratchpad peak
per program from the compiler's plan. Placement: "replicated" operands (every read local, so the
DMA/compute balance is the tile's) and the default "interleaved" (remote-bound).

Table 2: the legality query per config, cold (first config of a kernel: frontend to TTIR, lowering,
planning) and warm (TTIR cached: lowering and planning only).

Table 3 (`--corpus`): every case of the library-kernel corpus (`tests/corpus.py`) at every hidden size
with every config its library ships: the scratchpad peak per program and the bytes spilled to the
PU's bank now, against the same figures recorded before the leaner-buffer / strip-mining /
spilling work (`benchmarks/corpus_baseline.json`, measured on main at the commit it names;
`--record-baseline` rewrites it from the current tree). It ends with the row gathers (`% M` matmul vs
masked, embeddings) and the element gathers/scatters/atomics: scratchpad peak now against the
pointer-tile form (`benchmarks/element_gather_baseline.json`).

    python benchmarks/scratchpad.py [--size 1024]
    python benchmarks/scratchpad.py --corpus [--cases NAME ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
from _report import table  # noqa: E402  (benchmarks/ is sys.path[0] when run as a script)

import triton_nmp
from triton_nmp import examples as ex
from triton_nmp import tuning_suite as ts
from triton_nmp.legality import check_config, clear_cache

TILES = [(32, 32, 32), (64, 64, 32), (64, 64, 64), (128, 128, 64), (128, 128, 128)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--corpus", action="store_true", help="only the corpus table (table 3)")
    ap.add_argument("--cases", nargs="*", default=None, help="corpus cases to run (default: all)")
    ap.add_argument("--record-baseline", action="store_true", help=f"write {BASELINE.name} from this tree")
    ap.add_argument("--record-element-baseline", action="store_true",
                    help=f"add the rows {ELEMENT_BASELINE.name} lacks, measured on this tree")
    args = ap.parse_args()
    if args.record_element_baseline:
        triton_nmp.activate()
        element_gather_table(record=True)
        return 0
    if args.corpus or args.record_baseline:
        triton_nmp.activate()
        status = corpus_table(args.cases, args.record_baseline)
        if not args.cases:
            row_gather_table()
            element_gather_table(record=False)
        return status
    n = args.size
    triton_nmp.activate()
    spec = triton_nmp.active_target()
    print(f"matmul {n}x{n}x{n} fp16 on {spec.name} ({spec.num_pus} PUs, {spec.spm_bytes // 1024} KiB scratchpad)")
    for placement in ("replicated", "interleaved"):
        case = ts._matmul_case(f"mm-{placement}", n, n, n, {})
        a, b = case.args()["a_ptr"], case.args()["b_ptr"]
        if placement == "replicated":
            triton_nmp.place(a, "replicated")
            triton_nmp.place(b, "replicated")
        print(f"\noperands {placement}:")
        hdr = (f"{'tiles (M,N,K)':<16} {'stages':>6} {'sim us':>10} {'vs stages=1':>11} {'SPM peak KiB':>12} "
               f"{'legal':>6}")
        print(hdr)
        print("-" * len(hdr))
        for bm, bn, bk in TILES:
            base = None
            for stages in (1, 2, 3):
                cfg = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "pu_mapping": "round_robin"},
                                    num_stages=stages)
                v = check_config(case.kernel, case.args(), cfg)
                if not v.legal:
                    print(f"{str((bm, bn, bk)):<16} {stages:>6} {'-':>10} {'-':>11} {v.spm_peak_bytes / 1024:>12.0f} "
                          f"{'no':>6}  ({v.reason})")
                    continue
                t = ts.simulate(case, cfg)
                base = base or t
                print(f"{str((bm, bn, bk)):<16} {stages:>6} {t * 1e6:>10.1f} {base / t:>10.2f}x "
                      f"{v.spm_peak_bytes / 1024:>12.0f} {'yes':>6}")
        del a, b
    # legality query timing
    clear_cache()
    case = ts._matmul_case("mm-legality", n, n, n, {})
    cold, warm = [], []
    for bm, bn, bk in TILES:
        for stages in (1, 2, 3):
            cfg = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_stages=stages)
            t0 = time.perf_counter()
            check_config(case.kernel, case.args(), cfg)
            (cold if stages == 1 else warm).append(time.perf_counter() - t0)
    clear_cache()
    x = torch.empty(1 << 20)
    t0 = time.perf_counter()
    check_config(ex.add_kernel, dict(x_ptr=x, y_ptr=x, out_ptr=x, n=x.numel()), {"BLOCK": 1024})
    first = time.perf_counter() - t0
    print("\nlegality query per config (median): "
          f"cold (new tile sizes: frontend + lowering + plan) {1e3 * statistics.median(cold):.1f} ms "
          f"(goal < 200), warm (same TTIR, other num_stages) {1e3 * statistics.median(warm):.1f} ms (goal < 20); "
          f"first query of a new kernel {1e3 * first:.1f} ms")
    return 0


BASELINE = Path(__file__).with_name("corpus_baseline.json")


def _corpus_rows(names: list[str] | None) -> list[dict]:
    """Legality verdicts of every corpus case x hidden size x config (compile only: no LLVM, no run)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root: tests.corpus
    from tests.corpus import CASES

    rows = []
    for case in CASES:
        if names and case.name not in names:
            continue
        for hidden in case.sizes:
            for cfg in case.configs(hidden):
                ln = case.launch(hidden, case.rows, cfg, meta=True)
                v = check_config(case.kernel, ln.args, cfg)
                rows.append({"case": case.name, "hidden": hidden, "config": _cfg_text(cfg), "legal": v.legal,
                             "peak": v.spm_peak_bytes, "spill": getattr(v, "spill_bytes", 0),
                             "reason": "" if v.legal else v.reason})
    return rows


def _cfg_text(cfg: dict) -> str:
    short = {"BLOCK_SIZE_M": "BM", "BLOCK_SIZE_N": "BN", "BLOCK_SIZE_K": "BK", "GROUP_SIZE_M": "G",
             "num_stages": "s"}
    return ",".join(f"{short.get(k, k)}={v}" for k, v in cfg.items())


def corpus_table(names: list[str] | None, record: bool) -> int:
    rows = _corpus_rows(names)
    if record:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        BASELINE.write_text(json.dumps({"commit": commit, "rows": rows}, indent=1) + "\n")
        print(f"wrote {BASELINE} ({len(rows)} rows, commit {commit})")
    base = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"commit": "-", "rows": []}
    before = {(r["case"], r["hidden"], r["config"]): r for r in base["rows"]}
    spec = triton_nmp.active_target()
    print(f"corpus scratchpad per program on {spec.name} ({spec.spm_bytes} B); before = main at {base['commit']}")
    header = ["case", "hidden", "config", "before peak", "before", "peak", "spilled", "now", "peak after/before"]
    out = []
    for r in rows:
        b = before.get((r["case"], r["hidden"], r["config"]))
        bpeak = str(b["peak"]) if b else "-"
        bok = ("fits" if b["legal"] else "REFUSED") if b else "-"
        ratio = f"{r['peak'] / b['peak']:.2f}" if b and b["peak"] else "-"
        out.append([r["case"], str(r["hidden"]), r["config"], bpeak, bok, str(r["peak"]), str(r["spill"]),
                    "fits" if r["legal"] else "REFUSED", ratio])
    print(table(header, out, {1, 3, 5, 6, 8}))
    legal = sum(r["legal"] for r in rows)
    spilled = sum(1 for r in rows if r["spill"])
    fit_before = sum(1 for r in rows if before.get((r["case"], r["hidden"], r["config"]), {}).get("legal"))
    regressions = [r for r in rows if r["spill"] and before.get((r["case"], r["hidden"], r["config"]), {}).get("legal")]
    print(f"\n{legal} of {len(rows)} compile now ({fit_before} before); {spilled} spill; "
          f"{len(regressions)} spill although they fit before")
    for r in rows:
        if not r["legal"]:
            print(f"REFUSED {r['case']} hidden={r['hidden']} {r['config']}: {r['reason']}")
    return 0


def row_gather_table() -> None:
    """Row gathers: the matmul tutorial's `% M` rows against the masked matmul (the baseline, same run),
    and embedding lookups with int32 and int64 ids (DMA descriptors, no element gathers)."""
    from tests.corpus import CASES, matmul_masked, matmul_tutorial

    n = 256
    torch.manual_seed(0)
    a, b = torch.randn(n, n).half(), torch.randn(n, n).half()
    print(f"\nrow gathers: matmul {n}^3 fp16, `% M` rows (tutorial) vs masked rows (baseline), simulated us")
    header = ["config", "masked us", "% M us", "% M / masked", "% M gather elems"]
    out = []
    for cfg in ({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "num_stages": 2},
                {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "num_stages": 3},
                {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 32, "num_stages": 4}):
        cfg = dict(cfg, GROUP_SIZE_M=8)
        us, gathers = {}, {}
        for k in (matmul_masked, matmul_tutorial):
            c = torch.empty(n, n, dtype=torch.float16)
            grid = (triton.cdiv(n, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"]),)
            with triton_nmp.profile() as prof:
                k[grid](a, b, c, n, n, n, n, 1, n, 1, n, 1, **cfg)
            torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
            us[k] = prof.launches[-1].sim_seconds * 1e6
            gathers[k] = prof.launches[-1].counters.get("gather_elems", 0)
        out.append([_cfg_text(cfg), f"{us[matmul_masked]:.1f}", f"{us[matmul_tutorial]:.1f}",
                    f"{us[matmul_tutorial] / us[matmul_masked]:.3f}", str(gathers[matmul_tutorial])])
    print(table(header, out, {1, 2, 3, 4}))
    print("\nembedding lookup (Liger form), hidden 4096, 256 ids: DMA descriptors, element gathers, simulated us")
    header = ["ids", "dma loads", "gather elems", "sim us"]
    out = []
    for name in ("embedding_fwd_i32", "embedding_fwd_i64"):
        case = next(c for c in CASES if c.name == name)
        cfg = case.configs(4096)[0]
        with triton_nmp.profile() as prof:
            case.run(4096, 256, cfg)
        rec = prof.launches[-1]
        out.append([name[-3:], str(rec.counters.get("dma_loads", 0)), str(rec.counters.get("gather_elems", 0)),
                    f"{rec.sim_seconds * 1e6:.1f}"])
    print(table(header, out, {1, 2, 3}))


ELEMENT_BASELINE = Path(__file__).with_name("element_gather_baseline.json")


def _element_cases():
    """(name, kernel, args, config) of element gathers/scatters (`tests/test_element_gather.py`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests import test_element_gather as eg

    cases = []
    for ids in (torch.int64, torch.int32):
        tag = "i64" if ids == torch.int64 else "i32"
        table, n = torch.empty(50257, 768), 8 * 768
        cases.append((f"embedding (Inductor form) {tag} ids", eg.embedding_flat,
                      dict(table=table, ids=torch.zeros(8, dtype=ids), out=torch.empty(n), n=n),
                      {"D": 768, "XBLOCK": 4096}))
        x = torch.empty(2 * 4096)
        cases.append((f"gather, sum, scatter {tag} ids", eg.gather_normalize_scatter,
                      dict(x=x, ids=torch.zeros(4096, dtype=ids), n=4096), {"BLOCK": 4096}))
        cases.append((f"scatter out[perm] = x {tag} perm", eg.scatter_perm,
                      dict(src=torch.empty(4096), perm=torch.zeros(4096, dtype=ids), out=torch.empty(4096),
                           n=4096), {"BLOCK": 4096}))
    cases.append(("both axes indexed 128x128 i64", eg.both_axes_indexed,
                  dict(table=torch.empty(1000, 256), rows=torch.zeros(128, dtype=torch.int64),
                       cols=torch.zeros(128, dtype=torch.int64), out=torch.empty(128, 128)),
                  {"D": 256, "BM": 128, "BN": 128}))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests import test_element_atomic as ea

    for ids in (torch.int64, torch.int32):
        tag = "i64" if ids == torch.int64 else "i32"
        cases.append((f"atomic embedding backward 8x768 {tag} ids", ea.embedding_backward,
                      dict(grad_out=torch.empty(8, 768), ids=torch.zeros(8, dtype=ids),
                           grad_table=torch.empty(50257, 768), n=8), {"D": 768, "BM": 8, "BD": 1024}))
        cases.append((f"atomic histogram {tag} bins", ea.histogram,
                      dict(x=torch.zeros(4096, dtype=ids), hist=torch.zeros(4096, dtype=torch.int32), n=4096),
                      {"BLOCK": 4096}))
        cases.append((f"gather then atomic_add, one address tile {tag} ids", ea.read_then_add,
                      dict(table=torch.empty(2 * 4096), ids=torch.zeros(4096, dtype=ids), delta=torch.empty(4096),
                           seen=torch.empty(4096), n=4096), {"BLOCK": 4096}))
    return cases


def element_gather_table(record: bool) -> None:
    """Element gathers, scatters and atomics (every element its own address): the scratchpad peak per
    program now (argument + offsets tile) against the pointer-tile form (`element_gather_baseline.json`:
    each row recorded on main at the commit it names, by `--record-element-baseline` run with that
    commit's backend)."""
    rows = {}
    for name, kernel, args, cfg in _element_cases():
        rows[name] = check_config(kernel, args, cfg).spm_peak_bytes
    base = json.loads(ELEMENT_BASELINE.read_text()) if ELEMENT_BASELINE.exists() else {"commit": "-", "peaks": {}}
    base.setdefault("row_commits", {})
    if record:  # only the rows the file lacks: the others keep the commit they were measured at
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        for name, peak in rows.items():
            if name not in base["peaks"]:
                base["peaks"][name] = peak
                base["row_commits"][name] = commit
        ELEMENT_BASELINE.write_text(json.dumps(base, indent=1) + "\n")
    print("\nelement gathers/scatters/atomics: scratchpad peak per program, bytes; before = pointer tiles, "
          "measured on main at the commit named")
    header = ["kernel", "before at", "before peak", "peak", "after/before"]
    out = []
    for name, peak in rows.items():
        before = base["peaks"].get(name)
        at = base["row_commits"].get(name, base["commit"]) if before else "-"
        out.append([name, at, str(before or "-"), str(peak), f"{peak / before:.2f}" if before else "-"])
    print(table(header, out, {2, 3, 4}))


if __name__ == "__main__":
    sys.exit(main())
