"""Roofline table of the kernel suite on a target, and simulator speed (full vs timing-only).

For each kernel: simulated time, the roofline lower bound for the launch's own flops and local/remote
bytes (`TargetSpec.roofline_seconds`), the achieved fraction of that bound, the local-bandwidth bound
(the same flops, every byte at local bank bandwidth: what the machine can do when data lives where it
is computed) and the fraction of it, bytes local/remote, and for matmul the fraction of the machine's
peak MAC rate. Placement is whatever the default policy does (`auto` unless `--placement` says
otherwise): no place() call is made. Then the host cost of simulation: seconds
per launch for the full functional simulation and for the timing-only variant (same trace, no data).

    python benchmarks/roofline.py [--quick] [--target nmp-64] [--placement interleaved]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import triton_nmp
from triton_nmp import examples as ex
from triton_nmp.simulator import loader, runtime
from triton_nmp.simulator.timing import arg_buffers_from_slots, simulate_timing


def _launches(quick: bool):
    s = 4 if quick else 1
    g = torch.Generator().manual_seed(0)
    n = (16 << 20) // s
    x, y = torch.randn(n, generator=g), torch.randn(n, generator=g)
    sm = torch.randn(4096 // s, 1024, generator=g)
    ln = torch.randn(2048 // s, 4096, generator=g)
    w, b = torch.randn(4096, generator=g), torch.randn(4096, generator=g)
    mm = 2048 // s
    a, bm = torch.randn(mm, mm, generator=g).half(), torch.randn(mm, mm, generator=g).half()
    mm1 = 1024 // s
    a1, b1 = torch.randn(mm1, mm1, generator=g).half(), torch.randn(mm1, mm1, generator=g).half()
    q, k, v = (torch.randn(16 // s, 1024, 64, generator=g).half() for _ in range(3))
    return [
        ("vector_add", f"n={n} fp32", lambda: ex.add(x, y, block=4096), None),
        ("softmax", f"{sm.shape[0]}x1024 fp32", lambda: ex.softmax(sm), None),
        ("layernorm", f"{ln.shape[0]}x4096 fp32", lambda: ex.layernorm(ln, w, b, block=1024), None),
        ("matmul", f"{mm}^3 fp16 128x128x64", lambda: ex.matmul(a, bm, 128, 128, 64), "fp16"),
        ("matmul", f"{mm1}^3 fp16 64x64x64", lambda: ex.matmul(a1, b1, 64, 64, 64), "fp16"),
        ("attention", f"bh={q.shape[0]} seq=1024 d=64 fp16", lambda: ex.attention(q, k, v, False, None, 64, 64),
         "fp16"),
    ]


def main() -> int:
    os.environ["TRITON_NMP_TIMING_VARIANT"] = "1"  # compile the timing-only variant too (compared below)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--target", default=None)
    ap.add_argument("--repeat", type=int, default=3, help="host-time repetitions (median)")
    ap.add_argument("--placement", default=None, help="default policy of new tensors (auto, interleaved, ...)")
    args = ap.parse_args()
    triton_nmp.activate(args.target)
    if args.placement:
        triton_nmp.set_default_placement(args.placement)
    spec = triton_nmp.active_target()
    captured = {}
    real = runtime.run_grid

    def spy(fn, slots, grid, abi, spans=(), metadata=None, *rest, **kw):
        r = real(fn, slots, grid, abi, spans, metadata, *rest, **kw)
        captured["last"] = (list(slots), grid, metadata)
        return r

    import triton_nmp.driver.launcher as launcher_mod

    launcher_mod.run_grid = spy
    rows = []
    for name, shape, fn, dtype in _launches(args.quick):
        fn()  # compile
        with triton_nmp.profile() as prof:
            keep = fn()  # the outputs must outlive the re-runs below, which write into them
        rec = prof.launches[-1]
        slots, grid, meta = captured["last"]
        kernel = getattr(ex, meta.name)
        ck = next(k for dc in kernel.device_caches.values() for k in dc[0].values() if k.metadata.hash == meta.hash)
        obj = loader.load_object(ck.asm["nmpbin"], meta.name)
        abi = runtime.KernelABI.from_metadata(meta)
        buffers = arg_buffers_from_slots(meta, slots)

        def host_seconds(symbol: str, obj=obj, slots=slots, grid=grid, abi=abi, buffers=buffers, meta=meta) -> float:
            """Median wall time of one simulated launch: native run + timing model."""
            entry = runtime.entry_function(obj.address(symbol))
            samples = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                r = runtime.run_grid(entry, runtime.make_slots(slots), grid, abi)
                simulate_timing(r.trace, grid, buffers, spec, mapping=meta.pu_mapping)  # auto: both mappings
                samples.append(time.perf_counter() - t0)
            return statistics.median(samples)

        full = host_seconds(meta.nmp_entry)
        tonly = host_seconds(meta.nmp_timing_entry) if meta.nmp_timing_entry else None
        obj.close()
        del keep
        peak = ""
        if dtype and rec.flops:
            macs_per_s = spec.peak_flops(dtype) / 2
            peak = f"{100 * (rec.flops / 2) / rec.sim_seconds / macs_per_s:.1f}%"
        local_bound = spec.roofline_seconds(rec.flops, rec.bytes_local + rec.bytes_remote, 0.0, dtype or "fp16")
        rows.append((name, shape, rec.sim_seconds, rec.roofline_seconds, local_bound, rec.bytes_local,
                     rec.bytes_remote, peak, full, tonly))
    print(f"target {spec.name}: {spec.num_pus} PUs, {spec.local_bytes_per_second / 1e9:.0f} GB/s local, "
          f"{spec.remote_bytes_per_second / 1e9:.0f} GB/s remote, "
          f"{spec.peak_flops('fp16') / 1e12:.2f} TFLOP/s fp16")
    hdr = (f"{'kernel':<11} {'shape':<30} {'sim us':>10} {'bound us':>10} {'% bound':>8} {'local us':>9} "
           f"{'% local':>8} {'MB local':>9} {'MB remote':>10} {'% peak MAC':>10} {'host full s':>11} "
           f"{'timing-only s':>13} {'speedup':>8}")
    print(hdr)
    print("-" * len(hdr))
    for name, shape, sim, bound, lbound, bl, br, peak, full, tonly in rows:
        t = f"{tonly:>13.4f}" if tonly is not None else f"{'n/a':>13}"
        sp = f"{full / tonly:>7.1f}x" if tonly else f"{'':>8}"
        print(f"{name:<11} {shape:<30} {sim * 1e6:>10.1f} {bound * 1e6:>10.1f} {100 * bound / sim:>7.1f}% "
              f"{lbound * 1e6:>9.1f} {100 * lbound / sim:>7.1f}% "
              f"{bl / 1e6:>9.2f} {br / 1e6:>10.2f} {peak:>10} {full:>11.4f} {t} {sp}")
    print(f"\n% bound = roofline lower bound for the launch's own local/remote bytes / simulated time; % local = the "
          f"same with every byte local (flops at peak, bytes at {spec.local_bytes_per_second / 1e9:.0f} GB/s).")
    print(f"placement: default policy '{triton_nmp.default_placement()}' (no place() calls); mapping: each kernel's "
          f"default pu_mapping ('auto').")
    print("host s = wall time of one simulated launch (native run + timing model), full functional simulation vs "
          "the timing-only variant; median of", args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
