"""Context extension (PI, Chen et al. 2023; YaRN, Peng et al. 2023; ABF, Xiong et al. 2023; PoSE,
Zhu et al. 2024; docs/extending.md): ``prepare`` turns a ``posx extend`` config into the child's
config, start state and name, reading the parent only. The child records its frequencies as a
recipe and as the numbers, which ``load_run`` installs, so evaluation uses exactly what training
used. Dynamic methods are frozen at the new length, the only one they train at.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from posx.configure.applies import SET_BY_EXTEND, key_of
from posx.configure.checks import check_config
from posx.core import fieldcheck
from posx.core.errors import PosxError
from posx.model.rescale import method_args, trained_frequencies
from posx.model.roperecord import RopeRecord
from posx.model.spec import ModelSpec
from posx.runs.lineage import INTERPOLATE, check_method, extended_model, new_context
from posx.runs.paths import CONFIG, read_config, read_meta, resolve_run
from posx.runs.records import Lineage, RunMeta
from posx.runs.rundir import load_run
from posx.schema.config import TAKES_POSITIONS, ExtendRootConfig
from posx.train.state import FromParent


def rope_record(cfg: ExtendRootConfig, parent: RunMeta) -> RopeRecord:
    """The frequencies an extension of ``parent`` trains with (the recipe; checked here)."""
    T, method = parent.train_context, cfg.method
    L = new_context(T, cfg.factor)
    # Frozen at the length it trains at: dynamic methods see L = factor x T, always.
    factor, params = method_args(method, cfg.eval, float(cfg.factor), L)
    record = RopeRecord(method=method, factor=factor, params=params, original_context=T)
    trained_frequencies(record, parent.model.head_dim, parent.model.pos.base, T, "the extension")  # checks it
    return record


def child_config(
    cfg: ExtendRootConfig, parent_dir: Path, parent: RunMeta, child: ModelSpec, T1: int
) -> ExtendRootConfig:
    """The child's config: its model, the parent's corpus and the extend.* schedule filled in."""
    model = read_config(parent_dir).get("model") if (parent_dir / CONFIG).is_file() else None
    name = model.get("name") if isinstance(model, dict) else None
    e, t = cfg.extend, cfg.train
    tokens_per_step = t.batch_size * parent.train_context
    train = dataclasses.replace(
        t,
        batch_size=e.batch_size or max(1, tokens_per_step // T1),
        context_length=T1,
        steps=e.steps,
        lr=e.lr,
        warmup_steps=e.warmup_steps,
        min_lr_ratio=e.min_lr_ratio,
        eval_every=e.eval_every or t.eval_every,
    )
    return dataclasses.replace(
        cfg,
        model=dataclasses.replace(child.model, name=str(name) if name else "parent"),  # every key of the section
        pos=child.pos,
        data=dataclasses.replace(cfg.data, **parent.data_config),  # the parent's corpus and tokenizer
        train=train,
        parent=str(parent_dir),
    )


def pose_window(cfg: ExtendRootConfig, parent: RunMeta, T1: int) -> int:
    """The length the child trains at: T1, or with ``extend.pose`` the parent's T."""
    if not cfg.extend.pose:
        return T1
    if parent.model.pos.name not in TAKES_POSITIONS:
        raise PosxError(
            f"extend.pose needs an encoding that reads positions ({', '.join(TAKES_POSITIONS)}); "
            f"the parent has pos={parent.model.pos.name}"
        )
    return parent.train_context


def forbid_unused_overrides(overrides: list[str]) -> None:
    """Refuse overrides an extension would not use: the model and positions (the parent's) and the
    train.* keys it sets itself (``SET_BY_EXTEND``)."""
    for item in overrides:
        key = key_of(item)
        if key in ("model", "pos") or key.startswith(("model.", "pos.")):
            raise PosxError(
                f"{item}: an extension keeps its parent's model and positions (from its model.json); drop the override"
            )
        if key in SET_BY_EXTEND:
            raise PosxError(
                f"{item}: an extension sets {key} from {SET_BY_EXTEND[key]}; set {SET_BY_EXTEND[key]}= instead"
            )


@dataclass
class Extension:
    """What ``posx extend`` trains: from where, with which config, under which default name."""

    parent_dir: Path
    parent: RunMeta
    config: ExtendRootConfig  # the child's config (its config.yaml)
    start: FromParent
    name: str  # the run name when name= is not given


class Checked(NamedTuple):
    """An extension's parent and lengths, checked (``check``) before any weight is read."""

    parent_dir: Path
    parent: RunMeta
    T1: int  # the new context, factor x the parent's T
    window: int  # the length it trains at (T1, or the parent's T with PoSE)
    record: RopeRecord | None  # the frequencies' recipe (None: a learned table, interpolated)


def check(cfg: ExtendRootConfig, overrides: list[str]) -> Checked:
    """Everything refusable from the parent's model.json alone (a sweep checks every job first)."""
    check_config(cfg)
    forbid_unused_overrides(overrides)
    parent_dir = resolve_run(cfg.parent, cfg.results_dir)
    parent = read_meta(parent_dir)
    check_method(cfg.method, parent.model.pos.name, f"run {parent_dir}")
    if parent.extended_from:
        raise PosxError(
            f"{parent_dir} is itself an extension of {parent.extended_from.parent}; "
            "extend that run with the larger factor instead"
        )
    T1 = new_context(parent.train_context, cfg.factor)
    if T1 > fieldcheck.MAX_CONTEXT:
        raise PosxError(
            f"factor={cfg.factor:g} makes a context of {T1:,} tokens (factor x the parent's T={parent.train_context}), "
            f"past the {fieldcheck.MAX_CONTEXT:,} posx trains at; choose a smaller factor"
        )
    window = pose_window(cfg, parent, T1)
    return Checked(parent_dir, parent, T1, window, rope_record(cfg, parent) if cfg.method != INTERPOLATE else None)


def prepare(cfg: ExtendRootConfig, overrides: list[str]) -> Extension:
    """Check the extension, load the parent, extend it; nothing is written."""
    parent_dir, parent, T1, window, record = check(cfg, overrides)
    parent_model, _ = load_run(parent_dir, device="cpu")
    model = extended_model(parent_model, parent, cfg.method, float(cfg.factor), record, f"run {parent_dir}")
    if window != T1:  # PoSE: training ids cover the new length
        model.config = dataclasses.replace(model.config, pos=dataclasses.replace(model.config.pos, pose_length=T1))
    if record is not None:  # the numbers themselves, besides the recipe that gives them
        record.inv_freq = model.pos.trained_inv_freq.tolist()
        record.attention_factor = model.pos.trained_attention_factor
    lineage = Lineage(
        parent=parent_dir.name,
        parent_path=str(parent_dir.resolve()),
        method=cfg.method,
        factor=float(cfg.factor),
        steps=int(cfg.extend.steps),
        train_context=parent.train_context,
        parent_step=parent.step,
        parent_weights_sha256=parent.weights_sha256,
    )
    start = FromParent(model=model, rope=record or RopeRecord.identity(), lineage=lineage)
    config = child_config(cfg, parent_dir, parent, model.config, window)
    name = cfg.name or f"{parent_dir.name}-{cfg.method}-x{cfg.factor:g}" + ("-pose" if cfg.extend.pose else "")
    return Extension(parent_dir, parent, config, start, name)
