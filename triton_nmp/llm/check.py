"""Does a compiled model generate what eager generates? Logits per step, and greedy tokens up to numerical ties.

Greedy tokens of a model in fp16/bf16 with random weights are not a function of the model alone: its logits
are nearly flat (GPT-2 small at init: top-1 minus top-2 is often below one fp16 ulp of the logit), so eager
itself meets exact ties, which any other summation order breaks either way. The check is therefore made
where it is decidable:

* teacher forcing: the compiled model is fed eager's tokens, so every step sees eager's inputs; each step's
  logits must match eager's within the tolerance (`atol + rtol * |eager|`). The argmax then needs no check
  of its own: a token other than eager's can win only where eager's margin (top-1 minus top-2 logit) is at
  most twice the step's error;
* free running: the compiled model generates on its own; its tokens must be eager's up to the first step
  whose margin is within twice that step's error (a tie at the precision the compiled model reaches), and all
  of them when there is none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .generate import Generation, greedy_generate

__all__ = ["StepCheck", "GenerationCheck", "check_generation"]


@dataclass(frozen=True)
class StepCheck:
    """Token `index` of the generation (0: from the prefill logits), compiled vs eager on eager's inputs."""

    index: int
    eager_token: int
    token: int  # the compiled model's argmax
    max_abs_err: float  # over the logits the token is chosen from (the step's last position)
    margin: float  # eager's top-1 minus top-2 logit
    tolerance: float  # atol + rtol * max |eager logit| of that position

    @property
    def tie(self) -> bool:
        """Eager's two best tokens are within the compiled model's error: either may win."""
        return self.margin <= 2 * self.max_abs_err

    @property
    def ok(self) -> bool:
        return self.max_abs_err <= self.tolerance


@dataclass
class GenerationCheck:
    steps: list[StepCheck]
    eager_tokens: list[int]
    free_tokens: list[int]  # the compiled model generating on its own
    eager: Generation = field(repr=False)
    forced: Generation = field(repr=False)

    @property
    def max_abs_err(self) -> float:
        return max(s.max_abs_err for s in self.steps)

    @property
    def first_tie(self) -> int | None:
        return next((s.index for s in self.steps if s.tie), None)

    @property
    def free_tokens_agree(self) -> int:
        """How many leading free-running tokens are eager's."""
        n = 0
        for a, b in zip(self.free_tokens, self.eager_tokens):
            if a != b:
                break
            n += 1
        return n

    @property
    def free_ok(self) -> bool:
        """Free-running tokens are eager's, up to (not including) the first tie, where they may part."""
        limit = len(self.eager_tokens) if self.first_tie is None else self.first_tie
        return self.free_tokens_agree >= limit

    def failures(self) -> list[str]:
        out = [f"token {s.index}: logits differ from eager's by {s.max_abs_err:.4g} (tolerance {s.tolerance:.4g}); "
               f"compiled argmax {s.token}, eager {s.eager_token}" for s in self.steps if not s.ok]
        if not self.free_ok:
            out.append(f"free-running tokens part from eager's at token {self.free_tokens_agree} before the first "
                       f"tie ({self.first_tie}): {self.free_tokens} vs {self.eager_tokens}")
        return out

    def summary(self) -> str:
        tie = "no tie" if self.first_tie is None else f"first tie at token {self.first_tie}"
        return (f"{len(self.steps)} steps, max |logit error| {self.max_abs_err:.3g}, {tie}; free-running: "
                f"{self.free_tokens_agree}/{len(self.eager_tokens)} tokens equal eager's; "
                f"{'ok' if not self.failures() else 'FAILED'}")


def _margin(logits: torch.Tensor) -> float:
    top2 = logits[0, -1].float().topk(2).values
    return float(top2[0] - top2[1])


def check_generation(model: torch.nn.Module, compiled: Callable[..., torch.Tensor], prompt: torch.Tensor,
                     new_tokens: int, atol: float, rtol: float | None = None,
                     twin: torch.nn.Module | None = None) -> GenerationCheck:
    """Compare `compiled` (a compiled copy of `model` whose cache lives in `twin`, `model` itself if None)
    with eager `model` on `prompt`, `new_tokens` greedy tokens (see the module docstring); `rtol` defaults to
    `atol`, as the tests' `assert_close` calls use them."""
    rtol = atol if rtol is None else rtol
    twin = model if twin is None else twin
    eager = greedy_generate(model, model, prompt, new_tokens)
    forced = greedy_generate(twin, compiled, prompt, new_tokens, forced=eager.tokens)
    free = greedy_generate(twin, compiled, prompt, new_tokens)
    steps = []
    pairs = [(forced.prefill_logits, eager.prefill_logits)] + list(zip(forced.decode_logits, eager.decode_logits))
    for i, (got, want) in enumerate(pairs):
        g, w = got[0, -1].float(), want[0, -1].float()
        err = float((g - w).abs().max())
        steps.append(StepCheck(i, eager.tokens[i], int(g.argmax()), err, _margin(want),
                               atol + rtol * float(w.abs().max())))
    return GenerationCheck(steps, eager.tokens, free.tokens, eager, forced)
