"""Tests for posx.runs.records (and the checkpoint and evaluation records beside it): every field
of an extended, rescaled run's records is checked on load, and what is accepted is valid."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posx.core.errors import PosxError
from posx.eval import history
from posx.report.compare import collection
from posx.runs import checkpoint, resumable
from posx.runs.paths import read_meta
from posx.runs.records import Lineage, RunMeta, TrainExtras
from posx.runs.resumable import saved_extras

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove" / "runs"
YARN = "old-rope-yarn"  # an extension with YaRN frequencies: every rescaling field is set


def _set(tree: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        tree = tree[p]
    if isinstance(tree, list):
        last = int(last)
    tree[last] = value


@pytest.fixture
def run(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE / YARN, tmp_path / "r"))


def _damage_json(path: Path, field: str, value) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    _set(data, field, value)
    path.write_text(json.dumps(data, allow_nan=True), encoding="utf-8")


def _one_line_naming(info, path: Path, field: str) -> None:
    message = str(info.value)
    assert "\n" not in message and str(path) in message and field in message, message


META_DAMAGE = [
    ("rope.attention_factor", math.nan),
    ("rope.attention_factor", -1.0),
    ("rope.attention_factor", "1.0"),
    ("rope.factor", math.inf),
    ("rope.factor", 0),
    ("rope.method", "warp"),
    ("rope.original_context", 16.5),
    ("rope.original_context", 0),
    ("rope.inv_freq.1", math.nan),
    ("rope.inv_freq.0", -1.0),
    ("rope.inv_freq", "1.0"),
    ("rope.params.beta_fast", math.nan),
    ("rope.params", [1]),
    ("step", -1),
    ("step", 2.5),
    ("step", True),
    ("train_context", 1e308),
    ("train_context", 0),
    ("train_context", "32"),
    ("weights_sha256", 5),
    ("weights_sha256", ""),
    ("extended_from.factor", math.nan),
    ("extended_from.factor", -2.0),
    ("extended_from.train_context", 1e308),
    ("extended_from.steps", -1),
    ("extended_from.parent_step", "4"),
    ("extended_from.parent", ""),
    ("extended_from.method", None),
    ("data.bytes", math.inf),
    ("data", [1]),
    ("data.tokenizer", "x"),
    ("data.tokenizer", {"kind": "bpe", "sha256": 5}),
    ("data.tokenizer", {"sha256": None}),
]


@pytest.mark.parametrize("field, value", META_DAMAGE, ids=[f"{f}={v!r}" for f, v in META_DAMAGE])
def test_a_damaged_model_json_field_is_refused_naming_it(run, field, value):
    _damage_json(run / "model.json", field, value)
    with pytest.raises(PosxError) as info:
        read_meta(run)
    _one_line_naming(
        info,
        run / "model.json",
        field.split(".")[0] if field.startswith("data") else field.rsplit(".", 1)[0] if field[-1].isdigit() else field,
    )


@pytest.mark.parametrize("absent", [True, False])
def test_model_json_without_a_checksum_still_loads(run, absent):
    """As written by a posx that did not record one (or by to_dict of a record without one)."""
    data = json.loads((run / "model.json").read_text(encoding="utf-8"))
    if absent:
        del data["weights_sha256"]
    else:
        data["weights_sha256"] = None
    (run / "model.json").write_text(json.dumps(data), encoding="utf-8")
    assert read_meta(run).weights_sha256 is None


STATE_DAMAGE = [
    ("step", -1),
    ("step", 1e308),
    ("step", None),
    ("sha256.model.safetensors", None),
    ("sha256.model.safetensors", 7),
    ("extra.val_loss", math.nan),
    ("extra.val_loss", -1.0),
    ("extra.data_sha256", 5),
    ("extra.rope.attention_factor", math.nan),
    ("extra.rope.factor", -1.0),
    ("extra.extended_from.train_context", 1e308),
    ("extra.extended_from.factor", math.inf),
    ("extra.config", [1, 2]),
    ("extra.config", "train: {steps: 9}"),
]


def _state_path(run: Path) -> Path:
    (found,) = (run / resumable.DIRNAME).glob("step-*/state.json")
    return found


@pytest.mark.parametrize("field, value", STATE_DAMAGE, ids=[f"{f}={v!r}" for f, v in STATE_DAMAGE])
def test_a_damaged_checkpoint_record_is_refused_naming_it(run, field, value):
    path = _state_path(run)
    data = json.loads(path.read_text(encoding="utf-8"))
    if field.startswith("sha256."):
        data["sha256"]["model.safetensors"] = value
    else:
        _set(data, field, value)
    path.write_text(json.dumps(data, allow_nan=True), encoding="utf-8")
    with pytest.raises(PosxError) as info:
        if field.startswith("extra."):
            saved_extras(run)
        else:
            checkpoint._read_state(path.parent)
    _one_line_naming(info, path, field.removeprefix("extra.") if field.startswith("extra.") else field)


@pytest.mark.parametrize("value", [-1, 2.5, None, "4"])
def test_a_damaged_latest_json_step_is_refused(run, value):
    path = run / resumable.DIRNAME / resumable.LATEST
    _damage_json(path, "step", value)
    with pytest.raises(PosxError) as info:
        resumable.latest_step(run)
    _one_line_naming(info, path, "step")


EVAL_DAMAGE = [
    ("id", "../../x"),
    ("id", None),
    ("settings.factors.1", math.nan),
    ("settings.batch_size", math.inf),
    ("device", 3),
    ("device", ""),
    ("weights_sha256", 12),
]


@pytest.mark.parametrize("field, value", EVAL_DAMAGE, ids=[f"{f}={v!r}" for f, v in EVAL_DAMAGE])
def test_a_damaged_evaluation_record_is_refused_naming_it(tmp_path, field, value):
    path = tmp_path / "eval.yaml"
    record = {
        "id": "0123456789",
        "settings": {"factors": [1, 2, 4], "batch_size": 8},
        "device": "cpu",
        "weights_sha256": "ab" * 32,
    }
    _set(record, field, value)
    path.write_text(yaml.safe_dump(record), encoding="utf-8")
    with pytest.raises(PosxError) as info:
        history.read_record(path)
    _one_line_naming(info, path, field.rsplit(".", 1)[0] if field[-1].isdigit() else field)


def test_the_fixture_records_load(run):
    meta = read_meta(run)
    assert meta.rope.method == "yarn" and meta.extended_from is not None
    assert saved_extras(run).rope.attention_factor == meta.rope.attention_factor
    (record,) = (run / "eval").glob("*/eval.yaml") if (run / "eval").is_dir() else [None]
    assert record is None or history.read_record(record)["settings"]


# ---------------------------------------------------------------- what is accepted is valid

HOSTILE = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, 1e308, 2**63, 0.5, 1, True, "", "x", "nan", None]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=5),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3),
)
ROPE_FIELDS = ["method", "factor", "params", "original_context", "inv_freq", "attention_factor"]
LINEAGE_FIELDS = ["parent", "parent_path", "method", "factor", "steps", "train_context", "parent_step"]


def _finite(value) -> bool:
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return value is None or isinstance(value, (str, bool)) or math.isfinite(value)


def _yarn_meta() -> dict:
    return json.loads((FIXTURE / YARN / "model.json").read_text(encoding="utf-8"))


def _assert_valid_meta(meta: RunMeta) -> None:
    assert isinstance(meta.step, int) and meta.step >= 0
    assert isinstance(meta.train_context, int) and meta.train_context >= 1
    assert _finite(meta.data)
    _assert_valid_rope(meta.rope)
    assert meta.extended_from is None or _valid_lineage(meta.extended_from)


def _assert_valid_rope(rope) -> None:
    assert isinstance(rope.method, str) and math.isfinite(rope.factor) and rope.factor > 0
    assert _finite(rope.params)
    assert rope.original_context is None or (isinstance(rope.original_context, int) and rope.original_context >= 1)
    assert rope.inv_freq is None or all(math.isfinite(v) and v >= 0 for v in rope.inv_freq)
    assert rope.attention_factor is None or (math.isfinite(rope.attention_factor) and rope.attention_factor > 0)


def _valid_lineage(lineage: Lineage) -> bool:
    return (
        math.isfinite(lineage.factor)
        and lineage.factor > 0
        and lineage.train_context >= 1
        and lineage.steps >= 0
        and lineage.parent_step >= 0
        and bool(lineage.parent)
        and bool(lineage.method)
        and all(
            isinstance(v, int) and not isinstance(v, bool)
            for v in (lineage.steps, lineage.train_context, lineage.parent_step)
        )
    )


@pytest.mark.parametrize(
    "field",
    [
        "step",
        "train_context",
        "weights_sha256",
        *(f"rope.{f}" for f in ROPE_FIELDS),
        *(f"extended_from.{f}" for f in LINEAGE_FIELDS),
    ],
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_an_accepted_model_json_is_valid(field, value):
    data = _yarn_meta()
    _set(data, field, value)
    try:
        meta = RunMeta.from_dict(data, Path("model.json"))
    except PosxError as exc:
        assert "\n" not in str(exc) and "model.json" in str(exc)
        return
    _assert_valid_meta(meta)
    assert meta.weights_sha256 is None or (isinstance(meta.weights_sha256, str) and meta.weights_sha256)


@pytest.mark.parametrize(
    "field",
    [
        "val_loss",
        "data_sha256",
        "tokenizer_sha256",
        *(f"rope.{f}" for f in ROPE_FIELDS),
        *(f"extended_from.{f}" for f in LINEAGE_FIELDS),
    ],
)
@settings(max_examples=30, deadline=None)
@given(value=HOSTILE)
def test_an_accepted_checkpoint_record_is_valid(field, value):
    extra = json.loads(next((FIXTURE / YARN / "checkpoint").glob("step-*/state.json")).read_text())["extra"]
    _set(extra, field, value)
    try:
        extras = TrainExtras.from_dict(extra, "state.json")
    except PosxError as exc:
        assert "\n" not in str(exc) and "state.json" in str(exc)
        return
    assert extras.val_loss is None or (math.isfinite(extras.val_loss) and extras.val_loss >= 0)
    _assert_valid_rope(extras.rope)
    assert extras.extended_from is None or _valid_lineage(extras.extended_from)
    for digest in (extras.data_sha256, extras.tokenizer_sha256):
        assert digest is None or len(digest) == 64


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [40, 5000, 200_000])
def test_a_record_nested_past_the_limit_is_one_line_naming_the_file(run, depth):
    path = run / "model.json"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"data": {', f'"deep": {_nested(depth)}, "data": {{', 1), encoding="utf-8")
    with pytest.raises(PosxError) as info:
        read_meta(run)
    _one_line_naming(info, path, "nests more than")


def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path):
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 values
    path = tmp_path / "eval.yaml"
    path.write_text("id: x\nsettings:\n" + "\n".join("  " + line for line in lines) + "\n", encoding="utf-8")
    with pytest.raises(PosxError, match="holds more than"):
        history.read_record(path)


def test_a_listing_shows_a_deeply_nested_run_as_damaged_and_lists_the_others(run, tmp_path):
    shutil.copytree(run, tmp_path / "runs" / "other")
    deep = Path(shutil.move(run, tmp_path / "runs" / "deep"))
    (deep / "eval.yaml").write_text("id: x\nsettings: " + _nested(3000) + "\n", encoding="utf-8")
    (deep / "model.json").write_text('{"format": ' + _nested(3000)[:3000] + "1" + "]" * 3000 + "}", encoding="utf-8")
    listed = collection.list_runs(tmp_path / "runs")
    listed = listed.assign(name=[Path(n).name for n in listed["name"]]).set_index("name")
    assert set(listed.index) == {"deep", "other"}
    assert "model.json" in listed.loc["deep", "damaged"] and not listed.loc["other", "damaged"]


@pytest.mark.parametrize(
    "field, value",
    [("settings.tokens", "abc"), ("settings.tokens", -5), ("settings.protocol", "diagonal"),
     ("settings.passkey.trials", 0), ("settings.factors", "1,2")],
)  # fmt: skip
def test_a_damaged_evaluation_setting_is_refused_naming_it(tmp_path, field, value):
    path = tmp_path / "eval.yaml"
    record = {"id": "0123456789", "settings": {"factors": [1, 2], "tokens": 512, "passkey": {"trials": 4}}}
    _set(record, field, value)
    path.write_text(yaml.safe_dump(record), encoding="utf-8")
    with pytest.raises(PosxError) as info:
        history.read_record(path)
    _one_line_naming(info, path, field)


def test_an_evaluation_record_of_another_version_keeps_loading(tmp_path):
    path = tmp_path / "eval.yaml"
    record = {"id": "0123456789", "settings": {"factors": [1, 2], "retired_key": 3, "yarn": {"old": 1}}}
    path.write_text(yaml.safe_dump(record), encoding="utf-8")
    assert history.read_record(path)["settings"]["retired_key"] == 3
