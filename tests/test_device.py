"""Smaller items of issue 15: device=cuda:N, threads, name= that exists, +key=value, the
eval-extrapolate help example."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from conftest import run_posx

from posx.cli import app
from posx.config.compose import compose
from posx.core.device import check_device, pick_device, set_threads
from posx.core.errors import PosxError
from posx.runs.rundir import new_named_run_dir
from posx.train.steps import check_eval_fits


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:3"])
def test_device_names_that_are_accepted(name):
    check_device(name)


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "cuda0", "mps"])
def test_device_names_that_are_refused(name):
    with pytest.raises(PosxError, match="cuda:N"):
        check_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_n_without_cuda_is_one_line():
    with pytest.raises(PosxError, match="device=cuda:1 but CUDA is not available"):
        pick_device("cuda:1")


def test_threads_is_checked_and_applied():
    assert compose(["threads=2"]).threads == 2 and compose([]).threads is None
    with pytest.raises(PosxError, match="threads=0 must be at least 1"):
        compose(["threads=0"])
    before = torch.get_num_threads()
    try:
        set_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_chosen_name_that_exists_is_refused_with_a_hint(tmp_path):
    first = new_named_run_dir(tmp_path, "mine")
    (first / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(PosxError, match=r"already exists; choose another name=.*--resume mine"):
        new_named_run_dir(tmp_path, "mine")
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["mine"]


@pytest.mark.parametrize("override", ["+foo=1", "++train.bogus=2", "+eval.x=3"])
def test_adding_a_key_is_refused_like_an_unknown_key(override, tmp_path, monkeypatch):
    with pytest.raises(PosxError, match="fixed schema"):
        compose([override])
    monkeypatch.chdir(tmp_path)
    for command in (["train", override], ["eval-extrapolate", "--latest", override]):
        out = CliRunner().invoke(app, command)
        assert out.exit_code == 2 and "fixed schema" in out.output and "Traceback" not in out.output


def test_eval_extrapolate_help_shows_its_example_intact():
    out = CliRunner().invoke(app, ["eval-extrapolate", "--help"], env={"COLUMNS": "200"})
    assert "eval.methods=[none,yarn] eval.factors=[1,4]" in out.output


@pytest.mark.slow
def test_train_refuses_an_existing_name_and_writes_nothing(trained_runs, tiny_args):
    work = trained_runs["work"]
    before = sorted(p.name for p in (work / "results" / "runs").iterdir())
    proc = run_posx("train", "name=rope", *tiny_args, cwd=work, check=False)
    assert proc.returncode == 2 and "already exists; choose another name=" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (work / "results" / "runs").iterdir()) == before


@pytest.mark.slow
def test_frequencies_takes_head_dim_base_and_t_from_a_run_and_never_cuts_a_value(tmp_path, monkeypatch):
    import json

    from posx.model.config import GPTConfig
    from posx.runs.records import RunMeta

    run = tmp_path / "results" / "runs" / "r"
    run.mkdir(parents=True)
    meta = RunMeta(GPTConfig(n_head=2, d_model=32, rope_base=500.0), train_context=16, data={}, step=1)
    (run / "model.json").write_text(json.dumps(meta.to_dict()))
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["frequencies", "r", "--factor", "2"], env={"COLUMNS": "80"})
    assert out.exit_code == 0, out.output
    assert "head_dim=16, base=500, T=16, s=2 (from r)" in out.output
    assert "…" not in out.output and "(1/" in out.output  # split over tables, not truncated
    assert "coincide here" in out.output
    assert (tmp_path / "results" / "frequencies.png").is_file()
    again = CliRunner().invoke(app, ["frequencies", "--methods", "none,pi"])
    assert again.exit_code == 0 and (tmp_path / "results" / "frequencies-2.png").is_file()
    taken = CliRunner().invoke(app, ["frequencies", "--out", "results/frequencies.png"])
    assert taken.exit_code == 2 and "already exists" in taken.output


def test_data_too_small_for_the_evaluation_after_training_is_caught_before_training():
    cfg = compose(["eval.after_train=true", "train.context_length=32", "eval.tokens=512"])
    check_eval_fits(cfg, torch.zeros(512 + 1, dtype=torch.uint8), None)  # 512 targets need 513 tokens
    with pytest.raises(PosxError, match="eval.after_train would read 513.*before training"):
        check_eval_fits(cfg, torch.zeros(512, dtype=torch.uint8), None)


@pytest.mark.slow
def test_train_with_too_little_data_for_its_evaluation_stops_before_any_step(tmp_path, tiny_args):
    proc = run_posx("train", "name=small", "eval.after_train=true", *tiny_args, "eval.tokens=1000000",
                    cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "before training" in proc.stderr and "Traceback" not in proc.stderr
    assert "train 1/" not in proc.stdout
    assert not (tmp_path / "results" / "runs" / "small").exists()


def test_the_slurm_launcher_off_a_cluster_is_one_line(monkeypatch):
    import shutil as sh

    from posx import jobs

    monkeypatch.setattr(sh, "which", lambda name: None)
    with pytest.raises(PosxError, match="needs SLURM, and there is no srun"):
        jobs.check_launcher(["-m", "hydra/launcher=submitit_slurm", "seed=0,1"])
    jobs.check_launcher(["-m", "hydra/launcher=joblib"])
