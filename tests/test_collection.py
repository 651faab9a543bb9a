"""`posx runs` and `posx compare` over fake run directories (no model is loaded), in-process."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from posx import __version__
from posx.cli import app
from posx.configure.checks import check_config
from posx.configure.compose import compose
from posx.core.errors import PosxError
from posx.core.lock import LOCK_NAME
from posx.report.compare import collection
from posx.runs.records import Lineage, RunMeta

from helpers.model import spec


def _run(root: Path, name: str, ppl: float, finished: bool = True, parent: str | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        yaml.safe_dump({"seed": 0, "pos": {"name": "rope"}, "train": {"context_length": 32, "steps": 6}})
    )
    (run / "metrics.csv").write_text(
        f"step,train_loss,val_loss,lr,tokens_per_s\n3,5,{math.log(ppl + 1)},1,1\n6,4,{math.log(ppl)},1,1\n7,4,,1,1\n"
    )
    if finished:
        lineage = (
            Lineage(parent=parent, parent_path="", method="yarn", factor=2.0, steps=1, train_context=16, parent_step=1)
            if parent
            else None
        )
        meta = RunMeta(spec(), train_context=32, data={}, step=6, extended_from=lineage)
        (run / "model.json").write_text(json.dumps(meta.to_dict()))
        rows = [
            {
                "pos": "rope",
                "train_context": 32,
                "method": m,
                "factor": float(f),
                "eval_context": 32 * f,
                "ppl": ppl * f,
                "status": "ok",
                "stage": "zero-shot",
                "ppl_lo": ppl * f - 1,
                "ppl_hi": ppl * f + 1,
            }
            for m in ("none", "pi")
            for f in (1, 2)
        ]
        with open(run / "extrapolation.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return run


def test_runs_lists_status_val_ppl_lengths_and_parent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # names are short under ./results, the results directory commands look in
    results = tmp_path / "results"
    _run(results / "runs", "done", 10.0)
    _run(results / "runs", "halted", 12.0, finished=False)
    live = _run(results / "runs", "live", 11.0, finished=False)
    _run(results / "sweeps" / "s1", "0_rope_s0", 9.0, parent="done")
    with open(live / LOCK_NAME, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # a process is training it
        df = collection.list_runs(results).set_index("name")
    assert df.loc["done", "status"] == "finished" and df.loc["halted", "status"] == "stopped"
    assert df.loc["live", "status"] == "running"
    assert df.loc["done", "val_ppl"] == pytest.approx(10.0)
    assert df.loc["done", "evaluated_lengths"] == "32,64" and df.loc["halted", "evaluated_lengths"] == ""
    assert df.loc["sweeps/s1/0_rope_s0", "parent"] == "done"
    assert not (results / "runs" / "done" / LOCK_NAME).exists()  # looking creates no lock file


def test_runs_and_compare_through_the_cli(tmp_path, monkeypatch):
    results = tmp_path / "results"
    _run(results / "runs", "a", 10.0)
    b = _run(results / "runs", "b", 12.0)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    out = runner.invoke(app, ["runs", "--csv", "-"])
    assert out.exit_code == 0, out.output
    assert [r["name"] for r in csv.DictReader(io.StringIO(out.output))] == ["a", "b"]
    out = runner.invoke(app, ["runs", "--csv", "list.csv"])
    assert out.exit_code == 0 and (tmp_path / "list.csv").is_file() and "finished" in out.output
    again = runner.invoke(app, ["runs", "--csv", "list.csv"])
    assert again.exit_code == 2 and "already exists" in again.output
    out = runner.invoke(app, ["compare", "a", str(b), "--csv", "-"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert len(rows) == 4 and all(float(r["b / a"]) == pytest.approx(1.2) for r in rows)
    out = runner.invoke(app, ["compare", "a", "b"], env={"COLUMNS": "200"})
    assert "1.200" in out.output and "[9.000, 11.000]" in out.output
    one = runner.invoke(app, ["compare", "a"])
    assert one.exit_code == 2 and "at least two" in one.output
    assert runner.invoke(app, ["--version"]).output.strip() == f"posx {__version__}"


@pytest.mark.parametrize("config", [b"\xc5\xff not utf-8", b"- a list\n", b"train: 5\npos: [x]\n"])
def test_a_damaged_config_is_listed_without_its_settings(tmp_path, config):
    run = _run(tmp_path / "runs", "damaged", 10.0, finished=False)
    (run / "config.yaml").write_bytes(config)
    row = collection.list_runs(tmp_path).iloc[0]
    assert (row["status"], row["encoding"], row["T"]) == ("stopped", "", "")


def test_compare_notes_runs_trained_at_other_T_or_scored_otherwise(tmp_path, monkeypatch):
    a, b, c = (_run(tmp_path / "runs", n, p) for n, p in (("a", 10.0), ("b", 12.0), ("c", 11.0)))
    assert collection.compare([a, b])[2] == []
    table = c / "extrapolation.csv"
    rows = list(csv.DictReader(table.open()))
    for row in rows:
        row.update(train_context=64, eval_context=64 * float(row["factor"]), protocol="sliding", stride=16)
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    notes = collection.compare([a, c])[2]
    assert notes[0].startswith("the runs were trained at different T (a: 32; c: 64); a row pairs each run's own")
    assert notes[1].startswith(
        "the runs were scored with different protocols (a: nonoverlapping; c: sliding stride 16)"
    )
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["compare", str(a), str(c)], env={"COLUMNS": "300"})
    assert out.exit_code == 0 and out.output.count("\nnote: the runs were") == 2


@pytest.mark.parametrize(
    "names",
    [["x", "x lo"], ["x lo", "x"], ["a", "b / a"], ["a", "b", "b / a"], ["method", "stage"], ["x", "x se", "x hi"]],
)
def test_compare_never_merges_two_runs_into_one_column(tmp_path, names):
    dirs = [_run(tmp_path / f"p{i}", n, 10.0 + i) for i, n in enumerate(names)]
    df, shown, _ = collection.compare(dirs)
    assert len(set(shown)) == len(names) and len(set(df.columns)) == len(df.columns)
    for i, name in enumerate(shown):  # each run's own perplexity under its own column
        assert df.loc[(df["method"] == "none") & (df["factor"] == 1.0), name].tolist() == [pytest.approx(10.0 + i)]
        if i:
            ratio = df[f"{name} / {shown[0]}"]
            assert ratio.tolist() == pytest.approx((df[name] / df[shown[0]]).tolist())


def test_markup_in_recorded_values_prints_as_written(tmp_path):
    runs = tmp_path / "runs"
    a, b = _run(runs, "[bold]a[/]", 10.0), _run(runs, "b[/]", 12.0)
    damaged = _run(runs, "c", 11.0, finished=False)
    (damaged / "config.yaml").write_text(
        yaml.safe_dump({"seed": 0, "pos": {"name": "[red]x"}, "train": {"context_length": "[/]", "steps": "[b]"}})
    )
    console = Console(record=True, width=300)
    console.print(collection.runs_table(collection.list_runs(runs), f"under {runs}"))
    df, names, _ = collection.compare([a, b])
    console.print(collection.compare_table(df, names))
    text = console.export_text()
    for written in ("[bold]a[/]", "b[/]", "[red]x", "[/]", "[b]"):
        assert written in text


def test_a_run_name_a_command_line_would_read_as_an_option_is_refused_at_train():
    with pytest.raises(PosxError, match=r"^name='-x' must not start with '-'"):
        check_config(compose(["name=-x"]))
    check_config(compose(["name=x-"]))
