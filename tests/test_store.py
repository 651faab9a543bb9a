"""Tests for posx.data.store and posx.data.sources: the token store on disk, its tokens, documents and reuse."""

import hashlib
import json
import os
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from posx.core.errors import PosxError
from posx.data import corpus as data
from posx.data import hfdatasets, sources, splitfiles, store
from posx.schema.config import BYTES
from tests.test_tokenizer import HARD

PREMOVE = Path(__file__).resolve().parent / "fixtures" / "premove"


def _text_dir(root, n=40, unique_in_val=None):
    root.mkdir(parents=True, exist_ok=True)
    names = [f"doc{i:02d}.txt" for i in range(n)]
    is_val = store.split_by_file(names, 0.2)
    for i, (name, v) in enumerate(zip(names, is_val)):
        body = "".join(f"line {j} of document {i}: héllo wörld\n" for j in range(30))
        if v and unique_in_val:
            body += (unique_in_val + " ") * 200
        (root / name).write_text(body, encoding="utf-8")
    return root, names, is_val


def _byte_corpus(source, path, val_fraction) -> tuple[bytes, bytes]:
    """The byte corpus as posx built it in memory before token stores: each split's files joined by
    b"\\n" (a file is held out when sha1 of its relative path mod 10000 < val_fraction x 10000); when
    that leaves a split empty, the last val_fraction of all files joined (at least one byte) is held out."""
    root, rels, _ = sources.select_files(source, path)
    blobs = [(root / r).read_bytes() for r in rels]
    held_out = [int(hashlib.sha1(r.encode()).hexdigest(), 16) % 10_000 < val_fraction * 10_000 for r in rels]
    train = b"\n".join(b for b, v in zip(blobs, held_out) if not v)
    val = b"\n".join(b for b, v in zip(blobs, held_out) if v)
    if not train or not val:
        joined = b"\n".join(blobs)
        cut = len(joined) - max(1, int(len(joined) * val_fraction))
        train, val = joined[:cut], joined[cut:]
    return train, val


@pytest.mark.parametrize("layout", ["files", "one-file", "stdlib"])
def test_byte_store_holds_the_byte_corpus(tmp_path, layout):
    """With the byte tokenizer the store holds exactly the bytes of the files, split by file
    (or by tail), and its fingerprint's sha256 is theirs: what runs recorded before token stores."""
    if layout == "stdlib":
        dcfg, path, vf = {"source": "stdlib"}, None, 0.05
    else:
        if layout == "files":
            path, vf = str(_text_dir(tmp_path / "c")[0]), 0.2
        else:
            path, vf = str(tmp_path / "one.txt"), 0.1
            Path(path).write_text("abcdéfghij\n" * 100, encoding="utf-8")
        dcfg = {"source": "text", "path": path, "val_fraction": vf}
    train, val = _byte_corpus(dcfg["source"], path, vf)
    st = store.load(dcfg, tmp_path / "new")
    assert st.train.dtype == np.uint8 and isinstance(st.train, np.memmap)
    assert np.asarray(st.train).tobytes() == train and np.asarray(st.val).tobytes() == val
    fp = st.fingerprint
    assert fp["sha256"] == hashlib.sha256(train + val).hexdigest()
    assert (fp["train_bytes"], fp["val_bytes"], fp["tokens"]) == (len(train), len(val), len(train) + len(val))
    assert fp["split"] == ("bytes" if layout == "one-file" else "files")
    assert fp["tokenizer"]["kind"] == "byte" and fp["tokenizer"]["vocab_size"] == BYTES


def test_byte_store_holds_the_bytes_old_runs_trained_on(tmp_path):
    """tests/fixtures/premove/runs/old-rope recorded its corpus before token stores existed; the
    byte store of the same files has that fingerprint, so the run resumes and re-evaluates on it."""
    recorded = json.loads((PREMOVE / "runs" / "old-rope" / "model.json").read_text())["data"]
    st = store.load({"source": "text", "path": str(PREMOVE / "corpus")}, tmp_path)
    same = ("sha256", "files", "train_files", "val_files", "bytes", "train_bytes", "val_bytes", "split", "val_fraction")
    assert {k: st.fingerprint[k] for k in same} == {k: recorded[k] for k in same}
    assert len(st.train) == recorded["train_bytes"] and len(st.val) == recorded["val_bytes"]


def test_bpe_store_dtype_offsets_and_documents(tmp_path):
    root, names, is_val = _text_dir(tmp_path / "c")
    st = store.load(
        {"source": "text", "path": str(root), "val_fraction": 0.2, "tokenizer": "bpe", "vocab_size": 600},
        tmp_path / "cache",
    )
    assert st.train.dtype == np.uint16 and st.fingerprint["dtype"] == "uint16"
    assert sorted(p.name for p in st.path.iterdir()) == [
        "docs.npz",
        "store.json",
        "tokenizer.json",
        "train.bin",
        "val.bin",
    ]
    tok = st.tokenizer
    for split, tokens, starts, wanted in (
        ("train", st.train, st.train_docs, [n for n, v in zip(names, is_val) if not v]),
        ("val", st.val, st.val_docs, [n for n, v in zip(names, is_val) if v]),
    ):
        assert len(starts) == len(wanted) == st.fingerprint["documents"][split]
        assert starts[0] == 0 and (np.diff(starts) > 0).all()
        assert (np.asarray(tokens) == tok.eod).sum() == len(wanted) - 1  # one separator between documents
        assert all(tokens[s - 1] == tok.eod for s in starts[1:])
        ends = list(starts[1:] - 1) + [len(tokens)]
        for name, a, b in zip(wanted, starts, ends):
            assert tok.decode(tokens[a:b]) == (root / name).read_text(encoding="utf-8")
    assert json.loads((st.path / "store.json").read_text())["fingerprint"]["tokenizer"]["sha256"] == tok.sha256


def test_bpe_training_reports_what_it_has_read_before_the_store_is_written(tmp_path, monkeypatch):
    """A log gets ``train bpe`` lines (documents, MB of the training split, MB/s) ending at every
    document, before any ``prepare`` line: a BPE trained on a large corpus is not minutes of silence."""
    monkeypatch.setattr(store, "PROGRESS_S", 0.0)  # a line's worth at every document
    root = tmp_path / "c"
    root.mkdir()
    names = [f"doc{i:02d}.txt" for i in range(40)]
    for i, name in enumerate(names):
        (root / name).write_text(f"document {i} says héllo to line {i * 7}\n" * 1000, encoding="utf-8")
    train_mb = sum((root / n).stat().st_size for n, v in zip(names, store.split_by_file(names, 0.2)) if not v) / 1e6
    out = StringIO()
    dcfg = {"source": "text", "path": str(root), "val_fraction": 0.2, "tokenizer": "bpe", "vocab_size": 600}
    store.load(dcfg, tmp_path / "cache", Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    bpe = [i for i, line in enumerate(lines) if line.startswith("train bpe ")]
    prepare = [i for i, line in enumerate(lines) if line.startswith("prepare ")]
    assert len(bpe) > 1 and prepare and bpe[-1] < prepare[0], lines
    assert " MB/s " in lines[bpe[0]] and " s left" in lines[bpe[0]]
    last = lines[bpe[-1]].split()
    assert last[2] == "40/40" and lines[bpe[-1]].endswith("MB read; computing the merges")
    assert last[3] == f"{train_mb:.1f}" and 0.5 < train_mb < 1.5  # the training split only, not all 1.4 MB


def test_bpe_is_trained_on_the_training_split_only(tmp_path):
    root, _, _ = _text_dir(tmp_path / "c", unique_in_val="zyzzyvaquux")
    st = store.load(
        {"source": "text", "path": str(root), "val_fraction": 0.2, "tokenizer": "bpe", "vocab_size": 2000},
        tmp_path / "cache",
    )
    vocab = st.tokenizer.hf.get_vocab()
    assert not any("zyzzyva" in t for t in vocab)  # would be merged had the BPE seen the held-out files
    assert len(st.tokenizer.encode("zyzzyvaquux")) > 3


def test_bpe_tail_split_of_one_file(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("".join(f"sentence number {i} héllo\n" for i in range(400)), encoding="utf-8")
    st = store.load(
        {"source": "text", "path": str(f), "val_fraction": 0.1, "tokenizer": "bpe", "vocab_size": 300},
        tmp_path / "cache",
    )
    assert st.fingerprint["split"] == "bytes" and len(st.val) > 0
    text = st.tokenizer.decode(st.train) + st.tokenizer.decode(st.val)
    assert text == f.read_text(encoding="utf-8")


def test_memmap_batches_equal_in_memory_batches(tmp_path):
    root, _, _ = _text_dir(tmp_path / "c")
    st = store.load({"source": "text", "path": str(root), "tokenizer": "bpe", "vocab_size": 500}, tmp_path / "cache")
    in_memory = torch.from_numpy(np.array(st.train, dtype=np.int64))
    for seed in range(3):
        a = data.get_batch(st.train, 8, 24, torch.Generator().manual_seed(seed))
        b = data.get_batch(in_memory, 8, 24, torch.Generator().manual_seed(seed))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[0].dtype == torch.int64


def test_second_load_reuses_and_a_bad_store_is_rebuilt(tmp_path, monkeypatch):
    root, _, _ = _text_dir(tmp_path / "c")
    dcfg = {"source": "text", "path": str(root), "tokenizer": "bpe", "vocab_size": 400}
    first = store.load(dcfg, tmp_path / "cache")
    train = np.array(first.train)
    real_build = store._build
    monkeypatch.setattr(store, "_build", lambda *a: pytest.fail("rebuilt a good store"))
    again = store.load(dcfg, tmp_path / "cache")
    assert again.path == first.path and np.array_equal(again.train, train)
    with open(first.path / "train.bin", "r+b") as f:  # truncate: the store no longer checks out
        f.truncate(10)
    monkeypatch.setattr(store, "_build", real_build)
    rebuilt = store.load(dcfg, tmp_path / "cache")
    assert np.array_equal(rebuilt.train, train)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.path.name]  # no temporary left


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_datasets_json_store(tmp_path):
    pytest.importorskip("datasets")
    rows = [{"text": f"document {i}: " + "word " * (20 + i), "id": i} for i in range(30)]
    f = _jsonl(tmp_path / "docs.jsonl", rows)
    st = store.load(
        {"source": "datasets", "name": "json", "data_files": str(f), "tokenizer": "bpe", "vocab_size": 300},
        tmp_path / "cache",
    )
    fp = st.fingerprint
    assert fp["source"] == "datasets" and fp["files"] == 30
    assert fp["documents"]["train"] + fp["documents"]["val"] == 30
    assert st.tokenizer.decode(st.train[st.train_docs[0] : st.train_docs[1] - 1]) in {r["text"] for r in rows}


def test_datasets_store_is_reused_until_its_data_changes(tmp_path):
    """The store's key follows the loaded rows (posx.data.hfdatasets.data_key): the same file
    loads the same store; an edited file builds a new one with the new text."""
    pytest.importorskip("datasets")
    f = _jsonl(tmp_path / "docs.jsonl", [{"text": f"first version {i} " * 8} for i in range(12)])
    dcfg = {"source": "datasets", "name": "json", "data_files": str(f)}
    first = store.load(dcfg, tmp_path / "cache")
    assert store.load(dcfg, tmp_path / "cache").path == first.path
    _jsonl(f, [{"text": f"second text {i} " * 8} for i in range(12)])
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))  # a later edit, whatever the clock
    second = store.load(dcfg, tmp_path / "cache")
    assert second.path != first.path
    text = bytes(second.train.tolist()).decode("utf-8")
    assert "second text" in text and "first version" not in text


def test_datasets_key_of_rows_held_in_memory_is_their_text(tmp_path):
    datasets = pytest.importorskip("datasets")
    a, b = (datasets.Dataset.from_dict({"text": texts}) for texts in (["one", "two"], ["one", "tw", "o"]))
    assert a.cache_files == []  # nothing on disk: the key reads the text
    assert hfdatasets.data_key(a, "text", tmp_path) == hfdatasets.data_key(a, "text", tmp_path)
    assert hfdatasets.data_key(a, "text", tmp_path) != hfdatasets.data_key(b, "text", tmp_path)


@pytest.mark.parametrize(
    "case, match",
    [
        ("empty", "no rows|is empty"),
        ("column", "has no column 'body'"),
        ("missing", "does not exist"),
        ("no-files", "set data.data_files"),
    ],
)
def test_bad_datasets_input_is_one_line(tmp_path, case, match):
    pytest.importorskip("datasets")
    f = _jsonl(tmp_path / "docs.jsonl", [{"text": "a b c"}]) if case != "empty" else tmp_path / "empty.jsonl"
    if case == "empty":
        f.write_text("")
    dcfg = {
        "source": "datasets",
        "name": "json",
        "data_files": str(f),
        "text_column": "body" if case == "column" else "text",
    }
    if case == "missing":
        dcfg["data_files"] = str(tmp_path / "nope.jsonl")
    if case == "no-files":
        dcfg["data_files"] = None
    with pytest.raises(PosxError, match=match) as info:
        store.load(dcfg, tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_hub_name_without_network_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    import datasets.config
    import huggingface_hub.constants

    # offline as a machine without network is, minus the retries (the tests must not wait on DNS)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PosxError, match="hub.*data.name=json data.data_files") as info:
        sources.datasets_source("wikitext", "wikitext-103-raw-v1", None, "train", "text", tmp_path)
    assert "\n" not in str(info.value)


def test_bad_tokenizer_file_through_the_store(tmp_path):
    root, _, _ = _text_dir(tmp_path / "c", n=4)
    bad = tmp_path / "tok.json"
    bad.write_text("not json at all")
    with pytest.raises(PosxError, match="not a Hugging Face tokenizer.json"):
        store.load({"source": "text", "path": str(root), "tokenizer": str(bad)}, tmp_path / "cache")


def test_bpe_store_ids_equal_each_document_encoded_whole(tmp_path, monkeypatch):
    """Small read chunks, pieces and batches, so documents are cut into many pieces, pieces carry
    over chunk and batch ends, and a line is longer than a piece: every document's ids are still
    those of the whole document (CRLF, blank-line runs, no newline at all included)."""
    monkeypatch.setattr(sources, "CHUNK", 50)
    monkeypatch.setattr(splitfiles, "BATCH_BYTES", 300)
    monkeypatch.setattr(store.tok_mod, "PIECE_CHARS", 16)
    root = tmp_path / "c"
    root.mkdir()
    names = [f"doc{i:02d}.txt" for i in range(2 * len(HARD))]
    for i, name in enumerate(names):
        (root / name).write_bytes((HARD[i % len(HARD)] * (1 + i % 3)).encode("utf-8"))
    st = store.load(
        {"source": "text", "path": str(root), "val_fraction": 0.2, "tokenizer": "bpe", "vocab_size": 400},
        tmp_path / "cache",
    )
    is_val = store.split_by_file(names, 0.2)
    for tokens, starts, wanted in (
        (st.train, st.train_docs, [n for n, v in zip(names, is_val) if not v]),
        (st.val, st.val_docs, [n for n, v in zip(names, is_val) if v]),
    ):
        ends = list(starts[1:] - 1) + [len(tokens)]
        for name, a, b in zip(wanted, starts, ends, strict=True):
            text = (root / name).read_bytes().decode("utf-8")
            assert np.asarray(tokens[a:b]).tolist() == st.tokenizer.encode(text).tolist(), name
