"""scripts/reference_study.py: the task list of both presets composes, a finished task is never
redone and a stopped run resumes (no training here: the plan and the configs only)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

from posx.config.checks import check_config
from posx.config.compose import compose

REPO = Path(__file__).resolve().parents[1]


def _script(name: str):
    """scripts/<name>.py imported as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass resolves its annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study():
    return _script("reference_study")


def _args(tmp_path: Path, preset: str = "cpu", seeds=(0, 1, 2)) -> argparse.Namespace:
    return argparse.Namespace(
        preset=preset,
        work=tmp_path,
        seeds=list(seeds),
        threads=1,
        factor=4.0,
        extend_eval_every=20,
        set=[],
        extend_set=[],
        eval_set=[],
    )


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["cpu", "gpu"])
def test_the_grid_is_complete_and_every_training_composes(study, tmp_path, preset):
    tasks = study.plan(_args(tmp_path, preset))
    trains = [t for t in tasks if t.args[0] == "train"]
    extends = [t for t in tasks if t.args[0] == "extend"]
    evals = [t for t in tasks if t.args[0] == "eval-extrapolate"]
    assert len(trains) == 3 * (len(study.ENCODINGS) + 1)  # six encodings and llama-block RoPE, 3 seeds
    assert len(extends) == 3 * len(study.EXTEND_METHODS)
    assert len({t.key for t in tasks}) == len(tasks)
    assert [t.args[:2] for t in tasks if t.phase == 0] == [["data", "prepare"]]
    # absolute: none, clamp, interpolate and sliding; others: main and sliding; extensions: one
    assert len(evals) == 3 * (4 + 2 * 6) + len(extends)
    for t in trains:
        cfg = compose([a for a in t.args[1:] if not a.startswith(("name=", "results_dir="))])
        check_config(cfg)
        assert cfg.train.steps == compose(study.PRESETS[preset]["train"]).train.steps  # the preset's default steps
    rope = compose([a for a in trains[0].args[1:] if not a.startswith(("name=", "results_dir="))])
    assert rope.train.context_length == (128 if preset == "cpu" else 512)
    main = next(t for t in evals if t.key == "eval-rope-s0-main")
    assert "--defaults" in main.args and f"eval.methods={study.list_arg(study.ALL_METHODS)}" in main.args


def test_finished_work_is_skipped_and_a_stopped_run_resumes(study, tmp_path):
    runs = tmp_path / "runs"
    (runs / "rope-s0").mkdir(parents=True)
    (runs / "rope-s0" / "config.yaml").write_text("seed: 0\n")  # stopped: a config, no model.json
    (runs / "alibi-s1").mkdir(parents=True)
    for name in ("config.yaml", "model.json"):
        (runs / "alibi-s1" / name).write_text("{}\n")  # finished
    tasks = {t.key: t for t in study.plan(_args(tmp_path))}
    assert tasks["train-rope-s0"].args[:3] == ["train", "--resume", str(runs / "rope-s0")]
    assert not tasks["train-rope-s0"].done()
    alibi = tasks["train-alibi-s1"]
    assert alibi.done() and alibi.args[0] == "train" and "model=tiny" in alibi.args
    log = study.Log(tmp_path / "tasks.jsonl")
    log.add({"key": "eval-alibi-s1-main", "rc": 0})
    log.add({"key": "eval-alibi-s1-sliding", "rc": 1})
    with open(tmp_path / "tasks.jsonl", "a") as f:
        f.write('{"key": "cut by a ki')  # a line cut short by a kill
    done = study.Log(tmp_path / "tasks.jsonl").done
    assert set(done) == {"eval-alibi-s1-main"}


@pytest.fixture(scope="module")
def notes():
    return _script("study_notes")


def test_the_committed_claims_follow_from_the_committed_tables(notes):
    """claims.csv of the reference study is what today's posx.report.claims writes from the study's
    own summary.csv and extension.csv: a changed label or rule shows here, not at the next study."""
    study = REPO / "results" / "reference" / "cpu-tiny"
    report = study / "report"
    summary = notes.read_summary(report)
    claims = notes.claims_table(summary, pd.read_csv(report / "extension.csv"), notes.rope_groups(report))
    committed = pd.read_csv(study / "claims.csv")
    assert len(claims) == len(committed) > 0
    pd.testing.assert_frame_equal(claims.reset_index(drop=True), committed, check_dtype=False)
