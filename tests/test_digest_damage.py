"""A run whose config.yaml was edited by hand is read as damaged by what lists and reports runs:
listed without its settings, never resolved, never a crash of the whole listing; a run with a
damaged table or record is listed as damaged and left out of a report of the others."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from posx.cli import app
from posx.report.store import digest

from helpers.marks import one_fast

RUN = Path(__file__).resolve().parent / "fixtures" / "premove" / "runs" / "old-rope"


def edited(tmp_path: Path, pattern: str, line: str) -> Path:
    run = tmp_path / "results" / "runs" / "edited"
    shutil.copytree(RUN, run)
    (run / digest.DIGEST).unlink(missing_ok=True)
    config = run / "config.yaml"
    text, n = re.subn(pattern, line, config.read_text(encoding="utf-8"), count=1, flags=re.MULTILINE)
    assert n == 1, pattern
    config.write_text(text, encoding="utf-8")
    return run


@pytest.mark.parametrize(
    "pattern, line",
    [
        (r"^seed: .*$", "seed: ${oc.env:HOME}"),
        (r"^seed: .*$", "seed: abc"),
        (r"^seed: .*$", "seed: 1.5"),
        (r"^seed: .*$", "seed: true"),
        (r"^seed: .*$", "seed: 99999999999999999999999999"),  # past what a 64-bit seed column holds
        (r"^  lr: .*$", "  lr: ${oc.env:HOME}"),  # an interpolation below the top level
    ],
)
def test_an_interpolation_or_a_seed_that_is_not_whole_reads_as_a_damaged_config(tmp_path, monkeypatch, pattern, line):
    run = edited(tmp_path, pattern, line)
    assert digest.read_config(run) == {}
    made = digest.compute(run)
    assert made["seed"] is None and made["listing"]["encoding"] == "rope"  # model.json still speaks
    assert made["config"] is False  # the report lists its config.yaml as missing
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["runs", "--csv", "-"])
    assert result.exit_code == 0, result.output
    assert "edited,rope," in result.stdout


def test_a_whole_seed_is_read(tmp_path):
    run = edited(tmp_path, r"^seed: .*$", "seed: 7")
    made = digest.compute(run)
    assert made["seed"] == 7 and made["config"] is True


@pytest.mark.parametrize("line", one_fast(["seed: ${oc.env:HOME}", "seed: 99999999999999999999999999"]))
def test_the_report_lists_a_damaged_config_as_missing(tmp_path, monkeypatch, line):
    edited(tmp_path, r"^seed: .*$", line)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "results/runs", "--out", "rep", "--format", "none"])
    assert result.exit_code == 0, result.output
    missing = (tmp_path / "rep" / "missing.csv").read_text(encoding="utf-8")
    assert "config.yaml" in missing and "edited" in missing


DAMAGE = {
    "extrapolation.csv": b"\xff",  # not UTF-8
    "eval.yaml": b"- a\n",  # not a posx evaluation record
    "model.json": b"{bad",  # not JSON
}


def damaged_beside_a_sound_run(tmp_path: Path, name: str) -> Path:
    runs = tmp_path / "results" / "runs"
    shutil.copytree(RUN, runs / "sound")
    shutil.copytree(RUN, runs / "edited")
    (runs / "edited" / name).write_bytes(DAMAGE[name])
    return runs / "edited"


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_posx_runs_lists_every_run_and_names_the_damaged_file(tmp_path, monkeypatch, name):
    run = damaged_beside_a_sound_run(tmp_path, name)
    made = digest.compute(run)
    assert made["damaged"] == [name]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["runs", "--csv", "-"])
    assert result.exit_code == 0, result.output
    rows = {line.split(",")[0]: line for line in result.stdout.splitlines()[1:]}
    assert set(rows) == {"sound", "edited"}
    assert f",{name}," in rows["edited"] and ",finished,," in rows["sound"]


def test_a_run_listed_with_a_damaged_table_shows_no_evaluated_lengths(tmp_path):
    run = damaged_beside_a_sound_run(tmp_path, "extrapolation.csv")
    assert digest.compute(run)["listing"]["evaluated_lengths"] == ""


def test_a_damaged_config_is_named_too(tmp_path):
    run = edited(tmp_path, r"^seed: .*$", "seed: abc")
    assert digest.compute(run)["damaged"] == ["config.yaml"]


@pytest.mark.parametrize("name", one_fast(sorted(DAMAGE)))
def test_the_report_leaves_out_a_damaged_table_or_record_naming_its_file(tmp_path, monkeypatch, name):
    damaged_beside_a_sound_run(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "results/runs", "--out", "rep", "--format", "none"])
    assert result.exit_code == 0, result.output
    left = pd.read_csv(tmp_path / "rep" / "damaged.csv")
    assert list(left["run"]) == ["edited"] and f"edited/{name}" in left["reason"].iloc[0]
    assert "\n" not in left["reason"].iloc[0] and f"edited/{name}" in result.stdout
    assert "edited" not in pd.read_csv(tmp_path / "rep" / "groups.csv").to_csv()


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_the_report_of_the_damaged_run_alone_is_refused_naming_its_file(tmp_path, monkeypatch, name):
    damaged_beside_a_sound_run(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["report", "results/runs/edited", "--out", "rep", "--format", "none"])
    assert result.exit_code == 2, result.output
    assert f"edited/{name}" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "rep").exists() or not any((tmp_path / "rep").iterdir())
