"""Token stores through the real CLI: today's byte numbers exactly, bpe and datasets runs
from prepare to report, windows within documents, passkey with BPE, and bad input."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from posx.data import tokenizer
from posx.eval import passkey

from conftest import REPO, TINY, run_posx
from helpers.cli import run_posx_process

FIXTURE = REPO / "tests" / "fixtures" / "premove"
OLD_ROPE = [
    "name=again",
    "device=cpu",
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "train.context_length=16",
    "train.steps=4",
    "train.batch_size=2",
    "train.lr=0.003",
    "train.warmup_steps=1",
    "train.eval_every=2",
    "train.eval_batches=1",
    "data=text",
    "data.path=corpus",
    "eval.tokens=128",
    "eval.batch_tokens=128",
    "eval.passkey.trials=4",
    "eval.after_train=true",
]


def test_byte_path_gives_exactly_the_numbers_of_posx_before_token_stores(tmp_path, monkeypatch):
    """tests/fixtures/premove/runs/old-rope was trained and evaluated by posx before token stores.
    The byte store gives exactly its token ids (the recorded sha256 of train then val, and the
    split's sizes), so the same batches; the numbers trained from them agree to float rounding,
    whose last bits differ between CPUs (one thread fixes the order of sums on one machine)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    shutil.copytree(FIXTURE, tmp_path / "w")
    work, old = tmp_path / "w", tmp_path / "w" / "runs" / "old-rope"
    run_posx("train", *OLD_ROPE, cwd=work)
    new = work / "results" / "runs" / "again"
    was, now = (json.loads((run / "model.json").read_text())["data"] for run in (old, new))
    same = ("sha256", "train_bytes", "val_bytes", "train_files", "val_files", "split")
    assert {k: now[k] for k in same} == {k: was[k] for k in same}
    # The fixture was made on another CPU, whose last bits of float arithmetic differ (the loss
    # can differ in the 7th digit from step 2): equal within a tolerance, not bit for bit.
    wa, wb = load_file(str(old / "model.safetensors")), load_file(str(new / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wb[key], wa[key], rtol=1e-3, atol=1e-4, msg=key)
    a, b = pd.read_csv(old / "metrics.csv"), pd.read_csv(new / "metrics.csv")
    pd.testing.assert_frame_equal(a[["step"]], b[["step"]])
    pd.testing.assert_frame_equal(a[["train_loss", "val_loss"]], b[["train_loss", "val_loss"]], rtol=1e-4)
    for name in ("extrapolation.csv", "passkey.csv", "positions.csv"):
        a, b = pd.read_csv(old / name), pd.read_csv(new / name)
        if name == "passkey.csv":  # the copy variant's filler no longer holds its cue digit: new trials
            assert a[["factor", "variant", "depth_lo", "trials"]].equals(b[["factor", "variant", "depth_lo", "trials"]])
            a, b = a[a["variant"] == "prompt"], b[b["variant"] == "prompt"]
        columns = [c for c in a.columns if c != "run"]
        pd.testing.assert_frame_equal(a[columns], b[columns], rtol=1e-4, obj=name)


@pytest.fixture(scope="module")
def long_docs(tmp_path_factory) -> Path:
    """40 files of ~3 kB: held-out documents long enough for windows of 8 x 32 BPE tokens."""
    root = tmp_path_factory.mktemp("long")
    for i in range(40):
        lines = [f"def f{i}_{j}(x):\n    return x * {j} + {i}  # line {j}\n" for j in range(60)]
        (root / f"mod{i:02d}.py").write_text("".join(lines), encoding="utf-8")
    return root


@pytest.mark.slow
def test_bpe_prepare_train_reuse_eval_within_documents_report(tmp_path, long_docs):
    data = ["data=text", f"data.path={long_docs}", "data.tokenizer=bpe", "data.vocab_size=320", "data.val_fraction=0.2"]
    built = run_posx("data", "prepare", *data, cwd=tmp_path)
    assert "built text corpus" in built.stdout and "token store" in built.stdout
    again = run_posx("data", "prepare", *data, cwd=tmp_path)
    assert "built" not in again.stdout  # reused
    train = run_posx("train", *TINY, *data, "name=bpe", cwd=tmp_path)
    assert "built" not in train.stdout
    run = tmp_path / "results" / "runs" / "bpe"
    meta = json.loads((run / "model.json").read_text())
    assert meta["model"]["vocab_size"] == meta["data"]["tokenizer"]["vocab_size"] <= 320
    assert meta["data"]["config"]["tokenizer"] == "bpe" and (run / "tokenizer.json").is_file()
    user = [*data[:2], f"data.tokenizer={run / 'tokenizer.json'}", "data.val_fraction=0.2"]
    named = run_posx("data", "prepare", *user, cwd=tmp_path).stdout  # a user's file is named as such
    assert "tokenizer.json tokens (vocab" in named and "tokenizer.json vocab" in named
    proc = run_posx(
        "eval-extrapolate", "bpe", "eval.tokens=512", "device=cpu", "eval.within_documents=true", cwd=tmp_path
    )
    assert "within documents: 1x:" in proc.stdout
    df = pd.read_csv(run / "extrapolation.csv")
    assert df["within_documents"].all() and (df["status"] == "ok").all()
    assert (df["documents"] >= 1).all() and (df["tokens"] == 512).all()
    pk = pd.read_csv(run / "passkey.csv")
    assert set(pk["status"]) <= {"ok", "too_short"} and pk.loc[pk["status"] == "ok", "trials"].sum() > 0
    report = run_posx("report", str(run), "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert (tmp_path / "report").is_dir() and report.returncode == 0
    run_posx(
        "extend",
        "bpe",
        "method=yarn",
        "factor=2",
        "extend.steps=2",
        "extend.warmup_steps=1",
        "extend.eval_every=1",
        "device=cpu",
        cwd=tmp_path,
    )  # the child keeps the parent's tokenizer
    child = json.loads((tmp_path / "results" / "runs" / "bpe-yarn-x2" / "model.json").read_text())
    assert child["model"]["vocab_size"] == meta["model"]["vocab_size"]
    assert child["data"]["tokenizer"]["sha256"] == meta["data"]["tokenizer"]["sha256"]


@pytest.mark.slow
def test_datasets_json_train_eval_report(tmp_path):
    pytest.importorskip("datasets")
    rows = [{"text": "".join(f"row {i} sentence {j} of some text.\n" for j in range(40)), "n": i} for i in range(40)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = ["data=datasets", "data.name=json", "data.data_files=docs.jsonl", "data.val_fraction=0.2"]
    run_posx("train", *TINY, *data, "name=ds", cwd=tmp_path)
    run = tmp_path / "results" / "runs" / "ds"
    meta = json.loads((run / "model.json").read_text())
    assert meta["data"]["source"] == "datasets" and meta["model"]["vocab_size"] == 256
    run_posx("eval-extrapolate", "ds", "eval.tokens=512", "device=cpu", "eval.methods=[none,yarn]", cwd=tmp_path)
    assert len(pd.read_csv(run / "extrapolation.csv")) == 8
    run_posx("report", str(run), "--out", str(tmp_path / "report"), cwd=tmp_path)


def test_passkey_plants_and_scores_the_keys_bpe_tokens():
    texts = [f"passkey = {i * 7919 % 100000}\nfiller text {i}\n" for i in range(300)]
    tok = tokenizer.train_bpe(iter(texts), 400)
    val = np.concatenate([tok.encode(t) for t in texts]).astype(np.uint16)
    mark = tok.encode(passkey.MARK)
    for variant in ("prompt", "copy"):
        for t in passkey.make_trials(val, 96, variant, 8, 5, 4, 0, tok):
            key = tok.encode(t.key)
            assert len(t.tokens) == 96 and t.tokens.dtype == np.int64
            assert np.array_equal(t.tokens[t.key_start : t.key_start + len(key)], key)
            assert np.array_equal(t.tokens[-len(key) :], key)
            assert t.scored == (len(key) if variant == "prompt" else len(key) - 1) >= 1
            if variant == "prompt":
                assert np.array_equal(t.tokens[-len(key) - len(mark) : -len(key)], mark)


def _one_line_exit_2(proc, needle):
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr


BAD = [
    (["data=text", "data.path=corpus", "data.tokenizer=bpe", "data.vocab_size=100"], "at least 257"),
    (["data=text", "data.path=corpus", "data.tokenizer=bad.json"], "not a Hugging Face tokenizer.json"),
    (["data=datasets", "data.name=json", "data.data_files=empty.jsonl"], "empty"),
    (["data=datasets", "data.name=json", "data.data_files=docs.jsonl", "data.text_column=body"], "no column 'body'"),
    (["data=datasets", "data.name=wikitext", "data.config_name=wikitext-103-raw-v1"], "data.name=json data.data_files"),
    (["data=datasets", "data.name=json", "data.data_files=bad.jsonl"], "(ArrowInvalid: JSON parse error"),
]


@pytest.mark.parametrize(
    "args, needle",
    BAD,
    ids=["small-vocab", "bad-tokenizer", "empty-dataset", "missing-column", "hub-offline", "not-json"],
)
def test_bad_data_input_is_one_line_exit_2(tmp_path, monkeypatch, args, needle):
    if "data=datasets" in args:
        pytest.importorskip("datasets")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("some text\n" * 50)
    (tmp_path / "bad.json").write_text('{"version": "1.0", "model": 42}')
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "docs.jsonl").write_text('{"text": "a b c"}\n')
    (tmp_path / "bad.jsonl").write_bytes(b"\xff\xfe")  # not JSON: datasets logs an error of its own
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a machine without network, minus the DNS retries
    commands = [["data", "prepare"]] + ([["train", *TINY]] if "data=text" in args else [])
    for command in commands:
        _one_line_exit_2(run_posx(*command, *args, cwd=tmp_path, check=False), needle)
    assert not (tmp_path / "results" / "runs").exists() or not any((tmp_path / "results" / "runs").iterdir())


@pytest.mark.slow
def test_a_file_datasets_cannot_parse_is_posx_line_alone(tmp_path):
    """datasets logs its own error before raising; in a process (where its handler writes to the
    real stderr) only posx's line, which carries the parser's reason, reaches stderr."""
    pytest.importorskip("datasets")
    (tmp_path / "bad.jsonl").write_bytes(b"\xff\xfe")
    args = ["data", "prepare", "data=datasets", "data.name=json", "data.data_files=bad.jsonl"]
    proc = run_posx_process(*args, cwd=tmp_path, check=False)
    _one_line_exit_2(proc, "JSON parse error")


@pytest.mark.slow
def test_too_few_documents_for_within_documents_is_one_line(trained_runs):
    work, run = trained_runs["work"], trained_runs["rope"]
    proc = run_posx(
        "eval-extrapolate",
        str(run),
        "eval.tokens=512",
        "device=cpu",
        "eval.within_documents=true",
        "eval.min_document_tokens=100000",
        cwd=work,
        check=False,
    )
    _one_line_exit_2(proc, "eval.within_documents: 0 held-out documents")
    assert os.path.exists(run / "model.json")
