"""triton_nmp.llm.weights: a model's random weights saved once and memory-mapped back, bit for bit."""

from __future__ import annotations

import pytest
import torch

from triton_nmp.llm import build
from triton_nmp.llm.weights import _tensors, cached_build, checkpoint_path


@pytest.mark.parametrize("name,dtype", [("gpt2-tiny", torch.float16), ("llama-tiny", torch.float32)])
def test_a_second_build_loads_the_same_tensors_and_logits(tmp_path, name, dtype):
    first = cached_build(tmp_path, name, dtype, std=0.3)
    path = checkpoint_path(tmp_path, name, dtype, 1, 0, 0.3)
    assert path.exists()
    second = cached_build(tmp_path, name, dtype, std=0.3)
    want = build(name, dtype, std=0.3)
    a, b, w = _tensors(first), _tensors(second), _tensors(want)
    assert set(a) == set(b) == set(w)
    assert any("cache" in n for n in w)  # non-persistent buffers (the KV cache) come back too
    for n in w:
        assert b[n].dtype == w[n].dtype and torch.equal(b[n], w[n]) and torch.equal(a[n], w[n]), n
        assert b[n].requires_grad == w[n].requires_grad, n
    assert not second.training
    ids = torch.randint(0, want.cfg.vocab, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(second(ids), want(ids))  # the loaded KV cache is writable (copy on write)
        assert torch.equal(second(ids[:, :1], torch.tensor([8])), want(ids[:, :1], torch.tensor([8])))


def test_the_key_covers_what_decides_the_weights(tmp_path):
    paths = {checkpoint_path(tmp_path, "gpt2-tiny", torch.float16, 1, 0, 0.3),
             checkpoint_path(tmp_path, "gpt2-tiny", torch.float32, 1, 0, 0.3),
             checkpoint_path(tmp_path, "gpt2-tiny", torch.float16, 2, 0, 0.3),
             checkpoint_path(tmp_path, "gpt2-tiny", torch.float16, 1, 1, 0.3),
             checkpoint_path(tmp_path, "gpt2-tiny", torch.float16, 1, 0, 0.02),
             checkpoint_path(tmp_path, "llama-tiny", torch.float16, 1, 0, 0.3)}
    assert len(paths) == 6


def test_a_damaged_checkpoint_is_rebuilt_and_replaced(tmp_path):
    path = checkpoint_path(tmp_path, "gpt2-tiny", torch.float32, 1, 0, 0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a checkpoint")
    model = cached_build(tmp_path, "gpt2-tiny", torch.float32, std=0.3)
    want = build("gpt2-tiny", torch.float32, std=0.3)
    assert all(torch.equal(t, _tensors(want)[n]) for n, t in _tensors(model).items())
    assert path.stat().st_size > 1000  # replaced by the real one
    assert not list(tmp_path.glob("*.tmp"))


def test_an_unknown_model_is_named_in_the_error(tmp_path):
    with pytest.raises(ValueError, match="unknown model 'gpt3'; choose one of gpt2"):
        cached_build(tmp_path, "gpt3")
