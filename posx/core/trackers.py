"""Optional experiment trackers (the ``logger`` config group): TensorBoard or Weights & Biases.

Off by default (``logger=none``). ``logger=tensorboard`` writes event files under
``<run>/logs/`` (or ``logger.dir``); ``logger=wandb`` logs a W&B run, offline by default
(``logger.mode=offline``: files under ``<run>/wandb/``, no network; ``wandb sync`` uploads them
later). Training logs its loss, learning rate and throughput by step, and its validation loss;
an evaluation logs each method's perplexity (and 95% interval) by evaluation length. A tracker
that is asked for but not installed is a one-line error before any work.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from posx.core.errors import PosxError

LOGGERS = ("none", "tensorboard", "wandb")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_logger(name: str) -> None:
    """A known logger whose package is installed, else a one-line error."""
    if name not in LOGGERS:
        raise PosxError(f"logger={name} is unknown; choose one of {', '.join(LOGGERS)}")
    package = PACKAGES.get(name)
    if package and importlib.util.find_spec(package) is None:
        raise PosxError(
            f"logger={name} needs the {package} package: pip install 'posx[trackers]' (or pip install {package})"
        )


class Tracker:
    """The no-op tracker (``logger=none``); the others override what they record."""

    def log(self, values: dict, step: int) -> None:
        pass

    def log_eval(self, rows: list[dict], stage_names: bool = False) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _finite(values: dict) -> dict:
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


class TensorBoard(Tracker):
    def __init__(self, log_dir: Path, config_text: str):
        from torch.utils.tensorboard import SummaryWriter  # optional dependency: imported on use only

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.writer.add_text("config", "```\n" + config_text + "\n```")

    def log(self, values: dict, step: int) -> None:
        for key, value in _finite(values).items():
            self.writer.add_scalar(key, value, global_step=step)

    def log_eval(self, rows: list[dict], stage_names: bool = False) -> None:
        """One curve per method (and stage): perplexity and its interval by evaluation length."""
        for r in rows:
            name = f"{r['method']}-{r['stage']}" if stage_names else r["method"]
            for key in ("ppl", "ppl_lo", "ppl_hi"):
                value = r.get(key)
                if value is not None and math.isfinite(float(value)):
                    self.writer.add_scalar(f"eval/{name}/{key}", float(value), global_step=int(r["eval_context"]))

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class Wandb(Tracker):
    def __init__(self, run_dir: Path, name: str, project: str, mode: str, config: dict, log_dir: Path | None):
        import wandb  # optional dependency: imported on use only

        self.wandb = wandb
        where = Path(log_dir) if log_dir else Path(run_dir)
        where.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=project, name=name, dir=str(where), mode=mode, config=config, reinit="create_new")

    def log(self, values: dict, step: int) -> None:
        self.run.log(_finite(values), step=step)

    def log_eval(self, rows: list[dict], stage_names: bool = False) -> None:
        """A table of every row, and each cell's perplexity in the run summary."""
        columns = ["method", "stage", "factor", "eval_context", "ppl", "ppl_lo", "ppl_hi", "status"]
        table = self.wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])
        self.run.log({"eval/table": table})
        for r in rows:
            if r.get("status") == "ok":
                name = f"{r['method']}-{r['stage']}" if stage_names else r["method"]
                self.run.summary[f"eval/{name}/ppl@{float(r['factor']):g}x"] = float(r["ppl"])

    def close(self) -> None:
        self.run.finish()


def open_tracker(logger, run_dir: Path, name: str, config: dict, config_text: str) -> Tracker:
    """The tracker ``logger`` (the config's ``logger`` node) asks for, writing beside ``run_dir``."""
    check_logger(logger.name)
    log_dir = Path(logger.dir) if logger.dir else None
    if logger.name == "tensorboard":
        return TensorBoard(log_dir or Path(run_dir) / "logs", config_text)
    if logger.name == "wandb":
        return Wandb(Path(run_dir), name, logger.project, logger.mode, config, log_dir)
    return Tracker()
