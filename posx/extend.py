"""Context extension, the papers' protocol: rescale a trained run's positions, continue
training at factor x T for a few hundred steps, save a new run that records its parent.

``posx extend RUN method=yarn factor=4`` runs ``extend_job``. The parent run is only read.
What the child's model.json records:

* ``rope``: the frequencies it trained with, as a recipe, ``{"method", "factor", "params",
  "original_context"}`` (``posx.rope.frequencies`` of those), and as the numbers,
  ``"inv_freq"`` and ``"attention_factor"``; ``posx.runs.load_run`` installs the numbers,
  so evaluation uses exactly what training used.
* ``extended_from``: ``{"parent", "parent_path", "method", "factor", "steps",
  "train_context" (the parent's T), "parent_step"}``.

A RoPE run takes any method of ``posx.rope.METHODS``; the dynamic ones (dynamic_ntk,
dynamic_yarn, longrope) are frozen at the new length, the only length they train at. A
learned-absolute run takes only ``interpolate``: its table is stretched to factor x T rows,
row j being the parent's table at position j / factor (linear between rows, the last row
repeated past the end), the absolute analogue of PI.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from posx import rope
from posx.errors import PosxError
from posx.model import GPT, GPTConfig
from posx.runs import RunMeta, install_trained_frequencies, load_run, read_meta, resolve_run

INTERPOLATE = "interpolate"


def new_context(parent_context: int, factor: float) -> int:
    return int(round(factor * parent_context))


def rope_record(cfg: DictConfig, parent: RunMeta) -> dict:
    """The frequencies an extension of ``parent`` trains with, as recorded in model.json."""
    from posx.evaluate import METHOD_ARGS  # the evaluation's per-method arguments, one table for both

    T, method = parent.train_context, cfg.method
    # Frozen at the length it trains at: dynamic methods see L = factor x T, always.
    factor, params = METHOD_ARGS[method](cfg.eval, float(cfg.factor), new_context(T, cfg.factor))
    if method == "abf":
        params = {**params, "new_base": float(cfg.new_base)}  # extend's own key, not eval.abf_base
    return {"method": method, "factor": factor, "params": params, "original_context": T}


def interpolate_table(table: torch.Tensor, rows: int, factor: float) -> torch.Tensor:
    """Stretch a (T, C) position table to (rows, C): row j is the table at position j / factor."""
    T = table.shape[0]
    x = (torch.arange(rows, dtype=torch.float64) / factor).clamp(max=T - 1)  # (rows,)
    lo = x.floor().long().clamp(max=T - 1)  # (rows,)
    hi = (lo + 1).clamp(max=T - 1)  # (rows,)
    w = (x - lo.double()).to(table.dtype)[:, None]  # (rows, 1)
    return table[lo] * (1 - w) + table[hi] * w  # (rows, C)


def check_method(method: str, pos: str, where: str) -> None:
    """RoPE runs take RoPE methods; learned-absolute runs take only interpolate."""
    if pos == "rope" and method == INTERPOLATE:
        raise PosxError(f"{where} uses RoPE; interpolate is for learned-absolute tables. "
                        f"Choose a RoPE method: {', '.join(rope.METHODS)}")
    if pos != "rope" and method != INTERPOLATE:
        raise PosxError(f"{where} has {pos} positions, which extend only with method=interpolate "
                        f"(the table stretched to factor x T); method={method} needs RoPE")


def extended_model(parent_model: GPT, parent: RunMeta, method: str, factor: float,
                   record: dict) -> tuple[GPT, GPTConfig]:
    """The parent's weights with the extension applied, before any training (in place for
    RoPE, a new model for an absolute table). Also returns the child's model config."""
    T1 = new_context(parent.train_context, factor)
    if method != INTERPOLATE:
        child_meta = copy.copy(parent)
        child_meta.rope = record
        install_trained_frequencies(parent_model, child_meta)
        return parent_model, parent.model
    config = GPTConfig(**{**parent.model.to_dict(), "max_positions": T1})
    model = GPT(config)
    state = parent_model.state_dict()
    state["pos.table.weight"] = interpolate_table(state["pos.table.weight"], T1, factor)
    model.load_state_dict(state)
    return model, config


def _child_config(cfg: DictConfig, parent_dir: Path, parent: RunMeta, T1: int) -> DictConfig:
    """The composed config with the parent's model, corpus and the extend.* schedule filled in,
    so the child's config.yaml says what actually ran."""
    child = copy.deepcopy(cfg)
    m = parent.model
    parent_cfg = parent_dir / "config.yaml"
    name = OmegaConf.load(parent_cfg).get("model", {}).get("name") if parent_cfg.is_file() else None
    for key, value in {"name": name or "parent", "n_layer": m.n_layer, "n_head": m.n_head,
                       "d_model": m.d_model, "mlp_ratio": m.mlp_ratio, "dropout": m.dropout}.items():
        child.model[key] = value
    child.pos.name, child.pos.base = m.pos, m.rope_base
    child.pos.max_positions = T1 if m.pos != "rope" else m.max_positions
    dcfg = parent.data.get("config") or {}
    child.data.source = dcfg.get("source", "stdlib")
    child.data.path = dcfg.get("path")
    child.data.val_fraction = dcfg.get("val_fraction", 0.05)
    e, t = cfg.extend, child.train
    tokens_per_step = cfg.train.batch_size * parent.train_context
    t.batch_size = e.batch_size or max(1, tokens_per_step // T1)
    t.context_length, t.steps, t.lr = T1, e.steps, e.lr
    t.warmup_steps, t.min_lr_ratio = e.warmup_steps, e.min_lr_ratio
    t.eval_every = e.eval_every or cfg.train.eval_every
    child.parent = str(parent_dir)
    return child


def _forbid_model_overrides(overrides: list[str]) -> None:
    for item in overrides:
        key = item.lstrip("+~").split("=", 1)[0]
        if key in ("model", "pos") or key.startswith(("model.", "pos.")):
            raise PosxError(f"{item}: an extension keeps its parent's model and positions "
                            "(from its model.json); drop the override")


def _run_name(cfg: DictConfig, parent_dir: Path) -> str:
    return cfg.name or f"{parent_dir.name}-{cfg.method}-x{cfg.factor:g}"


def extend_job(cfg: DictConfig) -> Path:
    """One Hydra job of ``posx extend``: check, load the parent, extend, train, save."""
    import shutil

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from posx import checkpoint
    from posx.config import check_extend_config
    from posx.runs import is_run, new_run_dir
    from posx.train import gpt_config, train

    check_extend_config(cfg)
    hc = HydraConfig.get()
    _forbid_model_overrides(list(hc.overrides.task))
    parent_dir = resolve_run(cfg.parent, cfg.results_dir)
    parent = read_meta(parent_dir)
    check_method(cfg.method, parent.model.pos, f"run {parent_dir}")
    if parent.extended_from:
        raise PosxError(f"{parent_dir} is itself an extension of {parent.extended_from.get('parent')}; "
                        "extend that run with the larger factor instead")
    T1 = new_context(parent.train_context, cfg.factor)
    record = rope_record(cfg, parent) if cfg.method != INTERPOLATE else None
    if record is not None:  # a bad method parameter fails here, before any directory exists
        rope.frequencies(record["method"], parent.model.head_dim, base=parent.model.rope_base,
                         factor=record["factor"], original_context=record["original_context"],
                         **record["params"])
    child_cfg = _child_config(cfg, parent_dir, parent, T1)
    parent_model, _ = load_run(parent_dir, device="cpu")
    model, config = extended_model(parent_model, parent, cfg.method, float(cfg.factor), record)
    if record is not None:  # the numbers themselves, besides the recipe that gives them
        record = {**record, "inv_freq": model.pos.trained_inv_freq.tolist(),
                  "attention_factor": model.pos.trained_attention_factor}
    lineage = {"parent": parent_dir.name, "parent_path": str(parent_dir.resolve()),
               "method": cfg.method, "factor": float(cfg.factor), "steps": int(cfg.extend.steps),
               "train_context": parent.train_context, "parent_step": parent.step}

    if hc.mode == RunMode.MULTIRUN:
        run_dir = Path(hc.runtime.output_dir)
        if is_run(run_dir):
            raise PosxError(f"{run_dir} already holds a run; use a new hydra.sweep.dir")
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir = new_run_dir(cfg.results_dir, _run_name(cfg, parent_dir))
    console = Console()
    console.print(f"[bold]posx extend[/] {parent_dir} -> {run_dir}: {cfg.method} x{cfg.factor:g}, "
                  f"T {parent.train_context} -> {T1}, {cfg.extend.steps} steps", highlight=False)
    try:
        if gpt_config(child_cfg) != config:  # the saved model.json must rebuild this model
            raise PosxError(f"{parent_dir}/model.json does not match the model rebuilt from it")
        train(child_cfg, run_dir, console, model=model,
              rope=record or {"method": "none", "factor": 1.0, "params": {}}, extended_from=lineage)
    except BaseException:
        # Nothing half-written; a checkpoint is kept, it is what `posx train --resume` needs.
        if not is_run(run_dir) and not checkpoint.exists(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def find_parent(meta: RunMeta, run_dir: Path, results_dir: str | Path) -> Path | None:
    """The parent of an extended run: its recorded path, else by name under results/runs."""
    lineage = meta.extended_from or {}
    for candidate in (lineage.get("parent_path"), Path(results_dir) / "runs" / str(lineage.get("parent"))):
        if candidate and (Path(candidate) / "model.json").is_file():
            return Path(candidate)
    return None


def zero_shot_model(meta: RunMeta, parent_dir: Path, device) -> GPT:
    """The parent with the child's extension applied and no training: the zero-shot baseline."""
    parent_model, parent = load_run(parent_dir, device="cpu")
    lineage = meta.extended_from
    record = meta.rope if lineage["method"] != INTERPOLATE else None
    model, _ = extended_model(parent_model, parent, lineage["method"], float(lineage["factor"]), record)
    return model.to(device)


__all__ = ["INTERPOLATE", "new_context", "rope_record", "interpolate_table", "check_method",
           "extended_model", "extend_job", "find_parent", "zero_shot_model"]

