"""Property-based: random values (NaN, inf, huge, negative, zero, wrong types) thrown at every
numeric config key and at the fields of model.json and of a checkpoint's state. posx either
accepts a value or raises what the CLI turns into its one-line error (PosxError, or Hydra's /
OmegaConf's config errors) — never anything else, and never allocates from a bad size."""

from __future__ import annotations

import functools
import json
import math
import shutil
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import torch
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from posx import rope
from posx.configure.checks import check_train_config
from posx.configure.compose import compose
from posx.core.errors import PosxError
from posx.runs.paths import read_meta
from posx.runs.records import TrainExtras
from posx.runs.resumable import saved_extras
from posx.runs.rundir import load_run
from posx.schema.config import Config

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove" / "runs"
USER_ERRORS = (PosxError, HydraException, OmegaConfBaseException)
EXAMPLES = 25  # per key or field

HOSTILE = st.one_of(
    st.sampled_from(
        [math.nan, math.inf, -math.inf, 0, -1, 1e308, -1e308, 2**63, 10**30, 0.5, 1, True, "", "x", "nan", None]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=5),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3),
)


def numeric_keys(node=Config, prefix: str = "") -> list[str]:
    """Every int or float field (optional or in a list) of the schema, dotted."""
    out = []
    hints = typing.get_type_hints(node)
    for f in fields(node):
        kind, key = hints[f.name], f"{prefix}{f.name}"
        if is_dataclass(kind):
            out += numeric_keys(kind, key + ".")
            continue
        text = str(kind)
        if kind in (int, float) or "int" in text or "float" in text:
            out.append(key)
    return out


KEYS = numeric_keys()


@pytest.fixture(scope="module")
def base_cfg():
    return compose([])


def test_the_keys_cover_the_schema():
    assert {
        "train.lr",
        "train.steps",
        "model.d_model",
        "eval.factors",
        "eval.yarn.beta_fast",
        "eval.passkey.trials",
        "data.val_fraction",
    } <= set(KEYS)


@pytest.mark.parametrize("key", KEYS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_a_config_value_is_accepted_or_refused_with_a_user_error(base_cfg, key, value):
    cfg = base_cfg.copy()
    try:
        OmegaConf.update(cfg, key, value, merge=False)  # the schema's type check, as an override gets
        check_train_config(cfg)
    except USER_ERRORS:
        return
    # accepted: then it is a usable value (finite; sizes positive)
    accepted = OmegaConf.to_container(cfg, resolve=True)
    for part in key.split("."):
        accepted = accepted[part]
    for v in accepted if isinstance(accepted, list) else [accepted]:
        assert v is None or isinstance(v, (bool, str)) or math.isfinite(v), (key, value, accepted)


@functools.cache
def trained_weights() -> dict[str, torch.Tensor]:
    """The parameters of the undamaged run."""
    return dict(load_run(FIXTURE / "old-rope")[0].named_parameters())


META_FIELDS = [
    "model.vocab_size",
    "model.n_layer",
    "model.n_head",
    "model.d_model",
    "model.mlp_ratio",
    "model.dropout",
    "model.pos",
    "model.rope_base",
    "model.max_positions",
    "model.t5_num_buckets",
    "model.t5_max_distance",
    "model.t5_per_layer",
    "train_context",
    "step",
    "rope",
    "rope.method",
    "rope.factor",
    "rope.params",
    "rope.inv_freq",
    "rope.attention_factor",
    "extended_from",
    "data",
    "data.config",
    "weights_sha256",
    "format",
]


def _set(tree: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        tree = tree.setdefault(p, {}) if isinstance(tree.get(p), dict) or p not in tree else tree[p]
        if not isinstance(tree, dict):
            return
    tree[last] = value


@pytest.mark.parametrize("field", META_FIELDS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_a_damaged_model_json_loads_or_is_refused_with_a_user_error(tmp_path_factory, field, value):
    run = tmp_path_factory.mktemp("run") / "r"
    shutil.copytree(FIXTURE / "old-rope", run)
    meta = json.loads((run / "model.json").read_text())
    _set(meta, field, value)
    (run / "model.json").write_text(json.dumps(meta, allow_nan=True))
    try:
        meta = read_meta(run)
        model, loaded = load_run(run)
    except PosxError:
        return
    # accepted: sizes that make sense, a record that writes back as strict JSON (no NaN or inf
    # anywhere), the run's own weights, and finite positions (buffers)
    assert loaded.train_context >= 1 and meta.model.vocab_size >= 1, (field, value)
    assert math.isfinite(loaded.rope.factor) and math.isfinite(loaded.rope.attention_factor or 1.0), (field, value)
    json.dumps(loaded.to_dict(), allow_nan=False)
    reference = trained_weights()
    for name, param in model.named_parameters():
        assert torch.equal(param, reference[name]), (field, value, name)
    for name, buffer in model.named_buffers():
        assert not buffer.is_floating_point() or torch.isfinite(buffer).all(), (field, value, name)


CHECKPOINT_FIELDS = [
    "val_loss",
    "data_sha256",
    "rope",
    "rope.method",
    "rope.factor",
    "rope.inv_freq",
    "extended_from",
    "extended_from.factor",
    "extended_from.train_context",
    "tokenizer_sha256",
]


@pytest.mark.parametrize("field", CHECKPOINT_FIELDS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE)
def test_a_damaged_checkpoint_state_reads_or_is_refused_with_a_user_error(tmp_path_factory, field, value):
    run = tmp_path_factory.mktemp("ckpt") / "r"
    shutil.copytree(FIXTURE / "old-rope-pi-partial", run)
    path = run / "checkpoint" / "step-00000004" / "state.json"
    state = json.loads(path.read_text())
    _set(state["extra"], field, value)
    path.write_text(json.dumps(state, allow_nan=True))
    try:
        extras = saved_extras(run)
    except PosxError:
        return
    # accepted: typed extras with a known method and finite numbers, that a resumed run writes
    # again as strict JSON and that then read back as themselves
    assert isinstance(extras, TrainExtras), (field, value)
    assert extras.rope.method in rope.METHODS and math.isfinite(extras.rope.factor), (field, value)
    assert extras.data_sha256 is None or isinstance(extras.data_sha256, str), (field, value)
    again = TrainExtras.from_dict(json.loads(json.dumps(extras.to_dict(), allow_nan=False)), str(path))
    assert again.to_dict() == extras.to_dict(), (field, value)
