"""posx.core.startup: Ctrl-C while a command imports its modules waits for the import to end,
then stops the command with one line and exit 130 (a process per case: it sends itself SIGINT)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from posx.core.startup import STOPPED

# A module whose import is hit by Ctrl-C halfway, then finishes (it says so in a file).
SLOW_MODULE = """
import os, signal, sys
os.kill(os.getpid(), signal.SIGINT)
open(sys.argv[1], "w").write("whole")
"""


def _start(tmp_path: Path, how: str, ignored: bool = False) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "slowmod.py").write_text(SLOW_MODULE)
    marker = tmp_path / "imported"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from posx.core import startup
        {how}
        print("went on")
    """)
    # ignored: started as a shell script's background job is, with SIGINT ignored; otherwise the
    # default, whatever this test process was started with (the suite itself may run in the background)
    disposition = signal.SIG_IGN if ignored else signal.SIG_DFL
    before = lambda: signal.signal(signal.SIGINT, disposition)  # noqa: E731
    proc = subprocess.run(
        [sys.executable, "-c", code, str(marker)], capture_output=True, text=True, timeout=120, preexec_fn=before
    )
    return proc, marker


def test_ctrl_c_during_a_commands_imports_lets_them_finish_then_stops_in_one_line(tmp_path):
    proc, marker = _start(tmp_path, 'startup.load("slowmod")')
    assert marker.read_text() == "whole"  # the import was not cut in half
    assert proc.returncode == 130 and "went on" not in proc.stdout
    assert proc.stderr == f"interrupted: {STOPPED}\n"


def test_a_plain_import_is_cut_in_half_by_ctrl_c(tmp_path):
    """What ``load`` prevents: the same import without it stops where the signal came."""
    proc, marker = _start(tmp_path, "import slowmod")
    assert not marker.exists() and "KeyboardInterrupt" in proc.stderr


def test_a_process_started_with_ctrl_c_ignored_goes_on_ignoring_it(tmp_path):
    proc, marker = _start(tmp_path, 'startup.load("slowmod")', ignored=True)
    assert marker.read_text() == "whole"
    assert proc.returncode == 0 and "went on" in proc.stdout and proc.stderr == ""
