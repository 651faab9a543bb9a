"""One rule for what a factor evaluates: the length round(factor x T) and the RoPE scale L / T
(or eval.scale), the same in the checks before any work as in the evaluation itself."""

from __future__ import annotations

import pytest

from posx.configure import checks
from posx.configure.compose import compose
from posx.eval.scoring import eval_rows
from posx.schema.config import evaluated_length

from conftest import TINY


@pytest.mark.parametrize("scale", [None, 3.0])
def test_the_checks_before_any_work_compute_the_rows_the_evaluation_scores(monkeypatch, scale):
    """At T = 10 the factor 1.25 scores length 12 (round(12.5)), whose scale is 1.2, not 1.25."""
    cfg = compose([*TINY, "train.context_length=10", "eval.factors=[1,1.25,2]", f"eval.scale={scale or 'null'}"])
    checked = []
    monkeypatch.setattr(checks, "check_methods", lambda ev, methods, *args: checked.extend(args[-1]))
    checks.check_train_config(cfg)
    assert checked == eval_rows(cfg.eval, 10)
    assert [length for _, length in checked] == [10, 12, 20]
    expected = [scale] * 3 if scale else [1.0, 1.2, 2.0]
    assert [s for s, _ in checked] == pytest.approx(expected)


def test_an_evaluated_length_is_the_factor_times_t_rounded():
    assert [evaluated_length(f, 10) for f in (1, 1.25, 1.26, 2, 8)] == [10, 12, 13, 20, 80]
