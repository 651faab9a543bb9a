"""posx.train.steps: data too small for the evaluation after training stops a run before its
first step."""

from __future__ import annotations

import pytest
import torch
from conftest import run_posx

from posx.config.compose import compose
from posx.core.errors import PosxError
from posx.train.steps import check_eval_fits


def test_data_too_small_for_the_evaluation_after_training_is_caught_before_training():
    cfg = compose(["eval.after_train=true", "train.context_length=32", "eval.tokens=512"])
    check_eval_fits(cfg, torch.zeros(512 + 1, dtype=torch.uint8), None)  # 512 targets need 513 tokens
    with pytest.raises(PosxError, match="eval.after_train would read 513.*before training"):
        check_eval_fits(cfg, torch.zeros(512, dtype=torch.uint8), None)


@pytest.mark.slow
def test_train_with_too_little_data_for_its_evaluation_stops_before_any_step(tmp_path, tiny_args):
    proc = run_posx("train", "name=small", "eval.after_train=true", *tiny_args, "eval.tokens=1000000",
                    cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "before training" in proc.stderr and "Traceback" not in proc.stderr
    assert "train 1/" not in proc.stdout
    assert not (tmp_path / "results" / "runs" / "small").exists()
