"""Tests for posx.data.sources: a text corpus read from a source tree leaves out what is not text."""

import json
from pathlib import Path

import pytest
from rich.console import Console

from posx.core.errors import PosxError
from posx.data import sources, store


def _tree(root: Path) -> Path:
    """A small source tree with the binary and cache files a real one has."""
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / ".git" / "objects").mkdir(parents=True)
    for i in range(6):
        (root / "pkg" / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 20, encoding="utf-8")
    (root / "pkg" / "__pycache__" / "m0.cpython-312.pyc").write_bytes(b"\xcb\r\r\n\0\0\0\0" + b"\xff" * 40)
    (root / "pkg" / "stray.pyc").write_bytes(b"\xcb\r\r\n" + b"\xfe" * 40)
    (root / "pkg" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + b"\x80" * 40)
    (root / ".git" / "objects" / "ab").write_bytes(b"x\x01\0\xff")
    return root


def test_a_source_tree_skips_binary_and_cache_files_with_a_count(tmp_path):
    root = _tree(tmp_path / "src")
    base, rels, _ = sources.select_files("text", str(root))
    assert base == root.resolve()
    assert rels == [f"pkg/m{i}.py" for i in range(6)]
    st = store.load({"source": "text", "path": str(root)}, tmp_path / "cache")
    # .git is hidden (left out uncounted); the __pycache__ file, stray.pyc and logo.png (a NUL) are counted
    assert st.fingerprint["files"] == 6 and st.fingerprint["skipped"] == 3
    meta = json.loads((st.path / "store.json").read_text(encoding="utf-8"))
    assert meta["fingerprint"]["skipped"] == 3


def test_the_count_is_shown_once_when_building(tmp_path, capsys):
    root = _tree(tmp_path / "src")
    for _ in range(2):
        store.load({"source": "text", "path": str(root)}, tmp_path / "cache", console=Console())
    out = capsys.readouterr().out
    assert out.count("skipped 3 binary or cache files") == 1


def test_a_tree_without_binaries_records_no_count(tmp_path):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.txt").write_text("hello\n" * 50, encoding="utf-8")
    (root / "b.txt").write_text("world\n" * 50, encoding="utf-8")
    st = store.load({"source": "text", "path": str(root)}, tmp_path / "cache")
    assert "skipped" not in st.fingerprint


def test_a_glob_skips_binaries_too(tmp_path):
    root = _tree(tmp_path / "src")
    _, rels, _ = sources.select_files("text", str(root / "pkg" / "*"))
    assert rels == [f"m{i}.py" for i in range(6)]


def test_text_that_is_not_utf8_still_stops_naming_the_file(tmp_path):
    root = _tree(tmp_path / "src")
    (root / "pkg" / "latin1.py").write_bytes(b"# caf\xe9\n")
    with pytest.raises(PosxError, match="latin1.py' is not UTF-8") as info:
        store.load({"source": "text", "path": str(root)}, tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_a_folder_of_binaries_only_is_one_line_with_the_count(tmp_path):
    root = tmp_path / "bin"
    root.mkdir()
    (root / "a.dat").write_bytes(b"\0\1\2")
    (root / "b.pyc").write_bytes(b"abc")
    with pytest.raises(PosxError, match="no \\(non-hidden\\) files besides 2 binary or cache files") as info:
        store.load({"source": "text", "path": str(root)}, tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_posx_outputs_inside_the_data_path_are_not_read(tmp_path, monkeypatch):
    """data.path=. where posx keeps its results: the cache (token stores hold text bytes) and run
    directories are left out, so a second build reads the same files as the first."""
    root = tmp_path / "proj"
    root.mkdir()
    for i in range(5):
        (root / f"m{i}.py").write_text(f"x = {i}\n" * 40, encoding="utf-8")
    run = root / "results" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n", encoding="utf-8")
    (run / "metrics.csv").write_text("step,val_loss\n1,2.0\n", encoding="utf-8")
    monkeypatch.chdir(root)
    cache = root / "results" / "cache"
    first = store.load({"source": "text", "path": "."}, cache)
    assert first.fingerprint["files"] == 5
    second = store.load({"source": "text", "path": ".", "val_fraction": 0.1}, cache)
    assert second.fingerprint["files"] == 5 and second.fingerprint["bytes"] == first.fingerprint["bytes"]


def test_reports_sweeps_and_the_whole_results_directory_are_not_read(tmp_path, monkeypatch):
    """data.path=. beside results/ with a report, a sweep and a stray text file of posx's (a
    runs CSV): none of it is read; the same folders without their markers are read."""
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x = 1\n" * 40, encoding="utf-8")
    report = root / "results" / "reports" / "2026-01-01"
    report.mkdir(parents=True)
    for name in ("summary.csv", "missing.csv", "groups.csv", "summary.md"):
        (report / name).write_text("a,b\n1,2\n", encoding="utf-8")
    (root / "results" / "runs.csv").write_text("name\nr1\n", encoding="utf-8")
    sweep = root / "elsewhere" / "sweep"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n", encoding="utf-8")
    (sweep / "sweep.md").write_text("| a |\n", encoding="utf-8")
    (root / "notes" / "reports" / "draft").mkdir(parents=True)
    (root / "notes" / "reports" / "draft" / "summary.csv").write_text("mine\n", encoding="utf-8")
    monkeypatch.chdir(root)
    _, rels, _ = sources.select_files("text", ".", (tmp_path / "cache").resolve())
    assert rels == ["notes/reports/draft/summary.csv", "src/a.py"]


@pytest.mark.parametrize(
    "rows, match",
    [
        ([{"text": "a b"}, {"text": None}, {"text": "c"}, {"text": None}], "row 1 of column 'text' is null \\(2 rows"),
        ([{"text": 1}, {"text": 2}], "row 0 of column 'text' is int64"),
        ([{"text": "a"}, {"text": "b"}, {"text": 5.5}], "row 2 of column 'text' is a float"),
        ([{"text": ["a"]}, {"text": ["b"]}], "row 0 of column 'text' is a list"),
    ],
    ids=["nulls", "numbers", "mixed", "lists"],
)
def test_a_dataset_row_that_is_not_text_is_refused_naming_it(tmp_path, rows, match):
    pytest.importorskip("datasets")
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with pytest.raises(PosxError, match=match) as info:
        store.load({"source": "datasets", "name": "json", "data_files": str(path)}, tmp_path / "cache")
    assert "\n" not in str(info.value) and "data.text_column" in str(info.value)
