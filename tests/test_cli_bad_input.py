"""Hostile and damaged input, in process through the real CLI (Typer's runner): every case is
refused with exit status 2 and one line naming what is wrong, no traceback, and nothing in
the working directory changed (the token store aside). The catalogue is one table; the
run-directory cases start from a copy of a real tiny run (tests/fixtures/premove)."""

from __future__ import annotations

import json
import shutil
import typing
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posx.cli import app
from posx.schema.config import Config

pytestmark = pytest.mark.slow  # ~150 cases; each composes a config or loads a run

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "premove"


def float_keys(node=Config, prefix: str = "") -> list[tuple[str, bool]]:
    """(dotted key, is a list) of every float field of the schema."""
    out = []
    hints = typing.get_type_hints(node)
    for f in fields(node):
        kind, key = hints[f.name], f"{prefix}{f.name}"
        if is_dataclass(kind):
            out += float_keys(kind, key + ".")
            continue
        base = kind
        if typing.get_origin(kind) is typing.Union:  # Optional[X] -> X
            base = next(a for a in typing.get_args(kind) if a is not type(None))
        if base is float:
            out.append((key, False))
        elif typing.get_origin(base) is list and typing.get_args(base) == (float,):
            out.append((key, True))
    return out


NONFINITE = [
    (["train", f"{key}=[{v}]" if is_list else f"{key}={v}"], "must be a finite number")
    for key, is_list in float_keys()
    for v in ("nan", "inf", "-inf")
]

RANGE = [
    (["train", "threads=100000"], "threads=100000 is more than posx starts"),
    (["eval-extrapolate", "base", "threads=100000"], "threads=100000 is more than posx starts"),
    (["train", "model.n_layer=0"], "model.n_layer must be positive"),
    (["train", "model.n_head=-2"], "model.n_head must be positive"),
    (["train", "model.d_model=0"], "model.d_model must be positive"),
    (["train", "model.mlp_ratio=0"], "model.mlp_ratio must be positive"),
    (["train", "model.dropout=1"], "model.dropout=1.0 must be in [0, 1)"),
    (["train", "model.dropout=-0.1"], "model.dropout=-0.1 must be in [0, 1)"),
    (["train", "pos.base=1"], "pos.base=1.0 must be greater than 1"),
    (["train", "pos.max_positions=0"], "pos.max_positions must be positive"),
    (["train", "train.batch_size=0"], "train.batch_size must be positive"),
    (["train", "train.eval_every=0"], "train.eval_every must be positive"),
    (["train", "train.eval_batches=0"], "train.eval_batches must be positive"),
    (["train", "train.warmup_steps=-1"], "train.warmup_steps=-1 must be 0 or more"),
    (["train", "train.weight_decay=-1"], "train.weight_decay=-1.0 must be 0 or more"),
    (["train", "train.grad_clip=-1"], "train.grad_clip=-1.0 must be 0"),
    (["train", "train.min_lr_ratio=2"], "train.min_lr_ratio=2.0 must be in [0.0, 1.0]"),
    (["train", "train.beta1=1"], "train.beta1=1.0 must be in [0.0, 1.0)"),
    (["train", "train.beta2=-0.5"], "train.beta2=-0.5 must be in [0.0, 1.0)"),
    (["train", "train.lr=-3"], "train.lr must be positive"),
    (["train", "eval.tokens=0"], "eval.tokens must be positive"),
    (["train", "eval.batch_tokens=-1"], "eval.batch_tokens must be positive"),
    (["train", "eval.scale=0.5"], "eval.scale=0.5 must be at least 1"),
    (["train", "eval.factors=[]"], "eval.factors is empty"),
    (["train", "eval.factors=[1.5e306]"], "eval.factors[0]=1.5e+306 must be at most 4096"),  # x T overflowed
    (["train", "eval.methods=[]"], "eval.methods is empty"),
    (["train", "eval.abf.new_base=1"], "eval.abf.new_base=1.0 must be greater than 1"),
    (["train", "eval.stride=0"], "eval.stride must be positive"),
    (["train", "eval.protocol=sliding", "eval.stride=4096"], "eval.stride=4096 exceeds the shortest evaluation length"),
    (["train", "eval.bucket_width=0"], "eval.bucket_width must be positive"),
    (["train", "eval.passkey.trials=0"], "eval.passkey.trials must be positive"),
    (["train", "eval.passkey.digits=0"], "eval.passkey.digits must be positive"),
    (["train", "eval.passkey.depth_buckets=0"], "eval.passkey.depth_buckets must be positive"),
    (["train", "eval.passkey.variants=[]"], "eval.passkey.variants is empty"),
    (["train", "eval.passkey.variants=[bogus]"], "eval.passkey.variants has unknown value 'bogus'"),
    (["train", "eval.tasks=[bogus]"], "eval.tasks has unknown value 'bogus'"),
    (["train", "eval.factors=[[1],2]"], "eval.factors[0]=[1] is a list inside a list"),  # OmegaConf lets it in
    (["train", "eval.methods=[[none],pi]"], "eval.methods[0]=['none'] is a list inside a list"),
    (["train", "eval.tasks=[{a: 1}]"], "eval.tasks[0]={'a': 1} is a mapping inside a list"),
    (["train", "logger.mode=[[1]]"], "logger.mode has unknown value '[1]'"),
    (["train", "eval.task_options.trials=2"], "eval.task_options.trials=2 is fewer than"),
    (["train", "eval.task_options.span=1"], "eval.task_options.span=1 must be at least 2"),
    (["train", "data.task_mix=1.5"], "data.task_mix=1.5 must be in [0.0, 1.0]"),
    (["train", "data.task_mix=0.5", "data.mix_tasks=[]"], "data.mix_tasks is empty"),
    (["train", "eval.yarn.beta_slow=40"], "beta_slow < beta_fast"),
    (["train", "eval.yarn.attention_factor=0"], "eval.yarn.attention_factor must be positive, got 0"),
    (["train", "eval.longrope.attention_factor=-1"], "eval.longrope.attention_factor must be positive"),
    (["train", "eval.llama3.high_freq_factor=0.5"], "low_freq_factor < high_freq_factor"),
    (["train", "eval.dynamic_ntk.factor=0.5"], "eval.dynamic_ntk.factor=0.5 must be at least 1"),
    (["train", "eval.longrope.long_factor=[1,-2]"], "eval.longrope.long_factor[1] must be positive, got -2"),
    (["train", "eval.methods=[longrope]", "eval.longrope.long_factor=[2,2]"], "long_factor has 2 entries"),
    (["train", "eval.absolute_beyond=wrap"], "eval.absolute_beyond=wrap is unknown"),
    (["train", "eval.protocol=strided"], "eval.protocol=strided is unknown"),
    (["train", "data.val_fraction=0.9"], "data.val_fraction must be in"),
    (["train", "data=text"], "data.source 'text' needs data.path"),
    (["train", "data.source=web"], "data.source=web is unknown"),
    (["train", "pos=rope", "model.d_model=36", "model.n_head=4"], "RoPE needs an even head_dim"),
    (["train", "pos=t5", "pos.num_buckets=1"], "pos.num_buckets=1 must be at least 2"),
    (["train", "pos.rotary_fraction=1.5"], "pos.rotary_fraction=1.5 must be in [0.0, 1.0]"),
    (["train", "pos=alibi", "pos.rotary_fraction=0.5"], "applies to rope and xpos, not pos=alibi"),
    (["train", "pos=xpos", "pos.xpos_scale_base=0"], "pos.xpos_scale_base must be positive"),
    (["train", "pos=fire", "pos.fire_hidden=0"], "pos.fire_hidden must be positive"),
    (["train", "model.nope_every=-1"], "model.nope_every=-1 must be 0"),
    (["train", "model.nope_every=1"], "(1: use pos=nope)"),
    (["train", "model.short_conv=-1"], "model.short_conv=-1 must be 0 or more (0: off)"),
    (["train", "pos=absolute", "model.nope_every=2"], "needs positions inside attention"),
    (["train", "model.attn_scale=cubic"], "model.attn_scale=cubic is unknown"),
    (["train", "model.attn_scale=logn", "model.attn_scale_length=1"], "model.attn_scale_length=1 must be at least 2"),
    (["train", "pos=alibi", "pos.randomized=true"], "pos.randomized applies to rope"),
    (["train", "pos.randomized=true", "pos.randomized_max=8"], "pos.randomized_max=8 must be at least"),
    (["train", "pos=absolute", "pos.randomized=true"], "needs pos.max_positions >= 1024"),
    (["train", "pos=alibi", "pos.pose_length=512"], "pos.pose_length=512 needs pos= one of rope"),
    (["train", "pos.pose_length=8"], "and at least train.context_length=128"),
    (["train", "name=."], "must be a plain directory name"),
    (["train", "name=a/b"], "must be a plain directory name"),
    (["train", "seed=abc"], "seed"),
    (["train", "model.n_layer=2.5"], "n_layer"),
    (["train", "eval.factors=3"], "factors"),
    (["train", "eval.after_train=maybe"], "after_train"),
]

HYDRA = [
    (["train", "-m", "pos=rope,bogus"], "Could not find 'pos/bogus'"),
    (["train", "-m", "model.n_layrs=3"], "model.n_layrs"),
    (["train", "-m", "train.steps=1,x"], "train.steps"),
    (["train", "-m", "seed=0,1", "--cfg", "job"], "cannot go together"),
    (["train", "--experimental-rerun", "payload.pickle"], "--experimental-rerun loads a pickle"),
    (["train", "hydra/launcher=nonexistent"], "hydra/launcher"),
    (["extend", "base", "-m", "method=pi,yarn", "factor=2,x"], "factor"),
    (["extend", "base", "method=bogus"], "method=bogus is unknown"),
    # each job's parent, method and factor are checked before the first job trains
    (["extend", "base", "-m", "method=pi,interpolate", "factor=2"], "interpolate is for learned-absolute tables"),
    (["extend", "-m", "parent=base,nonexist", "method=pi", "factor=2"], "run 'nonexist' not found"),
    (["extend", "base", "method=pi", "factor=2e6"], "makes a context of 32,000,000 tokens"),
    (["extend", "base", "method=pi", "factor=1e5"], "the training split (factor=100000 x the parent's T: 1600000)"),
    # a sweep of no jobs launched nothing and exited 0; name= in a sweep was recorded but used by none
    (["train", "-m", "seed=range(0,0)"], "the sweep seed=range(0,0) gives no values"),
    (["extend", "base", "-m", "method=pi,ntk", "factor=2", "name=foo"], "name= names a single run"),
    (["train", "experiment=quick", "-m", "seed=0,1"], "seed=0,1 (overrides go together, after the flags"),
    # Hydra would make the directory, empty: posx puts a run under results_dir
    (["train", "hydra.run.dir=elsewhere"], "posx does not put a run in hydra.run.dir"),
    (["extend", "base", "method=pi", "factor=2", "hydra.run.dir=elsewhere"], "set results_dir=DIR and name=NAME"),
    (["train", "~seed"], "so a key cannot be deleted; give it a value instead (seed=VALUE"),
    (["runs", "runs", "--csv", ""], "--csv needs a file name (or - for stdout)"),
    (["compare", "runs/old-rope", "runs/old-rope-yarn", "--csv", ""], "--csv needs a file name"),
    # a sweep's value, or a stray word, given to a command that runs once
    (
        ["eval-extrapolate", "base", "eval.tokens=1,2"],
        "posx eval-extrapolate takes one value per key, not 'eval.tokens=1,2'",
    ),
    (["eval-extrapolate", "base", "eval.methods=choice(none,pi)"], "takes one value per key"),
    (["data", "prepare", "data.tokenizer=byte,bpe"], "posx data prepare takes one value per key"),
    (["eval-extrapolate", "base", "base"], "'base' is not a key=value override; posx eval-extrapolate takes one RUN"),
    (["data", "prepare", "bpe"], "'bpe' is not a key=value override; posx data prepare takes key=value overrides only"),
    (["extend", "base", "factor=0.5"], "factor=0.5 must be at least 1"),
    (["extend", "base", "factor=inf"], "must be a finite number"),
    (["extend", "base", "extend.steps=0"], "extend.steps must be positive"),
    (["extend", "base", "extend.min_lr_ratio=0"], "extend.min_lr_ratio=0.0 must be in (0, 1]"),
    (["extend", "base", "eval.abf.new_base=1"], "eval.abf.new_base=1.0 must be greater than 1"),
    (["extend", "base", "model.n_layer=3"], "keeps its parent's model"),
    (["extend", "base", "model.n_head=3"], "keeps its parent's model"),  # not the default model's sizes
    (["extend", "base", "train.context_length=32"], "an extension sets train.context_length from factor"),
    (["extend", "base", "train.steps=5"], "an extension sets train.steps from extend.steps; set extend.steps="),
    (["eval-extrapolate", "base", "model.n_head=3"], "model.n_head does not apply to evaluating a run"),
    (["extend", "runs/old-abs", "method=yarn"], "extend only with method=interpolate"),
    (["extend", "runs/old-rope", "method=interpolate"], "interpolate is for learned-absolute tables"),
    (["extend", "runs/old-rope-yarn", "method=pi"], "is itself an extension"),
    (["train", "--resume", "runs/old-rope", "+foo=1"], "a key cannot be added"),
    (["train", "--resume", "runs/old-rope", "train.steps=99"], "would change the resumed run"),
    (["train", "--resume", "runs/old-rope", "-m"], "key=value overrides only"),
    # a directory of runs (here the fixture's five) where one run is meant
    (["train", "--resume", "runs"], "runs is a directory of 5 run(s), not a run; name one of them, e.g. runs/old-abs"),
    (["eval-extrapolate", "runs", "device=cpu"], "runs is a directory of 5 run(s), not a run"),
    (["extend", "runs", "method=pi", "factor=2"], "runs is a directory of 5 run(s), not a run"),
    (["compare", "runs/old-rope", "runs"], "runs is a directory of 5 run(s), not a run"),
    (["export", "runs", "--out", "hf"], "runs is a directory of 5 run(s), not a run"),
    (["eval-extrapolate", "results"], "results is a results directory with 1 run(s), not a run; name one of them"),
    # a run stopped before it finished training (a checkpoint at step 4, no model.json)
    (
        ["eval-extrapolate", "runs/old-rope-pi-partial", "device=cpu"],
        "runs/old-rope-pi-partial has not finished training (its last checkpoint is at step 4); finish it with "
        "`posx train --resume runs/old-rope-pi-partial`",
    ),
    (["export", "runs/old-rope-pi-partial", "--out", "hf"], "has not finished training"),
]

FREQUENCIES = [
    (["frequencies", "--latest"], "posx frequencies does not take --latest"),
    (["frequencies", "runs/old-rope", "-m", "eval.yarn.beta=2"], "posx frequencies does not take -m"),
    (["frequencies", "--head-dim", "0"], "--head-dim 0 must be an even number"),
    (["frequencies", "--head-dim", "7"], "--head-dim 7 must be an even number"),
    (["frequencies", "--head-dim", "100000"], "--head-dim 100000 must be an even number"),
    (["frequencies", "--context", "0"], "--context 0 must be a number of tokens"),
    (["frequencies", "--factor", "nan"], "--factor nan must be a finite number"),
    (["frequencies", "--factor", "inf"], "--factor inf must be a finite number"),
    (["frequencies", "--factor", "0.5"], "--factor 0.5 must be a finite number"),
    (["frequencies", "--base", "1"], "--base 1.0 must be a finite number greater than 1"),
    (["frequencies", "--base", "nan"], "--base nan must be a finite number greater than 1"),
    (["frequencies", "--methods", ""], "--methods is empty"),
    (["frequencies", "--methods", "bogus"], "unknown method 'bogus'"),
    (["frequencies", "--out", "plot.txt"], "must name a .png file"),
    (["frequencies", "--out", "runs"], "must name a .png file"),
    (["frequencies", "eval.yarn.beta_fast=nan"], "must be a finite number"),
]


def _meta(run: Path) -> dict:
    return json.loads((run / "model.json").read_text())


def _set_meta(run: Path, edit) -> None:
    meta = _meta(run)
    edit(meta)
    (run / "model.json").write_text(json.dumps(meta))


def _model(**changes):
    return lambda run: _set_meta(run, lambda m: m["model"].update(changes))


# A damage done to a copy of a finished tiny run (runs/old-rope, or the extension runs/old-rope-yarn).
DAMAGE = {
    "meta_list": lambda run: (run / "model.json").write_text("[1, 2]"),
    "meta_string": lambda run: (run / "model.json").write_text('"posx"'),
    "meta_no_format": lambda run: _set_meta(run, lambda m: m.pop("format")),
    "meta_model_list": lambda run: _set_meta(run, lambda m: m.update(model=[1])),
    "meta_model_missing": lambda run: _set_meta(run, lambda m: m.pop("model")),
    "meta_layers_huge": _model(n_layer=10**9),
    "meta_width_huge": _model(d_model=10**12),
    "meta_vocab_huge": _model(vocab_size=2**40),
    "meta_layers_zero": _model(n_layer=0),
    "meta_layers_string": _model(n_layer="4"),
    "meta_layers_float": _model(n_layer=1.5),
    "meta_layers_bool": _model(n_layer=True),
    "meta_heads_indivisible": _model(n_head=3),
    "meta_dropout_nan": _model(dropout=float("nan")),
    "meta_base_one": _model(rope_base=1.0),
    "meta_pos_unknown": _model(pos="bogus"),
    "meta_rotary_fraction": _model(rotary_fraction=2.0),
    "meta_attn_scale_unknown": _model(attn_scale="cubic"),
    "meta_unknown_key": _model(secret=1),
    "meta_context_string": lambda run: _set_meta(run, lambda m: m.update(train_context="x")),
    "meta_data_list": lambda run: _set_meta(run, lambda m: m.update(data=[1])),
    "meta_rope_list": lambda run: _set_meta(run, lambda m: m.update(rope=[1])),
    "meta_rope_no_method": lambda run: _set_meta(run, lambda m: m.update(rope={"factor": 2})),
    "meta_rope_unknown_method": lambda run: _set_meta(run, lambda m: m.update(rope={"method": "bogus"})),
    "meta_rope_bad_params": lambda run: _set_meta(
        run, lambda m: m.update(rope={"method": "yarn", "factor": 2.0, "params": {"beta_slow": 99}})
    ),
    "meta_inv_freq_short": lambda run: _set_meta(run, lambda m: m.update(rope={"method": "pi", "inv_freq": [1.0]})),
    "meta_inv_freq_text": lambda run: _set_meta(run, lambda m: m.update(rope={"method": "pi", "inv_freq": ["a"]})),
    "meta_lineage_list": lambda run: _set_meta(run, lambda m: m.update(extended_from=[1])),
    "meta_lineage_partial": lambda run: _set_meta(run, lambda m: m.update(extended_from={"parent": "x"})),
    "weights_empty": lambda run: (run / "model.safetensors").write_bytes(b""),
    "weights_garbage": lambda run: (run / "model.safetensors").write_bytes(b"\xff" * 64),
    "weights_missing": lambda run: (run / "model.safetensors").unlink(),
    "weights_dir": lambda run: ((run / "model.safetensors").unlink(), (run / "model.safetensors").mkdir()),
}
DAMAGE_NEEDLE = {
    "meta_list": "is not posx run metadata",
    "meta_string": "is not posx run metadata",
    "meta_no_format": "is not posx run metadata",
    "meta_model_list": "not a mapping",
    "meta_model_missing": "is incomplete or corrupt",
    "meta_layers_huge": "n_layer=1000000000 must be at most 1024",
    "meta_width_huge": "d_model=1000000000000 must be at most 65536",
    "meta_vocab_huge": "vocab_size=",
    "meta_layers_zero": "n_layer must be positive, got 0",
    "meta_layers_string": "n_layer='4' is not a valid int",
    "meta_layers_float": "n_layer=1.5 is not a valid int",
    "meta_layers_bool": "n_layer=True is not a valid int",
    "meta_heads_indivisible": "model.d_model=16 is not divisible by model.n_head=3",
    "meta_dropout_nan": "dropout=nan must be a finite number",
    "meta_base_one": "rope_base=1.0 must be greater than 1",
    "meta_pos_unknown": "pos=bogus is unknown; choose one of",
    "meta_rotary_fraction": "rotary_fraction=2.0 must be in [0.0, 1.0]",
    "meta_attn_scale_unknown": "attn_scale=cubic is unknown; choose one of",
    "meta_unknown_key": "unknown keys ['secret']",
    "meta_context_string": "is incomplete or corrupt",
    "meta_data_list": "is incomplete or corrupt",
    "meta_rope_list": "model.json is incomplete or corrupt: rope=[1] is not a mapping",
    "meta_rope_no_method": "model.json is incomplete or corrupt: rope.method is missing",
    "meta_rope_unknown_method": "runs/dmg/model.json is incomplete or corrupt: rope.method=bogus is unknown",
    "meta_rope_bad_params": "beta_slow < beta_fast",
    "meta_inv_freq_short": "holds 1 frequencies",
    "meta_inv_freq_text": "rope.inv_freq[0]='a' is not a valid float",
    "meta_lineage_list": "extended_from=[1] is not a mapping",
    "meta_lineage_partial": "extended_from.method is missing",
    "weights_empty": "is corrupt: its checksum differs",
    "weights_garbage": "is corrupt: its checksum differs",
    "weights_missing": "holds no weights",
    "weights_dir": "model.safetensors",
}
RUNS = [(["eval-extrapolate", "runs/dmg", "device=cpu"], DAMAGE_NEEDLE[name], name) for name in DAMAGE]

CONFIG_DAMAGE = {
    "config_interpolation": lambda run: (run / "config.yaml").write_text("seed: ${oc.env:HOME}\n"),
    "config_list": lambda run: (run / "config.yaml").write_text("- 1\n- 2\n"),
    "config_not_yaml": lambda run: (run / "config.yaml").write_text("seed: [unclosed\n"),
    "config_python_tag": lambda run: (run / "config.yaml").write_text(
        "seed: !!python/object/apply:os.system ['true']\n"
    ),
    "config_wrong_type": lambda run: (run / "config.yaml").write_text("train:\n  steps: many\n"),
    "checkpoint_state_garbage": lambda run: (run / "checkpoint" / "step-00000004" / "state.json").write_text("{"),
    "checkpoint_latest_list": lambda run: (run / "checkpoint" / "latest.json").write_text("[1]"),
    "checkpoint_extra_list": lambda run: _edit_state(run, lambda s: s.update(extra=[1])),
    "checkpoint_rope_string": lambda run: _edit_state(run, lambda s: s["extra"].update(rope="pi")),
}
CONFIG_NEEDLE = {
    "config_interpolation": "contains the interpolation",
    "config_list": "is damaged (it holds a list, not a config mapping); restore it from a copy of the run",
    "config_not_yaml": "config.yaml is damaged (ParserError: not the YAML posx wrote",
    "config_python_tag": "config.yaml is damaged (ConstructorError: not the YAML posx wrote",
    "config_wrong_type": "does not fit the config schema",
    "checkpoint_state_garbage": "is incomplete or corrupt",
    "checkpoint_latest_list": "latest.json is unreadable",
    "checkpoint_extra_list": "is incomplete or corrupt: extra is a list, not a mapping",
    "checkpoint_rope_string": "extra.rope='pi' is not a mapping",
}


def _edit_state(run: Path, edit) -> None:
    path = run / "checkpoint" / "step-00000004" / "state.json"
    state = json.loads(path.read_text())
    edit(state)
    path.write_text(json.dumps(state))


RESUMES = [(["train", "--resume", "runs/ckpt", "device=cpu"], CONFIG_NEEDLE[name], name) for name in CONFIG_DAMAGE]

REPORTS = [
    (["report", "runs/tab"], "lacks the column(s) train_context, eval_context, method, ppl, status", "table_no_ppl"),
    (["report", "runs/tab"], "not a number in column ppl", "table_text_ppl"),
    (["report", "runs/tab"], "cannot be read as CSV", "table_empty"),
    (["report", "runs/tab"], "not a number in column factor", "table_text_factor"),
    (["report", "runs/tab"], "tab/extrapolation.csv is damaged: row 1 has 5 cells where its header has", "table_cut"),
    (["report", "runs/tab"], "tab/extrapolation.csv is damaged: row 1 has no method", "table_no_method"),
    (["report", "runs/tab"], "extrapolation.csv is damaged: its last line ends without a line", "table_cut_header"),
    (["report", "runs/tab"], "positions.csv is damaged: its last line ends without a line", "positions_cut_in_cell"),
    (["compare", "runs/old-rope", "runs/tab"], "ends without a line break (was the file cut", "table_cut_header"),
    (["compare", "runs/old-rope", "runs/tab"], "ends without a line break (was the file cut", "table_cut_in_cell"),
    (["compare", "runs/old-rope", "runs/tab"], "runs/tab/extrapolation.csv is damaged: row 1 has 5 cells", "table_cut"),
    (
        ["compare", "runs/tab", "runs/tab"],
        "evaluate the run again: posx eval-extrapolate runs/tab --force",
        "table_cut",
    ),
    (
        ["compare", "runs/old-rope", "runs/tab"],
        "runs/tab/extrapolation.csv is damaged: row 1 has no method",
        "table_no_method",
    ),
    (["compare", "runs/old-rope", "runs/tab"], "is damaged: row 1 has a value that is not a number", "table_text_ppl"),
    (["report", "runs/old-rope", "--out", "runs/old-rope-yarn"], "already exists and is not empty", None),
    (["report", "runs/old-rope", "--evaluations", "some"], "is not one of current, all", None),
    (["report", "nowhere"], "nowhere does not exist", None),
    (["report", "afile"], "afile is not a directory", None),
    (["runs", "nowhere"], "nowhere does not exist", None),
    (["runs", "afile"], "afile is not a directory", None),
    (["report", "runs/old-abs"], "has extrapolation.csv", None),
    (["report", "runs/old-rope", "--factor", "nan"], "--factor nan must be a finite number above 0", None),
    (["report", "runs/old-rope", "--factor", "0"], "--factor 0 must be a finite number above 0", None),
    (["report", "runs/old-rope", "--factor", "-1"], "--factor -1 must be a finite number above 0", None),
    (["report", "runs/old-rope", "--factor", "3"], "--factor 3 is not a factor the runs were evaluated at", None),
    (["report", "runs/old-rope", "--top", "0"], "--top 0: give how many groups to draw, a whole number", None),
    (["report", "runs/old-rope", "--top", "many"], "--top many: give how many groups to draw", None),
]
TABLE_DAMAGE = {
    "table_no_ppl": lambda t: t.write_text("run,pos,factor\nr,rope,1\n"),
    "table_text_ppl": lambda t: _replace_column(t, "ppl", "high"),
    "table_empty": lambda t: t.write_text(""),
    "table_text_factor": lambda t: _replace_column(t, "factor", "two"),
    "table_cut": lambda t: t.write_text(t.read_text()[: t.read_text().index("\n") + 21]),  # mid-row, as a full disk
    "table_no_method": lambda t: _replace_column(t, "method", ""),
    # cut where no row is short: inside the header (read as a table of no rows), inside the last cell
    "table_cut_header": lambda t: t.write_text(t.read_text()[:40]),
    "table_cut_in_cell": lambda t: t.write_text(t.read_text()[:-3]),
    "positions_cut_in_cell": lambda t: (t.parent / "positions.csv").write_text(
        (t.parent / "positions.csv").read_text()[:-3]
    ),
}


def _replace_column(table: Path, column: str, value: str) -> None:
    lines = table.read_text().splitlines()
    index = lines[0].split(",").index(column)
    cells = lines[1].split(",")
    cells[index] = value
    table.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")


OS_ERRORS = [
    (["train", "results_dir=afile", "data=text", "data.path=corpus"], "cannot use afile/runs: Not a directory", None),
    (["train", "name=" + "n" * 300, "data=text", "data.path=corpus"], "File name too long", None),
    (["frequencies", "--out", "afile/x.png"], "afile exists and is not a directory", None),
    (["report", "runs/old-rope", "--out", "afile/rep"], "afile exists and is not a directory", None),
]

CASES = [(*c, None) for c in NONFINITE + RANGE + HYDRA + FREQUENCIES] + RUNS + RESUMES + REPORTS + OS_ERRORS


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
        if not p.is_dir() and "cache" not in p.parts
    }


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    (tmp_path / "afile").write_text("a file, not a directory\n")
    shutil.copytree(tmp_path / "runs" / "old-rope", tmp_path / "results" / "runs" / "base")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _prepare(work: Path, setup: str | None) -> None:
    if setup in DAMAGE:
        shutil.copytree(work / "runs" / "old-rope", work / "runs" / "dmg")
        DAMAGE[setup](work / "runs" / "dmg")
    elif setup in CONFIG_DAMAGE:
        shutil.copytree(work / "runs" / "old-rope-pi-partial", work / "runs" / "ckpt")
        CONFIG_DAMAGE[setup](work / "runs" / "ckpt")
    elif setup in TABLE_DAMAGE:
        shutil.copytree(work / "runs" / "old-rope", work / "runs" / "tab")
        TABLE_DAMAGE[setup](work / "runs" / "tab" / "extrapolation.csv")


@pytest.mark.parametrize(
    "args, needle, setup", CASES, ids=[" ".join(a)[:80] + (f" [{s}]" if s else "") for a, _, s in CASES]
)
def test_hostile_input_is_one_line_exit_2_and_changes_nothing(work, args, needle, setup):
    _prepare(work, setup)
    before = _snapshot(work)
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stdout[-500:], result.stderr[-2000:], result.exception)
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    after = _snapshot(work)
    changed = sorted(f for f in set(before) | set(after) if before.get(f) != after.get(f))
    assert not changed, changed
    assert not (work / "elsewhere").exists()
