"""Typed records a run directory holds as JSON, each read through ``from_dict`` (``posx.core.validate``):
a damaged record is one line naming the file and the field."""

from __future__ import annotations

import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from posx import __version__
from posx.core import fieldcheck
from posx.core.errors import PosxError
from posx.core.fieldcheck import SHA256
from posx.core.validate import validate
from posx.model.learnedrecord import LearnedScalars
from posx.model.roperecord import RopeRecord
from posx.model.spec import ModelSpec
from posx.runs import legacy
from posx.schema.fields import at_least, bound, positive
from posx.schema.methods import MAX_FACTOR

META_FORMAT = "posx-run/2"  # the model record as the schema's sections (posx-run/1: posx.runs.legacy)


def _fields_of(record) -> dict:
    """A record's fields by name, as they are (``asdict`` would copy nested records too)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass(kw_only=True)
class Lineage:
    """Where an extended run (``posx extend``) came from."""

    parent: str  # the parent run's directory name
    parent_path: str = ""  # its absolute path when the extension ran
    method: str  # the rescaling (a posx.rope method, or interpolate)
    factor: float = bound(lo=0, lo_open=True, hi=MAX_FACTOR)  # new context = factor x train_context
    steps: int = at_least(0, 0, fieldcheck.MAX_STEPS)  # continued-training steps asked for
    train_context: int = positive(MISSING, fieldcheck.MAX_CONTEXT)  # the parent's T
    parent_step: int = at_least(0, 0, fieldcheck.MAX_STEPS)  # the parent's optimizer steps
    parent_weights_sha256: str | None = None  # the parent's model.safetensors (None: recorded before this field)

    def check(self, at: str = "") -> str | None:
        if not (self.parent and self.method):
            return f"{at}{'method' if self.parent else 'parent'} is empty"
        if self.parent_weights_sha256 is not None and not SHA256.fullmatch(self.parent_weights_sha256):
            return f"{at}parent_weights_sha256={self.parent_weights_sha256!r} is not a sha256 hex digest"
        return None

    def to_dict(self) -> dict:
        return _fields_of(self)


@dataclass
class RunMeta:
    """``model.json``: what rebuilds the model and says what it is, without Hydra."""

    model: ModelSpec  # vocab_size and the model and pos sections it was built from
    train_context: int = positive(MISSING, fieldcheck.MAX_CONTEXT)  # T, the length the model trained at
    data: dict = field(default_factory=dict)  # corpus fingerprint and the data config it came from
    step: int = at_least(0, 0, fieldcheck.MAX_STEPS)  # optimizer steps taken
    rope: RopeRecord = field(default_factory=RopeRecord.identity)  # frequencies it trained with
    extended_from: Lineage | None = None  # posx extend: where it came from
    weights_sha256: str | None = None  # checksum of model.safetensors (set by save_run; older runs lack it)
    learned: LearnedScalars | None = None  # the positional scalars it learned (set by save_run; None: none, or older)

    def to_dict(self) -> dict:
        return {
            "format": META_FORMAT,
            "posx_version": __version__,
            "model": asdict(self.model),
            "train_context": self.train_context,
            "data": self.data,
            "step": self.step,
            "rope": self.rope.to_dict(),
            **({"extended_from": self.extended_from.to_dict()} if self.extended_from else {}),
            "weights_sha256": self.weights_sha256,
            **({"learned": self.learned.to_dict()} if self.learned else {}),
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }

    def check(self, at: str = "") -> str | None:
        """data.tokenizer absent (before token stores: bytes) or a mapping with its kind and sha256;
        learned scalars of the model's shape."""
        tok = self.data.get("tokenizer")
        if tok is not None and not (isinstance(tok, dict) and isinstance(tok.get("kind"), str) and tok["kind"]):
            return f"data.tokenizer={tok!r} is not a mapping with a kind"
        sha = tok.get("sha256") if isinstance(tok, dict) else None
        if sha is not None and not SHA256.fullmatch(str(sha)):
            return f"data.tokenizer.sha256={sha!r} is not a sha256 hex digest"
        if self.weights_sha256 == "":
            return "weights_sha256 is empty"
        m = self.model.model
        return None if self.learned is None else self.learned.problem(m.n_layer, m.n_head, f"{at}learned.")

    @classmethod
    def from_dict(cls, d, where: Path) -> "RunMeta":
        """``weights_sha256`` may be absent or null (an older run, or a record without weights)."""
        found = d.get("format") if isinstance(d, dict) else type(d).__name__
        if found not in (META_FORMAT, legacy.FORMAT):
            raise PosxError(f"{where} is not posx run metadata (format {found!r})")
        record = {k: v for k, v in d.items() if k not in ("format", "posx_version", "saved_at")}  # written, not read
        with legacy.spelled(found):  # weights: on load
            return validate(legacy.upgrade(record, found), cls, f"{where} is incomplete or corrupt", "re-train the run")

    @property
    def data_config(self) -> dict:
        """The data config the run trained on (older runs: source, path, val_fraction, bytes)."""
        recorded = self.data.get("config") or {}
        if not isinstance(recorded, dict):
            raise PosxError(f"model.json: data.config is a {type(recorded).__name__}, not a mapping; re-train the run")
        return {
            "source": "stdlib",
            "path": None,
            "val_fraction": 0.05,
            **{k: v for k, v in recorded.items() if v is not None},
        }


@dataclass
class TrainExtras:
    """What a training checkpoint keeps besides tensors, so a resumed run is the same run."""

    val_loss: float | None = at_least(None, 0.0)  # the last validation loss (None before the first)
    data_sha256: str | None = None  # the corpus it trains on
    rope: RopeRecord = field(default_factory=RopeRecord.identity)  # frequencies it trains with
    extended_from: Lineage | None = None  # an extension's parent
    tokenizer_sha256: str | None = None  # the tokenizer the ids mean (None: a checkpoint from before stores)
    config: dict | None = None  # the resolved config it trains with (None: a checkpoint from before this record)

    def to_dict(self) -> dict:
        lineage = self.extended_from.to_dict() if self.extended_from else None
        return {**_fields_of(self), "rope": self.rope.to_dict(), "extended_from": lineage}

    def check(self, at: str = "") -> str | None:
        for name in ("data_sha256", "tokenizer_sha256"):
            value = getattr(self, name)
            if value is not None and not SHA256.fullmatch(value):
                return f"{at}{name}={value!r} is not a sha256 hex digest"
        return None

    @classmethod
    def from_dict(cls, d, where: str) -> "TrainExtras":
        return validate(d, cls, f"checkpoint {where} is incomplete or corrupt", "start a new run", "extra.")
