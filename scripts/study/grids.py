"""The reference study's grids: which runs are trained, how each is evaluated, which are extended.

``first`` is the first edition (``results/reference/cpu-tiny``), kept exactly as it ran: six
encodings and RoPE on the llama block, 3 seeds, ten RoPE methods, four extensions.

``methods`` is the second edition: every encoding and RoPE option posx has, each with the base
seeds (3), and 5 seeds where the first edition could not call a comparison (RoPE and the T5
bias far out; YaRN against NTK at 2x-4x, on the same RoPE runs; fine-tuned YaRN against ABF);
every RoPE method zero-shot on the RoPE runs; Resonance YaRN and PoSE among the extensions; and a
BPE arm (RoPE and ALiBi on the stdlib corpus with a byte-level BPE) whose orderings are compared
with the byte-level ones in bits per byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from posx import rope

ENCODINGS = ["rope", "absolute", "sinusoidal", "alibi", "t5", "nope"]  # the first edition's
FIRST_METHODS = [
    "none",
    "pi",
    "ntk",
    "dynamic_ntk",
    "yarn",
    "dynamic_yarn",
    "ntk_by_parts",
    "abf",
    "llama3",
    "longrope",
]
ALL_METHODS = list(rope.METHODS)  # every method posx has, in its declared order
MAIN_METHODS = ["none", "pi", "ntk", "yarn", "abf"]  # the sliding protocol's
BEYOND = ["none", "clamp", "interpolate"]  # learned absolute past its table
MORE_SEEDS = 2  # a five-seed comparison: the base seeds and the next two
BPE = ("data.tokenizer=bpe", "data.vocab_size=1024")  # the BPE arm's corpus: a tiny model's vocabulary


@dataclass(frozen=True)
class Trained:
    """Runs trained from scratch: ``<name>-s<seed>``, one per seed."""

    name: str
    encoding: str  # pos=<encoding>; RoPE runs are evaluated with every method of the grid
    overrides: tuple = ()  # training overrides beyond model=, pos= and seed=
    block: str = "gpt2"  # the preset's model of this block
    more_seeds: bool = False  # five seeds instead of three
    sliding: bool = True  # also evaluated with the sliding protocol
    methods: bool = True  # a RoPE run: every method of the grid (an option's run: none only)


@dataclass(frozen=True)
class Extension:
    """``posx extend`` of each plain RoPE seed: ``rope-s<seed>-<method>[-<tag>]-x<factor>``."""

    method: str
    more_seeds: bool = False
    overrides: tuple = ()
    tag: str = ""


@dataclass(frozen=True)
class Grid:
    trained: tuple
    extensions: tuple
    rope_methods: tuple  # the RoPE runs' methods at 1x-8x, zero-shot
    preset_train: tuple = ()  # (preset, override) pairs every training of that preset also gets

    def seeds(self, base: list[int], more: bool) -> list[int]:
        """The base seeds, or with ``more`` the base and the next MORE_SEEDS."""
        return base + [max(base) + 1 + i for i in range(MORE_SEEDS)] if more else list(base)

    def runs(self, base: list[int]) -> list[tuple[Trained, str, int]]:
        """(kind, run name, seed) of every run trained from scratch, kind by kind."""
        return [(t, f"{t.name}-s{s}", s) for t in self.trained for s in self.seeds(base, t.more_seeds)]

    def extended(self, base: list[int], factor: float) -> list[tuple[Extension, str, int]]:
        """(extension, run name, parent seed) of every extension."""
        return [
            (e, f"rope-s{s}-{e.method}{'-' + e.tag if e.tag else ''}-x{factor:g}", s)
            for e in self.extensions
            for s in self.seeds(base, e.more_seeds)
        ]

    def data_settings(self) -> list[tuple]:
        """Every distinct corpus setting of the grid's runs (data.* overrides), each prepared once."""
        found = [tuple(o for o in t.overrides if o.startswith("data.")) for t in self.trained]
        return list(dict.fromkeys([(), *found]))


FIRST = Grid(
    trained=(*(Trained(e, e) for e in ENCODINGS), Trained("llama-rope", "rope", block="llama")),
    extensions=tuple(Extension(m) for m in ("pi", "yarn", "abf", "none")),
    rope_methods=tuple(FIRST_METHODS),
)


def _option(name: str, *overrides: str) -> Trained:
    return Trained(f"rope-{name}", "rope", overrides, sliding=False, methods=False)


METHODS = Grid(
    trained=(
        Trained("rope", "rope", more_seeds=True),
        Trained("t5", "t5", more_seeds=True),
        *(Trained(e, e) for e in ("absolute", "sinusoidal", "alibi", "nope")),
        *(Trained(e, e, sliding=False) for e in ("fire", "kerple", "cope", "xpos")),
        _option("partial", "pos.rotary_fraction=0.25"),
        _option("randomized", "pos.randomized=true"),
        _option("hybrid", "model.nope_every=2"),
        _option("logn", "model.attn_scale=logn"),
        _option("ssmax", "model.attn_scale=ssmax"),
        Trained("llama-rope", "rope", block="llama"),  # sliding too: the first edition checked its claims there
        Trained("bpe-rope", "rope", BPE, sliding=False, methods=False),
        Trained("bpe-alibi", "alibi", BPE, sliding=False),
    ),
    extensions=(
        *(Extension(m, more_seeds=True) for m in ("pi", "yarn", "abf", "none")),
        Extension("resonance_yarn"),
        Extension("yarn", overrides=("extend.pose=true",), tag="pose"),
    ),
    rope_methods=tuple(ALL_METHODS),
    # one H200 in under an hour: 2,000 of gpu_small's 5,000 steps (65M tokens, about 45 s a run at the
    # 1.5M tokens/s measured compiled), 58 trainings, run with --jobs 4
    preset_train=(("gpu", "train.steps=2000"),),
)

GRIDS = {"first": FIRST, "methods": METHODS}
NAMES = {  # (grid, preset) -> the study's default name
    ("first", "cpu"): "cpu-tiny",
    ("first", "gpu"): "gpu-small",
    ("methods", "cpu"): "cpu-methods",
    ("methods", "gpu"): "gpu-methods",
}
