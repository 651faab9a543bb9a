"""Tests for posx.hf.checkpoint's weights check: a transformers directory's weights are read
from safetensors only; pickled weights are refused in one line before torch.load is reached."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posx.core.errors import PosxError  # noqa: E402
from posx.hf import checkpoint as hf_checkpoint  # noqa: E402


def _tiny(model_dir: Path, safe: bool) -> Path:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(model_dir, safe_serialization=safe)
    return model_dir


def test_safetensors_weights_load(tmp_path):
    model_dir = _tiny(tmp_path / "safe", safe=True)
    assert list(model_dir.glob("*.safetensors"))
    model, meta = hf_checkpoint.load_hf(model_dir, torch.device("cpu"))
    assert meta.train_context == 32 and model(torch.zeros(1, 4, dtype=torch.long))[0].shape == (1, 4, 256)


def test_pickled_weights_are_refused_before_torch_load(tmp_path, monkeypatch):
    model_dir = tmp_path / "pickled"
    model_dir.mkdir()
    _tiny(tmp_path / "src", safe=True)
    (model_dir / "config.json").write_bytes((tmp_path / "src" / "config.json").read_bytes())
    (model_dir / "pytorch_model.bin").write_bytes(b"not even a pickle")

    def never(*args, **kwargs):
        raise AssertionError("torch.load reached")

    monkeypatch.setattr(torch, "load", never)
    with pytest.raises(PosxError, match="pytorch_model.bin.*safetensors") as info:
        hf_checkpoint.load_hf(model_dir, torch.device("cpu"))
    assert "\n" not in str(info.value)


def test_a_directory_without_weights_is_one_line(tmp_path):
    model_dir = tmp_path / "empty"
    model_dir.mkdir()
    _tiny(tmp_path / "src", safe=True)
    (model_dir / "config.json").write_bytes((tmp_path / "src" / "config.json").read_bytes())
    with pytest.raises(PosxError, match="holds no weights") as info:
        hf_checkpoint.check_weights_format(model_dir)
    assert "\n" not in str(info.value)


def test_evaluation_batches_are_sized_by_logits_bytes():
    """A large vocabulary lowers eval.batch_tokens so one batch's float32 logits fit LOGITS_BYTES."""
    logits_batch_tokens, LOGITS_BYTES = hf_checkpoint.logits_batch_tokens, hf_checkpoint.LOGITS_BYTES
    assert logits_batch_tokens(16384, 256) == 16384  # a byte vocabulary: unchanged
    big = logits_batch_tokens(16384, 128_256)
    assert big < 16384 and big * 128_256 * 4 <= LOGITS_BYTES < (big + 1) * 128_256 * 4
    assert logits_batch_tokens(16384, 10**12) == 1
