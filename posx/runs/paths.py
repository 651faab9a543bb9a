"""Run directories without torch: their file names, what makes a directory a run, finding a run
by name, and reading model.json and config.yaml, so ``posx runs``, ``compare`` and ``report``
start without torch (``posx.runs.rundir`` saves and loads the model)."""

from __future__ import annotations

import difflib
import glob
import json
from pathlib import Path

import yaml

from posx.core import fieldcheck, files, lock
from posx.core.errors import PosxError
from posx.runs import legacy, resumable
from posx.runs.records import Lineage, RunMeta
from posx.schema.config import Config

WEIGHTS = "model.safetensors"
META = "model.json"
CONFIG = "config.yaml"
# Any of these makes a directory a run directory (finished or not, evaluated or not).
RUN_MARKERS = (META, CONFIG, "extrapolation.csv")
EVAL_DIR = "eval"  # a run's stored evaluations (posx.eval.history)
TASK_CURVE = "task_curve.csv"  # accuracy at T against training tokens (posx.train.taskcurve)
WRITTEN_DIRS = {resumable.DIRNAME: "the checkpoint directory", EVAL_DIR: "the evaluation directory"}  # inside a run
NOT_RUNS = frozenset({*WRITTEN_DIRS, "cache", "reports"})  # folders that never hold runs
RESULTS = Config.results_dir  # the results directory run names are looked up in unless told otherwise


def interpolation_in(node) -> str | None:
    """The first ``${...}`` string anywhere in a plain config (mappings and lists); None if none."""
    if isinstance(node, dict):
        return next((found for v in node.values() if (found := interpolation_in(v))), None)
    if isinstance(node, list):
        return next((found for v in node if (found := interpolation_in(v))), None)
    return node if isinstance(node, str) and "${" in node else None


def read_config(run_dir: Path) -> dict:
    """The run's config.yaml as plain data (``posx.runs.legacy`` reads old spellings): a mapping,
    no tags, no ``${...}`` (posx writes resolved configs; resolving one could read the environment)."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        refuse_run_folder(run_dir)
        raise PosxError(f"{run_dir} has no {CONFIG}; it is not a posx run, so there is nothing to resume")
    try:
        data = fieldcheck.load_yaml(files.read_regular(path).decode("utf-8"), path, "restore it from a copy of the run")
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PosxError(
            f"{path} is damaged ({exc.__class__.__name__}: not the YAML posx wrote, whole, with the run); "
            "restore it from a copy of the run"
        ) from None
    if not isinstance(data, dict):
        raise PosxError(
            f"{path} is damaged (it holds a {type(data).__name__}, not a config mapping); "
            "restore it from a copy of the run"
        )
    found = interpolation_in(data)
    if found is not None:
        raise PosxError(
            f"{path} contains the interpolation {found!r}; posx writes resolved configs and "
            "reads them as data — remove it"
        )
    return legacy.upgrade_config(data)


def check_writable(run_dir: Path) -> None:
    """Refuse, before any work, a run whose folders posx writes into are links or not directories."""
    for name, what in WRITTEN_DIRS.items():
        files.check_dir(Path(run_dir) / name, what)


def new_run_dir(results_dir: str | Path, name: str) -> Path:
    return files.unique_dir(Path(results_dir) / "runs", name, "choose another name=")


def new_named_run_dir(results_dir: str | Path, name: str) -> Path:
    """Create results/runs/<name>/ for a chosen name, refusing one that exists (a silent -2 misleads)."""
    root = Path(results_dir) / "runs"
    root.mkdir(parents=True, exist_ok=True)
    try:
        (root / name).mkdir()
    except FileExistsError:
        raise PosxError(
            f"{root / name} already exists; choose another name= (continue a stopped run with "
            f"`posx train --resume {name}`, evaluate it with `posx eval-extrapolate {name}`)"
        ) from None
    return root / name


def read_meta(run_dir: Path) -> RunMeta:
    path = run_dir / META
    if not path.is_file():
        refuse_run_folder(run_dir)
        refuse_unfinished(run_dir)
        raise PosxError(f"{run_dir} has no {META}; is it a posx run directory? (train one with `posx train`)")
    try:
        data = fieldcheck.load_json(files.read_regular(path).decode("utf-8"), path, "re-train the run")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PosxError(f"{path} is unreadable ({exc.__class__.__name__}); re-train the run") from exc
    return RunMeta.from_dict(data, path)


def refuse_run_folder(path: Path) -> None:
    """A directory of runs, or a results directory, where one run is meant: one line naming one."""
    for folder, what in ((Path(path), "a directory of"), (Path(path) / "runs", "a results directory with")):
        inner = sorted(p for p in folder.glob("*/") if is_run_dir(p))
        if inner:
            raise PosxError(f"{path} is {what} {len(inner)} run(s), not a run; name one of them, e.g. {inner[0]}")


def refuse_none_finished(results_dir: str | Path) -> None:
    """``--latest`` with no finished run: one line naming the newest unfinished run, if any."""
    root = Path(results_dir)
    started = [p.parent for pattern in ("runs/*/", "sweeps/*/*/") for p in root.glob(pattern + CONFIG)]
    if not started:
        raise PosxError(f"no runs under {results_dir}/; train one first with `posx train`")
    newest = max(started, key=lambda p: (p / CONFIG).stat().st_mtime)
    refuse_unfinished(newest, f"there is no finished run under {results_dir}/ yet: ")


def refuse_unfinished(run_dir: Path, lead: str = "") -> None:
    """A run that has not finished training: one line saying it trains now, or how to finish it."""
    if not (Path(run_dir) / CONFIG).is_file():
        return
    if lock.held(run_dir):
        raise PosxError(f"{lead}{run_dir} is still training; evaluate it once its training ends")
    step = resumable.latest_step(run_dir)
    where = "no checkpoint yet" if step is None else f"its last checkpoint is at step {step}"
    raise PosxError(
        f"{lead}{run_dir} has not finished training ({where}); finish it with `posx train --resume {run_dir}`"
    )


def require_dir(path: Path, advice: str) -> None:
    """One line, then ``advice``, unless ``path`` is a directory."""
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise PosxError(f"{path} {what}; {advice}")


def is_run(path: Path) -> bool:
    """A finished run: its model.json (written last, after the weights) is there."""
    return (Path(path) / META).is_file()


def is_run_dir(path: Path) -> bool:
    """A run directory at any stage: trained, stopped with a config, or only evaluated."""
    return any((Path(path) / name).is_file() for name in RUN_MARKERS)


def lineage_of(run_dir: Path) -> Lineage | None:
    """An extension's parent (from model.json, or an unfinished one's checkpoint); else None."""
    if is_run(run_dir):
        return read_meta(run_dir).extended_from
    extras = resumable.saved_extras(run_dir)
    return None if extras is None else extras.extended_from


def display_name(run_dir: str | Path, results_dir: str | Path = RESULTS) -> str:
    """The name ``posx runs`` prints, which ``resolve_run`` takes back: a run under ``runs/`` by its
    directory name, a sweep job as ``sweeps/<sweep>/<job>`` (sweeps reuse job names), else its path."""
    return name_below(Path(run_dir), Path(results_dir).resolve())


def name_below(run_dir: Path, root: Path) -> str:
    """``display_name`` with the results directory resolved once (``root``)."""
    try:
        below = run_dir.resolve().relative_to(root).parts
    except ValueError:
        return str(run_dir)
    if len(below) == 2 and below[0] == "runs":
        return below[1]
    if len(below) == 3 and below[0] == "sweeps":
        return "/".join(below)
    return str(run_dir)


def resolve_run(run: str | None, results_dir: str | Path, latest: bool = False) -> Path:
    """A run by path, name, ``sweeps/<sweep>/<job>`` or a job's name in one sweep; or the latest."""
    if latest:
        found = [p.parent for pattern in ("runs/*/", "sweeps/*/*/") for p in Path(results_dir).glob(pattern + META)]
        runs = sorted(found, key=lambda p: (p / META).stat().st_mtime)  # every finished run, oldest first
        if not runs:
            refuse_none_finished(results_dir)
        return runs[-1]
    if not run:
        raise PosxError("name a run: a directory, or a name `posx runs` lists")
    for candidate in (Path(run), Path(results_dir) / "runs" / run, Path(results_dir) / run):
        if candidate.is_dir():
            return candidate
    listing = "`posx runs`" if Path(results_dir) == Path(RESULTS) else f"`posx runs {results_dir}`"
    jobs: list[Path] = []  # the sweep jobs called ``run``
    if "/" not in run:
        jobs = [p for p in sorted(Path(results_dir).glob(f"sweeps/*/{glob.escape(run)}")) if is_run_dir(p)]
    if len(jobs) == 1:
        return jobs[0]
    if jobs:
        names = ", ".join(display_name(j, results_dir) for j in jobs)
        raise PosxError(f"run '{run}' is a job of {len(jobs)} sweeps; name one of them: {names}")
    close = closest_names(run, run_names(results_dir))
    raise PosxError(
        f"run '{run}' not found (looked for it as a path and under {results_dir}/runs and {results_dir}/sweeps)"
        f"{'; closest names: ' + ', '.join(close) if close else ''}; list runs with {listing}"
    )


def closest_names(run: str, names: list[str]) -> list[str]:
    """Up to three of ``names`` closest to ``run``, whole or (more strictly) by the last part."""
    last = Path(run).name
    similar = difflib.SequenceMatcher
    scored = [(max(similar(None, run, n).ratio(), similar(None, last, Path(n).name).ratio() - 0.2), n) for n in names]
    return [n for score, n in sorted(scored, key=lambda sn: -sn[0]) if score >= 0.6][:3]


def run_names(results_dir: str | Path) -> list[str]:
    """``display_name`` of every run directory under ``results_dir``."""
    root = Path(results_dir)
    found = [p for p in sorted(root.glob("runs/*")) + sorted(root.glob("sweeps/*/*")) if is_run_dir(p)]
    resolved = root.resolve()
    return [name_below(p, resolved) for p in found]
