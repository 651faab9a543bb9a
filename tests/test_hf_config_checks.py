"""A transformers checkpoint whose config.json does not fit its weights, or holds sizes no model
can have, is refused in one line naming the file and the field (posx.hf.checks), before or
after transformers reads it; posx's own exports load with every weight in place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posx.core.errors import PosxError  # noqa: E402
from posx.hf import checkpoint as hf_checkpoint  # noqa: E402
from posx.hf.export import export_run  # noqa: E402
from posx.model.gpt import GPT  # noqa: E402
from posx.runs.records import RunMeta  # noqa: E402
from posx.runs.rundir import save_run  # noqa: E402

from conftest import run_posx  # noqa: E402
from helpers.model import spec  # noqa: E402

CPU = torch.device("cpu")
ORIGINAL = "original_max_position_embeddings"


def _export(root: Path, tie: bool) -> Path:
    """posx export of a random two-layer llama-block run (head_dim 16, T = 32)."""
    torch.manual_seed(0)
    config = spec(n_layer=2, n_head=2, d_model=32, block="llama", tie_embeddings=tie)
    run = root / f"run-{tie}"
    run.mkdir()
    save_run(run, GPT(config), RunMeta(config, 32, {}, 0))
    return export_run(run, root / f"hf-{tie}")


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[bool, Path]:
    root = tmp_path_factory.mktemp("exports")
    return {tie: _export(root, tie) for tie in (True, False)}


def edited(src: Path, dst: Path, **changes) -> Path:
    """A copy of the checkpoint ``src`` whose config.json has ``changes``."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**data, **changes}))
    return dst


def refused(model_dir: Path, match: str) -> str:
    with pytest.raises(PosxError, match=match) as info:
        hf_checkpoint.load_hf(model_dir, CPU)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("tie", [True, False])
def test_posx_exports_load_with_every_weight_in_place(exports, tie):
    """Tied embeddings and the rotary buffers are absent from the weights by design: transformers
    reports no key missing, so the loading check passes."""
    model, meta = hf_checkpoint.load_hf(exports[tie], CPU)
    assert meta.train_context == 32 and model(torch.zeros(1, 4, dtype=torch.long))[0].shape == (1, 4, 256)


CASES = [
    ({"num_hidden_layers": 5}, r"weights lack 27 tensors its config.json describes \(model\.layers\.2\."),
    ({"num_hidden_layers": 1}, r"weights hold 9 tensors its config.json has no place for \(model\.layers\.1\."),
    ({"tie_word_embeddings": False}, r"weights lack 1 tensor its config.json describes \(lm_head.weight\)"),
    ({"vocab_size": 100}, r"do not match its config.json: model.embed_tokens.weight is \(256, 32\) in the weights"),
    ({"hidden_size": 64}, r"do not match its config.json: model.embed_tokens.weight is \(256, 32\).*\(256, 64\)"),
    ({"num_key_value_heads": 1}, r"do not match its config.json: model.layers.0.self_attn.k_proj.weight"),
    ({"num_key_value_heads": 3}, "num_attention_heads=2 is not a multiple of num_key_value_heads=3"),
    ({"num_attention_heads": 3, "num_key_value_heads": 3}, r"transformers refuses \(The hidden size \(32\)"),
    ({"max_position_embeddings": 0}, "config.json: max_position_embeddings must be positive, got 0"),
    ({"max_position_embeddings": None}, r"transformers refuses \(Field 'max_position_embeddings' expected int"),
    (
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0, ORIGINAL: 0}},
        f"config.json: rope_parameters.{ORIGINAL} must be positive, got 0",
    ),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 0}}, "sets rope_theta=0; RoPE's base must be"),
    ({"vocab_size": "abc"}, "config.json: vocab_size='abc' is not a valid int"),
]


@pytest.mark.parametrize("changes, match", CASES, ids=[",".join(c) for c, _ in CASES])
def test_a_config_json_that_does_not_fit_is_one_line(exports, tmp_path, changes, match):
    model_dir = edited(exports[True], tmp_path / "hf", **changes)
    assert str(model_dir) in refused(model_dir, match)


def test_a_hand_written_config_is_checked_before_its_weights(tmp_path):
    model_dir = tmp_path / "hand"
    model_dir.mkdir()
    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 3, "vocab_size": 256}
    (model_dir / "config.json").write_text(json.dumps(config))
    refused(model_dir, "config.json: hidden_size=64 is not a multiple of num_attention_heads=3")


@pytest.mark.parametrize("changes", [{"num_hidden_layers": 5}, {"num_attention_heads": 3, "num_key_value_heads": 3}])
def test_eval_extrapolate_refuses_it_with_exit_2(exports, tmp_path, changes):
    model_dir = edited(exports[True], tmp_path / "hf", **changes)
    before = sorted(p.name for p in model_dir.iterdir())
    args = ["eval.factors=[1]", "eval.tokens=256", "eval.passkey.enabled=false", "eval.methods=[none]", "eval.tasks=[]"]
    proc = run_posx("eval-extrapolate", str(model_dir), *args, "device=cpu", cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and str(model_dir) in proc.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == before  # no tables written
