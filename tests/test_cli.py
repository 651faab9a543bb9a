"""End to end through the real CLI: train -> reload -> evaluate, sweeps, and bad input."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from conftest import run_posx

from posx.evaluate import COLUMNS


def test_train_writes_a_complete_run(trained_runs):
    run = trained_runs["rope"]
    for name in ("config.yaml", "metrics.csv", "model.json", "model.safetensors"):
        assert (run / name).is_file(), name
    metrics = pd.read_csv(run / "metrics.csv")
    assert list(metrics.columns) == ["step", "train_loss", "val_loss", "lr", "tokens_per_s"]
    assert metrics["step"].tolist() == list(range(1, 7))
    assert metrics["val_loss"].notna().sum() == 2  # eval_every=3 over 6 steps
    meta = json.loads((run / "model.json").read_text())
    assert meta["model"]["pos"] == "rope" and meta["train_context"] == 32
    assert meta["data"]["sha256"] and meta["data"]["python"]
    assert "_target_" not in (run / "config.yaml").read_text()


def test_eval_extrapolate_rope_reloads_and_fills_every_cell(trained_runs):
    work, run = trained_runs["work"], trained_runs["rope"]
    proc = run_posx("eval-extrapolate", str(run), "eval.tokens=512", "device=cpu", cwd=work)
    df = pd.read_csv(run / "extrapolation.csv")
    assert set(COLUMNS) <= set(df.columns)
    assert len(df) == 4 * 5  # factors x methods
    assert (df["status"] == "ok").all()
    assert df["eval_context"].tolist()[:4] == [32, 64, 128, 256]
    assert df["tokens"].nunique() == 1  # the same scored tokens at every length
    assert df["ppl"].map(math.isfinite).all()
    # at 1x, pi/ntk/yarn are the identity (s = 1); abf changes the base
    one = df[df["factor"] == 1].set_index("method")["ppl"]
    assert one["pi"] == pytest.approx(one["none"], rel=1e-6)
    assert one["yarn"] == pytest.approx(one["none"], rel=1e-6)
    assert (run / "extrapolation.md").read_text().startswith("|")
    assert "none" in proc.stdout and "8x" in proc.stdout


def test_absolute_past_its_table_is_out_of_range_not_a_crash(trained_runs):
    work, run = trained_runs["work"], trained_runs["absolute"]
    run_posx("eval-extrapolate", str(run), "eval.tokens=512", "device=cpu", cwd=work)
    df = pd.read_csv(run / "extrapolation.csv").set_index(["method", "factor"])
    assert df.loc[("none", 1.0), "status"] == "ok"
    assert math.isfinite(df.loc[("none", 1.0), "ppl"])
    for f in (2.0, 4.0, 8.0):
        assert df.loc[("none", f), "status"] == "out_of_range"
        assert math.isnan(df.loc[("none", f), "ppl"])
    assert (df.loc["pi", "status"] == "not_applicable").all()


def test_latest_picks_the_newest_run(trained_runs):
    work = trained_runs["work"]
    proc = run_posx("eval-extrapolate", "--latest", "eval.factors=[1,2]", "eval.methods=[none]",
                    "eval.tokens=512", "device=cpu", cwd=work)
    assert "absolute" in proc.stdout  # trained second


def test_cfg_job_prints_the_config_without_training(tmp_path):
    proc = run_posx("train", "--cfg", "job", "pos=absolute", cwd=tmp_path)
    assert "name: absolute" in proc.stdout and "context_length: 128" in proc.stdout
    assert not (tmp_path / "results").exists()


def test_python_dash_m_and_help_show_examples(tmp_path):
    for command in ("train", "eval-extrapolate"):
        proc = run_posx(command, "--help", cwd=tmp_path)
        assert "Examples" in proc.stdout and "posx " + command in proc.stdout


def test_sweep_runs_every_combination_and_combines_tables(tmp_path, tiny_args):
    sweep = tmp_path / "sweep"
    run_posx("train", "-m", "pos=absolute,rope", "seed=0,1", "eval.after_train=true",
             "eval.factors=[1,2]", "eval.methods=[none,pi]", f"hydra.sweep.dir={sweep}", *tiny_args,
             cwd=tmp_path)
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0_absolute_s0", "1_absolute_s1", "2_rope_s0", "3_rope_s1"]
    table = pd.read_csv(sweep / "sweep.csv")
    assert sorted(table["job"].unique()) == jobs
    assert len(table) == 4 * 2 * 2
    assert not (tmp_path / "results" / "runs").exists()  # sweep jobs live in the sweep dir


BAD = [
    (["train", "train.stepz=5"], "stepz"),
    (["train", "pos=bogus"], "bogus"),
    (["train", "train.steps=-1"], "train.steps must be positive"),
    (["train", "train.context_length=0"], "train.context_length must be positive"),
    (["train", "train.lr=0"], "train.lr must be positive"),
    (["train", "train.steps=abc"], "steps"),
    (["train", "eval.factors=[0.5,1]"], "at least 1"),
    (["train", "eval.methods=[none,bogus]"], "unknown method 'bogus'"),
    (["train", "device=tpu"], "device=tpu"),
    (["train", "device=cuda"], "CUDA is not available"),
    (["train", "data=text", "data.path=/nonexistent/corpus"], "does not exist"),
    (["train", "model.d_model=30", "model.n_head=4"], "not divisible"),
    (["eval-extrapolate", "no-such-run"], "not found"),
    (["eval-extrapolate", "--latest"], "no runs under"),
    (["eval-extrapolate", "--latest", "eval.bogus=1"], "bogus"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(tmp_path, args, needle):
    proc = run_posx(*args, cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert needle in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    runs = tmp_path / "results" / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # nothing half-written
