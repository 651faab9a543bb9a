"""model.json's first format (posx-run/1, a flat model record: tests/fixtures/premove) and the current
one (the schema's model and pos sections) describe one model: an old record reads through
``posx.runs.legacy`` to what the new record holds, builds the same model, evaluates to the same
table, and is refused by the same walker, naming the key as its own file spells it. A config.yaml
or eval.yaml that spells ABF's base as it once was reads through the same module, and an
evaluation keeps its id."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from posx.configure.compose import compose, typed
from posx.configure.evalsettings import saved_eval
from posx.configure.resume import saved_config
from posx.core.errors import PosxError
from posx.eval import history
from posx.eval.run import evaluate_run
from posx.runs import legacy
from posx.runs.paths import read_config, read_meta
from posx.runs.records import META_FORMAT, RunMeta
from posx.runs.rundir import load_run
from posx.schema.config import EvalConfig

from helpers.runs import OLD_EVAL

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove"
OLD = json.loads((FIXTURE / "runs" / "old-rope" / "model.json").read_text(encoding="utf-8"))


def _rewritten(old: Path, name: str) -> Path:
    """A copy of the old run whose model.json is the new format of what was read."""
    new = Path(shutil.copytree(old / name, old / f"new-{name}"))
    (new / "model.json").write_text(json.dumps(read_meta(old / name).to_dict()), encoding="utf-8")
    return new


@pytest.fixture
def old(tmp_path, monkeypatch) -> Path:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def test_an_old_record_reads_as_the_sections_of_the_new_format(old):
    assert OLD["format"] == "posx-run/1" and {"pos", "rope_base", "t5_num_buckets"} <= set(OLD["model"])
    new = _rewritten(old, "old-abs")
    written = json.loads((new / "model.json").read_text(encoding="utf-8"))
    assert written["format"] == META_FORMAT and set(written["model"]) == {"vocab_size", "model", "pos"}
    assert written["model"]["pos"]["name"] == "absolute" and written["model"]["pos"]["max_positions"] == 16
    assert read_meta(new) == read_meta(old / "old-abs")
    (a, _), (b, _) = load_run(old / "old-abs"), load_run(new)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("name", ["old-rope", "old-rope-yarn", "old-abs"])
def test_an_old_record_and_its_new_format_evaluate_to_the_same_table(old, tmp_path, name):
    """The table the old posx wrote, where it wrote one (old-abs: the old record's evaluation now)."""
    cfg = typed(compose([*OLD_EVAL, f"results_dir={tmp_path}"]))
    new = _rewritten(old, name)
    written = old / name / "extrapolation.csv"
    expected = pd.read_csv(written) if written.is_file() else evaluate_run(old / name, cfg).table
    for run in (old / name, new):
        after = evaluate_run(run, cfg).table.reset_index(drop=True)
        after["run"] = name  # the run's name is a column
        pd.testing.assert_frame_equal(after[list(expected.columns)], expected, check_dtype=False, rtol=1e-5)


# A damage to the old record, the same damage to the new one, and the line each is refused with:
# one rule, walked once, naming the key as each file spells it.
DAMAGE = [
    ("rope_base", ("pos", "base"), 1.0, "model.rope_base=1.0 must be greater than 1", "model.pos.base=1.0 must be"),
    ("pos", ("pos", "name"), "bogus", "model.pos=bogus is unknown", "model.pos.name=bogus is unknown"),
    ("n_head", ("model", "n_head"), 3, "model.d_model=16 is not divisible by model.n_head=3", "model.model.d_model=16"),
    ("max_positions", ("pos", "max_positions"), None, "model.max_positions is null", "model.pos.max_positions is null"),
    ("t5_per_layer", ("pos", "per_layer"), 2, "model.t5_per_layer=2 is not a valid bool", "model.pos.per_layer=2"),
    ("rotary_fraction", ("pos", "rotary_fraction"), 0.5, None, None),  # rope: accepted by both
]


@pytest.mark.parametrize("old_key, new_key, value, old_says, new_says", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_an_old_record_is_refused_by_the_walker_that_refuses_a_new_one(old_key, new_key, value, old_says, new_says):
    legacy = json.loads(json.dumps(OLD))
    legacy["model"][old_key] = value
    current = RunMeta.from_dict(OLD, Path("model.json")).to_dict()
    current["model"][new_key[0]][new_key[1]] = value
    for record, says in ((legacy, old_says), (current, new_says)):
        if says is None:
            assert RunMeta.from_dict(record, Path("model.json")).model.pos.rotary_fraction == value
            continue
        with pytest.raises(PosxError) as info:
            RunMeta.from_dict(record, Path("model.json"))
        assert str(info.value).startswith(f"model.json is incomplete or corrupt: {says}"), str(info.value)


def test_an_unknown_key_of_an_old_record_is_refused_and_a_format_is_never_guessed():
    with pytest.raises(PosxError, match=r"model has unknown keys \['name'\]"):
        RunMeta.from_dict({**OLD, "model": {**OLD["model"], "name": "tiny"}}, Path("model.json"))
    current = RunMeta.from_dict(OLD, Path("model.json")).to_dict()
    with pytest.raises(PosxError, match=r"model has unknown keys \['d_model', 'dropout'"):  # a new record, flat
        RunMeta.from_dict({**OLD, "format": META_FORMAT}, Path("model.json"))
    with pytest.raises(PosxError, match="model has unknown keys"):  # sections, but format 1's marker
        RunMeta.from_dict({**current, "format": "posx-run/1"}, Path("model.json"))


# --------------------------------------------------------------------------- ABF's base: eval.abf.new_base


@pytest.mark.parametrize("name", ["old-rope", "old-rope-yarn", "old-rope-pi-partial"])
def test_an_old_config_reads_abf_base_as_the_one_key(name):
    run = FIXTURE / "runs" / name
    assert "abf_base:" in (run / "config.yaml").read_text(encoding="utf-8")  # the fixture spells it as it was
    data = read_config(run)
    assert data["eval"]["abf"] == {"new_base": 500000.0} and "abf_base" not in data["eval"] and "new_base" not in data
    assert OmegaConf.select(saved_config(run), "eval.abf.new_base") == 500000.0  # fits the schema (resume)
    settings, _ = saved_eval(run)
    assert settings["abf"] == {"new_base": 500000.0} and "abf_base" not in settings


def test_an_abf_extensions_new_base_is_the_base_it_trained_with():
    old = {"method": "abf", "new_base": 1e6, "eval": {"abf_base": 500000.0, "tokens": 64}}
    assert legacy.upgrade_config(old) == {"method": "abf", "eval": {"abf": {"new_base": 1e6}, "tokens": 64}}
    other = {**old, "method": "yarn"}  # any other method ignored new_base
    assert legacy.upgrade_config(other) == {"method": "yarn", "eval": {"abf": {"new_base": 500000.0}, "tokens": 64}}


def test_an_old_evaluation_record_reads_as_now_and_keeps_its_id(tmp_path):
    settings = history.settings_of(EvalConfig())
    old = {k: v for k, v in settings.items() if k != "abf"} | {"abf_base": settings["abf"]["new_base"]}
    assert legacy.upgrade_eval(old) == settings and legacy.first_spelled(settings) == old
    path = tmp_path / history.SETTINGS
    path.write_text(yaml.safe_dump({"id": history.eval_id(old), "settings": old, "device": "cpu"}), encoding="utf-8")
    record = history.read_record(path)
    assert record["settings"] == settings and history.eval_id(record["settings"]) == record["id"]
    moved = {**settings, "abf": {"new_base": 1e6}}  # another base is another evaluation
    assert history.eval_id(moved) != record["id"]
