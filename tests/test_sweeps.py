"""Sweeps (``posx train -m``): jobs run in parallel (joblib) each write their own complete run
and together one complete table; two sweeps started at the same instant both finish with
every run intact."""

from __future__ import annotations

import pandas as pd
import pytest

from posx.runs.rundir import load_run

from conftest import TINY, run_posx
from helpers.cli import start_posx

pytestmark = pytest.mark.slow  # every test here trains several runs


def test_parallel_sweep_jobs_write_their_own_files_and_a_complete_table(tmp_path, tiny_args):
    sweep = tmp_path / "sweep"
    run_posx(
        "train",
        "-m",
        "pos=absolute,rope",
        "seed=0,1",
        "eval.after_train=true",
        "eval.factors=[1,2]",
        "eval.methods=[none,pi]",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
        *tiny_args,
        cwd=tmp_path,
    )
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [j.name for j in jobs] == ["0_absolute_s0", "1_absolute_s1", "2_rope_s0", "3_rope_s1"]
    for job in jobs:  # every job wrote a complete run of its own config into its own directory
        _, meta = load_run(job)
        assert meta.model.pos.name == job.name.split("_")[1]
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


def test_two_sweeps_started_together_both_finish_with_every_run_intact(tmp_path, text_corpus):
    args = ["train", "-m", "seed=0,1", *TINY, "train.steps=2", "data=text", f"data.path={text_corpus}"]
    first, second = (
        start_posx(*args, cwd=tmp_path, OMP_NUM_THREADS="1") for _ in range(2)
    )  # the same second, the same config
    outs = [p.communicate(timeout=600) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outs
    sweeps = sorted((tmp_path / "results" / "sweeps").iterdir())
    assert len(sweeps) == 2, sweeps  # never one shared directory
    for sweep in sweeps:
        jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
        assert jobs == ["0_rope_s0", "1_rope_s1"]
        for job in jobs:
            _, meta = load_run(sweep / job)  # whole: its weights match their checksum
            assert meta.step == 2 and f"seed: {job[-1]}" in (sweep / job / "config.yaml").read_text()
