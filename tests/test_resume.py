"""Checkpoints and resume: bit-identical continuation, stop signals, kill -9, disk full,
non-finite loss, and the config a resumed run may take."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from posx.configure.compose import compose, to_yaml, typed
from posx.configure.resume import differences, resume_config, saved_config
from posx.core.errors import PosxError, Preempted
from posx.core.progress import Reporter
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.runs import checkpoint, resumable
from posx.schema.config import BYTES
from posx.train.loop import train
from posx.train.state import Fresh, Resume
from posx.train.steps import make_optimizer
from scripts import kill_resume_soak as soak

from conftest import REPO, TINY, run_posx, stop_with_sigterm

pytestmark = pytest.mark.slow  # every test here runs the CLI in a subprocess or trains


def tiny_cfg(tmp_path: Path, corpus: Path, *extra: str):
    return typed(
        compose(
            [
                *TINY,
                "data=text",
                f"data.path={corpus}",
                f"results_dir={tmp_path / 'results'}",
                "model.dropout=0.1",
                *extra,
            ]
        )
    )


def signal_at(monkeypatch, step: int, sig=signal.SIGTERM) -> None:
    """Send ``sig`` to this process when the progress reporter reports ``step``."""
    original = Reporter.advance

    def advance(self, stats):
        original(self, stats)
        if self.done == step:
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(Reporter, "advance", advance)


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "model.safetensors"))


def max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2], ids=["SIGTERM", "SIGUSR2"])
def test_stop_then_resume_ends_with_the_uninterrupted_weights(tmp_path, text_corpus, monkeypatch, sig):
    # dropout > 0: the resumed run must also restore torch's global RNG, not just the batches
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=8", "train.checkpoint_every=0")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir(), parts.mkdir()
    train(cfg, whole, Fresh())

    with monkeypatch.context() as m:
        signal_at(m, 3, sig)
        with pytest.raises(Preempted, match=f"{sig.name} at step 3/8"):
            train(cfg, parts, Fresh())
    assert resumable.latest_step(parts) == 3  # checkpoint_every=0: written because of the signal
    assert not (parts / "model.json").exists()
    assert signal.getsignal(sig) is not None and signal.getsignal(sig) != signal.SIG_IGN
    train(cfg, parts, Resume())

    assert max_diff(weights(whole), weights(parts)) <= 1e-6
    a, b = pd.read_csv(whole / "metrics.csv"), pd.read_csv(parts / "metrics.csv")
    assert b["step"].tolist() == list(range(1, 9))
    pd.testing.assert_series_equal(a["train_loss"], b["train_loss"], atol=1e-6, rtol=0)


def test_checkpoint_restores_optimizer_and_rng_exactly(tmp_path, text_corpus):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=4", "train.checkpoint_every=2")
    run = tmp_path / "run"
    run.mkdir()
    train(cfg, run, Fresh())
    model = GPT(ModelSpec.from_config(cfg, BYTES))
    opt = make_optimizer(model, cfg, torch.device("cpu"))
    gen = torch.Generator()
    state = checkpoint.load(run, model, opt, gen)
    assert state.step == 4 and len(state.metrics) == 4
    saved = load_file(str(run / "checkpoint" / "step-00000004" / "optimizer.safetensors"))
    restored = opt.state_dict()["state"]
    assert len(restored) == len(list(model.parameters()))
    for key, tensor in saved.items():
        _, index, name = key.split(".", 2)
        assert torch.equal(restored[int(index)][name], tensor), key
    assert float(restored[0]["step"]) == 4.0
    rng = load_file(str(run / "checkpoint" / "step-00000004" / "rng.safetensors"))
    assert torch.equal(gen.get_state(), rng["batches"])
    assert torch.equal(torch.get_rng_state(), rng["torch_cpu"])
    # only the latest step directory is kept
    assert sorted(p.name for p in (run / "checkpoint").iterdir()) == ["latest.json", "step-00000004"]


def test_a_corrupt_checkpoint_file_is_refused(tmp_path, text_corpus):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=2", "train.checkpoint_every=1")
    run = tmp_path / "run"
    run.mkdir()
    train(cfg, run, Fresh())
    target = run / "checkpoint" / "step-00000002" / "optimizer.safetensors"
    blob = bytearray(target.read_bytes())
    blob[-5] ^= 0xFF  # one flipped bit inside tensor data: safetensors itself would not notice
    target.write_bytes(bytes(blob))
    model = GPT(ModelSpec.from_config(cfg, BYTES))
    with pytest.raises(PosxError, match="optimizer.safetensors is missing or corrupt"):
        checkpoint.load(run, model, make_optimizer(model, cfg, torch.device("cpu")), torch.Generator())


def test_a_second_process_cannot_train_into_a_locked_run(tmp_path, text_corpus):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=1")
    run = tmp_path / "run"
    run.mkdir()
    child = subprocess.Popen(  # another process holds the run's lock
        [
            sys.executable,
            "-c",
            "import sys, time; sys.path.insert(0, sys.argv[1]);"
            "from posx.core.lock import exclusive\n"
            "with exclusive(sys.argv[2]):\n print('held', flush=True); time.sleep(60)",
            str(REPO),
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    said = io.StringIO()
    console = Console(file=said, width=300)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(PosxError, match="being trained by another posx process"):
            train(cfg, run, Resume(), console)
        assert "no checkpoint yet" not in said.getvalue()  # nothing said of a run it may not train
    finally:
        child.kill()
        child.wait()
    train(cfg, run, Resume(), console)  # the lock died with its process
    assert (run / "model.json").is_file()
    assert f"{run} has no checkpoint yet; training it from step 0" in said.getvalue()


def _fail_fsync_under(monkeypatch, fragment: str) -> None:
    """Make fsync of any file whose path contains ``fragment`` fail with ENOSPC."""
    real = os.fsync

    def fsync(fd):
        if fragment in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_disk_full_while_checkpointing_keeps_the_previous_checkpoint(tmp_path, text_corpus, monkeypatch):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=6", "train.checkpoint_every=2")
    run = tmp_path / "run"
    run.mkdir()
    _fail_fsync_under(monkeypatch, "step-00000004")
    with pytest.raises(PosxError, match=r"disk full .*step-4 checkpoint.*previous checkpoint \(step 2\) is intact"):
        train(cfg, run, Fresh())
    assert resumable.latest_step(run) == 2
    assert [p.name for p in (run / "checkpoint").iterdir() if p.is_dir()] == ["step-00000002"]  # no temporaries
    monkeypatch.undo()
    train(cfg, run, Resume())  # space is back: the run continues from step 2
    assert resumable.latest_step(run) == 6 and (run / "model.json").is_file()


def test_disk_full_on_a_real_tiny_filesystem(tmp_path, text_corpus):
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("needs root and permission to mount a tmpfs")
    try:
        # one checkpoint of this model is ~0.4 MB: the first fits, the second cannot sit beside it
        cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=4", "train.checkpoint_every=2")
        run = mount / "run"
        run.mkdir()
        with pytest.raises(PosxError, match=r"disk full .*step-4 checkpoint.*\(step 2\) is intact"):
            train(cfg, run, Fresh())
        model = GPT(ModelSpec.from_config(cfg, BYTES))
        assert checkpoint.load(run, model, make_optimizer(model, cfg, torch.device("cpu")), torch.Generator()).step == 2
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_nonfinite_loss_names_the_step_and_keeps_the_last_good_checkpoint(tmp_path, text_corpus, monkeypatch):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=6", "train.checkpoint_every=1")
    run = tmp_path / "run"
    run.mkdir()
    forward = GPT.forward
    calls = {"train": 0}

    def poisoned(self, idx, targets=None, offset=0):
        logits, loss = forward(self, idx, targets, offset)
        if self.training:
            calls["train"] += 1
            if calls["train"] == 4:
                return logits * float("nan"), loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", poisoned)
    with pytest.raises(PosxError, match=r"training loss is nan at step 4; the last good checkpoint \(step 3\)"):
        train(cfg, run, Fresh())
    monkeypatch.undo()
    model = GPT(ModelSpec.from_config(cfg, BYTES))
    assert checkpoint.load(run, model, make_optimizer(model, cfg, torch.device("cpu")), torch.Generator()).step == 3
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_nonfinite_loss_through_the_cli_exits_nonzero_and_keeps_the_run(tmp_path, tiny_args):
    proc = run_posx(
        "train", *tiny_args, "name=boom", "train.lr=1e30", "train.checkpoint_every=1", cwd=tmp_path, check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "training loss is nan at step" in proc.stderr or "is non-finite at step" in proc.stderr
    run = tmp_path / "results" / "runs" / "boom"
    assert not (run / "model.json").exists()
    step = resumable.latest_step(run)
    if step is not None:  # a checkpoint made before the blow-up stays, and it loads
        cfg = typed(saved_config(run))
        model = GPT(ModelSpec.from_config(cfg, BYTES))
        checkpoint.load(run, model, make_optimizer(model, cfg, torch.device("cpu")), torch.Generator())


def test_sigterm_through_the_cli_exits_75_and_resume_finishes(tmp_path, tiny_args):
    args = [*tiny_args, "name=pre", "train.steps=60", "train.checkpoint_every=0"]
    code, err = stop_with_sigterm("train", *args, cwd=tmp_path)
    assert code == 75, err
    assert "SIGTERM at step" in err and "--resume" in err and "Traceback" not in err
    run = tmp_path / "results" / "runs" / "pre"
    stopped = resumable.latest_step(run)
    assert stopped is not None and stopped < 60
    done = run_posx("train", "--resume", "pre", "device=cpu", cwd=tmp_path)
    assert f"resuming at step {stopped}" in done.stdout.replace("\n", " ")
    assert pd.read_csv(run / "metrics.csv")["step"].tolist() == list(range(1, 61))
    again = run_posx("train", "--resume", str(run), cwd=tmp_path)
    assert "already finished" in again.stdout


def test_kill_dash_9_at_random_moments_leaves_a_loadable_run(tmp_path, text_corpus, monkeypatch):
    # the soak's subprocesses run the posx this interpreter imports; pin the checkout under test
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    # 20 steps of a checkpoint each, the kill within 50 ms of the first checkpoint: it lands mid-run
    result = soak.soak(tmp_path, text_corpus, kills=1, steps=20, seed=1, max_delay=0.05, log=lambda *_: None)
    assert result["kills"] >= 1, result  # at least one kill landed before the run finished
    assert result["loads_checked"] == result["kills"]
    assert result["equal"], result
    assert result["metrics_complete"]


def test_resume_accepts_safe_overrides_and_refuses_the_rest(tmp_path, text_corpus):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=2")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(cfg))
    ok = resume_config(
        run,
        ["train.checkpoint_every=7", "eval.tokens=1024", "train.steps=2"],
        compose(["train.checkpoint_every=7", "eval.tokens=1024", "train.steps=2"]),
    )
    assert ok.train.checkpoint_every == 7 and ok.eval.tokens == 1024 and ok.model.d_model == 32
    for bad in (["train.steps=3"], ["train.lr=0.01"], ["pos=absolute"], ["seed=1"]):
        with pytest.raises(PosxError, match="would change the resumed run"):
            resume_config(run, bad, compose(bad))
    assert differences(cfg, tiny_cfg(tmp_path, text_corpus, "train.steps=2", "device=auto")) == []
    assert differences(cfg, tiny_cfg(tmp_path, text_corpus, "train.steps=3")) == ["train.steps"]


def test_a_requeued_sweep_job_resumes_its_checkpoint(tmp_path, tiny_args, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the job's relative results_dir, as in the subprocess below
    sweep = tmp_path / "sweep"
    job = sweep / "0_rope_s0"
    job.mkdir(parents=True)
    overrides = [*tiny_args, "train.steps=8", "train.checkpoint_every=0"]
    cfg = typed(compose(overrides))
    with monkeypatch.context() as m:
        signal_at(m, 5)
        with pytest.raises(Preempted):
            train(cfg, job, Fresh())
    other = run_posx("train", "-m", *overrides, "train.lr=0.01", f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    assert other.returncode != 0 and "holds a checkpoint of another config (differs in train.lr)" in other.stderr
    assert resumable.latest_step(job) == 5
    proc = run_posx("train", "-m", *overrides, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert "resuming at step 5" in proc.stdout.replace("\n", " ")
    assert json.loads((job / "model.json").read_text())["step"] == 8
    # The sweep started again: the finished job is kept as it is, and another config is refused.
    weights = (job / "model.safetensors").read_bytes()
    again = run_posx("train", "-m", *overrides, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert "already finished training; not trained again" in " ".join(again.stdout.split())
    other = run_posx("train", "-m", *overrides, "train.lr=0.01", f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    assert other.returncode == 2 and "holds a trained run of another config (differs in train.lr)" in other.stderr
    assert (job / "model.safetensors").read_bytes() == weights


def test_a_config_yaml_edited_after_the_checkpoint_is_refused(tmp_path, tiny_args, monkeypatch):
    # The checkpoint records the config it trains with: a stopped run whose config.yaml was then
    # edited (a longer schedule, another seed) is not the run the checkpoint continues.
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    cfg = typed(compose([*tiny_args, "train.steps=8", "train.checkpoint_every=0"]))
    with monkeypatch.context() as m:
        signal_at(m, 3)
        with pytest.raises(Preempted):
            train(cfg, run, Fresh())
    original = (run / "config.yaml").read_text()
    assert "steps: 8" in original and "seed: 0" in original
    edited = original.replace("steps: 8", "steps: 9").replace("seed: 0", "seed: 5")
    (run / "config.yaml").write_text(edited)
    proc = run_posx("train", "--resume", str(run), cwd=tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = " ".join(proc.stderr.split())
    assert "was edited after its last checkpoint" in line
    assert "seed=5 in config.yaml, 0 at the checkpoint" in line and "train.steps=9 in config.yaml, 8" in line
    assert (run / "config.yaml").read_text() == edited and resumable.latest_step(run) == 3
    # a key --resume may change is not an edit of the run; with the schedule put back it finishes
    (run / "config.yaml").write_text(original.replace("checkpoint_every: 0", "checkpoint_every: 2"))
    run_posx("train", "--resume", str(run), "eval.after_train=false", cwd=tmp_path)
    assert json.loads((run / "model.json").read_text())["step"] == 8


def test_a_checkpoint_without_a_recorded_config_still_resumes(tmp_path, text_corpus, monkeypatch):
    cfg = tiny_cfg(tmp_path, text_corpus, "train.steps=6", "train.checkpoint_every=0")
    run = tmp_path / "run"
    run.mkdir()
    with monkeypatch.context() as m:
        signal_at(m, 2)
        with pytest.raises(Preempted):
            train(cfg, run, Fresh())
    state_json = run / "checkpoint" / "step-00000002" / "state.json"
    state = json.loads(state_json.read_text())
    assert state["extra"].pop("config")["train"]["steps"] == 6
    state_json.write_text(json.dumps(state))  # as a checkpoint written before the record
    train(cfg, run, Resume())
    assert json.loads((run / "model.json").read_text())["step"] == 6
