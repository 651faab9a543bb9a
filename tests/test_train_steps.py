"""posx.train.steps: train_step, the optimizer step the loop, `posx extend` and the benchmarks
share (accumulation over micro-batches is the full batch's step, clipping bounds the gradient it
applied, the loss it returns is the batch's mean loss); and data too small for the evaluation
after training stops a run before its first step."""

from __future__ import annotations

import copy
import re

import pytest
import torch

from posx.configure.compose import compose, typed
from posx.core.errors import PosxError
from posx.model.gpt import GPT
from posx.train.steps import check_eval_fits, train_step

from conftest import run_posx
from helpers.model import spec

CPU = torch.device("cpu")


def setup(seed: int = 0):
    torch.manual_seed(seed)
    model = GPT(spec(n_layer=2, n_head=2, d_model=32, pos="rope"))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (8, 17), generator=gen)
    return model, x[:, :-1], x[:, 1:]


def test_micro_batches_accumulate_to_the_full_batch_step():
    model, x, y = setup()
    twin = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    opt_full = torch.optim.AdamW(model.parameters(), lr=1e-2)
    opt_micro = torch.optim.AdamW(twin.parameters(), lr=1e-2)
    with torch.no_grad():
        want = model(x, y)[1].item()  # the batch's mean loss before the step
    full = train_step(model, opt_full, x, y, CPU)
    micro = train_step(twin, opt_micro, x, y, CPU, micro=2)
    assert full.item() == pytest.approx(want, rel=1e-6)
    assert micro.item() == pytest.approx(want, rel=1e-5)  # the mean of 4 micro-losses: the same mean
    moved = [(a - b).abs().max().item() for a, b in zip(model.parameters(), before, strict=True)]
    assert max(moved) > 1e-3  # the step changed the weights, so the comparison below means something
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_clipping_bounds_the_gradient_norm_of_the_step():
    model, x, y = setup(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the gradients stay for inspection
    train_step(model, optimizer, x, y, CPU)
    unclipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    train_step(model, optimizer, x, y, CPU, grad_clip=unclipped / 10)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    assert clipped == pytest.approx(unclipped / 10, rel=1e-4)


def test_data_too_small_for_the_evaluation_after_training_is_caught_before_training():
    cfg = typed(compose(["eval.after_train=true", "train.context_length=32", "eval.tokens=512"]))
    check_eval_fits(cfg, torch.zeros(512 + 1, dtype=torch.uint8), None)  # 512 targets need 513 tokens
    with pytest.raises(PosxError, match="eval.after_train would read 513.*before training"):
        check_eval_fits(cfg, torch.zeros(512, dtype=torch.uint8), None)


@pytest.mark.slow
def test_train_with_too_little_data_for_its_evaluation_stops_before_any_step(tmp_path, tiny_args):
    proc = run_posx(
        "train", "name=small", "eval.after_train=true", *tiny_args, "eval.tokens=1000000", cwd=tmp_path, check=False
    )
    assert proc.returncode == 2 and "before training" in proc.stderr and "Traceback" not in proc.stderr
    assert "train 1/" not in proc.stdout
    assert not (tmp_path / "results" / "runs" / "small").exists()


def test_progress_shows_no_validation_loss_before_the_first_validation(tmp_path, tiny_args):
    """Until the first validation (train.eval_every=3 in the tiny run) the line says "val -",
    not "val nan"; after it, the estimate."""
    proc = run_posx("train", "name=progress", *tiny_args, "eval.after_train=false", cwd=tmp_path)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("train ")]
    assert lines and " val - " in lines[0] and "nan" not in proc.stdout, proc.stdout
    assert re.search(r" val \d+\.\d{3} ", lines[-1]), lines[-1]
