"""Task sequences in training batches: the rate, determinism, and a place in the run's identity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from posx.config.compose import compose
from posx.report import groups
from posx.schema import DataConfig
from posx.train.taskmix import mix_batch, mix_rows

from conftest import run_posx

TRAIN = np.frombuffer(("".join(f"x = {i} * y  # line {i}\n" for i in range(2000))).encode(), dtype=np.uint8)


def batch(seed: int = 0, B: int = 16, T: int = 96):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (B, T), generator=g)
    return x, torch.roll(x, -1, 1)


def data(p: float, tasks=("niah", "mqar", "copy")):
    return OmegaConf.structured(DataConfig(task_mix=p, mix_tasks=list(tasks)))


def test_no_mix_leaves_the_batch_as_it_is():
    x, y = batch()
    mx, my, n = mix_batch(x, y, data(0.0), TRAIN, seed=0, step=3)
    assert n == 0 and mx is x and my is y


def test_the_mix_is_deterministic_from_seed_and_step():
    x, y = batch()
    a = mix_batch(x, y, data(0.5), TRAIN, seed=1, step=7)
    b = mix_batch(x, y, data(0.5), TRAIN, seed=1, step=7)
    c = mix_batch(x, y, data(0.5), TRAIN, seed=1, step=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2] > 0
    assert not torch.equal(a[0], c[0])
    assert torch.equal(x, batch()[0])  # the input batch is not modified in place


def test_replaced_rows_are_task_sequences_with_shifted_targets():
    x, y = batch()
    mx, my, n = mix_batch(x, y, data(1.0, ["copy"]), TRAIN, seed=0, step=0)
    assert n == 16
    for i in range(16):
        assert torch.equal(mx[i, 1:], my[i, :-1])
        seq = bytes(mx[i].tolist()) + bytes([my[i, -1].item()])
        tail = seq[-16:]  # the copied span (16 letters) ends the sequence
        assert tail.isalpha() and seq[:-16].count(tail) == 1


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_mix_rate_is_p(p):
    rows = sum(len(mix_rows(32, p, seed=0, step=s)[0]) for s in range(300))
    n = 32 * 300
    assert abs(rows / n - p) < 4 * np.sqrt(p * (1 - p) / n)


@pytest.mark.slow
def test_the_mix_is_part_of_the_runs_identity(tmp_path):
    def ident(*overrides):
        cfg = OmegaConf.to_container(compose(list(overrides)), resolve=True, enum_to_str=True)
        return groups.identity(cfg, None, tmp_path, None, evaluations=[])

    assert ident()["data.task_mix"] == "0"
    assert ident("data.task_mix=0.5") != ident() and ident("data.task_mix=0.5") != ident(
        "data.task_mix=0.5", "data.mix_tasks=[copy]"
    )
    assert ident("seed=3") == ident()


@pytest.mark.slow
def test_training_with_the_mix_is_reproducible_and_differs_from_training_without(tiny_args, tmp_path):
    def losses(name, *overrides):
        run_posx("train", f"name={name}", *tiny_args, *overrides, cwd=tmp_path)
        metrics = pd.read_csv(tmp_path / "results" / "runs" / name / "metrics.csv")
        return metrics["train_loss"].tolist()

    mix = ("data.task_mix=0.5", "data.mix_tasks=[niah,copy]")
    a, b, plain = losses("a", *mix), losses("b", *mix), losses("plain")
    assert a == b and a != plain
