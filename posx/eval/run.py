"""Evaluating a run directory: load it, evaluate it (or show a stored evaluation of the same
settings again), write and show the tables: ``posx eval-extrapolate`` and ``eval.after_train``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.text import Text

from posx.core.console import new_console
from posx.core.device import pick_device, set_threads
from posx.core.errors import PosxError
from posx.core.trackers import open_tracker
from posx.data import store
from posx.data.tokenizer import Tokenizer
from posx.eval import history
from posx.eval.extended import evaluate_extended
from posx.eval.extrapolate import evaluate
from posx.eval.tables import Evaluation, passkey_table, rich_table
from posx.model.gpt import GPT
from posx.runs import code
from posx.runs.paths import EVAL_DIR
from posx.runs.records import RunMeta
from posx.runs.rundir import load_run
from posx.schema.config import Config, EvalConfig


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


def load(run_dir: Path, cfg: Config, console: Console) -> Loaded:
    """The run's model on ``cfg.device`` and the held-out split of the corpus it trained on."""
    device = pick_device(cfg.device)
    set_threads(cfg.threads)
    model, meta = load_run(run_dir, device=device)
    corpus = store.load(meta.data_config, cfg.data.cache_dir, console=console)
    trained_with = (meta.data.get("tokenizer") or {}).get("sha256")
    if trained_with and trained_with != corpus.tokenizer.sha256:
        raise PosxError(
            f"the corpus's tokenizer ({corpus.tokenizer.sha256[:12]}) is not the one {run_dir} trained "
            f"with ({trained_with[:12]}); rebuild its token store or evaluate another run"
        )
    if meta.data.get("sha256") and corpus.fingerprint.get("sha256") != meta.data["sha256"]:
        console.print(
            "[yellow]warning:[/] the corpus differs from the one this run trained on "
            "(different files or Python version); numbers are not comparable"
        )
    return Loaded(Path(run_dir), model, meta, corpus.val, corpus.val_docs, corpus.tokenizer, device)


# Evaluation settings an extended run's evaluation does not read: its frequencies are its own.
NOT_FOR_EXTENDED = ("methods", "scale", "within_documents")


def evaluate_loaded(run: Loaded, cfg: Config, console: Console) -> Evaluation:
    """A plain run: every method at every factor; an extended run: zero-shot and extended."""
    meta = run.meta
    beyond = f" absolute_beyond={cfg.eval.absolute_beyond}" if meta.model.pos.name == "absolute" else ""
    heading = f" {run.run_dir}  pos={meta.model.pos.name} T={meta.train_context}{beyond}"
    console.print(Text.assemble(("posx eval-extrapolate", "bold"), heading))  # the path as written
    if meta.extended_from is not None:
        default = EvalConfig()
        unused = [f"eval.{key}" for key in NOT_FOR_EXTENDED if getattr(cfg.eval, key) != getattr(default, key)]
        if unused:
            console.print(
                f"[yellow]note:[/] {', '.join(unused)} {'is' if len(unused) == 1 else 'are'} not applied to an "
                "extended run (it is scored with its own frequencies, and zero-shot with the same)",
                highlight=False,
            )
        return evaluate_extended(
            run.model, meta, run.val, cfg.eval, cfg.results_dir, run.device, run.run_dir.name, console, run.tokenizer
        )
    return evaluate(
        run.model,
        meta,
        run.val,
        cfg.eval,
        run.device,
        run.run_dir.name,
        console,
        long_tables=True,
        val_docs=run.val_docs,
        tokenizer=run.tokenizer,
    )


def estimator(df) -> str:
    """What the table estimates: the perplexity of the held-out tokens it scored, not of the whole split."""
    counts = sorted({int(n) for n in df["tokens"]})
    n = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,} to {counts[-1]:,}"
    within = df["within_documents"].fillna(False).astype(bool).any()
    scored = f"{n} held-out tokens within documents" if within else f"the first {n} held-out tokens"
    return f"perplexity of {scored} at each length ± half the 95% interval over their windows"


def show(result: Evaluation, run_dir: Path, written: list[Path], console: Console, verb: str = "wrote") -> None:
    df = result.table
    reference = int(df["reference_context"].iloc[0])  # T that the factors multiply
    eid = f", eval {df['eval_id'].iloc[0]}" if df["eval_id"].iloc[0] else ""
    # an extended run's factors are of its parent's T, not of the T it trained at
    scale = f"factors of the parent's T={reference}" if (df["stage"] == "extended").any() else f"T={reference}"
    console.print(rich_table(df, f"{estimator(df)}, {run_dir.name} ({scale}, {df['protocol'].iloc[0]}{eid})"))
    overflowed = df[(df["status"] == "ok") & (df["ppl"] == math.inf)]
    if not overflowed.empty:
        console.print(
            f"note: ppl inf: the mean NLL ({overflowed['nll'].min():.4g} nats or more) is past what exp holds; "
            "the model diverged (its training loss says when)",
            style="yellow",
            markup=False,
        )
    if df["within_documents"].fillna(False).astype(bool).any():
        per_length = df.drop_duplicates("eval_context")
        console.print(
            "within documents: "
            + "; ".join(
                f"{r.factor:g}x: {int(r.documents)} documents, {int(r.tokens)} tokens" for r in per_length.itertuples()
            )
        )
    if result.passkey:
        pk = result.passkey_frame
        ok = pk[pk["status"] == "ok"]
        nll = (ok["key_nll"] * ok["trials"]).sum() / max(ok["trials"].sum(), 1)
        none = "passkey: 0 of {n} trials retrieved at every length, method and variant "
        none += f"(mean key NLL {nll:.3f}, chance ln 10 = 2.303; passkey.csv has the rows)"
        _show_answers(console, pk, f"passkey accuracy, {run_dir.name}", "variant", none)
    if result.tasks:
        none = "task suite: 0 of {n} answers exact at every length, method and task (tasks.csv has the rows)"
        _show_answers(console, result.tasks_frame, f"task suite, exact answers, {run_dir.name}", "task", none)
    console.print(f"{verb} " + ", ".join(str(p) for p in written), markup=False)


def _show_answers(console: Console, frame, title: str, by: str, none: str) -> None:
    """The passkey's or task suite's table (method x ``by``), or the line ``none`` when no trial is answered."""
    ok = frame[frame["status"] == "ok"]
    if len(ok) and (ok["accuracy"] == 0).all():
        console.print(none.format(n=int(ok["trials"].sum())), highlight=False)
    else:
        console.print(passkey_table(frame, title, by=by))


def evaluate_run(
    run_dir: Path, cfg: Config, console: Console | None = None, force: bool = False, allow_changed_code: bool = False
) -> Evaluation:
    """Load a run, evaluate it with ``cfg.eval``, keep and show its tables. A stored evaluation of the
    same settings is shown again unless ``force``; code from outside posx that changed since it was
    recorded is refused unless ``allow_changed_code``."""
    console = console or new_console()
    run_dir = Path(run_dir)
    settings = history.settings_of(cfg.eval)
    eid = history.eval_id(settings)
    history.check_writable(run_dir, eid)
    for line in code.check(run_dir, allow_changed_code, "evaluate it"):
        console.print(f"warning: {line}; evaluating with the code as it is now ({code.ALLOW_FLAG})", markup=False)
    run = load(run_dir, cfg, console)
    folder = None if force else history.stored(run_dir, eid, run.meta.weights_sha256)
    if folder is not None and code.check(folder, allow_changed_code, "evaluate again"):
        folder = None  # its methods' code changed, and the user allowed it: score them again
    if folder is not None:
        console.print(
            f"{run_dir} was already evaluated with these settings ({folder}); nothing computed "
            "(pass --force to evaluate again)",
            highlight=False,
        )
        result = history.load(folder)
        show(result, run_dir, history.make_current(run_dir, folder), console, verb="current again:")
        return result
    result = evaluate_loaded(run, cfg, console)
    written = history.save(result, run_dir, settings, str(run.device), run.meta.weights_sha256)
    code.record(run_dir / EVAL_DIR / eid, code.method_sources(cfg.eval.methods))
    show(result, run.run_dir, written, console)
    if cfg.logger.name != "none":
        record = {"eval_id": eid, "settings": settings}
        with open_tracker(cfg.logger, run_dir, f"{run_dir.name}-eval-{eid}", record, yaml.safe_dump(record)) as tracker:
            tracker.log_eval(result.table.to_dict("records"), stage_names=result.table["stage"].nunique() > 1)
    return result
