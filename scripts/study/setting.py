"""What a reference study is, for the top of its STUDY.md: the corpus and where it comes from, the
tokenizer, the model (parameters, layers, width), T, steps and tokens seen, the seeds per arm and
the machine, each from the study's own files or the configs its command composed.

The model and training numbers come from composing the preset's config (``posx.configure.compose``)
and building the RoPE model it describes (``GPT.num_params``); T and the seeds from the committed
``sweep.csv`` and ``report/groups.csv``; the machine and the interpreter from STUDY.md's header.
"""

from __future__ import annotations

import re

import pandas as pd
import torch

from posx.configure.compose import compose
from posx.model.gpt import GPT
from posx.model.spec import ModelSpec
from posx.schema.config import BYTES
from scripts.study.grids import GRIDS
from scripts.study.reference import PRESETS  # the presets' models and overrides


def composed(preset: str, grid: str, block: str):
    """The config a training of the preset's ``block`` (gpt2, llama) composes, with RoPE."""
    extra = [o for p, o in GRIDS[grid].preset_train if p == preset]
    return compose([f"model={PRESETS[preset]['models'][block]}", "pos=rope", *extra])


def parameters(cfg) -> int:
    """The parameters of the model ``cfg`` describes (byte tokens), counted on the meta device."""
    with torch.device("meta"):
        return GPT(ModelSpec.from_config(cfg, BYTES)).num_params()


def seeds_per_arm(groups: pd.DataFrame) -> str:
    """ "n arms with k seeds, ..." over the groups of runs trained from scratch and extended."""
    counts = groups["runs"].astype(int).value_counts().sort_index()
    return ", ".join(f"{n} arm(s) with {k} seeds" for k, n in counts.items())


def seed_span(groups: pd.DataFrame) -> str:
    """ "n seeds each", or "n to m seeds per arm", over the groups of ``groups.csv``."""
    low, high = int(groups["runs"].min()), int(groups["runs"].max())
    return f"{low} seeds each" if low == high else f"{low} to {high} seeds per arm"


def header_fact(header: list[str], name: str) -> str:
    """A "- name: value" line's value from STUDY.md's header ('' when absent)."""
    return next((line.split(": ", 1)[1] for line in header if line.startswith(f"- {name}: ")), "")


def setting_lines(preset: str, grid: str, sweep: pd.DataFrame, groups: pd.DataFrame, header: list[str]) -> list[str]:
    """## Setting: the facts of the module docstring."""
    machine = header_fact(header, "machine")
    found = re.search(r"Python (\d+\.\d+\.\d+)", machine)
    python = f"Python {found.group(1)}" if found else "its version in the machine line"
    blocks = ["gpt2", "llama"] if "llama" in PRESETS[preset]["models"] else ["gpt2"]
    cfgs = {b: composed(preset, grid, b) for b in blocks}
    cfg = cfgs["gpt2"]
    trained = sweep[sweep["stage"] == "zero-shot"]
    T = sorted(set(trained["train_context"].astype(int)))
    steps, batch = int(cfg.train.steps), int(cfg.train.batch_size)
    models = "; ".join(
        f"{b} block: {parameters(c) / 1e6:.2f}M parameters, {c.model.n_layer} layers, width {c.model.d_model}, "
        f"{c.model.n_head} heads"
        for b, c in cfgs.items()
    )
    return [
        "## Setting",
        "",
        f"- corpus: `data.source={cfg.data.source.value}`, every `*.py` file of the standard library of the Python "
        f"interpreter that ran the study ({python}): another Python version trains and evaluates on other text",
        f"- tokenizer: `{cfg.data.tokenizer}` ({BYTES} ids) for every arm but the BPE arm, where there is one",
        f"- model: {models}",
        f"- T = {', '.join(map(str, T))} tokens; {steps} steps of {batch} sequences: {steps * batch * T[0]:,} "
        "tokens seen per run (extensions train on further tokens at the new length)",
        f"- evaluation: {int(trained['tokens'].max()):,} tokens per cell",
        f"- seeds: {seeds_per_arm(groups)}",
        f"- machine: {machine or 'not recorded'}",
    ]
