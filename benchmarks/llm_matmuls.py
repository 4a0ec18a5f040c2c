"""GPT-2 small's prefill matmuls, one at a time, as Inductor generates them on nmp, against their own floor.

Each `nn.Linear` of a GPT-2 small layer (fp16, batch 1, `--tokens` rows) is compiled alone with
`torch.compile(backend="nmp")` (default mode: the tile the cost model ranks first) and profiled:

    qkv       [T x 768] @ [768 x 2304] + bias
    proj      [T x 768] @ [768 x 768] + bias
    fc        [T x 768] @ [768 x 3072] + bias
    mlp_proj  gelu([T x 3072]) @ [3072 x 768] + bias   (the GELU as Inductor fuses it, alone or in a prologue)

Per matmul: the tile chosen and its estimate, the simulated time of the template kernel, the compute floor
(MACs / peak fp16 MACs of the whole machine, the baseline) and the ratio, the programs (grid) against the
PUs, and the simulated time of any other kernel of the graph.

    python benchmarks/llm_matmuls.py [--tokens 512] [--only qkv,fc]
"""

from __future__ import annotations

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--only", default="qkv,proj,fc,mlp_proj")
    args = p.parse_args()

    import torch
    import torch.nn.functional as F

    import triton_nmp
    from triton_nmp.inductor import choices
    from triton_nmp.report import machine_line, table
    from triton_nmp.target import active_target

    spec = active_target()
    shapes = {"qkv": (768, 2304, False), "proj": (768, 768, False), "fc": (768, 3072, False),
              "mlp_proj": (3072, 768, True)}
    rows = []
    for name in args.only.split(","):
        k, n, gelu = shapes[name]
        torch.manual_seed(0)
        lin = torch.nn.Linear(k, n).half()
        x = torch.randn(1, args.tokens, k, dtype=torch.float16)

        def f(x, lin=lin, gelu=gelu):
            return lin(F.gelu(x, approximate="tanh") if gelu else x)

        torch._dynamo.reset()
        compiled = torch.compile(f, backend="nmp")
        before = len(choices.gemm_selections())
        with torch.no_grad():
            y = compiled(x)
            torch.testing.assert_close(y.float(), f(x).float(), atol=2e-2, rtol=2e-2)
            with triton_nmp.profile() as prof:
                compiled(x)
        sel = choices.gemm_selections()[before:]
        tem = [r for r in prof.launches if r.kernel.startswith("triton_tem")]
        others = sum(r.sim_seconds for r in prof.launches if not r.kernel.startswith("triton_tem"))
        floor = args.tokens * n * k / (spec.num_pus * spec.peak_macs_per_cycle("fp16")) / spec.clock_ghz / 1e9
        t = sum(r.sim_seconds for r in tem)
        tile = sel[-1].kept[0] if sel else {}
        rows.append([name, f"{args.tokens}x{k}x{n}",
                     "x".join(str(tile.get(key, "?")) for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages")),
                     f"{sel[-1].estimates_us[0]:.1f}" if sel else "-", f"{t * 1e6:.1f}", f"{floor * 1e6:.1f}",
                     f"{t / floor:.2f}x", f"{tem[0].grid[0] if tem else 0}/{spec.num_pus}", f"{others * 1e6:.1f}"])
    print(machine_line())
    print(table(["matmul", "MxKxN", "tile MxNxK stages", "estimate us", "simulated us", "floor us", "ratio",
                 "programs/PUs", "other kernels us"], rows, right=set(range(3, 9))))


if __name__ == "__main__":
    main()
