"""posx.core.library_errors: a known library failure is one line that says what to change, for
every command (in process, under Hydra, in a sweep); anything else stays an internal error."""

from __future__ import annotations

import errno
import pickle

import pytest
import torch
import torch.distributed as dist
from safetensors import SafetensorError
from safetensors.torch import load_file

from posx.cli import commands, exits, jobs
from posx.core.library_errors import KNOWN, advice

from conftest import run_posx


def _damaged_weights(tmp_path) -> SafetensorError:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\xff" * 16)
    try:
        load_file(str(weights))
    except SafetensorError as exc:
        return exc
    raise AssertionError("a damaged safetensors file loaded")


def _unpickling(tmp_path) -> Exception:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(b"not a pickle at all")
    try:
        torch.load(str(path), weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as exc:
        return exc
    raise AssertionError("garbage unpickled")


def test_each_known_failure_says_what_to_change(tmp_path):
    cases = {
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"): "train.batch_size",
        RuntimeError("DefaultCPUAllocator: can't allocate memory"): "eval.batch_tokens",
        _damaged_weights(tmp_path): f"the weights file {tmp_path / 'model.safetensors'} is damaged",
        _unpickling(tmp_path): "pytorch_model.bin is damaged",
        dist.DistNetworkError("The client socket has timed out"): "MASTER_ADDR",
        RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"): "torchrun",
        OSError(errno.ENOSPC, "No space left on device", "results/runs/x/model.safetensors"): "results_dir=",
        PermissionError(errno.EACCES, "Permission denied", "/results"): "permission denied on /results",
        ModuleNotFoundError("No module named 'tensorboard'", name="tensorboard"): "pip install tensorboard",
    }
    for exc, phrase in cases.items():
        line = advice(exc)
        assert line is not None and phrase in line and "\n" not in line, (exc, line)
    assert advice(ValueError("a bug")) is None and advice(KeyError("x")) is None


@pytest.mark.slow
def test_optional_libraries_errors_are_known_by_type():
    wandb_errors = pytest.importorskip("wandb.errors")
    datasets_exceptions = pytest.importorskip("datasets.exceptions")
    assert "logger=none" in advice(wandb_errors.UsageError("No API key configured. Use `wandb login` to log in."))
    assert "data.name" in advice(datasets_exceptions.DatasetNotFoundError("Dataset 'nope' doesn't exist"))
    wrapped = RuntimeError("while loading")
    wrapped.__cause__ = datasets_exceptions.DatasetGenerationError("An error occurred while generating the dataset")
    assert "data.data_files" in advice(wrapped)  # what it was raised from counts
    assert {entry.library for entry in KNOWN} >= {"torch", "safetensors", "datasets", "wandb", "torch.distributed"}


def test_the_boundary_gives_the_advice_with_exit_2(capsys):
    with pytest.raises(SystemExit) as stop, exits.user_errors():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate [2.00 GiB]")
    assert stop.value.code == 2
    line = capsys.readouterr().err
    assert line.startswith("error: out of memory (CUDA out of memory. Tried to allocate [2.00 GiB]); lower")
    assert line.count("\n") == 1


def test_a_library_failure_inside_a_command_is_one_line(tmp_path, monkeypatch, tiny_args):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(commands, "export_run", out_of_memory)
    (tmp_path / "results" / "runs" / "r").mkdir(parents=True)
    proc = run_posx("export", "r", "--out", "hf", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "train.batch_size" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sweep", [False, True])
def test_a_library_failure_inside_a_training_job_never_shows_hydras_report(tmp_path, monkeypatch, tiny_args, sweep):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(jobs, "train", out_of_memory)
    args = ["-m", "seed=0,1"] if sweep else []
    proc = run_posx("train", *args, *tiny_args, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: out of memory") and proc.stderr.count("\n") == 1
    assert "Error executing job" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_an_error_outside_the_job_in_a_sweep_is_one_line_too(tmp_path):
    (tmp_path / "afile").write_text("not a directory\n", encoding="utf-8")
    proc = run_posx("train", "-m", "seed=0,1", "results_dir=afile", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot use afile/sweeps/")
    assert proc.stderr.count("\n") == 1 and "HYDRA_FULL_ERROR" not in proc.stderr


def test_a_failed_submitit_job_is_its_own_line_and_where_its_logs_are():
    utils = pytest.importorskip("submitit.core.utils")
    exc = utils.UncompletedJobError(
        "Job 7 (task: 0) with path sweep/.submitit/7/7_0_result.pkl\nhas not produced any output (state: FINISHED)\n"
        "Error stream produced:\n----\nerror: data file 'a.txt' is not UTF-8; convert it to UTF-8\n"
    )
    assert advice(exc) == (
        "a sweep job failed (its logs: sweep/.submitit/7): data file 'a.txt' is not UTF-8; convert it to UTF-8"
    )
