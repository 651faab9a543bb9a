"""Evaluating an extended run (``posx extend``): zero-shot and extended side by side.

Lengths are factor x the parent's T and factor x the new T for every ``eval.factors``
entry (deduplicated), and ``factor`` is always relative to the parent's T
(``reference_context``), so rows line up with the parent's own table. Two stages:

* ``extended``: the run itself, with the frequencies it trained with (``posx.runs.rundir.load_run``
  installs them) or its stretched absolute table.
* ``zero-shot``: the parent with the same rescaling (same frequencies, or the same
  stretched table) and no training. This is the parent's ``eval-extrapolate`` row at
  L = factor x T; at other lengths it differs from that table, which rescales by L/T.

The frequencies are no longer plain theta after extension, so the family's formulas do not
apply on top of them: ``eval.methods`` and ``eval.scale`` are not used here.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from posx.core.errors import PosxError
from posx.eval.extrapolate import window_nll
from posx.eval.scoring import tokens_for
from posx.eval.tables import COLUMNS, Evaluation
from posx.model.encodings import PositionOutOfRange
from posx.model.gpt import GPT
from posx.runs.lineage import INTERPOLATE, find_parent, zero_shot_model
from posx.runs.records import RunMeta

PROTOCOL = "nonoverlapping"  # the only protocol an extended run is evaluated with


def lengths_for(reference: int, new: int, factors) -> list[int]:
    """factor x the parent's T and factor x the new T, sorted, without duplicates."""
    return sorted({round(f * reference) for f in factors} | {round(f * new) for f in factors})


def _score(model: GPT, val: torch.Tensor, L: int, n_tokens: int, batch_tokens: int,
           device: torch.device) -> tuple[str, float, int]:
    """(status, mean nll, scored tokens) of ``model`` at length L."""
    limit = model.pos.max_length()
    if limit is not None and L > limit:
        return "out_of_range", math.nan, 0
    try:
        total, count = window_nll(model, val, L, n_tokens // L, batch_tokens, device)
    except PositionOutOfRange:
        return "out_of_range", math.nan, 0
    if not math.isfinite(total):
        return "nonfinite", math.nan, count
    return "ok", total / count, count


def evaluate_extended(model: GPT, meta: RunMeta, val: torch.Tensor, ev, results_dir: str | Path,
                      device: torch.device, run_name: str, console: Console | None = None) -> Evaluation:
    """One row per (stage, length); the zero-shot stage is left out when the parent is gone."""
    lineage = meta.extended_from
    T0, T1 = lineage.train_context, meta.train_context
    lengths = lengths_for(T0, T1, ev.factors)
    n_tokens = tokens_for(PROTOCOL, ev.tokens, lengths, lengths)
    if len(val) < n_tokens + 1:
        raise PosxError(f"the held-out split has {len(val)} tokens but eval.tokens asks for {n_tokens} "
                        f"at each length; lower eval.tokens or use more data")
    if ev.protocol != PROTOCOL and console is not None:
        console.print(f"[yellow]warning:[/] an extended run is evaluated with the {PROTOCOL} protocol only "
                      f"(eval.protocol={ev.protocol} is ignored)")
    stages: list[tuple[str, GPT, int]] = []
    parent_dir = find_parent(meta, results_dir)
    if parent_dir is None:
        if console is not None:
            console.print(f"[yellow]warning:[/] parent run {lineage.parent} not found; "
                          "evaluating the extended model alone")
    else:
        stages.append(("zero-shot", zero_shot_model(meta, parent_dir, device), T0))
    stages.append(("extended", model, T1))
    interpolated = lineage.method == INTERPOLATE
    scale = lineage.factor if interpolated else meta.rope.factor
    rows = []
    for stage, m, trained_at in stages:
        m.eval()
        attention = 1.0 if interpolated else m.pos.attention_factor
        for L in lengths:
            status, nll, count = _score(m, val, L, n_tokens, ev.batch_tokens, device)
            rows.append({"run": run_name, "pos": meta.model.pos, "train_context": trained_at,
                         "eval_context": L, "factor": L / T0, "method": lineage.method, "scale": scale,
                         "attention_factor": attention, "nll": nll, "ppl": math.exp(nll), "tokens": count,
                         "status": status, "protocol": PROTOCOL, "stride": L, "reference_context": T0, "stage": stage,
                         "absolute_beyond": "none", "within_documents": False, "documents": math.nan})
            if console is not None and status == "ok":
                console.print(f"  {lineage.method:>12} {stage:>9} {L / T0:g}x (L={L}): ppl {math.exp(nll):.3f}",
                              highlight=False)
    return Evaluation(table=pd.DataFrame(rows, columns=COLUMNS))
