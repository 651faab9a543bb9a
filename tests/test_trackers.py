"""Experiment trackers (logger=tensorboard | wandb), offline: no network is touched."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from posx.configure.compose import compose
from posx.core.errors import PosxError
from posx.core.trackers import Tracker, open_tracker
from posx.schema.config import LoggerConfig

from conftest import run_posx


def _scalars(log_dir: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_logger_is_off_by_default_and_checked():
    cfg = compose([])
    assert cfg.logger.name == "none"
    assert type(open_tracker(cfg.logger, Path("."), "r", {}, "")) is Tracker
    assert compose(["logger=tensorboard"]).logger.name == "tensorboard"
    with pytest.raises(PosxError, match="logger.name=bogus is unknown"):
        compose(["logger.name=bogus"])
    with pytest.raises(PosxError, match="logger.mode=cloud"):
        compose(["logger=wandb", "logger.mode=cloud"])


def test_tensorboard_records_training_and_evaluation_scalars(tmp_path):
    logger = LoggerConfig(name="tensorboard")
    with open_tracker(logger, tmp_path, "r", {"seed": 0}, "seed: 0") as tracker:
        tracker.log({"train/loss": 2.0, "val/loss": float("nan")}, 1)
        tracker.log({"train/loss": 1.5, "val/loss": 1.7}, 2)
        tracker.log_eval(
            [
                {
                    "method": "none",
                    "stage": "zero-shot",
                    "eval_context": 64,
                    "factor": 2.0,
                    "ppl": 5.0,
                    "ppl_lo": 4.5,
                    "ppl_hi": 5.5,
                    "status": "ok",
                }
            ]
        )
    scalars = _scalars(tmp_path / "logs")
    assert scalars["train/loss"] == [(1, 2.0), (2, 1.5)]
    assert scalars["val/loss"] == [(2, pytest.approx(1.7))]  # a NaN is not logged
    assert scalars["eval/none/ppl"] == [(64, 5.0)] and scalars["eval/none/ppl_hi"] == [(64, 5.5)]


@pytest.mark.slow
def test_wandb_offline_writes_a_local_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = LoggerConfig(name="wandb")
    with open_tracker(logger, tmp_path, "r", {"seed": 0}, "seed: 0") as tracker:
        tracker.log({"train/loss": 2.0}, 1)
        tracker.log_eval(
            [
                {
                    "method": "none",
                    "stage": "zero-shot",
                    "eval_context": 64,
                    "factor": 2.0,
                    "ppl": 5.0,
                    "ppl_lo": 4.5,
                    "ppl_hi": 5.5,
                    "status": "ok",
                }
            ]
        )
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # the run's records, for a later sync; wandb's service may still be writing them after finish
    deadline = time.monotonic() + 60
    logged = b""
    while time.monotonic() < deadline:
        logged = b"".join(p.read_bytes() for p in runs[0].glob("*.wandb"))
        if b"train/loss" in logged and b"eval/none/ppl" in logged:
            break
        time.sleep(0.2)
    assert b"train/loss" in logged and b"eval/none/ppl" in logged


@pytest.mark.slow
def test_train_and_evaluate_log_to_tensorboard(tmp_path, tiny_args):
    run_posx(
        "train",
        "name=tb",
        "logger=tensorboard",
        "eval.after_train=true",
        "eval.methods=[none]",
        "eval.passkey.enabled=false",
        *tiny_args,
        cwd=tmp_path,
    )
    scalars = _scalars(tmp_path / "results" / "runs" / "tb" / "logs")
    assert [s for s, _ in scalars["train/loss"]] == list(range(1, 7))
    assert [s for s, _ in scalars["val/loss"]] == [3, 6]
    assert [s for s, _ in scalars["eval/none/ppl"]] == [32, 64, 128, 256]


@pytest.mark.slow
def test_wandb_online_without_a_key_fails_before_any_model_is_built(tmp_path, tiny_args, monkeypatch):
    """No network is touched: the key is looked for (WANDB_API_KEY, the netrc) before wandb starts."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for args in (["logger=wandb", "logger.mode=online"], ["-m", "seed=0,1", "logger=wandb", "logger.mode=online"]):
        proc = run_posx("train", *args, *tiny_args, cwd=tmp_path, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "logger.mode=offline" in proc.stderr and "logger=none" in proc.stderr
    assert not (tmp_path / "results").exists()  # nothing built: no run, no token store
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    compose(["logger=wandb", "logger.mode=online"])  # a key from `wandb login` is enough to start
