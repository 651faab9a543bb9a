"""Extended runs and their parent: how a model is extended (RoPE frequencies installed, or a learned
table stretched: row j is the parent's at j / factor, linear between rows, the absolute analogue of
PI, Chen et al. 2023), finding the parent again, and the zero-shot baseline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from posx import rope
from posx.core.errors import PosxError
from posx.model.gpt import GPT
from posx.model.rescale import WINDOWED, install_trained
from posx.model.roperecord import RopeRecord
from posx.runs.paths import META, read_meta
from posx.runs.records import Lineage, RunMeta
from posx.runs.rundir import load_run
from posx.schema.config import ROTARY, evaluated_length

INTERPOLATE = "interpolate"


def new_context(parent_context: int, factor: float) -> int:
    return evaluated_length(factor, parent_context)


def interpolate_table(table: torch.Tensor, rows: int, factor: float) -> torch.Tensor:
    """Stretch a (T, C) position table to (rows, C): row j is the table at position j / factor."""
    T = table.shape[0]
    x = (torch.arange(rows, dtype=torch.float64) / factor).clamp(max=T - 1)  # (rows,)
    lo = x.floor().long().clamp(max=T - 1)  # (rows,)
    hi = (lo + 1).clamp(max=T - 1)  # (rows,)
    w = (x - lo.double()).to(table.dtype)[:, None]  # (rows, 1)
    return table[lo] * (1 - w) + table[hi] * w  # (rows, C)


def check_method(method: str, pos: str, where: str) -> None:
    """RoPE runs take RoPE methods, learned-absolute runs interpolate; others have nothing to rescale."""
    if pos not in ROTARY and pos != "absolute":
        raise PosxError(
            f"{where} has {pos} positions, which have nothing posx extend can rescale: it extends RoPE "
            f"runs (a RoPE method) and learned-absolute runs (method=interpolate)"
        )
    if method in WINDOWED:
        raise PosxError(
            f"method={method} changes attention at evaluation, with no frequencies to train with; extend with "
            f"a frequency method, and score {method} with posx eval-extrapolate 'eval.methods=[none,{method}]'"
        )
    if pos in ROTARY and method == INTERPOLATE:
        raise PosxError(
            f"{where} uses RoPE; interpolate is for learned-absolute tables. "
            f"Choose a RoPE method: {', '.join(m for m in rope.METHODS if m not in WINDOWED)}"
        )
    if pos not in ROTARY and method != INTERPOLATE:
        raise PosxError(
            f"{where} has {pos} positions, which extend only with method=interpolate "
            f"(the table stretched to factor x T); method={method} needs RoPE"
        )


def extended_model(
    parent_model: GPT, parent: RunMeta, method: str, factor: float, record: RopeRecord | None, where: str
) -> GPT:
    """The parent with the extension applied (frequencies installed, or the table stretched)."""
    if method != INTERPOLATE:
        install_trained(parent_model, record, parent.train_context, where)
        return parent_model
    T1 = new_context(parent.train_context, factor)
    model = GPT(replace(parent.model, pos=replace(parent.model.pos, max_positions=T1)))
    state = parent_model.state_dict()
    state["pos.table.weight"] = interpolate_table(state["pos.table.weight"], T1, factor)
    model.load_state_dict(state)
    return model


def find_parent(meta: RunMeta, results_dir: str | Path) -> tuple[Path | None, str]:
    """An extended run's parent (recorded path, else by name under results/runs), else why not: a
    run there that differs from the lineage (T, steps, weights) is not it."""
    lineage = meta.extended_from
    if lineage is None:
        return None, "it is not an extended run"
    why = f"parent run {lineage.parent} not found"
    for candidate in (lineage.parent_path, Path(results_dir) / "runs" / lineage.parent):
        if not candidate or not (Path(candidate) / META).is_file():
            continue
        found = read_meta(Path(candidate))
        differs = _differs_from(found, lineage)
        if not differs:
            return Path(candidate), ""
        why = f"{candidate} is not the run this one was extended from (the extension records {differs} for it)"
    return None, why


def _differs_from(parent: RunMeta, lineage: Lineage) -> str:
    """What of ``parent`` differs from ``lineage`` ('' when none; a field it lacks is not compared)."""
    if parent.train_context != lineage.train_context:
        return f"T={lineage.train_context}"
    if lineage.parent_step and parent.step != lineage.parent_step:
        return f"{lineage.parent_step} steps"
    if lineage.parent_weights_sha256 and parent.weights_sha256 not in (None, lineage.parent_weights_sha256):
        return "other weights"
    return ""


def zero_shot_model(meta: RunMeta, parent_dir: Path, device) -> GPT:
    """The parent with the child's extension applied and no training: the zero-shot baseline."""
    parent_model, parent = load_run(parent_dir, device="cpu")
    lineage = meta.extended_from
    record = meta.rope if lineage.method != INTERPOLATE else None
    return extended_model(parent_model, parent, lineage.method, lineage.factor, record, f"{parent_dir / META}").to(
        device
    )
