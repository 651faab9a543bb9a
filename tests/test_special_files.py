"""Special files and extreme values: a FIFO where a digest or a table should be is never read (no
hang), a diverged run's perplexity lists as inf with a note, a cell past 128 KiB is one line naming
the file, values from files print without markup, and runs named like compare's columns or
starting with - work (fake run directories, as in test_report_groups; nothing is trained)."""

from __future__ import annotations

import os

import pytest
from test_report_groups import _run

from posx.core import files
from posx.core.errors import PosxError
from posx.eval.tables import read_table
from posx.runs.paths import read_meta

from conftest import run_posx
from helpers.marks import one_fast


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "results" / "runs"
    for seed, name in enumerate(("method", "-dash", "other")):
        _run(root, name, seed, 10.0 + seed)
    return root


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "digest.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        files.read_regular(fifo)  # opened non-blocking and refused: a plain open would wait for a writer
    with pytest.raises(Exception, match="not a regular file"):
        files.regular(fifo)


def test_every_reader_of_a_run_refuses_a_fifo_in_one_line(runs):
    for name in ("extrapolation.csv", "model.json"):
        (runs / "other" / name).unlink()
        os.mkfifo(runs / "other" / name)
    with pytest.raises(PosxError, match="cannot be read"):
        read_table(runs / "other" / "extrapolation.csv")
    with pytest.raises(PosxError):  # a FIFO is not a file: no model.json, in one line
        read_meta(runs / "other")


@pytest.mark.parametrize("name", one_fast(["digest.json", "positions.csv", "metrics.csv", "extrapolation.csv"]))
def test_a_fifo_in_a_run_ends_the_listing_and_the_report(runs, tmp_path, name):
    (runs / "other" / name).unlink(missing_ok=True)
    os.mkfifo(runs / "other" / name)
    listed = run_posx("runs", "results", "--csv", "-", cwd=tmp_path, check=False)
    assert listed.returncode == 0 and "other" in listed.stdout
    done = run_posx("report", "results/runs/other", "--out", "rep", cwd=tmp_path, check=False)
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr


def test_a_diverged_run_lists_inf_with_a_note(runs, tmp_path):
    (runs / "other" / "metrics.csv").write_text("step,train_loss,val_loss,lr,tokens_per_s\n1,5.0,1000,1,1\n")
    listed = run_posx("runs", "results", cwd=tmp_path)
    assert "inf" in listed.stdout and "the run diverged" in listed.stdout


def test_an_oversized_cell_is_one_line_naming_the_file(runs, tmp_path):
    table = runs / "other" / "extrapolation.csv"
    lines = table.read_text().splitlines()
    table.write_text("\n".join([lines[0], lines[1].replace("none", "x" * 140_000, 1), *lines[2:]]) + "\n")
    for args in (["compare", "other", "method"], ["report", "results/runs/other", "--out", "rep"]):
        done = run_posx(*args, cwd=tmp_path, check=False)
        assert done.returncode == 2 and "extrapolation.csv is damaged: line 2 has a cell of over 128 KiB" in done.stderr


def test_markup_in_a_table_prints_as_written_and_names_like_columns_work(runs, tmp_path):
    table = runs / "other" / "extrapolation.csv"
    table.write_text(table.read_text().replace(",none,", ",[bold]m[/bold],"))
    done = run_posx("compare", "method", "other", "--", "-dash", cwd=tmp_path)
    assert "[bold]m[/bold]" in done.stdout
    header = run_posx("compare", "method", "other", "--csv", "-", cwd=tmp_path).stdout.splitlines()[0].split(",")
    assert header[:3] == ["method", "stage", "factor"] and header.count("method") == 1  # the run goes by its path
    assert header[3].endswith("method") and header[3] != "method"
    refused = run_posx("compare", "other", "-dash", cwd=tmp_path, check=False)
    assert refused.returncode == 2 and "goes after --" in refused.stderr
