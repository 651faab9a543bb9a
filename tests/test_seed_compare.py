"""`posx compare` over seeds: runs of equal settings but the seed form groups, and a later group's
mean perplexity is compared with the first's by the one rule (checked against scipy.stats)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from scipy import stats
from typer.testing import CliRunner

from posx.cli import app
from posx.report.compare import collection, seed_compare
from posx.runs.records import RunMeta

from helpers.model import spec


def _run(root: Path, name: str, seed: int, ppl: float, lr: float = 1e-3) -> Path:
    run = root / name
    run.mkdir(parents=True)
    config = {"seed": seed, "pos": {"name": "rope"}, "train": {"context_length": 32, "lr": lr}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "model.json").write_text(json.dumps(RunMeta(spec(), train_context=32, data={}, step=6).to_dict()))
    rows = [{"pos": "rope", "train_context": 32, "method": "none", "factor": float(f), "eval_context": 32 * f,
             "ppl": ppl * f, "status": "ok", "stage": "zero-shot", "ppl_lo": ppl * f - 1, "ppl_hi": ppl * f + 1}
            for f in (1, 2)]  # fmt: skip
    with open(run / "extrapolation.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return run


def _runs(tmp_path: Path) -> tuple[list[Path], list[float], list[float]]:
    first, later = [10.0, 10.4, 9.9], [9.0, 9.5, 8.8]
    runs = [_run(tmp_path, f"base-s{s}", s, p) for s, p in enumerate(first)]
    runs += [_run(tmp_path, f"fast-s{s}", s, p, 3e-3) for s, p in enumerate(later)]
    return runs, first, later


def test_groups_of_seeds_are_compared_by_the_one_rule(tmp_path):
    runs, first, later = _runs(tmp_path)
    df, names, _notes = collection.compare(runs)
    groups = seed_compare.seed_groups(runs, names)
    assert [[n for n, _ in g] for g in groups] == [["base-s0", "base-s1", "base-s2"], ["fast-s0", "fast-s1", "fast-s2"]]
    diffs = seed_compare.differences(df, groups)
    row = diffs[diffs["factor"] == 2.0].iloc[0]
    ref = stats.ttest_rel([2 * v for v in later], [2 * v for v in first])  # the same seeds: paired
    ci = ref.confidence_interval(0.95)
    assert (row["ci_low"], row["ci_high"], row["p"]) == pytest.approx((ci.low, ci.high, ref.pvalue), rel=1e-9)
    assert row["test"] == "paired t" and row["call"] == "lower" and row["n"] == row["n_against"] == 3


def test_one_seed_a_group_adds_no_comparison_and_the_cli_prints_it(tmp_path, monkeypatch):
    runs, _first, _later = _runs(tmp_path)
    df, names, _notes = collection.compare(runs[2:4])  # base-s2 and fast-s0: one seed each
    assert seed_compare.differences(df, seed_compare.seed_groups(runs[2:4], names)).empty
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["compare", *map(str, runs)], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "difference of mean perplexity over seeds" in out.output and "paired t" in out.output
