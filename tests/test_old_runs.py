"""Run directories written by posx before the package split (tests/fixtures/premove, made with
the flat-layout posx of commit 7eb772c) still load, evaluate, resume and report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from posx.cli.jobs import resume
from posx.configure.compose import compose, typed
from posx.configure.resume import saved_config
from posx.eval.run import evaluate_run
from posx.model.roperecord import RopeRecord
from posx.report.summary import report
from posx.rope import frequencies
from posx.runs import resumable
from posx.runs.lineage import find_parent, zero_shot_model
from posx.runs.paths import lineage_of, read_meta
from posx.runs.rundir import load_run

from helpers.runs import OLD_EVAL

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove"


@pytest.fixture
def old(tmp_path, monkeypatch) -> Path:
    """A copy of the fixture (the originals are never written), as the working directory."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def test_plain_and_extended_metadata_read_as_typed_records(old):
    plain = read_meta(old / "old-rope")
    assert plain.rope == RopeRecord.identity() and plain.extended_from is None
    yarn = read_meta(old / "old-rope-yarn")
    assert yarn.rope.method == "yarn" and yarn.rope.factor == 2.0 and yarn.rope.original_context == 16
    assert len(yarn.rope.inv_freq) == yarn.model.head_dim // 2
    assert yarn.extended_from.parent == "old-rope" and yarn.extended_from.train_context == 16
    interp = read_meta(old / "old-abs-interp")
    assert interp.extended_from.method == "interpolate" and interp.model.pos.max_positions == 32


def test_an_old_extended_run_rotates_with_exactly_its_recorded_frequencies(old):
    model, meta = load_run(old / "old-rope-yarn")
    raw = json.loads((old / "old-rope-yarn" / "model.json").read_text())["rope"]
    assert model.pos.trained_inv_freq.tolist() == pytest.approx(raw["inv_freq"], abs=0)
    assert model.pos.attention_factor == raw["attention_factor"]
    # the recipe it records gives the same numbers (float32 rounding aside)
    recipe, attention = frequencies("yarn", meta.model.head_dim, factor=2.0, original_context=16, **raw["params"])
    torch.testing.assert_close(model.pos.trained_inv_freq, recipe)
    assert attention == pytest.approx(raw["attention_factor"])


def test_an_old_extension_finds_its_parent_by_name_and_rebuilds_the_zero_shot_model(old, tmp_path):
    meta = read_meta(old / "old-rope-yarn")
    meta.extended_from.parent_path = str(tmp_path / "moved-away")
    parent, why = find_parent(meta, tmp_path)  # the recorded path is gone; the name under runs/ is found
    assert parent == tmp_path / "runs" / "old-rope" and why == ""
    zero_shot = zero_shot_model(meta, parent, "cpu")
    torch.testing.assert_close(zero_shot.pos.trained_inv_freq, load_run(old / "old-rope-yarn")[0].pos.trained_inv_freq)


def test_old_runs_evaluate_to_the_tables_they_wrote(old, tmp_path):
    """Re-evaluating with the settings the old posx used gives the numbers it wrote."""
    cfg = typed(compose([*OLD_EVAL, f"results_dir={tmp_path}"]))
    for name in ("old-rope", "old-rope-yarn"):
        before = pd.read_csv(old / name / "extrapolation.csv")
        after = evaluate_run(old / name, cfg).table
        # the columns the old posx wrote are unchanged; the interval and eval_id came later, after them
        pd.testing.assert_frame_equal(
            after[list(before.columns)].reset_index(drop=True), before, check_dtype=False, rtol=1e-5
        )
        ok = after[(after["status"] == "ok") & (after["windows"] > 1)]  # one window: no interval
        assert ((ok["ppl_lo"] < ok["ppl"]) & (ok["ppl"] < ok["ppl_hi"])).all() and (after["eval_id"] != "").all()
        assert (old / name / "eval" / "legacy" / "extrapolation.csv").is_file()  # the old table is kept


def test_an_old_checkpoint_only_extension_resumes_as_an_extension(old, tmp_path):
    run = old / "old-rope-pi-partial"
    assert resumable.exists(run) and not (run / "model.json").exists()
    assert lineage_of(run).method == "pi"  # read from the checkpoint's typed extras
    assert "parent" in saved_config(run)  # the extend schema was chosen
    resume(str(run), ["device=cpu", f"results_dir={tmp_path}"])
    meta = read_meta(run)
    assert meta.extended_from.parent == "old-rope" and meta.rope.method == "pi"
    assert meta.rope.inv_freq == pytest.approx(frequencies("pi", meta.model.head_dim, factor=2.0)[0].tolist())


@pytest.mark.slow
def test_report_reads_old_runs(old, tmp_path):
    out = report([old / "old-rope", old / "old-rope-yarn"], out=tmp_path / "rep")
    summary = pd.read_csv(out / "summary.csv")
    # the extension reads as an extension of a RoPE run at T=16 (its parent is there to read)
    assert {"", "rope-T16"} <= set(summary["parent"].fillna(""))
    assert "yarn (extended)" in set(summary["method"]) and "yarn (zero-shot)" in set(summary["method"])
