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

import pandas as pd
import torch
from rich.console import Console

from posx.core.errors import PosxError
from posx.eval import bytecount, scoring
from posx.eval.tables import COLUMNS, Evaluation, position_rows
from posx.model.gpt import GPT
from posx.model.positional import PositionOutOfRange
from posx.runs.lineage import INTERPOLATE, find_parent, zero_shot_model
from posx.runs.records import RunMeta


def lengths_for(reference: int, new: int, factors) -> list[int]:
    """factor x the parent's T and factor x the new T, sorted, without duplicates."""
    return sorted({round(f * reference) for f in factors} | {round(f * new) for f in factors})


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
    T0, T1 = lineage.train_context, meta.train_context
    lengths = lengths_for(T0, T1, ev.factors)
    # sliding: eval.stride, or half of the length the scored model trained at (each stage's own T)
    strides = {(T, L): scoring.stride_for(ev.protocol, ev.stride, T, L) for T in (T0, T1) for L in lengths}
    n_tokens = scoring.tokens_for(ev.protocol, ev.tokens, lengths, list(strides.values()))
    needed = max(scoring.tokens_needed(L, s, n_tokens) for (_, L), s in strides.items())
    if len(val) < needed:
        raise PosxError(
            f"the held-out split has {len(val)} tokens but eval.tokens asks for {n_tokens} "
            f"at each length ({needed} read); lower eval.tokens or use more data"
        )
    width = scoring.bucket_width_for(ev.bucket_width, T0)
    counts = bytecount.token_bytes(tokenizer)
    stages: list[tuple[str, GPT, int]] = []
    parent_dir = find_parent(meta, results_dir)
    if parent_dir is None:
        if console is not None:
            console.print(
                f"[yellow]warning:[/] parent run {lineage.parent} not found; evaluating the extended model alone"
            )
    else:
        stages.append(("zero-shot", zero_shot_model(meta, parent_dir, device), T0))
    stages.append(("extended", model, T1))
    interpolated = lineage.method == INTERPOLATE
    scale = lineage.factor if interpolated else meta.rope.factor
    rows, positions = [], []
    for stage, m, trained_at in stages:
        m.eval()
        attention = 1.0 if interpolated else m.pos.attention_factor
        for L in lengths:
            stride = strides[(trained_at, L)]
            status, scores = _score(m, val, L, stride, n_tokens, ev.batch_tokens, device)
            nll = scores.total / scores.tokens if status == "ok" else math.nan
            ci = scores.interval() if status == "ok" else scoring.Interval(math.nan, math.nan, math.nan, 0)
            row = {
                "run": run_name, "pos": meta.model.pos, "train_context": trained_at, "eval_context": L,
                "factor": L / T0, "method": lineage.method, "scale": scale, "attention_factor": attention,
                "nll": nll, "ppl": math.exp(nll), "tokens": scores.tokens if scores is not None else 0,
                "status": status, "protocol": ev.protocol, "stride": stride, "reference_context": T0,
                "stage": stage, "absolute_beyond": "none", "within_documents": False, "documents": math.nan,
                "nll_se": ci.nll_se, "ppl_lo": ci.ppl_lo, "ppl_hi": ci.ppl_hi, "windows": ci.windows, "eval_id": "",
                "window_start": "stream", "normalisation": "token",
            }  # fmt: skip
            row.update(_per_byte(row, bytecount.scored_bytes(val, L, stride, n_tokens, counts)))
            rows.append(row)
            if status != "ok":
                continue
            positions.extend(position_rows(row, scoring.buckets(scores, width), stage))
            if console is not None:
                console.print(
                    f"  {lineage.method:>12} {stage:>9} {L / T0:g}x (L={L}): ppl {math.exp(nll):.3f} "
                    f"[{ci.ppl_lo:.3f}, {ci.ppl_hi:.3f}]",
                    highlight=False,
                )
    return Evaluation(table=pd.DataFrame(rows, columns=COLUMNS), positions=positions)
