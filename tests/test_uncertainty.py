"""The 95% interval of every perplexity row: per-window losses, checked against a hand computation."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from posx.eval import scoring
from posx.eval.extrapolate import evaluate
from posx.eval.tables import ADDED_COLUMNS, read_table
from posx.model.gpt import GPT
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig

from helpers.model import spec

CPU = torch.device("cpu")


def _model() -> GPT:
    torch.manual_seed(0)
    return GPT(spec(n_layer=2, n_head=2, d_model=32, pos="rope")).eval()


def test_window_sums_add_up_and_the_interval_is_the_t_interval_of_window_means():
    model = _model()
    tokens = torch.randint(0, 256, (2000,), generator=torch.Generator().manual_seed(3), dtype=torch.uint8)
    L, n = 32, 320
    scores = scoring.score(model, tokens, L, L, n, batch_tokens=70, device=CPU)
    means = []
    with torch.no_grad():
        for w in range(n // L):
            x = tokens[w * L : (w + 1) * L].long()[None]
            y = tokens[w * L + 1 : (w + 1) * L + 1].long()
            means.append(-F.log_softmax(model(x)[0][0].double(), -1)[torch.arange(L), y].mean().item())
    assert len(scores.window_sum) == 10
    np.testing.assert_allclose(scores.window_sum / L, means, rtol=1e-5)
    assert scores.window_sum.sum() == pytest.approx(scores.total, rel=1e-9)
    ci = scores.interval()
    se = statistics.stdev(means) / math.sqrt(10)
    nll = statistics.mean(means)
    assert ci.windows == 10 and ci.nll_se == pytest.approx(se, rel=1e-4)
    assert ci.ppl_lo == pytest.approx(math.exp(nll - 2.262 * se), rel=1e-4)  # t(9) quantile
    assert ci.ppl_hi == pytest.approx(math.exp(nll + 2.262 * se), rel=1e-4)


def test_sliding_windows_each_score_stride_tokens():
    model = _model()
    tokens = torch.randint(0, 256, (2000,), generator=torch.Generator().manual_seed(4), dtype=torch.uint8)
    scores = scoring.score(model, tokens, 32, 8, 160, batch_tokens=100, device=CPU)
    assert len(scores.window_sum) == 20 and scores.window_sum.sum() == pytest.approx(scores.total, rel=1e-9)


def test_one_window_or_a_nonfinite_loss_has_no_interval():
    assert math.isnan(scoring.interval(np.array([5.0]), 10).ppl_lo)
    assert math.isnan(scoring.interval(np.array([5.0, math.inf]), 10).nll_se)
    # Student's t, two-sided 95%, from the printed tables: 1, 10, 30 and 100 degrees of freedom
    published = {2: 12.706, 11: 2.228, 31: 2.042, 101: 1.984}
    assert {n: round(scoring.t95(n), 3) for n in published} == published


def test_every_ok_row_carries_an_interval_around_its_perplexity():
    model = _model()
    meta = RunMeta(model=model.config, train_context=8, data={}, step=0)
    ev = EvalConfig(factors=[1, 2, 4], methods=["none", "yarn"], tokens=64)
    val = torch.randint(0, 256, (500,), dtype=torch.uint8)
    df = evaluate(model, meta, val, ev, CPU, "r").table
    assert (df["ppl_lo"] < df["ppl"]).all() and (df["ppl"] < df["ppl_hi"]).all()
    assert list(df["windows"]) == [8, 4, 2] * 2  # 64 tokens in windows of 8, 16, 32
    assert (df["nll_se"] > 0).all()


def test_a_table_written_before_intervals_reads_with_empty_ones():
    """A table the flat-layout posx wrote (tests/fixtures/premove) reads with empty intervals."""
    path = Path(__file__).resolve().parent / "fixtures" / "premove" / "runs" / "old-rope" / "extrapolation.csv"
    df = read_table(path)
    assert set(ADDED_COLUMNS) <= set(df.columns)
    assert math.isnan(df["ppl_lo"].iloc[0]) and df["eval_id"].iloc[0] == ""


def test_run_names_and_evaluation_ids_that_look_like_numbers_stay_text(tmp_path):
    """An evaluation id is a hex hash: 4160285e10 (or all digits) must not read as 4.16e16."""
    path = Path(__file__).resolve().parent / "fixtures" / "premove" / "runs" / "old-rope" / "extrapolation.csv"
    df = pd.read_csv(path).assign(run="2024", eval_id="4160285e10")
    df.to_csv(tmp_path / "extrapolation.csv", index=False)
    back = read_table(tmp_path / "extrapolation.csv")
    assert (back["eval_id"] == "4160285e10").all() and (back["run"] == "2024").all()
