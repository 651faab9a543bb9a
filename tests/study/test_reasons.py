"""The reasons under the claims a study does not support are computed from its numbers: every
statement of them in the committed STUDY.md agrees with claims.csv, and the check finds a reason
that does not (scripts/study/verdicts.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from scripts.study import verdicts

REPO = Path(__file__).resolve().parents[2]
STUDIES = ["cpu-tiny", "cpu-methods"]


def committed(name: str) -> tuple[str, pd.DataFrame]:
    folder = REPO / "results" / "reference" / name
    return (folder / "STUDY.md").read_text(), pd.read_csv(folder / "claims.csv")


@pytest.mark.parametrize("name", STUDIES)
def test_every_reason_in_the_committed_study_agrees_with_its_claims(name):
    study, claims = committed(name)
    assert verdicts.REASONS_HEADING in study
    assert verdicts.contradictions(study, claims) == []


@pytest.mark.parametrize(
    "tamper",
    [
        lambda text: text.replace("the means go the paper's way", "the means go the other way", 1),
        lambda text: text.replace("seeds the study could detect |d| ≥ ", "seeds the study could detect |d| ≥ 9", 1),
        lambda text: text.replace("the interval lies on the other side", "the interval holds zero", 1),
        lambda text: text.replace("(paired t)", "(Welch t)", 1),
    ],
)  # fmt: skip
def test_a_reason_that_contradicts_the_numbers_is_found(tamper):
    study, claims = committed("cpu-methods")
    changed = tamper(study)
    assert changed != study
    assert verdicts.contradictions(changed, claims) != []


def test_a_missing_reason_or_a_study_without_computed_reasons_is_found():
    study, claims = committed("cpu-methods")
    head, rest = study.split(verdicts.REASONS_HEADING, 1)
    first, later = rest.split("\n- **", 2)[0], rest.split("\n- **", 2)[2]
    assert verdicts.contradictions(head + verdicts.REASONS_HEADING + first + "\n- **" + later, claims) != []
    assert verdicts.contradictions(head, claims) != []


def test_a_reason_states_its_rows_numbers():
    rows = pd.DataFrame(
        [
            {"outcome": "inconclusive", "low": "a at 8x", "high": "b at 8x", "diff": -0.25, "ci_low": -0.9,
             "ci_high": 0.4, "test": "Welch t", "n_low": 3, "n_high": 5, "detectable": 0.8, "comparison": ""},
            {"outcome": "contradicted", "low": "c", "high": "d", "diff": 0.5, "ci_low": 0.2, "ci_high": 0.8,
             "test": "paired t", "n_low": 5, "n_high": 5, "detectable": float("nan"), "comparison": ""},
            {"outcome": "supported", "low": "e", "high": "f", "diff": -1.0, "ci_low": -2.0, "ci_high": -0.1,
             "test": "paired t", "n_low": 5, "n_high": 5, "detectable": float("nan"), "comparison": ""},
        ]
    )  # fmt: skip
    text = verdicts.reason(rows)
    assert "a at 8x against b at 8x: d = -0.250 [-0.900, +0.400] (Welch t), the means go the paper's way" in text
    assert "n = 3/5 seeds the study could detect |d| ≥ 0.800 at 80% power" in text
    assert "c against d: d = +0.500 [+0.200, +0.800] (paired t), the interval lies on the other side" in text
    assert "e against f" not in text  # a supported comparison needs no reason
