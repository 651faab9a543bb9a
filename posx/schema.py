"""Typed configuration schema (Hydra structured configs) and checks of its values.

The dataclasses below are the schema and hold every default: Hydra merges the YAML files of
``configs/`` (only what differs) onto them, so a typo'd key, a wrong type or a choice outside
its Enum fails at composition. ``posx.config.checks`` then rejects values that are well typed
but meaningless (a negative step count) with a one-line ``PosxError`` before any work starts.
Each field's trailing comment is its description in the configuration reference
(``posx.config.reference``).

Choice fields are Enums (``Choice`` below): each lists the names of a registry owned elsewhere
(the registries stay the source of truth of behaviour; ``tests/test_config_choices.py`` fails
when an Enum and its registry differ). A member *is* its string (``Encoding.rope == "rope"``,
the same hash, ``str()`` and f-strings give ``rope``, JSON writes ``"rope"``), so registries
keyed by name, comparisons and run directories written before keep working;
``posx.config.compose.to_yaml`` writes plain strings. Not Enums, on purpose: ``device``
(``cuda:N`` is open-ended), ``data.tokenizer`` (also a path to a tokenizer.json; checked in
``posx.data.tokenizer``) and ``train.compile`` (Hydra and YAML read ``true``/``false`` as
booleans, which an Enum field refuses; checked in ``posx.core.device``).

This module imports nothing of posx. Configs hold names, never import paths: a run directory
is loadable without Hydra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional


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


def _choice(name: str, values: str, doc: str) -> type[Choice]:
    made = Choice(name, [(v, v) for v in values.split()], module=__name__)
    made.__doc__ = doc
    return made


Encoding = _choice(
    "Encoding",
    "absolute rope sinusoidal alibi t5 nope xpos fire kerple cope",
    "pos.name: posx.model.encodings.ENCODINGS",
)
Block = _choice("Block", "gpt2 llama", "model.block: posx.model.blocks.BLOCKS")
Attention = _choice("Attention", "sdpa flex", "model.attention: posx.model.attention.ATTENTION")
AttnScale = _choice("AttnScale", "none logn ssmax", "model.attn_scale: posx.model.scaling.ATTN_SCALES")
Method = _choice(
    "Method",
    "none pi ntk dynamic_ntk yarn dynamic_yarn ntk_by_parts abf llama3 longrope resonance resonance_yarn "
    "self_extend rerope lm_infinite dca streaming_llm",
    "eval.methods: posx.rope.METHODS",
)
ExtendMethod = _choice(
    "ExtendMethod",
    " ".join(Method) + " interpolate",
    "posx extend's method: posx.rope.METHODS, or interpolate (learned absolute)",
)
Beyond = _choice("Beyond", "none clamp interpolate", "eval.absolute_beyond: posx.model.encodings.BEYOND")
Protocol = _choice("Protocol", "nonoverlapping sliding", "eval.protocol: posx.eval.scoring.PROTOCOLS")
Variant = _choice("Variant", "prompt copy", "eval.passkey.variants: posx.eval.passkey.VARIANTS")
Task = _choice(
    "Task",
    "passkey niah niah_multikey niah_multivalue variable_tracking mqar copy selective_copy",
    "eval.tasks, data.mix_tasks: posx.tasks.registry.TASKS",
)
TaskScoring = _choice("TaskScoring", "teacher_forced generate", "eval.task_scoring: posx.tasks.scoring.SCORINGS")
MixLoss = _choice("MixLoss", "all answers", "data.mix_loss: posx.train.taskmix.MIX_LOSSES")
Source = _choice("Source", "stdlib text datasets", "data.source: posx.data.sources.SOURCES")
Logger = _choice("Logger", "none tensorboard wandb", "logger.name: posx.core.trackers.LOGGERS")
LoggerMode = _choice("LoggerMode", "offline online disabled", "logger.mode: wandb's modes")


@dataclass
class ModelConfig:
    name: str = "tiny"  # preset name, recorded in the run
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads per block
    d_model: int = 128  # residual stream width; head_dim = d_model / n_head
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model
    dropout: float = 0.0  # dropout on attention and residual branches (training only)
    block: Block = Block.gpt2  # gpt2: LayerNorm + GELU MLP; llama: RMSNorm + SwiGLU, no biases
    multiple_of: int = 8  # llama: SwiGLU hidden = int(2/3 * mlp_ratio * d_model) rounded up to this
    tie_embeddings: bool = True  # output layer shares the token embedding matrix
    attention: Attention = Attention.sdpa  # flex: FlexAttention for the bias encodings (no L x L mask); others SDPA
    attn_scale: AttnScale = AttnScale.none  # logn: q x max(1, ln(n+1)/ln T); ssmax: q x s_h ln(n+1), s learned per head
    attn_scale_length: Optional[int] = None  # T of attn_scale (logn's threshold, ssmax's s = 1/ln T at init); null: T
    nope_every: int = 0  # layers i with (i+1) % K == 0 attend without positions (Llama 4's interleaved NoPE); 0: none
    short_conv: int = (
        0  # kernel of a causal depthwise convolution before each block's attention (zoology's short conv); 0: off
    )


@dataclass
class PosConfig:
    name: Encoding = Encoding.rope  # the positional encoding (posx/model/encodings.py)
    base: float = 10000.0  # RoPE base b of theta_i = b^(-2i/d)
    max_positions: Optional[int] = None  # absolute: rows of the learned table (null: train.context_length)
    num_buckets: int = 32  # t5: relative-distance buckets (half exact, half log-spaced)
    max_distance: int = 128  # t5: distances from here on share the last bucket
    per_layer: bool = False  # t5: one bias table per layer (T5 itself shares one)
    rotary_fraction: float = 1.0  # rope, xpos: share of pairs that rotate, highest frequencies first (p-RoPE); 0: NoPE
    xpos_scale_base: float = 512.0  # xpos: B of the per-pair scale zeta^(n/B) (torchscale's scale_base)
    fire_threshold: Optional[float] = None  # fire: initial L of psi(i-j)/psi(max(L, i)), learned; null: T/4
    fire_hidden: int = 32  # fire: hidden width of the MLP f (the paper: 32)
    cope_npos: Optional[int] = None  # cope: positions 0 .. npos - 1 (counts past it are clamped); null: T + 1
    randomized: bool = False  # training windows take a sorted random subset of [0, randomized_max) as positions
    randomized_max: Optional[int] = None  # randomized: L_max; null: the longest evaluated length, max(eval.factors) x T
    pose_length: int = 0  # PoSE: training position ids in two chunks with a skip, covering [0, pose_length); 0: off


# The pos.* keys only some encodings read (posx/model/encodings.py builds each from these alone); with
# any other pos.name the key does nothing, so a new run refuses a value other than its default.
POS_READ_BY = {
    **dict.fromkeys(("base", "rotary_fraction"), ("rope", "xpos")),
    **dict.fromkeys(("num_buckets", "max_distance", "per_layer"), ("t5",)),
    **dict.fromkeys(("fire_threshold", "fire_hidden"), ("fire",)),
    **{"max_positions": ("absolute",), "xpos_scale_base": ("xpos",), "cope_npos": ("cope",)},
}


@dataclass
class TaskOptions:
    trials: int = 16  # samples per (length, task), the same ones for every method
    depth_buckets: int = 4  # samples are spread evenly over this many depth ranges
    seed: int = 0  # seeds keys, values, depths and haystack offsets
    digits: int = 5  # digits of a value (niah, variable_tracking, mqar) and of the passkey
    key_letters: int = 4  # letters of a key or variable name
    distractors: int = 3  # niah_multikey: needles with other keys
    answers: int = 3  # niah_multivalue: values of the one key; selective_copy: words to copy
    hops: int = 2  # variable_tracking: name-to-name assignments of the chain, RULER's num_hops (names: hops + 1)
    queries: int = 4  # mqar: keys asked for at the end
    separator: str = ":"  # mqar: between a key and its value ('': none, zoology's pairs)
    span: int = 16  # copy: letters of the copied span
    cue: int = 4  # copy: tokens of the repeat that are given before scoring starts


@dataclass
class DataConfig:
    source: Source = Source.stdlib  # stdlib: the interpreter's own .py files; text: data.path; datasets: HF datasets
    path: Optional[str] = None  # text: a UTF-8 file, a directory or a glob
    val_fraction: float = 0.05  # share of documents (or of the joined stream) held out for validation
    cache_dir: str = "${results_dir}/cache"  # where token stores live (posx/data/store.py)
    tokenizer: str = "byte"  # byte | bpe (trained on the training split) | a path to a tokenizer.json
    vocab_size: int = 8192  # bpe: tokens of the trained BPE (at least 257)
    name: Optional[str] = None  # datasets: a hub dataset, or a local builder (json, csv, parquet, text)
    config_name: Optional[str] = None  # datasets: the dataset's configuration (e.g. wikitext-103-raw-v1)
    data_files: Any = None  # datasets: local file(s): a path, a glob, a list, or {split: paths}
    split: str = "train"  # datasets: the split read (posx holds out its own validation documents)
    text_column: str = "text"  # datasets: the column holding each document's text
    task_mix: float = 0.0  # share of training sequences replaced by generated task sequences (posx/train/taskmix.py)
    mix_tasks: List[Task] = field(
        default_factory=lambda: ["niah", "niah_multikey", "variable_tracking", "mqar", "copy"]
    )  # task_mix: the tasks drawn from, each equally often
    task_options: TaskOptions = field(default_factory=TaskOptions)  # task_mix: the tasks' sizes (trials, seed unread)
    task_pool: int = 0  # task_mix: draw task sequences from this many generated once (0: generate each one)
    mix_loss: MixLoss = MixLoss.all  # task_mix: all: every token of a task sequence; answers: its answer tokens only


@dataclass
class TrainConfig:
    context_length: int = 128  # T: the length the model trains at
    steps: int = 800  # optimizer steps
    batch_size: int = 32  # sequences per optimizer step, over all ranks together (the global batch)
    micro_batch_size: Optional[int] = None  # sequences per forward pass on one rank; null: batch_size / ranks
    lr: float = 3e-3  # peak learning rate (AdamW)
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 50  # linear warmup steps
    weight_decay: float = 0.1  # on matrices only
    beta1: float = 0.9  # AdamW's first-moment decay
    beta2: float = 0.95  # AdamW's second-moment decay
    grad_clip: float = 1.0  # max global gradient norm (0 disables)
    eval_every: int = 100  # validation loss every N steps (and at the end)
    eval_batches: int = 8  # batches per validation estimate
    checkpoint_every: int = 100  # resumable checkpoint every N steps (0: only at the end and on SIGTERM/SIGUSR2)
    compile: str = "auto"  # torch.compile the training model: auto (CUDA; the CPU where it pays) | true | false
    tf32: bool = True  # TF32 matmuls and convolutions on CUDA (no effect on the CPU)


@dataclass
class YarnConfig:
    beta_fast: float = 32.0  # rotations above which a pair keeps its frequency
    beta_slow: float = 1.0  # rotations below which a pair is fully interpolated
    truncate: bool = True  # floor/ceil the ramp bounds, as the YaRN authors do
    attention_factor: Optional[float] = None  # yarn only; null: 0.1 * ln(s) + 1


@dataclass
class DynamicNTKConfig:
    factor: Optional[float] = None  # s in b * (s*l/T - (s-1))^(d/(d-2)); null: the row's scale


@dataclass
class Llama3Config:
    low_freq_factor: float = 1.0  # wavelengths above T / low_freq_factor are divided by s
    high_freq_factor: float = 4.0  # wavelengths below T / high_freq_factor are kept


@dataclass
class LongRopeConfig:
    short_factor: Optional[List[float]] = None  # per-pair divisors at lengths <= T; null: all 1
    long_factor: Optional[List[float]] = None  # per-pair divisors past T; null: all 1
    attention_factor: Optional[float] = None  # null: sqrt(1 + ln(s) / ln(T))


@dataclass
class SelfExtendConfig:
    group: int = 16  # G: past the window, G positions share one (posx.model.windowed)
    window: Optional[int] = None  # W: keys nearer than W keep exact positions; null: T / 2


@dataclass
class ReRoPEConfig:
    window: Optional[int] = None  # W: distances below W are exact; null: T / 4 (posx.model.windowed)
    leak_factor: Optional[float] = None  # k: null: every distance past W is W (ReRoPE); k: W + (n - W) / k (Leaky)
    log_scale: bool = True  # scale the query at i by max(1, log(i + 1) / log T), as the author's code does


@dataclass
class LMInfiniteConfig:
    window: Optional[int] = None  # W: keys nearer than W at exact positions; null: T (posx.model.windowed)
    global_tokens: int = 10  # the first keys, attended at distance W from queries past the window


@dataclass
class DCAConfig:
    chunk_size: Optional[int] = None  # s: the largest distance given; null: 3T/4 (posx.model.windowed)
    local_window: Optional[int] = None  # w: chunks hold s - w tokens; null: T/16


@dataclass
class StreamingLLMConfig:
    sinks: int = 4  # S: the first tokens, kept in the cache for good (posx.model.windowed)
    recent: Optional[int] = None  # R: the latest tokens kept besides the current one; null: T - S - 1


@dataclass
class PasskeyConfig:
    enabled: bool = True  # passkey retrieval in eval-extrapolate (writes passkey.csv)
    variants: List[Variant] = field(default_factory=lambda: ["prompt", "copy"])  # prompt: key asked for; copy: repeated
    trials: int = 16  # sequences per (length, variant), the same ones for every method
    digits: int = 5  # length of the random key
    depth_buckets: int = 4  # trials are spread evenly over this many depth ranges
    seed: int = 0  # seeds keys, depths and filler offsets


@dataclass
class EvalConfig:
    factors: List[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])  # lengths as multiples of T
    methods: List[Method] = field(default_factory=lambda: ["none", "pi", "ntk", "yarn", "abf"])  # RoPE methods scored
    tokens: int = 16384  # scored tokens at every length (rounded up to a multiple of each length)
    batch_tokens: int = 16384  # tokens per forward pass (memory knob)
    scale: Optional[float] = None  # fixed RoPE scale s; null: s = L / T for each length
    abf_base: float = 500000.0  # ABF's new base
    yarn: YarnConfig = field(default_factory=YarnConfig)  # also the ramp of dynamic_yarn, ntk_by_parts
    dynamic_ntk: DynamicNTKConfig = field(default_factory=DynamicNTKConfig)  # dynamic_ntk, as transformers has it
    llama3: Llama3Config = field(default_factory=Llama3Config)  # Llama 3.1 (transformers' llama3 rope_type)
    longrope: LongRopeConfig = field(default_factory=LongRopeConfig)  # LongRoPE / Phi-3: one factor per rotary pair
    self_extend: SelfExtendConfig = field(default_factory=SelfExtendConfig)  # Self-Extend's grouped attention
    rerope: ReRoPEConfig = field(default_factory=ReRoPEConfig)  # ReRoPE's rectified distances
    lm_infinite: LMInfiniteConfig = field(default_factory=LMInfiniteConfig)  # LM-Infinite's Lambda-shaped mask
    dca: DCAConfig = field(default_factory=DCAConfig)  # Dual Chunk Attention's chunks
    streaming_llm: StreamingLLMConfig = field(default_factory=StreamingLLMConfig)  # StreamingLLM's cache
    absolute_beyond: Beyond = Beyond.none  # learned absolute past its table
    after_train: bool = False  # evaluate at the end of `posx train`
    protocol: Protocol = Protocol.nonoverlapping  # sliding: windows scoring their last eval.stride tokens
    stride: Optional[int] = None  # sliding: tokens scored per window; null: T/2
    bucket_width: Optional[int] = None  # positions.csv bucket width in tokens; null: T/8
    passkey: PasskeyConfig = field(default_factory=PasskeyConfig)  # passkey retrieval (passkey.csv)
    tasks: List[Task] = field(default_factory=lambda: ["passkey"])  # synthetic tasks scored into tasks.csv
    task_options: TaskOptions = field(default_factory=TaskOptions)  # the tasks' sizes and seed (posx/tasks/)
    task_scoring: TaskScoring = TaskScoring.teacher_forced  # tasks.csv: teacher_forced (one pass) | generate (greedy)
    within_documents: bool = False  # windows never cross a document boundary (posx/eval/documents.py)
    min_document_tokens: int = 0  # within_documents: skip documents shorter than this (and than a window)


@dataclass
class LoggerConfig:
    name: Logger = Logger.none  # experiment tracker (posx/core/trackers.py)
    dir: Optional[str] = None  # where it writes; null: <run>/logs (tensorboard), the run directory (wandb)
    project: str = "posx"  # wandb: the project name
    mode: LoggerMode = LoggerMode.offline  # wandb: offline (no network), online or disabled


@dataclass
class Config:
    seed: int = 0  # seeds weights, batches and evaluation windows
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N (GPU N)
    threads: Optional[int] = None  # torch intra-op threads, at most 4 per core (64 at least); null: torch's default
    name: Optional[str] = None  # run name; null: <pos>-T<context>-s<seed>-<time>
    results_dir: str = "results"  # runs/, sweeps/, cache/ live here
    model: ModelConfig = field(default_factory=ModelConfig)  # the transformer (presets: configs/model/)
    pos: PosConfig = field(default_factory=PosConfig)  # the positional encoding (presets: configs/pos/)
    data: DataConfig = field(default_factory=DataConfig)  # the corpus and its tokenizer (configs/data/)
    train: TrainConfig = field(default_factory=TrainConfig)  # optimisation and checkpoints (configs/train/)
    eval: EvalConfig = field(default_factory=EvalConfig)  # extrapolation evaluation (eval-extrapolate)
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # optional experiment tracker, off by default


@dataclass
class ExtendConfig:
    steps: int = 200  # optimizer steps of continued training at factor x T
    lr: float = 3e-4  # peak learning rate (a tenth of the default train.lr: a fine-tune, not a retrain)
    warmup_steps: int = 20  # linear warmup steps (the PI and YaRN fine-tunes use 20)
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio at the last step
    batch_size: Optional[int] = None  # sequences per step; null: train.batch_size * T / (factor * T)
    eval_every: Optional[int] = None  # validation at factor x T every N steps; null: train.eval_every
    pose: bool = False  # PoSE: continue at the parent's T with position ids covering factor x T (pos.pose_length)


@dataclass
class ExtendRootConfig(Config):
    """``posx extend``: the training config plus what to extend and how."""

    parent: Optional[str] = None  # the run to extend (path or name under results/runs); set by RUN
    method: ExtendMethod = ExtendMethod.yarn  # a RoPE method, or interpolate (learned absolute only)
    factor: float = 4.0  # new context = factor x the parent's T
    new_base: float = 500000.0  # abf: the new RoPE base
    extend: ExtendConfig = field(default_factory=ExtendConfig)  # the continued training at factor x T


# Keys (and every key below them) a resumed run may change (`posx train --resume`): the ones that
# do not alter the sequence of weight updates. posx.config.resume enforces it.
RESUME_SAFE = (
    "device",
    "threads",
    "logger",
    "results_dir",
    "data.cache_dir",
    "train.checkpoint_every",
    "train.eval_every",
    "train.eval_batches",
    "train.compile",
    "train.tf32",
    "train.micro_batch_size",
    "eval",
)
