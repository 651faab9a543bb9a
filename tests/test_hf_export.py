"""posx export writes the tokenizer the run's ids mean: a BPE run's own tokenizer.json, read
back by transformers' AutoTokenizer, encodes and decodes as posx's tokenizer does."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from posx.core.errors import PosxError  # noqa: E402
from posx.data import tokenizer as tok_mod  # noqa: E402
from posx.hf.export import export_run  # noqa: E402
from posx.model.gpt import GPT  # noqa: E402
from posx.runs.records import RunMeta  # noqa: E402
from posx.runs.rundir import save_run  # noqa: E402

from helpers.model import spec  # noqa: E402

TEXTS = [f"def f{i}(x):\n    return x * {i} + {i * i}  # line {i}\n" for i in range(200)]


def test_a_bpe_run_exports_its_own_tokenizer(tmp_path):
    bpe = tok_mod.train_bpe(iter(TEXTS), 300)
    torch.manual_seed(0)
    config = spec(vocab_size=bpe.vocab_size, n_layer=1, n_head=2, d_model=32, block="llama")
    run = tmp_path / "bpe-run"
    run.mkdir()
    save_run(run, GPT(config), RunMeta(config, 32, {"tokenizer": bpe.describe()}, 0))
    (run / "tokenizer.json").write_text(bpe.to_json(), encoding="utf-8")

    out = export_run(run, tmp_path / "hf")
    hf_tok = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = "def g(y):\n    return y * 7  # not in the training text\n"
    ids = [int(i) for i in bpe.encode_batch([text])[0]]
    assert len(ids) < len(text.encode())  # merges were learned: not the byte vocabulary
    assert hf_tok.encode(text, add_special_tokens=False) == ids
    assert hf_tok.decode(ids) == text
    assert hf_tok.eos_token == tok_mod.EOD and hf_tok.eos_token_id == bpe.eod


def test_only_the_tokenizer_the_run_trained_with_is_exported(tmp_path):
    # the ids mean what model.json's tokenizer says: a run whose tokenizer.json went missing
    # (which read as the byte vocabulary) or was swapped for another is refused before --out
    bpe, other = tok_mod.train_bpe(iter(TEXTS), 300), tok_mod.train_bpe(iter(TEXTS[:50]), 290)
    config = spec(vocab_size=bpe.vocab_size, n_layer=1, n_head=2, d_model=32, block="llama")
    run = tmp_path / "bpe-run"
    run.mkdir()
    save_run(run, GPT(config), RunMeta(config, 32, {"tokenizer": bpe.describe()}, 0))
    with pytest.raises(PosxError, match="trained with a bpe tokenizer and has no tokenizer.json"):
        export_run(run, tmp_path / "hf")
    (run / "tokenizer.json").write_text(other.to_json(), encoding="utf-8")
    with pytest.raises(PosxError, match=f"is not the tokenizer .* records {bpe.sha256[:12]}"):
        export_run(run, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
