"""The evaluation protocol: token counts, token-weighted NLL, frequencies restored."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posx import rope
from posx.eval.extrapolate import evaluate, window_nll
from posx.eval.scoring import tokens_for
from posx.model.gpt import GPT
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig

from helpers.model import spec


def test_scored_tokens_is_a_multiple_of_every_length():
    def scored(requested, lengths):
        return tokens_for("nonoverlapping", requested, lengths, lengths)

    assert scored(1000, [32, 64, 128, 256]) == 1024
    assert scored(1024, [32, 64]) == 1024
    assert scored(100, [30, 45]) == 180


def _model(pos="rope"):
    torch.manual_seed(0)
    return GPT(spec(n_layer=2, n_head=2, d_model=32, pos=pos, max_positions=16)).eval()


def test_window_nll_is_the_token_weighted_mean_and_independent_of_batching():
    model = _model()
    tokens = torch.randint(0, 256, (4 * 24 + 1,), dtype=torch.uint8)
    # reference: each window on its own, cross-entropy summed by hand
    ref = 0.0
    with torch.no_grad():
        for w in range(4):
            x = tokens[w * 24 : (w + 1) * 24].long()[None]
            y = tokens[w * 24 + 1 : (w + 1) * 24 + 1].long()
            logp = F.log_softmax(model(x)[0][0].double(), dim=-1)
            ref -= logp[torch.arange(24), y].sum().item()
    for batch_tokens in (24, 48, 1000):
        total, count = window_nll(model, tokens, 24, 4, batch_tokens, torch.device("cpu"))
        assert count == 96
        assert total == pytest.approx(ref, rel=1e-5)


def test_evaluate_gives_equal_token_counts_and_restores_frequencies():
    model = _model()
    meta = RunMeta(model=model.config, train_context=8, data={}, step=0)
    ev = EvalConfig(factors=[1, 2, 4], methods=["none", "pi", "yarn"], tokens=64)
    val = torch.randint(0, 256, (500,), dtype=torch.uint8)
    df = evaluate(model, meta, val, ev, torch.device("cpu"), "r").table
    assert set(df["tokens"]) == {64}
    assert df["ppl"].map(math.isfinite).all()
    yarn4 = df[(df["method"] == "yarn") & (df["factor"] == 4)].iloc[0]
    assert yarn4["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1)
    plain, _ = rope.frequencies("none", 16)
    torch.testing.assert_close(model.pos.inv_freq, plain)
    assert model.pos.attention_factor == 1.0


def test_absolute_rows_past_the_table_and_rope_methods_are_statuses():
    model = _model("absolute")
    meta = RunMeta(model=model.config, train_context=16, data={}, step=0)
    ev = EvalConfig(factors=[1, 2], methods=["none", "ntk"], tokens=32)
    df = evaluate(
        model, meta, torch.randint(0, 256, (100,), dtype=torch.uint8), ev, torch.device("cpu"), "r"
    ).table.set_index(["method", "factor"])
    assert df.loc[("none", 1.0), "status"] == "ok"
    assert df.loc[("none", 2.0), "status"] == "out_of_range"
    assert set(df.loc["ntk", "status"]) == {"not_applicable"}


def test_methods_that_share_frequencies_at_a_length_run_the_model_once():
    """At 1x every interpolation (pi, yarn) installs plain RoPE's frequencies: those cells are
    scored once and share the numbers; at 2x each method runs the model itself."""
    model = _model()
    meta = RunMeta(model=model.config, train_context=8, data={}, step=0)
    val = torch.randint(0, 256, (500,), dtype=torch.uint8)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))

    def passes(methods, factors):
        calls.clear()
        ev = EvalConfig(factors=factors, methods=methods, tokens=64, batch_tokens=16)
        return evaluate(model, meta, val, ev, torch.device("cpu"), "r").table, len(calls)

    one = {f: passes(["none"], [f])[1] for f in (1, 2)}  # forward passes of one cell per length
    table, n = passes(["none", "pi", "yarn"], [1, 2])
    assert n == one[1] + 3 * one[2]  # 1x: one cell for three methods; 2x: three cells
    at1 = table[table["factor"] == 1].set_index("method")
    assert at1.loc["pi", "nll"] == at1.loc["none", "nll"] == at1.loc["yarn", "nll"]
    at2 = table[table["factor"] == 2].set_index("method")
    assert at2.loc["pi", "nll"] != at2.loc["none", "nll"]
