"""Tests of the timing model: synthetic traces against hand-computed cycles, and validation runs of
real Triton kernels (placement + pu_mapping must show in the simulated bandwidth)."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
import torch

from triton_nmp.errors import NMPRuntimeError
from triton_nmp.placement import Placement, clear_placements, place
from triton_nmp.simulator.timing import (
    ArgBuffer,
    LaunchTiming,
    _weighted_locality,
    arg_buffers,
    arg_buffers_from_slots,
    simulate_launch,
    simulate_timing,
)
from triton_nmp.target import TargetSpec

SPEC = TargetSpec()  # the nmp-64 numbers: 8x8 PUs, 16 B/cycle banks, 4 B/cycle remote, 100-cycle DMA setup
LOAD, STORE, GATHER, SCATTER, VEC, MATMUL, WAIT = range(1, 8)
FP32, FP16, BF16, FP64, INT8 = 0, 1, 2, 3, 4
_ptrs = itertools.count(1 << 40, 1 << 32)  # fake, disjoint host addresses


def rec(kind: int, prog: int, *fields: int) -> list[int]:
    return [kind, prog, *fields] + [0] * (6 - len(fields))


def load(prog, arg, off, nbytes, rows=1, stride=None, flags=0, kind=LOAD):
    return rec(kind, prog, arg, off, rows, nbytes, nbytes if stride is None else stride, flags)


def buf(name: str, nbytes: int, policy: str = "interleaved", bank: int | None = None, gran: int | None = 1024):
    ptr = next(_ptrs)
    gran = gran if policy == "interleaved" else None
    return ArgBuffer(name, ptr, nbytes, Placement(policy, bank, gran, nbytes, ptr))


def sim(records, grid, args, spec=SPEC, **kw) -> LaunchTiming:
    t = simulate_timing(np.array(records, dtype=np.int64).reshape(-1, 8), grid, args, spec, **kw)
    assert t.seconds >= t.roofline_seconds * (1 - 1e-9)  # the model never beats its own lower bound
    return t


# ----------------------------------------------------------------------------------- DMA cost


@pytest.mark.parametrize("size", [32, 64, 100, 128, 512, 1000, 1024, 4096, 8192, 16384, 32768, 65536])
def test_dma_size_sweep_matches_setup_plus_bytes_over_bandwidth(size):
    t = sim([load(0, 0, 0, size)], (1,), [buf("x", 1 << 20, "bank", 0)])
    expected = SPEC.dma_setup_cycles + size / SPEC.bank_bytes_per_cycle
    assert t.device_cycles == pytest.approx(expected, rel=0.05)
    assert t.bytes_local == size and t.bytes_remote == 0
    assert t.cycles == pytest.approx(t.device_cycles + SPEC.launch_overhead_us * 1e3 * SPEC.clock_ghz)


def test_large_dma_splits_into_descriptor_batches():
    # 128 KiB = 16 descriptors of 8 KiB, 8 in flight: two setup latencies
    t = sim([load(0, 0, 0, 1 << 17)], (1,), [buf("x", 1 << 20, "bank", 0)])
    assert t.device_cycles == 2 * 100 + (1 << 17) / 16


def test_misaligned_and_ragged_rows_move_whole_granules():
    # 64 rows of 40 bytes starting 8 bytes into a granule: each row touches 2 granules (64 bytes)
    t = sim([load(0, 0, 8, 40, rows=64, stride=256)], (1,), [buf("x", 1 << 20, "bank", 0)])
    assert t.bytes_moved == 64 * 64 and t.bytes_local == 64 * 40
    assert t.device_cycles == 100 + 64 * 64 / 16


def test_remote_read_is_four_times_slower_and_pays_hops():
    size = 65536
    local = sim([load(0, 0, 0, size)], (1,), [buf("x", 1 << 20, "bank", 0)])
    near = sim([load(0, 0, 0, size)], (1,), [buf("x", 1 << 20, "bank", 1)])  # PU 0 -> bank 1: 1 hop
    far = sim([load(0, 0, 0, size)], (1,), [buf("x", 1 << 20, "bank", 63)])  # 7 + 7 hops
    assert near.bytes_remote == size and near.bytes_local == 0
    assert near.device_cycles == 100 + 9 * 1 + size / 4
    assert near.device_cycles / local.device_cycles == pytest.approx((109 + size / 4) / (100 + size / 16))
    assert far.device_cycles - near.device_cycles == 9 * 13


def test_interleaved_default_is_mostly_remote():
    t = sim([load(0, 0, 0, 65536)], (1,), [buf("x", 1 << 20)])
    assert t.bytes_local == 1024 and t.bytes_remote == 65536 - 1024  # one granule of 64 in the PU's bank
    assert np.all(t.bank_bytes == 1024)


@pytest.mark.parametrize(
    "placement",
    [("interleaved", None, 256), ("interleaved", None, 1024), ("blocked", None, None), ("bank", 5, None)],
)
def test_strided_records_match_a_byte_by_byte_reference(placement):
    """Pattern grouping and row folding must not change any byte's bank (2x4 mesh, odd tensor size),
    and misaligned rows move whole granules."""
    spec = TargetSpec(name="m24", mesh_rows=2, mesh_cols=4)
    rng = np.random.default_rng(11)
    nbytes = 999_936
    x = buf("x", nbytes, *placement)
    aligned, ragged, ref, moved = [], [], np.zeros(8), 0
    for i in range(300):
        rows = int(rng.integers(1, 40))
        stride, row_bytes, off = int(rng.choice([0, 32, 96, 256, 2048, 4096, -512])), int(rng.integers(1, 300)), 0
        if i % 2 == 0:  # aligned: moved bytes = useful bytes, so bank bytes are comparable one to one
            row_bytes = -(-row_bytes // 32) * 32
        else:
            stride += int(rng.integers(0, 32))
        if rng.random() < 0.2:
            stride = row_bytes  # contiguous rows
        span = (rows - 1) * stride
        off = int(rng.integers(max(0, -span), nbytes - max(span, 0) - row_bytes))
        off = off // 32 * 32 if i % 2 == 0 else off
        starts = off + stride * np.arange(rows)
        runs = [(off, rows * row_bytes)] if stride == row_bytes and rows > 1 else [(s, row_bytes) for s in starts]
        moved += sum(-(-(s % 32 + n) // 32) * 32 for s, n in runs)
        (aligned if i % 2 == 0 else ragged).append(load(0, 0, off, row_bytes, rows=rows, stride=stride))
        if i % 2 == 0:
            ref += sum(x.placement.bank_bytes([s], [n], 0, 8) for s, n in runs)
    t = simulate_timing(np.array(aligned), (1,), [x], spec)
    np.testing.assert_allclose(t.bank_bytes, ref, atol=1e-6)
    assert simulate_timing(np.array(aligned + ragged), (1,), [x], spec).bytes_moved == moved


def test_gather_spreads_elements_over_the_span():
    t = sim([rec(GATHER, 0, 0, 0, 1000, 4, 1 << 20)], (1,), [buf("x", 1 << 20)])
    assert t.bytes_moved == 1000 * 32  # every element moves a whole granule
    assert t.bytes_local + t.bytes_remote == pytest.approx(4000)
    np.testing.assert_allclose(t.bank_bytes, 32000 / 64)


# ------------------------------------------------------------------------------------ compute


@pytest.mark.parametrize(
    "record, cycles, flops",
    [
        (rec(VEC, 0, 4096, 0, FP32), 128, 4096),
        (rec(VEC, 0, 4096, 1, FP16), 128, 4096),  # reductions and 16-bit types: same lanes
        (rec(VEC, 0, 4096, 0, FP64), 256, 4096),
        (rec(VEC, 0, 33, 0, FP32), 2, 33),
        (rec(MATMUL, 0, 64, 64, 32, FP16), 1024, 2 * 64 * 64 * 32),
        (rec(MATMUL, 0, 64, 64, 32, BF16), 1024, 2 * 64 * 64 * 32),
        (rec(MATMUL, 0, 64, 64, 32, FP32), 4096, 2 * 64 * 64 * 32),
        (rec(MATMUL, 0, 64, 64, 32, INT8), 512, 2 * 64 * 64 * 32),
        (rec(MATMUL, 0, 64, 64, 32, FP64), 8192, 2 * 64 * 64 * 32),
    ],
)
def test_compute_cycles(record, cycles, flops):
    t = sim([record], (1,), [])
    assert t.compute_cycles == cycles and t.device_cycles == cycles and t.flops == flops


def test_prefetched_loads_overlap_the_preceding_compute():
    x, y = buf("x", 1 << 20, "bank", 0), buf("y", 1 << 20, "bank", 0)
    ld = 100 + 16384 / 16  # 1124 cycles
    mm = rec(MATMUL, 0, 64, 64, 32, FP16)  # 1024 cycles
    store = load(0, 1, 0, 16384, kind=STORE)
    serial = [load(0, 0, 0, 16384), mm, load(0, 0, 0, 16384), mm, load(0, 0, 0, 16384), mm, store]
    assert sim(serial, (1,), [x, y]).device_cycles == 4 * ld + 3 * 1024
    pipelined = [load(0, 0, 0, 16384), mm, load(0, 0, 0, 16384, flags=1), mm, load(0, 0, 0, 16384, flags=1), mm, store]
    t = sim(pipelined, (1,), [x, y])
    assert t.device_cycles == ld + 2 * max(1024, ld) + 1024 + ld
    assert t.dma_cycles == 4 * ld and t.compute_cycles == 3 * 1024  # totals are not overlapped
    waited = [load(0, 0, 0, 16384), mm, rec(WAIT, 0), load(0, 0, 0, 16384, flags=1), mm,
              load(0, 0, 0, 16384, flags=1), mm, store]  # fmt: skip
    assert sim(waited, (1,), [x, y]).device_cycles == (ld + 1024) + ld + max(1024, ld) + 1024 + ld


# ------------------------------------------------------------------------------- contention


def test_bank_contention_all_programs_on_one_bank():
    n, size = 64, 16384
    trace = [load(p, 0, p * size, size) for p in range(n)]
    hot = sim(trace, (n,), [buf("x", n * size, "bank", 0)])
    spread = sim(trace, (n,), [buf("x", n * size, "blocked")])
    assert spread.bytes_remote == 0 and spread.device_cycles == 100 + size / 16
    assert hot.device_cycles == pytest.approx(n * size / 16)  # bank 0 serves 1 MiB at 16 B/cycle
    assert hot.limits() == {"pu": 0, "bank": 1, "link": 0}
    assert hot.device_cycles / spread.device_cycles > 50


LINE = TargetSpec(name="line", mesh_rows=1, mesh_cols=4, noc_link_bytes_per_cycle=4.0, remote_read_bytes_per_cycle=4.0)


@pytest.mark.parametrize("kind", [LOAD, STORE])
def test_link_contention_on_a_line(kind):
    # PUs 1, 2, 3 each move 16 KiB from/to bank 0: every byte crosses the link between PUs 0 and 1
    trace = [load(p, 0, 0, 16384, kind=kind) for p in (1, 2, 3)]
    t = sim(trace, (4,), [buf("x", 1 << 20, "bank", 0)], spec=LINE)
    assert t.device_cycles == pytest.approx(3 * 16384 / 4)
    assert t.limits() == {"pu": 0, "bank": 0, "link": 1}


def _xy_links(spec: TargetSpec, src: int, dst: int):
    (r0, c0), (r1, c1) = spec.pu_coords(src), spec.pu_coords(dst)
    step = 1 if c1 > c0 else -1
    for c in range(c0, c1, step):
        yield ("x", r0, c, c + step)
    step = 1 if r1 > r0 else -1
    for r in range(r0, r1, step):
        yield ("y", c1, r, r + step)


def test_link_loads_match_a_brute_force_xy_router():
    spec = TargetSpec(name="m33", mesh_rows=3, mesh_cols=3, noc_link_bytes_per_cycle=0.25)
    rng = np.random.default_rng(3)
    args = [buf(f"b{i}", 1 << 20, "bank", i) for i in range(9)] + [buf("il", 1 << 20, gran=256)]
    trace = []
    for p in range(9):
        for _ in range(4):
            a = int(rng.integers(0, 10))
            trace.append(load(p, a, int(rng.integers(0, 1000)) * 32, int(rng.integers(1, 64)) * 32,
                              kind=int(rng.choice([LOAD, STORE]))))  # fmt: skip
    t = sim(trace, (9,), args, spec=spec)
    assert t.extra["links_exact"]
    links: dict = {}
    for kind, p, a, off, _rows, nbytes, *_ in trace:
        per_bank = args[a].placement.bank_bytes([off], [nbytes], 0, 9)
        for b in np.flatnonzero(per_bank):
            src, dst = (b, p) if kind == LOAD else (p, b)
            for link in _xy_links(spec, int(src), int(dst)):
                links[link] = links.get(link, 0.0) + per_bank[b]
    assert t.extra["wave_link_cycles"][0] == pytest.approx(max(links.values()) / spec.noc_link_bytes_per_cycle)


# ---------------------------------------------------------------------------------- mapping


def _vec_trace(n):
    return [rec(VEC, p, 32, 0, FP32) for p in range(n)]


def test_mapping_policies():
    n = 200
    rr = sim(_vec_trace(n), (n,), [], mapping="round_robin")
    assert np.array_equal(rr.program_pu, np.arange(n) % 64)
    blocked = sim(_vec_trace(n), (n,), [], mapping="blocked")
    assert np.array_equal(blocked.program_pu, np.arange(n) // 4)
    r0 = sim(_vec_trace(n), (n,), [], mapping="random", seed=0)
    assert np.bincount(r0.program_pu, minlength=64).max() == 4  # balanced: a permutation dealt round-robin
    assert np.array_equal(r0.program_pu, sim(_vec_trace(n), (n,), [], mapping="random", seed=0).program_pu)
    assert not np.array_equal(r0.program_pu, sim(_vec_trace(n), (n,), [], mapping="random", seed=1).program_pu)
    assert not np.array_equal(r0.program_pu, rr.program_pu)
    with pytest.raises(NMPRuntimeError, match="unknown pu_mapping 'nearest'"):
        sim(_vec_trace(4), (4,), [], mapping="nearest")


def test_locality_mapping_follows_the_data_and_stays_balanced():
    n, size = 128, 2048
    x = buf("x", n * size, "blocked")  # 64 chunks of 4 KiB: programs 2i and 2i+1 read chunk i
    t = sim([load(p, 0, p * size, size) for p in range(n)], (n,), [x], mapping="locality")
    assert np.array_equal(t.program_pu, np.arange(n) // 2) and t.bytes_remote == 0
    hot = sim([load(p, 0, p * size, size) for p in range(n)], (n,), [buf("x", n * size, "bank", 0)],
              mapping="locality")  # fmt: skip
    assert np.bincount(hot.program_pu, minlength=64).max() == 2  # no PU takes more than ceil(n / P)
    grid = sim([load(p, 0, p * size, size) for p in range(n)], (16, 4, 2), [x], mapping="locality")
    assert np.array_equal(grid.program_pu, t.program_pu)  # linear program id = x + gx * (y + gy * z)


def test_auto_mapping_weighs_remote_reads_against_extra_programs():
    """A weight laid out in fewer banks than PUs (row blocks of 64 rows, 36 banks, as a prefill's tiles left it)
    read by 144 programs of 16 rows (a decode GEMV): the count cap of "locality" sends one program of each
    bank to an idle PU at the remote rate; the uncapped owner-computes mappings keep what the owners read sooner
    themselves."""
    n, size = 144, 24576
    w = buf("w", n * size, gran=4 * size)
    trace = [r for p in range(n) for r in (load(p, 0, p * size, size), rec(MATMUL, p, 1, 16, 768, FP16))]
    auto = sim(trace, (n,), [w], mapping="auto")
    loc = sim(trace, (n,), [w], mapping="locality")
    rr = sim(trace, (n,), [w], mapping="round_robin")
    assert auto.extra["auto_choice"] in ("owner", "weighted locality")
    assert auto.cycles < loc.cycles < rr.cycles
    assert np.bincount(auto.program_pu, minlength=64).max() > -(-n // 64)  # past the count cap
    assert auto.bytes_remote < loc.bytes_remote
    again = sim(trace, (n,), [w], mapping="auto")
    assert np.array_equal(again.program_pu, auto.program_pu) and again.cycles == auto.cycles
    # data every bank holds its share of: the plain mappings already balance, the weighted one changes nothing
    even = sim(trace, (n,), [buf("w", n * size, gran=size)], mapping="auto")
    assert even.extra["auto_choice"] in ("round_robin", "locality") and even.bytes_remote == 0


def test_weighted_locality_moves_programs_off_a_hot_owner_while_that_pays():
    # 8 programs of 1 KiB, all in bank 0 of 4: 64 cycles each at home, 256 cycles anywhere else
    owner_bytes = np.zeros((8, 4))
    owner_bytes[:, 0] = 1024
    pu = _weighted_locality(owner_bytes, 4, 16.0, 4.0)
    assert np.array_equal(np.bincount(pu, minlength=4), [5, 1, 1, 1])  # 5 x 64 at home beats a second remote one


# ----------------------------------------------------------------------------- replication


def test_replicated_reads_are_local_and_stores_write_every_copy():
    w = buf("w", 1 << 20, "replicated")
    t = sim([load(p, 0, 0, 8192) for p in range(64)], (64,), [w])
    assert t.bytes_remote == 0 and np.all(t.bank_bytes == 8192)  # each PU reads its own copy
    # a store to a replicated tensor is a broadcast: its bytes land in every bank, one copy locally
    t = sim([load(0, 1, 0, 64), load(0, 0, 0, 64, kind=STORE)], (1,), [w, buf("x", 4096)], kernel="kernel 'k'")
    assert np.all(t.bank_bytes[1:] >= 64) and t.bank_bytes.sum() == 64 + 64 * 64
    assert t.bytes_remote == 63 * 64
    one = sim([load(0, 1, 0, 64), load(0, 0, 0, 64, kind=STORE)], (1,), [buf("v", 4096), buf("x", 4096)])
    assert t.cycles > one.cycles
    s = sim([rec(SCATTER, 0, 0, 0, 10, 4, 4096)], (1,), [w])
    assert s.bank_bytes.sum() == 64 * 10 * 32  # ten elements, a granule each, in every bank


# ------------------------------------------------------------------------ results and errors


def test_deterministic_and_consistent_totals():
    rng = np.random.default_rng(7)
    trace = []
    for p in range(300):
        trace += [load(p, 0, int(rng.integers(0, 4000)) * 32, int(rng.integers(1, 200)) * 32),
                  rec(VEC, p, 1024, 0, FP32), load(p, 1, p * 512, 512, kind=STORE)]  # fmt: skip
    args = [buf("x", 1 << 20), buf("y", 300 * 512, "blocked")]
    a = sim(trace, (300,), args, mapping="random", seed=5)
    b = sim(trace, (300,), args, mapping="random", seed=5)
    assert a.cycles == b.cycles and np.array_equal(a.program_end, b.program_end)
    assert a.per_pu_busy_cycles.sum() == pytest.approx(a.dma_cycles + a.compute_cycles)
    assert a.device_cycles == pytest.approx(a.wave_cycles.sum())
    assert a.bank_bytes.sum() == pytest.approx(a.bytes_moved)
    assert np.all(a.program_end <= a.device_cycles + 1e-6)


def test_chrome_events_one_track_per_pu():
    x = buf("x", 1 << 20, "bank", 0)
    t = sim([load(p, 0, 0, 1024) for p in range(3)] + [rec(VEC, p, 4096, 0, FP32) for p in range(3)], (3,), [x])
    events = t.chrome_events("k", t0_us=10.0)
    meta = [e for e in events if e["ph"] == "M"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in meta} == {0, 1, 2}
    assert len(spans) == 6 and all(e["pid"] == e["tid"] for e in spans)
    assert {e["cat"] for e in spans} == {"dma", "compute"}
    assert all(e["ts"] >= 10.0 and e["dur"] > 0 for e in spans)


def test_empty_launches():
    t = sim([], (4,), [])
    assert t.device_cycles == 0 and t.cycles == SPEC.launch_overhead_us * 1e3
    t = simulate_timing(None, (0, 1, 1), [], SPEC)
    assert t.num_programs == 0 and t.cycles == SPEC.launch_overhead_us * 1e3


def test_malformed_traces_are_reported():
    with pytest.raises(NMPRuntimeError, match="shape"):
        simulate_timing(np.zeros((3, 7), dtype=np.int64), (1,), [], SPEC)
    with pytest.raises(NMPRuntimeError, match="program 5 outside the grid of 2"):
        sim([rec(VEC, 5, 1)], (2,), [])
    with pytest.raises(NMPRuntimeError, match="kind 9 is unknown"):
        sim([rec(9, 0)], (1,), [])
    with pytest.raises(NMPRuntimeError, match="argument #3 but the launch has 1"):
        sim([load(0, 3, 0, 64)], (1,), [buf("x", 64)])
    with pytest.raises(NMPRuntimeError, match="bank 70 but target nmp-64 has 64 banks"):
        sim([load(0, 0, 0, 64)], (1,), [ArgBuffer("x", 1, 64, Placement("bank", 70, None, 64, 1))])


def test_arg_buffers_from_tensors_names_and_slots():
    clear_placements()
    x, y = torch.zeros(256), torch.zeros(64)
    place(x, "blocked")
    nmp_args = [{"name": "x", "kind": "ptr"}, {"name": "n", "kind": "int"}, {"name": "y", "kind": "ptr"}]
    meta = {"name": "k", "pu_mapping": "blocked", "nmp_args": nmp_args}
    by_name = arg_buffers(meta, {"x": x, "y": y, "n": 3})
    by_pos = arg_buffers(meta, [x, 3, y])
    slots = arg_buffers_from_slots(meta, [x.data_ptr(), 1024, 3, y.data_ptr(), 256])
    for bufs in (by_name, by_pos, slots):
        assert bufs[1] is None and bufs[0].name == "x" and bufs[0].placement.policy == "blocked"
        assert bufs[0].base == 0 and bufs[2].placement.policy == "interleaved" and bufs[2].nbytes == 256
    with pytest.raises(NMPRuntimeError, match=r"\(x, n, y\); pass a dict"):
        arg_buffers(meta, [x, y])
    trace = np.array([load(p, 0, p * 256, 256) for p in range(4)], dtype=np.int64)
    t = simulate_launch(meta, (4, 1, 1), trace, [x.data_ptr(), 1024, 3, y.data_ptr(), 256], SPEC)
    assert t.mapping == "blocked" and list(t.program_pu) == [0, 1, 2, 3]
    clear_placements()


def test_hundred_thousand_records_time_quickly():
    n, block = 33_334, 16384
    p = np.arange(n)
    trace = np.zeros((n, 3, 8), dtype=np.int64)
    trace[:, 0, :7] = np.stack([np.full(n, LOAD), p, 0 * p, p * block, 1 + 0 * p, block + 0 * p, block + 0 * p], 1)
    trace[:, 1, :5] = np.stack([np.full(n, VEC), p, block // 4 + 0 * p, 0 * p, 0 * p], 1)
    trace[:, 2] = trace[:, 0]
    trace[:, 2, 0], trace[:, 2, 2] = STORE, 1
    trace = trace.reshape(-1, 8)
    args = [buf("x", n * block), buf("y", n * block)]
    best = math.inf
    for _ in range(2):
        t0 = time.perf_counter()
        simulate_timing(trace, (n,), args, SPEC, "round_robin")
        best = min(best, time.perf_counter() - t0)
    print(f"\n{trace.shape[0]} records, {n} programs: {best * 1e3:.0f} ms")
    assert best < 1.0


# ------------------------------------------------------------------- validation on real kernels

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _scale2(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def _matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak)
        y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16))


@pytest.fixture
def captured():
    """Execution traces of the launches made inside the test: [(metadata, grid, trace)]."""
    import triton_nmp
    from triton_nmp.simulator import runtime

    triton_nmp.activate()
    seen: list = []

    def listener(metadata, grid, result):
        seen.append((metadata, grid, result.trace))

    runtime.add_launch_listener(listener)
    clear_placements()
    yield seen
    runtime.remove_launch_listener(listener)
    clear_placements()


def _timing_of(captured, tensors: dict) -> LaunchTiming:
    metadata, grid, trace = captured[-1]
    if trace is None:
        pytest.skip("tracing is off (TRITON_NMP_TRACE=0)")
    mapping = metadata["pu_mapping"] if isinstance(metadata, dict) else metadata.pu_mapping
    return simulate_timing(trace, grid, arg_buffers(metadata, tensors), SPEC, mapping)


BLOCK = 16384  # 64 KiB of fp32 per program: one descriptor batch, and 8 blocks per blocked chunk
N_STREAM = 64 * BLOCK * 8


def _stream(captured, placement, mapping) -> LaunchTiming:
    x = torch.arange(N_STREAM, dtype=torch.float32)
    y = torch.empty_like(x)
    for t in (x, y):
        if isinstance(placement, int):
            place(t, bank=placement)
        else:
            place(t, placement)
    _scale2[(N_STREAM // BLOCK,)](x, y, N_STREAM, BLOCK=BLOCK, pu_mapping=mapping)
    assert torch.equal(y[:: N_STREAM // 7], x[:: N_STREAM // 7] * 2)
    return _timing_of(captured, {"x_ptr": x, "y_ptr": y})


def test_validation_streaming_reaches_local_bank_bandwidth(captured):
    good = _stream(captured, "blocked", "locality")
    moved = 2 * N_STREAM * 4  # load + store bytes
    peak = SPEC.num_pus * SPEC.bank_bytes_per_cycle
    device_fraction = moved / good.device_cycles / peak
    launch_fraction = moved / good.cycles / peak
    print(f"\nstream blocked+locality: {device_fraction:.3f} of aggregate bank bandwidth "
          f"({launch_fraction:.3f} with the {SPEC.launch_overhead_us} us launch overhead)")  # fmt: skip
    assert good.bytes_remote == 0
    assert device_fraction >= 0.85 and launch_fraction >= 0.85

    one_bank = _stream(captured, 0, "locality")
    shuffled = _stream(captured, "blocked", "random")
    print(f"slowdown: all data in bank 0 {one_bank.cycles / good.cycles:.1f}x, "
          f"random PU mapping {shuffled.cycles / good.cycles:.1f}x")  # fmt: skip
    assert one_bank.cycles >= 2 * good.cycles
    assert shuffled.cycles >= 2 * good.cycles


def test_validation_matmul_is_compute_bound_with_local_operands(captured):
    S, BM, BN, BK = 512, 64, 64, 32
    a = torch.randn(S, S, dtype=torch.float16)
    b = torch.randn(S, S, dtype=torch.float16)
    results = {}
    for policy in ("replicated", "interleaved"):
        c = torch.empty(S, S, dtype=torch.float16)
        place(a, policy)
        place(b, policy)
        _matmul[(S // BM, S // BN)](a, b, c, S, S, S, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK)  # fmt: skip
        torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=0.5, rtol=0.02)
        results[policy] = _timing_of(captured, {"a": a, "b": b, "c": c})
    for policy, t in results.items():
        eff = t.flops / 2 / t.device_cycles / (SPEC.num_pus * SPEC.matrix_fp16_macs_per_cycle)
        print(f"\nmatmul {S}^3 fp16, A/B {policy}: compute {t.compute_cycles:.0f} vs DMA {t.dma_cycles:.0f} cycles, "
              f"{eff:.2f} of peak MACs")  # fmt: skip
    local = results["replicated"]
    assert local.bytes_remote <= S * S * 2  # only C's stores can be remote
    assert local.compute_cycles > local.dma_cycles
    assert local.device_cycles < results["interleaved"].device_cycles
