"""The study scripts' logs in a study's work directory: ``tasks.jsonl`` (one line per finished
task) and ``invocations.jsonl`` (when each invocation started and ended), and the wall time they
add up to over every invocation."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from posx.core import fieldcheck, files
from posx.core.errors import PosxError
from scripts.study import REPO


def read_jsonl(path: Path) -> list[dict]:
    """The mappings of a JSON-lines log. A line cut by a kill, or damaged any other way (not
    JSON, nested past posx's limit, not a mapping), is skipped: what it recorded is made again.
    Only a regular file is read (a FIFO is never waited on, a link never followed)."""
    try:
        readable = path.is_file() and not path.is_symlink()
        data = files.read_regular(path) if readable else b""
    except OSError:
        data = b""  # a log that cannot be read records nothing: every task is checked again
    entries = []
    for line in data.splitlines():
        try:
            entry = fieldcheck.load_json(line.decode("utf-8"), path, "")
        except (ValueError, PosxError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


class Log:
    """tasks.jsonl in the work directory: one line per finished task (key, seconds, exit code)."""

    def __init__(self, path: Path):
        self.path = path
        self.done: dict = {e["key"]: e for e in read_jsonl(path) if isinstance(e.get("key"), str) and _ok(e)}

    def add(self, entry: dict) -> None:
        append(self.path, entry)
        if entry["rc"] == 0:
            self.done[entry["key"]] = entry


def append(path: Path, entry: dict) -> None:
    """One line at the end of the log ``path``, never through a link (the log is the study's own)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        print(f"error: {path} cannot be appended to ({exc.strerror}); move it aside and run again", file=sys.stderr)
        raise SystemExit(2) from None
    with os.fdopen(fd, "a") as f:
        f.write(json.dumps(entry) + "\n")


def _ok(entry: dict) -> bool:
    """A task that finished with exit code 0 (an integer 0: not false, not "0")."""
    return type(entry.get("rc")) is int and entry["rc"] == 0


def _when(text) -> float | None:
    """Seconds since the epoch of a local ``%Y-%m-%d %H:%M:%S``; None for anything else."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%d %H:%M:%S")) if isinstance(text, str) else None
    except (ValueError, OverflowError):
        return None


def note(work: Path, event: str) -> None:
    """An invocation's ``start`` or ``end`` in invocations.jsonl (seconds since the epoch)."""
    append(work / "invocations.jsonl", {"event": event, "at": time.time()})


def wall_seconds(events: list[dict], task_ends: list[float]) -> tuple[float, int]:
    """(seconds, invocations): each invocation from its start to its end, or, killed before its
    end, to the last task that finished before the next start (at least that long)."""
    events = [e for e in events if fieldcheck.is_number(e.get("at"))]  # a damaged entry counts no time
    starts = sorted(e["at"] for e in events if e.get("event") == "start")
    ends = [e["at"] for e in events if e.get("event") == "end"]
    total = 0.0
    for start, following in zip(starts, [*starts[1:], math.inf]):
        inside = [t for t in [*ends, *task_ends] if start <= t < following]
        total += max(inside, default=start) - start
    return total, len(starts)


def git(*args: str) -> str:
    """What ``git args`` prints in the repository, stripped."""
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def revision() -> str:
    """The commit the study runs at, ``(with uncommitted changes)`` after it where tracked files differ."""
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return f"{git('rev-parse', 'HEAD') or 'unknown'}{dirty}"


def commits_line(log: Log) -> str:
    """STUDY.md's line naming the commit of every finished task (``revision`` when it ran)."""
    counts = Counter(str(e.get("commit", "not recorded")) for e in log.done.values())
    if len(counts) <= 1:
        return f"- commit of every run and evaluation: `{next(iter(counts), 'no finished task logged')}`"
    listed = "; ".join(f"`{c}` ({n} task{'s' * (n != 1)})" for c, n in sorted(counts.items(), key=lambda cn: -cn[1]))
    return f"- commits the runs and evaluations ran at: {listed}"


def task_ends(work: Path) -> list[float]:
    """When each task of tasks.jsonl finished (its ``finished`` is local time), failed ones too."""
    found = [_when(e.get("finished")) for e in read_jsonl(work / "tasks.jsonl")]
    return [f for f in found if f is not None]


def wall_time(work: Path) -> tuple[float, int]:
    """(seconds, invocations) of the study in ``work``, summed over its invocations."""
    return wall_seconds(read_jsonl(work / "invocations.jsonl"), task_ends(work))
