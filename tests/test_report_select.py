"""Choosing what a report or a comparison shows (``--where KEY=VALUE``), and the 95% interval
of each ratio ``posx compare`` prints (fake run directories; nothing is trained)."""

from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd
import pytest
from test_collection import _run as _compare_run
from test_report_groups import _run
from typer.testing import CliRunner

from posx.cli import app
from posx.core.errors import PosxError
from posx.report.compare import collection
from posx.report.store import selection
from posx.report.summary import report

RUNS = [
    {"T": "64", "model.block": "gpt2", "train.lr": "0.001"},
    {"T": "128", "model.block": "llama", "train.lr": "0.003"},
]


def test_conditions_select_by_dotted_key_and_refuse_what_selects_nothing():
    assert selection.parse(["train.context_length=64", "model.block = llama"]) == [
        ("T", "64"),
        ("model.block", "llama"),
    ]
    assert selection.keep(RUNS, []) == [True, True]
    assert selection.keep(RUNS, [("T", "64")]) == [True, False]
    assert selection.keep(RUNS, [("train.lr", "1e-3")]) == [True, False]  # numbers compare as numbers
    for bad in ("T64", "=64", "T="):
        with pytest.raises(PosxError, match="write KEY=VALUE"):
            selection.parse([bad])
    with pytest.raises(PosxError, match=r"no run has the key model\.blok; keys that differ here: T, model\.block"):
        selection.keep(RUNS, [("model.blok", "llama")])
    with pytest.raises(PosxError, match=r"--where T=32 matches no run; T here is one of: 128, 64"):
        selection.keep(RUNS, [("T", "32")])
    with pytest.raises(PosxError, match="each matches some run, but no run matches them all"):
        selection.keep(RUNS, [("T", "64"), ("model.block", "llama")])


@pytest.mark.parametrize("written", ["3_2", "6_4", " 64", "64 ", "+6_4", "0x40", "nan", "inf"])
def test_a_value_is_compared_as_the_runs_own_number_never_parsed_loosely(written):
    runs = [{"T": "64", "train.lr": "nan"}, {"T": "32", "train.lr": "inf"}]
    key = "T" if written.strip("+ ").replace("_", "").isdigit() or written.startswith("0x") else "train.lr"
    if key == "T":
        with pytest.raises(PosxError, match="matches no run"):
            selection.keep(runs, [(key, written)])
    else:  # the same text is the same value; never a number equal to another
        assert selection.keep(runs, [(key, written)]) == [written == "nan", written == "inf"]
    assert selection.keep(runs, [("T", "64.0")]) == [True, False] and selection.keep(runs, [("T", "6.4e1")])[0]


@pytest.mark.slow  # two reports
def test_report_where_draws_only_the_selected_groups(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "short0", 0, 10.0, T=32)
    _run(runs, "short1", 1, 12.0, T=32)
    _run(runs, "long0", 0, 20.0, T=64)
    out = report([runs], out=tmp_path / "rep", where=["T=32"])
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["train_context"].astype(str)) == {"32"} and summary["n_seeds"].max() == 2
    assert len(pd.read_csv(out / "groups.csv")) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--where", "T=999"], "--where T=999 matches no run; T here is one of: 32, 64"),
        (["--where", "model.nope=1"], "no run has the key model.nope"),
        (["--where", "T"], "write KEY=VALUE"),
    ],
)
def test_a_where_that_selects_nothing_is_one_line_exit_2(tmp_path, monkeypatch, args, said):
    runs = tmp_path / "runs"
    _run(runs, "a", 0, 10.0, T=32)
    _run(runs, "b", 0, 20.0, T=64)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for command in (
        ["report", str(runs), "--out", str(tmp_path / "rep")],
        ["compare", str(runs / "a"), str(runs / "b")],
    ):
        out = runner.invoke(app, [*command, *args])
        assert out.exit_code == 2, out.output
        assert said in out.output and "Traceback" not in out.output
        assert len(out.output.strip().splitlines()) == 1
    assert not (tmp_path / "rep").exists()  # nothing written


def test_compare_where_keeps_the_matching_runs(tmp_path):
    runs = tmp_path / "runs"
    a, b, c = _run(runs, "a", 0, 10.0, T=32), _run(runs, "b", 1, 12.0, T=32), _run(runs, "c", 0, 20.0, T=64)
    assert collection.select([a, b, c], [("T", "32")]) == [a, b]
    assert collection.select([a, b, c], []) == [a, b, c]


def test_each_ratio_carries_a_95_percent_interval_that_covers_as_it_says(tmp_path, monkeypatch):
    lo, hi = collection.ratio_interval(np.array([1.2]), np.array([0.03]), np.array([0.04]))
    assert np.log(hi / lo)[0] == pytest.approx(2 * 1.959964 * 0.05)  # sqrt(0.03² + 0.04²) = 0.05
    assert np.sqrt(lo * hi)[0] == pytest.approx(1.2)  # symmetric about the ratio in log
    # coverage against its definition: independent mean NLLs with known standard errors
    rng = np.random.default_rng(0)
    se_a, se_b, true = 0.02, 0.05, np.log(1.3)
    nll_a = rng.normal(2.0, se_a, 20_000)
    nll_b = rng.normal(2.0 + true, se_b, 20_000)
    lo, hi = collection.ratio_interval(np.exp(nll_b - nll_a), se_a, se_b)
    assert ((lo <= 1.3) & (1.3 <= hi)).mean() == pytest.approx(0.95, abs=0.01)
    # in the table and the CSV: from each run's nll_se, or from its interval when a table has none
    results = tmp_path / "results"
    _compare_run(results / "runs", "a", 10.0)
    _compare_run(results / "runs", "b", 12.0)
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["compare", "a", "b", "--csv", "-"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    row = next(r for r in rows if r["method"] == "none" and float(r["factor"]) == 1.0)
    se = [(np.log(p + 1) - np.log(p - 1)) / (2 * 1.959964) for p in (10.0, 12.0)]  # from [ppl - 1, ppl + 1]
    want = collection.ratio_interval(1.2, *se)
    assert (float(row["b / a lo"]), float(row["b / a hi"])) == pytest.approx(want)
    table = CliRunner().invoke(app, ["compare", "a", "b"], env={"COLUMNS": "250"}).output
    assert "delta method" in table and f"1.200 [{want[0]:.3f}, {want[1]:.3f}]" in table


def test_a_row_scored_on_few_windows_keeps_its_width_in_the_ratio():
    """Two windows: the run's interval uses the t quantile (12.7), far wider than 1.96 x nll_se;
    the ratio's interval takes the run's own width, and a row without an interval its nll_se."""
    nll, se = 3.0, 0.1
    t = pd.DataFrame({"nll_se": [se, se], "ppl_lo": [np.exp(nll - 12.706 * se), np.nan],
                      "ppl_hi": [np.exp(nll + 12.706 * se), np.nan]})  # fmt: skip
    got = collection._log_se(t)
    assert got[0] == pytest.approx(12.706 * se / 1.959964) and got[1] == pytest.approx(se)
    lo, hi = collection.ratio_interval(1.0, got[0], 0.0)
    assert (lo, hi) == pytest.approx((t["ppl_lo"][0] / np.exp(nll), t["ppl_hi"][0] / np.exp(nll)))
