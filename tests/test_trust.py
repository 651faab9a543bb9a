"""Trust only what is checked: tables read by their column names, a damaged cache shard removed
and rebuilt, and a run whose tables are of two evaluations refused (fake run directories, as in
test_report_groups; nothing is trained)."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from test_report_groups import _run
from test_report_scale import _tasks_csv

from posx.core.errors import PosxError
from posx.eval import history, manifest
from posx.report.compare import collection
from posx.report.store import cache, digest
from posx.report.summary import report

from helpers.marks import one_fast


def _mean(out, name="summary.csv", column="ppl_mean", factor=1.0) -> float:
    return float(pd.read_csv(out / name).query(f"factor == {factor}").iloc[0][column])


@pytest.mark.slow  # reads two reports; the damaged-shard case stays fast
def test_a_table_whose_columns_were_reordered_is_read_by_name(tmp_path):
    runs = tmp_path / "runs"
    run = _run(runs, "a0", 0, 10.0)
    _tasks_csv(run, 0.5)
    digest.refresh(run)
    first = report([runs], out=tmp_path / "r1", formats="none")
    tasks = pd.read_csv(run / "tasks.csv")
    tasks[list(reversed(tasks.columns))].to_csv(run / "tasks.csv", index=False)  # the same table, columns reversed
    table = pd.read_csv(run / "extrapolation.csv")
    table[list(reversed(table.columns))].to_csv(run / "extrapolation.csv", index=False)
    again = report([runs], out=tmp_path / "r2", formats="none")
    assert _mean(again) == _mean(first) == pytest.approx(10.0)
    expected = _mean(first, "tasks_summary.csv", "accuracy_mean", 2.0)
    assert _mean(again, "tasks_summary.csv", "accuracy_mean", 2.0) == pytest.approx(expected) == pytest.approx(0.75)


@pytest.mark.parametrize("damage", one_fast(["truncate", "columns"]))
def test_a_damaged_cache_shard_is_removed_and_rebuilt(tmp_path, damage):
    runs = tmp_path / "runs"
    for seed, ppl in enumerate((10.0, 14.0)):
        _run(runs, f"a{seed}", seed, ppl)
    report([runs], out=tmp_path / "r1", formats="none")
    cache_dir = tmp_path / cache.CACHE
    (shard,) = [s for s in cache_dir.iterdir() if not s.name.startswith(".")]
    target = shard / "extrapolation.parquet"
    if damage == "truncate":
        target.write_bytes(target.read_bytes()[:40])
    else:
        pd.DataFrame({"run": ["x"], "ppl": ["high"]}).to_parquet(target)
    again = report([runs], out=tmp_path / "r2", formats="none")
    assert _mean(again) == pytest.approx(12.0)
    assert not shard.exists() and len([s for s in cache_dir.iterdir() if not s.name.startswith(".")]) == 1
    third = report([runs], out=tmp_path / "r3", formats="none")
    assert _mean(third) == pytest.approx(12.0)  # and the rebuilt one is read


def test_tables_of_two_evaluations_are_refused(tmp_path):
    run = _run(tmp_path / "runs", "a0", 0, 10.0)
    older = tmp_path / "older"
    shutil.copytree(run, older)
    folder = run / "eval" / "e2"
    folder.mkdir(parents=True)
    table = pd.read_csv(run / "extrapolation.csv").assign(ppl=lambda t: t["ppl"] * 2)
    table.to_csv(folder / "extrapolation.csv", index=False)
    _tasks_csv(folder, 0.5)
    history.make_current(run, folder)  # publishes the set: the manifest, then each table
    manifest.check(run, "fix")
    listed = collection.list_runs(tmp_path / "runs").iloc[0]
    assert listed["damaged"] == ""
    shutil.copyfile(older / "extrapolation.csv", run / "extrapolation.csv")  # as if killed mid-copy
    with pytest.raises(PosxError, match="tables are of two evaluations"):
        manifest.check(run, "fix")
    assert collection.list_runs(tmp_path / "runs").iloc[0]["damaged"] == manifest.MANIFEST
    with pytest.raises(PosxError, match="tables are of two evaluations"):
        report([tmp_path / "runs"], out=tmp_path / "r", formats="none")
