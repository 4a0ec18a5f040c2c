"""Multi-buffering and scratchpad use of matmul 1024^3 fp16, and the legality query's speed.

Table 1: per tile size and num_stages (1 = no multi-buffering), the simulated time, the speedup
over num_stages=1 of the same tiles (the baseline, measured in this run), and the scratchpad peak
per program from the compiler's plan. Placement: "replicated" operands (every read local, so the
DMA/compute balance is the tile's) and the default "interleaved" (remote-bound).

Table 2: the legality query per config, cold (first config of a kernel: frontend to TTIR, lowering,
planning) and warm (TTIR cached: lowering and planning only).

    python benchmarks/scratchpad.py [--size 1024]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import triton

import triton_nmp
from triton_nmp import examples as ex
from triton_nmp import tuning_suite as ts
from triton_nmp.legality import check_config, clear_cache

TILES = [(32, 32, 32), (64, 64, 32), (64, 64, 64), (128, 128, 64), (128, 128, 128)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
