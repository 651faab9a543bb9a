"""One damaged run among many: ``posx report`` leaves it out and says so (damaged.csv, the top of
summary.md, a line in the terminal), reports the others, and never caches it, so the report after
the run is fixed reads it. A report whose every run is damaged is still the one-line refusal."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_report_groups import _run
from typer.testing import CliRunner

from posx.cli import app
from posx.core.errors import PosxError
from posx.eval.tables import read_table
from posx.runs.paths import TASK_CURVE
from posx.train import taskcurve

from helpers.marks import one_fast

PPL = {"a": 10.0, "b": 12.0, "c": 20.0}  # each run's perplexity at factor 1 (x f at factor f)


def _positions(run: Path) -> None:
    rows = [
        {"run": run.name, "pos": "rope", "train_context": 32, "eval_context": 32, "factor": 1.0, "method": "none",
         "protocol": "nonoverlapping", "bucket_start": b, "bucket_end": b + 16, "tokens": 8, "nll": 2.0,
         "stage": "zero-shot"}
        for b in (0, 16)
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(run / "positions.csv", index=False)


def _curve(run: Path) -> None:
    """task_curve.csv of a run trained with a task mix: one task at two validations."""
    rows = [{"step": s, "tokens": 512 * s, "task": "niah", "trials": 8, "accuracy": a, "token_accuracy": a,
             "answer_nll": 1.5} for s, a in ((3, 0.25), (6, 0.5))]  # fmt: skip
    taskcurve.write(run, rows)


def _refusal(path: Path) -> str:
    """What read_table, the reader of every table, says of the damaged file."""
    with pytest.raises(PosxError) as refused:
        read_table(path.resolve())
    return str(refused.value)


def _cut(path: Path) -> None:
    """The file cut inside its last line, as a copy stopped part way leaves it."""
    path.write_bytes(path.read_bytes()[:-3])


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Three runs of one group (seeds 0, 1, 2), each with positions.csv and a learning curve; a
    clean copy under ``good``."""
    root = tmp_path / "results" / "runs"
    for seed, (name, ppl) in enumerate(PPL.items()):
        run = _run(root, name, seed, ppl)
        _positions(run)
        _curve(run)
    shutil.copytree(root, tmp_path / "good")
    return root


def report(tmp_path: Path, out: str, *args: str):
    """A report of the runs, tables alone: what is left out is the subject, and the figures never see it."""
    result = CliRunner().invoke(app, ["report", "results/runs", "--out", f"reports/{out}", "--format", "none", *args])
    return result, tmp_path / "reports" / out


def _at_1x(folder: Path) -> pd.Series:
    summary = pd.read_csv(folder / "summary.csv")
    return summary[summary["factor"] == 1.0].iloc[0]


@pytest.mark.parametrize("table", one_fast(["extrapolation.csv", "positions.csv", TASK_CURVE]))
@pytest.mark.parametrize("evaluations", one_fast(["current", "all"]))
def test_a_damaged_run_is_left_out_named_and_read_again_once_fixed(tmp_path, monkeypatch, runs, table, evaluations):
    monkeypatch.chdir(tmp_path)
    _cut(runs / "c" / table)
    refusal = _refusal(runs / "c" / table)  # the line a report of this run alone stops with
    result, first = report(tmp_path, "first", "--evaluations", evaluations)
    assert result.exit_code == 0, result.output
    row = _at_1x(first)
    assert row["n_seeds"] == 2 and row["ppl_mean"] == pytest.approx((PPL["a"] + PPL["b"]) / 2)
    damaged = pd.read_csv(first / "damaged.csv")
    assert list(damaged["run"]) == ["c"]
    assert damaged["reason"].iloc[0] == refusal and f"c/{table}" in refusal
    assert pd.read_csv(first / "task_learning.csv")["runs"].max() == 2  # the damaged run's rows left out too
    text = (first / "summary.md").read_text(encoding="utf-8")
    assert text.index("## Runs left out as damaged") < text.index("### method none")
    assert f"c/{table}" in text.split("## Runs left out as damaged")[1].split("###")[0]
    said = [line for line in result.stdout.splitlines() if "left out" in line]
    assert len(said) == 1 and refusal in said[0], result.stdout

    shutil.copyfile(tmp_path / "good" / "c" / table, runs / "c" / table)  # the run fixed
    result, second = report(tmp_path, "second", "--evaluations", evaluations)
    assert result.exit_code == 0, result.output
    row = _at_1x(second)
    assert row["n_seeds"] == 3 and row["ppl_mean"] == pytest.approx(sum(PPL.values()) / 3)
    assert pd.read_csv(second / "damaged.csv").empty and "left out" not in result.stdout
    assert pd.read_csv(second / "task_learning.csv")["runs"].max() == 3


@pytest.mark.slow  # the fast set has the one-report case above
def test_a_damaged_run_is_left_out_again_by_the_next_report(tmp_path, monkeypatch, runs):
    """Nothing of the damaged run is cached: the report after reads the cache for the others and
    still leaves it out, with the same line."""
    monkeypatch.chdir(tmp_path)
    _cut(runs / "c" / "positions.csv")
    first, _ = report(tmp_path, "first")
    again, folder = report(tmp_path, "again")
    assert first.exit_code == again.exit_code == 0, again.output
    assert list(pd.read_csv(folder / "damaged.csv")["run"]) == ["c"] and _at_1x(folder)["n_seeds"] == 2


def test_a_report_of_damaged_runs_only_is_refused_in_one_line(tmp_path, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    for name in PPL:
        _cut(runs / name / "extrapolation.csv")
    result, folder = report(tmp_path, "none")
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "a/extrapolation.csv" in result.stderr
    assert "3 runs" in result.stderr and not folder.exists()


def test_many_damaged_runs_are_counted_in_the_terminal_and_each_listed_in_damaged_csv(tmp_path, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    for seed in range(3, 11):
        _cut(_run(runs, f"d{seed}", seed, 30.0) / "extrapolation.csv")
    result, folder = report(tmp_path, "many")
    assert result.exit_code == 0, result.output
    assert sorted(pd.read_csv(folder / "damaged.csv")["run"]) == sorted(f"d{s}" for s in range(3, 11))
    assert "8 damaged run(s)" in result.stdout and "... and 3 more (damaged.csv)" in result.stdout
    assert _at_1x(folder)["n_seeds"] == 3


def test_posx_runs_lists_the_damaged_run_beside_the_others(tmp_path, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    _cut(runs / "c" / "positions.csv")  # a table the listing does not read: listed as sound
    _cut(runs / "b" / "extrapolation.csv")
    result = CliRunner().invoke(app, ["runs", "--csv", "-"])
    assert result.exit_code == 0, result.output
    listed = pd.read_csv(io.StringIO(result.stdout), keep_default_na=False).set_index("name")
    assert sorted(listed.index) == ["a", "b", "c"]
    assert listed.loc["b", "damaged"] == "extrapolation.csv" and listed.loc["a", "damaged"] == ""


def test_posx_compare_leaves_out_a_damaged_run_and_says_so(tmp_path, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    _cut(runs / "c" / "extrapolation.csv")
    result = CliRunner().invoke(app, ["compare", *(str(runs / n) for n in "abc"), "--csv", "-"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(io.StringIO(result.stdout))
    assert {"a", "b", "b / a"} <= set(table.columns) and not any(c.startswith("c") for c in table.columns)
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("left out:") and "c/extrapolation.csv" in said[0]
    assert table.loc[table["factor"] == 1.0, "b / a"].iloc[0] == pytest.approx(PPL["b"] / PPL["a"])


def test_posx_compare_of_one_sound_run_and_a_damaged_one_is_refused_in_one_line(tmp_path, monkeypatch, runs):
    monkeypatch.chdir(tmp_path)
    _cut(runs / "c" / "extrapolation.csv")
    result = CliRunner().invoke(app, ["compare", str(runs / "a"), str(runs / "c")])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "c/extrapolation.csv" in result.stderr
