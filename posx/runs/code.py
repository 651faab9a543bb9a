"""The code from outside posx a result depends on, recorded beside it in ``code.json`` and compared
(never imported) before a resume or an evaluation loads it again (``--allow-changed-code``)."""

from __future__ import annotations

import json
from pathlib import Path

from posx.core import files
from posx.core.errors import PosxError
from posx.core.imports import Source, changed
from posx.model.custom import load_encoding
from posx.rope import METHODS, user_method

CODE = "code.json"
ALLOW_FLAG = "--allow-changed-code"


def encoding_sources(cfg) -> dict[str, Source]:
    return {"pos.impl": load_encoding(cfg.pos.impl)[1]} if cfg.pos.name == "custom" else {}


def method_sources(methods) -> dict[str, Source]:
    return {f"eval.methods: {m}": user_method(m, "")[1] for m in methods if m not in METHODS}


def record(folder: Path, sources: dict[str, Source]) -> None:
    """Write ``folder/code.json`` when there are ``sources``."""
    if sources:
        data = {key: source.to_dict() for key, source in sources.items()}
        files.write_text(Path(folder) / CODE, json.dumps(data, indent=2) + "\n")


def read(folder: Path) -> dict[str, Source]:
    """The sources ``folder/code.json`` records (none without the file)."""
    path = Path(folder) / CODE
    if not path.is_file():
        return {}
    try:
        data = json.loads(files.read_regular(path).decode("utf-8"))
        return {str(key): Source(**value) for key, value in data.items()}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):
        raise PosxError(f"{path} is damaged (not the JSON posx wrote); restore it from a copy of the run") from None


def check(folder: Path, allow: bool, doing: str) -> list[str]:
    """What changed in the code ``folder`` recorded; refused without ``allow`` (``doing``: "resume it")."""
    lines = [f"{key}: {what}" for key, source in read(folder).items() if (what := changed(source))]
    if lines and not allow:
        raise PosxError(
            f"{lines[0]} since {folder} recorded it ({CODE}); its numbers came from the old code. Restore "
            f"the file, or pass {ALLOW_FLAG} to {doing} with the code as it is now"
        )
    return lines
