"""The study scripts' logs in a study's work directory: ``tasks.jsonl`` (one line per finished
task) and ``invocations.jsonl`` (when each invocation started and ended), and the wall time they
add up to over every invocation."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    """The entries of a JSON-lines log; a line cut by a kill is skipped."""
    entries = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


class Log:
    """tasks.jsonl in the work directory: one line per finished task (key, seconds, exit code)."""

    def __init__(self, path: Path):
        self.path = path
        self.done: dict = {e["key"]: e for e in read_jsonl(path) if e.get("rc") == 0}

    def add(self, entry: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        if entry["rc"] == 0:
            self.done[entry["key"]] = entry


def note(work: Path, event: str) -> None:
    """An invocation's ``start`` or ``end`` in invocations.jsonl (seconds since the epoch)."""
    with (work / "invocations.jsonl").open("a") as f:
        f.write(json.dumps({"event": event, "at": time.time()}) + "\n")


def wall_seconds(events: list[dict], task_ends: list[float]) -> tuple[float, int]:
    """(seconds, invocations): each invocation from its start to its end, or, killed before its
    end, to the last task that finished before the next start (at least that long)."""
    starts = sorted(e["at"] for e in events if e.get("event") == "start")
    ends = [e["at"] for e in events if e.get("event") == "end"]
    total = 0.0
    for start, following in zip(starts, [*starts[1:], math.inf]):
        inside = [t for t in [*ends, *task_ends] if start <= t < following]
        total += max(inside, default=start) - start
    return total, len(starts)


def task_ends(work: Path) -> list[float]:
    """When each task of tasks.jsonl finished (its ``finished`` is local time), failed ones too."""
    found = [e.get("finished") for e in read_jsonl(work / "tasks.jsonl")]
    return [time.mktime(time.strptime(f, "%Y-%m-%d %H:%M:%S")) for f in found if isinstance(f, str)]


def wall_time(work: Path) -> tuple[float, int]:
    """(seconds, invocations) of the study in ``work``, summed over its invocations."""
    return wall_seconds(read_jsonl(work / "invocations.jsonl"), task_ends(work))
