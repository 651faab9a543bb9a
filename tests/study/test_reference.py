"""scripts/study/reference.py: the task list of both presets composes, a finished task is never
redone and a stopped run resumes (no training here: the plan and the configs only)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pandas as pd
import pytest

from posx.configure.checks import check_config
from posx.configure.compose import compose
from posx.model.encodings import ENCODINGS
from scripts.study import check as checker
from scripts.study import grids, notes, seed_cells, verdicts
from scripts.study import reference as study

REPO = Path(__file__).resolve().parents[2]


def _args(tmp_path: Path, preset: str = "cpu", seeds=(0, 1, 2), grid: str = "first") -> argparse.Namespace:
    return argparse.Namespace(
        grid=grid,
        preset=preset,
        work=tmp_path,
        seeds=list(seeds),
        threads=1,
        factor=4.0,
        extend_eval_every=20,
        set=[],
        extend_set=[],
        eval_set=[],
        only=None,
    )


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["cpu", "gpu"])
def test_the_grid_is_complete_and_every_training_composes(tmp_path, preset):
    tasks = study.plan(_args(tmp_path, preset))
    trains = [t for t in tasks if t.args[0] == "train"]
    extends = [t for t in tasks if t.args[0] == "extend"]
    evals = [t for t in tasks if t.args[0] == "eval-extrapolate"]
    assert len(trains) == 3 * (6 + 1)  # six encodings and llama-block RoPE, 3 seeds
    assert len(extends) == 3 * 4  # PI, YaRN, ABF, continued training
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
    assert "--defaults" in main.args and f"eval.methods={study.list_arg(grids.FIRST_METHODS)}" in main.args


def test_the_second_grid_has_every_encoding_and_the_seeds_its_calls_need(tmp_path):
    tasks = study.plan(_args(tmp_path, grid="methods"))
    trains = {t.run: t for t in tasks if t.args[0] == "train"}
    seeds = lambda prefix: sorted(int(r.rsplit("-s", 1)[1]) for r in trains if r.rsplit("-s", 1)[0] == prefix)  # noqa: E731
    assert seeds("rope") == seeds("t5") == [0, 1, 2, 3, 4]  # five seeds where the first edition could not call
    encodings = {a.split("=", 1)[1] for t in trains.values() for a in t.args if a.startswith("pos=")}
    assert encodings == set(ENCODINGS)
    extends = [t.run for t in tasks if t.args[0] == "extend"]
    assert {r for r in extends if "-s4-" in r} == {f"rope-s4-{m}-x4" for m in ("pi", "yarn", "abf", "none")}
    assert (
        "rope-s0-yarn-pose-x4" in extends
        and "extend.pose=true" in next(t for t in tasks if t.run == "rope-s0-yarn-pose-x4").args
    )
    assert [t.key for t in tasks if t.phase == 0] == ["data-prepare", "data-prepare-bpe-1024"]
    main = next(t for t in tasks if t.key == "eval-rope-s0-main")
    assert f"eval.methods={study.list_arg(grids.ALL_METHODS)}" in main.args
    gpu = [t for t in study.plan(_args(tmp_path, "gpu", grid="methods")) if t.args[0] == "train"]
    assert len(gpu) == len(trains) and all("train.steps=2000" in t.args for t in gpu)  # sized for one H200
    check_config(compose([a for a in gpu[0].args[1:] if not a.startswith(("name=", "results_dir="))]))
    for prefix in {r.rsplit("-s", 1)[0] for r in trains}:  # one run of each kind composes and passes the checks
        t = trains[f"{prefix}-s0"]
        check_config(compose([a for a in t.args[1:] if not a.startswith(("name=", "results_dir="))]))


def test_finished_work_is_skipped_and_a_stopped_run_resumes(tmp_path):
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


@pytest.mark.parametrize("name", ["cpu-tiny", "cpu-methods"])
def test_the_committed_claims_follow_from_the_committed_tables(name):
    """claims.csv of each reference study is what today's claims code writes from the study's own
    sweep.csv, groups.csv and extension.csv: a changed label or rule shows here, not at the next study."""
    folder = REPO / "results" / "reference" / name
    report = folder / "report"
    seeds = seed_cells.read(folder)
    claims = verdicts.claims_table(seeds, pd.read_csv(report / "extension.csv"), notes.rope_groups(report))
    committed = pd.read_csv(folder / "claims.csv", keep_default_na=False, na_values=[""])
    assert len(claims) == len(committed) > 0
    pd.testing.assert_frame_equal(
        claims.reset_index(drop=True).fillna({"test": ""}),
        committed.fillna({"test": "", "low_seeds": "", "low_values": "", "high_seeds": "", "high_values": ""}),
        check_dtype=False,
    )


def test_only_plans_the_named_runs_and_the_parents_of_extensions(tmp_path):
    args = _args(tmp_path)
    args.only = ["rope-s1-yarn-x4", "alibi-s2"]
    tasks = study.plan(args)
    assert {t.run for t in tasks} == {None, "rope-s1", "rope-s1-yarn-x4", "alibi-s2"}
    assert [t.key for t in tasks if t.run is None] == ["data-prepare"]
    assert {"train-rope-s1", "extend-rope-s1-yarn-x4", "eval-rope-s1-yarn-x4-main", "eval-alibi-s2-main"} <= {
        t.key for t in tasks
    }
    assert not any(t.key.startswith(("train-rope-s0", "extend-rope-s1-pi")) for t in tasks)


def test_a_run_the_study_does_not_make_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        study.parse_args(["--only", "rope-s9", "--work", str(tmp_path / "w")])
    assert stop.value.code == 2
    assert "--only rope-s9: not a run of this study" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
    assert study.parse_args(["--check"]).work.name == "cpu-tiny-check"  # a check's runs live apart
    with pytest.raises(SystemExit) as stop:
        study.parse_args(["--check", "--preset", "gpu", "--work", str(tmp_path / "w")])  # no gpu-small study yet
    assert stop.value.code == 2 and "gpu-small/sweep.csv, which does not exist" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def _made_again(tmp_path: Path, job: str, change=None) -> Path:
    """A work folder whose run ``job`` has the committed sweep's cells as its evaluations (one
    folder per evaluation), as ``change(table)`` returns them."""
    sweep = pd.read_csv(REPO / "results" / "reference" / "cpu-tiny" / "sweep.csv")
    table = sweep[sweep["job"] == job].drop(columns="job").reset_index(drop=True)
    if change is not None:
        table = change(table)
    for eval_id, rows in table.groupby("eval_id"):
        folder = tmp_path / "runs" / job / "eval" / str(eval_id)
        folder.mkdir(parents=True)
        rows.to_csv(folder / "extrapolation.csv", index=False)
    return tmp_path


def _check(work: Path, *extra: str) -> int:
    return checker.main(["--work", str(work), "--reference", str(REPO / "results/reference/cpu-tiny"), *extra])


def _scale(method: str, protocol: str, factor: float, by: float, stage: str = "zero-shot"):
    """A change that multiplies one perplexity by ``by``."""

    def change(table):
        at = (table["method"] == method) & (table["protocol"] == protocol) & (table["factor"] == factor)
        at &= table["stage"] == stage
        table.loc[at, "ppl"] *= by
        return table

    return change


def test_the_tolerance_is_in_each_cells_seed_spread(tmp_path, capsys):
    """A 10% change far past T, where the seeds differ by ~15%, agrees; 2% at T, where they differ
    by 0.7%, does not."""
    assert _check(_made_again(tmp_path / "same", "absolute-s1")) == 0
    assert "absolute-s1: " in capsys.readouterr().out
    far = _scale("none", "nonoverlapping", 8.0, 1.10)
    assert _check(_made_again(tmp_path / "far", "rope-s0", far)) == 0
    out = capsys.readouterr().out
    assert "rope-s0: " in out and "agrees" in out and "+10.00%; none 8x nonoverlapping" in out
    near = _scale("none", "nonoverlapping", 1.0, 1.02)
    assert _check(_made_again(tmp_path / "near", "rope-s0", near)) == 1
    assert "1 cell(s) disagree" in capsys.readouterr().out


def _out_of_range_scored(table):
    table.loc[table.index[table["status"] == "out_of_range"][0], "status"] = "ok"
    return table


def _dropped(table):
    return table.drop(index=table.index[-1])  # a cell the run no longer has


@pytest.mark.parametrize(
    "job, change, expect",
    [
        ("rope-s2-yarn-x4", _scale("yarn", "nonoverlapping", 2.0, 1.5, "extended"), "+50.00%"),
        ("absolute-s0", _out_of_range_scored, "out_of_range"),
        ("rope-s2", _dropped, "NaN"),
    ],
    ids=["perplexity", "status", "missing"],
)
def test_a_changed_cell_disagrees_and_is_shown(tmp_path, capsys, job, change, expect):
    assert _check(_made_again(tmp_path, job, change)) == 1
    out = capsys.readouterr().out
    assert f"{job}: " in out and "1 cell(s) disagree" in out
    assert "cells that disagree:" in out and expect in out


def test_bad_input_to_the_check(tmp_path, capsys):
    work = _made_again(tmp_path, "rope-s0")
    assert _check(work, "--runs", "rope-s1") == 1  # named, not made again
    assert "no evaluation of rope-s1 under" in capsys.readouterr().out
    assert _check(work, "--runs", "rope-s0", "rope-s1") == 1  # one made again, one not
    out = capsys.readouterr().out
    assert "rope-s0: 60 cells" in out and "agrees" in out and "rope-s1: no cell of it" in out
    assert checker.main(["--work", str(work), "--reference", str(tmp_path)]) == 2
    assert "sweep.csv does not exist" in capsys.readouterr().err
    assert (
        checker.main(["--work", str(tmp_path / "empty"), "--reference", str(REPO / "results/reference/cpu-tiny")]) == 1
    )
    assert "no run with an evaluation under" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        _check(work, "--tolerance", "five")
    assert stop.value.code == 2


def test_the_committed_notes_are_what_the_notes_only_mode_writes(tmp_path):
    """``python -m scripts.study.notes --from-committed`` over a copy of the first edition writes its committed
    claims.csv and STUDY.md again (but the line saying when the notes were re-derived)."""
    folder = REPO / "results" / "reference" / "cpu-tiny"
    out = tmp_path / "cpu-tiny"
    shutil.copytree(folder, out)
    args = argparse.Namespace(out=out, work=None, grid="first", preset="cpu", from_committed=True)
    staging = tmp_path / "staging"
    notes.notes_only(args, staging)
    assert (staging / "claims.csv").read_text() == (folder / "claims.csv").read_text()
    again, committed = ((p / "STUDY.md").read_text().splitlines() for p in (staging, folder))
    assert [line for line in again if not line.startswith("- notes: ")] == [
        line for line in committed if not line.startswith("- notes: ")
    ]


REFERENCE_BAD = [
    (["--jobs", "0"], "--jobs: '0' is not a whole number >= 1"),
    (["--threads", "-2"], "--threads: '-2' is not a whole number >= 1"),
    (["--factor", "nan"], "--factor: 'nan' is not a number from 1 to 4096"),
    (["--factor", "0.5"], "--factor: '0.5' is not a number from 1 to 4096"),
    (["--seeds", "0", "0"], "a seed given twice"),
    (["--seeds", "-1"], "--seeds: '-1' is not a whole number >= 0"),
    (["--name", "../elsewhere"], "is not a plain folder name"),
    (["--extend-eval-every", "0"], "is not a whole number >= 1"),
    (["--set", "train.steps=abc"], "--set: "),
    (["--set", "train.steps"], "write KEY=VALUE"),
    (["--eval-set", "eval.tokens=0"], "eval.tokens must be positive"),
    (["--extend-set", "extend.steps=0"], "--extend-set: extend.steps must be positive"),
    (["--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("bad, said", REFERENCE_BAD, ids=[" ".join(b) for b, _ in REFERENCE_BAD])
def test_a_bad_argument_is_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys, bad, said):
    with pytest.raises(SystemExit) as stop:
        study.parse_args([*bad, "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists()


def test_a_link_or_a_file_as_the_work_folder_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        study.parse_args(["--work", str(tmp_path / "file")])
    assert stop.value.code == 2 and "--work" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"
