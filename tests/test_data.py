"""Tests for posx.data: byte corpora, the split, the cache and batching."""

import json
from pathlib import Path

import pytest
import torch

from posx.data import corpus as data
from posx.data.corpus import VOCAB_SIZE, Corpus, get_batch, load_corpus, require_tokens, select_files
from posx.core.errors import PosxError


@pytest.fixture(scope="module")
def stdlib(tmp_path_factory):
    """Two independent builds of the stdlib corpus, in two fresh cache dirs."""
    dirs = [tmp_path_factory.mktemp("cache_a"), tmp_path_factory.mktemp("cache_b")]
    return dirs, [load_corpus("stdlib", cache_dir=d) for d in dirs]


def _bins(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.bin"))


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


def test_vocab_size():
    assert VOCAB_SIZE == 256


def test_stdlib_corpus_is_nontrivial(stdlib):
    _, (corpus, _) = stdlib
    assert isinstance(corpus, Corpus)
    assert corpus.train.dtype == torch.uint8 and corpus.train.dim() == 1
    assert corpus.val.dtype == torch.uint8 and corpus.val.dim() == 1
    assert corpus.train.numel() > 1_000_000
    assert corpus.val.numel() > 0
    fp = corpus.fingerprint
    json.dumps(fp)  # JSON-serialisable
    assert fp["source"] == "stdlib" and fp["split"] == "files"
    assert fp["train_bytes"] == corpus.train.numel() and fp["val_bytes"] == corpus.val.numel()
    assert fp["bytes"] == fp["train_bytes"] + fp["val_bytes"]
    assert fp["files"] == fp["train_files"] + fp["val_files"] > 100
    assert fp["val_files"] > 0 and fp["val_fraction"] == 0.05
    assert len(fp["sha256"]) == 64 and fp["python"]


def test_stdlib_is_deterministic(stdlib):
    _, (a, b) = stdlib
    assert a.fingerprint == b.fingerprint
    assert torch.equal(a.train, b.train) and torch.equal(a.val, b.val)


def test_stdlib_selection_skips_tests_and_site_packages():
    root, rels = select_files("stdlib")
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


def test_second_load_hits_the_cache(stdlib, monkeypatch):
    (cache_dir, _), (corpus, _) = stdlib

    def no_reading(path):
        raise AssertionError(f"read {path} despite the cache")

    monkeypatch.setattr(data, "_read_file", no_reading)
    again = load_corpus("stdlib", cache_dir=cache_dir)
    assert again.fingerprint == corpus.fingerprint
    assert torch.equal(again.train, corpus.train) and torch.equal(again.val, corpus.val)


def test_console_line_only_when_building(tmp_path, text_dir):
    from io import StringIO

    from rich.console import Console

    out = StringIO()
    console = Console(file=out, width=200)
    load_corpus("text", str(text_dir), cache_dir=tmp_path / "c", console=console)
    line = out.getvalue()
    assert line.count("\n") == 1 and "41 files" in line
    load_corpus("text", str(text_dir), cache_dir=tmp_path / "c", console=console)
    assert out.getvalue() == line


# ---------------------------------------------------------------- text source


def test_text_directory(tmp_path, text_dir):
    root, rels = select_files("text", str(text_dir))
    assert root == text_dir.resolve()
    assert rels == sorted([f"f{i:02d}.txt" for i in range(40)] + ["sub/deep.md"])
    corpus = load_corpus("text", str(text_dir), val_fraction=0.2, cache_dir=tmp_path / "c")
    fp = corpus.fingerprint
    assert fp["source"] == "text" and fp["files"] == 41 and fp["split"] == "files"
    assert fp["train_files"] > 0 and fp["val_files"] > 0
    text = bytes(corpus.train.tolist()).decode("utf-8") + bytes(corpus.val.tolist()).decode()
    assert "héllo" in text and "# deep" in text and "not utf8" not in text
    total = sum((text_dir / r).stat().st_size for r in rels) + (fp["train_files"] - 1) + (
        fp["val_files"] - 1
    )
    assert fp["bytes"] == total  # files joined by a single b"\n"


def test_text_single_file_uses_byte_split(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("abcdefghij" * 100, encoding="utf-8")
    corpus = load_corpus("text", str(f), val_fraction=0.1, cache_dir=tmp_path / "c")
    fp = corpus.fingerprint
    assert fp["split"] == "bytes" and fp["files"] == 1
    assert corpus.val.numel() == 100 and corpus.train.numel() == 900
    assert bytes(corpus.train.tolist()) + bytes(corpus.val.tolist()) == f.read_bytes()


def test_byte_split_keeps_at_least_one_val_byte(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("abc", encoding="utf-8")
    corpus = load_corpus("text", str(f), val_fraction=0.01, cache_dir=tmp_path / "c")
    assert corpus.val.tolist() == [ord("c")] and corpus.train.tolist() == [ord("a"), ord("b")]


def test_text_glob(tmp_path, text_dir):
    pattern = str(text_dir / "**" / "*.md")
    root, rels = select_files("text", pattern)
    assert root == (text_dir / "sub").resolve() and rels == ["deep.md"]
    corpus = load_corpus("text", str(text_dir / "f0*.txt"), cache_dir=tmp_path / "c")
    assert corpus.fingerprint["files"] == 10
    assert corpus.train.numel() + corpus.val.numel() == corpus.fingerprint["bytes"]


def test_non_utf8_file_is_named(tmp_path):
    root = tmp_path / "mixed"
    root.mkdir()
    (root / "good.txt").write_text("fine\n", encoding="utf-8")
    (root / "bad.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(PosxError, match="bad.txt") as info:
        load_corpus("text", str(root), cache_dir=tmp_path / "c")
    assert "UTF-8" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: str(p / "missing.txt"), "does not exist"),
        (lambda p: str(p / "nothing*.txt"), "matches no files"),
        (lambda p: (p / "empty.txt").write_bytes(b"") or str(p / "empty.txt"), "too few"),
        (lambda p: (p / "emptydir").mkdir() or str(p / "emptydir"), "no \\(non-hidden\\) files"),
    ],
    ids=["missing", "empty-glob", "empty-file", "empty-dir"],
)
def test_bad_text_paths(tmp_path, make, match):
    path = make(tmp_path)
    with pytest.raises(PosxError, match=match) as info:
        load_corpus("text", path, cache_dir=tmp_path / "c")
    message = str(info.value)
    assert "\n" not in message and ("data.path" in message or path in message)


def test_text_needs_a_path(tmp_path):
    with pytest.raises(PosxError, match="data.path"):
        load_corpus("text", None, cache_dir=tmp_path)


def test_unknown_source(tmp_path):
    with pytest.raises(PosxError, match="stdlib.*text"):
        load_corpus("wiki", cache_dir=tmp_path)


@pytest.mark.parametrize("bad", [0, -0.1, 0.51, 1.0, float("nan"), "0.1"])
def test_val_fraction_range(tmp_path, bad):
    with pytest.raises(PosxError, match="val_fraction"):
        load_corpus("stdlib", val_fraction=bad, cache_dir=tmp_path)


# ---------------------------------------------------------------- cache robustness


def test_corrupt_cache_is_rebuilt(tmp_path, text_dir):
    cache = tmp_path / "c"
    first = load_corpus("text", str(text_dir), val_fraction=0.2, cache_dir=cache)
    bins = _bins(cache)
    assert len(bins) == 2
    with open(bins[0], "r+b") as f:  # truncate one .bin
        f.truncate(bins[0].stat().st_size // 2)
    again = load_corpus("text", str(text_dir), val_fraction=0.2, cache_dir=cache)
    assert torch.equal(again.train, first.train) and torch.equal(again.val, first.val)
    assert again.fingerprint == first.fingerprint
    sizes = {b.stat().st_size for b in _bins(cache)}
    assert sizes == {first.fingerprint["train_bytes"], first.fingerprint["val_bytes"]}


def test_cache_without_sidecar_is_rebuilt(tmp_path, text_dir, monkeypatch):
    """A build killed before the sidecar was written leaves .bin files that never load."""
    cache = tmp_path / "c"
    first = load_corpus("text", str(text_dir), cache_dir=cache)
    (sidecar,) = cache.glob("*.json")
    sidecar.unlink()
    reads = []
    real_read = data._read_file
    monkeypatch.setattr(data, "_read_file", lambda p: reads.append(p) or real_read(p))
    again = load_corpus("text", str(text_dir), cache_dir=cache)
    assert len(reads) == 41 and sidecar.exists()
    assert torch.equal(again.train, first.train) and torch.equal(again.val, first.val)


def test_bad_sidecar_is_rebuilt(tmp_path, text_dir):
    cache = tmp_path / "c"
    first = load_corpus("text", str(text_dir), cache_dir=cache)
    (sidecar,) = cache.glob("*.json")
    sidecar.write_text("{not json")
    again = load_corpus("text", str(text_dir), cache_dir=cache)
    assert torch.equal(again.train, first.train) and torch.equal(again.val, first.val)
    assert json.loads(sidecar.read_text())["fingerprint"] == first.fingerprint
    assert not list(cache.glob("*.tmp"))


def test_changed_file_changes_the_cache_key(tmp_path, text_dir):
    cache = tmp_path / "c"
    load_corpus("text", str(text_dir), cache_dir=cache)
    (text_dir / "f00.txt").write_text("changed and longer than before " * 50, encoding="utf-8")
    changed = load_corpus("text", str(text_dir), cache_dir=cache)
    text = bytes(changed.train.tolist()) + bytes(changed.val.tolist())
    assert b"changed and longer" in text
    assert len(list(cache.glob("*.json"))) == 2


# ---------------------------------------------------------------- batches


def test_get_batch_shapes_and_shift():
    tokens = torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(1)).to(
        torch.uint8
    )
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
