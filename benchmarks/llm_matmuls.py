"""GPT-2 small's matmuls, one at a time, as Inductor generates them on nmp, against their own floor.

Each `nn.Linear` of a GPT-2 small layer (fp16, batch 1, `--tokens` rows: 512 for prefill, 1 for a decode
step's GEMVs) is compiled alone with `torch.compile(backend="nmp")` (default mode: the tile the cost model
ranks first; default placement, so the weight gets the layout the kernel's footprint asks for) and profiled:

    qkv       [T x 768] @ [768 x 2304] + bias
    proj      [T x 768] @ [768 x 768] + bias
    fc        [T x 768] @ [768 x 3072] + bias
    mlp_proj  gelu([T x 3072]) @ [3072 x 768] + bias   (the GELU as Inductor fuses it, alone or in a prologue)

Per matmul: the tile chosen and its estimate, the simulated time of the template kernel, the floor (the
baseline: max(MACs / peak fp16 MACs of the whole machine, bytes of weight, input and output / aggregate
local bank bandwidth)) and the ratio, the programs (grid) against the PUs, the bytes the template read from
remote banks, and the simulated time of any other kernel of the graph.

`--check-choice` also simulates every legal tile of each matmul (each compiled alone with
`choices.pinned_tile`, on a fresh weight so its layout follows that tile; with one token, the one-row
template's tiles (`gemv ...`) next to the mm template's) and compares the model's pick with the best simulated
tile and with the best of the candidates `gemm.tuned` picks (what max-autotune simulates).

    python benchmarks/llm_matmuls.py [--tokens 512] [--only qkv,fc]
    python benchmarks/llm_matmuls.py --tokens 1 --only qkv,fc --check-choice
"""

from __future__ import annotations

import argparse
from dataclasses import astuple, dataclass

SHAPES = {"qkv": (768, 2304, False), "proj": (768, 768, False), "fc": (768, 3072, False),
          "mlp_proj": (3072, 768, True)}


@dataclass
class Run:
    tile: dict[str, int]
    estimate_us: float
    template_us: float
    other_us: float
    programs: int
    remote_bytes: int


def run_one(name: str, tokens: int, tile=None) -> Run:
    """Compile matmul `name` alone (with `tile` pinned, else the model's pick), check it, profile one call."""
    import contextlib

    import torch
    import torch.nn.functional as F

    import triton_nmp
    from triton_nmp.inductor import choices

    k, n, gelu = SHAPES[name]
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n).half()
    x = torch.randn(1, tokens, k, dtype=torch.float16)

    def f(x, lin=lin, gelu=gelu):
        return lin(F.gelu(x, approximate="tanh") if gelu else x)

    torch._dynamo.reset()
    before = len(choices.gemm_selections())
    with choices.pinned_tile(tile) if tile is not None else contextlib.nullcontext():
        compiled = torch.compile(f, backend="nmp", options={"fx_graph_cache": False})
        with torch.no_grad():
            y = compiled(x)
    torch.testing.assert_close(y.float(), f(x).float(), atol=2e-2, rtol=2e-2)
    with torch.no_grad(), triton_nmp.profile() as prof:
        compiled(x)
    sel = choices.gemm_selections()[before:]
    tem = [r for r in prof.launches if r.kernel.startswith("triton_tem")]
    return Run(sel[-1].kept[0] if sel else {}, sel[-1].estimates_us[0] if sel else float("nan"),
               sum(r.sim_seconds for r in tem) * 1e6,
               sum(r.sim_seconds for r in prof.launches if not r.kernel.startswith("triton_tem")) * 1e6,
               tem[0].grid[0] if tem else 0, sum(r.bytes_remote for r in tem))


def floor_us(tokens: int, k: int, n: int, spec) -> float:
    compute = tokens * n * k / (spec.num_pus * spec.peak_macs_per_cycle("fp16")) / spec.clock_hz
    memory = (k * n + tokens * (k + n)) * 2 / spec.local_bytes_per_second
    return max(compute, memory) * 1e6


def tile_name(tile: dict[str, int]) -> str:
    if "SHARE" in tile:  # the one-row template (`triton_nmp.inductor.gemv`)
        return "gemv " + "x".join(str(tile[key]) for key in ("BLOCK_N", "BLOCK_K", "num_stages"))
    return "x".join(str(tile.get(key, "?")) for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages"))


def check_choice(names: list[str], tokens: int, spec) -> str:
    """Simulate every legal tile of each matmul; the model's pick against the best."""
    from triton_nmp.inductor import gemm
    from triton_nmp.report import table

    rows = []
    for name in names:
        k, n, _ = SHAPES[name]
        scored = [(gemm.estimate(t, tokens, n, k, 1, 2, 2, "fp16", spec, True), t)
                  for t in gemm.candidates(tokens, n, k, 2, 2, spec)]
        if tokens == 1:  # the one-row template's tiles compete (as in `NMPChoices._select_gemm`)
            scored += [(gemm.estimate_gemv(t, n, k, 2, 2, "fp16", spec), t)
                       for t in gemm.gemv_candidates(n, k, 2, 2, spec)]
        legal = [t for _, t in scored]
        ordered = sorted(scored, key=lambda e: (e[0], isinstance(e[1], gemm.GemvTile), astuple(e[1])))
        ranked = [t for _, t in ordered]
        sim = {t: run_one(name, tokens, t).template_us for t in ranked}
        order = sorted(ranked, key=lambda t: (sim[t], ranked.index(t)))
        best, pick = order[0], ranked[0]
        top = [ranked[i] for i in gemm.tuned(ordered)]
        tuned = min(top, key=lambda t: sim[t])
        tuned = tuned if gemm.prefer_simulated(sim[pick], sim[tuned]) else pick  # as `NMPChoices` keeps it
        concordant = sum((sim[a] - sim[b]) * (i - j) > 0 for i, a in enumerate(ranked) for j, b in enumerate(ranked)
                         if i < j)
        pairs = len(ranked) * (len(ranked) - 1) // 2
        rows.append([name, str(len(legal)), f"{_t(pick)} {sim[pick]:.2f}", f"{_t(best)} {sim[best]:.2f}",
                     f"{sim[pick] / sim[best]:.3f}", str(order.index(pick) + 1),
                     f"{_t(tuned)} {sim[tuned]:.2f} ({len(top)} sim.)", f"{sim[tuned] / sim[best]:.3f}",
                     f"{concordant / pairs:.2f}"])
    return table(["matmul", "legal", "model's pick (us)", "best simulated (us)", "pick/best", "pick's rank",
                  "max-autotune's choice (us)", "choice/best", "pairs in order"], rows, right=set(range(1, 9)))


def _t(t) -> str:
    if hasattr(t, "share"):  # gemm.GemvTile
        return f"gemv {t.block_n}x{t.block_k}x{t.num_stages}"
    return f"{t.block_m}x{t.block_n}x{t.block_k}x{t.num_stages}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--only", default="qkv,proj,fc,mlp_proj")
    p.add_argument("--check-choice", action="store_true",
                   help="also simulate every legal tile of each matmul and compare the model's pick with the best")
    args = p.parse_args()

    from triton_nmp.report import machine_line, table
    from triton_nmp.target import active_target

    spec = active_target()
    names = args.only.split(",")
    rows = []
    for name in names:
        k, n, _ = SHAPES[name]
        r = run_one(name, args.tokens)
        floor = floor_us(args.tokens, k, n, spec)
        rows.append([name, f"{args.tokens}x{k}x{n}", tile_name(r.tile), f"{r.estimate_us:.1f}",
                     f"{r.template_us:.1f}", f"{floor:.1f}", f"{r.template_us / floor:.2f}x",
                     f"{r.programs}/{spec.num_pus}", f"{r.remote_bytes / 1e3:.1f}", f"{r.other_us:.1f}"])
    print(machine_line())
    print(table(["matmul", "MxKxN", "tile MxNxK stages", "estimate us", "simulated us", "floor us", "ratio",
                 "programs/PUs", "remote KB", "other kernels us"], rows, right=set(range(3, 10))))
    if args.check_choice:
        print()
        print("every legal tile simulated (template kernel, launch overhead included); pairs in order: the fraction"
              " of tile pairs the model orders as the simulator does")
        print(check_choice(names, args.tokens, spec))


if __name__ == "__main__":
    main()
