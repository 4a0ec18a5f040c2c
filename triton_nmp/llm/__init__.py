"""LLMs on nmp: GPT-2 and a Llama-shaped decoder in plain torch (`models`), greedy generation with a static KV
cache (`generate`); `benchmarks/llm.py` and `triton-nmp llm` measure them compiled with `backend="nmp"`."""

from .check import GenerationCheck, StepCheck, check_generation
from .generate import Generation, greedy_generate
from .models import CONFIGS, GPT2, GPT2Config, Llama, LlamaConfig, build

__all__ = ["CONFIGS", "GPT2", "GPT2Config", "Llama", "LlamaConfig", "build", "Generation", "greedy_generate",
           "GenerationCheck", "StepCheck", "check_generation"]
