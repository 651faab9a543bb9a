"""Tests for posx.runs.rundir's run lookup: a run that is not found names `posx runs` and the closest names."""

import re
from pathlib import Path

import pytest

from posx.core.errors import PosxError
from posx.runs.rundir import resolve_run, run_names


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


def test_every_suggested_name_resolves(tmp_path):
    results = _results(tmp_path)
    names = run_names(results)
    assert names == ["alibi-s0", "rope-s0", "rope-s1", "sweeps/sw1/0_rope_s0"]
    for name in names:
        assert resolve_run(name, results).is_dir()
