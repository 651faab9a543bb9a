"""posx report, again and again, over real runs: every report the cache serves equals a report
that reads every run afresh, however the runs and the report folder are spelled.

The runs are made by ``posx train``, ``posx extend`` and ``posx eval-extrapolate`` (not built by
hand), because the cache keys what it read by each run's path: a path spelled one way when a
shard is written and another when it is read (relative, absolute, through ``..`` or a link)
must still meet the same entry."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_posx

TABLES = ("summary.csv", "groups.csv", "passkey_summary.csv", "tasks_summary.csv", "missing.csv", "duplicates.csv")
TRAIN = ["eval.after_train=true", "eval.factors=[1,2]", "eval.methods=[none,pi]"]
EXTEND = ["extend.steps=2", "extend.warmup_steps=1", "extend.eval_every=1", "device=cpu", "eval.tokens=512"]


def tables(report: Path) -> dict[str, pd.DataFrame]:
    """The report's tables that it wrote (a report without the data for one leaves it out)."""
    return {name: pd.read_csv(report / name) for name in TABLES if (report / name).is_file()}


def report(work: Path, out: Path, *args: str) -> dict[str, pd.DataFrame]:
    run_posx("report", *args, "--out", str(out), "--format", "none", cwd=work)  # the tables are what the cache serves
    return tables(work / out)


class Reports:
    """Reports in ``work``, whose report folders share one cache, and reports written where no
    cache exists yet (a new folder under ``fresh``, so a new ``.cache`` beside each)."""

    def __init__(self, work: Path, fresh: Path) -> None:
        self.work, self.fresh, self.made = work, fresh, 0

    def served(self, *args: str) -> dict[str, pd.DataFrame]:
        self.made += 1
        return report(self.work, Path("results/reports") / f"r{self.made}", *args)

    def uncached(self, *args: str) -> dict[str, pd.DataFrame]:
        self.made += 1
        return report(self.work, self.fresh / f"u{self.made}" / "report", *args)


def assert_same(served: dict[str, pd.DataFrame], uncached: dict[str, pd.DataFrame], what: str) -> None:
    assert served.keys() == uncached.keys() and "summary.csv" in served, what
    for name, frame in served.items():
        pd.testing.assert_frame_equal(frame, uncached[name], obj=f"{name} of {what}")


@pytest.mark.slow
def test_every_report_the_cache_serves_equals_a_report_without_it(tmp_path, tiny_args):
    work = tmp_path / "work"
    (work / "results/reports").mkdir(parents=True)
    run_posx("train", "pos=rope", "name=a", *tiny_args, *TRAIN, cwd=work)
    run_posx("train", "pos=alibi", "name=b", *tiny_args, *TRAIN, cwd=work)
    run_posx("extend", "a", "method=yarn", "factor=2", "name=a-yarn", *EXTEND, cwd=work)
    os.symlink(work / "results", work / "linked")
    reports = Reports(work, tmp_path)

    every = reports.uncached()
    assert_same(reports.served(), every, "the first report, which writes the cache")
    assert_same(reports.served(), every, "a second report, read back from the cache")
    assert_same(reports.served(str(work / "linked/runs")), every, "the runs by an absolute path through a link")
    args = ["results/../results/runs", "--where", "pos.name=rope"]  # '..', a path of runs and --where
    assert_same(reports.served(*args), reports.uncached(*args), f"posx report {' '.join(args)}")

    # The sweep grows by a run, and one run is evaluated again with other settings.
    run_posx("train", "pos=nope", "name=c", *tiny_args, *TRAIN, cwd=work)
    run_posx("eval-extrapolate", "b", "eval.factors=[1,2,4]", "eval.methods=[none]", cwd=work)
    grown = reports.uncached()
    assert_same(reports.served(), grown, "a report after the sweep grew")
    summary = grown["summary.csv"]
    assert {"rope", "alibi", "nope"} <= set(summary["encoding"]) and 4 in set(summary["factor"])
    args = ["--evaluations", "all"]
    assert_same(reports.served(*args), reports.uncached(*args), f"posx report {' '.join(args)}")
