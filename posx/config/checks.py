"""Checks of config values that are well typed but meaningless (a negative step count, a
window longer than its length), each a one-line ``PosxError`` naming the key, before any work
starts.

A choice (an encoding, a method, a protocol, ...) is an Enum of the schema
(``posx.schema``), so composition refuses an unknown one; what is checked here is
checked by the module that owns it where there is one: the device by ``posx.core.device``,
the tracker's package by ``posx.core.trackers``, RoPE method parameters by ``posx.rope``
(``posx.model.rescale.check_params``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from posx.config.inert import refuse_inert
from posx.config.reference import keys
from posx.config.taskchecks import check_mix, check_options
from posx.core.device import check_compile, check_device
from posx.core.errors import PosxError
from posx.core.trackers import check_tracker
from posx.data.corpus import VOCAB_SIZE
from posx.eval.scoring import eval_lengths
from posx.model.config import GPTConfig
from posx.model.encodings import ROTARY, check_t5_buckets
from posx.model.randomized import TAKES_POSITIONS
from posx.model.rescale import check_methods, check_params
from posx.rope import METHODS
from posx.schema import Config, ExtendRootConfig

MAX_EVAL_FACTOR = 4096
# threads: at most THREADS_PER_CORE per core of this machine, and never fewer than MIN_MAX_THREADS
# (a small login node composes sweeps for bigger compute nodes). More threads than cores only
# contend for them; tens of thousands cannot all be started (their stacks exhaust memory) and
# fail far from the setting, as a broken package or a damaged token store.
THREADS_PER_CORE = 4
MIN_MAX_THREADS = 64


def max_threads() -> int:
    return max(MIN_MAX_THREADS, THREADS_PER_CORE * (os.cpu_count() or 1))


def _positive(value: Any, key: str) -> None:
    if value is None or value <= 0:
        raise PosxError(f"{key} must be positive, got {value}; set {key}=<a positive number>")


def _finite_and_flat(node, key: str = "") -> None:
    """Every float anywhere in the config is finite: NaN and inf are never a setting. And every
    list holds plain values: no schema list nests, though OmegaConf lets [[1],2] into one."""
    if isinstance(node, dict):
        for k, v in node.items():
            _finite_and_flat(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (list, dict)):
                kind = "list" if isinstance(v, list) else "mapping"
                raise PosxError(f"{key}[{i}]={v} is a {kind} inside a list; {key} takes plain values, e.g. {key}=[a,b]")
            _finite_and_flat(v, f"{key}[{i}]")
    elif isinstance(node, float) and not math.isfinite(node):
        raise PosxError(f"{key}={node} must be a finite number")


def _each_once(values, key: str) -> None:
    """A list setting names each value once: a repeat would score (or mix) the same thing twice
    and give the tables duplicate rows."""
    seen: set = set()
    for v in values:
        if v in seen:
            raise PosxError(f"{key} lists {v} twice; give each value once")
        seen.add(v)


def _in_range(value, low, high, key: str, closed_high: bool = False) -> None:
    ok = low <= value <= high if closed_high else low <= value < high
    if not ok:
        bound = "]" if closed_high else ")"
        raise PosxError(f"{key}={value} must be in [{low}, {high}{bound}")


def _groups_are_mappings(container: dict) -> None:
    """Each group of settings (``eval.longrope``, ``train``, ...) is still a mapping: an
    interpolation assigned to one (``eval.longrope='${oc.env:HOME}'``) resolves to a single value."""
    for key, _, _, hint in keys(ExtendRootConfig):
        node: Any = container
        for part in key.split("."):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if dataclasses.is_dataclass(hint) and not isinstance(node, dict):
            raise PosxError(f"{key}={node!r} must be a group of settings ({key}.<name>=<value>), not one value")


def check_config(cfg: DictConfig | Config) -> None:
    """Reject well-typed but meaningless values, with a one-line message naming the key."""
    container = OmegaConf.to_container(
        OmegaConf.structured(cfg) if not isinstance(cfg, DictConfig) else cfg, resolve=True
    )
    container.pop("hydra", None)
    _groups_are_mappings(container)
    _finite_and_flat(container)
    check_device(cfg.device)
    check_tracker(cfg.logger)
    _check_top(cfg)
    _check_model(cfg.model)
    _check_eval(cfg.eval)  # before pos: pos.randomized's default reach reads eval.factors
    _check_pos(cfg)
    _check_train(cfg.train)
    _check_scoring(cfg.eval)
    _check_tasks(cfg)
    _check_data(cfg)
    # the same bounds as a model.json read back: sizes posx can allocate
    GPTConfig.from_run_config(cfg, VOCAB_SIZE).validate("the model config (model.*, pos.*, train.context_length)")


def _check_top(cfg) -> None:
    """The top-level keys: seed, threads and name."""
    if not 0 <= cfg.seed < 2**63:  # torch.manual_seed takes 64 bits; posx adds small offsets to it
        raise PosxError(f"seed={cfg.seed} is out of range; use a seed from 0 to {2**63 - 1}")
    if cfg.threads is not None and cfg.threads < 1:
        raise PosxError(f"threads={cfg.threads} must be at least 1 (or null for torch's default)")
    if cfg.threads is not None and cfg.threads > max_threads():
        raise PosxError(
            f"threads={cfg.threads} is more than posx starts on this machine's {os.cpu_count()} cores "
            f"(at most {max_threads()}); set threads to at most {max_threads()} (the number of cores is best), "
            "or null for torch's default"
        )
    if cfg.name is not None and (not str(cfg.name).strip() or "/" in str(cfg.name) or str(cfg.name) in (".", "..")):
        raise PosxError(f"name={cfg.name!r} must be a plain directory name (no '/', not '.' or '..')")


def _check_model(m) -> None:
    """model.*: sizes, heads that divide d_model, dropout."""
    for key in ("n_layer", "n_head", "d_model", "mlp_ratio", "multiple_of"):
        _positive(m[key], f"model.{key}")
    if m.d_model % m.n_head:
        raise PosxError(f"model.d_model={m.d_model} is not divisible by model.n_head={m.n_head}")
    if not 0.0 <= m.dropout < 1.0:
        raise PosxError(f"model.dropout={m.dropout} must be in [0, 1)")


def _check_pos(cfg) -> None:
    """pos.*, against the model's head_dim and d_model it encodes (and ``_check_options``)."""
    p, d_model = cfg.pos, cfg.model.d_model
    head_dim = d_model // cfg.model.n_head
    if p.name in ROTARY and head_dim % 2:
        raise PosxError(f"RoPE needs an even head_dim, got d_model/n_head = {head_dim}")
    _check_options(cfg)
    if p.name == "sinusoidal" and d_model % 2:
        raise PosxError(f"sinusoidal positions need an even model.d_model, got {d_model}")
    check_t5_buckets(p.num_buckets, p.max_distance)
    if p.base <= 1.0:
        raise PosxError(f"pos.base={p.base} must be greater than 1")
    if p.max_positions is not None:
        _positive(p.max_positions, "pos.max_positions")


def _check_train(t) -> None:
    """train.*: sizes, the optimizer and schedule, checkpoints, compile mode."""
    check_compile(t.compile)
    for key in ("context_length", "steps", "batch_size", "lr", "eval_every", "eval_batches"):
        _positive(t[key], f"train.{key}")
    if t.weight_decay < 0:
        raise PosxError(f"train.weight_decay={t.weight_decay} must be 0 or more")
    if t.grad_clip < 0:
        raise PosxError(f"train.grad_clip={t.grad_clip} must be 0 (no clipping) or more")
    _in_range(t.min_lr_ratio, 0.0, 1.0, "train.min_lr_ratio", closed_high=True)
    _in_range(t.beta1, 0.0, 1.0, "train.beta1")
    _in_range(t.beta2, 0.0, 1.0, "train.beta2")
    if t.micro_batch_size is not None:
        _positive(t.micro_batch_size, "train.micro_batch_size")
    if t.checkpoint_every < 0:
        raise PosxError(f"train.checkpoint_every={t.checkpoint_every} must be 0 (only at the end) or more")
    if t.warmup_steps < 0:
        raise PosxError(f"train.warmup_steps={t.warmup_steps} must be 0 or more")


def _check_eval(ev) -> None:
    """eval.factors, eval.methods and their parameters, eval.scale and the token budgets."""
    if not ev.factors:
        raise PosxError("eval.factors is empty; give at least one factor, e.g. eval.factors=[1,2,4,8]")
    for factor in ev.factors:
        if not 1 <= factor <= MAX_EVAL_FACTOR:
            raise PosxError(
                f"eval.factors has {factor}; every factor must be at least 1 (and at most "
                f"{MAX_EVAL_FACTOR}: the evaluation allocates factor x T positions)"
            )
    if not ev.methods:
        raise PosxError("eval.methods is empty; give at least one, e.g. eval.methods=[none,pi]")
    for values, key in (
        (ev.factors, "eval.factors"),
        (ev.methods, "eval.methods"),
        (ev.tasks, "eval.tasks"),
        (ev.passkey.variants, "eval.passkey.variants"),
    ):
        _each_once(values, key)
    if ev.scale is not None and ev.scale < 1:
        raise PosxError(f"eval.scale={ev.scale} must be at least 1 (or null for L/T)")
    _positive(ev.tokens, "eval.tokens")
    _positive(ev.batch_tokens, "eval.batch_tokens")
    _positive(ev.abf_base, "eval.abf_base")
    check_params(ev, METHODS)  # every method's, as before: a bad value is wrong even if unused


def _check_fire_threshold(threshold, encoding: str, T: int) -> None:
    """pos.fire_threshold: positive, and for pos=fire at most T (past T no training query reaches
    it, so the normaliser psi(max(L, i)) never acts in training and every longer length feeds f
    inputs it never saw)."""
    if threshold is None:
        return
    _positive(threshold, "pos.fire_threshold")
    if encoding == "fire" and threshold > T:
        raise PosxError(
            f"pos.fire_threshold={threshold:g} is past T={T}: no training query reaches it, so FIRE's "
            f"normaliser never acts in training; set it at most {T}, or null for T/4 ({T / 4:g})"
        )


def _check_options(cfg) -> None:
    """pos.rotary_fraction, pos.xpos_scale_base, pos.fire_*, model.nope_every, short_conv, attn_scale_length."""
    p, m = cfg.pos, cfg.model
    _in_range(p.rotary_fraction, 0.0, 1.0, "pos.rotary_fraction", closed_high=True)
    if p.rotary_fraction != 1 and p.name not in ROTARY:
        raise PosxError(f"pos.rotary_fraction={p.rotary_fraction} applies to {' and '.join(ROTARY)}, not pos={p.name}")
    for key in ("xpos_scale_base", "fire_hidden"):
        _positive(p[key], f"pos.{key}")
    _check_fire_threshold(p.fire_threshold, p.name, cfg.train.context_length)
    if p.cope_npos is not None and p.cope_npos < 2:
        raise PosxError(f"pos.cope_npos={p.cope_npos} must be at least 2 (positions 0 .. npos - 1), or null for T + 1")
    if m.short_conv < 0:
        raise PosxError(f"model.short_conv={m.short_conv} must be 0 (off) or a kernel of at least 1 position")
    if m.nope_every < 0 or m.nope_every == 1:
        raise PosxError(f"model.nope_every={m.nope_every} must be 0 (no NoPE layers) or at least 2 (1: use pos=nope)")
    if m.nope_every and p.name in ("absolute", "sinusoidal"):
        raise PosxError(
            f"model.nope_every={m.nope_every} needs positions inside attention (rope, xpos, alibi, t5, fire, "
            f"kerple, cope); pos={p.name} adds them to the embeddings, which every layer sees"
        )
    if p.randomized and p.name not in TAKES_POSITIONS:
        raise PosxError(f"pos.randomized applies to {', '.join(TAKES_POSITIONS)}; pos={p.name} reads no positions")
    T = cfg.train.context_length
    limit = p.randomized_max if p.randomized_max is not None else round(max(cfg.eval.factors, default=1) * T)
    if p.randomized and limit < T:
        raise PosxError(f"pos.randomized_max={limit} must be at least train.context_length={T}")
    if p.randomized and p.name == "absolute" and (p.max_positions or T) < limit:
        raise PosxError(f"pos.randomized with pos=absolute needs pos.max_positions >= {limit} (pos.randomized_max)")
    if p.pose_length and (p.name not in TAKES_POSITIONS or p.randomized or p.pose_length < T):
        raise PosxError(
            f"pos.pose_length={p.pose_length} needs pos= one of {', '.join(TAKES_POSITIONS)}, no pos.randomized, "
            f"and at least train.context_length={T}"
        )
    if p.pose_length and p.name == "absolute" and (p.max_positions or T) < p.pose_length:
        raise PosxError(f"pos.pose_length with pos=absolute needs pos.max_positions >= {p.pose_length}")
    if m.attn_scale_length is not None and m.attn_scale_length < 2:
        raise PosxError(f"model.attn_scale_length={m.attn_scale_length} must be at least 2 (or null for T)")


def _check_data(cfg) -> None:
    """data.vocab_size (bpe) and eval.min_document_tokens."""
    if cfg.data.tokenizer == "bpe" and cfg.data.vocab_size < 257:
        raise PosxError(
            f"data.vocab_size={cfg.data.vocab_size} is smaller than the byte alphabet of a byte-level "
            "BPE (256 bytes + 1 end-of-document token); set data.vocab_size to at least 257"
        )
    if cfg.eval.min_document_tokens < 0:
        raise PosxError(f"eval.min_document_tokens={cfg.eval.min_document_tokens} must be 0 or more")


def check_extend_config(cfg: DictConfig | ExtendRootConfig) -> None:
    """``check_config`` plus the keys of ``posx extend``."""
    check_config(cfg)
    if not cfg.parent:
        raise PosxError("name the run to extend: posx extend RUN method=<method> factor=<factor>")
    if not (math.isfinite(cfg.factor) and cfg.factor >= 1):
        raise PosxError(f"factor={cfg.factor} must be a finite number of at least 1 (the new context is factor x T)")
    if cfg.new_base <= 1:
        raise PosxError(f"new_base={cfg.new_base} must be greater than 1 (ABF uses 500000)")
    for key in ("steps", "lr"):
        _positive(cfg.extend[key], f"extend.{key}")
    if cfg.extend.warmup_steps < 0:
        raise PosxError(f"extend.warmup_steps={cfg.extend.warmup_steps} must be 0 or more")
    if not 0 < cfg.extend.min_lr_ratio <= 1:
        raise PosxError(f"extend.min_lr_ratio={cfg.extend.min_lr_ratio} must be in (0, 1]")
    for key in ("batch_size", "eval_every"):
        if cfg.extend[key] is not None:
            _positive(cfg.extend[key], f"extend.{key}")


def _check_scoring(ev) -> None:
    """eval.stride, eval.bucket_width and eval.passkey.*."""
    if ev.stride is not None:
        _positive(ev.stride, "eval.stride")
    if ev.bucket_width is not None:
        _positive(ev.bucket_width, "eval.bucket_width")
    pk = ev.passkey
    for key in ("trials", "digits", "depth_buckets"):
        _positive(pk[key], f"eval.passkey.{key}")
    if pk.enabled and not pk.variants:
        raise PosxError("eval.passkey.variants is empty; give prompt, copy or both, or set eval.passkey.enabled=false")
    if "copy" in pk.variants and pk.digits < 2:
        raise PosxError(
            f"eval.passkey.digits={pk.digits}: the copy variant needs at least 2 digits (the first is the cue)"
        )
    if pk.trials < pk.depth_buckets:
        raise PosxError(
            f"eval.passkey.trials={pk.trials} is fewer than eval.passkey.depth_buckets="
            f"{pk.depth_buckets}; every depth bucket needs a trial"
        )


def _check_tasks(cfg) -> None:
    """eval.task_options.* and the training mix (data.task_mix, mix_tasks, task_options)."""
    check_options(cfg.eval.task_options, "eval.task_options")
    check_mix(cfg.data, cfg.train.context_length)


def check_train_config(cfg) -> None:
    """``check_config`` plus what the evaluation at the end of this run (eval.after_train, or
    a later ``eval-extrapolate``) needs of its model: a sliding stride within T, and every
    method's frequencies computable at every factor (a longrope list of the wrong length), and no
    setting that cannot act (``posx.config.inert``)."""
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
        rows = [(float(cfg.eval.scale or f), L) for f, L in zip(cfg.eval.factors, lengths)]
        check_methods(cfg.eval, cfg.eval.methods, cfg.model.d_model // cfg.model.n_head, cfg.pos.base, T, rows)
