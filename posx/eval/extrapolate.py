"""Zero-shot extrapolation: perplexity at factor x T for each RoPE rescaling method, with the
per-position, passkey and task rows beside it (docs/evaluation.md). A cell that cannot be computed
says why in ``status``: ``out_of_range`` (learned absolute past its table), ``not_applicable`` (a
RoPE method without RoPE), ``nonfinite`` (inf/NaN logits). Extended runs: ``posx.eval.extended``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import pandas as pd
import torch
from rich.console import Console

from posx.core.progress import Reporter
from posx.eval import bytecount, documents, passkey, scoring, suite
from posx.eval.tables import COLUMNS, KEYS, Evaluation, perplexity, position_rows
from posx.model.gpt import GPT
from posx.model.positional import PositionOutOfRange
from posx.model.randomized import sampled_at_test
from posx.model.rescale import (
    WINDOWED,
    absolute_beyond,
    check_methods,
    is_windowed,
    method_frequencies,
    method_window,
    rescaled,
    windowed_attention,
)
from posx.model.windowed import Windowed
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig


def window_nll(
    model: GPT, tokens: torch.Tensor, length: int, n_windows: int, batch_tokens: int, device: torch.device
) -> tuple[float, int]:
    """Summed NLL and token count of n_windows non-overlapping windows of ``length``."""
    scores = scoring.score(model, tokens, length, length, n_windows * length, batch_tokens, device)
    return scores.total, scores.tokens


def _new_row(
    run_name: str, meta: RunMeta, ev, factor, L: int, method: str, scale: float, stride: int, beyond: str, plan
) -> dict:
    """The row of one (method, length) cell before it is scored (``plan``: its documents, or None)."""
    T = meta.train_context
    return {
        "run": run_name, "pos": meta.model.pos.name, "train_context": T, "eval_context": L, "factor": float(factor),
        "method": method, "scale": scale, "attention_factor": 1.0, "nll": math.nan, "ppl": math.nan, "tokens": 0,
        "status": "ok", "protocol": ev.protocol, "stride": stride, "reference_context": T, "stage": "zero-shot",
        "absolute_beyond": beyond, "within_documents": plan is not None,
        "documents": plan.documents if plan is not None else math.nan, "nll_se": math.nan, "ppl_lo": math.nan,
        "ppl_hi": math.nan, "windows": 0, "eval_id": "", "bytes": math.nan, "bpb": math.nan, "bpb_lo": math.nan,
        "bpb_hi": math.nan, "window_start": "documents" if plan is not None else "stream", "normalisation": "token",
    }  # fmt: skip


@dataclass
class _Plan:
    """What every cell of one evaluation shares: the lengths and how each is read."""

    lengths: list[int]  # factor x T
    strides: list[int]  # tokens scored per window, by length
    scales: list[float]  # the RoPE scale s of each length
    n_tokens: int  # scored tokens at every length
    within: bool  # eval.within_documents
    plans: dict  # length -> its documents (``documents.plan``) when within, else empty
    n_bytes: dict  # length -> bytes of the text its scored tokens cover
    rope_args: dict  # head_dim, base, train_context for ``method_frequencies``


def _plan(model: GPT, meta: RunMeta, val: torch.Tensor, ev: EvalConfig, val_docs, tokenizer) -> _Plan:
    """The lengths, strides and scored tokens of an evaluation, checked before any row is computed."""
    T = meta.train_context
    scales, lengths = (list(column) for column in zip(*scoring.eval_rows(ev, T)))  # (RoPE scale, length) rows
    strides = [scoring.stride_for(ev.protocol, ev.stride, T, L) for L in lengths]
    n_tokens = scoring.tokens_for(ev.protocol, ev.tokens, lengths, strides)
    needed = max(scoring.tokens_needed(L, s, n_tokens) for L, s in zip(lengths, strides))
    within = bool(ev.within_documents)
    plans = {}
    if within:  # too few documents: one line, here
        plans = {
            L: documents.plan(val_docs, len(val), L, s, n_tokens, ev.min_document_tokens)
            for L, s in zip(lengths, strides)
        }
    else:
        scoring.require_held_out(val, n_tokens, needed)
    rope_args = {"head_dim": meta.model.head_dim, "base": meta.model.pos.base, "train_context": T}
    if model.pos.uses_rope:  # bad method parameters fail here, before any row is computed
        check_methods(ev, ev.methods, rows=list(zip(scales, lengths)), **rope_args)
    counts = bytecount.token_bytes(tokenizer)
    n_bytes = {
        L: bytecount.scored_bytes(val, L, s, n_tokens, counts, plans[L].starts if within else None)
        for L, s in zip(lengths, strides)
    }
    return _Plan(lengths, strides, scales, n_tokens, within, plans, n_bytes, rope_args)


def _passkey_trials(val: torch.Tensor, lengths: list[int], pk, long_tables: bool, tokenizer) -> tuple[list, dict]:
    """The passkey variants scored (none without ``long_tables``) and the trials of each (length, variant)."""
    variants = list(pk.variants) if long_tables and pk.enabled else []
    trials = {
        (L, v): passkey.make_trials(val, L, v, pk.trials, pk.digits, pk.depth_buckets, pk.seed, tokenizer)
        for L in lengths
        for v in variants
    }
    return variants, trials


def evaluate(
    model: GPT,
    meta: RunMeta,
    val: torch.Tensor,
    ev,
    device: torch.device,
    run_name: str,
    console: Console | None = None,
    long_tables: bool = False,
    val_docs=None,
    tokenizer=None,
) -> Evaluation:
    """One row per (factor, method); with ``long_tables`` also the position, passkey and task rows."""
    p = _plan(model, meta, val, ev, val_docs, tokenizer)
    pk = ev.passkey
    variants, trials = _passkey_trials(val, p.lengths, pk, long_tables, tokenizer)
    tasks = suite.make_suite(val, p.lengths, ev, tokenizer) if long_tables else {}
    shared = long_tables and suite.shares_passkey(ev)  # the passkey task reads the prompt trials' scoring
    width = scoring.bucket_width_for(ev.bucket_width, meta.train_context)
    beyond = ev.absolute_beyond if model.pos.kind == "absolute" else "none"  # no table, no patch
    rows, positions, passkey_rows, task_rows = [], [], [], []
    memo: dict = {}  # cells that share a length and frequencies are scored once (``cell_key``)
    model.eval()
    cells = [(m, f, L, s, sc) for m in ev.methods for f, L, s, sc in zip(ev.factors, p.lengths, p.strides, p.scales)]
    console = console or Console(quiet=True)
    for line in _past_reach(model, ev, meta.train_context, p.lengths):
        console.print(f"[yellow]note:[/] {line}")
    with absolute_beyond(model, beyond), Reporter(console, "eval", len(cells)) as progress:
        for method, factor, L, stride, scale in cells:
            row = _new_row(run_name, meta, ev, factor, L, method, scale, stride, beyond, p.plans.get(L))
            rows.append(row)
            cell_trials = {v: trials[(L, v)] for v in variants}
            row["bytes"] = p.n_bytes[L]
            asked = {"passkey": cell_trials, "tasks": tasks, "shared": shared}
            with sampled_at_test(model, str(ev.randomized_positions), L):
                scores, results = _score_cell(model, val, ev, device, row, p, asked, memo)
            keys = {k: row[k] for k in KEYS}
            task_rows += suite.suite_rows(keys, row["status"], tasks, L, results.get("tasks"), ev.task_options)
            if long_tables and row["status"] == "ok":
                positions.extend(position_rows(row, scoring.buckets(scores, width), "zero-shot"))
            for v in variants:
                scored = results.get(v)  # None: the cell was not scored, its status in every row
                nll, exact = (scored.nll, scored.exact) if scored is not None else (None, None)
                for r in passkey.summarize(cell_trials[v], nll, exact, pk.depth_buckets, row["status"]):
                    passkey_rows.append({**keys, "variant": v, **r})
            status = f"ppl {row['ppl']:.3f}" if row["status"] == "ok" else row["status"]
            progress.advance(f"{method} {factor:g}x (L={L}) {status}")
    return Evaluation(
        table=pd.DataFrame(rows, columns=COLUMNS), positions=positions, passkey=passkey_rows, tasks=task_rows
    )


def _score_cell(
    model: GPT, val: torch.Tensor, ev, device: torch.device, row: dict, p: _Plan, trials: dict, memo: dict
) -> tuple[scoring.Scores | None, dict]:
    """Fill one row in place; returns its scores and the results of ``trials`` ({"passkey": {variant:
    trials}, "tasks": the suite, "shared": ``suite.shares_passkey``}). A cell whose ``cell_key``
    equals an earlier one's reuses its results from ``memo`` instead of running the model again."""
    L, method = row["eval_context"], row["method"]
    status = _unscorable(model, method, L)
    if status is not None:
        row["status"] = status
        return None, {}
    inv_freq, window = None, None
    if model.pos.uses_rope:
        inv_freq, row["attention_factor"] = method_frequencies(method, ev, scale=row["scale"], length=L, **p.rope_args)
        inv_freq = inv_freq.to(device)
        window = method_window(method, ev, p.rope_args["train_context"])
    key = cell_key(L, row["stride"], inv_freq, row["attention_factor"], window)
    try:
        if key not in memo:
            with rescaled(model, inv_freq, row["attention_factor"]), windowed_attention(model, window):
                memo[key] = _run_cell(model, val, ev, device, row, p, trials)
        scores, results = memo[key]
    except PositionOutOfRange:
        row["status"] = "out_of_range"
        return None, {}
    fill_scores(row, scores)
    return scores, results


def _past_reach(model: GPT, ev: EvalConfig, train_context: int, lengths: list[int]) -> list[str]:
    """A line for each windowed method asked past its reach (Self-Extend's (T - W) * G + W, Jin et al.
    2024; Leaky ReRoPE's (T - W) * k + W), where its distances leave the trained range."""
    if not model.pos.uses_rope or not model.supports_windowed:
        return []
    lines = []
    for method in (m for m in ev.methods if m in WINDOWED):
        window = method_window(method, ev, train_context)
        reach = window.reach(train_context)
        beyond = [L for L in lengths if reach is not None and L > reach]
        if beyond:
            lines.append(
                f"{method} reaches {reach} tokens with {window.describe()}; at {', '.join(map(str, beyond))} its "
                f"distances pass T={train_context}: raise eval.{method}.{window.widen}"
            )
    return lines


def _unscorable(model: GPT, method: str, L: int) -> str | None:
    """Why a cell cannot be scored at all (a RoPE method without RoPE, a length past the table), else None."""
    if method != "none" and not model.pos.uses_rope:
        return "not_applicable"
    if is_windowed(method) and not model.supports_windowed:  # a transformers checkpoint attends its own way
        return "not_applicable"
    limit = model.pos.max_length()
    if limit is not None and L > limit:
        return "out_of_range"
    return None


def _run_cell(
    model: GPT, val: torch.Tensor, ev, device: torch.device, row: dict, p: _Plan, trials: dict
) -> tuple[scoring.Scores, dict]:
    """The scores of the model as installed at the row's length, and the results of ``trials`` (see ``_score_cell``)."""
    L = row["eval_context"]
    starts = p.plans[L].starts if p.within else None
    scores = scoring.score(model, val, L, row["stride"], p.n_tokens, ev.batch_tokens, device, starts)
    results = {
        v: passkey.score(model, t, ev.batch_tokens, device, as_task=trials["shared"] and v == "prompt")
        for v, t in trials["passkey"].items()
    }
    done = {"passkey": results["prompt"].as_task} if trials["shared"] else {}
    generate = str(ev.task_scoring) == "generate"
    results["tasks"] = suite.score_suite(model, trials["tasks"], L, ev.batch_tokens, device, done, generate)
    return scores, results


def fill_scores(row: dict, scores: scoring.Scores) -> None:
    """A scored row's tokens, NLL with its interval, and bits per byte; ``nonfinite`` when the NLL is not finite."""
    row["tokens"] = scores.tokens
    if not math.isfinite(scores.total):
        row["status"] = "nonfinite"
        return
    row["nll"] = scores.total / scores.tokens
    row["ppl"] = perplexity(row["nll"])
    ci = scores.interval()
    row.update(nll_se=ci.nll_se, ppl_lo=ci.ppl_lo, ppl_hi=ci.ppl_hi, windows=ci.windows)
    per_byte = scores.tokens / row["bytes"] / bytecount.LN2 if row["bytes"] > 0 else math.nan  # bits/byte per nat/token
    lo, hi = (-math.inf if p == 0 else math.log(p) for p in (ci.ppl_lo, ci.ppl_hi))  # exp(-large) rounds to 0
    row.update(bpb=row["nll"] * per_byte, bpb_lo=lo * per_byte, bpb_hi=hi * per_byte)


def cell_key(
    length: int, stride: int, inv_freq: torch.Tensor | None, attention_factor: float, window: Windowed | None = None
) -> tuple:
    """What a cell's scores depend on besides model and data: length, stride, a hash of the frequencies
    (None: no RoPE), the attention factor and the window. Methods that coincide at a length (every
    interpolation at 1x is plain RoPE) share a key and are computed once."""
    freq = None if inv_freq is None else hashlib.sha256(inv_freq.detach().cpu().numpy().tobytes()).hexdigest()
    return length, stride, freq, float(attention_factor), window
