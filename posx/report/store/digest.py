"""A run's digest (``digest.json``): the small record ``posx report`` and ``posx runs`` read instead
of parsing a run's YAML and tables. Written at the end of training and of each evaluation
(``refresh``): seed, identity, parent, the listing, each table's header, the tables left out by
design and the files refused as damaged. Stamped with the size and mtime of its ``SOURCES`` and a
hash of their bytes (``content``), sealed (``seal``). Trusted only when every field checks
and the seal matches; a stale one whose bytes are unchanged (a copied run) keeps its content with
the new stamp, else is computed again (``resolve``). See docs/evaluation.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import stat
from pathlib import Path

import pandas as pd
import yaml

from posx.core import fieldcheck, files
from posx.core.errors import PosxError
from posx.core.fieldcheck import is_number
from posx.eval import history, manifest
from posx.eval.tables import left_out, perplexity, read_table, refit
from posx.report.store.groups import identity
from posx.runs import legacy
from posx.runs.paths import CONFIG, META, interpolation_in, lineage_of, read_meta

DIGEST = "digest.json"
# 2: ``left_out``, the tables the run's evaluation does not write; 3: ``damaged``; 4: ``content``, ``seal``,
# tasks.csv and tables.json among the sources; 5: config.yaml read as written now (ABF's base: eval.abf.new_base)
FORMAT = "posx-digest/5"
TABLES = ("extrapolation.csv", "positions.csv", "passkey.csv")
METRICS = "metrics.csv"
TASKS = "tasks.csv"
# Every file a digest is made from; a change to any of them (size or mtime) makes it stale.
SOURCES = (CONFIG, META, "eval.yaml", *TABLES, METRICS, TASKS, manifest.MANIFEST)


# The checks of a digest's fields and its seal: what passes is what ``compute`` could have written.
KNOWN_TABLES = (*TABLES, METRICS, TASKS)
HEX = set("0123456789abcdef")
LISTED = {"encoding", "T", "steps", "val_ppl", "evaluated_lengths", "parent"}  # a listing's keys (posx runs)


def seal(digest: dict) -> str:
    """A hash of the digest's fields but ``seal``."""
    body = {k: v for k, v in digest.items() if k != "seal"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def sealed(digest: dict) -> dict:
    return {**digest, "seal": seal(digest)}


def _hex(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 64 and set(value) <= HEX


def _texts(value) -> bool:
    """A mapping of text to text (an identity)."""
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _names(value, allowed) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v in allowed for v in value)


def _columns(value) -> bool:
    return isinstance(value, dict) and all(
        k in KNOWN_TABLES and isinstance(v, list) and all(isinstance(c, str) for c in v) for k, v in value.items()
    )


def _lineage(value) -> bool:
    return value is None or (
        isinstance(value, dict)
        and set(value) == {"parent", "parent_path"}
        and isinstance(value["parent"], str)
        and (value["parent_path"] is None or isinstance(value["parent_path"], str))
    )


def _cell(value) -> bool:
    """A listed T or step count: a number, or what an unfinished run's config.yaml holds (text, null)."""
    return value is None or isinstance(value, str) or is_number(value)


def _listing_ok(value) -> bool:
    if not isinstance(value, dict) or set(value) != LISTED:
        return False
    ppl = value["val_ppl"]
    ppl_ok = ppl is None or (isinstance(ppl, float) and (ppl == math.inf or (is_number(ppl) and ppl > 0)))
    lengths = value["evaluated_lengths"]
    return (
        ppl_ok
        and isinstance(value["encoding"], str)
        and isinstance(value["parent"], str)
        and _cell(value["T"])
        and _cell(value["steps"])
        and isinstance(lengths, str)
        and all(part.isdigit() for part in lengths.split(",") if lengths)
    )


def whole(value) -> bool:
    """A whole number a table's seed column (64-bit) can hold."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def valid(digest, fmt: str, damageable) -> bool:
    """Whether posx wrote ``digest`` in ``fmt``, unchanged (``damageable``: names ``damaged`` may hold)."""
    fields = {
        "format": lambda v: v == fmt,
        "stamp": _hex,
        "content": _hex,
        "seed": lambda v: v is None or whole(v),
        "config": lambda v: isinstance(v, bool),
        "finished": lambda v: isinstance(v, bool),
        "identity": _texts,
        "eval": _texts,
        "lineage": _lineage,
        "evaluated_at": lambda v: is_number(v) and v >= 0,
        "columns": _columns,
        "left_out": lambda v: _names(v, KNOWN_TABLES),
        "listing": _listing_ok,
        "damaged": lambda v: _names(v, damageable),
        "seal": _hex,
    }
    if not isinstance(digest, dict) or set(digest) != set(fields):
        return False
    return all(check(digest[name]) for name, check in fields.items()) and digest["seal"] == seal(digest)


def content(run_dir: Path) -> str:
    """A hash of the bytes of each of the run's ``SOURCES``: what survives a copy (new mtimes)."""
    whole = hashlib.sha256()
    for name in SOURCES:
        try:
            data = files.read_regular(os.path.join(run_dir, name))
        except OSError:
            whole.update(f"{name}:-\n".encode())
            continue
        whole.update(f"{name}:{len(data)}:".encode() + hashlib.sha256(data).digest())
    return whole.hexdigest()[:32]


def stamp(run_dir: Path) -> str:
    """A short hash of the size and modification time of each of the run's ``SOURCES`` (stat only)."""
    parts, folder = [], str(run_dir)
    for name in SOURCES:
        try:
            st = os.stat(os.path.join(folder, name))  # strings: a Path per file costs more than the stat
        except OSError:
            parts.append(f"{name}:-")
            continue
        parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def read_config(path: Path) -> dict | None:
    """config.yaml as written (old spellings as now); None when absent; empty when damaged (not
    UTF-8 or YAML, not a mapping, an ``${...}``, a seed not a 64-bit whole number): the run is then
    listed without its settings, and a report names its config.yaml as missing."""
    config = path / CONFIG
    if not config.is_file():
        return None
    try:
        saved = fieldcheck.load_yaml(config.read_text(encoding="utf-8"), config, "")
    except (yaml.YAMLError, UnicodeDecodeError, PosxError):
        return {}
    if not isinstance(saved, dict) or interpolation_in(saved) is not None or not whole(saved.get("seed", 0)):
        return {}
    return legacy.upgrade_config(saved)


def header(path: Path) -> list[str]:
    """The column names of a CSV file's first line."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there since it was listed: no wait
    with open(fd, encoding="utf-8", errors="replace") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        return [c.strip() for c in f.readline().strip().split(",") if c.strip()]


def _val_ppl(path: Path) -> float | None:
    """exp of the last validation loss in metrics.csv (None without one; ``inf`` for a diverged run)."""
    try:
        losses = pd.read_csv(io.BytesIO(files.read_regular(path)), usecols=["val_loss"])["val_loss"].dropna()
        last = float(losses.iloc[-1]) if len(losses) else math.nan
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, UnicodeDecodeError):
        return None
    if math.isnan(last):
        return None
    return perplexity(last)


def _extrapolation(run_dir: Path) -> pd.DataFrame | None:
    path = run_dir / TABLES[0]
    return read_table(path) if path.is_file() else None


def _meta(run_dir: Path):
    return read_meta(run_dir) if (run_dir / META).is_file() else None


# The files a digest is made from that posx refuses when damaged, each with its reader (of the run
# directory; None when the file is absent). config.yaml is not among them: read_config reads a
# damaged one as empty.
def _manifest(run_dir: Path) -> None:
    manifest.check(run_dir, refit(run_dir))


READERS = {META: _meta, TABLES[0]: _extrapolation, history.SETTINGS: history.current, manifest.MANIFEST: _manifest}


def _unless_damaged(run_dir: Path, name: str, damaged: list[str]):
    """What ``READERS[name]`` reads, or None when it refuses the file (the name joins ``damaged``):
    the run is listed without what the file holds, rather than one damaged run failing a listing."""
    try:
        return READERS[name](run_dir)
    except PosxError:
        damaged.append(name)
        return None


def refuse_damaged(run_dir: Path, digest: dict) -> None:
    """Raise the error of the first file the digest lists as damaged but config.yaml (a report lists
    that one as missing), read again so the line names the file where it is now."""
    for name in digest["damaged"]:
        if name in READERS:
            READERS[name](Path(run_dir))


def refusal(run_dir: Path, digest: dict) -> str | None:
    """``refuse_damaged``'s one line for the run, or None: a report leaves the run out with it."""
    try:
        refuse_damaged(run_dir, digest)
    except PosxError as exc:
        return str(exc)
    return None


def _mapping(node) -> dict:
    """A node of a config that may be damaged: itself when a mapping, else empty."""
    return node if isinstance(node, dict) else {}


def _listing(path: Path, config: dict, meta, table: pd.DataFrame | None) -> dict:
    """What ``posx runs`` shows of the run (its status is looked up when it lists)."""
    train = _mapping(config.get("train"))
    lengths = ""
    if table is not None:
        ok = table.loc[table["status"] == "ok", "eval_context"]
        lengths = ",".join(str(int(v)) for v in sorted(set(ok)))
    if meta is not None:
        lineage = meta.extended_from
    else:  # unfinished: its checkpoint's; with a damaged model.json, not known
        lineage = None if (path / META).is_file() else lineage_of(path)
    return {
        "encoding": meta.model.pos.name if meta else str(_mapping(config.get("pos")).get("name", "")),
        "T": meta.train_context if meta else train.get("context_length", ""),
        "steps": meta.step if meta else train.get("steps", ""),
        "val_ppl": _val_ppl(path / METRICS),
        "evaluated_lengths": lengths,
        "parent": lineage.parent if lineage else "",
    }


def compute(run_dir: Path, when: str | None = None, whole: str | None = None) -> dict:
    """The digest of ``run_dir`` from its files; ``when``, ``whole``: its stamp and content, if known."""
    path = Path(run_dir)
    when = stamp(path) if when is None else when
    whole = content(path) if whole is None else whole
    saved = read_config(path)
    damaged = [CONFIG] if saved == {} else []  # read_config's empty mapping: a damaged config.yaml
    meta = _unless_damaged(path, META, damaged)
    table = _unless_damaged(path, TABLES[0], damaged)
    record = _unless_damaged(path, history.SETTINGS, damaged)
    _unless_damaged(path, manifest.MANIFEST, damaged)
    base = identity(saved, meta, None, None, evaluations=[])
    full = base if history.SETTINGS in damaged else identity(saved, meta, record, table)  # eval keys: from eval.yaml
    seed = (saved or {}).get("seed")
    lineage = meta.extended_from if meta is not None else None
    return sealed(
        {
            "format": FORMAT,
            "stamp": when,
            "content": whole,
            "seed": int(seed) if seed is not None else None,
            "config": bool(saved),  # False when absent or damaged: the report lists config.yaml as missing
            "finished": (path / META).is_file(),  # its model.json written (read, or listed as damaged)
            "identity": base,
            "eval": {k: v for k, v in full.items() if k not in base},
            "lineage": None if lineage is None else {"parent": lineage.parent, "parent_path": lineage.parent_path},
            "evaluated_at": (path / TABLES[0]).stat().st_mtime if table is not None else 0.0,
            "columns": {n: header(path / n) for n in (*TABLES, METRICS, TASKS) if (path / n).is_file()},
            "left_out": sorted(left_out(record and record["settings"], lineage is not None)),
            "listing": _listing(path, saved or {}, meta, table),
            "damaged": damaged,  # files posx refused to read: posx runs shows them, posx report leaves the run out
        }
    )


def refresh(run_dir: Path) -> dict:
    """Write the run's digest.json (atomically) from its files, at the end of training and of each evaluation."""
    digest = compute(run_dir)
    files.write_text(Path(run_dir) / DIGEST, json.dumps(digest, separators=(",", ":")) + "\n")
    return digest


def trusted(digest) -> bool:
    """Whether ``digest`` (read from a digest.json or a cache entry) passes every field check and its seal."""
    return valid(digest, FORMAT, (CONFIG, *READERS))


def _read(run_dir: Path) -> dict | None:
    """The digest.json the run wrote, when it is a regular file posx wrote and nothing edited; else None."""
    try:
        digest = fieldcheck.load_json(files.read_regular(Path(run_dir) / DIGEST).decode("utf-8"), DIGEST, "")
    except (OSError, UnicodeDecodeError, ValueError, PosxError):
        return None
    return digest if trusted(digest) else None


def written(run_dir: Path, when: str) -> dict | None:
    """The digest.json the run wrote, when it is trusted and its stamp is ``when``; else None."""
    digest = _read(run_dir)
    return digest if digest is not None and digest["stamp"] == when else None


def keep(run_dir: Path, digest: dict) -> None:
    """Write a stale digest back into the run, best effort (a read-only run or an odd file is left alone)."""
    target = Path(run_dir) / DIGEST
    if target.is_symlink() or (os.path.lexists(target) and not target.is_file()):
        return
    try:
        files.write_text(target, json.dumps(digest, separators=(",", ":")) + "\n", durable=False)  # made again if lost
    except (OSError, PosxError):
        pass


def resolve(run_dir: Path, when: str | None = None) -> tuple[dict, bool]:
    """(the run's digest, whether to write it back): see the module docstring."""
    when = stamp(run_dir) if when is None else when
    found = _read(run_dir)
    if found is None:
        return compute(run_dir, when), True
    if found["stamp"] == when:
        return found, False
    whole = content(run_dir)  # read and hashed once, whether the digest is kept or made again
    if found["content"] == whole:
        return sealed({**found, "stamp": when}), True
    return compute(run_dir, when, whole), True


def load(run_dir: Path, when: str | None = None) -> dict:
    """The run's digest (``resolve``), written back when it was stale."""
    digest, stale = resolve(run_dir, when)
    if stale:
        keep(run_dir, digest)
    return digest
