"""posx.cli.jobs: the checks made before Hydra launches anything, and the one boundary every
failure passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from posx.cli import exits, jobs
from posx.core.errors import Interrupted, PosxError


def test_the_slurm_launcher_off_a_cluster_is_one_line(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(PosxError, match="needs SLURM, and there is no srun"):
        jobs.check_launcher(["-m", "hydra/launcher=submitit_slurm", "seed=0,1"])
    jobs.check_launcher(["-m", "hydra/launcher=joblib"])


def test_an_unexpected_exception_is_one_internal_error_line_with_its_traceback_kept(capsys, monkeypatch):
    monkeypatch.delenv("POSX_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stop, exits.user_errors():
        raise ValueError("the [bad] thing")
    assert stop.value.code == 3
    line = capsys.readouterr().err
    assert line.startswith("internal error: ValueError: the [bad] thing (traceback in ") and line.count("\n") == 1
    kept = Path(line.split("traceback in ", 1)[1].split(";", 1)[0])
    text = kept.read_text(encoding="utf-8")
    kept.unlink()
    assert "Traceback (most recent call last)" in text and "ValueError: the [bad] thing" in text


def test_posx_debug_lets_the_traceback_through(monkeypatch):
    monkeypatch.setenv("POSX_DEBUG", "1")
    with pytest.raises(ValueError, match="the bad thing"), exits.user_errors():
        raise ValueError("the bad thing")


@pytest.mark.parametrize(
    "given, raised, says",
    [
        ((), KeyboardInterrupt, "nothing half-written was left"),  # report, export, data prepare, ...
        ((exits.EVAL_INTERRUPTED,), KeyboardInterrupt, "the unfinished evaluation was not kept"),
        ((exits.TRAINING_INTERRUPTED,), KeyboardInterrupt, "posx train --resume RUN"),
        ((exits.EVAL_INTERRUPTED,), Interrupted("stopped by Ctrl-C; continue runs/x"), "continue runs/x"),
    ],
)
def test_ctrl_c_is_one_line_that_says_what_the_command_left_and_exit_130(capsys, given, raised, says):
    with pytest.raises(SystemExit) as stop, exits.user_errors(*given):
        raise raised
    assert stop.value.code == 130
    line = capsys.readouterr().err
    assert line.startswith("interrupted: stopped by Ctrl-C; ") and says in line
    assert line.count("\n") == 1
    if given != (exits.TRAINING_INTERRUPTED,):
        assert "--resume RUN" not in line
