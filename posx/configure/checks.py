"""The checks of a composed config before any work, each one line naming the key: the schema's rules
(``posx.core.validate``), what only the module owning a name can tell, and for a new run no setting
that cannot act (a value the chosen model never reads), while older runs keep resuming."""

from __future__ import annotations

import dataclasses
import os

from omegaconf import DictConfig, OmegaConf

from posx import rope
from posx.configure.taskchecks import check_mix
from posx.core.device import check_compile, check_device
from posx.core.errors import PosxError
from posx.core.trackers import check_tracker
from posx.core.validate import validate
from posx.eval.scoring import eval_lengths, eval_rows
from posx.model.custom import check_params as check_encoding_params
from posx.model.encodings import check_t5_buckets
from posx.model.rescale import check_methods, param_key, user_params
from posx.schema.config import POS_READ_BY, ROTARY, Config, DataConfig, ModelConfig, PosConfig
from posx.schema.tasks import TaskOptions

# threads: at most THREADS_PER_CORE per core, never capped below MIN_MAX_THREADS (a small login node
# composes sweeps for bigger nodes); tens of thousands would exhaust memory far from the setting.
THREADS_PER_CORE = 4
MIN_MAX_THREADS = 64
_POS_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PosConfig)}
_MIX_DEFAULTS = {  # the data.* keys only a task mix reads (data.task_mix > 0)
    **{f"task_options.{f.name}": f.default for f in dataclasses.fields(TaskOptions)},
    **{f.name: f.default for f in dataclasses.fields(DataConfig) if f.name in ("task_pool", "mix_loss")},
    "mix_tasks": DataConfig().mix_tasks,
}
_ATTN_SCALE_LENGTH = {f.name: f.default for f in dataclasses.fields(ModelConfig)}["attn_scale_length"]


def max_threads() -> int:
    return max(MIN_MAX_THREADS, THREADS_PER_CORE * (os.cpu_count() or 1))


def check_config(cfg: DictConfig | Config) -> None:
    """Reject well-typed but meaningless values: the schema's rules, then the owning modules'."""
    typed = cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)
    container = OmegaConf.to_container(typed, resolve=True)
    container.pop("hydra", None)
    schema = OmegaConf.get_type(typed)
    validate(container, schema if dataclasses.is_dataclass(schema) else Config)
    check_device(cfg.device)
    check_tracker(cfg.logger)
    check_compile(cfg.train.compile)
    if cfg.threads is not None and cfg.threads > max_threads():
        raise PosxError(
            f"threads={cfg.threads} is more than posx starts on this machine's {os.cpu_count()} cores "
            f"(at most {max_threads()}); set threads to at most {max_threads()} (the number of cores is best), "
            "or null for torch's default"
        )
    check_t5_buckets(cfg.pos.num_buckets, cfg.pos.max_distance)
    check_mix(cfg.data, cfg.train.context_length)
    check_user_code(cfg)


def check_user_code(cfg) -> None:
    """Code from outside posx (``pos=custom``, methods of ``eval.methods``) and its parameters, checked."""
    if cfg.pos.name == "custom":
        check_encoding_params(cfg.pos.impl, _plain(cfg.pos.params))
    ev = cfg.eval
    outside = [m for m in ev.methods if m not in rope.METHODS]
    for method in outside:
        params, kind, at = user_params(method, ev), rope.params_of(method), f"eval.params.{param_key(method)}"
        accepted = rope.method_params(method)
        unknown = sorted(str(k) for k in params if k not in accepted)
        if unknown:
            takes = ", ".join(accepted) or "none"
            raise PosxError(f"{at}.{unknown[0]} is not a parameter of {method}; accepted: {takes}")
        if kind is not None:
            validate(params, kind, at=f"{at}.")
    extra = sorted(set(_plain(ev.params) or {}) - {param_key(m) for m in outside})
    if extra:
        raise PosxError(
            f"eval.params.{extra[0]} names no method of eval.methods from outside posx; "
            "its key is the name after the ':' of one of them"
        )


def _plain(node):
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def check_train_config(cfg) -> None:
    """``check_config``, no setting that cannot act, and what this run's evaluation needs of its
    model: a sliding stride within T, every method's frequencies computable at every factor."""
    check_config(cfg)
    refuse_inert(cfg)
    T = cfg.train.context_length
    lengths = eval_lengths(cfg.eval.factors, T)
    shortest = min(lengths)
    if cfg.eval.protocol == "sliding" and cfg.eval.stride is not None and cfg.eval.stride > shortest:
        raise PosxError(
            f"eval.stride={cfg.eval.stride} exceeds the shortest evaluation length {shortest} "
            f"(train.context_length={T}); a sliding window scores at most its own length"
        )
    if cfg.pos.name in ROTARY:
        rows = eval_rows(cfg.eval, T)  # exactly the rows the evaluation computes
        check_methods(cfg.eval, cfg.eval.methods, cfg.model.d_model // cfg.model.n_head, cfg.pos.base, T, rows)


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
