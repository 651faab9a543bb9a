"""Tests for posx.data: the byte corpus through the token store (file selection, the split,
reuse and rebuilding of the store), and batching."""

import json
import os
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from posx.core.errors import PosxError
from posx.data import store
from posx.data.corpus import get_batch, require_tokens
from posx.data.sources import select_files


def _load(source, path=None, val_fraction=0.05, cache_dir=None, console=None) -> store.Store:
    """The byte store of a file source (the default tokenizer)."""
    return store.load({"source": source, "path": path, "val_fraction": val_fraction}, cache_dir, console)


def _bytes(tokens) -> bytes:
    return np.asarray(tokens).tobytes()


@pytest.fixture(scope="module")
def stdlib(tmp_path_factory):
    """Two independent builds of the stdlib corpus, in two fresh cache dirs."""
    dirs = [tmp_path_factory.mktemp("cache_a"), tmp_path_factory.mktemp("cache_b")]
    return dirs, [_load("stdlib", cache_dir=d) for d in dirs]


@pytest.fixture
def text_dir(tmp_path):
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / ".hidden").mkdir()
    for i in range(40):
        (root / f"f{i:02d}.txt").write_text(f"file {i}: héllo wörld\n" * 20, encoding="utf-8")
    (root / "sub" / "deep.md").write_text("# deep\n" * 10, encoding="utf-8")
    (root / ".hidden" / "x.txt").write_bytes(b"\xff\xfe not utf8")
    (root / ".dotfile").write_bytes(b"\xff")
    return root


# ---------------------------------------------------------------- stdlib


def test_stdlib_corpus_is_nontrivial(stdlib):
    _, (corpus, _) = stdlib
    assert corpus.train.dtype == np.uint8 and corpus.train.ndim == 1 and isinstance(corpus.train, np.memmap)
    assert corpus.val.dtype == np.uint8 and corpus.val.ndim == 1
    assert len(corpus.train) > 1_000_000 and len(corpus.val) > 0
    fp = corpus.fingerprint
    assert json.loads(json.dumps(fp)) == fp  # JSON-serialisable as it is
    assert fp["source"] == "stdlib" and fp["split"] == "files" and fp["tokenizer"]["kind"] == "byte"
    assert fp["train_bytes"] == fp["train_tokens"] == len(corpus.train)
    assert fp["val_bytes"] == fp["val_tokens"] == len(corpus.val)
    assert fp["bytes"] == fp["train_bytes"] + fp["val_bytes"]
    assert fp["files"] == fp["train_files"] + fp["val_files"] > 100
    assert fp["val_files"] > 0 and fp["val_fraction"] == 0.05
    assert len(fp["sha256"]) == 64 and fp["python"]


def test_stdlib_is_deterministic(stdlib):
    _, (a, b) = stdlib
    assert a.fingerprint == b.fingerprint
    assert np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)


def test_stdlib_selection_skips_tests_and_site_packages():
    root, rels, _ = select_files("stdlib")
    assert rels == sorted(rels) and len(rels) > 100
    assert all(r.endswith(".py") for r in rels)
    banned = {"test", "tests", "idle_test", "__pycache__", "site-packages", "dist-packages"}
    for rel in rels:
        assert not banned & set(rel.split("/")[:-1]), rel
    assert "os.py" in rels and "json/__init__.py" in rels
    assert all((root / r).is_file() for r in rels[:20])


def test_stdlib_rejects_a_path():
    with pytest.raises(PosxError, match="data.source"):
        select_files("stdlib", "somewhere")


def test_second_load_reads_the_store(stdlib, monkeypatch):
    (cache_dir, _), (corpus, _) = stdlib
    monkeypatch.setattr(store, "_build", lambda *a: pytest.fail("rebuilt a good store"))
    again = _load("stdlib", cache_dir=cache_dir)
    assert again.path == corpus.path and again.fingerprint == corpus.fingerprint
    assert np.array_equal(again.train, corpus.train) and np.array_equal(again.val, corpus.val)


def test_console_line_only_when_building(tmp_path, text_dir):
    out = StringIO()
    console = Console(file=out, width=400)
    _load("text", str(text_dir), cache_dir=tmp_path / "c", console=console)
    built = out.getvalue()
    last = built.splitlines()[-1]  # after the "prepare i/n" progress lines
    assert last.startswith("built text corpus: 41 documents") and "byte tokens (vocab 256" in last
    _load("text", str(text_dir), cache_dir=tmp_path / "c", console=console)
    assert out.getvalue() == built


@pytest.mark.parametrize("split", ["files", "bytes"])
def test_progress_counts_each_document_once_whichever_way_the_split_cuts(tmp_path, text_dir, split):
    """Split by bytes, the one document is cut between train and val, and begins in both files."""
    one = tmp_path / "one.txt"
    one.write_text("a line of text\n" * 200, encoding="utf-8")
    out = StringIO()
    path = text_dir if split == "files" else one
    corpus = _load("text", str(path), val_fraction=0.2, cache_dir=tmp_path / "c", console=Console(file=out))
    assert corpus.fingerprint["split"] == split
    files = corpus.fingerprint["files"]
    progress = [line.split()[1] for line in out.getvalue().splitlines() if line.startswith("prepare ")]
    assert progress and progress[-1] == f"{files}/{files}", out.getvalue()


# ---------------------------------------------------------------- text source


def test_text_directory(tmp_path, text_dir):
    root, rels, _ = select_files("text", str(text_dir))
    assert root == text_dir.resolve()
    assert rels == sorted([f"f{i:02d}.txt" for i in range(40)] + ["sub/deep.md"])
    corpus = _load("text", str(text_dir), val_fraction=0.2, cache_dir=tmp_path / "c")
    fp = corpus.fingerprint
    assert fp["source"] == "text" and fp["files"] == 41 and fp["split"] == "files"
    assert fp["train_files"] > 0 and fp["val_files"] > 0
    assert fp["documents"] == {"train": fp["train_files"], "val": fp["val_files"]}
    text = _bytes(corpus.train).decode("utf-8") + _bytes(corpus.val).decode("utf-8")
    assert "héllo" in text and "# deep" in text and "not utf8" not in text
    total = sum((text_dir / r).stat().st_size for r in rels) + (fp["train_files"] - 1) + (fp["val_files"] - 1)
    assert fp["bytes"] == total  # files joined by a single b"\n"


def test_text_single_file_uses_byte_split(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("abcdefghij" * 100, encoding="utf-8")
    corpus = _load("text", str(f), val_fraction=0.1, cache_dir=tmp_path / "c")
    fp = corpus.fingerprint
    assert fp["split"] == "bytes" and fp["files"] == 1
    assert len(corpus.val) == 100 and len(corpus.train) == 900
    assert _bytes(corpus.train) + _bytes(corpus.val) == f.read_bytes()


def test_byte_split_keeps_at_least_one_val_byte(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("abc", encoding="utf-8")
    corpus = _load("text", str(f), val_fraction=0.01, cache_dir=tmp_path / "c")
    assert _bytes(corpus.val) == b"c" and _bytes(corpus.train) == b"ab"


def test_text_glob(tmp_path, text_dir):
    pattern = str(text_dir / "**" / "*.md")
    root, rels, _ = select_files("text", pattern)
    assert root == (text_dir / "sub").resolve() and rels == ["deep.md"]
    corpus = _load("text", str(text_dir / "f0*.txt"), cache_dir=tmp_path / "c")
    assert corpus.fingerprint["files"] == 10
    assert len(corpus.train) + len(corpus.val) == corpus.fingerprint["bytes"]


def test_non_utf8_file_is_named(tmp_path):
    root = tmp_path / "mixed"
    root.mkdir()
    (root / "good.txt").write_text("fine\n", encoding="utf-8")
    (root / "bad.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(PosxError, match="bad.txt") as info:
        _load("text", str(root), cache_dir=tmp_path / "c")
    assert "UTF-8" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: str(p / "missing.txt"), "does not exist"),
        (lambda p: os.mkfifo(p / "pipe") or str(p / "pipe"), "neither a regular file nor a directory"),
        (lambda p: (p / "loop").symlink_to(p / "loop") or str(p / "loop"), "neither a regular file nor a directory"),
        (lambda p: str(p / "nothing*.txt"), "matches no files"),
        (lambda p: (p / "empty.txt").write_bytes(b"") or str(p / "empty.txt"), "too few"),
        (lambda p: (p / "emptydir").mkdir() or str(p / "emptydir"), "no \\(non-hidden\\) files"),
    ],
    ids=["missing", "fifo", "link-loop", "empty-glob", "empty-file", "empty-dir"],
)
def test_bad_text_paths(tmp_path, make, match):
    path = make(tmp_path)
    with pytest.raises(PosxError, match=match) as info:
        _load("text", path, cache_dir=tmp_path / "c")
    message = str(info.value)
    assert "\n" not in message and ("data.path" in message or path in message)


def test_text_needs_a_path(tmp_path):
    with pytest.raises(PosxError, match="data.path"):
        _load("text", None, cache_dir=tmp_path)


def test_unknown_source(tmp_path):
    with pytest.raises(PosxError, match="stdlib.*text"):
        _load("wiki", cache_dir=tmp_path)


@pytest.mark.parametrize("bad", [0, -0.1, 0.51, 1.0, float("nan"), "0.1"])
def test_val_fraction_range(tmp_path, bad):
    with pytest.raises(PosxError, match="val_fraction"):
        _load("stdlib", val_fraction=bad, cache_dir=tmp_path)


# ---------------------------------------------------------------- a store that does not check out


def _store_dir(cache: Path) -> Path:
    (found,) = cache.glob("store-*")
    return found


def _rebuilt_equals(first: store.Store, again: store.Store) -> None:
    assert np.array_equal(again.train, first.train) and np.array_equal(again.val, first.val)
    assert again.fingerprint == first.fingerprint


def test_truncated_tokens_are_rebuilt(tmp_path, text_dir):
    cache = tmp_path / "c"
    first = _load("text", str(text_dir), val_fraction=0.2, cache_dir=cache)
    train, val = np.array(first.train), np.array(first.val)
    with open(first.path / "val.bin", "r+b") as f:
        f.truncate(len(val) // 2)
    again = _load("text", str(text_dir), val_fraction=0.2, cache_dir=cache)
    assert np.array_equal(again.train, train) and np.array_equal(again.val, val)
    assert (again.path / "val.bin").stat().st_size == first.fingerprint["val_bytes"]


@pytest.mark.parametrize("damage", ["missing", "not-json"])
def test_store_without_a_good_store_json_is_rebuilt(tmp_path, text_dir, damage):
    """A build killed before store.json was written leaves a store that never loads."""
    cache = tmp_path / "c"
    first = _load("text", str(text_dir), cache_dir=cache)
    meta = first.path / "store.json"
    if damage == "missing":
        meta.unlink()
    else:
        meta.write_text("{not json")
    again = _load("text", str(text_dir), cache_dir=cache)
    _rebuilt_equals(first, again)
    assert json.loads(meta.read_text())["fingerprint"] == first.fingerprint
    assert [p.name for p in cache.iterdir()] == [first.path.name]  # nothing temporary left


def test_changed_file_changes_the_store(tmp_path, text_dir):
    cache = tmp_path / "c"
    _load("text", str(text_dir), cache_dir=cache)
    (text_dir / "f00.txt").write_text("changed and longer than before " * 50, encoding="utf-8")
    changed = _load("text", str(text_dir), cache_dir=cache)
    assert b"changed and longer" in _bytes(changed.train) + _bytes(changed.val)
    assert len(list(cache.glob("store-*"))) == 2


# ---------------------------------------------------------------- batches


def test_get_batch_shapes_and_shift():
    tokens = torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(1)).to(torch.uint8)
    x, y = get_batch(tokens, 8, 32, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (8, 32)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    long = tokens.long()
    for row_x, row_y in zip(x, y):
        starts = [i for i in range(len(tokens) - 32) if torch.equal(long[i : i + 32], row_x)]
        assert starts, "x is not a window of the tokens"
        assert any(torch.equal(long[s + 1 : s + 33], row_y) for s in starts)


def test_get_batch_is_deterministic():
    tokens = torch.arange(500, dtype=torch.int64).to(torch.uint8)
    a = get_batch(tokens, 4, 16, torch.Generator().manual_seed(123))
    b = get_batch(tokens, 4, 16, torch.Generator().manual_seed(123))
    c = get_batch(tokens, 4, 16, torch.Generator().manual_seed(124))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_get_batch_exact_fit_and_too_small():
    tokens = torch.arange(17, dtype=torch.uint8)
    x, y = get_batch(tokens, 3, 16, torch.Generator().manual_seed(0))
    assert torch.equal(x[0], torch.arange(16)) and torch.equal(y[0], torch.arange(1, 17))
    with pytest.raises(PosxError, match="data has 17 tokens, fewer than one window of 18"):
        get_batch(tokens, 3, 17, torch.Generator().manual_seed(0))


def test_require_tokens():
    require_tokens(torch.zeros(10, dtype=torch.uint8), 10, "validation data")
    with pytest.raises(PosxError, match="validation data has 9 tokens") as info:
        require_tokens(torch.zeros(9, dtype=torch.uint8), 10, "validation data")
    assert "\n" not in str(info.value)
