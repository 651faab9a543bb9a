"""Bits per byte: exact for bytes, byte counts of a BPE equal the text's, rows carry the protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from posx.data.tokenizer import train_bpe
from posx.eval import bytecount
from posx.eval.extrapolate import evaluate
from posx.model.gpt import GPT
from posx.runs.records import RunMeta
from posx.schema.config import EvalConfig

from helpers.model import spec

DOCS = [f"déf f{i}(x):  # ünïcode ✓ {i * 7}\n    return x ** {i} - 'ß'\n" for i in range(60)]


def test_byte_rows_have_bpb_equal_to_nats_per_token_over_ln2():
    torch.manual_seed(0)
    model = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="rope")).eval()
    meta = RunMeta(model=model.config, train_context=8, data={}, step=0)
    ev = OmegaConf.structured(
        EvalConfig(factors=[1, 2], methods=["none", "pi"], tokens=64, protocol="sliding", stride=4)
    )
    df = evaluate(model, meta, torch.randint(0, 256, (400,), dtype=torch.uint8), ev, torch.device("cpu"), "r").table
    assert (df["bytes"] == df["tokens"]).all()
    for r in df.itertuples():
        assert r.bpb == pytest.approx(r.nll / math.log(2), rel=1e-12)
        assert r.bpb_lo == pytest.approx(math.log(r.ppl_lo) / math.log(2), rel=1e-12) and r.bpb_lo < r.bpb < r.bpb_hi
    assert set(df["window_start"]) == {"stream"} and set(df["normalisation"]) == {"token"}
    assert set(df["stride"]) == {4} and not df["within_documents"].any()


def test_bpe_bytes_counted_from_tokens_equal_the_texts_bytes():
    tok = train_bpe(iter(DOCS), 300)
    counts = bytecount.token_bytes(tok)
    text = "".join(DOCS)
    ids = tok.encode(text)
    assert len(ids) < len(text.encode("utf-8"))  # merges: tokens cover several bytes
    assert counts[ids].sum() == len(text.encode("utf-8"))
    assert tok.decode(ids).encode("utf-8") == text.encode("utf-8")
    # documents joined by the end-of-document token count as joined by one newline
    joined = np.concatenate([np.concatenate([tok.encode(d), tok.separator]) for d in DOCS])
    assert counts[joined].sum() == len("\n".join(DOCS).encode("utf-8")) + 1


def test_scored_bytes_follow_the_scored_targets():
    tokens = np.arange(1, 200) % 256
    counts = np.arange(256)  # token id i covers i bytes: the sum names exactly which targets were read
    # sliding, L=16, S=4, 32 scored tokens: windows at 0, 4, ..., 28 score targets 13..16, 17..20, ..., 41..44
    assert bytecount.scored_bytes(tokens, 16, 4, 32, counts) == int(tokens[13:45].sum())
    assert bytecount.scored_bytes(tokens, 16, 16, 32, counts) == int(tokens[1:33].sum())
    assert bytecount.scored_bytes(tokens, 8, 8, 16, counts, starts=[50, 100]) == int(
        tokens[51:59].sum() + tokens[101:109].sum()
    )


def test_a_bpe_rows_bytes_are_those_of_the_text_its_scored_tokens_decode_to():
    tok = train_bpe(iter(DOCS), 300)
    val = torch.from_numpy(tok.encode("".join(DOCS * 3)))
    torch.manual_seed(0)
    model = GPT(spec(n_layer=1, n_head=2, d_model=16, pos="rope", vocab_size=tok.vocab_size)).eval()
    meta = RunMeta(model=model.config, train_context=16, data={}, step=0)
    ev = OmegaConf.structured(EvalConfig(factors=[1, 2], methods=["none"], tokens=64))
    df = evaluate(model, meta, val, ev, torch.device("cpu"), "r", tokenizer=tok).table
    text_bytes = len(tok.decode(val[1:65].tolist()).encode("utf-8"))  # targets 1..64 of the non-overlapping windows
    assert (df["bytes"] == text_bytes).all() and text_bytes > 64
    for r in df.itertuples():
        assert r.bpb == pytest.approx(r.nll * r.tokens / r.bytes / math.log(2), rel=1e-12)
        assert r.bpb < r.nll / math.log(2)  # a token covers more than a byte
