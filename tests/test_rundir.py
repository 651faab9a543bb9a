"""posx.runs.rundir: run directory names, chosen (refused when taken) or made (never reused),
and the run lookup: a run that is not found names `posx runs` and the closest names."""

from __future__ import annotations

import csv
import io
import re
import shutil
from pathlib import Path

import pytest

from posx.core import lock
from posx.core.errors import PosxError
from posx.runs.paths import display_name, new_named_run_dir, new_run_dir, resolve_run, run_names

from conftest import run_posx


def test_a_chosen_name_that_exists_is_refused_with_a_hint(tmp_path):
    first = new_named_run_dir(tmp_path, "mine")
    (first / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(PosxError, match=r"already exists; choose another name=.*--resume mine"):
        new_named_run_dir(tmp_path, "mine")
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["mine"]


@pytest.mark.slow
def test_train_refuses_an_existing_name_and_writes_nothing(trained_runs, tiny_args):
    work = trained_runs["work"]
    before = sorted(p.name for p in (work / "results" / "runs").iterdir())
    proc = run_posx("train", "name=rope", *tiny_args, cwd=work, check=False)
    assert proc.returncode == 2 and "already exists; choose another name=" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (work / "results" / "runs").iterdir()) == before


def test_a_run_name_is_never_reused(tmp_path):
    first = new_run_dir(tmp_path, "same")
    (first / "model.json").write_text("{}")
    second = new_run_dir(tmp_path, "same")
    third = new_run_dir(tmp_path, "same")
    assert [p.name for p in (first, second, third)] == ["same", "same-2", "same-3"]
    assert (first / "model.json").read_text() == "{}"


def _results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    for rel in ("runs/rope-s0", "runs/rope-s1", "runs/alibi-s0", "sweeps/sw1/0_rope_s0"):
        (results / rel).mkdir(parents=True)
        (results / rel / "config.yaml").write_text("seed: 0\n", encoding="utf-8")
    (results / "runs" / "not-a-run").mkdir()
    return results


def test_a_typo_suggests_the_closest_names_and_posx_runs(tmp_path):
    results = _results(tmp_path)
    with pytest.raises(PosxError) as info:
        resolve_run("rope-s2", results)
    message = str(info.value)
    closest = re.search(r"closest names: ([^;]+);", message).group(1).split(", ")
    assert sorted(closest) == ["rope-s0", "rope-s1"]
    assert f"`posx runs {results}`" in message
    assert "\n" not in message and "ls " not in message


def test_no_close_name_still_points_at_posx_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _results(tmp_path)
    with pytest.raises(PosxError, match="not found .*; list runs with `posx runs`$") as info:
        resolve_run("zzzzzz", "results")
    assert "closest" not in str(info.value)


def test_latest_names_the_only_run_while_it_trains_and_once_it_stopped(tmp_path):
    results = tmp_path / "results"
    run = results / "runs" / "rope-s0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n", encoding="utf-8")
    with lock.exclusive(run, busy="taken"):  # what `posx train` holds while it trains
        with pytest.raises(PosxError, match=f"no finished run under {results}/ yet: {run} is still training;"):
            resolve_run(None, results, latest=True)
    with pytest.raises(PosxError, match=f"{run} has not finished training \\(no checkpoint yet\\); finish it with"):
        resolve_run(None, results, latest=True)
    with pytest.raises(PosxError, match="no runs under .*; train one first"):
        resolve_run(None, tmp_path / "empty", latest=True)


def test_every_suggested_name_resolves(tmp_path):
    results = _results(tmp_path)
    names = run_names(results)
    assert names == ["alibi-s0", "rope-s0", "rope-s1", "sweeps/sw1/0_rope_s0"]
    for name in names:
        assert resolve_run(name, results).is_dir()


def test_sweep_jobs_of_the_same_name_get_names_that_tell_them_apart(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = _results(tmp_path)
    (results / "sweeps" / "sw2" / "0_rope_s0").mkdir(parents=True)
    (results / "sweeps" / "sw2" / "0_rope_s0" / "config.yaml").write_text("seed: 0\n", encoding="utf-8")
    (results / "sweeps" / "sw2" / "1_rope_s1").mkdir()
    (results / "sweeps" / "sw2" / "1_rope_s1" / "model.json").write_text("{}", encoding="utf-8")
    names = run_names("results")
    assert len(set(names)) == len(names) and "sweeps/sw2/0_rope_s0" in names
    for name in names:
        assert display_name(resolve_run(name, "results")) == name
    with pytest.raises(PosxError) as info:
        resolve_run("0_rope_s0", "results")
    assert str(info.value) == (
        "run '0_rope_s0' is a job of 2 sweeps; name one of them: sweeps/sw1/0_rope_s0, sweeps/sw2/0_rope_s0"
    )
    assert resolve_run("1_rope_s1", "results") == Path("results/sweeps/sw2/1_rope_s1")  # one sweep has it
    assert display_name(tmp_path / "elsewhere" / "run") == str(tmp_path / "elsewhere" / "run")


@pytest.mark.slow
def test_every_name_posx_runs_prints_is_taken_by_eval_and_compare(trained_runs, tmp_path):
    """Two sweeps with the same job names: `posx runs` prints names that evaluate and compare."""
    results = tmp_path / "results"
    for where in ("runs/rope", "sweeps/a/0_rope_s0", "sweeps/b/0_rope_s0"):
        shutil.copytree(trained_runs["rope"], results / where, ignore=shutil.ignore_patterns("checkpoint"))
    listed = run_posx("runs", "--csv", "-", cwd=tmp_path).stdout
    names = [row["name"] for row in csv.DictReader(io.StringIO(listed))]
    assert sorted(names) == ["rope", "sweeps/a/0_rope_s0", "sweeps/b/0_rope_s0"]
    for name in names:
        run_posx("eval-extrapolate", name, "eval.factors=[1]", "eval.passkey.enabled=false", cwd=tmp_path)
    compared = run_posx("compare", *names, "--csv", "-", cwd=tmp_path).stdout
    assert len(list(csv.DictReader(io.StringIO(compared)))) > 0
