"""The learned scalars of the positional machinery a run records in model.json (``learned``:
posx.model.learnedrecord): a tiny FIRE run and a tiny KERPLE run with Scalable-Softmax record the
values of the parameters their saved weights hold; a model without such scalars records none; runs
from before the record still load and list; a damaged record is one line naming the file and key."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posx.configure.compose import compose, typed
from posx.core.errors import PosxError
from posx.model.fire import C_INIT
from posx.model.gpt import GPT
from posx.report.compare import collection
from posx.runs.paths import is_run, read_meta
from posx.runs.records import RunMeta
from posx.runs.rundir import load_run
from posx.train import loop, state

from helpers.model import spec
from helpers.runs import TINY

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove" / "runs"


def _train(root: Path, corpus: Path, *overrides: str) -> Path:
    root.mkdir()
    cfg = typed(compose([*TINY, "data=text", f"data.path={corpus}", f"results_dir={root}", *overrides]))
    loop.train(cfg, root, state.Fresh())
    return root


@pytest.fixture(scope="module")
def fire_run(tmp_path_factory, text_corpus) -> Path:
    return _train(tmp_path_factory.mktemp("learned") / "fire", text_corpus, "pos=fire")


@pytest.fixture(scope="module")
def kerple_run(tmp_path_factory, text_corpus) -> Path:
    return _train(tmp_path_factory.mktemp("learned") / "kerple", text_corpus, "pos=kerple", "model.attn_scale=ssmax")


def test_a_fire_run_records_the_c_and_threshold_its_weights_hold(fire_run):
    model, meta = load_run(fire_run)
    fire, learned = model.pos.fire, meta.learned
    assert learned.fire_c == pytest.approx(fire.c.item(), rel=1e-6)
    assert learned.fire_multiplier == pytest.approx(fire.multiplier.item(), rel=1e-6)
    # L = |multiplier · L0|, L0 the run's pos.fire_threshold (T/4 by default)
    assert meta.model.pos.fire_threshold == 32 / 4
    threshold = abs(fire.multiplier.item() * meta.model.pos.fire_threshold)
    assert learned.fire_threshold == pytest.approx(threshold, rel=1e-6)
    assert abs(learned.fire_c - C_INIT) > 1e-4  # the trained value, not the initial one
    assert learned.kerple_p is learned.kerple_a is learned.ssmax_s is None


def test_a_kerple_run_with_ssmax_records_p_a_per_head_and_s_per_layer_and_head(kerple_run):
    model, meta = load_run(kerple_run)
    learned = meta.learned
    assert learned.kerple_p == pytest.approx(model.pos.p.tolist(), rel=1e-6)
    assert learned.kerple_a == pytest.approx(model.pos.a.tolist(), rel=1e-6)
    assert len(learned.ssmax_s) == 2 and all(len(row) == 2 for row in learned.ssmax_s)  # TINY: 2 layers, 2 heads
    for row, block in zip(learned.ssmax_s, model.blocks, strict=True):
        assert row == pytest.approx(block.attn.logit_scale.s.tolist(), rel=1e-6)
        assert row != pytest.approx([1 / math.log(32)] * 2, abs=1e-5)  # trained away from 1 / ln T
    assert learned.fire_c is None


@pytest.mark.parametrize("keys", [{"pos": "rope"}, {"pos": "alibi"}, {"pos": "t5"}, {"attn_scale": "logn"}])
def test_a_model_without_learned_scalars_records_none(keys):
    model = GPT(spec(**{"n_layer": 2, "n_head": 2, "d_model": 16, **keys}))
    assert model.learned_scalars() is None
    meta = RunMeta(model.config, 128)
    assert "learned" not in meta.to_dict()


def test_runs_from_before_the_record_load_and_list(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "runs")
    finished = [run for run in sorted((tmp_path / "runs").iterdir()) if is_run(run)]
    assert len(finished) == 4  # and one stopped before its model.json
    for run in finished:
        assert "learned" not in json.loads((run / "model.json").read_text(encoding="utf-8"))
        assert read_meta(run).learned is None and load_run(run)[1].learned is None
    listed = collection.list_runs(tmp_path / "runs")
    assert {Path(name).name for name in listed["name"]} >= {run.name for run in finished}
    assert not listed["damaged"].any()


LEARNED_DAMAGE = [
    ("kerple_p", [math.nan, 1.0], "learned.kerple_p[0]"),
    ("kerple_p", [1.0], "learned.kerple_p"),
    ("kerple_a", "0.5", "learned.kerple_a"),
    ("ssmax_s", [[0.3, 0.3], [0.3]], "learned.ssmax_s"),
    ("ssmax_s", [[0.3, 0.3]], "learned.ssmax_s"),
    ("ssmax_s", [[0.3, "x"], [0.3, 0.3]], "learned.ssmax_s[0][1]"),
    ("ssmax_s", [0.3, 0.3], "learned.ssmax_s"),
    ("fire_c", 0.1, "fire_multiplier"),
    ("fire_c", True, "learned.fire_c"),
    ("scale", 1.0, "learned has unknown keys ['scale']"),
]


@pytest.mark.parametrize("key, value, named", LEARNED_DAMAGE, ids=[f"{k}={v!r}" for k, v, _ in LEARNED_DAMAGE])
def test_a_damaged_record_is_one_line_naming_the_file_and_key(kerple_run, tmp_path, key, value, named):
    run = Path(shutil.copytree(kerple_run, tmp_path / "run"))
    data = json.loads((run / "model.json").read_text(encoding="utf-8"))
    data["learned"][key] = value
    (run / "model.json").write_text(json.dumps(data, allow_nan=True), encoding="utf-8")
    with pytest.raises(PosxError) as info:
        load_run(run)
    message = str(info.value)
    assert "\n" not in message and str(run / "model.json") in message and named in message, message


HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, 0.5, 1, True, "", "x", None, [], [[]]]),
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=2)), max_size=3),
    st.lists(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3), max_size=3),
)


@pytest.mark.parametrize("key", ["fire_c", "kerple_p", "ssmax_s"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_an_accepted_record_is_of_the_models_shape_and_finite(kerple_run, key, value):
    data = json.loads((kerple_run / "model.json").read_text(encoding="utf-8"))
    data["learned"][key] = value
    try:
        learned = RunMeta.from_dict(data, Path("model.json")).learned
    except PosxError as exc:
        assert "\n" not in str(exc) and "model.json" in str(exc)
        return
    assert learned.fire_c is None  # alone it is refused: FIRE's three come together
    p, rows = learned.kerple_p, learned.ssmax_s  # null: as absent
    assert p is None or (len(p) == 2 and all(_finite_number(v) for v in p))
    assert rows is None or (len(rows) == 2 and all(len(r) == 2 and all(_finite_number(v) for v in r) for r in rows))


def _finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_a_listing_shows_a_run_with_a_damaged_record_as_damaged_and_lists_the_others(kerple_run, tmp_path):
    shutil.copytree(kerple_run, tmp_path / "runs" / "whole")
    damaged = Path(shutil.copytree(kerple_run, tmp_path / "runs" / "damaged"))
    data = json.loads((damaged / "model.json").read_text(encoding="utf-8"))
    data["learned"]["kerple_a"] = [0.5]
    (damaged / "model.json").write_text(json.dumps(data), encoding="utf-8")
    listed = collection.list_runs(tmp_path / "runs")
    listed = listed.assign(name=[Path(n).name for n in listed["name"]]).set_index("name")
    assert set(listed.index) == {"whole", "damaged"}
    assert "model.json" in listed.loc["damaged", "damaged"] and not listed.loc["whole", "damaged"]
