"""Tests for posx.data.store and posx.data.sources: the token store on disk, its tokens, documents and reuse."""

import json

import numpy as np
import pytest
import torch

from posx.data import corpus as data
from posx.data import sources, store
from posx.core.errors import PosxError


def _text_dir(root, n=40, unique_in_val=None):
    root.mkdir(parents=True, exist_ok=True)
    names = [f"doc{i:02d}.txt" for i in range(n)]
    is_val = data.split_by_file(names, 0.2)
    for i, (name, v) in enumerate(zip(names, is_val)):
        body = "".join(f"line {j} of document {i}: héllo wörld\n" for j in range(30))
        if v and unique_in_val:
            body += (unique_in_val + " ") * 200
        (root / name).write_text(body, encoding="utf-8")
    return root, names, is_val


@pytest.mark.parametrize("layout", ["files", "one-file", "stdlib"])
def test_byte_store_is_posx_data_corpus(tmp_path, layout):
    """With the byte tokenizer the store holds exactly the tokens and fingerprint of today's corpus."""
    if layout == "stdlib":
        dcfg, legacy = {"source": "stdlib"}, data.load_corpus("stdlib", cache_dir=tmp_path / "old")
    else:
        if layout == "files":
            path, vf = _text_dir(tmp_path / "c")[0], 0.2
        else:
            path, vf = tmp_path / "one.txt", 0.1
            path.write_text("abcdéfghij\n" * 100, encoding="utf-8")
        dcfg = {"source": "text", "path": str(path), "val_fraction": vf}
        legacy = data.load_corpus("text", str(path), vf, cache_dir=tmp_path / "old")
    st = store.load(dcfg, tmp_path / "new")
    assert st.train.dtype == np.uint8 and isinstance(st.train, np.memmap)
    assert np.array_equal(st.train, legacy.train.numpy()) and np.array_equal(st.val, legacy.val.numpy())
    assert {k: st.fingerprint[k] for k in legacy.fingerprint} == legacy.fingerprint
    assert st.fingerprint["tokenizer"]["kind"] == "byte" and st.fingerprint["tokens"] == legacy.fingerprint["bytes"]


def test_bpe_store_dtype_offsets_and_documents(tmp_path):
    root, names, is_val = _text_dir(tmp_path / "c")
    st = store.load({"source": "text", "path": str(root), "val_fraction": 0.2, "tokenizer": "bpe",
                     "vocab_size": 600}, tmp_path / "cache")
    assert st.train.dtype == np.uint16 and st.fingerprint["dtype"] == "uint16"
    assert sorted(p.name for p in st.path.iterdir()) == ["docs.npz", "store.json", "tokenizer.json", "train.bin", "val.bin"]
    tok = st.tokenizer
    for split, tokens, starts, wanted in (("train", st.train, st.train_docs, [n for n, v in zip(names, is_val) if not v]),
                                          ("val", st.val, st.val_docs, [n for n, v in zip(names, is_val) if v])):
        assert len(starts) == len(wanted) == st.fingerprint["documents"][split]
        assert starts[0] == 0 and (np.diff(starts) > 0).all()
        assert (np.asarray(tokens) == tok.eod).sum() == len(wanted) - 1  # one separator between documents
        assert all(tokens[s - 1] == tok.eod for s in starts[1:])
        ends = list(starts[1:] - 1) + [len(tokens)]
        for name, a, b in zip(wanted, starts, ends):
            assert tok.decode(tokens[a:b]) == (root / name).read_text(encoding="utf-8")
    assert json.loads((st.path / "store.json").read_text())["fingerprint"]["tokenizer"]["sha256"] == tok.sha256


def test_bpe_is_trained_on_the_training_split_only(tmp_path):
    root, _, _ = _text_dir(tmp_path / "c", unique_in_val="zyzzyvaquux")
    st = store.load({"source": "text", "path": str(root), "val_fraction": 0.2, "tokenizer": "bpe",
                     "vocab_size": 2000}, tmp_path / "cache")
    vocab = st.tokenizer.hf.get_vocab()
    assert not any("zyzzyva" in t for t in vocab)  # would be merged had the BPE seen the held-out files
    assert len(st.tokenizer.encode("zyzzyvaquux")) > 3


def test_bpe_tail_split_of_one_file(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("".join(f"sentence number {i} héllo\n" for i in range(400)), encoding="utf-8")
    st = store.load({"source": "text", "path": str(f), "val_fraction": 0.1, "tokenizer": "bpe", "vocab_size": 300},
                    tmp_path / "cache")
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
    st = store.load({"source": "datasets", "name": "json", "data_files": str(f), "tokenizer": "bpe",
                     "vocab_size": 300}, tmp_path / "cache")
    fp = st.fingerprint
    assert fp["source"] == "datasets" and fp["files"] == 30
    assert fp["documents"]["train"] + fp["documents"]["val"] == 30
    assert st.tokenizer.decode(st.train[st.train_docs[0]:st.train_docs[1] - 1]) in {r["text"] for r in rows}


@pytest.mark.parametrize("case, match", [
    ("empty", "no rows|is empty"),
    ("column", "has no column 'body'"),
    ("missing", "does not exist"),
    ("no-files", "set data.data_files"),
])
def test_bad_datasets_input_is_one_line(tmp_path, case, match):
    pytest.importorskip("datasets")
    f = _jsonl(tmp_path / "docs.jsonl", [{"text": "a b c"}]) if case != "empty" else tmp_path / "empty.jsonl"
    if case == "empty":
        f.write_text("")
    dcfg = {"source": "datasets", "name": "json", "data_files": str(f),
            "text_column": "body" if case == "column" else "text"}
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
