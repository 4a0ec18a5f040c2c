"""Greedy generation with a static KV cache: one prefill call, then one decode call per token.

`step` is the model itself (eager) or a compiled copy; both see identical shapes at every decode step (the
position is a 1-element tensor), so a compiled decode graph is compiled once and reused. With `forced`, the
model is fed those tokens instead of its own argmax (teacher forcing: a compiled model checked step by step
on eager's inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

__all__ = ["Generation", "greedy_generate"]


@dataclass
class Generation:
    tokens: list[int]  # the generated tokens (not the prompt)
    prefill_logits: torch.Tensor  # [B, T, vocab] of the prompt
    decode_logits: list[torch.Tensor] = field(default_factory=list)  # [B, 1, vocab] per decode step


@torch.no_grad()
def greedy_generate(model: torch.nn.Module, step: Callable[..., torch.Tensor], prompt: torch.Tensor,
                    new_tokens: int, forced: list[int] | None = None) -> Generation:
    """Generate `new_tokens` tokens greedily after `prompt` ([1, T] int64) with `step(ids, pos=None|tensor)`;
    `forced[i]`, when given, is the token fed after step i (the generated tokens are still the argmaxes)."""
    if forced is not None and len(forced) < new_tokens - 1:
        raise ValueError(f"forced has {len(forced)} tokens; {new_tokens - 1} are fed for {new_tokens} new ones")
    t = prompt.shape[1]
    if t + new_tokens > model.cfg.max_positions:
        raise ValueError(f"prompt of {t} tokens + {new_tokens} new ones exceeds the KV cache of "
                         f"{model.cfg.max_positions} positions")
    model.reset_cache()
    logits = step(prompt)
    out = Generation(tokens=[], prefill_logits=logits)
    token = logits[:, -1].argmax(-1)
    for i in range(new_tokens):
        out.tokens.append(int(token))
        if i == new_tokens - 1:
            break
        pos = torch.tensor([t + i], dtype=torch.int64)
        if forced is not None:
            token = torch.tensor([forced[i]], dtype=torch.int64)
        logits = step(token.view(1, 1), pos)
        out.decode_logits.append(logits)
        token = logits[:, -1].argmax(-1)
    return out
