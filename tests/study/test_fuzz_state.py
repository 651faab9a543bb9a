"""The study scripts' state files (``tasks.jsonl``, ``invocations.jsonl``: ``scripts/study/log.py``)
damaged each way a kill, a disk or a hand can damage them: every reading ends in a plain answer
(a damaged entry is skipped, so what it recorded is made again; never counted as done or as
time), never an exception or a hang; and a log that is a link is never written through."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from scripts.study import log as study_log

TASKS = [{"key": f"train-rope-s{i}", "rc": 0, "seconds": 1.0, "finished": "2026-01-02 03:04:05"} for i in range(3)]
FINISHED = time.mktime(time.strptime(TASKS[0]["finished"], "%Y-%m-%d %H:%M:%S"))
EVENTS = [{"event": "start", "at": FINISHED - 30.0}, {"event": "end", "at": FINISHED + 30.0}]
LINES = {
    "cut": lambda text: text[:-9],
    "not-a-mapping": lambda text: '[1, 2]\n"rc"\n3\n' + text,
    "nested": lambda text: "[" * 100_000 + "]" * 100_000 + "\n" + text,
    "wrong-types": lambda text: text.replace('"rc": 0', '"rc": false', 1).replace('"at": ', '"at": "soon", "x": ', 1),
    "no-key": lambda text: text.replace('"key"', '"kee"', 1),
    "bad-time": lambda text: text.replace("2026-01-02 03:04:05", "yesterday", 1).replace(
        '"end", "at": ', '"end", "at": NaN, "x": '
    ),
    "huge-line": lambda text: "x" * 5_000_000 + "\n" + text,
}
FILES = ["bad-utf8", "fifo", "directory", "symlink-out"]
# Per kind: the tasks a damaged tasks.jsonl still holds as done (a damaged line is made again).
DONE = {"cut": [0, 1], "bad-utf8": [1, 2], "wrong-types": [1, 2], "no-key": [1, 2], "fifo": [], "directory": [],
        "symlink-out": []}  # fmt: skip


def _alarm(_signum, _frame):
    raise TimeoutError("hang")


def _write(work: Path) -> None:
    (work / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS), encoding="utf-8")
    (work / "invocations.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS), encoding="utf-8")


def _damage(path: Path, kind: str, outside: Path) -> None:
    if kind == "bad-utf8":
        data = path.read_bytes()
        path.write_bytes(data[:20] + b"\xff\xfe" + data[20:])
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "symlink-out":
        (outside / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        path.unlink()
        path.symlink_to(outside / path.name)
    else:
        text = LINES[kind](path.read_text(encoding="utf-8"))
        path.write_bytes(text.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize("name", ["tasks.jsonl", "invocations.jsonl"])
@pytest.mark.parametrize("kind", [*LINES, *FILES])
def test_a_damaged_study_log_is_read_as_what_it_still_holds(tmp_path, name, kind):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    _write(work)
    _damage(work / name, kind, outside)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        done = study_log.Log(work / "tasks.jsonl").done
        seconds, invocations = study_log.wall_time(work)
    finally:
        signal.alarm(0)
    assert set(done) <= {t["key"] for t in TASKS}
    assert all(type(e["rc"]) is int and e["rc"] == 0 for e in done.values())
    assert 0 <= seconds <= 60.0 + 1e-9 and invocations in (0, 1)
    if name == "tasks.jsonl":
        assert sorted(done) == [TASKS[i]["key"] for i in DONE.get(kind, [0, 1, 2])]
    elif kind in ("not-a-mapping", "nested", "huge-line", "no-key"):  # the pair intact: its 60 s
        assert seconds == pytest.approx(60.0) and invocations == 1


@pytest.mark.parametrize("name", ["tasks.jsonl", "invocations.jsonl"])
def test_a_log_that_is_a_link_is_never_written_through(tmp_path, capsys, name):
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("mine\n", encoding="utf-8")
    (work / name).symlink_to(outside)
    with pytest.raises(SystemExit) as stop:
        if name == "tasks.jsonl":
            study_log.Log(work / name).add({"key": "k", "rc": 0})
        else:
            study_log.note(work, "start")
    assert stop.value.code == 2 and "cannot be appended to" in capsys.readouterr().err
    assert outside.read_text(encoding="utf-8") == "mine\n"
