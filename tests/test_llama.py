"""model.block=llama: RMSNorm, SwiGLU, no biases, optional untied embeddings; every encoding
still plugs in; presets match the gpt2 presets' size; the gpt2 block is unchanged."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

from posx.configure.applies import SET_BY_EXTEND, key_of
from posx.configure.compose import config_dir, register_configs
from posx.core.errors import PosxError
from posx.model import blocks
from posx.model.encodings import ENCODINGS
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.runs.rundir import load_run
from posx.schema.config import BYTES

from conftest import REPO, run_posx
from helpers.model import spec

FIXTURES = REPO / "tests" / "fixtures" / "premove"


def small(**kw) -> GPT:
    return GPT(spec(n_layer=2, n_head=2, d_model=32, max_positions=64, **kw)).eval()


def test_swiglu_hidden_follows_llama_rounding():
    assert blocks.swiglu_hidden(4096, 4, 256) == 11008  # Llama 7B's intermediate size
    assert blocks.swiglu_hidden(128, 4, 8) == 344  # int(2/3 * 512) = 341, up to a multiple of 8
    assert blocks.swiglu_hidden(128, 4, 1) == 341
    with pytest.raises(PosxError, match="multiple_of"):
        blocks.swiglu_hidden(128, 4, 0)


def test_llama_block_has_rmsnorm_swiglu_and_no_biases():
    m = small(block="llama")
    assert not any(isinstance(x, torch.nn.LayerNorm) for x in m.modules())
    assert sum(isinstance(x, blocks.RMSNorm) for x in m.modules()) == 2 * 2 + 1
    assert all(isinstance(b.mlp, blocks.SwiGLU) for b in m.blocks)
    assert not [n for n, _ in m.named_parameters() if n.endswith("bias")]
    assert m.blocks[0].mlp.gate.out_features == blocks.swiglu_hidden(32, 4, 8)


def test_rmsnorm_matches_its_definition():
    norm = blocks.RMSNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 2, 8))
    x = torch.randn(3, 5, 8)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + blocks.RMS_EPS) * norm.weight
    torch.testing.assert_close(norm(x), expected)


def test_tie_embeddings_is_optional():
    tied, untied = small(block="llama"), small(block="llama", tie_embeddings=False)
    assert tied.lm_head.weight is tied.tok_emb.weight
    assert untied.lm_head.weight is not untied.tok_emb.weight
    assert untied.num_params() - tied.num_params() == 256 * 32


@pytest.mark.parametrize("pos", sorted(ENCODINGS))
def test_every_encoding_plugs_into_the_llama_block(pos):
    torch.manual_seed(0)
    m = small(block="llama", pos=pos)
    x = torch.randint(0, 256, (2, 16))
    logits, _ = m(x)
    assert logits.shape == (2, 16, 256) and torch.isfinite(logits).all()


def test_unknown_block_is_one_line():
    with pytest.raises(PosxError, match="model.block=bogus"):
        small(block="bogus")


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir()), job_name="t"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("llama, gpt2", [("llama_tiny", "tiny"), ("llama_small", "small")])
def test_llama_presets_match_the_gpt2_presets_in_size(llama, gpt2):
    a = GPT(ModelSpec.from_config(_compose(f"model={llama}"), BYTES)).num_params()
    b = GPT(ModelSpec.from_config(_compose(f"model={gpt2}"), BYTES)).num_params()
    assert ModelSpec.from_config(_compose(f"model={llama}"), BYTES).model.block == "llama"
    assert abs(a - b) / b < 0.01


@pytest.mark.slow
def test_old_gpt2_run_gives_its_recorded_table(tmp_path):
    """A gpt2-block run written before model.block existed loads and scores as it did."""
    shutil.copytree(FIXTURES / "corpus", tmp_path / "corpus")
    shutil.copytree(FIXTURES / "runs" / "old-rope", tmp_path / "old-rope")
    recorded = pd.read_csv(tmp_path / "old-rope" / "extrapolation.csv")
    model, meta = load_run(tmp_path / "old-rope")
    assert meta.model.model.block == "gpt2" and meta.model.model.tie_embeddings
    run_posx(
        "eval-extrapolate",
        "old-rope",
        "eval.tokens=128",
        "eval.batch_tokens=128",
        "device=cpu",
        f"results_dir={tmp_path / 'results'}",
        cwd=tmp_path,
    )
    again = pd.read_csv(tmp_path / "old-rope" / "extrapolation.csv")
    pd.testing.assert_series_equal(again["nll"], recorded["nll"], rtol=1e-6)


@pytest.mark.slow
def test_train_and_extend_a_llama_run(tmp_path, tiny_args):
    run_posx("train", "model=llama_tiny", "model.tie_embeddings=false", "name=ll", *tiny_args, cwd=tmp_path)
    run = tmp_path / "results" / "runs" / "ll"
    model, meta = load_run(run)
    assert meta.model.model.block == "llama" and not meta.model.model.tie_embeddings
    assert model.lm_head.weight is not model.tok_emb.weight
    # an extension keeps its parent's model, and sets the train.* keys of its own schedule itself
    keep = [a for a in tiny_args if not a.startswith("model.") and key_of(a) not in SET_BY_EXTEND]
    run_posx("extend", str(run), "method=yarn", "factor=2", "extend.steps=2", "name=llx", *keep, cwd=tmp_path)
    _, child_meta = load_run(tmp_path / "results" / "runs" / "llx")
    assert child_meta.extended_from.method == "yarn"
    assert child_meta.model.model.block == "llama" and not child_meta.model.model.tie_embeddings


@pytest.mark.slow
def test_bad_block_on_the_command_line_is_one_line(tmp_path, tiny_args):
    proc = run_posx("train", "model.block=bert", *tiny_args, cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "model.block=bert" in proc.stderr
