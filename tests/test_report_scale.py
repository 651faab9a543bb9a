"""What makes reports scale: each run read once through its digest, the report cache that reads
only runs it has not read, and figures that split, never pool, what a reader cannot tell
apart (fake run directories, built as in test_report_groups; nothing is trained)."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_report_groups import _run

from posx.report.compare import collection
from posx.report.store import cache, digest
from posx.report.store.digest import sealed
from posx.report.summary import report


def _shards(cache_dir: Path) -> list[pd.DataFrame]:
    """Each shard's digests table, oldest first."""
    return [pd.read_parquet(s / "digests.parquet") for s in sorted(cache_dir.iterdir()) if not s.name.startswith(".")]


def _summary(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "summary.csv")


@pytest.mark.slow  # four reports
def test_a_report_reads_only_the_runs_it_has_not_read(tmp_path):
    runs = tmp_path / "runs"
    for seed, ppl in enumerate((10.0, 12.0, 14.0)):
        _run(runs, f"a{seed}", seed, ppl)
    cache_dir = tmp_path / cache.CACHE
    first = report([runs], out=tmp_path / "r1", formats="none")
    assert [len(s) for s in _shards(cache_dir)] == [3]
    again = report([runs], out=tmp_path / "r2", formats="none")
    assert [len(s) for s in _shards(cache_dir)] == [3]  # nothing new: nothing read
    pd.testing.assert_frame_equal(_summary(first), _summary(again))
    _run(runs, "a3", 3, 16.0)  # the sweep grew by one run
    grown = report([runs], out=tmp_path / "r3", formats="none")
    assert [len(s) for s in _shards(cache_dir)] == [3, 1]
    one = _summary(grown).query("factor == 1.0").iloc[0]
    assert one["n_seeds"] == 4 and one["ppl_mean"] == pytest.approx(13.0)
    table = runs / "a0" / "extrapolation.csv"  # a run evaluated again: its new numbers count
    table.write_text(table.read_text().replace("10.0,", "18.0,", 1))
    changed = report([runs], out=tmp_path / "r4", formats="none")
    assert [len(s) for s in _shards(cache_dir)] == [3, 1, 1] and list(_shards(cache_dir)[-1]["run"]) == [
        str(runs / "a0")
    ]
    assert _summary(changed).query("factor == 1.0").iloc[0]["ppl_mean"] == pytest.approx(15.0)


def test_a_digest_counts_only_while_its_files_are_unchanged(tmp_path):
    run = _run(tmp_path / "runs", "a0", 0, 10.0)
    written = digest.refresh(run)
    assert digest.written(run, digest.stamp(run)) == written
    assert written["seed"] == 0 and written["identity"]["T"] == "32" and written["eval"]["eval.tokens"] == "512"
    listing = written["listing"]
    assert listing["evaluated_lengths"] == "32,64" and listing["val_ppl"] == pytest.approx(90.0171)  # exp(4.5)
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "seed": 7}))  # edited after the digest
    assert digest.written(run, digest.stamp(run)) is None
    assert digest.load(run)["seed"] == 7  # read from its files again


def test_runs_lists_from_the_digest_without_reading_the_config(tmp_path):
    run = _run(tmp_path / "runs", "a0", 0, 10.0)
    record = digest.refresh(run)
    record["listing"]["encoding"] = "as-recorded"  # what the listing shows comes from here
    (run / digest.DIGEST).write_text(json.dumps(sealed(record)))  # config.yaml and model.json say rope
    row = collection.list_runs(tmp_path / "runs").iloc[0]
    assert (row["encoding"], row["status"], row["evaluated_lengths"]) == ("as-recorded", "finished", "32,64")


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["listing"].update(encoding="edited"),  # by hand, the seal left as it was
        lambda d: d["columns"].update({"extrapolation.csv": ["ppl", "pos"]}),
        lambda d: d.update(seed="7"),
        lambda d: d.update(sealed({**d, "seed": "7"})),  # sealed, but a field of the wrong type
        lambda d: d.update(sealed({**d, "listing": {**d["listing"], "val_ppl": -1.0}})),
    ],
)
def test_an_edited_or_forged_digest_is_computed_again_and_replaced(tmp_path, edit):
    run = _run(tmp_path / "runs", "a0", 0, 10.0)
    record = digest.refresh(run)
    edit(record)
    (run / digest.DIGEST).write_text(json.dumps(record))
    row = collection.list_runs(tmp_path / "runs").iloc[0]
    assert row["encoding"] == "rope" and row["val_ppl"] == pytest.approx(90.0171)
    assert digest.written(run, digest.stamp(run)) == digest.compute(run)  # replaced by the one its files give


def test_a_copied_run_keeps_its_digest_and_a_changed_one_is_read_again(tmp_path):
    run = _run(tmp_path / "runs", "a0", 0, 10.0)
    record = digest.refresh(run)
    copy = tmp_path / "copy" / "a0"
    shutil.copytree(run, copy)  # new mtimes, the same bytes
    for path in copy.iterdir():
        os.utime(path, (1e9, 1e9))
    assert digest.written(copy, digest.stamp(copy)) is None  # stale by its stamp
    kept = digest.load(copy)
    assert kept["content"] == record["content"] and kept["identity"] == record["identity"]
    assert digest.written(copy, digest.stamp(copy)) == kept  # written back: the next listing reads it
    with open(copy / "tasks.csv", "w") as f:  # tasks.csv is one of its sources
        f.write("pos,eval_context,factor,method,task,trials,accuracy,answer_nll,status\n")
    assert digest.load(copy)["columns"]["tasks.csv"][0] == "pos"


@pytest.mark.slow  # fourteen groups drawn
def test_a_figure_with_more_groups_than_a_panel_shows_splits_them_never_pools(tmp_path):
    runs = tmp_path / "runs"
    for steps in range(6, 20):  # 14 groups of one seed each: more lines than one panel shows
        _run(runs, f"s{steps}", 0, 10.0 + steps, steps=steps)
    out = report([runs], out=tmp_path / "rep")
    md = (out / "summary.md").read_text()
    assert "groups pooled" not in md and "median" not in md
    with open(out / "groups.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 14  # every group is still in the tables
    assert (out / "ppl_vs_length.png").is_file() and (out / "training.png").is_file()
    assert not (out / "ppl_median_over_groups.png").exists()  # only when asked for by name


def _tasks_csv(run: Path, accuracy: float) -> None:
    """A tasks.csv of one task at 1x and 2x in two depth buckets (0-50%, 50-100%)."""
    rows = [
        {"run": run.name, "pos": "rope", "train_context": 32, "eval_context": 32 * f, "factor": float(f),
         "method": "none", "task": "niah", "depth_lo": lo, "depth_hi": lo + 0.5, "trials": 4,
         "accuracy": accuracy if lo else 1.0, "accuracy_lo": "", "accuracy_hi": "", "token_accuracy": 1.0,
         "answer_nll": 2.5, "answer_nll_se": 0.1, "answer_tokens": 5, "status": "ok"}
        for f in (1, 2) for lo in (0.0, 0.5)
    ]  # fmt: skip
    with open(run / "tasks.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.slow  # three reports
def test_task_rows_come_through_the_cache_and_an_older_shard_is_read_again(tmp_path):
    """tasks.csv is scanned into the cache like the other tables (its depths kept as fractions),
    a second report reads it from there, and a shard of an older posx (no tasks.parquet) is
    passed over: its runs are read again, and it is removed once older than GRACE."""
    runs = tmp_path / "runs"
    for seed, accuracy in enumerate((0.0, 0.5, 0.25)):
        _tasks_csv(_run(runs, f"a{seed}", seed, 10.0), accuracy)
    cache_dir = tmp_path / cache.CACHE
    first = report([runs], out=tmp_path / "r1", formats="none")
    (shard,) = [s for s in cache_dir.iterdir() if not s.name.startswith(".")]
    rows = pd.read_parquet(shard / "tasks.parquet")
    assert len(rows) == 12 and sorted(set(rows["depth_lo"])) == [0.0, 0.5]
    deep = pd.read_csv(first / "tasks_summary.csv").query("factor == 2.0").iloc[0]
    assert deep["n_seeds"] == 3 and deep["accuracy_mean"] == pytest.approx((1 + 0.0 + 1 + 0.5 + 1 + 0.25) / 6)
    report([runs], out=tmp_path / "r2", formats="none")
    assert len(_shards(cache_dir)) == 1  # read from the cache
    (shard / "tasks.parquet").unlink()  # now a shard as an older posx wrote it
    os.utime(shard, (0, 0))  # and long past GRACE
    third = report([runs], out=tmp_path / "r3", formats="none")
    assert not shard.exists() and [len(s) for s in _shards(cache_dir)] == [3]
    pd.testing.assert_frame_equal(pd.read_csv(third / "tasks_summary.csv"), pd.read_csv(first / "tasks_summary.csv"))


def test_a_digest_written_before_tasks_were_listed_still_brings_its_task_rows(tmp_path):
    run = _run(tmp_path / "runs", "a0", 0, 10.0)
    _tasks_csv(run, 0.5)
    record = digest.refresh(run)
    assert record["columns"]["tasks.csv"][:2] == ["run", "pos"]
    del record["columns"]["tasks.csv"]  # as an older posx wrote it; the stamp still holds
    (run / digest.DIGEST).write_text(json.dumps(record))
    gathered = cache.gather([run], tmp_path / cache.CACHE)
    try:
        rows = gathered.con.execute(
            "SELECT depth_lo, accuracy FROM tasks WHERE factor = 2 ORDER BY depth_lo"
        ).fetchall()
    finally:
        cache.discard(gathered)
    assert rows == [(0.0, 1.0), (0.5, 0.5)]


def test_shard_names_sort_in_the_order_they_were_written():
    # the newest shard wins by name: two reports in one second must still sort by time of writing
    names = [cache.shard_name() for _ in range(200)]
    assert names == sorted(names) and len(set(names)) == len(names)


def test_a_digest_cached_in_an_older_format_is_read_again(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "a0", 0, 10.0)
    cache_dir = tmp_path / cache.CACHE
    first = report([runs], out=tmp_path / "r1", formats="none")
    (shard,) = [s for s in cache_dir.iterdir() if not s.name.startswith(".")]
    table = pd.read_parquet(shard / "digests.parquet")
    old = {k: v for k, v in json.loads(table["digest"][0]).items() if k != "left_out"}
    table["digest"] = [json.dumps({**old, "format": "posx-digest/1"})]  # as an older posx cached it
    table.to_parquet(shard / "digests.parquet", index=False)
    cache._sum(shard)  # its sums as that posx would have written them: the shard is read, its entry is not
    again = report([runs], out=tmp_path / "r2", formats="none")
    assert [len(s) for s in _shards(cache_dir)] == [1, 1]  # the run was read again, into a new shard
    assert json.loads(_shards(cache_dir)[-1]["digest"][0])["format"] == digest.FORMAT
    pd.testing.assert_frame_equal(_summary(first), _summary(again))


def test_a_listing_of_many_runs_checks_them_in_workers_exactly_as_alone(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for seed in range(4):
        digest.refresh(_run(runs, f"a{seed}", seed, 10.0 + seed))
    copy = tmp_path / "copy"
    shutil.copytree(runs, copy)  # new mtimes: every digest's stamp stale, its bytes the same
    (copy / "a2" / "config.yaml").write_text((copy / "a2" / "config.yaml").read_text().replace("seed: 2", "seed: 9"))
    alone = collection.list_runs(copy).drop(columns="path")
    shutil.rmtree(copy)
    shutil.copytree(runs, copy)
    (copy / "a2" / "config.yaml").write_text((copy / "a2" / "config.yaml").read_text().replace("seed: 2", "seed: 9"))
    monkeypatch.setattr(collection, "PARALLEL_FROM", 2)
    monkeypatch.setattr(collection, "cores", lambda: 2)
    together = collection.list_runs(copy).drop(columns="path")
    pd.testing.assert_frame_equal(alone, together)
    assert digest.written(copy / "a2", digest.stamp(copy / "a2"))["seed"] == 9  # computed again and written back
