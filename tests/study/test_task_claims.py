"""scripts.study.task_claims on synthetic tables: each outcome of the one rule from numbers whose answer is known,
and the pooling of depth ranges into one exact share per cell; the comparison figure's lines."""

from __future__ import annotations

import pandas as pd
import pytest

from posx.report.stats import CONTRADICTED, INCONCLUSIVE, NOT_CHECKED, SUPPORTED
from scripts.study import task_claims as tc
from scripts.study.claims import corrected
from scripts.study.task_comparison import figure

FACTORS = (1.0, 2.0, 4.0, 8.0)


def runs(encoding: str, task: str, past: list[float], at_t: float = 1.0, method: str = "none") -> list[dict]:
    """One seed per value of ``past``: exact ``at_t`` at 1x and the value at 2x, 4x and 8x."""
    cell = {"encoding": encoding, "method": method, "task": task}
    return [
        {**cell, "seed": seed, "factor": f, "exact": at_t if f == 1 else p}
        for seed, p in enumerate(past)
        for f in FACTORS
    ]


def frame(*groups: list[dict]) -> pd.DataFrame:
    rows = [row for group in groups for row in group]
    return pd.DataFrame(rows).assign(trials=128) if rows else pd.DataFrame(columns=tc.SHARE_COLUMNS)


def verdicts(shares: pd.DataFrame, paper: tuple) -> dict[str, str]:
    """Task -> the claim's verdict (with its ``all tasks`` row) under the one rule."""
    table = tc.per_task(corrected(tc.check(shares), tc.CLAIM_KEYS))
    mine = table[table["paper"] == paper[0]]
    return dict(zip(mine["task"], mine["verdict"]))


def test_nope_beyond_rope_and_alibi_is_supported_and_the_numbers_say_so():
    shares = frame(
        runs("nope", "copy", [0.80, 0.82, 0.81]),
        runs("rope", "copy", [0.30, 0.32, 0.34]),
        runs("alibi", "copy", [0.50, 0.53, 0.51]),
    )
    rows = tc.check(shares)
    row = rows[rows["paper"] == tc.KAZEMNEJAD[0]].iloc[0]
    assert row["outcome"] == SUPPORTED and row["citation"] == tc.KAZEMNEJAD[1]
    past = "past T (2x, 4x, 8x)"
    assert row["comparison"] == f"nope {past} 0.810 ± 0.010 (n=3) ≥ 0.95 × rope {past} 0.304 ± 0.019 (n=3)"
    assert row["test"] == "paired t" and row["df"] == 2
    assert verdicts(shares, tc.KAZEMNEJAD) == {"copy": SUPPORTED}


def test_no_worse_is_a_non_inferiority_test_with_its_margin():
    level = frame(runs("nope", "copy", [0.5, 0.6, 0.4]), runs("rope", "copy", [0.45, 0.55, 0.5]),
                  runs("alibi", "copy", [0.5, 0.5, 0.6]))  # fmt: skip
    assert verdicts(level, tc.KAZEMNEJAD) == {"copy": INCONCLUSIVE}  # level within the noise: not shown
    below = frame(runs("nope", "copy", [0.1, 0.12, 0.11]), runs("rope", "copy", [0.6, 0.62, 0.61]),
                  runs("alibi", "copy", [0.05, 0.05, 0.06]))  # fmt: skip
    assert verdicts(below, tc.KAZEMNEJAD) == {"copy": CONTRADICTED}
    close = frame(runs("nope", "copy", [0.81, 0.815, 0.812]), runs("rope", "copy", [0.82, 0.822, 0.821]),
                  runs("alibi", "copy", [0.81, 0.82, 0.81]))  # fmt: skip
    assert verdicts(close, tc.KAZEMNEJAD) == {"copy": SUPPORTED}  # 2% lower: inside the 5% margin


def test_beats_is_called_when_the_interval_excludes_zero():
    within = frame(runs("rope-randomized", "copy", [0.5, 0.6, 0.4]), runs("rope", "copy", [0.45, 0.55, 0.5]))
    assert verdicts(within, tc.RUOSS) == {"copy": INCONCLUSIVE}
    row = tc.check(within).query("paper == @tc.RUOSS[0]").iloc[0]
    assert row["detectable"] > abs(row["diff"])  # an inconclusive one says what it could have detected
    beyond = frame(runs("rope-randomized", "copy", [0.9, 0.91, 0.93]), runs("rope", "copy", [0.1, 0.11, 0.12]))
    assert verdicts(beyond, tc.RUOSS) == {"copy": SUPPORTED}
    reversed_ = frame(runs("rope-randomized", "copy", [0.1, 0.11, 0.12]), runs("rope", "copy", [0.9, 0.91, 0.93]))
    assert verdicts(reversed_, tc.RUOSS) == {"copy": CONTRADICTED}


def test_one_seed_is_never_called():
    shares = frame(runs("rope-randomized", "copy", [0.9]), runs("rope", "copy", [0.1]))
    assert verdicts(shares, tc.RUOSS) == {"copy": NOT_CHECKED}
    assert verdicts(frame(runs("rope", "mqar", [0.0], at_t=1.0)), tc.ARORA) == {"mqar": NOT_CHECKED}


def test_an_encoding_that_did_not_learn_the_task_at_t_is_not_compared():
    shares = frame(runs("rope-randomized", "copy", [0.02, 0.03, 0.02], at_t=0.05), runs("rope", "copy", [0.0] * 3))
    row = tc.check(shares).query("paper == @tc.RUOSS[0]").iloc[0]
    assert row["outcome"] == INCONCLUSIVE and row["test"] == ""
    assert "not learned at T (rope-randomized 5% at 1x" in row["comparison"]


def test_a_claim_missing_a_run_is_not_checked_and_an_empty_table_checks_nothing():
    shares = frame(runs("nope", "copy", [0.8, 0.8, 0.81]), runs("rope", "copy", [0.3, 0.3, 0.31]))
    assert verdicts(shares, tc.KAZEMNEJAD) == {"copy": NOT_CHECKED}  # ALiBi is missing
    assert verdicts(shares, tc.LI) == {"copy": NOT_CHECKED}
    empty = tc.check(frame())
    assert set(empty["outcome"]) == {NOT_CHECKED}
    assert set(empty["paper"]) == {p[0] for p in (tc.ARORA, tc.KAZEMNEJAD, tc.RUOSS, tc.LI)}


def test_arora_tests_ropes_exact_share_at_t_against_ninety_percent():
    def arora(at_t: list[float]) -> str:
        rows = [
            {"encoding": "rope", "method": "none", "seed": s, "task": "mqar", "factor": 1.0, "exact": v}
            for s, v in enumerate(at_t)
        ]
        return verdicts(frame(rows), tc.ARORA)["mqar"]

    assert arora([0.95, 0.97, 0.96]) == SUPPORTED
    assert arora([1.0, 1.0, 1.0]) == SUPPORTED  # no spread, above the bar
    assert arora([0.5, 0.55, 0.52]) == CONTRADICTED
    assert arora([0.8, 1.0, 0.9]) == INCONCLUSIVE
    assert verdicts(frame(runs("rope", "copy", [1.0] * 3)), tc.ARORA) == {"mqar": NOT_CHECKED}


def test_the_all_tasks_row_combines_the_tasks():
    good = frame(runs("rope-randomized", "copy", [0.9, 0.91, 0.93]), runs("rope", "copy", [0.1, 0.11, 0.12]))
    noisy = frame(runs("rope-randomized", "passkey", [0.5, 0.6, 0.4]), runs("rope", "passkey", [0.45, 0.55, 0.5]))
    assert verdicts(pd.concat([good, noisy]), tc.RUOSS) == {"copy": SUPPORTED, "passkey": INCONCLUSIVE,
                                                             tc.ALL_TASKS: INCONCLUSIVE}  # fmt: skip


def test_exact_shares_pool_the_depth_ranges_by_trials_and_drop_rows_not_scored():
    rows = pd.DataFrame(
        [
            {"encoding": "rope", "method": "none", "seed": 0, "task": "copy", "factor": 1.0, "trials": 32,
             "accuracy": 0.5, "status": "ok"},
            {"encoding": "rope", "method": "none", "seed": 0, "task": "copy", "factor": 1.0, "trials": 96,
             "accuracy": 1.0, "status": "ok"},
            {"encoding": "rope", "method": "none", "seed": 0, "task": "copy", "factor": 2.0, "trials": 32,
             "accuracy": 0.0, "status": "too long"},
        ]
    )  # fmt: skip
    shares = tc.exact_shares(rows)
    assert len(shares) == 1
    assert shares["exact"].iloc[0] == pytest.approx((16 + 96) / 128)
    assert shares["trials"].iloc[0] == 128


def test_the_figure_has_a_panel_per_task_and_a_legend_entry_per_line():
    shares = frame(runs("rope", "copy", [0.3, 0.4]), runs("rope", "copy", [0.2, 0.3], method="pi"),
                   runs("rope-randomized", "copy", [0.5]), runs("rope", "passkey", [0.9, 0.8]))  # fmt: skip
    labels = {"rope": "RoPE", "rope-randomized": "RoPE, randomized positions"}
    fig = figure(shares, labels, {"rope-randomized": "rope"}, ["copy", "passkey"])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["copy", "passkey"]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["RoPE, 2 seeds", "RoPE + PI (zero-shot), 2 seeds", "RoPE, randomized positions, 1 seed",
                     "training length T"]  # fmt: skip
    colours = {line.get_label(): line.get_color() for line in panels[0].get_lines()}
    assert colours["RoPE, 2 seeds"] != colours["RoPE, randomized positions, 1 seed"]
    dashes = {line.get_label(): line.get_linestyle() for line in panels[0].get_lines()}
    assert dashes["RoPE, 2 seeds"] != dashes["RoPE, randomized positions, 1 seed"]  # shades alone are close
