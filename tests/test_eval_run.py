"""Nothing lost or silently wrong: non-finite evaluation, re-evaluation, run names, parallel sweeps."""

from __future__ import annotations

import pytest

import math
import shutil

import pandas as pd
import torch

from conftest import run_posx

from posx.core import files
from posx.config.compose import compose
from posx.eval.run import evaluate_run
from posx.runs.rundir import load_run, new_run_dir, read_meta, save_run


@pytest.mark.slow
def test_inf_weights_give_status_nonfinite_not_a_number(trained_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained_runs["rope"], run)
    model, meta = load_run(run)
    with torch.no_grad():
        model.tok_emb.weight[7, 0] = float("inf")  # byte 7 does not occur; every row meets a NaN anyway
        model.blocks[0].mlp.up.weight[0, 0] = float("inf")
    save_run(run, model, meta)
    cfg = compose(["device=cpu", "eval.tokens=512", "eval.factors=[1,2]", "eval.methods=[none,yarn]",
                   f"data.cache_dir={trained_runs['work'] / 'results' / 'cache'}"])
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
    evaluate_run(run, compose(["device=cpu", "eval.tokens=512", "eval.methods=[none]", cache]))
    assert len(pd.read_csv(run / "extrapolation.csv")) == 4
    evaluate_run(run, compose(["device=cpu", "eval.tokens=512", "eval.methods=[none,pi]", "eval.factors=[1]", cache]))
    assert pd.read_csv(run / "extrapolation.csv")["method"].tolist() == ["none", "pi"]
    assert (files.sha256_file(weights), weights.stat().st_mtime_ns) == before
    assert read_meta(run).weights_sha256 == before[0]
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_a_run_name_is_never_reused(tmp_path):
    first = new_run_dir(tmp_path, "same")
    (first / "model.json").write_text("{}")
    second = new_run_dir(tmp_path, "same")
    third = new_run_dir(tmp_path, "same")
    assert [p.name for p in (first, second, third)] == ["same", "same-2", "same-3"]
    assert (first / "model.json").read_text() == "{}"


@pytest.mark.slow
def test_parallel_sweep_jobs_write_their_own_files_and_a_complete_table(tmp_path, tiny_args):
    sweep = tmp_path / "sweep"
    run_posx("train", "-m", "pos=absolute,rope", "seed=0,1", "eval.after_train=true", "eval.factors=[1,2]",
             "eval.methods=[none,pi]", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
             f"hydra.sweep.dir={sweep}", *tiny_args, cwd=tmp_path)
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [j.name for j in jobs] == ["0_absolute_s0", "1_absolute_s1", "2_rope_s0", "3_rope_s1"]
    for job in jobs:  # every job wrote a complete run of its own config into its own directory
        model, meta = load_run(job)
        assert meta.model.pos == job.name.split("_")[1]
        assert f"seed: {job.name[-1]}" in (job / "config.yaml").read_text()
        assert len(pd.read_csv(job / "extrapolation.csv")) == 4
    table = pd.read_csv(sweep / "sweep.csv")
    assert sorted(table["job"].unique()) == [j.name for j in jobs] and len(table) == 16
    # the combined table is exactly the jobs' tables: nothing lost, nothing mixed up
    for job in jobs:
        mine = table[table["job"] == job.name].drop(columns="job").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, pd.read_csv(job / "extrapolation.csv"))
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, leftovers
