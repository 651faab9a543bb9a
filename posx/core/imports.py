"""Code from outside posx named in the config (``module:attribute``, or an entry point of
``posx.encodings`` / ``posx.methods``; docs/own-method.md): imported (so run) with one-line errors,
and returned with its ``Source`` (file, sha256), which a run records (``posx.runs.code``)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
from dataclasses import asdict, dataclass
from typing import Any

from posx.core import files
from posx.core.errors import PosxError

ENCODING_GROUP = "posx.encodings"  # entry points of whole positional encodings
METHOD_GROUP = "posx.methods"  # entry points of RoPE frequency and attention-side methods


@dataclass(frozen=True)
class Source:
    """Where a piece of user code came from: what recorded runs compare."""

    name: str  # as the config names it: module:attribute, or an entry point's name
    target: str  # the import path it resolved to (module:attribute)
    file: str  # the module's source file
    sha256: str  # of that file's bytes

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def load(name: str, group: str, setting: str, own: str = "not one of posx's own") -> tuple[Any, Source]:
    """The object ``name`` designates and its ``Source``; ``setting`` (``pos.impl``) names the key in
    every error, ``own`` says which names posx itself has."""
    module_name, sep, attribute = str(name).partition(":")
    target = name if sep and module_name and attribute else _entry_point(name, group, setting, own)
    module_name, _, attribute = target.partition(":")
    module = _import(module_name, f"{setting}={name}")
    obj = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise PosxError(
                f"{setting}={name}: module {module_name!r} ({_file_of(module)}) has no attribute {attribute!r}; "
                "check the name after the ':'"
            )
        obj = getattr(obj, part)
    path = _file_of(module)
    return obj, Source(name=name, target=target, file=path, sha256=files.sha256_file(path) if path else "")


def _entry_point(name: str, group: str, setting: str, own: str) -> str:
    points = importlib.metadata.entry_points(group=group)
    found = [ep for ep in points if ep.name == name]
    if not found:
        known = sorted({ep.name for ep in points})
        installed = f"; installed in {group}: {', '.join(known)}" if known else f" (no package installs any in {group})"
        raise PosxError(
            f"{setting} has unknown value {name!r}; {own}, an import path module:attribute, "
            f"or an entry point{installed}"
        )
    return found[0].value.replace(" ", "")


def _import(module_name: str, named: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):  # the module named, not one it imports
            raise PosxError(
                f"{named}: no module {module_name!r} on the Python path; install its package, or put its "
                f"folder on PYTHONPATH (PYTHONPATH=<folder> posx ...)"
            ) from None
        raise PosxError(f"{named}: importing {module_name!r} failed: {_line(exc)}") from None
    except Exception as exc:  # the user's module raised while it ran: say what, in one line
        raise PosxError(f"{named}: importing {module_name!r} failed: {_line(exc)}") from None


def _file_of(module) -> str:
    try:
        return inspect.getsourcefile(module) or ""
    except TypeError:  # a built-in module has no file
        return ""


def _line(exc: BaseException) -> str:
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}{where}"


def changed(recorded: Source) -> str | None:
    """What differs between recorded code and the file now, in one phrase (None: the same bytes)."""
    current = _current_file(recorded.target)
    if not current:
        return f"{recorded.name} ({recorded.file}) cannot be found any more"
    if current != recorded.file:
        return f"{recorded.name} now comes from {current}, not {recorded.file}"
    try:
        digest = files.sha256_file(current)
    except OSError:
        return f"{recorded.name} ({current}) cannot be read"
    return None if digest == recorded.sha256 else f"the source of {recorded.name} ({current}) has changed"


def _current_file(target: str) -> str:
    """The file ``target``'s module would load from, without running it (its packages are imported)."""
    module_name = target.partition(":")[0]
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        return _file_of(loaded)
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return ""
    return spec.origin if spec is not None and spec.origin else ""
