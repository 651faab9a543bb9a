"""Optional experiment trackers (``logger=tensorboard`` or ``wandb``; off by default); one that
cannot start is one line when the config is checked (``check_tracker``, without any network)."""

from __future__ import annotations

import importlib
import importlib.util
import math
import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

from posx.core import files
from posx.core.errors import PosxError, unknown

LOGGERS = ("none", "tensorboard", "wandb")
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
MODULES = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb"}  # what each tracker imports
WANDB_HOST = "https://api.wandb.ai"  # wandb's server unless WANDB_BASE_URL names another


def check_tracker(logger) -> None:
    """The tracker the ``logger`` node asks for can start, else one line naming the setting."""
    if logger.name not in LOGGERS:
        raise unknown("logger", logger.name, LOGGERS)
    module = MODULES.get(logger.name)
    if module is None:
        return
    package = PACKAGES[logger.name]
    if importlib.util.find_spec(package) is None:
        raise PosxError(
            f"logger={logger.name} needs the {package} package: pip install 'posx[trackers]' (or pip install {package})"
        )
    try:
        importlib.import_module(module)
    except Exception as exc:  # a broken install fails in many ways (ImportError, protobuf's TypeError)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PosxError(
            f"logger={logger.name} cannot start: importing {module} failed ({first}); reinstall it "
            f"(pip install -U {PACKAGES[logger.name]}) or use logger=none"
        ) from None
    if logger.name == "wandb" and logger.mode == "online" and not wandb_key_present():
        raise PosxError(
            "logger=wandb logger.mode=online needs a W&B API key and none is set (WANDB_API_KEY, or "
            "`wandb login`); use logger.mode=offline (sync later with `wandb sync`), or logger=none"
        )


def wandb_key_present() -> bool:
    """WANDB_API_KEY, or a netrc entry for wandb's host (``wandb login`` writes $NETRC or ~/.netrc)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or WANDB_HOST).hostname or ""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        entry = netrc.netrc(str(path)).authenticators(host) if path.is_file() else None
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


class Tracker:
    """The no-op tracker (``logger=none``)."""

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
    """The tracker the ``logger`` node asks for, writing beside ``run_dir``."""
    check_tracker(logger)
    log_dir = Path(logger.dir) if logger.dir else None
    if logger.name == "tensorboard":
        return TensorBoard(log_dir or files.no_link(Path(run_dir) / "logs", "the TensorBoard directory"), config_text)
    if logger.name == "wandb":
        if log_dir is None:  # wandb writes into <run>/wandb/
            files.no_link(Path(run_dir) / "wandb", "the W&B directory")
        return Wandb(Path(run_dir), name, logger.project, logger.mode, config, log_dir)
    return Tracker()
