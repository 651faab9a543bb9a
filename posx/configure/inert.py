"""Settings that cannot act (a value the chosen model never reads, a ``model.nope_every`` that
changes no layer): a new run refuses one in one line; runs trained before keep resuming."""

from __future__ import annotations

import dataclasses

from posx.core.errors import PosxError
from posx.schema.config import POS_READ_BY, DataConfig, ModelConfig, PosConfig
from posx.schema.tasks import TaskOptions

_POS_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PosConfig)}
_MIX_DEFAULTS = {  # the data.* keys only a task mix reads (data.task_mix > 0)
    **{f"task_options.{f.name}": f.default for f in dataclasses.fields(TaskOptions)},
    **{f.name: f.default for f in dataclasses.fields(DataConfig) if f.name in ("task_pool", "mix_loss")},
    "mix_tasks": DataConfig().mix_tasks,
}
_ATTN_SCALE_LENGTH = {f.name: f.default for f in dataclasses.fields(ModelConfig)}["attn_scale_length"]


def refuse_unmixed(data) -> None:
    if data.task_mix != 0:
        return
    for key, default in _MIX_DEFAULTS.items():
        group, _, name = key.rpartition(".")
        value = (data[group] if group else data)[name]
        shown = f"[{','.join(str(v) for v in value)}]" if key == "mix_tasks" else value
        if (list(value) if key == "mix_tasks" else value) != default:
            raise PosxError(
                f"data.{key}={shown} does nothing with data.task_mix=0: only a task mix reads it; remove it, "
                "or set data.task_mix above 0 (the share of training sequences that are tasks)"
            )


def refuse_inert(cfg) -> None:
    """One ``PosxError`` for the first setting of ``cfg`` that cannot act."""
    refuse_unmixed(cfg.data)
    p, m = cfg.pos, cfg.model
    for key, readers in POS_READ_BY.items():
        if p.name not in readers and p[key] != _POS_DEFAULTS[key]:
            raise PosxError(
                f"pos.{key}={p[key]} does nothing with pos={p.name}: only pos={' or pos='.join(readers)} "
                f"reads it; remove it, or choose pos={readers[0]}"
            )
    if m.nope_every > m.n_layer:
        raise PosxError(
            f"model.nope_every={m.nope_every} is more than model.n_layer={m.n_layer}, so no layer would attend "
            f"without positions; set model.nope_every to at most {m.n_layer} (its last layer), or 0 for none"
        )
    if m.nope_every and p.name == "nope":
        raise PosxError(
            f"model.nope_every={m.nope_every} does nothing with pos=nope: no layer has positions to drop; "
            "set model.nope_every=0, or choose an encoding that attends with positions"
        )
    if m.attn_scale == "none" and m.attn_scale_length != _ATTN_SCALE_LENGTH:
        raise PosxError(
            f"model.attn_scale_length={m.attn_scale_length} does nothing with model.attn_scale=none; "
            "remove it, or set model.attn_scale=logn or ssmax"
        )
    if not p.randomized and p.randomized_max != _POS_DEFAULTS["randomized_max"]:
        raise PosxError(
            f"pos.randomized_max={p.randomized_max} does nothing without pos.randomized=true; "
            "remove it, or set pos.randomized=true"
        )
