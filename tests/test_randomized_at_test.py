"""Randomized positions evaluated as published: sampled at test time too (eval.randomized_positions)."""

from __future__ import annotations

import numpy as np
import torch

from posx.eval.extrapolate import evaluate
from posx.model.gpt import GPT
from posx.model.randomized import sampled_at_test
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig

from helpers.model import spec

CPU = torch.device("cpu")


def model(randomized: bool) -> GPT:
    torch.manual_seed(0)
    keys = {"randomized": True, "randomized_max": 256} if randomized else {}
    return GPT(spec(n_layer=2, d_model=32, n_head=2, T=32, dropout=0.0, **keys)).eval()


def test_sampled_positions_at_test_are_the_training_draw_and_leave_the_generator_as_it_was():
    m, idx = model(True), torch.randint(0, 256, (2, 32))
    with torch.no_grad():
        dense = m(idx)[0]
        torch.manual_seed(7)
        m.train()  # training draws its positions from the seeded generator: the reference
        trained = m(idx)[0]
        m.eval()
        before = torch.random.get_rng_state()
        with sampled_at_test(m, "sampled", 7):
            sampled = m(idx)[0]
        assert torch.equal(torch.random.get_rng_state(), before)  # the caller's stream is untouched
        with sampled_at_test(m, "dense", 7):
            assert torch.allclose(m(idx)[0], dense)
    torch.testing.assert_close(sampled, trained)
    assert not torch.allclose(sampled, dense, atol=1e-4) and not m.sampled_positions


def test_a_model_trained_on_plain_positions_is_scored_as_it_is():
    m, idx = model(False), torch.randint(0, 256, (2, 32))
    with torch.no_grad(), sampled_at_test(m, "sampled", 7):
        assert not m.sampled_positions
        assert torch.allclose(m(idx)[0], m.eval()(idx)[0])


def test_an_evaluation_on_sampled_positions_is_reproducible_and_not_the_dense_one():
    m = model(True)
    val = torch.from_numpy(np.frombuffer(("x = 1 + 2  # text\n" * 600).encode(), dtype=np.uint8).copy())
    meta = RunMeta(m.config, 32, {}, 10)

    def ppl(how: str) -> list[float]:
        ev = EvalConfig(factors=[1.0, 2.0], methods=["none"], tokens=256,
                                             randomized_positions=how, tasks=[])  # fmt: skip
        return list(evaluate(m, meta, val, ev, CPU, "r").table["ppl"])

    sampled = ppl("sampled")
    assert sampled == ppl("sampled") and not np.allclose(sampled, ppl("dense"))
