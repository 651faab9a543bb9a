"""``posx report``: summary tables and figures; needs matplotlib but not torch (a test holds it)."""

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
