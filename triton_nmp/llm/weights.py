"""A model's random weights saved once and memory-mapped by later processes, as a deployment loads a checkpoint.

`models.build` draws every weight from torch's CPU generator (about 1.2 s for GPT-2 small: the modules' default
initialisation, then N(0, std) over it, then the cast), which a real deployment never pays: it maps a checkpoint.
`cached_build(directory, ...)` is `build(...)` whose result is saved in `directory` the first time (keyed by the
model's config, dtype, batch, seed and std) and, in a later process, loaded back memory-mapped onto a model built
on the meta device (nothing initialised, nothing drawn): the same tensors bit for bit, parameters and buffers (the
KV cache and rotary tables too), in tens of milliseconds. `benchmarks/llm.py`'s warm-process start counts this
load, as it would count a checkpoint's.

The file is written to a temporary name and renamed, so a reader never sees half of it; a file that does not
load (truncated, another torch's format) is rebuilt and replaced.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import nn

from triton_nmp.atomic_file import replace_file

from .models import CONFIGS, GPT2, GPT2Config, Llama, _CachedDecoder, build

__all__ = ["cached_build", "checkpoint_path"]


def checkpoint_path(directory: Path, name: str, dtype: torch.dtype, batch: int, seed: int, std: float) -> Path:
    """Where `cached_build` keeps this model's weights: everything that decides them is in the key."""
    key = repr((CONFIGS[name], str(dtype), batch, seed, std, torch.__version__))
    return Path(directory) / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name (non-persistent buffers too: a state dict would drop the caches)."""
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def _save(model: nn.Module, path: Path) -> None:
    tensors = {n: t.detach() for n, t in _tensors(model).items()}
    replace_file(path, lambda f: torch.save(tensors, f), binary=True, prefix=path.name + ".")


def _load(name: str, batch: int, path: Path) -> _CachedDecoder | None:
    """The model with the saved tensors assigned in place of its own, or None if the file does not serve."""
    try:
        saved = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError):
        return None
    cfg = CONFIGS[name]
    with torch.device("meta"):
        model = (GPT2 if isinstance(cfg, GPT2Config) else Llama)(cfg, batch)
    wanted = _tensors(model)
    if set(saved) != set(wanted) or any(saved[n].shape != t.shape for n, t in wanted.items()):
        return None
    for full, t in saved.items():
        owner_name, _, leaf = full.rpartition(".")
        owner = model.get_submodule(owner_name)
        if leaf in owner._parameters:
            owner._parameters[leaf] = nn.Parameter(t, requires_grad=wanted[full].requires_grad)
        else:
            owner._buffers[leaf] = t
    return model.eval()


def cached_build(directory: Path | str, name: str, dtype: torch.dtype = torch.float32, batch: int = 1,
                 seed: int = 0, std: float = 0.02) -> _CachedDecoder:
    """`build(name, dtype, batch, seed, std)`, loaded from `directory` when an earlier call saved it there."""
    if name not in CONFIGS:
        return build(name, dtype, batch, seed, std)  # build's error names the models there are
    path = checkpoint_path(Path(directory), name, dtype, batch, seed, std)
    model = _load(name, batch, path) if path.exists() else None
    if model is None:
        model = build(name, dtype, batch, seed, std)
        _save(model, path)
    return model
