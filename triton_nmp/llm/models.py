"""GPT-2 and a Llama-shaped decoder in plain torch, with a static KV cache, for compiling onto nmp.

Plain torch (not Hugging Face classes): the models must be built with random weights on a machine with no
network, compile quickly, and keep every shape static so one compiled prefill and one compiled decode graph
serve a whole generation. The architectures follow the originals: GPT-2 (learned positions, pre-LayerNorm,
fused QKV, GELU-tanh MLP, tied LM head) and Llama (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU MLP, untied LM head).

The KV cache is a pair of buffers per layer, `[batch, kv_heads, max_len, head_dim]`, written in place with
`cache[:, :, positions] = new` (an `index_put_` on the buffer itself): functionalised, that is an `index_put`
into a graph input followed by a copy back, which Inductor re-inplaces, so a step writes only the new
positions. (A single `[layers, ...]` buffer, or `index_copy_` on a view of it, is functionalised into a
scatter of the whole cache per layer: every step would copy all of it.) `prefill(ids)` fills positions
`[0, T)` and attends causally over the prompt; `decode(ids, pos)` writes one token at the position held in
the 1-element int64 tensor `pos` and attends over the whole cache with positions after `pos` masked, so
every decode step has the same shapes (no recompilation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPT2Config", "LlamaConfig", "GPT2", "Llama", "CONFIGS", "build"]


@dataclass(frozen=True)
class GPT2Config:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    vocab: int = 50257
    max_positions: int = 1024
    eps: float = 1e-5

    @property
    def kv_heads(self) -> int:
        return self.heads

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class LlamaConfig:
    layers: int = 8
    hidden: int = 2048
    heads: int = 16
    kv_heads: int = 4
    ffn: int = 5632
    vocab: int = 32000
    max_positions: int = 1024
    eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


CONFIGS: dict[str, GPT2Config | LlamaConfig] = {
    "gpt2": GPT2Config(),  # GPT-2 small: 124M parameters
    "llama": LlamaConfig(),  # Llama-shaped decoder: 8 layers, hidden 2048, GQA 16/4, SwiGLU 5632
    "gpt2-tiny": GPT2Config(layers=2, hidden=64, heads=4, vocab=512, max_positions=64),
    "llama-tiny": LlamaConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=512, max_positions=64),
}


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v over [B, H, T, D] tensors; grouped KV heads are repeated.

    Written as two matmuls and a softmax (not scaled_dot_product_attention), so Inductor lowers it to its
    batched-matmul templates and a fused softmax, all of which run on nmp."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.float() + mask
    return torch.softmax(scores, dim=-1).to(v.dtype) @ v


class _CachedDecoder(nn.Module):
    """The KV cache and the two entry points shared by both architectures."""

    def __init__(self, cfg, batch: int) -> None:
        super().__init__()
        self.cfg = cfg
        shape = (batch, cfg.kv_heads, cfg.max_positions, cfg.head_dim)
        for i in range(cfg.layers):
            self.register_buffer(f"k_cache_{i}", torch.zeros(shape), persistent=False)
            self.register_buffer(f"v_cache_{i}", torch.zeros(shape), persistent=False)

    def caches(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (keys, values) cache buffers of `layer`."""
        return getattr(self, f"k_cache_{layer}"), getattr(self, f"v_cache_{layer}")

    def _masks(self, t: int, pos: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions of the new tokens, additive attention mask)."""
        if pos is None:  # prefill: causal over the prompt
            positions = torch.arange(t, device=self.k_cache_0.device)
            keep = positions[None, :] <= positions[:, None]
        else:  # decode: one token at `pos`, the cache holds [0, pos]
            positions = pos
            keep = torch.arange(self.cfg.max_positions, device=pos.device)[None, :] <= pos[:, None]
        mask = torch.zeros(keep.shape, device=keep.device).masked_fill(~keep, float("-inf"))
        return positions, mask

    def _cache(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
               prefill: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new keys/values at `positions` in place; return those to attend over (prefill: the new
        ones; decode: the whole cache)."""
        k_cache, v_cache = self.caches(layer)
        k_cache[:, :, positions] = k
        v_cache[:, :, positions] = v
        return (k, v) if prefill else (k_cache, v_cache)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        """Logits `[B, T, vocab]` (float32) of `ids` `[B, T]`; `pos` None for prefill, else the decode position."""
        raise NotImplementedError

    def reset_cache(self) -> None:
        for i in range(self.cfg.layers):
            for c in self.caches(i):
                c.zero_()


class GPT2(_CachedDecoder):
    """GPT-2 (Radford et al. 2019) with a static KV cache."""

    def __init__(self, cfg: GPT2Config, batch: int = 1) -> None:
        super().__init__(cfg, batch)
        d = cfg.hidden
        self.wte = nn.Embedding(cfg.vocab, d)
        self.wpe = nn.Embedding(cfg.max_positions, d)
        self.ln_1 = nn.ModuleList(nn.LayerNorm(d, eps=cfg.eps) for _ in range(cfg.layers))
        self.c_attn = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(cfg.layers))
        self.c_proj = nn.ModuleList(nn.Linear(d, d) for _ in range(cfg.layers))
        self.ln_2 = nn.ModuleList(nn.LayerNorm(d, eps=cfg.eps) for _ in range(cfg.layers))
        self.c_fc = nn.ModuleList(nn.Linear(d, 4 * d) for _ in range(cfg.layers))
        self.c_proj_mlp = nn.ModuleList(nn.Linear(4 * d, d) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(d, eps=cfg.eps)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.cfg
        b, t = ids.shape
        positions, mask = self._masks(t, pos)
        x = self.wte(ids) + self.wpe(positions)[None]
        for i in range(cfg.layers):
            h = self.ln_1[i](x)
            q, k, v = self.c_attn[i](h).split(cfg.hidden, dim=-1)
            q, k, v = (z.view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2) for z in (q, k, v))
            k, v = self._cache(i, k, v, positions, pos is None)
            a = _attend(q, k, v, mask).transpose(1, 2).reshape(b, t, cfg.hidden)
            x = x + self.c_proj[i](a)
            h = self.ln_2[i](x)
            x = x + self.c_proj_mlp[i](F.gelu(self.c_fc[i](h), approximate="tanh"))
        return (self.ln_f(x) @ self.wte.weight.t()).float()


class _RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half form, of [B, H, T, D] with cos/sin [T, D]."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Llama(_CachedDecoder):
    """A Llama-architecture decoder (Touvron et al. 2023) with a static KV cache."""

    def __init__(self, cfg: LlamaConfig, batch: int = 1) -> None:
        super().__init__(cfg, batch)
        d, hd = cfg.hidden, cfg.head_dim
        self.embed = nn.Embedding(cfg.vocab, d)
        self.attn_norm = nn.ModuleList(_RMSNorm(d, cfg.eps) for _ in range(cfg.layers))
        self.q_proj = nn.ModuleList(nn.Linear(d, cfg.heads * hd, bias=False) for _ in range(cfg.layers))
        self.k_proj = nn.ModuleList(nn.Linear(d, cfg.kv_heads * hd, bias=False) for _ in range(cfg.layers))
        self.v_proj = nn.ModuleList(nn.Linear(d, cfg.kv_heads * hd, bias=False) for _ in range(cfg.layers))
        self.o_proj = nn.ModuleList(nn.Linear(cfg.heads * hd, d, bias=False) for _ in range(cfg.layers))
        self.mlp_norm = nn.ModuleList(_RMSNorm(d, cfg.eps) for _ in range(cfg.layers))
        self.gate_proj = nn.ModuleList(nn.Linear(d, cfg.ffn, bias=False) for _ in range(cfg.layers))
        self.up_proj = nn.ModuleList(nn.Linear(d, cfg.ffn, bias=False) for _ in range(cfg.layers))
        self.down_proj = nn.ModuleList(nn.Linear(cfg.ffn, d, bias=False) for _ in range(cfg.layers))
        self.norm = _RMSNorm(d, cfg.eps)
        self.lm_head = nn.Linear(d, cfg.vocab, bias=False)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(cfg.max_positions, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("rope_cos", emb.cos(), persistent=False)
        self.register_buffer("rope_sin", emb.sin(), persistent=False)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.cfg
        b, t = ids.shape
        positions, mask = self._masks(t, pos)
        cos = self.rope_cos[positions].to(self.embed.weight.dtype)
        sin = self.rope_sin[positions].to(self.embed.weight.dtype)
        x = self.embed(ids)
        for i in range(cfg.layers):
            h = self.attn_norm[i](x)
            q = self.q_proj[i](h).view(b, t, cfg.heads, cfg.head_dim).transpose(1, 2)
            k = self.k_proj[i](h).view(b, t, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            v = self.v_proj[i](h).view(b, t, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
            k, v = self._cache(i, k, v, positions, pos is None)
            a = _attend(q, k, v, mask).transpose(1, 2).reshape(b, t, cfg.hidden)
            x = x + self.o_proj[i](a)
            h = self.mlp_norm[i](x)
            x = x + self.down_proj[i](F.silu(self.gate_proj[i](h)) * self.up_proj[i](h))
        return self.lm_head(self.norm(x)).float()


def build(name: str, dtype: torch.dtype = torch.float32, batch: int = 1, seed: int = 0,
          std: float = 0.02) -> _CachedDecoder:
    """A model of CONFIGS[name] with random weights (N(0, std); GPT-2 initialises with 0.02), in eval mode.

    Tiny models need a larger `std` for greedy decoding to produce varied tokens."""
    try:
        cfg = CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(CONFIGS)}") from None
    torch.manual_seed(seed)
    model = (GPT2 if isinstance(cfg, GPT2Config) else Llama)(cfg, batch)
    with torch.no_grad():
        for name_, p in model.named_parameters():
            if name_.endswith("bias"):
                p.zero_()
            elif p.dim() > 1:
                p.normal_(0.0, std)
    return model.to(dtype).eval()
