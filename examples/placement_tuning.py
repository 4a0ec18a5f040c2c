"""A kernel whose best config changes with where its data lives.

    python examples/placement_tuning.py
"""

import torch
import triton
import triton.language as tl

import triton_nmp

configs = triton_nmp.config_space(tiles={"BLOCK_M": (32, 64, 128), "BLOCK_N": (32, 64, 128), "BLOCK_K": (32, 64)},
                                  num_stages=(1, 2), pu_mapping=("round_robin",))


@triton_nmp.autotune(configs, key=["M", "N", "K"], top_k=0.2, progress=False)
@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    pm, pn = pid // tl.cdiv(N, BLOCK_N), pid % tl.cdiv(N, BLOCK_N)
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def grid(meta):
    return (triton.cdiv(512, meta["BLOCK_M"]) * triton.cdiv(512, meta["BLOCK_N"]),)


a, b = torch.randn(512, 512).half(), torch.randn(512, 512).half()
c = torch.empty(512, 512, dtype=torch.float16)
matmul[grid](a, b, c, 512, 512, 512)
print("interleaved:", matmul.best_config)  # BLOCK_K 64: remote reads want more reuse per byte
triton_nmp.place(a, "replicated")
triton_nmp.place(b, "replicated")
matmul[grid](a, b, c, 512, 512, 512)  # new placement -> new tuning key -> tuned again
print("replicated: ", matmul.best_config)  # BLOCK_K 32: local reads, smaller tiles win
triton_nmp.export_table("tuned.csv")  # per (kernel, shapes, placement, config) costs, for a placement pass
