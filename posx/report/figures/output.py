"""Writing figures in the formats asked for (``posx report --format``; ``FORMATS`` by default): PNG
at ``DPI`` and PDF beside it, cropped to what is drawn (``bbox_inches="tight"`` keeps titles and
legends placed outside the axes)."""

from __future__ import annotations

from pathlib import Path

from posx.core import files
from posx.core.errors import PosxError

FORMATS = ("png", "pdf")
NONE = "none"  # --format none: no figure is drawn, the report is its tables
DPI = 200  # raster resolution of the PNGs (a printed column is about 3.5 in wide: 700 pixels)


def save(fig, path: Path, formats: tuple[str, ...] = FORMATS) -> Path:
    """``fig`` in each of ``formats``, as ``path`` (a .png) and beside it (``.pdf``); returns ``path``."""
    path = Path(path)
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        with files.atomic_path(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight")
    return path


def parse_formats(text: str) -> tuple[str, ...]:
    """``--format png,pdf`` as a tuple, ``none`` as no format; an unknown format is a one-line error."""
    asked = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    if asked == (NONE,):
        return ()
    unknown = [f for f in asked if f not in FORMATS]
    if not asked or unknown:
        raise PosxError(
            f"--format {text}: give one or more of {', '.join(FORMATS)}, separated by commas, or {NONE} (no figures)"
        )
    return asked
