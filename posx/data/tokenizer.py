"""Tokenizers of a corpus (``data.tokenizer``): ``byte``, ``bpe`` (GPT-2's byte-level scheme, Radford
et al. 2019, trained on the training split) or a user's ``tokenizer.json`` (docs/data.md).

``pieces`` cuts a text for ``encode_batch`` only right before a newline that a non-whitespace
character follows: GPT-2's pre-tokenizer regex ends a whitespace run one character before such a
point (``\\s+(?!\\S)``, no lookbehind), so each side tokenises alone as within the whole.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from posx.core.errors import PosxError
from posx.schema.config import BYTES

BYTE, BPE, FILE = "byte", "bpe", "file"  # a tokenizer's kind, as a store's fingerprint records it
EOD = "<|endoftext|>"
EOD_CANDIDATES = (EOD, "</s>", "<eos>", "<|end_of_text|>", "[SEP]")
MIN_BPE_VOCAB = 257  # 256 byte symbols + the end-of-document token
PIECE_CHARS = 4096  # characters a text is cut into for encode_batch (where a cut is safe)
_CUT = re.compile(r"\n(?=\S)")  # a safe cut is right before such a newline (module docstring)


@dataclass
class Tokenizer:
    kind: str  # byte | bpe | file
    vocab_size: int  # ids are 0 .. vocab_size - 1 (the model's vocabulary)
    eod: int | None  # id placed between documents; None: byte (documents joined by b"\n")
    sha256: str  # identity of the tokenizer, recorded in fingerprints and model.json
    hf: HFTokenizer | None = None  # the Hugging Face tokenizer (bpe, file)

    @property
    def separator(self) -> np.ndarray:
        """Tokens between two documents: (1,) b"\\n" for byte, the end-of-document id otherwise."""
        return np.array([10 if self.eod is None else self.eod], dtype=np.int64)

    def encode(self, text: str) -> np.ndarray:
        """(n,) int64 ids of ``text``."""
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Ids of each text; a bpe/file tokenizer encodes the batch on all cores (Rust threads)."""
        if self.hf is None:
            return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int64) for t in texts]
        try:
            encoded = self.hf.encode_batch(texts, add_special_tokens=False)
        except Exception as exc:  # tokenizers raises a bare Exception when its model cannot encode a text
            detail = " ".join(str(exc).split())[:160]
            raise PosxError(
                f"the tokenizer ({kind_label(self.kind)}) cannot encode the corpus ({detail}); fix the "
                "tokenizer (a WordLevel model needs an unk_token in its vocabulary), or use byte or bpe"
            ) from None
        return [np.asarray(e.ids, dtype=np.int64) for e in encoded]

    @property
    def cuts_at_lines(self) -> bool:
        """Whether ``pieces`` may cut a text (GPT-2's pre-tokenizer alone: module docstring)."""
        pre = None if self.hf is None else self.hf.pre_tokenizer
        return (
            isinstance(pre, pre_tokenizers.ByteLevel)
            and pre.use_regex
            and not pre.add_prefix_space
            and self.hf.normalizer is None
        )

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        if self.hf is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self.hf.decode(ids, skip_special_tokens=False)

    def to_json(self) -> str | None:
        """What is stored with the corpus (tokenizer.json); None for byte."""
        return None if self.hf is None else self.hf.to_str()

    def describe(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "eod": self.eod, "sha256": self.sha256}


def pieces(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of about ``size`` characters, each cut right before a newline that a
    non-whitespace character follows (a line longer than ``size`` is not cut); they join to ``text``."""
    out, start, n = [], 0, len(text)
    while n - start > size:
        cut = text.rfind("\n", start + 1, start + size + 1)
        while cut > start and (cut + 1 == n or text[cut + 1].isspace()):  # not followed by non-whitespace
            cut = text.rfind("\n", start + 1, cut)
        if cut <= start:
            found = _CUT.search(text, start + size + 1)
            if found is None:
                break
            cut = found.start()
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def byte_tokenizer() -> Tokenizer:
    return Tokenizer(BYTE, BYTES, None, hashlib.sha256(b"posx byte tokenizer").hexdigest())


def dtype_for(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id: uint8 / uint16 / uint32."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise PosxError(f"a vocabulary of {vocab_size} tokens does not fit uint32; use a smaller tokenizer")


def kind_label(kind: str) -> str:
    """How messages name a tokenizer kind: byte, bpe, or tokenizer.json (a user's file)."""
    return "tokenizer.json" if kind == FILE else kind


def _wrap(hf: HFTokenizer, kind: str) -> Tokenizer:
    eod = next((hf.token_to_id(t) for t in EOD_CANDIDATES if hf.token_to_id(t) is not None), None)
    if eod is None:
        hf.add_special_tokens([EOD])
        eod = hf.token_to_id(EOD)
    text = hf.to_str()
    return Tokenizer(
        kind, hf.get_vocab_size(with_added_tokens=True), eod, hashlib.sha256(text.encode("utf-8")).hexdigest(), hf
    )


def from_json(text: str, kind: str, where: str) -> Tokenizer:
    """A tokenizer from its JSON; ``where`` names it in the error when it does not parse."""
    try:
        hf = HFTokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        detail = " ".join(str(exc).split())[:160]
        raise PosxError(
            f"{where} is not a Hugging Face tokenizer.json ({detail}); "
            "point data.tokenizer at a tokenizer.json, or use byte or bpe"
        ) from None
    count = hf.get_vocab_size(with_added_tokens=True)
    top = max(hf.get_vocab(with_added_tokens=True).values(), default=-1)
    if top >= count:  # the embedding has one row per token: ids must be 0 .. count-1
        raise PosxError(
            f"{where} numbers its {count} tokens up to id {top}; posx needs the ids 0 to {count - 1} "
            "(one embedding row each): renumber its vocabulary, or use byte or bpe"
        )
    return _wrap(hf, kind)


def from_file(path: str) -> Tokenizer:
    """A user's tokenizer.json (``data.tokenizer=<path>``)."""
    full = Path(os.path.expanduser(path))
    if not full.is_file():
        raise PosxError(f"data.tokenizer '{path}' is neither byte, bpe nor an existing tokenizer.json file")
    try:
        text = full.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PosxError(
            f"cannot read data.tokenizer '{path}' ({exc.__class__.__name__}); point it at a readable tokenizer.json"
        ) from None
    return from_json(text, FILE, f"data.tokenizer '{path}'")


def check_vocab_size(vocab_size: int) -> None:
    if vocab_size < MIN_BPE_VOCAB:
        raise PosxError(
            f"data.vocab_size={vocab_size} is smaller than the byte alphabet of a byte-level BPE "
            f"(256 bytes + 1 end-of-document token); set data.vocab_size to at least {MIN_BPE_VOCAB}"
        )


def train_bpe(texts: Iterator[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE of at most ``vocab_size`` tokens trained on ``texts``, ``<|endoftext|>`` as id 0."""
    check_vocab_size(vocab_size)
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return _wrap(hf, BPE)


def spec(tokenizer: str, vocab_size: int) -> dict:
    """What identifies the tokenizer before any store exists (part of the store's key)."""
    if tokenizer == BYTE:
        return {"kind": BYTE}
    if tokenizer == BPE:
        check_vocab_size(vocab_size)
        return {"kind": BPE, "vocab_size": int(vocab_size)}
    return {"kind": FILE, "sha256": from_file(tokenizer).sha256}
