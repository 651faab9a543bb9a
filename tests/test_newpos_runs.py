"""The newer positional options through training: a stopped run resumes to the uninterrupted
weights (the learned FIRE and SSMax parameters and the random positions included), an xPos run
extends with a RoPE method, and a PoSE extension trains at T for the new length."""

from __future__ import annotations

import signal

import pandas as pd
import pytest
import torch
import yaml
from test_compile import check_graphs
from test_distributed import TOL, loss_diff, torchrun
from test_resume import max_diff, signal_at, tiny_cfg, weights

from posx.core.errors import Preempted
from posx.runs import resumable
from posx.runs.rundir import load_run
from posx.train.loop import train
from posx.train.state import Fresh, Resume

from conftest import run_posx

pytestmark = pytest.mark.slow  # each test trains

OPTIONS = {
    "fire": ["pos=fire"],
    "xpos-partial": ["pos=xpos", "pos.rotary_fraction=0.5"],
    "ssmax": ["model.attn_scale=ssmax"],
    "logn-nope-layers": ["model.attn_scale=logn", "model.nope_every=2", "pos=alibi"],
    "randomized": ["pos.randomized=true", "pos.randomized_max=256"],
}


@pytest.mark.parametrize("name", OPTIONS)
def test_stop_then_resume_ends_with_the_uninterrupted_weights(tmp_path, text_corpus, monkeypatch, name):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=6", "train.checkpoint_every=0", *OPTIONS[name])
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir(), parts.mkdir()
    train(cfg, whole, Fresh())
    with monkeypatch.context() as m:
        signal_at(m, 3, signal.SIGTERM)
        with pytest.raises(Preempted):
            train(cfg, parts, Fresh())
    assert resumable.latest_step(parts) == 3
    train(cfg, parts, Resume())
    assert max_diff(weights(whole), weights(parts)) <= 1e-6


def test_an_xpos_run_extends_with_resonance_yarn(tmp_path, tiny_args):
    run_posx("train", "pos=xpos", "name=xp", *tiny_args, cwd=tmp_path)
    run_posx(
        "extend",
        "xp",
        "method=resonance_yarn",
        "factor=2",
        "extend.steps=2",
        "extend.warmup_steps=1",
        "device=cpu",
        cwd=tmp_path,
    )
    model, meta = load_run(tmp_path / "results" / "runs" / "xp-resonance_yarn-x2")
    assert model.pos.kind == "xpos" and meta.rope.method == "resonance_yarn" and meta.train_context == 64
    wavelengths = 2 * torch.pi / model.pos.inv_freq.double()
    short = wavelengths < 32
    torch.testing.assert_close(wavelengths[short], wavelengths[short].round(), rtol=0, atol=1e-3)


def test_a_pose_extension_trains_at_t_with_ids_covering_the_new_length(tmp_path, tiny_args):
    run_posx("train", "pos=rope", "name=r", *tiny_args, cwd=tmp_path)
    ext = ["extend.steps=2", "extend.warmup_steps=1", "extend.pose=true", "device=cpu"]
    run_posx("extend", "r", "method=yarn", "factor=4", *ext, cwd=tmp_path)
    child = tmp_path / "results" / "runs" / "r-yarn-x4-pose"
    model, meta = load_run(child)
    assert meta.train_context == 32 and meta.model.pos.pose_length == 128  # trained at T, ids up to 4T
    assert meta.rope.method == "yarn" and meta.rope.factor == 4.0 and meta.extended_from.factor == 4.0
    config = yaml.safe_load((child / "config.yaml").read_text())
    assert config["train"]["batch_size"] == 32 and config["extend"]["pose"] is True  # the tokens of a step at T
    # its new length is its reach, s x T: scored at 1x of it too, as any extension at 1x of its new T
    run_posx("eval-extrapolate", str(child), "eval.factors=[1]", "eval.tokens=512", "device=cpu", cwd=tmp_path)
    table = pd.read_csv(child / "extrapolation.csv")
    done = table[(table["stage"] == "extended") & (table["status"] == "ok")]
    assert sorted(done["factor"]) == [1.0, 4.0] and sorted(done["eval_context"]) == [32, 128]


def test_pose_of_an_encoding_without_positions_is_refused_in_one_line(tmp_path, tiny_args):
    run_posx("train", "pos=alibi", "name=a", *tiny_args, cwd=tmp_path)
    proc = run_posx("extend", "a", "method=interpolate", "extend.pose=true", "device=cpu", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "alibi positions, which have nothing posx extend can rescale" in proc.stderr


@pytest.mark.parametrize(
    "options",
    [
        ["pos=xpos", "pos.randomized=true", "pos.randomized_max=128", "model.attn_scale=ssmax", "model.nope_every=2"],
        ["pos=fire"],
    ],
    ids=["xpos-randomized-ssmax-nope", "fire"],
)
def test_two_ranks_equal_one_process(tmp_path, tiny_args, options):
    """The options keep no state of their own: under DDP each rank draws the same positions
    from the seeded generator, and the learned parameters are all-reduced like any other.
    FIRE's output bias is a per-head constant on every logit of a row, which the softmax
    ignores: its gradient is rounding noise, which Adam turns into steps, so it is left out."""
    run_posx("train", *tiny_args, *options, "name=single", cwd=tmp_path)
    torchrun(2, "train", *tiny_args, *options, "name=ddp", cwd=tmp_path)
    runs = tmp_path / "results" / "runs"
    assert loss_diff(runs / "ddp", runs / "single") <= TOL
    a, b = weights(runs / "ddp"), weights(runs / "single")
    assert max_diff(*({k: w[k] for k in w if k != "pos.fire.down.bias"} for w in (a, b))) <= TOL


@pytest.mark.parametrize("pos", ["xpos", "fire"])
def test_one_graph_for_training_and_one_per_eval_length(pos):
    check_graphs(pos, "sdpa", "cpu", "eager", 1e-5)
