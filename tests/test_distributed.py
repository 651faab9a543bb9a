"""Several ranks on the CPU (gloo): torchrun runs equal a single process with the same global
batch (and one with gradient accumulation), rank 0 alone writes, a stop, a non-finite loss or
a failed checkpoint on one rank stops every rank at the step boundary, and a stopped run
resumes on another number of ranks with the same weights.

The equality figures are printed (run with -s to see them); the README quotes them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from posx.configure.compose import compose, typed
from posx.core import distributed
from posx.core.errors import PosxError
from posx.core.signals import StopSignals
from posx.runs import checkpoint, resumable
from posx.train.steps import batch_layout

from conftest import REPO, TINY, run_posx, stop_with_sigterm

TOL = 1e-5
# 40 steps, a checkpoint every 5: long enough to be stopped between two checkpoints.
LONG = ["train.steps=40", "train.checkpoint_every=5", "train.eval_every=10"]


def env() -> dict:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def torchrun_cmd(n: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "-m", "posx", *args]


def torchrun(n: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(torchrun_cmd(n, *args), cwd=cwd, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return proc


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model.safetensors"))


def weight_diff(a: Path, b: Path) -> float:
    wa, wb = weights(a), weights(b)
    assert set(wa) == set(wb)
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)


def loss_diff(a: Path, b: Path) -> float:
    ma, mb = pd.read_csv(a / "metrics.csv"), pd.read_csv(b / "metrics.csv")
    assert list(ma["step"]) == list(mb["step"])
    return float(max((ma["train_loss"] - mb["train_loss"]).abs().max(), (ma["val_loss"] - mb["val_loss"]).abs().max()))


def ranks_of(parent: int) -> dict[int, int]:
    """{RANK: pid} of the worker processes torchrun started (children of ``parent``)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent:
            for item in environ:
                if item.startswith(b"RANK="):
                    found[int(item[5:])] = int(entry.name)
    return found


def wait_for(predicate, timeout: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# ---------------------------------------------------------------- fast: no process group


def test_batch_layout_is_checked_against_the_number_of_ranks(tiny_args):
    cfg = typed(compose([*tiny_args, "train.batch_size=4"]))
    assert batch_layout(cfg, 1) == (4, 4) and batch_layout(cfg, 2) == (2, 2)
    cfg.train.micro_batch_size = 1
    assert batch_layout(cfg, 2) == (2, 1)
    with pytest.raises(PosxError, match="not divisible by the 3 ranks"):
        batch_layout(cfg, 3)
    cfg.train.micro_batch_size = 3
    with pytest.raises(PosxError, match="must divide the per-rank batch"):
        batch_layout(cfg, 1)


def test_a_single_process_is_rank_0_of_1_and_runs_main_sections_itself():
    assert not distributed.enabled() and distributed.rank() == 0 and distributed.world_size() == 1
    assert distributed.on_main(lambda: 7, share=True) == 7
    assert distributed.mean(2.5) == 2.5 and distributed.agree_max([0, 3]) == [0, 3]
    with pytest.raises(ValueError):
        distributed.on_main(lambda: int("x"))


def test_stop_signals_chain_to_the_handler_they_replaced():
    seen = []
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: seen.append(signum))
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stop.received == "SIGUSR2" and not seen  # only recorded while training
            assert stop.chains(signal.SIGUSR2)
            stop.chain(stop.signum)
            assert seen == [signal.SIGUSR2]
        with StopSignals() as stop:  # the default handler (SIG_DFL) is never called
            assert not stop.chains(signal.SIGTERM)
            stop.chain(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGUSR2, before)


# ---------------------------------------------------------------- slow: torchrun, gloo


@pytest.mark.slow
def test_two_ranks_equal_one_process_and_gradient_accumulation(tmp_path, tiny_args):
    """Global batch 4: 2 ranks x 2 sequences against 1 process x 4, and against 1 process
    accumulating micro-batches of the same size the ranks run (2; and 1 with DDP's no_sync)."""
    run_posx("train", *tiny_args, "name=single", cwd=tmp_path)
    run_posx("train", *tiny_args, "name=accum2", "train.micro_batch_size=2", cwd=tmp_path)
    run_posx("train", *tiny_args, "name=accum1", "train.micro_batch_size=1", cwd=tmp_path)
    proc = torchrun(2, "train", *tiny_args, "name=ddp", cwd=tmp_path)
    torchrun(2, "train", *tiny_args, "name=ddp_accum1", "train.micro_batch_size=1", cwd=tmp_path)
    runs = tmp_path / "results" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["accum1", "accum2", "ddp", "ddp_accum1", "single"]
    assert proc.stdout.count("posx train ") == 1 and proc.stdout.count("done ") == 1  # rank 0 alone prints
    assert "ranks=2" in proc.stdout
    assert not [p for p in runs.rglob("*") if p.name.endswith(".tmp")]  # no writer left anything behind
    pairs = {
        "2 ranks vs 1 process": ("ddp", "single"),
        "2 ranks vs 1 process accumulating 2x2": ("ddp", "accum2"),
        "2 ranks accumulating 2x1 vs 1 process accumulating 4x1": ("ddp_accum1", "accum1"),
    }
    for name, (a, b) in pairs.items():
        dl, dw = loss_diff(runs / a, runs / b), weight_diff(runs / a, runs / b)
        print(f"{name}: max |loss diff| {dl:.3g}, max |weight diff| {dw:.3g}")
        assert dl <= TOL and dw <= TOL, name


@pytest.mark.slow
def test_a_stop_on_one_rank_is_agreed_and_resumes_on_another_rank_count(tmp_path, tiny_args):
    args = [*tiny_args, *LONG]
    run_posx("train", *args, "name=reference", cwd=tmp_path)
    runs = tmp_path / "results" / "runs"

    # 2 ranks, SIGTERM to rank 1 alone once the first checkpoint exists: every rank stops there.
    proc = subprocess.Popen(
        torchrun_cmd(2, "train", *args, "name=two"),
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(
        lambda: (runs / "two" / "checkpoint" / "latest.json").is_file() or proc.poll() is not None,
        what="the first checkpoint",
    )
    workers = ranks_of(proc.pid)
    assert set(workers) == {0, 1}, workers
    os.kill(workers[1], signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert "SIGTERM" in out + err and "checkpoint saved" in out + err
    assert not (runs / "two" / "model.json").exists()
    stopped_at = pd.read_csv(runs / "two" / "metrics.csv")["step"].max()
    assert 5 <= stopped_at < 40
    run_posx("train", "--resume", str(runs / "two"), cwd=tmp_path)  # one process
    dl, dw = loss_diff(runs / "two", runs / "reference"), weight_diff(runs / "two", runs / "reference")
    print(f"2 ranks stopped at step {stopped_at}, resumed on 1: max |loss diff| {dl:.3g}, max |weight diff| {dw:.3g}")
    assert dl <= TOL and dw <= TOL

    # 1 process stopped, resumed on 2 ranks.
    code, err = stop_with_sigterm("train", *args, "name=one", cwd=tmp_path)
    assert code == 75, err
    torchrun(2, "train", "--resume", str(runs / "one"), cwd=tmp_path)
    dl, dw = loss_diff(runs / "one", runs / "reference"), weight_diff(runs / "one", runs / "reference")
    print(f"1 process stopped, resumed on 2 ranks: max |loss diff| {dl:.3g}, max |weight diff| {dw:.3g}")
    assert dl <= TOL and dw <= TOL
    assert sorted(p.name for p in runs.iterdir()) == ["one", "reference", "two"]


@pytest.mark.slow
def test_a_sweep_under_torchrun_is_refused_in_one_line(tmp_path, tiny_args):
    ranks = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}
    proc = run_posx("train", "-m", *tiny_args, "seed=0,1", cwd=tmp_path, check=False, env=ranks)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "tasks_per_node" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()
    # evaluation writes a run's tables from one process: under torchrun it is refused too
    proc = run_posx("eval-extrapolate", "--latest", cwd=tmp_path, check=False, env=ranks)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "without torchrun" in proc.stderr


# ---------------------------------------------------------------- slow: failures on one rank, in-process ranks


def _failing_rank(rank: int, port: int, corpus: str, work: str, case: str) -> None:
    """One of 2 gloo ranks training a tiny run in which one rank fails; writes what it raised."""
    import posx.train.loop as loop
    from posx.model.gpt import GPT
    from posx.train.loop import train
    from posx.train.state import Fresh

    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    torch.set_num_threads(1)
    cfg = typed(
        compose(
            [
                *TINY,
                "data=text",
                f"data.path={corpus}",
                f"results_dir={work}/results",
                "train.steps=6",
                "train.checkpoint_every=1",
            ]
        )
    )
    if case == "nonfinite" and rank == 1:  # rank 1's 4th training forward returns a NaN loss
        forward, calls = GPT.forward, {"n": 0}

        def poisoned(self, idx, targets=None, offset=0):
            logits, loss = forward(self, idx, targets, offset)
            if self.training:
                calls["n"] += 1
                if calls["n"] == 4:
                    return logits * float("nan"), loss * float("nan")
            return logits, loss

        GPT.forward = poisoned
    if case == "diskfull" and rank == 0:  # rank 0's checkpoint at step 3 finds the disk full
        save = checkpoint.save

        def full(run_dir, step, *args, **kwargs):
            if step == 3:
                raise PosxError(f"disk full while writing the step-{step} checkpoint")
            return save(run_dir, step, *args, **kwargs)

        loop.checkpoint.save = full
    run = Path(work) / case
    outcome = "finished"
    with distributed.session("cpu"):
        try:
            train(cfg, run, Fresh())
        except PosxError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
    (Path(work) / f"{case}.rank{rank}").write_text(outcome)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["nonfinite", "diskfull"])
def test_a_failure_on_one_rank_stops_every_rank_at_the_step_boundary(tmp_path, text_corpus, case):
    import torch.multiprocessing as mp

    (tmp_path / case).mkdir()
    mp.start_processes(
        _failing_rank,
        args=(_free_port(), str(text_corpus), str(tmp_path), case),
        nprocs=2,
        join=True,
        start_method="spawn",
    )  # returns: no rank is left hanging
    rank0, rank1 = ((tmp_path / f"{case}.rank{r}").read_text() for r in (0, 1))
    run = tmp_path / case
    assert not (run / "model.json").exists()
    if case == "nonfinite":  # the mean loss over ranks is NaN at step 4: rank 0 reports it
        assert rank0.startswith("PosxError: training loss is nan at step 4; the last good checkpoint (step 3)")
        assert rank1.startswith("PeerFailed: training loss is nan at step 4")
        assert resumable.latest_step(run) == 3
    else:  # rank 0's checkpoint fails; rank 1 learns it at the same step boundary
        assert rank0.startswith("PosxError: disk full while writing the step-3 checkpoint")
        assert rank1.startswith("PeerFailed: rank 0 stopped with an error")
        assert resumable.latest_step(run) == 2
