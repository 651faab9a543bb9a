"""posx <-> transformers, checked against transformers itself: export (weights, q/k layout,
rope_parameters, tokenizer), posx's rescaling against transformers' rope types, and
`posx eval-extrapolate` on transformers checkpoints."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from rich.console import Console

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, models  # noqa: E402  (a transformers dependency)

from posx import rope  # noqa: E402
from posx.configure.compose import compose, typed  # noqa: E402
from posx.core.errors import PosxError  # noqa: E402
from posx.data import store  # noqa: E402
from posx.hf import checkpoint as hf_checkpoint  # noqa: E402
from posx.hf import export as hf_export  # noqa: E402
from posx.hf.checkpoint import HFCausalLM, evaluate_hf_dir  # noqa: E402
from posx.model.blocks import swiglu_hidden  # noqa: E402
from posx.model.gpt import GPT  # noqa: E402
from posx.model.rescale import WINDOWED, install_trained, method_frequencies  # noqa: E402
from posx.model.roperecord import RopeRecord  # noqa: E402
from posx.runs.lineage import new_context  # noqa: E402
from posx.runs.records import RunMeta  # noqa: E402
from posx.runs.rundir import load_run, save_run  # noqa: E402
from posx.schema.config import EvalConfig, ExtendRootConfig  # noqa: E402
from posx.train.extend import rope_record  # noqa: E402

from conftest import run_posx  # noqa: E402
from helpers.model import changed, spec  # noqa: E402

T, HEAD_DIM, BASE = 32, 16, 100.0  # a small base puts YaRN's ramp and llama3's bands inside head_dim


def random_llama(tie: bool = False) -> GPT:
    """A llama-block posx model with weights far from init, so logits vary a lot."""
    torch.manual_seed(0)
    m = GPT(spec(n_layer=2, n_head=2, d_model=2 * HEAD_DIM, base=BASE, block="llama", tie_embeddings=tie)).eval()
    with torch.no_grad():
        for _name, p in m.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p) if p.dim() == 1 else 0.15 * torch.randn_like(p))
    return m


def hf_twin(m: GPT, rope_parameters: dict, max_positions: int) -> torch.nn.Module:
    """transformers' LlamaForCausalLM with m's weights and the given rope_parameters."""
    meta = RunMeta(m.config, T, {}, 0)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=m.config.model.d_model,
        intermediate_size=swiglu_hidden(m.config.model.d_model, 4, 8),
        num_hidden_layers=m.config.model.n_layer,
        num_attention_heads=m.config.model.n_head,
        head_dim=HEAD_DIM,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        tie_word_embeddings=m.config.model.tie_embeddings,
        rope_parameters={"rope_theta": BASE, **rope_parameters},
    )
    hf = transformers.LlamaForCausalLM(config).eval()
    missing, unexpected = hf.load_state_dict(hf_export.hf_state_dict(m, meta), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    return hf


# posx method -> transformers rope_parameters at scale s (and max_position_embeddings)
HF_TYPES = {
    "none": lambda s: ({"rope_type": "default"}, T),
    "pi": lambda s: ({"rope_type": "linear", "factor": s}, T),
    "dynamic_ntk": lambda s: ({"rope_type": "dynamic", "factor": s}, T),
    "yarn": lambda s: ({"rope_type": "yarn", "factor": s, "original_max_position_embeddings": T}, int(s * T)),
    "llama3": lambda s: (
        {
            "rope_type": "llama3",
            "factor": s,
            "original_max_position_embeddings": T,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
        },
        int(s * T),
    ),
}


@pytest.mark.parametrize("s", [2.0, 4.0])
@pytest.mark.parametrize("method", sorted(HF_TYPES))
def test_posx_rescaling_gives_transformers_logits(method, s):
    """posx's model with method's frequencies == transformers with that rope type == transformers
    with posx's frequencies installed by posx eval-extrapolate (HFCausalLM)."""
    m = random_llama()
    L = int(s * T)
    ev = EvalConfig()
    inv_freq, attention = method_frequencies(method, ev, HEAD_DIM, BASE, T, scale=s, length=L)
    m.pos.set_frequencies(inv_freq, attention)
    params, max_positions = HF_TYPES[method](s)
    theirs = hf_twin(m, params, max_positions)
    plain = hf_twin(m, {"rope_type": "default"}, T)
    driven = HFCausalLM(plain, plain.model.rotary_emb)
    driven.pos.set_frequencies(inv_freq, attention)
    x = torch.randint(0, 256, (2, L), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, ref, installed = m(x)[0], theirs(x).logits, driven(x)[0]
    # posx computes frequencies in float64 and rounds once; transformers computes them in float32:
    # they differ by an ulp (relative 1.2e-7), which moves logits of size ~4 by ~1e-5.
    rotary = theirs.model.rotary_emb
    torch.testing.assert_close(rotary.inv_freq, inv_freq, rtol=2.5e-7, atol=0)
    assert rotary.attention_scaling == pytest.approx(attention, abs=1e-7)
    assert ref.abs().max() > 1.0  # logits far from uniform: the comparison means something
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(installed, ref, rtol=1e-5, atol=1e-5)


# Resonance's integer wavelengths have no transformers rope type: refused (test below).
# Self-Extend, ReRoPE and LM-Infinite are no extension (posx extend refuses them, tests/test_windowed.py).
@pytest.mark.parametrize("method", [m for m in rope.METHODS if not m.startswith("resonance") and m not in WINDOWED])
def test_every_extension_exports_exactly(method, tmp_path):
    """The rope record of an extension by each method maps onto a transformers rope type whose
    frequencies are the ones the run trained with; the exported model's logits are posx's."""
    m = random_llama()
    parent = RunMeta(m.config, T, {}, 1)
    cfg = ExtendRootConfig()
    cfg.method, cfg.factor = method, 2.0
    record = rope_record(cfg, parent)
    child = RunMeta(m.config, new_context(T, 2.0), {}, 2, record)
    install_trained(m, record, child.train_context, "the test's extension")
    (tmp_path / "run").mkdir()
    save_run(tmp_path / "run", m, child)
    out = hf_export.export_run(tmp_path / "run", tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    x = torch.randint(0, 256, (1, 2 * T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(m(x)[0], hf(x).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["resonance", "resonance_yarn"])
def test_resonance_extensions_are_refused_in_one_line(method, tmp_path):
    m = random_llama()
    record = RopeRecord(method=method, factor=2.0, original_context=T)
    (tmp_path / "run").mkdir()
    save_run(tmp_path / "run", m, RunMeta(m.config, 2 * T, {}, 1, record))
    with pytest.raises(hf_export.PosxError, match=f"RoPE method '{method}' has no transformers rope type"):
        hf_export.export_run(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    "option",
    [{"rotary_fraction": 0.5}, {"attn_scale": "logn"}, {"attn_scale": "ssmax"}, {"nope_every": 2}, {"short_conv": 3}],
)
def test_options_llama_cannot_hold_are_refused_in_one_line(option, tmp_path):
    m = random_llama()
    config = changed(m.config, **option)
    (tmp_path / "run").mkdir()
    save_run(tmp_path / "run", GPT(config), RunMeta(config, T, {}, 1))
    name = next(iter(option))
    with pytest.raises(hf_export.PosxError, match=f"trains with (model|pos)\\.{name}=.*cannot be exported"):
        hf_export.export_run(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.slow
def test_inexpressible_frequencies_are_refused(tmp_path):
    m = random_llama()
    ntk, _ = rope.frequencies("ntk", HEAD_DIM, BASE, factor=2.0)
    record = RopeRecord(
        method="pi", factor=2.0, original_context=T, inv_freq=ntk.tolist(), attention_factor=1.0
    )  # numbers that are not pi's
    (tmp_path / "run").mkdir()
    save_run(tmp_path / "run", m, RunMeta(m.config, 2 * T, {}, 1, record))
    with pytest.raises(hf_export.PosxError, match="transformers cannot express"):
        hf_export.export_run(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_args) -> dict[str, Path]:
    """A tiny llama run trained through the CLI (tied embeddings, as llama_tiny), and its export."""
    work = tmp_path_factory.mktemp("hf")
    run_posx("train", "model=llama_tiny", "name=ll", *tiny_args, cwd=work)
    run = work / "results" / "runs" / "ll"
    run_posx("export", str(run), "--out", str(work / "exported" / "ll"), cwd=work)
    return {"work": work, "run": run, "out": work / "exported" / "ll"}


@pytest.mark.slow
def test_exported_run_loads_with_posx_logits(exported):
    model, meta = load_run(exported["run"])
    hf = transformers.AutoModelForCausalLM.from_pretrained(exported["out"], local_files_only=True).eval()
    assert type(hf).__name__ == "LlamaForCausalLM" and hf.dtype == torch.float32
    x = torch.randint(0, 256, (2, 4 * meta.train_context), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x)[0], hf(x).logits, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_exported_config_and_tokenizer(exported):
    data = json.loads((exported["out"] / "config.json").read_text())
    assert data["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert data["rope_theta"] == 10000.0 and data["rope_scaling"] is None  # transformers 4 spelling
    assert data["max_position_embeddings"] == 32 and data["tie_word_embeddings"] is True
    tok = transformers.AutoTokenizer.from_pretrained(exported["out"], local_files_only=True)
    text = "def f(x):\n    return 'é☃'\x00"
    assert tok.encode(text, add_special_tokens=False) == list(text.encode())
    assert tok.decode(list(text.encode())) == text


@pytest.mark.slow
def test_eval_extrapolate_on_the_export_gives_the_runs_table(exported, tiny_args):
    args = [a for a in tiny_args if a.startswith(("eval.", "data", "device"))]
    args += ["eval.methods=[none,pi,ntk,dynamic_ntk,yarn,llama3]"]
    own = [a for a in args if not a.startswith("data")]  # a posx run evaluates on its own corpus
    run_posx("eval-extrapolate", str(exported["run"]), *own, cwd=exported["work"])
    run_posx("eval-extrapolate", str(exported["out"]), *args, cwd=exported["work"])
    # The interval's standard error is a spread of per-window NLLs, so it keeps fewer exact digits
    # than the NLL itself: it is compared to 1e-4. eval_id names where posx kept the run's table.
    spread = ["nll_se", "ppl_lo", "ppl_hi"]
    for name, key in (("extrapolation.csv", "nll"), ("passkey.csv", "key_nll"), ("positions.csv", "nll")):
        a = pd.read_csv(exported["run"] / name).drop(columns=["eval_id"], errors="ignore")
        b = pd.read_csv(exported["out"] / name).drop(columns=["eval_id"], errors="ignore")
        assert len(a) == len(b) and (b["run"] == "ll").all()
        loose = [c for c in spread if c in a.columns]
        pd.testing.assert_frame_equal(a.drop(columns=[key, *loose]), b.drop(columns=[key, *loose]))
        pd.testing.assert_series_equal(a[key], b[key], rtol=1e-5)
        pd.testing.assert_frame_equal(a[loose], b[loose], rtol=1e-4)


@pytest.mark.slow
def test_export_refuses_what_it_cannot_write(exported, tiny_args):
    work = exported["work"]
    proc = run_posx("export", str(exported["run"]), "--out", str(exported["out"]), cwd=work, check=False)
    assert proc.returncode == 2 and "already exists and is not empty" in proc.stderr
    linked = work / "linked-out"
    linked.symlink_to(work / "g-empty")
    (work / "g-empty").mkdir()
    proc = run_posx("export", str(exported["run"]), "--out", str(linked), cwd=work, check=False)
    assert proc.returncode == 2 and "is a symbolic link" in proc.stderr and not any((work / "g-empty").iterdir())
    run_posx("train", "name=g2", *tiny_args, cwd=work)
    proc = run_posx("export", "g2", "--out", str(work / "g2-hf"), cwd=work, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "gpt2-block rope run" in proc.stderr and not (work / "g2-hf").exists()


@pytest.mark.slow
def test_random_transformers_llama_evaluates_end_to_end(tmp_path, tiny_args):
    """A Llama saved with save_pretrained (nothing downloaded; grouped-query attention, no
    tokenizer, byte-sized vocabulary) goes through posx eval-extrapolate."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "rand")
    args = [a for a in tiny_args if a.startswith(("eval.", "data", "device"))]
    proc = run_posx(
        "eval-extrapolate",
        str(tmp_path / "rand"),
        *args,
        "eval.methods=[none,yarn,dynamic_ntk,self_extend,rerope,lm_infinite,dca,streaming_llm]",
        cwd=tmp_path,
    )
    assert "transformers llama T=32" in proc.stdout
    df = pd.read_csv(tmp_path / "rand" / "extrapolation.csv")
    windowed = df["method"].isin(sorted(WINDOWED))  # need posx's attention
    assert (df.loc[windowed, "status"] == "not_applicable").all() and windowed.sum() == 5 * 4
    assert (df.loc[~windowed, "status"] == "ok").all() and len(df) == 8 * 4 and (df["train_context"] == 32).all()
    assert (tmp_path / "rand" / "passkey.csv").is_file()


@pytest.mark.slow
def test_models_without_reachable_rope_are_refused(tmp_path, tiny_args):
    transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=256)
    ).save_pretrained(tmp_path / "gpt2")
    args = [a for a in tiny_args if a.startswith(("eval.", "data", "device"))]
    proc = run_posx("eval-extrapolate", str(tmp_path / "gpt2"), *args, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "gpt2 model without RoPE" in proc.stderr


def char_llama(model_dir: Path, eod: str | None = "</s>") -> transformers.PreTrainedTokenizerFast:
    """A random one-layer Llama saved with its own character-level tokenizer (``eod`` its
    end-of-document token, if any) into ``model_dir``; nothing downloaded."""
    chars = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    if eod is not None:
        vocab[eod] = len(vocab)
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="[UNK]")), unk_token="[UNK]"
    )
    assert tok.encode("ab", add_special_tokens=False) == [vocab["a"], vocab["b"]]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return tok


@pytest.mark.slow
def test_a_non_byte_tokenizer_retokenizes_the_held_out_text(tmp_path, tiny_args):
    """A checkpoint with its own (character-level) tokenizer scores the corpus in its tokens."""
    char_llama(tmp_path / "chars")
    args = [a for a in tiny_args if a.startswith(("eval.", "data", "device"))]
    proc = run_posx("eval-extrapolate", str(tmp_path / "chars"), *args, "eval.methods=[none,yarn]", cwd=tmp_path)
    assert "tokenizer is not byte-level; the corpus is read in its tokens" in proc.stdout
    df = pd.read_csv(tmp_path / "chars" / "extrapolation.csv")
    assert (df["status"] == "ok").all() and len(df) == 2 * 4
    pk = pd.read_csv(tmp_path / "chars" / "passkey.csv")  # the key planted in the checkpoint's tokens
    assert set(pk["status"]) <= {"ok", "too_short"} and pk.loc[pk["status"] == "ok", "trials"].sum() > 0


def _datasets_cfg(tmp_path: Path, rows: list[str]):
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": r}) + "\n" for r in rows), encoding="utf-8")
    return typed(
        compose(
            [
                "device=cpu",
                "data=datasets",
                "data.name=json",
                f"data.data_files={jsonl}",
                "data.val_fraction=0.2",
                f"data.cache_dir={tmp_path / 'cache'}",
                "eval.tokens=256",
                "eval.batch_tokens=256",
                "eval.factors=[1,2]",
                "eval.methods=[none,yarn]",
                "eval.passkey.trials=4",
            ]
        )
    )


def test_a_checkpoint_reads_a_datasets_source_in_its_own_tokens(tmp_path):
    """eval-extrapolate on a transformers directory reads data=datasets through a token store in
    the checkpoint's tokenizer; its 1x perplexity is transformers' own loss on those tokens."""
    pytest.importorskip("datasets")
    tok = char_llama(tmp_path / "chars")
    rows = ["".join(f"row {i}, line {j}: some text.\n" for j in range(30)) for i in range(40)]
    cfg = _datasets_cfg(tmp_path, rows)
    result = evaluate_hf_dir(tmp_path / "chars", cfg, Console(file=StringIO()))
    corpus = hf_checkpoint.load_data(tmp_path / "chars", len(tok), cfg, Console(file=StringIO()))  # reused
    assert corpus.fingerprint["source"] == "datasets" and corpus.fingerprint["tokenizer"]["kind"] == "file"
    eod = tok.convert_tokens_to_ids("</s>")
    held_out = [r for r, v in zip(rows, store.split_by_file([str(i) for i in range(len(rows))], 0.2)) if v]
    expected = [t for i, r in enumerate(held_out) for t in [eod] * (i > 0) + tok.encode(r, add_special_tokens=False)]
    assert np.asarray(corpus.val).tolist() == expected
    df = result.table
    assert (df["status"] == "ok").all() and (df["tokens"] == 256).all()
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "chars", local_files_only=True).eval()
    windows = torch.as_tensor(np.asarray(corpus.val[: 256 + 1], dtype=np.int64))
    x, y = windows[:-1].view(8, 32), windows[1:].view(8, 32)  # eight windows of T=32, as the protocol reads
    with torch.no_grad():
        reference = torch.nn.functional.cross_entropy(hf(x).logits.flatten(0, 1), y.flatten()).item()
    one = df[(df["method"] == "none") & (df["factor"] == 1.0)]
    assert one["nll"].item() == pytest.approx(reference, rel=1e-5)
    assert (result.passkey_frame["status"] == "ok").any()


def test_a_checkpoint_tokenizer_without_an_end_of_document_token_is_one_line(tmp_path):
    pytest.importorskip("datasets")
    char_llama(tmp_path / "chars", eod=None)
    cfg = _datasets_cfg(tmp_path, ["some text\n" * 20] * 10)
    with pytest.raises(PosxError, match="none of the end-of-document tokens") as info:
        evaluate_hf_dir(tmp_path / "chars", cfg, Console(file=StringIO()))
    assert "\n" not in str(info.value) and "</s>" in str(info.value)
