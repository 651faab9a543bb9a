"""`posx report` pools runs as seeds only when everything but the seed is equal (fake run
directories: tables, config.yaml, model.json, eval.yaml; no model is trained)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pandas as pd
import pytest
import yaml
from rich.console import Console

from posx.core.errors import PosxError
from posx.report.figures.position_figures import position_curves
from posx.report.store import cache, queries
from posx.report.store.runtables import find_run_dirs
from posx.report.summary import report
from posx.runs.records import RunMeta

from helpers.model import spec


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _run(
    root: Path,
    name: str,
    seed: int,
    ppl: float,
    T: int = 32,
    steps: int = 6,
    tokens: int | None = 512,
    pos: str = "rope",
    lo_hi=(None, None),
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        yaml.safe_dump(
            {"seed": seed, "name": name, "device": "cpu", "train": {"context_length": T, "steps": steps, "lr": 0.003}}
        )
    )
    meta = RunMeta(spec(pos=pos, max_positions=T), train_context=T, data={"sha256": "ab" * 32}, step=steps)
    (run / "model.json").write_text(json.dumps(meta.to_dict()))
    (run / "metrics.csv").write_text("step,train_loss,val_loss,lr,tokens_per_s\n1,5.0,,1,1\n2,4.0,4.5,1,1\n")
    if tokens is not None:  # a table that records its settings
        (run / "eval.yaml").write_text(yaml.safe_dump({"id": "x", "settings": {"tokens": tokens, "factors": [1, 2]}}))
    rows = [
        {
            "run": name,
            "pos": pos,
            "train_context": T,
            "eval_context": T * f,
            "factor": float(f),
            "method": "none",
            "ppl": ppl * f,
            "status": "ok",
            "tokens": tokens or 512,
            "protocol": "nonoverlapping",
            "stage": "zero-shot",
            "ppl_lo": lo_hi[0] or "",
            "ppl_hi": lo_hi[1] or "",
        }
        for f in (1, 2)
    ]
    with open(run / "extrapolation.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return run


def _by_group(out: Path) -> dict:
    return {(r["group"], r["encoding"], float(r["factor"])): r for r in read(out / "summary.csv")}


def test_unlike_runs_are_never_pooled_and_groups_are_labelled_by_what_differs(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "a0", 0, 10.0)
    _run(runs, "a1", 1, 12.0)
    _run(runs, "long", 0, 5.0, T=64, steps=60)  # another T and step count: its own group
    _run(runs, "tok", 3, 11.0, tokens=16384)  # another evaluation: its own group
    out = report([runs], out=tmp_path / "rep")
    summary = _by_group(out)
    groups = {r["label"]: r for r in read(out / "groups.csv")}
    assert len(groups) == 3
    pooled = next(label for label, g in groups.items() if g["runs"] == "2")
    assert groups[pooled]["seeds"] == "0,1" and "T=32" in pooled and "eval.tokens=512" in pooled
    assert float(summary[(pooled, "rope", 1.0)]["ppl_mean"]) == pytest.approx(11.0)
    assert float(summary[(pooled, "rope", 1.0)]["ppl_lo"]) == pytest.approx(11.0 - 2**0.5)
    assert summary[(pooled, "rope", 1.0)]["band"] == "± std over seeds"
    long = next(label for label in groups if "T=64" in label)
    assert "steps=60" in long and int(summary[(long, "rope", 1.0)]["n_seeds"]) == 1
    assert float(summary[(long, "rope", 1.0)]["ppl_mean"]) == 5.0
    assert (out / "training.png").is_file()  # every run has metrics.csv
    md = (out / "summary.md").read_text()
    assert "## Groups" in md and "everything but the seed is equal" in md and "`T`" in md


def test_a_repeated_seed_counts_once_and_is_listed(tmp_path):
    runs = tmp_path / "runs"
    first = _run(runs, "a0", 0, 10.0)
    _run(runs, "a1", 1, 12.0)
    again = _run(runs, "a0-again", 0, 14.0)
    os.utime(first / "extrapolation.csv", (1, 1))  # a0-again was evaluated last: it counts
    out = report([runs], out=tmp_path / "rep")
    row = next(iter(r for r in read(out / "summary.csv") if float(r["factor"]) == 1.0))
    assert int(row["n_seeds"]) == 2 and row["seeds"] == "0,1"
    assert float(row["ppl_mean"]) == pytest.approx(13.0)
    dup = read(out / "duplicates.csv")
    assert [(d["run"], d["counted"]) for d in dup] == [("a0", again.name)]  # relative to the reported folder
    md = (out / "summary.md").read_text()
    assert "Duplicate seeds" in md and "- `a1` (seed 1)" in md and str(tmp_path) not in md


@pytest.mark.slow
def test_one_seed_shows_its_interval_and_legacy_tables_group_by_what_they_record(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "one", 0, 10.0, lo_hi=(9.5, 10.6))
    _run(runs, "old", 1, 10.0, tokens=None)  # no eval.yaml: a table from before settings were kept
    out = report([runs], out=tmp_path / "rep")
    rows = [r for r in read(out / "summary.csv") if float(r["factor"]) == 1.0]
    assert len(rows) == 2 and all(int(r["n_seeds"]) == 1 for r in rows)
    one = next(r for r in rows if "eval.tokens=512" in r["group"])
    assert (float(one["ppl_lo"]), float(one["ppl_hi"])) == (9.5, 10.6) and one["band"].startswith("95%")
    assert "10.000 [9.500, 10.600]" in (out / "summary.md").read_text()
    assert any("eval.record=none" in r["group"] for r in rows)


def test_position_curves_carry_their_spread_and_can_be_smoothed():
    rows = [
        {
            "run": str(run),
            "pos": "rope",
            "method": "none",
            "factor": 1.0,
            "train_context": 4,
            "protocol": "nonoverlapping",
            "stage": "zero-shot",
            "absolute_beyond": "none",
            "bucket_start": b,
            "bucket_end": b + 1,
            "nll": float(b % 2) + run,
        }
        for run in (0, 1)
        for b in range(6)
    ]
    con = cache.connect()  # the two runs' positions.csv rows, pooled by the report's query
    con.register("pos", pd.DataFrame(rows))
    runs = {"run": ["0", "1"], "group": "-", "seed": [0, 1], "parent": "", "encoding": "rope"}
    con.register("runs", pd.DataFrame(runs))
    cells = queries.positions(con)
    curves, _ = position_curves(cells, None)
    assert curves["nll"].tolist() == [0.5, 1.5] * 3
    assert curves["nll_std"].tolist() == pytest.approx([2**-0.5] * 6)
    smoothed, _ = position_curves(cells, None, smooth=3)
    assert smoothed["nll"].tolist() == pytest.approx([1.0, 5 / 6, 7 / 6, 5 / 6, 7 / 6, 1.0])


def test_a_run_without_an_evaluation_is_labelled_so_not_by_every_evaluation_setting(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "a0", 0, 10.0)
    _run(runs, "tok", 1, 11.0, tokens=16384)
    bare = _run(runs, "bare", 2, 12.0, tokens=None)
    (bare / "extrapolation.csv").unlink()  # trained, never evaluated
    console = Console(record=True, width=400)
    out = report([runs], out=tmp_path / "rep", console=console)
    labels = {r["run_dirs"]: r["label"] for r in read(out / "groups.csv")}
    assert labels["bare"] == "not evaluated"
    assert labels["a0"] == "eval.tokens=512" and labels["tok"] == "eval.tokens=16384"
    assert "3 run(s) in 3 group(s) of equal settings but the seed; they differ in eval.tokens " in console.export_text()


def test_a_results_directory_or_a_folder_of_sweeps_is_searched_for_runs(tmp_path):
    results = tmp_path / "results"
    trained = _run(results / "runs", "a0", 0, 10.0)
    job = _run(results / "sweeps" / "2026-01-01_00-00-00", "0_rope_s1", 1, 12.0)
    (results / "cache" / "store-x").mkdir(parents=True)
    assert find_run_dirs([results]) == [trained.resolve(), job.resolve()]
    assert find_run_dirs([results / "sweeps"]) == [job.resolve()]
    with pytest.raises(PosxError, match="neither a run directory nor a directory of runs"):
        find_run_dirs([results / "cache"])


def test_the_terminal_summary_keeps_brackets_and_names_each_figure_file_kept(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "two", 0, 10.0)
    four = _run(runs, "four", 1, 11.0)
    (four / "eval.yaml").write_text(yaml.safe_dump({"id": "y", "settings": {"tokens": 512, "factors": [1, 2, 4]}}))
    console = Console(record=True, width=400)
    out = report([runs], out=tmp_path / "rep", console=console, formats="pdf")
    text = console.export_text()
    assert "eval.factors=[1,2] " in text and "eval.factors=[1,2,4] " in text  # not read as markup
    shown = [line.split(": ", 1) for line in text.splitlines() if line.startswith(("ppl_vs_length: ", "training: "))]
    assert len(shown) == 2
    for _, path in shown:
        assert path.endswith(".pdf") and Path(path).is_file() and Path(path).parent == out


def test_run_paths_with_brackets_print_as_written(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "a[0]", 0, 10.0)
    _run(runs, "b[red]", 0, 12.0)  # the same seed again: a duplicate, named on the terminal
    console = Console(record=True, width=400)
    out = report([runs], out=tmp_path / "rep[1]", console=console)
    text = console.export_text()
    assert "a[0]" in text and "b[red]" in text and f"wrote {out}" in text and "[1]" in str(out)
