"""Evaluating an extended run: ``extended`` (the run, with the frequencies it trained with) and
``zero-shot`` (the parent, same rescaling, no training) at factor x the parent's T and x the new T,
``factor`` relative to the parent's T. ``eval.methods`` and ``eval.scale`` do not apply: the
frequencies are no longer plain theta. See docs/extending.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import torch
from rich.console import Console
from rich.markup import escape

from posx.core.errors import PosxError
from posx.eval import bytecount, scoring
from posx.eval.extrapolate import fill_scores
from posx.eval.tables import COLUMNS, Evaluation, position_rows
from posx.model.gpt import GPT
from posx.model.positional import PositionOutOfRange
from posx.runs.lineage import INTERPOLATE, find_parent, zero_shot_model
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig, evaluated_length


def _score(
    model: GPT, val: torch.Tensor, L: int, stride: int, n_tokens: int, batch_tokens: int, device: torch.device
) -> scoring.Scores | None:
    """The scores of ``model`` at length L; None when L is out of its range."""
    limit = model.pos.max_length()
    if limit is not None and L > limit:
        return None
    try:
        return scoring.score(model, val, L, stride, n_tokens, batch_tokens, device)
    except PositionOutOfRange:
        return None


class _Lengths(NamedTuple):
    """The lengths an extended run is scored at, and how each is read."""

    lengths: list[int]  # factor x the parent's T and factor x the new T
    strides: dict  # (the scored model's T, length) -> stride
    n_tokens: int  # scored tokens at every length
    needed: int  # held-out tokens read


def planned(T0: int, T1: int, pose_length: int | None, ev: EvalConfig) -> _Lengths:
    """The lengths, strides, scored and read tokens of an extension from T0 to T1 (also checked before it trains)."""
    # a PoSE child trains at T0 with positions over s x T0: its new length is that reach
    lengths = sorted({evaluated_length(f, T) for f in ev.factors for T in (T0, pose_length or T1)})
    # sliding: eval.stride, or half of the length the scored model trained at (each stage's own T)
    strides = {(T, L): scoring.stride_for(ev.protocol, ev.stride, T, L) for T in (T0, T1) for L in lengths}
    n_tokens = scoring.tokens_for(ev.protocol, ev.tokens, lengths, list(strides.values()))
    needed = max(scoring.tokens_needed(L, s, n_tokens) for (_, L), s in strides.items())
    return _Lengths(lengths, strides, n_tokens, needed)


def _stages(
    model: GPT, meta: RunMeta, results_dir: str | Path, device: torch.device, console: Console | None
) -> list[tuple[str, GPT, int]]:
    """(stage, model, the T it trained at): the zero-shot parent when it is found, then the run itself."""
    lineage = meta.extended_from
    stages: list[tuple[str, GPT, int]] = []
    parent_dir, why = find_parent(meta, results_dir)
    if parent_dir is not None:
        try:
            stages.append(("zero-shot", zero_shot_model(meta, parent_dir, device), lineage.train_context))
        except PosxError as exc:  # a parent whose weights are gone or damaged: as a missing one
            why = f"parent run {lineage.parent} cannot be loaded ({exc})"
    if why and console is not None:
        console.print(f"[yellow]warning:[/] {escape(why)}; evaluating the extended model alone")
    stages.append(("extended", model, meta.train_context))
    return stages


def _row(shared: dict, stage: str, trained_at: int, L: int, stride: int, attention: float, scores, n_bytes) -> dict:
    """The table row of one (stage, length) from its scores (None: out of range)."""
    row = {
        **shared, "train_context": trained_at, "eval_context": L, "factor": L / shared["reference_context"],
        "attention_factor": attention, "nll": math.nan, "ppl": math.nan, "tokens": 0, "stride": stride,
        "stage": stage, "status": "ok" if scores is not None else "out_of_range", "nll_se": math.nan,
        "ppl_lo": math.nan, "ppl_hi": math.nan, "windows": 0, "bytes": n_bytes, "bpb": math.nan, "bpb_lo": math.nan,
        "bpb_hi": math.nan,
    }  # fmt: skip
    if scores is not None:
        fill_scores(row, scores)
    return row


def evaluate_extended(
    model: GPT,
    meta: RunMeta,
    val: torch.Tensor,
    ev,
    results_dir: str | Path,
    device: torch.device,
    run_name: str,
    console: Console | None = None,
    tokenizer=None,
) -> Evaluation:
    """One row per (stage, length); no zero-shot rows when the parent is gone."""
    lineage = meta.extended_from
    T0 = lineage.train_context
    plan = planned(T0, meta.train_context, meta.model.pos.pose_length, ev)
    scoring.require_held_out(val, plan.n_tokens, plan.needed)
    width = scoring.bucket_width_for(ev.bucket_width, T0)
    counts = bytecount.token_bytes(tokenizer)
    stages = _stages(model, meta, results_dir, device, console)
    interpolated = lineage.method == INTERPOLATE
    shared = {
        "run": run_name, "pos": meta.model.pos.name, "method": lineage.method,
        "scale": lineage.factor if interpolated else meta.rope.factor, "protocol": ev.protocol,
        "reference_context": T0, "absolute_beyond": "none", "within_documents": False, "documents": math.nan,
        "eval_id": "", "window_start": "stream", "normalisation": "token",
    }  # fmt: skip
    rows, positions = [], []
    for stage, m, trained_at in stages:
        m.eval()
        attention = 1.0 if interpolated else m.pos.attention_factor
        for L in plan.lengths:
            stride = plan.strides[(trained_at, L)]
            scores = _score(m, val, L, stride, plan.n_tokens, ev.batch_tokens, device)
            n_bytes = bytecount.scored_bytes(val, L, stride, plan.n_tokens, counts)
            row = _row(shared, stage, trained_at, L, stride, attention, scores, n_bytes)
            rows.append(row)
            if row["status"] != "ok":
                continue
            positions.extend(position_rows(row, scoring.buckets(scores, width), stage))
            if console is not None:
                console.print(
                    f"  {lineage.method:>12} {stage:>9} {L / T0:g}x (L={L}): ppl {row['ppl']:.3f} "
                    f"[{row['ppl_lo']:.3f}, {row['ppl_hi']:.3f}]",
                    highlight=False,
                )
    return Evaluation(table=pd.DataFrame(rows, columns=COLUMNS), positions=positions)
