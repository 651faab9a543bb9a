"""Tests for posx.data.tokenizer: byte, a BPE trained here, a user's tokenizer.json, bad input."""

import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from posx.core.errors import PosxError
from posx.data import tokenizer as tok

TEXTS = [f"def f{i}(x):\n    return x * {i}  # héllo wörld, 日本語 {i}\n" * 5 for i in range(60)]


@pytest.fixture(scope="module")
def bpe():
    return tok.train_bpe(iter(TEXTS), 400)


def test_byte_tokenizer_is_bytes():
    b = tok.byte_tokenizer()
    assert b.vocab_size == 256 and b.eod is None and b.separator.tolist() == [10]
    ids = b.encode("héllo\n")
    assert ids.tolist() == list("héllo\n".encode()) and b.decode(ids) == "héllo\n"


def test_bpe_round_trip_and_vocab(bpe):
    assert bpe.kind == "bpe" and 257 <= bpe.vocab_size <= 400 and bpe.eod == 0
    assert bpe.separator.tolist() == [bpe.eod]
    for text in [*TEXTS[:3], "unseen ÄÖÜ text 🙂 with\ttabs\n\n", "", "12345"]:
        ids = bpe.encode(text)
        assert ids.dtype == np.int64 and bpe.decode(ids) == text
        assert (ids < bpe.vocab_size).all() and (ids != bpe.eod).all()
    assert len(bpe.encode(TEXTS[0])) < len(TEXTS[0].encode())  # it merged something
    batch = bpe.encode_batch(TEXTS[:4])
    assert all(np.array_equal(a, bpe.encode(t)) for a, t in zip(batch, TEXTS[:4]))


def test_bpe_is_deterministic(bpe):
    again = tok.train_bpe(iter(TEXTS), 400)
    assert again.sha256 == bpe.sha256 and again.to_json() == bpe.to_json()


def test_saved_bpe_loads_as_a_user_tokenizer(tmp_path, bpe):
    path = tmp_path / "tokenizer.json"
    path.write_text(bpe.to_json())
    user = tok.from_file(str(path))
    assert user.kind == "file" and user.sha256 == bpe.sha256 and user.eod == bpe.eod
    assert tok.spec(str(path), 0) == {"kind": "file", "sha256": bpe.sha256}


def test_user_tokenizer_without_an_end_of_document_token_gets_one(tmp_path):
    hf = HFTokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "words.json"
    path.write_text(hf.to_str())
    user = tok.from_file(str(path))
    assert user.vocab_size == 4 and user.eod == 3 and user.encode("a b a").tolist() == [0, 1, 0]


def _word_level(tmp_path, vocab: dict, **kw) -> str:
    hf = HFTokenizer(models.WordLevel(vocab, **kw))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "words.json"
    path.write_text(hf.to_str())
    return str(path)


def test_a_vocabulary_with_ids_past_its_size_is_refused(tmp_path):
    # the store's dtype and the embedding are sized by the token count: id 5000000 of a
    # 2-token vocabulary was stored as uint8 (wrapped) and failed in training as an IndexError
    path = _word_level(tmp_path, {"hello": 0, "[UNK]": 5_000_000}, unk_token="[UNK]")
    with pytest.raises(PosxError, match="numbers its 2 tokens up to id 5000000; posx needs the ids 0 to 1"):
        tok.from_file(path)


def test_a_tokenizer_that_cannot_encode_is_one_line(tmp_path):
    user = tok.from_file(_word_level(tmp_path, {"hello": 0, "world": 1}))  # no unk_token
    assert user.encode("hello world").tolist() == [0, 1]
    with pytest.raises(PosxError, match=r"cannot encode the corpus \(WordLevel error: Missing \[UNK\]") as info:
        user.encode("hello there")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("size", [1, 256])
def test_vocab_smaller_than_the_byte_alphabet(size):
    with pytest.raises(PosxError, match="at least 257") as info:
        tok.train_bpe(iter(TEXTS), size)
    assert "\n" not in str(info.value)
    with pytest.raises(PosxError, match="at least 257"):
        tok.spec("bpe", size)


def test_tokenizer_file_that_does_not_parse(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "nonsense"}}')
    with pytest.raises(PosxError, match="not a Hugging Face tokenizer.json") as info:
        tok.from_file(str(bad))
    assert "\n" not in str(info.value)
    with pytest.raises(PosxError, match="neither byte, bpe nor an existing"):
        tok.from_file(str(tmp_path / "missing.json"))


def test_dtype_for():
    assert tok.dtype_for(256) == np.uint8
    assert tok.dtype_for(257) == np.uint16 and tok.dtype_for(65536) == np.uint16
    assert tok.dtype_for(65537) == np.uint32


# Texts where a careless cut changes the ids: a line longer than a piece, CRLF line ends, runs of
# blank lines (GPT-2's regex merges whitespace runs), trailing spaces and tabs before a newline,
# Unicode whitespace, a contraction right after a newline, and no newline at all.
HARD = [
    "x = 1\n" + "y" * 300 + " tail\nz = 2\n",
    "first line\r\nsecond\r\n\r\nthird\r\n",
    "a\n\n\n\nb\n \n\tc\n\n",
    "trailing   \nspaces\t\t\nand tabs  \n\n  indented\n",
    "nbsp\u00a0\nline\u2028sep\u2029par\x1cfs\n\x85next\nend",
    "it\n's\n't here\n'll\n",
    "no newline at all, just one long line of words " * 20,
    "\n\nleading blank lines\nthen text\n\n\n",
]


@pytest.mark.parametrize("size", [1, 8, 64])
def test_pieces_join_to_the_text_and_encode_as_the_whole(bpe, size):
    assert bpe.cuts_at_lines
    for text in [*HARD, *TEXTS[:2]]:
        parts = tok.pieces(text, size)
        assert "".join(parts) == text
        ids = np.concatenate(bpe.encode_batch(parts))
        assert ids.tolist() == bpe.encode(text).tolist(), (text, parts)
        for part in parts[1:]:  # every cut is right before a newline that non-whitespace follows
            assert part[0] == "\n" and len(part) > 1 and not part[1].isspace()


def test_a_line_longer_than_a_piece_is_not_cut():
    text = "short\n" + "L" * 100 + "\nnext\n"
    assert tok.pieces(text, 10) == ["short", "\n" + "L" * 100, "\nnext\n"]
    assert tok.pieces("x" * 50, 10) == ["x" * 50]


def test_only_a_plain_byte_level_pre_tokenizer_cuts_at_lines(bpe):
    hf = HFTokenizer.from_str(bpe.to_json())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert not tok.from_json(hf.to_str(), "file", "t").cuts_at_lines
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not tok.from_json(hf.to_str(), "file", "t").cuts_at_lines
    assert not tok.byte_tokenizer().cuts_at_lines
