"""Evaluations are kept, not replaced: eval/<id>/, the current one on top, the run's own settings."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml

from posx.configure.compose import compose, typed
from posx.configure.evalsettings import eval_config, kept_from_run
from posx.eval import history
from posx.eval.tables import COLUMNS, Evaluation
from posx.schema.config import EvalConfig

from conftest import run_posx


def _evaluation(ppl: float) -> Evaluation:
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        method="none",
        factor=1.0,
        eval_context=8,
        ppl=ppl,
        status="ok",
        protocol="nonoverlapping",
        reference_context=8,
        stage="zero-shot",
    )
    return Evaluation(table=pd.DataFrame([row], columns=COLUMNS))


def test_the_id_ignores_memory_knobs_and_key_order_and_int_vs_float():
    a = history.settings_of({"tokens": 512, "factors": [1, 2], "batch_tokens": 1, "after_train": True})
    b = history.settings_of({"factors": [1.0, 2.0], "tokens": 512, "batch_tokens": 99})
    assert history.eval_id(a) == history.eval_id(b)
    assert history.eval_id({**b, "tokens": 1024}) != history.eval_id(b)
    pair = (([1, 2], 1), ([1.0, 2.0], 99))
    typed_a, typed_b = (history.settings_of(EvalConfig(factors=f, batch_tokens=n)) for f, n in pair)
    assert history.eval_id(typed_a) == history.eval_id(typed_b)  # the schema's sections, as the CLI hands them


def test_two_evaluations_are_both_kept_and_the_last_is_current(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    first, second = {"tokens": 512}, {"tokens": 1024}
    history.save(_evaluation(10.0), run, first, "cpu", "w")
    history.save(_evaluation(11.0), run, second, "cpu", "w")
    kept = {p.name for p in (run / "eval").iterdir()}
    assert kept == {history.eval_id(first), history.eval_id(second)}
    assert pd.read_csv(run / "extrapolation.csv")["ppl"].iloc[0] == 11.0
    assert pd.read_csv(run / "extrapolation.csv")["eval_id"].iloc[0] == history.eval_id(second)
    assert history.current(run)["settings"] == second
    folder = history.stored(run, history.eval_id(first), "w")
    assert folder is not None and history.stored(run, history.eval_id(first), "other-weights") is None
    history.make_current(run, folder)
    assert pd.read_csv(run / "extrapolation.csv")["ppl"].iloc[0] == 10.0
    assert history.current(run)["settings"] == first


def test_tables_from_before_the_store_are_moved_aside_not_overwritten(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "extrapolation.csv").write_text("old table\n")
    (run / "positions.csv").write_text("old positions\n")
    history.save(_evaluation(10.0), run, {"tokens": 512}, "cpu", None)
    assert (run / "eval" / "legacy" / "extrapolation.csv").read_text() == "old table\n"
    assert (run / "eval" / "legacy" / "positions.csv").read_text() == "old positions\n"
    assert not (run / "positions.csv").exists()  # the new evaluation has none
    # a current evaluation whose eval/<id>/ was removed is put back there before it is replaced
    first = history.current(run)["id"]
    shutil.rmtree(run / "eval" / first)
    history.save(_evaluation(11.0), run, {"tokens": 1024}, "cpu", None)
    assert pd.read_csv(run / "eval" / first / "extrapolation.csv")["ppl"].iloc[0] == 10.0


def test_eval_settings_start_from_the_run_and_overrides_win_even_at_their_default(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(
        yaml.safe_dump(
            {"seed": 0, "eval": {"tokens": 512, "factors": [1, 2], "batch_tokens": 7, "protocol": "sliding"}}
        )
    )
    cfg, source = eval_config(run, compose([]), [])
    assert "trained with" in source
    assert cfg.eval.tokens == 512 and list(cfg.eval.factors) == [1, 2] and cfg.eval.protocol == "sliding"
    assert cfg.eval.batch_tokens == 16384  # a memory knob of this machine, not the run's
    overrides = ["eval.tokens=16384", "eval.protocol=nonoverlapping"]  # both equal to the defaults
    cfg, _ = eval_config(run, compose(overrides), overrides)
    assert cfg.eval.tokens == 16384 and cfg.eval.protocol == "nonoverlapping" and list(cfg.eval.factors) == [1, 2]
    history.save(_evaluation(3.0), run, history.settings_of(typed(cfg).eval), "cpu", None)
    cfg, source = eval_config(run, compose([]), [])
    assert "last evaluation" in source and cfg.eval.tokens == 16384


def test_the_settings_a_run_carries_are_named(tmp_path):
    """What the run's settings change against the command line alone, in override syntax; an
    override that the run already holds is not named."""
    run = tmp_path / "run"
    run.mkdir()
    saved = {"factors": [1, 2.5], "methods": ["none", "self_extend"], "self_extend": {"group": 2}, "stride": None}
    (run / "config.yaml").write_text(yaml.safe_dump({"eval": {**saved, "protocol": "sliding"}}))
    cfg, _ = eval_config(run, compose([]), [])
    assert kept_from_run(cfg, compose([])) == (
        "eval.factors=[1,2.5], eval.methods=[none,self_extend], eval.self_extend.group=2, eval.protocol=sliding"
    )
    overrides = ["eval.protocol=sliding", "eval.self_extend.group=16"]
    cfg, _ = eval_config(run, compose(overrides), overrides)
    assert kept_from_run(cfg, compose(overrides)) == "eval.factors=[1,2.5], eval.methods=[none,self_extend]"
    assert kept_from_run(compose([]), compose([])) == ""


@pytest.mark.slow
def test_re_evaluating_is_a_no_op_unless_forced_and_every_evaluation_is_kept(trained_runs, tmp_path):
    work, run = trained_runs["work"], tmp_path / "rope"
    shutil.copytree(
        trained_runs["rope"],
        run,  # the shared run stays as it is; the copy starts unevaluated
        ignore=shutil.ignore_patterns("extrapolation.*", "positions.csv", "passkey.csv", "eval.yaml", "eval"),
    )
    run_posx("eval-extrapolate", str(run), "eval.methods=[none]", "eval.passkey.enabled=false", cwd=work)
    first = pd.read_csv(run / "extrapolation.csv")
    assert first["eval_id"].nunique() == 1 and len(first) == 4
    # the run's own settings (512 tokens from its training config, methods=[none]) carry over
    again = run_posx("eval-extrapolate", str(run), cwd=work)
    assert "nothing computed" in " ".join(again.stdout.split())  # words, whatever the line breaks
    assert "it sets eval.methods=[none], eval.tokens=512, eval.passkey.enabled=False" in " ".join(again.stdout.split())
    assert "eval 1/" not in again.stdout
    other = run_posx("eval-extrapolate", str(run), "eval.factors=[1,2]", cwd=work)
    assert "nothing computed" not in " ".join(other.stdout.split())
    table = pd.read_csv(run / "extrapolation.csv")
    assert list(table["method"]) == ["none", "none"] and (table["tokens"] == 512).all()
    assert len(list((run / "eval").iterdir())) == 2
    forced = run_posx("eval-extrapolate", str(run), "eval.factors=[1,2]", "--force", cwd=work)
    assert "nothing computed" not in " ".join(forced.stdout.split()) and "eval 2/2" in forced.stdout
