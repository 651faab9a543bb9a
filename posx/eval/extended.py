"""Evaluating an extended run (``posx extend``): zero-shot and extended side by side.

Lengths are factor x the parent's T and factor x the new T for every ``eval.factors``
entry (deduplicated), and ``factor`` is always relative to the parent's T
(``reference_context``), so rows line up with the parent's own table. Two stages:

* ``extended``: the run itself, with the frequencies it trained with (``posx.runs.rundir.load_run``
  installs them) or its stretched absolute table.
* ``zero-shot``: the parent with the same rescaling (same frequencies, or the same
  stretched table) and no training. This is the parent's ``eval-extrapolate`` row at
  L = factor x T; at other lengths it differs from that table, which rescales by L/T.

Both stages are scored with ``eval.protocol`` (a sliding stride defaults to half the scored
model's own T) and write per-position buckets (positions.csv, with a ``stage`` column).

The frequencies are no longer plain theta after extension, so the family's formulas do not
apply on top of them: ``eval.methods`` and ``eval.scale`` are not used here.
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
from posx.eval.tables import COLUMNS, Evaluation, perplexity, position_rows
from posx.model.gpt import GPT
from posx.model.positional import PositionOutOfRange
from posx.runs.lineage import INTERPOLATE, find_parent, zero_shot_model
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig, evaluated_length


def lengths_for(reference: int, new: int, factors) -> list[int]:
    """factor x the parent's T and factor x the new T, sorted, without duplicates."""
    return sorted({evaluated_length(f, reference) for f in factors} | {evaluated_length(f, new) for f in factors})


def _score(
    model: GPT, val: torch.Tensor, L: int, stride: int, n_tokens: int, batch_tokens: int, device: torch.device
) -> tuple[str, scoring.Scores | None]:
    """(status, scores) of ``model`` at length L; no scores when it cannot be scored."""
    limit = model.pos.max_length()
    if limit is not None and L > limit:
        return "out_of_range", None
    try:
        scores = scoring.score(model, val, L, stride, n_tokens, batch_tokens, device)
    except PositionOutOfRange:
        return "out_of_range", None
    return ("ok" if math.isfinite(scores.total) else "nonfinite"), scores


def _per_byte(row: dict, n_bytes: int) -> dict:
    """bytes, bpb and its interval of a row (``posx.eval.bytecount``); NaN when not scored."""
    per_byte = row["tokens"] / n_bytes / bytecount.LN2 if n_bytes > 0 and row["status"] == "ok" else math.nan
    lo, hi = (math.log(row[k]) * per_byte if row[k] > 0 else math.nan for k in ("ppl_lo", "ppl_hi"))
    return {"bytes": n_bytes, "bpb": row["nll"] * per_byte, "bpb_lo": lo, "bpb_hi": hi}


class _Lengths(NamedTuple):
    """The lengths an extended run is scored at, and how each is read."""

    lengths: list[int]  # factor x the parent's T and factor x the new T
    strides: dict  # (the scored model's T, length) -> stride
    n_tokens: int  # scored tokens at every length
    needed: int  # held-out tokens read


def planned(T0: int, T1: int, pose_length: int | None, ev: EvalConfig) -> _Lengths:
    """The lengths an extension of a run at T0 to T1 is scored at, each stage's stride at each, the
    scored tokens and the held-out tokens read: what its evaluation, and the check before it trains, compute."""
    # a PoSE child trains at T0 with positions over s x T0: its new length is that reach
    lengths = lengths_for(T0, pose_length or T1, ev.factors)
    # sliding: eval.stride, or half of the length the scored model trained at (each stage's own T)
    strides = {(T, L): scoring.stride_for(ev.protocol, ev.stride, T, L) for T in (T0, T1) for L in lengths}
    n_tokens = scoring.tokens_for(ev.protocol, ev.tokens, lengths, list(strides.values()))
    needed = max(scoring.tokens_needed(L, s, n_tokens) for (_, L), s in strides.items())
    return _Lengths(lengths, strides, n_tokens, needed)


def _lengths(meta: RunMeta, val: torch.Tensor, ev: EvalConfig) -> _Lengths:
    """``planned`` for the run, checked against the held-out split."""
    plan = planned(meta.extended_from.train_context, meta.train_context, meta.model.pos.pose_length, ev)
    if len(val) < plan.needed:
        raise PosxError(
            f"the held-out split has {len(val)} tokens but eval.tokens asks for {plan.n_tokens} "
            f"at each length ({plan.needed} read); lower eval.tokens or use more data"
        )
    return plan


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


def _row(shared: dict, stage: str, trained_at: int, L: int, stride: int, attention: float, status: str, scores) -> dict:
    """The table row of one (stage, length) from its scores (``shared``: the fields every row has), bytes aside."""
    nll = scores.total / scores.tokens if status == "ok" else math.nan
    ci = scores.interval() if status == "ok" else scoring.Interval(math.nan, math.nan, math.nan, 0)
    return {
        **shared, "train_context": trained_at, "eval_context": L, "factor": L / shared["reference_context"],
        "attention_factor": attention, "nll": nll, "ppl": perplexity(nll),
        "tokens": scores.tokens if scores is not None else 0, "status": status, "stride": stride, "stage": stage,
        "nll_se": ci.nll_se, "ppl_lo": ci.ppl_lo, "ppl_hi": ci.ppl_hi, "windows": ci.windows,
    }  # fmt: skip


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
    """One row per (stage, length); the zero-shot stage is left out when the parent is gone.
    ``tokenizer`` (None: bytes) says how many bytes each token covers (bits per byte)."""
    lineage = meta.extended_from
    T0 = lineage.train_context
    plan = _lengths(meta, val, ev)
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
            status, scores = _score(m, val, L, stride, plan.n_tokens, ev.batch_tokens, device)
            row = _row(shared, stage, trained_at, L, stride, attention, status, scores)
            row.update(_per_byte(row, bytecount.scored_bytes(val, L, stride, plan.n_tokens, counts)))
            rows.append(row)
            if status != "ok":
                continue
            positions.extend(position_rows(row, scoring.buckets(scores, width), stage))
            if console is not None:
                console.print(
                    f"  {lineage.method:>12} {stage:>9} {L / T0:g}x (L={L}): ppl {row['ppl']:.3f} "
                    f"[{row['ppl_lo']:.3f}, {row['ppl_hi']:.3f}]",
                    highlight=False,
                )
    return Evaluation(table=pd.DataFrame(rows, columns=COLUMNS), positions=positions)
