"""File names handed to DuckDB as data, never as patterns: DuckDB expands ``*``, ``?`` and ``[...]``
in every path it reads, so a file whose path holds such a character (``GLOB``) is read through a
link named by digits in a private folder (``Links``); any other path is read as it is (a link
costs a system call a file, seconds over ten thousand). Only regular files are read: a FIFO or a
directory is a one-line PosxError."""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path

import pandas as pd

from posx.core import files

GLOB = frozenset("*?[]{}\\")  # characters DuckDB could read as a pattern or an escape in a path


class Links:
    """A private folder of symbolic links (``link``), removed by ``close``."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="posx-links-"))
        # removed by close, or when the object goes (or the interpreter ends) if a path missed close
        self._remove = weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        self.origin: dict[str, str] = {}  # link -> the real path
        self._made: dict[str, str] = {}  # real path -> link

    def link(self, path: Path | str, what: str = "") -> str:
        """The name DuckDB reads for ``path`` (a link where it holds ``GLOB``); refuses a non-regular file."""
        real = os.path.abspath(path)
        if real not in self._made:
            files.regular(Path(real), what)
            name = real
            if not GLOB.isdisjoint(real):
                suffix = "".join(c for c in Path(real).suffix if c.isalnum() or c == ".")
                name = str(self.folder / f"{len(self._made)}{suffix}")
                os.symlink(real, name)
            self._made[real] = name
            self.origin[name] = real
        return self._made[real]

    def listed(self, paths, what: str = "") -> str:
        """A SQL list literal of the names of ``paths`` (no pattern characters)."""
        return "[" + ", ".join(sql_text(self.link(p, what)) for p in paths) + "]"

    def frame(self) -> pd.DataFrame:
        """name read -> real path, to join a query's ``filename`` on."""
        return pd.DataFrame({"link": list(self.origin), "origin": list(self.origin.values())})

    def close(self) -> None:
        self._remove()


def sql_text(text: str | Path) -> str:
    """A SQL string literal of ``text`` (for a file DuckDB writes: writing expands no pattern)."""
    return "'" + str(text).replace("'", "''") + "'"
