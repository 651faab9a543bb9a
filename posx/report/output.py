"""Writing figures: PNG at 200 dpi and PDF, cropped to what is drawn.

Every figure of ``posx report`` is written in every format of ``FORMATS`` beside its PNG
path (``name.png``, ``name.pdf``); ``posx report --format`` keeps the formats asked for and
removes the others before the report is published (``keep_formats``). Cropping to the drawn
area (``bbox_inches="tight"``) keeps titles and legends placed outside the axes in the file.
"""

from __future__ import annotations

from pathlib import Path

from posx.core import files
from posx.core.errors import PosxError

FORMATS = ("png", "pdf")
DPI = 200  # raster resolution of the PNGs (a printed column is about 3.5 in wide: 700 pixels)


def save(fig, path: Path) -> Path:
    """``fig`` as ``path`` (a .png) and beside it in the other formats; returns ``path``."""
    path = Path(path)
    for fmt in FORMATS:
        target = path.with_suffix(f".{fmt}")
        with files.atomic_path(target) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches="tight")
    return path


def parse_formats(text: str) -> tuple[str, ...]:
    """``--format png,pdf`` as a tuple; an unknown format is a one-line error."""
    asked = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
    unknown = [f for f in asked if f not in FORMATS]
    if not asked or unknown:
        raise PosxError(f"--format {text}: give one or more of {', '.join(FORMATS)}, separated by commas")
    return asked


def keep_formats(folder: Path, formats: tuple[str, ...]) -> None:
    """Remove the figures of ``folder`` whose format was not asked for."""
    for fmt in FORMATS:
        if fmt not in formats:
            for path in Path(folder).glob(f"*.{fmt}"):
                path.unlink()
