"""The types of the schema's fields: the choice Enums, and the ``Bound`` a number keeps in its
field's ``metadata["bound"]`` (checked by ``posx.core.validate``). Imports nothing of posx.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Optional


class Choice(str, Enum):
    """A str-valued Enum whose ``str()`` and ``format()`` are its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The names the choice accepts, in its order."""
        return tuple(member.value for member in cls)


def plain(value: Any) -> Any:
    """A section of the schema (or anything it holds) as plain data: mappings, lists, and each
    choice as its string, as a run's config.yaml and an evaluation's identity hold them."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


@dataclass(frozen=True)
class Bound:
    """The range of a number (of each entry, for a list) and the rules of a list: a field's
    ``metadata["bound"]``, which ``posx.core.validate`` checks wherever the field is read."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False  # lo itself is outside
    hi_open: bool = False  # hi itself is outside
    interval: bool = False  # say "must be in [lo, hi]" rather than the side crossed
    note: str = ""  # what null stands for, or why the bound
    unique: bool = False  # a list names each value once (a repeat would score a thing twice)
    example: str = ""  # a list that may not be empty: an example of one

    def problem(self, key: str, value: float) -> Optional[str]:
        """What is wrong with ``value`` at ``key``, in one line; None when it is in range."""
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        if not (low or high):
            return None
        if self.interval:
            return f"{key}={value} must be in {'[('[self.lo_open]}{self.lo}, {self.hi}{'])'[self.hi_open]}{self.note}"
        if high:
            return f"{key}={value} must be at most {self.hi}{self.note}"
        if self.lo == 0 and self.lo_open:
            return f"{key} must be positive, got {value}; set {key}=<a positive number>"
        if self.lo == 0:
            return f"{key}={value} must be 0 or more{self.note}"
        return f"{key}={value} must be {'greater than' if self.lo_open else 'at least'} {self.lo}{self.note}"


def bound(default: Any = MISSING, *, factory: Any = MISSING, **rules: Any) -> Any:
    """A field with ``default`` (or a ``factory`` of it) whose metadata holds the Bound of ``rules``."""
    return field(default=default, default_factory=factory, metadata={"bound": Bound(**rules)})


def positive(default: Any, hi: Optional[float] = None, note: str = "") -> Any:
    return bound(default, lo=0, lo_open=True, hi=hi, note=note)


def at_least(default: Any, lo: float, hi: Optional[float] = None, note: str = "") -> Any:
    return bound(default, lo=lo, hi=hi, note=note)


def within(default: Any, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Any:
    return bound(default, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, interval=True)


def like(group: type, name: str, default: Any = MISSING) -> Any:
    """A field held to the bound (and default, unless given) of ``group``'s field ``name``."""
    source = next(f for f in fields(group) if f.name == name)
    return field(default=source.default if default is MISSING else default, metadata=source.metadata)


def choice(name: str, values: str, doc: str, module: str = __name__) -> type[Choice]:
    """The ``Choice`` ``name`` of the space-separated ``values``; ``doc`` names the registry it mirrors."""
    made = Choice(name, [(v, v) for v in values.split()], module=module)
    made.__doc__ = doc
    return made


Encoding = choice(
    "Encoding",
    "absolute rope sinusoidal alibi t5 nope xpos fire kerple cope custom",
    "pos.name: posx.model.encodings.ENCODINGS, then custom (a class from outside posx, pos.impl)",
)
Block = choice("Block", "gpt2 llama", "model.block: posx.model.blocks.BLOCKS")
Attention = choice("Attention", "sdpa flex", "model.attention: posx.model.attention.ATTENTION")
AttnScale = choice("AttnScale", "none logn ssmax", "model.attn_scale: posx.model.scaling.ATTN_SCALES")
Beyond = choice("Beyond", "none clamp interpolate", "eval.absolute_beyond: posx.model.encodings.BEYOND")
Protocol = choice("Protocol", "nonoverlapping sliding", "eval.protocol: posx.eval.scoring.PROTOCOLS")
Variant = choice("Variant", "prompt copy", "eval.passkey.variants: posx.eval.passkey.VARIANTS")
Task = choice(
    "Task",
    "passkey niah niah_multikey niah_multivalue variable_tracking mqar copy selective_copy mqar_more",
    "eval.tasks, data.mix_tasks: posx.tasks.registry.TASKS",
)
TaskScoring = choice("TaskScoring", "teacher_forced generate", "eval.task_scoring: posx.tasks.scoring.SCORINGS")
AtTest = choice("AtTest", "dense sampled", "eval.randomized_positions: posx.model.randomized.AT_TEST")
Layout = choice("Layout", "fixed varied", "eval.task_options.layout: posx.tasks.base.LAYOUTS")
MixLoss = choice("MixLoss", "all answers", "data.mix_loss: posx.train.taskmix.MIX_LOSSES")
Source = choice("Source", "stdlib text datasets", "data.source: posx.data.sources.SOURCES")
Logger = choice("Logger", "none tensorboard wandb", "logger.name: posx.core.trackers.LOGGERS")
LoggerMode = choice("LoggerMode", "offline online disabled", "logger.mode: wandb's modes")


# The largest size or count a config or a record may give: far beyond what posx trains, small
# enough that a crafted file cannot make it allocate without bound.
MAX_SIZE = 1 << 24
ROTARY = ("rope", "xpos")  # the encodings that rotate q and k: RoPE rescaling methods apply
TAKES_POSITIONS = ("rope", "xpos", "absolute", "sinusoidal")  # the encodings pos.randomized and PoSE apply to
# The largest task sizes: far past what a study trains on, small enough that every task fits in
# TASK_FIT_LENGTH tokens (posx.configure.taskchecks tries it) and a sample set costs MAX_TRIALS at most.
MAX_TRIALS = 1 << 12  # samples per (length, task), and depth ranges
MAX_PIECE = 32  # digits of a value, letters of a key
MAX_COUNT = 64  # needles, answers, hops, queries
MAX_SPAN = 1024  # letters of a copied span, tokens of its cue
MAX_SEPARATOR = 8  # characters between an MQAR key and its value
TASK_FIT_LENGTH = 1 << 16  # every task at the sizes above fits in this many byte tokens
MAX_POOL_TOKENS = 1 << 28  # data.task_pool x (T + 1): the tokens of a pool generated before training
MAX_BATCH = 1 << 20  # sequences in a batch, batches in a validation
MAX_TOKENS = 1 << 36  # tokens an evaluation scores at a length, or puts in one forward pass
