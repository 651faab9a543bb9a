"""Zero-shot extrapolation: perplexity at factor x T for each RoPE rescaling method.

Protocol (eval.protocol, posx/scoring.py): non-overlapping windows of length L = factor x T
taken in order from the held-out split, or sliding windows scoring the last eval.stride
tokens of each; every length scores the same number of tokens; the NLL is the mean over
tokens. Beside extrapolation.csv a run gets positions.csv (mean NLL per bucket of window
positions) and passkey.csv (posx/passkey.py). Rows that cannot be computed say why in ``status`` instead of crashing:
``out_of_range`` (learned absolute past its table), ``not_applicable`` (a RoPE method on a
model without RoPE), ``nonfinite`` (the model produced inf/NaN logits).

``factor`` is relative to ``reference_context``: T for a plain run, the parent's T for an
extended run (``posx extend``), which ``posx.extend_eval`` evaluates instead: its trained
frequencies after training (stage ``extended``) beside its parent with the same rescaling
and no training (stage ``zero-shot``). Every row of a plain run is ``zero-shot``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import torch
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from posx import data as data_mod
from posx import io, passkey, rope, scoring
from posx.errors import PosxError
from posx.model import GPT
from posx.positions import PositionOutOfRange
from posx.progress import Reporter
from posx.runs import RunMeta, load_run
from posx.train import pick_device

COLUMNS = ["run", "pos", "train_context", "eval_context", "factor", "method", "scale",
           "attention_factor", "nll", "ppl", "tokens", "status", "protocol", "stride", "reference_context",
           "stage", "absolute_beyond"]
POSITION_COLUMNS = ["run", "pos", "train_context", "eval_context", "factor", "method", "protocol",
                    "bucket_start", "bucket_end", "tokens", "nll"]
PASSKEY_COLUMNS = ["run", "pos", "train_context", "eval_context", "factor", "method", "variant",
                   "depth_lo", "depth_hi", "trials", "accuracy", "key_nll", "status"]
PROTOCOL = "nonoverlapping"  # the default eval.protocol


def _ramp(ev: DictConfig) -> dict:
    """YaRN's ramp keys, shared by yarn, dynamic_yarn and ntk_by_parts."""
    return {"beta_fast": ev.yarn.beta_fast, "beta_slow": ev.yarn.beta_slow, "truncate": ev.yarn.truncate}


def _listed(values) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


# Method -> how to call ``rope.frequencies`` for one row: (ev, s, L) -> (factor, params), with
# s the row's scale (L / T, or eval.scale) and L its length. Every method is listed
# explicitly; a test checks this table covers rope.METHODS exactly.
METHOD_ARGS: dict[str, Callable[[DictConfig, float, int], tuple[float, dict]]] = {
    "none": lambda ev, s, L: (s, {}),  # ignores the factor
    "pi": lambda ev, s, L: (s, {}),
    "ntk": lambda ev, s, L: (s, {}),
    "dynamic_ntk": lambda ev, s, L: (s if ev.dynamic_ntk.factor is None else float(ev.dynamic_ntk.factor),
                                     {"length": L}),
    "yarn": lambda ev, s, L: (s, {**_ramp(ev), "attention_factor": ev.yarn.attention_factor}),
    "dynamic_yarn": lambda ev, s, L: (1.0, {**_ramp(ev), "length": L}),  # s = max(1, L / T) inside
    "ntk_by_parts": lambda ev, s, L: (s, _ramp(ev)),
    "abf": lambda ev, s, L: (s, {"new_base": ev.abf_base}),  # ignores the factor
    "llama3": lambda ev, s, L: (s, {"low_freq_factor": ev.llama3.low_freq_factor,
                                    "high_freq_factor": ev.llama3.high_freq_factor}),
    "longrope": lambda ev, s, L: (s, {"short_factor": _listed(ev.longrope.short_factor),
                                      "long_factor": _listed(ev.longrope.long_factor),
                                      "attention_factor": ev.longrope.attention_factor, "length": L}),
}


def method_frequencies(method: str, ev: DictConfig, head_dim: int, base: float, train_context: int,
                       scale: float, length: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and attention factor of ``method`` for one (scale, length) row."""
    if method not in METHOD_ARGS:
        raise PosxError(f"eval.methods has unknown method '{method}'; choose from {', '.join(METHOD_ARGS)}")
    factor, params = METHOD_ARGS[method](ev, scale, length)
    return rope.frequencies(method, head_dim, base=base, factor=factor, original_context=train_context,
                            **params)


def window_nll(model: GPT, tokens: torch.Tensor, length: int, n_windows: int, batch_tokens: int,
               device: torch.device) -> tuple[float, int]:
    """Summed NLL and token count over n_windows consecutive windows of ``length``: the
    non-overlapping protocol of ``scoring.score`` (stride = length)."""
    scores = scoring.score(model, tokens, length, length, n_windows * length, batch_tokens, device)
    return scores.total, scores.tokens


@dataclass
class Extras:
    """The long tables evaluate() fills beside its main one (rows as dicts)."""

    positions: list = field(default_factory=list)  # positions.csv: NLL per position bucket
    passkey: list = field(default_factory=list)  # passkey.csv: per (method, length, variant, depth)


def evaluate(model: GPT, meta: RunMeta, val: torch.Tensor, ev: DictConfig, device: torch.device,
             run_name: str, console: Console | None = None, extras: Extras | None = None) -> pd.DataFrame:
    """One row per (factor, method); the model's RoPE frequencies are restored afterwards.

    With ``extras``, also fills the per-position table and (eval.passkey.enabled) passkey rows.
    """
    T = meta.train_context
    lengths = [round(f * T) for f in ev.factors]
    strides = [scoring.stride_for(ev.protocol, ev.stride, T, L) for L in lengths]
    n_tokens = scoring.tokens_for(ev.protocol, ev.tokens, lengths, strides)
    needed = max(scoring.tokens_needed(L, s, n_tokens) for L, s in zip(lengths, strides))
    if len(val) < needed:
        raise PosxError(f"the held-out split has {len(val)} tokens but eval.tokens asks for {n_tokens} "
                        f"at each length ({needed} read); lower eval.tokens or use more data")
    scales = [float(ev.scale) if ev.scale is not None else L / T for L in lengths]
    rope_args = {"head_dim": meta.model.head_dim, "base": meta.model.rope_base, "train_context": T}
    if model.pos.uses_rope:  # bad method parameters fail here, before any row is computed
        for method in ev.methods:
            for scale, L in zip(scales, lengths):
                method_frequencies(method, ev, scale=scale, length=L, **rope_args)
    pk = ev.passkey
    variants = list(pk.variants) if extras is not None and pk.enabled else []
    trials = {(L, v): passkey.make_trials(val, L, v, pk.trials, pk.digits, pk.depth_buckets, pk.seed)
              for L in lengths for v in variants}
    width = scoring.bucket_width_for(ev.bucket_width, T)
    beyond = "none"  # no patch past a table (encodings without a table never need one)
    if model.pos.kind == "absolute":
        beyond = ev.absolute_beyond
        model.pos.set_beyond(beyond)
    model.eval()
    rows = []
    cells = [(m, f, L, s, sc) for m in ev.methods for f, L, s, sc in zip(ev.factors, lengths, strides, scales)]
    with Reporter(console or Console(quiet=True), "eval", len(cells)) as progress:
        for method, factor, L, stride, scale in cells:
            row = {"run": run_name, "pos": meta.model.pos, "train_context": T, "eval_context": L,
                   "factor": float(factor), "method": method, "scale": scale, "attention_factor": 1.0,
                   "nll": math.nan, "ppl": math.nan, "tokens": 0, "status": "ok", "protocol": ev.protocol,
                   "stride": stride, "reference_context": T, "stage": "zero-shot", "absolute_beyond": beyond}
            rows.append(row)
            cell_trials = {v: trials[(L, v)] for v in variants}
            try:
                scores, results = _score_cell(model, val, ev, device, row, n_tokens, cell_trials, rope_args)
            except BaseException:
                if model.pos.kind == "absolute":
                    model.pos.set_beyond("none")
                raise
            if extras is not None:
                keys = {k: row[k] for k in ("run", "pos", "train_context", "eval_context", "factor",
                                            "method")}
                if row["status"] == "ok":
                    for start, end, total, count in scoring.buckets(scores, width):
                        extras.positions.append({**keys, "protocol": ev.protocol, "bucket_start": start,
                                                 "bucket_end": end, "tokens": count, "nll": total / count})
                for v in variants:
                    for r in _passkey_rows(row["status"], cell_trials[v], results.get(v), pk.depth_buckets):
                        extras.passkey.append({**keys, "variant": v, **r})
            progress.advance(f"{method} {factor:g}x (L={L}) " +
                             (f"ppl {row['ppl']:.3f}" if row["status"] == "ok" else row["status"]))
    if model.pos.kind == "absolute":
        model.pos.set_beyond("none")
    return pd.DataFrame(rows, columns=COLUMNS)


def _score_cell(model: GPT, val: torch.Tensor, ev: DictConfig, device: torch.device, row: dict,
                n_tokens: int, trials: dict, rope_args: dict) -> tuple[scoring.Scores | None, dict]:
    """Fill one row (method at one length) in place; returns its scores and passkey results."""
    L, method = row["eval_context"], row["method"]
    if method != "none" and not model.pos.uses_rope:
        row["status"] = "not_applicable"
        return None, {}
    limit = model.pos.max_length()
    if limit is not None and L > limit:
        row["status"] = "out_of_range"
        return None, {}
    if model.pos.uses_rope:
        inv_freq, attn = method_frequencies(method, ev, scale=row["scale"], length=L, **rope_args)
        model.pos.set_frequencies(inv_freq.to(device), attn)
        row["attention_factor"] = attn
    try:
        scores = scoring.score(model, val, L, row["stride"], n_tokens, ev.batch_tokens, device)
        results = {v: passkey.score_trials(model, t, ev.batch_tokens, device) for v, t in trials.items()}
    except PositionOutOfRange:
        row["status"] = "out_of_range"
        return None, {}
    finally:
        if model.pos.uses_rope:
            model.pos.reset()
    row["tokens"] = scores.tokens
    if not math.isfinite(scores.total):
        row["status"] = "nonfinite"
        return scores, results
    row["nll"] = scores.total / scores.tokens
    row["ppl"] = math.exp(row["nll"])
    return scores, results


def _passkey_rows(status: str, trials: list, result, depth_buckets: int) -> list[dict]:
    """Passkey rows of one cell; a cell that was not scored gets its status in every row."""
    if result is None:
        return [{"depth_lo": b / depth_buckets, "depth_hi": (b + 1) / depth_buckets, "trials": 0,
                 "accuracy": math.nan, "key_nll": math.nan, "status": status} for b in range(depth_buckets)]
    return passkey.summarize(trials, *result, depth_buckets)



def write_tables(df: pd.DataFrame, run_dir: Path, extras: Extras | None = None) -> list[Path]:
    """extrapolation.csv and extrapolation.md (and positions.csv, passkey.csv from ``extras``),
    each replaced atomically. A passkey.csv left by an earlier evaluation is removed when this
    one ran no passkey test, so no table describes another evaluation than its neighbours."""
    with io.atomic_path(run_dir / "extrapolation.csv") as tmp:
        df.to_csv(tmp, index=False)
    io.write_text(run_dir / "extrapolation.md", df.to_markdown(index=False, floatfmt=".4g") + "\n")
    written = [run_dir / "extrapolation.csv", run_dir / "extrapolation.md"]
    if extras is None:
        return written
    for name, rows, columns in (("positions.csv", extras.positions, POSITION_COLUMNS),
                                ("passkey.csv", extras.passkey, PASSKEY_COLUMNS)):
        if rows:
            with io.atomic_path(run_dir / name) as tmp:
                pd.DataFrame(rows, columns=columns).to_csv(tmp, index=False)
            written.append(run_dir / name)
        else:
            (run_dir / name).unlink(missing_ok=True)
    return written


def rich_table(df: pd.DataFrame, title: str) -> Table:
    """Methods (and stages, when there are two) by rows, factors by columns, perplexity (or
    the status) in the cells."""
    factors = sorted(df["factor"].unique())
    if df["stage"].nunique() > 1:
        df = df.assign(method=df["method"] + " " + df["stage"])
    table = Table(title=title)
    table.add_column("method")
    for f in factors:
        length = int(df.loc[df["factor"] == f, "eval_context"].iloc[0])
        table.add_column(f"{f:g}x ({length})", justify="right")
    for method in dict.fromkeys(df["method"]):
        cells = []
        for f in factors:
            r = df[(df["method"] == method) & (df["factor"] == f)].iloc[0]
            cells.append(f"{r['ppl']:.3f}" if r["status"] == "ok" else f"[dim]{r['status']}[/]")
        table.add_row(method, *cells)
    return table


def passkey_table(pk: pd.DataFrame, title: str) -> Table:
    """Method x variant by rows, factors by columns, accuracy over all depths in the cells."""
    factors = sorted(pk["factor"].unique())
    table = Table(title=title)
    table.add_column("method")
    table.add_column("variant")
    for f in factors:
        table.add_column(f"{f:g}x", justify="right")
    for (method, variant), group in pk.groupby(["method", "variant"], sort=False):
        if (group["status"] == "not_applicable").all():
            continue  # a RoPE method on a model without RoPE: the perplexity table says so
        cells = []
        for f in factors:
            g = group[group["factor"] == f]
            ok = g[g["status"] == "ok"]
            if ok.empty:
                cells.append(f"[dim]{g['status'].iloc[0]}[/]")
            else:
                hits = (ok["accuracy"] * ok["trials"]).sum()
                cells.append(f"{hits:.0f}/{ok['trials'].sum()}")
        table.add_row(method, variant, *cells)
    return table


def evaluate_run(run_dir: Path, cfg: DictConfig, console: Console | None = None) -> pd.DataFrame:
    """Load a run, evaluate it with ``cfg.eval`` on ``cfg.device``, write its tables."""
    console = console or Console()
    device = pick_device(cfg.device)
    model, meta = load_run(run_dir, device=device)
    dcfg = meta.data.get("config") or {}
    corpus = data_mod.load_corpus(dcfg.get("source", "stdlib"), dcfg.get("path"),
                                  dcfg.get("val_fraction", 0.05), cfg.data.cache_dir, console=console)
    if meta.data.get("sha256") and corpus.fingerprint.get("sha256") != meta.data["sha256"]:
        console.print("[yellow]warning:[/] the corpus differs from the one this run trained on "
                      "(different files or Python version); numbers are not comparable")
    beyond = f" absolute_beyond={cfg.eval.absolute_beyond}" if meta.model.pos == "absolute" else ""
    console.print(f"[bold]posx eval-extrapolate[/] {run_dir}  pos={meta.model.pos} T={meta.train_context}{beyond}")
    extras = Extras()
    if meta.extended_from:
        from posx.extend_eval import evaluate_extended

        df = evaluate_extended(model, meta, corpus.val, cfg, device, run_dir, console)
    else:
        df = evaluate(model, meta, corpus.val, cfg.eval, device, run_dir.name, console, extras)
    written = write_tables(df, run_dir, extras)
    reference = int(df["reference_context"].iloc[0])  # T that the factors multiply
    console.print(rich_table(df, f"perplexity, {run_dir.name} (T={reference}, {df['protocol'].iloc[0]})"))
    if extras.passkey:
        console.print(passkey_table(pd.DataFrame(extras.passkey, columns=PASSKEY_COLUMNS),
                                    f"passkey accuracy, {run_dir.name}"))
    console.print("wrote " + ", ".join(str(p) for p in written))
    return df
