"""posx.eval.run: a run's evaluation, nothing lost or silently wrong: non-finite weights give
a non-finite status, and re-evaluating replaces the tables and leaves the weights."""

from __future__ import annotations

import math
import shutil

import pandas as pd
import pytest
import torch
from rich.console import Console

from posx.configure.compose import compose, typed
from posx.core import files
from posx.eval.run import _show_answers, estimator, evaluate_run
from posx.runs.paths import read_meta
from posx.runs.rundir import load_run, save_run


@pytest.mark.slow
def test_inf_weights_give_status_nonfinite_not_a_number(trained_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_runs["rope"], run)
    model, meta = load_run(run)
    with torch.no_grad():
        model.tok_emb.weight[7, 0] = float("inf")  # byte 7 does not occur; every row meets a NaN anyway
        model.blocks[0].mlp.up.weight[0, 0] = float("inf")
    save_run(run, model, meta)
    cfg = typed(
        compose(
            [
                "device=cpu",
                "eval.tokens=512",
                "eval.factors=[1,2]",
                "eval.methods=[none,yarn]",
                f"data.cache_dir={trained_runs['work'] / 'results' / 'cache'}",
            ]
        )
    )
    df = evaluate_run(run, cfg).table
    assert (df["status"] == "nonfinite").all(), df
    assert df["nll"].map(math.isnan).all() and df["ppl"].map(math.isnan).all()
    table = pd.read_csv(run / "extrapolation.csv")
    assert (table["status"] == "nonfinite").all() and table["ppl"].isna().all()


@pytest.mark.slow
def test_reevaluation_replaces_the_tables_and_leaves_the_weights(trained_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_runs["rope"], run)
    weights = run / "model.safetensors"
    before = (files.sha256_file(weights), weights.stat().st_mtime_ns)
    cache = f"data.cache_dir={trained_runs['work'] / 'results' / 'cache'}"
    evaluate_run(run, typed(compose(["device=cpu", "eval.tokens=512", "eval.methods=[none]", cache])))
    assert len(pd.read_csv(run / "extrapolation.csv")) == 4
    evaluate_run(
        run, typed(compose(["device=cpu", "eval.tokens=512", "eval.methods=[none,pi]", "eval.factors=[1]", cache]))
    )
    assert pd.read_csv(run / "extrapolation.csv")["method"].tolist() == ["none", "pi"]
    assert (files.sha256_file(weights), weights.stat().st_mtime_ns) == before
    assert read_meta(run).weights_sha256 == before[0]
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def _answers(accuracy: list[float], chance=(0.25, 0.125)) -> pd.DataFrame:
    return pd.DataFrame({"method": "yarn", "task": "niah", "factor": [1.0, 2.0], "status": "ok", "trials": 8,
                         "accuracy": accuracy, "chance": list(chance)})  # fmt: skip


def test_answers_none_of_which_is_right_show_one_line_else_a_table():
    none = "task suite: 0 of {n} answers exact at every length, method and task"
    console = Console(record=True, width=200)
    _show_answers(console, _answers([0.0, 0.0]), "title", "task", none)
    assert console.export_text().strip() == "task suite: 0 of 16 answers exact at every length, method and task"
    console = Console(record=True, width=200)
    _show_answers(console, _answers([0.5, 0.0]), "the title", "task", none)
    shown = console.export_text()
    assert "the title" in shown and "4/8" in shown and "0/8" in shown and "0 of" not in shown
    chance = next(line for line in shown.splitlines() if "chance" in line)  # the task's level at each length
    assert chance.split() == ["│", "chance", "│", "niah", "│", "25.0%", "│", "12.5%", "│"]
    console = Console(record=True, width=200)
    _show_answers(console, _answers([0.5, 0.0], chance=(math.nan, math.nan)), "t", "task", none)  # an older table
    assert next(line for line in console.export_text().splitlines() if "chance" in line).count("–") == 2


def test_the_table_title_names_the_tokens_it_scored():
    """The table estimates the perplexity of the tokens it scored, not of the whole held-out split
    (which training's validation figure samples), so its title says which tokens."""
    stream = pd.DataFrame({"tokens": [2048, 2048], "within_documents": [False, False]})
    assert estimator(stream) == (
        "perplexity of the first 2,048 held-out tokens at each length ± half the 95% interval over their windows"
    )
    documents = pd.DataFrame({"tokens": [1900, 2048], "within_documents": [True, True]})
    assert estimator(documents).startswith("perplexity of 1,900 to 2,048 held-out tokens within documents at each")
