"""Evaluating a run directory: load what it needs, evaluate it, write and show the tables.

Each step is its own function; ``evaluate_run`` is just the four in a row, as
``posx eval-extrapolate`` and ``posx train eval.after_train=true`` use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from rich.console import Console

from posx.core.device import pick_device
from posx.core.errors import PosxError
from posx.data import store
from posx.data.tokenizer import Tokenizer
from posx.eval.extended import evaluate_extended
from posx.eval.extrapolate import evaluate
from posx.eval.tables import Evaluation, passkey_table, rich_table, write_tables
from posx.model.gpt import GPT
from posx.runs.records import RunMeta
from posx.runs.rundir import load_run


@dataclass
class Loaded:
    """A run ready to evaluate: its model on the device, its metadata, its held-out split."""

    run_dir: Path
    model: GPT
    meta: RunMeta
    val: torch.Tensor | np.ndarray  # held-out token ids (a token store's memmap)
    val_docs: np.ndarray  # where each held-out document starts
    tokenizer: Tokenizer  # what the ids mean
    device: torch.device


def load(run_dir: Path, cfg: DictConfig, console: Console) -> Loaded:
    """The run's model on ``cfg.device`` and the held-out split of the corpus it trained on."""
    device = pick_device(cfg.device)
    model, meta = load_run(run_dir, device=device)
    corpus = store.load(meta.data_config, cfg.data.cache_dir, console=console)
    trained_with = (meta.data.get("tokenizer") or {}).get("sha256")
    if trained_with and trained_with != corpus.tokenizer.sha256:
        raise PosxError(f"the corpus's tokenizer ({corpus.tokenizer.sha256[:12]}) is not the one {run_dir} trained "
                        f"with ({trained_with[:12]}); rebuild its token store or evaluate another run")
    if meta.data.get("sha256") and corpus.fingerprint.get("sha256") != meta.data["sha256"]:
        console.print("[yellow]warning:[/] the corpus differs from the one this run trained on "
                      "(different files or Python version); numbers are not comparable")
    return Loaded(Path(run_dir), model, meta, corpus.val, corpus.val_docs, corpus.tokenizer, device)


def evaluate_loaded(run: Loaded, cfg: DictConfig, console: Console) -> Evaluation:
    """A plain run: every method at every factor; an extended run: zero-shot and extended."""
    meta = run.meta
    beyond = f" absolute_beyond={cfg.eval.absolute_beyond}" if meta.model.pos == "absolute" else ""
    console.print(f"[bold]posx eval-extrapolate[/] {run.run_dir}  pos={meta.model.pos} T={meta.train_context}{beyond}")
    if meta.extended_from is not None:
        if cfg.eval.within_documents:
            console.print("[yellow]note:[/] eval.within_documents is not applied to an extended run")
        return evaluate_extended(run.model, meta, run.val, cfg.eval, cfg.results_dir, run.device,
                                 run.run_dir.name, console)
    return evaluate(run.model, meta, run.val, cfg.eval, run.device, run.run_dir.name, console, long_tables=True,
                    val_docs=run.val_docs, tokenizer=run.tokenizer)


def show(result: Evaluation, run_dir: Path, written: list[Path], console: Console) -> None:
    df = result.table
    reference = int(df["reference_context"].iloc[0])  # T that the factors multiply
    console.print(rich_table(df, f"perplexity, {run_dir.name} (T={reference}, {df['protocol'].iloc[0]})"))
    if df["within_documents"].fillna(False).astype(bool).any():
        per_length = df.drop_duplicates("eval_context")
        console.print("within documents: " + "; ".join(
            f"{r.factor:g}x: {int(r.documents)} documents, {int(r.tokens)} tokens" for r in per_length.itertuples()))
    if result.passkey:
        console.print(passkey_table(result.passkey_frame, f"passkey accuracy, {run_dir.name}"))
    console.print("wrote " + ", ".join(str(p) for p in written))


def evaluate_run(run_dir: Path, cfg: DictConfig, console: Console | None = None) -> Evaluation:
    """Load a run, evaluate it with ``cfg.eval`` on ``cfg.device``, write and show its tables."""
    console = console or Console()
    run = load(Path(run_dir), cfg, console)
    result = evaluate_loaded(run, cfg, console)
    show(result, run.run_dir, write_tables(result, run.run_dir), console)
    return result
