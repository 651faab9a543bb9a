"""Measure token stores: prepare throughput, and peak memory of training on a small and a large store.

Generates text corpora locally (Zipf-distributed words, one directory of files each; nothing is
downloaded), then, each in a fresh process:

1. ``posx data prepare`` with the byte tokenizer on the small and the large corpus: seconds,
   MB/s, tokens/s and the peak RSS of preparing (streaming: far below the corpus size);
2. ``posx data prepare`` with ``bpe`` (training included) and with that BPE's tokenizer.json
   as a user tokenizer (tokenizing only), on the small corpus and on the standard library;
3. ``posx train`` for a few steps on the small and on the large byte store (already prepared):
   peak RSS of the training process, which reads the store through memmap;
4. ``vs-hand`` (needs the ``bpe`` phase's stdlib tokenizer.json): in one process, in alternating
   rounds, posx building a store of the standard library with that tokenizer.json against the
   same work done by hand with Hugging Face ``tokenizers`` (read every file, ``encode_batch`` of
   whole documents in batches of about 8 MB); the median per-round ratio hand / posx (above 1:
   posx is faster) and each side's MB/s;
5. ``user-large`` (needs the ``bpe`` phase or ``--vs-hand-tokenizer``): ``posx data prepare`` of
   the large corpus with that tokenizer.json (tokenizing only): MB/s and peak RSS at >= 1 GB;
6. ``bpe-large``: ``posx data prepare`` of the large corpus with ``bpe`` (training the BPE on the
   whole training split, then tokenizing): seconds, MB/s and peak RSS at >= 1 GB;
7. ``vs-hand-bpe``: like ``vs-hand``, with the BPE trained in each round: posx's ``bpe`` store of
   the standard library against the same training and encoding written with ``tokenizers``.

    python -m benchmarks.store_measure --work /tmp/posx-measure [--large-mb 1100]   # from the repository root
    python -m benchmarks.store_measure --phases bpe,vs-hand --small-mb 1 --large-mb 1 --vocab 4096

Peak RSS is the child's ``ru_maxrss`` (its own high-water mark, file-backed pages it touched
included), read by a wrapper process per measurement, which also polls the child's
/proc/<pid>/status for the peaks of RssAnon (memory of its own: flat as the store grows) and
RssFile (mapped file pages: the memmap's pages a run touched, reclaimable page cache).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from benchmarks.harness import interleaved, posx_command, speedups
from posx.data import sources, store

TRAIN = ["train.steps=30", "train.eval_every=30", "train.eval_batches=2", "train.checkpoint_every=0", "device=cpu"]


def generate(root: Path, total_mb: float, file_mb: float = 8.0, seed: int = 0) -> Path:
    """``total_mb`` MB of words in files of ``file_mb`` MB (skipped when already there)."""
    done = root / "DONE"
    if done.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 10))) for _ in range(20000)]
    p = 1.0 / np.arange(1, len(words) + 1)  # Zipf: word r has weight 1/r
    p /= p.sum()
    per_file = int(file_mb * 1e6)
    n_files = max(1, round(total_mb / file_mb))
    for i in range(n_files):
        picks = rng.choice(len(words), per_file // 6, p=p)
        text = " ".join(words[j] for j in picks)
        lines = [text[k : k + 100] for k in range(0, len(text), 100)]
        (root / f"part{i:04d}.txt").write_text("\n".join(lines)[:per_file] + "\n", encoding="utf-8")
    done.write_text("ok\n")
    return root


WRAPPER = """
import json, re, resource, subprocess, sys, threading, time
t = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
out = []
reader = threading.Thread(target=lambda: out.extend(proc.stdout))
reader.start()
while proc.poll() is None:
    try:
        status = open(f"/proc/{proc.pid}/status").read()
        for key in peak:
            peak[key] = max(peak[key], int(re.search(key + r":\\s+(\\d+)", status).group(1)))
    except (OSError, AttributeError):
        pass
    time.sleep(0.05)
reader.join()
print(json.dumps({"rc": proc.returncode, "s": time.perf_counter() - t, "peak_kb": peak,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "out": "".join(out)}))
"""


def measured(args: list[str], cwd: Path) -> tuple[float, dict, str]:
    """(seconds, peak memory in MB, output) of ``python -m posx ARGS`` run alone under a wrapper
    that polls its /proc status every 50 ms: peak VmRSS (``ru_maxrss``), and the peaks of
    RssAnon (its own memory) and RssFile (file pages mapped, the memmapped store's included)."""
    env = {**os.environ, "COLUMNS": "300", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *posx_command(*args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(proc.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"posx {' '.join(args)} failed:\n{result['out']}")
    memory = {
        "peak_rss_mb": round(result["maxrss_kb"] / 1024),
        **{f"peak_{k}_mb": round(v / 1024) for k, v in result["peak_kb"].items() if k != "VmRSS"},
    }
    return result["s"], memory, result["out"]


def built_line(out: str) -> str:
    found = re.search(r"built .*tokens/s\)", " ".join(out.split()))
    return found.group(0) if found else "(reused)"


def by_hand(hf: HFTokenizer, root: Path, rels: list[str], batch_bytes: int = 8 << 20) -> int:
    """Tokens of every file encoded whole, ``encode_batch`` over batches of about ``batch_bytes``."""
    tokens, batch, size = 0, [], 0
    for rel in rels:
        batch.append((root / rel).read_bytes().decode("utf-8", errors="replace"))
        size += len(batch[-1])
        if size >= batch_bytes or rel == rels[-1]:
            tokens += sum(len(e.ids) for e in hf.encode_batch(batch, add_special_tokens=False))
            batch, size = [], 0
    return tokens


def posx_against_hand(work: Path, dcfg: dict, hand, megabytes: float, rounds: int, step: str) -> dict:
    """posx building the store of ``dcfg`` against ``hand()`` doing the same work by hand,
    alternating in one process: each side's MB/s and the median per-round ratio hand / posx.
    Every posx round builds in a new empty folder, so no store (of this or an earlier
    invocation) is reused."""
    fresh = Path(tempfile.mkdtemp(prefix="vs-hand-", dir=work))
    cases = {"posx": lambda r: store.load(dcfg, fresh / str(r)), "hand": lambda r: hand()}
    times = interleaved(cases, rounds, torch.device("cpu"), order="alternate")
    return {
        "step": step,
        "megabytes": round(megabytes, 1),
        **{f"{n}_mb_per_s": round(megabytes / float(np.median(t)), 2) for n, t in times.items()},
        "ratio_hand_over_posx": round(float(np.median(speedups(times, "posx", "hand"))), 3),
        "rounds": rounds,
    }


def versus_by_hand(work: Path, tokenizer: Path, rounds: int, path: Path | None) -> dict:
    """posx's store of the standard library (or the text files under ``path``) with ``tokenizer``
    against the same encoding by hand (``by_hand``)."""
    kind = "stdlib" if path is None else "text"
    root, rels, _ = sources.select_files(kind, None if path is None else str(path))
    hf = HFTokenizer.from_file(str(tokenizer))
    dcfg = {"source": kind, "path": None if path is None else str(path), "tokenizer": str(tokenizer)}
    step = f"{path or 'stdlib'} with {tokenizer}: posx store vs by hand (encode_batch of whole files)"
    mb = sum((root / r).stat().st_size for r in rels) / 1e6
    return posx_against_hand(work, dcfg, lambda: by_hand(hf, root, rels), mb, rounds, step)


def bpe_by_hand(root: Path, rels: list[str], vocab: int) -> int:
    """What ``data.tokenizer=bpe`` does, written with ``tokenizers`` directly: a byte-level BPE
    (GPT-2's pre-tokenizer and alphabet, one special token) trained on the training split's
    files whole, then every file encoded whole (``by_hand``); the tokens."""
    held_out = store.split_by_file(rels, store.DEFAULTS["val_fraction"])
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    texts = ((root / rel).read_bytes().decode("utf-8", errors="replace") for rel, v in zip(rels, held_out) if not v)
    hf.train_from_iterator(texts, trainer=trainer)
    return by_hand(hf, root, rels)


def versus_by_hand_bpe(work: Path, vocab: int, rounds: int) -> dict:
    """posx's BPE store of the standard library (training included) against ``bpe_by_hand``."""
    root, rels, _ = sources.select_files("stdlib", None)
    dcfg = {"source": "stdlib", "tokenizer": "bpe", "vocab_size": vocab}
    step = f"stdlib, bpe {vocab} (training included): posx store vs by hand"
    mb = sum((root / r).stat().st_size for r in rels) / 1e6
    return posx_against_hand(work, dcfg, lambda: bpe_by_hand(root, rels, vocab), mb, rounds, step)


def parser() -> argparse.ArgumentParser:
    """The command line: where to work, corpus sizes, BPE vocabulary, which phases."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/posx-measure"))
    parser.add_argument("--small-mb", type=float, default=10)
    parser.add_argument("--large-mb", type=float, default=1100)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument(
        "--phases",
        default="prepare,bpe,train",
        help="comma-separated: prepare, bpe, train, user-large, bpe-large, vs-hand, vs-hand-bpe",
    )
    parser.add_argument("--rounds", type=int, default=3, help="vs-hand: rounds of each side")
    parser.add_argument("--vs-hand-tokenizer", type=Path, default=None, help="vs-hand: a tokenizer.json (else bpe's)")
    parser.add_argument("--vs-hand-path", type=Path, default=None, help="vs-hand: text files instead of the stdlib")
    return parser


def corpora(work: Path, small_mb: float, large_mb: float) -> tuple[Path, Path]:
    """The small and the large generated corpus under ``work`` (generated once)."""
    t = time.perf_counter()
    small = generate(work / "small", small_mb, file_mb=1.0, seed=1)
    large = generate(work / "large", large_mb, file_mb=8.0, seed=2)
    print(
        f"generated corpora in {time.perf_counter() - t:.0f} s: {small} ({small_mb} MB), {large} ({large_mb} MB)",
        flush=True,
    )
    return small, large


def measured_row(step: str, args: list[str], work: Path) -> tuple[dict, str]:
    """``python -m posx ARGS`` measured as one row named ``step`` (printed at once), and its output."""
    s, rss, out = measured(args, work)
    row = {"step": step, "seconds": round(s, 1), **rss, "built": built_line(out)}
    print(row, flush=True)
    return row, out


def prepare_phase(small: Path, large: Path, cache: str, work: Path) -> list[dict]:
    """Byte-tokenizer stores of the small and the large corpus."""
    return [
        measured_row(f"prepare byte {name}", ["data", "prepare", "data=text", f"data.path={root}", cache], work)[0]
        for name, root in (("small", small), ("large", large))
    ]


def bpe_phase(small: Path, cache: str, vocab: int, work: Path) -> tuple[list[dict], Path]:
    """BPE stores (training included) of the small corpus and the standard library, then the same
    through each trained tokenizer.json (tokenizing only); the rows and the stdlib tokenizer.json."""
    rows, tokenizers = [], {}
    for name, data in (("small", ["data=text", f"data.path={small}"]), ("stdlib", ["data=stdlib"])):
        bpe = [*data, cache, "data.tokenizer=bpe", f"data.vocab_size={vocab}"]
        row, out = measured_row(f"prepare bpe {name} (train BPE + tokenize)", ["data", "prepare", *bpe], work)
        rows.append(row)
        store_dir = re.search(r"token store (\S+):", " ".join(out.split())).group(1)
        tokenizers[name] = Path(store_dir) / "tokenizer.json"
        user = [*data, cache, f"data.tokenizer={tokenizers[name]}"]
        step = f"prepare {name} with that tokenizer.json (tokenize only)"
        rows.append(measured_row(step, ["data", "prepare", *user], work)[0])
    return rows, tokenizers["stdlib"]


def train_phase(small: Path, large: Path, cache: str, work: Path) -> list[dict]:
    """Peak memory of a short training on the small and on the large byte store."""
    rows = []
    for name, root in (("small", small), ("large", large)):
        results = f"results_dir={work / 'results'}"
        train = ["train", "data=text", f"data.path={root}", cache, f"name=measure-{name}", results, *TRAIN]
        rows.append(measured_row(f"train 30 steps on the {name} byte store", train, work)[0])
    return rows


def user_large_phase(large: Path, cache: str, tokenizer: Path | None, work: Path) -> dict:
    """The large corpus's store through a user's tokenizer.json (tokenizing only)."""
    user = ["data=text", f"data.path={large}", cache, f"data.tokenizer={tokenizer}"]
    return measured_row("prepare large with a tokenizer.json", ["data", "prepare", *user], work)[0]


def bpe_large_phase(large: Path, cache: str, vocab: int, work: Path) -> dict:
    """The large corpus's BPE store, the BPE trained on it (training included)."""
    bpe = ["data=text", f"data.path={large}", cache, "data.tokenizer=bpe", f"data.vocab_size={vocab}"]
    return measured_row("prepare bpe large (train BPE + tokenize)", ["data", "prepare", *bpe], work)[0]


def main() -> None:
    args = parser().parse_args()
    work = args.work.resolve()
    cache = f"data.cache_dir={work / 'cache'}"
    small, large = corpora(work, args.small_mb, args.large_mb)
    rows = []
    phases = args.phases.split(",")
    stdlib_tokenizer = None  # the bpe phase's, trained on the standard library
    if "prepare" in phases:
        rows += prepare_phase(small, large, cache, work)
    if "bpe" in phases:
        bpe_rows, stdlib_tokenizer = bpe_phase(small, cache, args.vocab, work)
        rows += bpe_rows
    if "train" in phases:
        rows += train_phase(small, large, cache, work)
    tokenizer = args.vs_hand_tokenizer or stdlib_tokenizer
    if "user-large" in phases:
        rows.append(user_large_phase(large, cache, tokenizer, work))
    if "bpe-large" in phases:
        rows.append(bpe_large_phase(large, cache, args.vocab, work))
    if "vs-hand-bpe" in phases:
        rows.append(versus_by_hand_bpe(work, args.vocab, args.rounds))
        print(rows[-1], flush=True)
    if "vs-hand" in phases:
        rows.append(versus_by_hand(work, tokenizer, args.rounds, args.vs_hand_path))
        print(rows[-1], flush=True)
    (work / f"measure-{'-'.join(phases)}.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
