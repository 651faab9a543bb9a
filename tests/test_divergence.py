"""A diverged run (a loss past what exp holds) is a result: its perplexity is ``inf`` with a note,
in training, evaluation, ``posx runs`` and the report; nothing raises an OverflowError."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from test_report_groups import _run

from posx.eval import scoring, tables
from posx.eval.extrapolate import fill_scores
from posx.report.summary import report

POSX = Path(__file__).resolve().parents[1] / "posx"
# The only calls of math.exp in posx: the guarded perplexity, and the figure's sideways offsets (no loss).
EXP_ALLOWED = {("eval/tables.py", "perplexity"), ("report/figures/palette.py", "dodge")}


def test_perplexity_of_a_loss_past_exp_is_inf_and_below_it_is_exp():
    assert tables.perplexity(800.0) == math.inf
    assert tables.perplexity(2.0) == pytest.approx(math.e**2)
    assert math.isnan(tables.perplexity(math.nan))


def test_the_interval_of_a_diverged_loss_is_not_an_overflow():
    windows = np.array([5000.0, 5600.0, 5200.0]) * 32  # summed NLL of three windows of 32 tokens
    ci = scoring.interval(windows, 96)
    assert ci.ppl_hi == math.inf and ci.windows == 3
    assert ci.nll_se == pytest.approx(np.std([5000.0, 5600.0, 5200.0], ddof=1) / math.sqrt(3))


def test_a_diverged_cell_is_scored_inf_with_finite_bits_per_byte():
    scores = scoring.Scores(np.full(32, 5000.0), np.ones(32, dtype=np.int64), np.array([5000.0 * 16, 5100.0 * 16]))
    row = {"bytes": 64, "status": "ok"}
    fill_scores(row, scores)
    assert row["status"] == "ok" and row["ppl"] == math.inf
    assert row["bpb"] == pytest.approx(5000.0 * 32 / 64 / math.log(2))


def _exp_calls(path: Path) -> set[tuple[str, str]]:
    """(file, enclosing function) of every math.exp call in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            callee = node.func if isinstance(node, ast.Call) else None
            if isinstance(callee, ast.Attribute) and callee.attr == "exp" and getattr(callee.value, "id", "") == "math":
                found.add((path.relative_to(POSX).as_posix(), func.name))
    return found


def test_math_exp_is_called_only_through_the_guarded_perplexity():
    calls = set().union(*(_exp_calls(p) for p in POSX.rglob("*.py")))
    assert calls <= EXP_ALLOWED, f"math.exp outside tables.perplexity: {sorted(calls - EXP_ALLOWED)}"
    assert ("eval/tables.py", "perplexity") in calls


def test_a_report_of_a_diverged_run_draws_its_figures_and_says_inf(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "ok", 0, 10.0)
    _run(runs, "gone", 1, math.inf, pos="alibi")
    console = Console(record=True, width=300)
    out = report([runs], out=tmp_path / "rep", console=console, formats="png")
    assert (out / "ppl_vs_length.png").is_file()
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["ppl_mean"] == math.inf).sum() == 2 and (summary["ppl_mean"] < math.inf).sum() == 2
    said = console.export_text()
    assert "ppl inf in " in said and "(it diverged)" in said
