"""Every name works: run, report and cache folders whose names hold glob or quote characters are
read as the files they name (``posx.report.store.literal``), never as patterns or SQL (fake run
directories, as in test_report_groups; nothing is trained)."""

from __future__ import annotations

import pandas as pd
import pytest
from test_report_groups import _run

from posx.report.store import cache
from posx.report.summary import report

from helpers.marks import one_fast

NAMES = ["x[1]", "a*b", "q?", "it's", 'say "hi"', "two words", "-dash", "[bold]m[/bold]"]


def _ppl(out) -> float:
    return float(pd.read_csv(out / "summary.csv").query("factor == 1.0").iloc[0]["ppl_mean"])


def test_runs_whose_names_are_patterns_are_read_as_themselves(tmp_path):
    runs = tmp_path / "runs"
    for seed, name in enumerate(NAMES):
        _run(runs, name, seed, 10.0 + seed)
    _run(runs, "x1", 0, 50.0, T=64)  # what x[1] matches as a glob
    _run(runs, "ab", 0, 60.0, T=64)  # what a*b matches
    out = report([runs / name for name in NAMES], out=tmp_path / "r")
    summary = pd.read_csv(out / "summary.csv").query("factor == 1.0")
    assert list(summary["n_seeds"]) == [len(NAMES)]
    assert _ppl(out) == pytest.approx(10.0 + (len(NAMES) - 1) / 2)


@pytest.mark.parametrize("folder", one_fast(["rep[1]", "it's*"]))
def test_a_report_folder_of_any_name_keeps_its_cache_working(tmp_path, folder):
    runs = tmp_path / "runs"
    for seed, ppl in enumerate((10.0, 14.0)):
        _run(runs, f"a{seed}", seed, ppl)
    first = report([runs], out=tmp_path / folder / "r1")
    _run(runs, "a2", 2, 18.0)  # read into a second shard; the first one is read through its link
    again = report([runs], out=tmp_path / folder / "r2")
    assert _ppl(first) == pytest.approx(12.0) and _ppl(again) == pytest.approx(14.0)
    assert len([s for s in (tmp_path / folder / cache.CACHE).iterdir() if not s.name.startswith(".")]) == 2
