"""End to end through the real CLI: train -> reload -> evaluate, sweeps, and bad input."""

from __future__ import annotations

import inspect
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import typer
import yaml

from posx.cli import app, commands, jobs
from posx.eval.tables import COLUMNS
from posx.train.loop import train

from conftest import run_posx
from helpers.cli import run_posx_process

pytestmark = pytest.mark.slow  # every test here trains or runs the CLI


def test_train_writes_a_complete_run(trained_runs):
    run = trained_runs["rope"]
    for name in ("config.yaml", "metrics.csv", "model.json", "model.safetensors"):
        assert (run / name).is_file(), name
    metrics = pd.read_csv(run / "metrics.csv")
    assert list(metrics.columns) == ["step", "train_loss", "val_loss", "lr", "tokens_per_s", "mfu"]
    assert metrics["mfu"].isna().all()  # no MFU on the CPU
    assert metrics["step"].tolist() == list(range(1, 7))
    assert metrics["val_loss"].notna().sum() == 2  # eval_every=3 over 6 steps
    meta = json.loads((run / "model.json").read_text())
    assert meta["format"] == "posx-run/2" and meta["model"]["pos"]["name"] == "rope" and meta["train_context"] == 32
    assert meta["data"]["sha256"] and meta["data"]["python"]
    assert "_target_" not in (run / "config.yaml").read_text()


def test_eval_extrapolate_rope_reloads_and_fills_every_cell(trained_runs):
    work, run = trained_runs["work"], trained_runs["rope"]
    proc = run_posx("eval-extrapolate", str(run), "eval.tokens=512", "device=cpu", cwd=work)
    df = pd.read_csv(run / "extrapolation.csv")
    assert set(COLUMNS) <= set(df.columns)
    assert len(df) == 4 * 5  # factors x methods
    assert (df["status"] == "ok").all()
    assert df["eval_context"].tolist()[:4] == [32, 64, 128, 256]
    assert df["tokens"].nunique() == 1  # the same scored tokens at every length
    assert df["ppl"].map(math.isfinite).all()
    # at 1x, pi/ntk/yarn are the identity (s = 1); abf changes the base
    one = df[df["factor"] == 1].set_index("method")["ppl"]
    assert one["pi"] == pytest.approx(one["none"], rel=1e-6)
    assert one["yarn"] == pytest.approx(one["none"], rel=1e-6)
    assert (run / "extrapolation.md").read_text().startswith("|")
    assert "none" in proc.stdout and "8x" in proc.stdout


def test_absolute_past_its_table_is_out_of_range_not_a_crash(trained_runs):
    work, run = trained_runs["work"], trained_runs["absolute"]
    run_posx("eval-extrapolate", str(run), "eval.tokens=512", "device=cpu", cwd=work)
    df = pd.read_csv(run / "extrapolation.csv").set_index(["method", "factor"])
    assert df.loc[("none", 1.0), "status"] == "ok"
    assert math.isfinite(df.loc[("none", 1.0), "ppl"])
    for f in (2.0, 4.0, 8.0):
        assert df.loc[("none", f), "status"] == "out_of_range"
        assert math.isnan(df.loc[("none", f), "ppl"])
    assert (df.loc["pi", "status"] == "not_applicable").all()


def test_latest_picks_the_newest_run(trained_runs):
    work = trained_runs["work"]
    proc = run_posx(
        "eval-extrapolate",
        "--latest",
        "eval.factors=[1,2]",
        "eval.methods=[none]",
        "eval.tokens=512",
        "device=cpu",
        cwd=work,
    )
    assert "absolute" in proc.stdout  # trained second


def test_cfg_job_prints_the_config_without_training(tmp_path):
    proc = run_posx("train", "--cfg", "job", "pos=absolute", cwd=tmp_path)
    assert "name: absolute" in proc.stdout and "context_length: 128" in proc.stdout
    assert not (tmp_path / "results").exists()


def test_eval_extrapolate_help_shows_its_example_intact(tmp_path):
    proc = run_posx("eval-extrapolate", "--help", cwd=tmp_path)
    assert "eval.methods=[none,yarn] eval.factors=[1,4]" in proc.stdout


def test_every_paragraph_of_a_commands_help_flows_as_one(tmp_path):
    """A docstring wrapped in the source shows as flowing paragraphs, not its source lines."""
    group = typer.main.get_command(app)
    commands = [([name], cmd) for name, cmd in group.commands.items() if name != "data"]
    commands += [(["data", name], cmd) for name, cmd in group.commands["data"].commands.items()]
    for words, cmd in commands:
        shown = run_posx(*words, "--help", cwd=tmp_path, env={"COLUMNS": "400"}).stdout
        lines = [" ".join(line.split()) for line in shown.splitlines()]
        for paragraph in inspect.cleandoc(cmd.callback.__doc__).split("\n\n"):
            flowing = " ".join(paragraph.split())
            assert any(flowing in line for line in lines), (words, flowing)


def test_python_dash_m_and_help_show_examples(tmp_path):
    proc = run_posx_process("train", "--help", cwd=tmp_path)  # python -m posx: a process
    assert "Examples" in proc.stdout and "posx train" in proc.stdout
    proc = run_posx("eval-extrapolate", "--help", cwd=tmp_path)
    assert "Examples" in proc.stdout and "posx eval-extrapolate" in proc.stdout


def _run_copy(tmp, request) -> Path:
    """A copy of the tiny trained RoPE run at tmp/run."""
    run = tmp / "run"
    shutil.copytree(request.getfixturevalue("trained_runs")["rope"], run)
    return run


def _edit_meta(tmp, request, section: str | None = None, **values) -> None:
    """The run's model record (or its ``section``, model or pos) with ``values`` set."""
    run = _run_copy(tmp, request)
    meta = json.loads((run / "model.json").read_text())
    (meta["model"][section] if section else meta["model"]).update(values)
    (run / "model.json").write_text(json.dumps(meta))


def _flip_weight_byte(tmp, request) -> None:
    weights = _run_copy(tmp, request) / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-3] ^= 0x01  # tensor data, not the header: only the checksum can tell
    weights.write_bytes(bytes(blob))


def _truncate_weights(tmp, request, keep_checksum: bool = True) -> None:
    run = _run_copy(tmp, request)
    weights = run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    if not keep_checksum:  # as written by a posx that did not record one
        meta = json.loads((run / "model.json").read_text())
        meta.pop("weights_sha256")
        (run / "model.json").write_text(json.dumps(meta))


def _unfinished_run(tmp, request) -> None:
    (_run_copy(tmp, request) / "model.safetensors").unlink()


def _killed_run(tmp, request) -> None:
    """What a run killed before its end leaves: config, metrics, a checkpoint, no weights."""
    run = _run_copy(tmp, request)
    (run / "model.safetensors").unlink()
    (run / "model.json").unlink()


def _duplicate_in_saved_settings(tmp, request) -> None:
    """A run never evaluated whose training config lists a method twice (as an older posx let it)."""
    run = _run_copy(tmp, request)
    for name in ("eval.yaml", "extrapolation.csv", "extrapolation.md", "positions.csv", "passkey.csv", "tasks.csv"):
        (run / name).unlink(missing_ok=True)
    shutil.rmtree(run / "eval", ignore_errors=True)
    config = run / "config.yaml"
    cfg = yaml.safe_load(config.read_text())
    cfg["eval"]["methods"] = ["none", "none"]
    config.write_text(yaml.safe_dump(cfg))


def _two_runs(tmp, request) -> None:
    """Copies of the tiny RoPE run as results/runs/a and (the newer) results/runs/b."""
    for name in ("a", "b"):
        shutil.copytree(request.getfixturevalue("trained_runs")["rope"], tmp / "results" / "runs" / name)


def _junk_record(tmp, request) -> None:
    """A run whose top-level eval.yaml is not an evaluation record (not posx's file)."""
    (_run_copy(tmp, request) / "eval.yaml").write_text("junk\n")


SETUPS = {
    "empty_dir": lambda tmp, request: (tmp / "empty").mkdir(),
    "empty_file": lambda tmp, request: (tmp / "empty.txt").write_bytes(b""),
    "latin1_file": lambda tmp, request: (tmp / "latin1.txt").write_bytes("caf\xe9 na\xefve".encode("latin-1")),
    "dangling_link": lambda tmp, request: (tmp / "dangling").symlink_to(tmp / "gone"),
    "small_file": lambda tmp, request: (tmp / "small.txt").write_text("x = 1\n" * 7),
    "run": _run_copy,
    "unfinished_run": _unfinished_run,
    "killed_run": _killed_run,
    "truncated_weights": _truncate_weights,
    "truncated_weights_no_checksum": lambda tmp, request: _truncate_weights(tmp, request, keep_checksum=False),
    "flipped_weight": _flip_weight_byte,
    "vocab_mismatch": lambda tmp, request: _edit_meta(tmp, request, vocab_size=300),
    "layers_mismatch": lambda tmp, request: _edit_meta(tmp, request, "model", n_layer=3),
    "meta_not_json": lambda tmp, request: (_run_copy(tmp, request) / "model.json").write_text("{not json"),
    "duplicate_in_saved_settings": _duplicate_in_saved_settings,
    "two_runs": _two_runs,
    "junk_record": _junk_record,
}

# (arguments, text the one-line error must contain[, setup]); {tmp} is the test's directory.
BAD = [
    (["train", "train.stepz=5"], "stepz"),
    (["train", "pos=bogus"], "bogus"),
    (["train", "train.steps=-1"], "train.steps must be positive"),
    (["train", "train.context_length=0"], "train.context_length must be positive"),
    (["train", "train.lr=0"], "train.lr must be positive"),
    (["train", "train.steps=abc"], "steps"),
    (["train", "eval.factors=[0.5,1]"], "at least 1"),
    (["train", "eval.methods=[none,bogus]"], "eval.methods has unknown value 'bogus'"),
    (["train", "device=tpu"], "device=tpu"),
    (["train", "device=cuda"], "CUDA is not available"),
    (["train", "data=text", "data.path=/nonexistent/corpus"], "does not exist"),
    (["train", "model.d_model=30", "model.n_head=4"], "not divisible"),
    (["train", "train.micro_batch_size=0"], "train.micro_batch_size must be positive"),
    (
        ["train", "train.batch_size=4", "train.micro_batch_size=3", "train.steps=1", "device=cpu"],
        "train.micro_batch_size=3 must divide the per-rank batch",
    ),
    (["eval-extrapolate", "no-such-run"], "not found"),
    (["eval-extrapolate", "--latest"], "no runs under"),
    (["eval-extrapolate", "--latest", "eval.bogus=1"], "bogus"),
    (["train", "data=text", "data.path=a[b]"], "cannot read the override data.path=a[b]: mismatched input"),
    (["train", "-m", "seed=0,1", "eval.methods=[none,yarn"], "cannot read the override eval.methods=[none,yarn"),
    (["eval-extrapolate", "{tmp}/run", "eval.factors=[1"], "cannot read the override eval.factors=[1", "run"),
    (["data", "prepare", "data.path=a'b"], "an unclosed quote?"),
    (["train", "eval.methods=[none,pi,none]"], "eval.methods lists none twice; give each value once"),
    (["train", "eval.factors=[1,1.001]", "train.steps=1"], "eval.factors 1 and 1.001 both give length 128 at T=128"),
    (["eval-extrapolate", "{tmp}/run", "eval.factors=[2,2.01]"], "2 and 2.01 both give length 64 at T=32", "run"),
    (["eval-extrapolate", "{tmp}/run", "eval.tasks=[passkey,passkey]"], "eval.tasks lists passkey twice", "run"),
    (
        ["eval-extrapolate", "{tmp}/run"],
        "eval.methods lists none twice; give each value once (the evaluation settings are those of the config "
        "it was trained with",
        "duplicate_in_saved_settings",
    ),
    # resume and safe loading
    (["train", "pos.name=bogus"], "pos.name=bogus is unknown"),
    (["train", "train.checkpoint_every=-1"], "train.checkpoint_every=-1 must be"),
    (["train", "name=../escape"], "plain directory name"),
    (["train", "data=text", "data.path={tmp}/empty"], "no (non-hidden) files", "empty_dir"),
    (["train", "data=text", "data.path={tmp}/empty.txt"], "holds 0 byte(s)", "empty_file"),
    (["train", "data=text", "data.path={tmp}/latin1.txt"], "is not UTF-8", "latin1_file"),
    (["train", "data=text", "data.path={tmp}/dangling"], "a link that leads nowhere", "dangling_link"),
    (
        ["train", "data=text", "data.path={tmp}/small.txt", "train.context_length=64", "device=cpu"],
        "fewer than the 65 needed",
        "small_file",
    ),
    (
        ["train", "data=text", "data.path={tmp}/small.txt", "data.val_fraction=0.9"],
        "data.val_fraction must be in",
        "small_file",
    ),
    (["eval-extrapolate", "{tmp}/empty"], "has no model.json", "empty_dir"),
    (["eval-extrapolate", "{tmp}/run", "device=cpu"], "holds no weights", "unfinished_run"),
    (["eval-extrapolate", "{tmp}/run", "device=cpu"], "is corrupt: its checksum differs", "truncated_weights"),
    (["eval-extrapolate", "{tmp}/run", "device=cpu"], "is truncated or corrupt", "truncated_weights_no_checksum"),
    (["eval-extrapolate", "{tmp}/run", "device=cpu"], "is corrupt: its checksum differs", "flipped_weight"),
    (
        ["eval-extrapolate", "{tmp}/run", "device=cpu"],
        "size mismatch lm_head.weight: (256, 32) vs (300, 32)",
        "vocab_mismatch",
    ),
    (["eval-extrapolate", "{tmp}/run", "device=cpu"], "missing ['blocks.2", "layers_mismatch"),
    (["eval-extrapolate", "{tmp}/run", "device=cpu"], "model.json is unreadable", "meta_not_json"),
    (["eval-extrapolate", "{tmp}/run", "eval.factors=[0.5]"], "at least 1", "run"),
    (["eval-extrapolate", "{tmp}/run", "device=cuda"], "CUDA is not available", "run"),
    (["train", "--resume", "no-such-run"], "not found"),
    (["train", "--resume", "{tmp}/empty"], "has no config.yaml", "empty_dir"),
    (["train", "--resume", "{tmp}/run", "train.steps=99"], "would change the resumed run", "killed_run"),
    (["train", "--resume", "{tmp}/run", "-m"], "key=value overrides only", "killed_run"),
    (["train", "--resume", "{tmp}/run", "device=cuda"], "CUDA is not available", "killed_run"),
    (["train", "--resume", "{tmp}/run", "--cfg", "job"], "not '--cfg' (a resumed run's config is", "killed_run"),
    (["train", "--resume", "{tmp}/run", "-m", "seed=1,2"], "not '-m' (a sweep cannot be resumed", "killed_run"),
    (["train", "--resume", "{tmp}/run", "seed=1,2"], "not 'seed=1,2' (a sweep cannot be resumed", "killed_run"),
    # arguments that contradict each other, or that the command would ignore
    (["eval-extrapolate", "a", "--latest", "device=cpu"], "give RUN (a) or --latest, not both", "two_runs"),
    (
        ["eval-extrapolate", "{tmp}/run", "pos=alibi", "model.n_layer=9", "train.steps=3", "device=cpu"],
        "pos, model.n_layer, train.steps do not apply to evaluating a run",
        "run",
    ),
    (["eval-extrapolate", "{tmp}/run", "--forse"], "posx eval-extrapolate does not take --forse", "run"),
    (
        ["eval-extrapolate", "{tmp}/run", "--force", "device=cpu"],
        "is not a posx evaluation record; move it out of the run directory, then evaluate again",
        "junk_record",
    ),
    (["extend", "{tmp}/run", "parent={tmp}/run", "method=pi"], "the run to extend is given twice", "run"),
    (["data", "prepare", "train.steps=5"], "train.steps does not apply to posx data prepare"),
    (["data", "prepare", "--cfg", "job"], "posx data prepare does not take --cfg"),
    (["data", "prepare", "-m"], "posx data prepare does not take -m"),
]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*") if not p.is_dir()
    }


@pytest.mark.parametrize("case", BAD, ids=[" ".join(c[0]) + (f" [{c[2]}]" if len(c) > 2 else "") for c in BAD])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(tmp_path, request, case):
    args, needle = [a.format(tmp=tmp_path) for a in case[0]], case[1]
    if needle == "CUDA is not available" and torch.cuda.is_available():
        pytest.skip("checks the message of a machine without CUDA")
    if len(case) > 2:
        SETUPS[case[2]](tmp_path, request)
    before = _files(tmp_path)
    proc = run_posx(*args, cwd=tmp_path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    error_lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1, proc.stderr  # one line (the console does not wrap: soft_wrap)
    # nothing half-written, nothing changed: only the corpus cache may appear
    after = _files(tmp_path)
    changed = [f for f in after if before.get(f) != after[f] and not f.startswith("results/cache")]
    assert not changed and set(before) <= set(after), changed


@pytest.mark.parametrize(
    "args, says",
    [
        (["compare"], "Missing argument 'RUN RUN...'. (`posx compare --help` lists what it takes)"),
        (["bogus"], "No such command 'bogus'."),
        (["runs", "--nope"], "No such option: --nope"),
        (["frequencies", "--head-dim", "x"], "Invalid value for '--head-dim'"),
        (["data", "bogus"], "No such command 'bogus'."),
    ],
)
def test_a_command_line_the_parser_cannot_read_is_one_line(tmp_path, args, says):
    proc = run_posx(*args, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and says in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Usage:" not in proc.stderr


def _stop(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_says_what_the_command_left(tmp_path, request, monkeypatch, tiny_args):
    run = _run_copy(tmp_path, request)
    with monkeypatch.context() as m:
        m.setattr(commands, "evaluate_run", _stop)
        proc = run_posx("eval-extrapolate", str(run), "device=cpu", cwd=tmp_path, check=False)
    assert proc.returncode == 130 and "the unfinished evaluation was not kept" in proc.stderr
    assert "--resume" not in proc.stderr
    with monkeypatch.context() as m:
        m.setattr(jobs, "train", _stop)
        proc = run_posx("train", *tiny_args, "name=cut", cwd=tmp_path, check=False)
    assert proc.returncode == 130 and "before the first checkpoint; results/runs/cut was removed" in proc.stderr
    assert not (tmp_path / "results" / "runs" / "cut").exists()

    def stop_after_a_checkpoint(cfg, path, *args):
        train(cfg, path, *args)
        (path / "model.json").unlink()  # as a run stopped between its checkpoint and its end
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(jobs, "train", stop_after_a_checkpoint)
        proc = run_posx("train", *tiny_args, "name=kept", cwd=tmp_path, check=False)
    assert proc.returncode == 130 and "`posx train --resume results/runs/kept`" in proc.stderr
