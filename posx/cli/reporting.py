"""What ``posx report`` does: summary tables and figures from evaluated runs.

It reads runs as ``posx.cli.results`` does and imports no torch (a test holds it to that); it needs
matplotlib, which the listings do not, so it is a module of its own. ``posx.cli`` loads it only
when ``posx report`` runs.
"""

from __future__ import annotations

from pathlib import Path

from posx.cli.exits import user_errors
from posx.core import launcher
from posx.core.console import new_console
from posx.report.summary import report as build_report


def report(paths: list[Path], **options) -> None:
    """``posx report PATHS``: options are ``posx.report.summary.report``'s keywords."""
    with user_errors():
        launcher.single_process("posx report")
        build_report(paths, console=new_console(), **options)
