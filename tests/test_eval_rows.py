"""One rule for what a factor evaluates: the length round(factor x T) and the RoPE scale L / T
(or eval.scale), the same in the checks before any work as in the evaluation itself."""

from __future__ import annotations

import pytest
import torch

from posx.configure import checks
from posx.configure.compose import compose, typed
from posx.core.errors import PosxError
from posx.eval import extended, scoring
from posx.eval.scoring import eval_rows
from posx.schema.config import evaluated_length
from posx.train.steps import check_eval_fits

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


@pytest.mark.parametrize("pose", [False, True])
def test_the_check_before_an_extension_trains_reads_what_its_evaluation_reads(pose):
    """Sliding windows with eval.stride null step by half of each stage's own T: the parent's stage
    reads more held-out text than the child's, and the check counts both."""
    T0, T1 = 16, 32
    over = [
        "eval.protocol=sliding",
        "eval.factors=[1,2]",
        "eval.tokens=64",
        f"train.context_length={T0 if pose else T1}",
    ]
    cfg = typed(compose([*TINY, *over, *([f"pos.pose_length={T1}"] if pose else [])]))
    plan = extended.planned(T0, cfg.train.context_length, cfg.pos.pose_length, cfg.eval)
    assert (
        plan.lengths == [16, 32, 64] and plan.needed > scoring.held_out_needed("sliding", None, 64, T1, plan.lengths)[1]
    )
    check_eval_fits(cfg, torch.zeros(plan.needed, dtype=torch.uint8), T0)
    with pytest.raises(PosxError, match=f"would read {plan.needed} "):
        check_eval_fits(cfg, torch.zeros(plan.needed - 1, dtype=torch.uint8), T0)


def test_the_check_before_a_run_trains_reads_the_lengths_it_is_scored_at():
    cfg = typed(compose([*TINY, "train.context_length=10", "eval.factors=[1,1.25,2]", "eval.tokens=120"]))
    _, needed = scoring.held_out_needed("nonoverlapping", None, 120, 10, [10, 12, 20])
    check_eval_fits(cfg, torch.zeros(needed, dtype=torch.uint8), None)
    with pytest.raises(PosxError, match=f"would read {needed} "):
        check_eval_fits(cfg, torch.zeros(needed - 1, dtype=torch.uint8), None)
