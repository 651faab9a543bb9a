"""Task sequences in training batches: the rate, determinism, and a place in the run's identity."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from posx.configure.checks import check_config
from posx.configure.compose import compose
from posx.core.errors import PosxError
from posx.report.store import groups
from posx.schema.config import DataConfig
from posx.train.taskmix import IGNORE, make_pool, mix_batch, mix_rows

from conftest import run_posx

TRAIN = np.frombuffer(("".join(f"x = {i} * y  # line {i}\n" for i in range(2000))).encode(), dtype=np.uint8)


def batch(seed: int = 0, B: int = 16, T: int = 96):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (B, T), generator=g)
    return x, torch.roll(x, -1, 1)


def data(p: float, tasks=("niah", "mqar", "copy")):
    return DataConfig(task_mix=p, mix_tasks=list(tasks))


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

    mix = ("data.task_mix=0.5", "data.mix_tasks=[niah,copy]", "data.task_options.span=4")  # both fit T = 32
    a, b, plain = losses("a", *mix), losses("b", *mix), losses("plain")
    assert a == b and a != plain


def test_the_mix_draws_tasks_with_data_task_options():
    cfg = data(1.0, ["mqar"])
    cfg.task_options.queries, cfg.task_options.key_letters, cfg.task_options.digits = 2, 1, 1
    mx, my, n = mix_batch(*batch(T=32), cfg, TRAIN, seed=0, step=0)
    seq = bytes(mx[0].tolist()) + bytes([my[0, -1].item()])
    pairs = seq.decode().split()
    assert n == 16 and all(len(p) == 3 and p[1] == ":" for p in pairs)  # one letter, a colon, one digit


def test_answers_only_loss_keeps_just_the_answer_targets():
    cfg = data(1.0, ["mqar"])
    cfg.task_options.queries, cfg.task_options.key_letters, cfg.task_options.digits = 2, 1, 1
    ax, ay, _ = mix_batch(*batch(T=32), cfg, TRAIN, seed=0, step=0)
    cfg.mix_loss = "answers"
    mx, my, _ = mix_batch(*batch(T=32), cfg, TRAIN, seed=0, step=0)
    assert torch.equal(mx, ax)  # the same sequences; only the targets differ
    for i in range(16):
        kept = (my[i] != IGNORE).nonzero().flatten().tolist()
        assert len(kept) == 2 and torch.equal(my[i, kept], ay[i, kept])  # the two asked values
        seq = bytes(mx[i].tolist()).decode()
        for t in kept:
            assert seq[t] == ":" and f"{seq[t - 1]}:{chr(my[i, t].item())}" in seq[: t - 1]  # key, colon: value


def test_a_mix_a_task_of_which_never_fits_T_is_refused_in_one_line():
    with pytest.raises(PosxError, match=r"data.mix_tasks: mqar does not fit in T = 32 tokens"):
        check_config(compose(["data.task_mix=1", "data.mix_tasks=[mqar,variable_tracking]", "train.context_length=32"]))
    with pytest.raises(PosxError, match=r"copy does not fit in T = 32 .* take copy out of"):
        check_config(compose(["data.task_mix=1", "data.mix_tasks=[niah,copy]", "train.context_length=32"]))
    check_config(
        compose(
            [
                "data.task_mix=1",
                "data.mix_tasks=[mqar]",
                "train.context_length=32",
                "data.task_options.key_letters=1",
                "data.task_options.digits=1",
            ]
        )
    )


def test_the_mixs_task_options_are_part_of_the_runs_identity(tmp_path):
    def ident(*overrides):
        cfg = OmegaConf.to_container(compose(list(overrides)), resolve=True, enum_to_str=True)
        return groups.identity(cfg, None, tmp_path, None, evaluations=[])

    assert ident("data.task_options.queries=2") != ident() and ident("data.mix_loss=answers") != ident()


@pytest.mark.slow
def test_a_run_with_a_mix_records_held_out_accuracy_against_tokens(tiny_args, tmp_path):
    mix = ["data.task_mix=1", "data.mix_tasks=[mqar,copy]", "data.task_options.trials=8"]
    mix += ["data.task_options.key_letters=1", "data.task_options.digits=1", "data.task_options.span=4"]
    run_posx("train", "name=c", *tiny_args, *mix, cwd=tmp_path)
    curve = pd.read_csv(tmp_path / "results" / "runs" / "c" / "task_curve.csv")
    assert sorted(set(curve["step"])) == [3, 6] and sorted(set(curve["task"])) == ["copy", "mqar"]
    assert (curve["tokens"] == curve["step"] * 4 * 32).all() and (curve["trials"] == 8).all()
    assert curve["accuracy"].between(0, 1).all() and (curve["accuracy"] <= curve["token_accuracy"]).all()
    run_posx("train", "name=plain", *tiny_args, cwd=tmp_path)
    assert not (tmp_path / "results" / "runs" / "plain" / "task_curve.csv").exists()  # no mix: no curve


def test_a_pool_is_generated_once_and_its_rows_are_what_the_mix_draws():
    cfg = data(1.0, ["mqar", "copy"])
    cfg.task_pool, cfg.mix_loss = 8, "answers"
    pool = make_pool(cfg, 96, TRAIN, seed=0)
    again = make_pool(cfg, 96, TRAIN, seed=0)
    assert pool[0].shape == (8, 96) and torch.equal(pool[0], again[0]) and torch.equal(pool[1], again[1])
    mx, my, n = mix_batch(*batch(), cfg, TRAIN, seed=0, step=0, pool=pool)
    assert n == 16
    for i in range(16):
        (j,) = [j for j in range(8) if torch.equal(pool[0][j], mx[i])]
        assert torch.equal(pool[1][j], my[i])
    cfg.task_pool = 0
    assert make_pool(cfg, 96, TRAIN, seed=0) is None


def test_a_task_run_states_its_exact_answers_in_the_progress_and_done_lines(tiny_args, tmp_path):
    mix = ["data.task_mix=1", "data.mix_tasks=[copy]", "data.task_options.trials=8", "data.task_options.span=4"]
    out = run_posx("train", "name=t", *tiny_args, *mix, cwd=tmp_path).stdout
    curve = pd.read_csv(tmp_path / "results" / "runs" / "t" / "task_curve.csv")
    last = curve[curve["step"] == curve["step"].max()].iloc[0]
    done = next(line for line in out.splitlines() if line.startswith("done"))
    exact = round(last["accuracy"] * 8)
    assert f"(step {last['step']}): copy {exact}/8 ({last['accuracy']:.1%})" in done
    assert "text val loss" in done and "never trained on" in done  # the perplexity is said to be of text
    assert any(f"exact copy {a:.0%}" in out for a in curve["accuracy"])  # the progress line
    assert curve["chance"].tolist() == pytest.approx([1 / 26] * len(curve))  # span 4: a cue of 3, 1 letter to guess
    plain = run_posx("train", "name=plain", *tiny_args, cwd=tmp_path).stdout
    assert "exact" not in plain and "done" in plain  # no mix: the text loss alone, as before


def test_a_task_the_training_data_cannot_make_names_the_mix_keys_not_the_evaluations():
    cfg = data(1.0, ["niah"])
    short = TRAIN[:40]  # a training split shorter than one sequence's haystack
    with pytest.raises(PosxError, match=r"take the task out of data\.mix_tasks$"):
        mix_batch(*batch(T=96), cfg, short, seed=0, step=0)
    cfg.task_options.key_letters, cfg.task_options.distractors = 1, 40
    cfg.mix_tasks = ["niah_multikey"]
    with pytest.raises(PosxError, match=r"raise data\.task_options\.key_letters$"):
        mix_batch(*batch(T=96), cfg, TRAIN, seed=0, step=0)
