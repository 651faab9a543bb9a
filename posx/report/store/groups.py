"""Which runs of a report are seeds of one experiment: everything but the seed is equal.

A run's identity is a flat {key: text} of what decides its numbers (model as built, T, training,
data fingerprint, evaluation settings, an extended run's lineage; never ``IGNORED`` keys such as
the seed or the device). Groups are labelled by the keys that differ; of two runs of one seed in
a group, the one evaluated last counts. See docs/evaluation.md, "Groups".
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from posx.configure.reference import dotted
from posx.eval import history
from posx.runs.records import RunMeta
from posx.schema.config import POS_READ_BY, Config, EvalConfig, ExtendRootConfig

# Keys of config.yaml that never separate runs: where and how a run ran, not what it is.
IGNORED = (
    "seed", "name", "device", "threads", "logger", "results_dir", "parent", "data.cache_dir", "train.eval_every",
    "train.eval_batches", "train.checkpoint_every", "model.name", "extend.eval_every", "hydra",
)  # fmt: skip
RENAMED = {"train.context_length": "T", "train.steps": "steps"}
COLUMN_KEYS = ("pos.name", "parent")
ONLY_EXTENDED = ("parent.", "extend.")  # keys only an extended run has
# Encoding parameters that only some encodings read (others record a value they never use;
# the schema's table); shown as the encoding and parent columns, not in labels.
ONLY_FOR = {f"pos.{key}": readers for key, readers in POS_READ_BY.items()}


@dataclass
class Member:
    """What grouping needs of one run."""

    path: Path
    seed: int | None
    identity: dict = field(default_factory=dict)
    evaluated_at: float = 0.0  # mtime of its extrapolation.csv: the later of two duplicates counts
    parent_seed: int | None = None  # an extended run's parent's seed, when the parent is there

    @property
    def replicate(self):
        """What makes two runs of one group different replicates: the seed, and for an extended
        run also its parent's seed (extensions of seeds 0, 1, 2 with one extension seed differ)."""
        return self.seed if self.parent_seed is None else (self.parent_seed, self.seed)


@functools.cache
def _defaults(schema: type) -> tuple:
    """The schema's defaults as flat (key, value) pairs: a key a run's record lacks (written before
    the key existed) takes its default, which is what that posx did, so old and new runs group."""
    return tuple(dotted(OmegaConf.to_container(OmegaConf.structured(schema), enum_to_str=True)).items())


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, (dict, type(None))) else str(value)


def _drop_unread(found: dict) -> None:
    """Remove the keys the run's model never reads (``ONLY_FOR``, an unused scale or L_max)."""
    for key, encodings in ONLY_FOR.items():
        if found.get("pos.name") not in encodings:
            found.pop(key, None)
    if str(found.get("model.attn_scale", "none")) == "none":
        found.pop("model.attn_scale_length", None)
    if found.get("pos.randomized") is not True:
        found.pop("pos.randomized_max", None)


def identity(
    config: dict | None,
    meta: RunMeta | None,
    record: dict | None,
    table: pd.DataFrame | None,
    evaluations: list[dict] | None = None,
    parent: dict | None = None,
) -> dict:
    """The run's identity (module docstring). ``record``: its eval.yaml (``history.current``);
    ``evaluations``: every evaluation its tables come from (``[]``: none; None: the current one);
    ``parent``: an extended run's parent's identity, which stands for the parent."""
    # the keys of config.yaml that decide a run's numbers (defaults filled in, no eval), ``RENAMED``
    extended = meta is not None and meta.extended_from is not None
    defaults = {k: v for k, v in _defaults(ExtendRootConfig if extended else Config) if not k.startswith("eval.")}
    filled = {**defaults, **dotted({k: v for k, v in config.items() if k != "eval"})} if config else {}
    found = {RENAMED.get(key, key): value for key, value in filled.items() if _kept(key)}
    if meta is not None:
        _add_recorded(found, meta, parent)
    _drop_unread(found)
    if evaluations is None:
        found.update(_evaluation_keys(record, table))
    elif evaluations:
        found["eval.ids"] = sorted(history.eval_id(e) for e in evaluations)
    return {key: _text(value) for key, value in found.items()}


def _kept(key: str) -> bool:
    return not any(key == i or key.startswith(i + ".") for i in IGNORED)


def _add_recorded(found: dict, meta: RunMeta, parent: dict | None) -> None:
    """Adds what model.json records: the model as built, T, steps, corpus fingerprint, lineage."""
    found.update({k: v for k, v in dotted(meta.model.sections()).items() if _kept(k)})  # as built (nulls resolved)
    found["T"] = meta.train_context
    found.setdefault("steps", meta.step)
    if meta.data.get("sha256"):
        found["data"] = str(meta.data["sha256"])[:12]
        found.pop("data.path", None)
        found.pop("data.source", None)
    lineage = meta.extended_from
    if lineage is not None:
        found.update(
            {
                "parent": lineage.parent,
                "extend.method": lineage.method,
                "extend.factor": lineage.factor,
                "extend.parent_T": lineage.train_context,
            }
        )
        if parent is not None:  # what the parent is, not what it is called
            found["parent"] = f"{parent['pos.name']}-T{parent['T']}"
            found.update({f"parent.{k}": v for k, v in parent.items()})


def _evaluation_keys(record: dict | None, table: pd.DataFrame | None) -> dict:
    """The ``eval.*`` keys: the recorded settings, or what an older table records; else none."""
    if record is not None:
        settings = {**dict(_defaults(EvalConfig)), **dotted(record["settings"])}
        return {f"eval.{k}": v for k, v in settings.items()}
    if table is None or table.empty:
        return {}
    ok = table[table["status"] == "ok"]
    return {
        "eval.record": "none",
        "eval.scored_tokens": sorted({int(t) for t in ok["tokens"].dropna()}),  # empty: not recorded
        "eval.protocol": ",".join(sorted(set(table["protocol"]))),
    }


@dataclass
class Grouping:
    labels: dict  # run path -> group label
    groups: list  # one dict per group: label, runs, seeds, differs
    duplicates: list  # {"run", "seed", "group", "counted": the run that counts instead}
    varying: list  # identity keys that differ between groups
    identities: dict = field(default_factory=dict)  # (label, parent, encoding) -> the group's identity


def _varying(identities: list[dict]) -> list[str]:
    keys = sorted({k for ident in identities for k in ident})
    return [k for k in keys if len({ident.get(k, "—") for ident in identities}) > 1]


def relative_names(paths: list[Path]) -> dict[str, str]:
    """Each run path -> its path relative to the folder holding all of them (no absolute path written)."""
    if not paths:
        return {}
    texts = [str(p) for p in paths]
    root = os.path.commonpath([os.path.dirname(p) for p in texts])
    return {p: Path(os.path.relpath(p, root)).as_posix() for p in texts}


def group_runs(members: list[Member]) -> Grouping:
    """Runs with equal identities, labelled by what differs within encoding and parent; duplicates aside."""
    by_identity: dict[tuple, list[Member]] = {}
    for m in members:
        by_identity.setdefault(tuple(sorted(m.identity.items())), []).append(m)
    identities = [dict(ident) for ident in by_identity]
    differ = _label_keys(identities)
    labels, groups, duplicates, kept_identities = {}, [], [], {}
    names = relative_names([m.path for m in members])
    for i, (ident, runs) in enumerate(zip(identities, by_identity.values()), 1):
        shown = differ[tuple(ident.get(k, "") for k in COLUMN_KEYS)]
        evaluated = _evaluated(ident)
        named = [f"{k}={ident.get(k, '—')}" for k in shown if evaluated or not k.startswith("eval.")]
        label = ", ".join(named if evaluated else [*named, "not evaluated"]) or "-"
        counted, repeated = _count_seeds(runs, f"g{i}", names)
        duplicates += repeated
        labels.update({m.path: label for m in counted})
        kept = sorted(counted, key=lambda m: str(m.path))
        kept_identities[(label, ident.get("parent", ""), ident.get("pos.name", ""))] = ident
        groups.append(
            {
                "group": f"g{i}",
                "encoding": ident.get("pos.name", "—"),
                "parent": ident.get("parent", ""),
                "label": label,
                "runs": len(kept),
                "seeds": ",".join(str(m.seed) for m in kept),
                "run_dirs": " ".join(m.path.name for m in kept),
            }
        )
    return Grouping(labels, groups, duplicates, differences(identities), kept_identities)


def _label_keys(identities: list[dict]) -> dict[tuple, list[str]]:
    """Per (encoding, parent), the keys its labels name (not ``eval.*`` absent only where unevaluated)."""
    clusters: dict[tuple, list[dict]] = {}
    for ident in identities:
        clusters.setdefault(tuple(ident.get(k, "") for k in COLUMN_KEYS), []).append(ident)
    return {
        cluster: [k for k in _varying(idents) if k not in COLUMN_KEYS and not _absent_unevaluated(k, idents)]
        for cluster, idents in clusters.items()
    }


def _evaluated(ident: dict) -> bool:
    return any(k.startswith("eval.") for k in ident)


def _absent_unevaluated(key: str, identities: list[dict]) -> bool:
    """An eval.* key equal wherever it is present and absent only from runs with no evaluation."""
    present = [i for i in identities if key in i]
    return (
        key.startswith("eval.")
        and len({i[key] for i in present}) <= 1
        and all(not _evaluated(i) for i in identities if key not in i)
    )


def _count_seeds(runs: list[Member], group: str, names: dict[str, str]) -> tuple[list[Member], list[dict]]:
    """(the group's counted runs, the last evaluated of each replicate; its duplicates, for duplicates.csv)."""
    counted: dict = {}
    duplicates = []
    for m in sorted(runs, key=lambda m: m.evaluated_at, reverse=True):
        if m.seed is not None and m.replicate in counted:
            instead = names[str(counted[m.replicate].path)]
            duplicates.append({"run": names[str(m.path)], "seed": m.seed, "group": group, "counted": instead})
            continue
        counted[m.replicate if m.seed is not None else id(m)] = m
    return list(counted.values()), duplicates


def differences(identities: list[dict]) -> list[str]:
    """The identity keys that differ between groups; a key absent where it does not apply is no difference."""
    return [
        k
        for k in _varying(identities)
        if (not (k in ONLY_FOR or k.startswith(ONLY_EXTENDED)) or len({i[k] for i in identities if k in i}) > 1)
        and not _absent_unevaluated(k, identities)
    ]
