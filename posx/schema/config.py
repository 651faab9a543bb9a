"""Typed configuration schema (Hydra structured configs): the dataclasses hold every default, and
``configs/`` merges onto them, so a typo'd key, a wrong type or a choice outside its Enum fails at
composition. A number's bounds are its field's metadata (``posx.schema.fields``), a rule across a
group its ``check(at)`` (what is wrong in one line, or None); ``posx.core.validate`` walks both, for
a composed config and a record read back. A field's trailing comment is its description in the
configuration reference. A choice Enum mirrors a registry owned elsewhere (``tests/test_config_choices.py``)
and each member is its string; not Enums, on purpose: ``device`` (``cuda:N``), ``data.tokenizer`` (a
path too) and ``train.compile`` (YAML reads true/false as booleans). Imports nothing of posx but its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from posx.schema.fields import (
    MAX_BATCH,
    MAX_SIZE,
    MAX_TOKENS,
    ROTARY,
    TAKES_POSITIONS,
    Attention,
    AtTest,
    AttnScale,
    Beyond,
    Block,
    Encoding,
    Logger,
    LoggerMode,
    MixLoss,
    Protocol,
    Source,
    Task,
    TaskScoring,
    at_least,
    bound,
    like,
    positive,
    within,
)
from posx.schema.methods import (
    ABFConfig,
    DCAConfig,
    DynamicNTKConfig,
    ExtendMethod,
    Llama3Config,
    LMInfiniteConfig,
    LongRopeConfig,
    ReRoPEConfig,
    RopeArgs,
    SelfExtendConfig,
    StreamingLLMConfig,
    YarnConfig,
)
from posx.schema.tasks import PasskeyConfig, TaskOptions

_FACTORS = dict(lo=1, hi=4096, note=" (the evaluation allocates factor x T positions)", unique=True, example="[1,2,4]")


@dataclass
class ModelConfig:
    name: str = "tiny"  # preset name, recorded in the run
    n_layer: int = positive(4, 1024)  # transformer blocks
    n_head: int = positive(4, 1024)  # attention heads per block
    d_model: int = positive(128, 1 << 16)  # residual stream width; head_dim = d_model / n_head
    mlp_ratio: int = positive(4, 64)  # MLP hidden width = mlp_ratio * d_model
    dropout: float = within(0.0, 0, 1, hi_open=True)  # dropout on attention and residual branches (training only)
    block: Block = Block.gpt2  # gpt2: LayerNorm + GELU MLP; llama: RMSNorm + SwiGLU, no biases
    multiple_of: int = positive(8, 1 << 16)  # llama: SwiGLU hidden = int(2/3 * mlp_ratio * d_model) rounded up to this
    tie_embeddings: bool = True  # output layer shares the token embedding matrix
    attention: Attention = Attention.sdpa  # flex: FlexAttention for the bias encodings (no L x L mask); others SDPA
    attn_scale: AttnScale = AttnScale.none  # logn: q x max(1, ln(n+1)/ln T); ssmax: q x s_h ln(n+1), s learned per head
    attn_scale_length: Optional[int] = at_least(
        None, 2, MAX_SIZE, " (or null for T)"
    )  # T of attn_scale (logn's threshold, ssmax's s = 1/ln T at init); null: T
    nope_every: int = at_least(
        0, 0, MAX_SIZE
    )  # layers i with (i+1) % K == 0 attend without positions (Llama 4's interleaved NoPE); 0: none
    short_conv: int = at_least(
        0, 0, 1024, " (0: off)"
    )  # kernel of a causal depthwise convolution before each block's attention (zoology's BaseConv/Based); 0: off

    def check(self, at: str = "") -> Optional[str]:
        if self.d_model % self.n_head:
            return f"{at}d_model={self.d_model} is not divisible by {at}n_head={self.n_head}"
        if self.nope_every == 1:
            return f"{at}nope_every=1 must be 0 (no NoPE layers) or at least 2 (1: use pos=nope)"
        return None


@dataclass
class PosConfig:
    name: Encoding = Encoding.rope  # the positional encoding (posx/model/encodings.py)
    base: float = like(RopeArgs, "base")  # RoPE base b of theta_i = b^(-2i/d)
    max_positions: Optional[int] = positive(None, MAX_SIZE)  # absolute: rows of the learned table; null: T
    num_buckets: int = positive(32, MAX_SIZE)  # t5: relative-distance buckets (half exact, half log-spaced)
    max_distance: int = positive(128, MAX_SIZE)  # t5: distances from here on share the last bucket
    per_layer: bool = False  # t5: one bias table per layer (T5 itself shares one)
    rotary_fraction: float = within(1.0, 0.0, 1.0)  # rope, xpos: share of pairs that rotate, fastest first; 0: NoPE
    xpos_scale_base: float = positive(512.0)  # xpos: B of the per-pair scale zeta^(n/B) (torchscale's scale_base)
    fire_threshold: Optional[float] = positive(None)  # fire: initial L of psi(i-j)/psi(max(L, i)), learned; null: T/4
    fire_hidden: int = positive(32, MAX_SIZE)  # fire: hidden width of the MLP f (the paper: 32)
    cope_npos: Optional[int] = at_least(
        None, 2, MAX_SIZE, " (positions 0 .. npos - 1), or null for T + 1"
    )  # cope: positions 0 .. npos - 1 (counts past it are clamped); null: T + 1
    randomized: bool = False  # training windows take a sorted random subset of [0, randomized_max) as positions
    randomized_max: Optional[int] = positive(None, MAX_SIZE)  # randomized: L_max; null: max(eval.factors) x T
    pose_length: int = at_least(0, 0, MAX_SIZE)  # PoSE: training ids in two chunks covering [0, pose_length); 0: off
    impl: str = ""  # custom: the encoding's class, module:Class or an entry point of posx.encodings (runs its code)
    params: Any = None  # custom: the class's parameters, {key: value}, checked against its Params dataclass

    def check(self, at: str = "") -> Optional[str]:
        if self.rotary_fraction != 1 and self.name not in ROTARY:
            return f"{at}rotary_fraction={self.rotary_fraction} applies to {' and '.join(ROTARY)}, not pos={self.name}"
        if self.randomized and self.name not in TAKES_POSITIONS:
            return f"{at}randomized applies to {', '.join(TAKES_POSITIONS)}; pos={self.name} reads no positions"
        return None


# The pos.* keys only some encodings read (posx/model/encodings.py builds each from these alone); with
# any other pos.name the key does nothing, so a new run refuses a value other than its default.
POS_READ_BY = {
    **dict.fromkeys(("base", "rotary_fraction"), ("rope", "xpos")),
    **dict.fromkeys(("num_buckets", "max_distance", "per_layer"), ("t5",)),
    **dict.fromkeys(("fire_threshold", "fire_hidden"), ("fire",)),
    **{"max_positions": ("absolute",), "xpos_scale_base": ("xpos",), "cope_npos": ("cope",)},
    **dict.fromkeys(("impl", "params"), ("custom",)),
}


BYTES = 256  # the byte tokenizer's vocabulary: one id per byte value


@dataclass
class DataConfig:
    source: Source = Source.stdlib  # stdlib: the interpreter's own .py files; text: data.path; datasets: HF datasets
    path: Optional[str] = None  # text: a UTF-8 file, a directory or a glob
    val_fraction: float = 0.05  # share of documents (or of the joined stream) held out for validation
    cache_dir: str = "${results_dir}/cache"  # where token stores live (posx/data/store.py)
    tokenizer: str = "byte"  # byte | bpe (trained on the training split) | a path to a tokenizer.json
    vocab_size: int = positive(8192, 1 << 22)  # bpe: tokens of the trained BPE (at least 257)
    name: Optional[str] = None  # datasets: a hub dataset, or a local builder (json, csv, parquet, text)
    config_name: Optional[str] = None  # datasets: the dataset's configuration (e.g. wikitext-103-raw-v1)
    data_files: Any = None  # datasets: local file(s): a path, a glob, a list, or {split: paths}
    split: str = "train"  # datasets: the split read (posx holds out its own validation documents)
    text_column: str = "text"  # datasets: the column holding each document's text
    task_mix: float = within(0.0, 0.0, 1.0)  # share of training sequences replaced by generated task sequences
    mix_tasks: List[Task] = bound(
        factory=lambda: ["niah", "niah_multikey", "variable_tracking", "mqar", "copy"], unique=True
    )  # task_mix: the tasks drawn from, each equally often
    task_options: TaskOptions = field(default_factory=TaskOptions)  # task_mix: the tasks' sizes (trials, seed unread)
    task_pool: int = at_least(0, 0, 1 << 20, note=" (0: generate each)")  # task_mix: draw from this many made once
    mix_loss: MixLoss = MixLoss.all  # task_mix: all: every token of a task sequence; answers: its answer tokens only

    def check(self, at: str = "") -> Optional[str]:
        if self.tokenizer == "bpe" and self.vocab_size < BYTES + 1:
            return (
                f"{at}vocab_size={self.vocab_size} is smaller than the byte alphabet of a byte-level BPE "
                f"({BYTES} bytes + 1 end-of-document token); set {at}vocab_size to at least {BYTES + 1}"
            )
        if self.task_mix and not self.mix_tasks:
            return f"{at}mix_tasks is empty; name the tasks to mix in, or set {at}task_mix=0"
        return None


@dataclass
class TrainConfig:
    context_length: int = positive(128, MAX_SIZE)  # T: the length the model trains at
    steps: int = positive(800)  # optimizer steps
    batch_size: int = positive(32, MAX_BATCH)  # sequences per optimizer step, over all ranks (the global batch)
    micro_batch_size: Optional[int] = positive(None, MAX_BATCH)  # per forward pass on a rank; null: batch_size / ranks
    lr: float = positive(3e-3)  # peak learning rate (AdamW)
    min_lr_ratio: float = within(0.1, 0.0, 1.0)  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = at_least(50, 0)  # linear warmup steps
    weight_decay: float = at_least(0.1, 0)  # on matrices only
    beta1: float = within(0.9, 0.0, 1.0, hi_open=True)  # AdamW's first-moment decay
    beta2: float = within(0.95, 0.0, 1.0, hi_open=True)  # AdamW's second-moment decay
    grad_clip: float = at_least(1.0, 0, note=" (0: no clipping)")  # max global gradient norm (0 disables)
    eval_every: int = positive(100)  # validation loss every N steps (and at the end)
    eval_batches: int = positive(8, MAX_BATCH)  # batches per validation estimate
    checkpoint_every: int = at_least(
        100, 0, note=" (0: only at the end)"
    )  # resumable checkpoint every N steps (0: only at the end and on SIGTERM/SIGUSR2)
    compile: str = "auto"  # torch.compile the training model: auto (CUDA; the CPU where it pays) | true | false
    tf32: bool = True  # TF32 matmuls and convolutions on CUDA (no effect on the CPU)


@dataclass
class EvalConfig:
    factors: List[float] = bound(factory=lambda: [1.0, 2.0, 4.0, 8.0], **_FACTORS)  # lengths as multiples of T
    methods: List[str] = bound(
        factory=lambda: ["none", "pi", "ntk", "yarn", "abf"], unique=True, example="[none,pi]"
    )  # RoPE methods scored: posx's own (posx.rope.METHODS), or module:function from outside posx
    params: Any = None  # parameters of methods from outside posx, {name: {key: value}}, name after the ':'; null: none
    tokens: int = positive(16384, MAX_TOKENS)  # scored tokens at every length (rounded up to a multiple of each length)
    batch_tokens: int = positive(16384, MAX_TOKENS)  # tokens per forward pass (memory knob)
    scale: Optional[float] = at_least(None, 1, note=" (or null for L/T)")  # fixed RoPE scale s; null: L / T per length
    abf: ABFConfig = field(default_factory=ABFConfig)  # ABF: the new RoPE base (also of posx extend method=abf)
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
    randomized_positions: AtTest = AtTest.dense  # pos.randomized: dense 0..n-1, or sampled as trained (the paper's)
    after_train: bool = False  # evaluate at the end of `posx train`
    protocol: Protocol = Protocol.nonoverlapping  # sliding: windows scoring their last eval.stride tokens
    stride: Optional[int] = positive(None, MAX_SIZE)  # sliding: tokens scored per window; null: T/2
    bucket_width: Optional[int] = positive(None, MAX_SIZE)  # positions.csv bucket width in tokens; null: T/8
    passkey: PasskeyConfig = field(default_factory=PasskeyConfig)  # passkey retrieval (passkey.csv)
    tasks: List[Task] = bound(factory=lambda: ["passkey"], unique=True)  # synthetic tasks scored into tasks.csv
    task_options: TaskOptions = field(default_factory=TaskOptions)  # the tasks' sizes and seed (posx/tasks/)
    task_scoring: TaskScoring = TaskScoring.teacher_forced  # tasks.csv: teacher_forced (one pass) | generate (greedy)
    within_documents: bool = False  # windows never cross a document boundary (posx/eval/documents.py)
    min_document_tokens: int = at_least(0, 0, MAX_SIZE)  # within_documents: skip shorter documents (and than a window)


@dataclass
class LoggerConfig:
    name: Logger = Logger.none  # experiment tracker (posx/core/trackers.py)
    dir: Optional[str] = None  # where it writes; null: <run>/logs (tensorboard), the run directory (wandb)
    project: str = "posx"  # wandb: the project name
    mode: LoggerMode = LoggerMode.offline  # wandb: offline (no network), online or disabled


@dataclass
class Config:
    seed: int = within(0, 0, 2**63 - 1)  # seeds weights, batches and evaluation windows
    device: str = "auto"  # auto (CUDA when present) | cpu | cuda | cuda:N (GPU N)
    threads: Optional[int] = at_least(
        None, 1, note=" (or null for torch's default)"
    )  # torch intra-op threads, at most 4 per core (64 at least); null: torch's default
    name: Optional[str] = None  # run name; null: <pos>-T<context>-s<seed>-<time>
    results_dir: str = "results"  # runs/, sweeps/, cache/ live here
    model: ModelConfig = field(default_factory=ModelConfig)  # the transformer (presets: configs/model/)
    pos: PosConfig = field(default_factory=PosConfig)  # the positional encoding (presets: configs/pos/)
    data: DataConfig = field(default_factory=DataConfig)  # the corpus and its tokenizer (configs/data/)
    train: TrainConfig = field(default_factory=TrainConfig)  # optimisation and checkpoints (configs/train/)
    eval: EvalConfig = field(default_factory=EvalConfig)  # extrapolation evaluation (eval-extrapolate)
    logger: LoggerConfig = field(default_factory=LoggerConfig)  # optional experiment tracker, off by default

    def check(self, at: str = "") -> Optional[str]:
        """The rules across groups: the encoding against the model's widths and T, and the name."""
        if self.name is not None and (not str(self.name).strip() or "/" in self.name or self.name in (".", "..")):
            return f"name={self.name!r} must be a plain directory name (no '/', not '.' or '..')"
        if self.name is not None and self.name.startswith("-"):  # every command would read it as an option
            return f"name={self.name!r} must not start with '-' (a command line reads it as an option); rename it"
        return _encoding_fits(self) or _positions_reach(self)


def evaluated_length(factor: float, context: int) -> int:
    """The length a factor stands for, round(factor x T): the one rule for it, read by the evaluation,
    its checks, the model spec, ``posx extend``, ``posx frequencies`` and the retrieval comparison."""
    return round(factor * context)


def rope_scale(scale: Optional[float], length: int, context: int) -> float:
    """The RoPE scale s of a row evaluated at ``length``: ``eval.scale`` when set, else L / T."""
    return float(scale) if scale is not None else length / context


def _encoding_fits(cfg: Config) -> Optional[str]:
    """pos.name against model.d_model, model.n_head, model.nope_every and T."""
    p, m, T = cfg.pos, cfg.model, cfg.train.context_length
    if p.name in ROTARY and (m.d_model // m.n_head) % 2:
        return f"RoPE needs an even head_dim, got d_model/n_head = {m.d_model // m.n_head}"
    if p.name == "sinusoidal" and m.d_model % 2:
        return f"sinusoidal positions need an even model.d_model, got {m.d_model}"
    if p.name == "fire" and p.fire_threshold is not None and p.fire_threshold > T:
        # past T no training query reaches it, so FIRE's normaliser psi(max(L, i)) never acts in training
        return (
            f"pos.fire_threshold={p.fire_threshold:g} is past T={T}: no training query reaches it, so FIRE's "
            f"normaliser never acts in training; set it at most {T}, or null for T/4 ({T / 4:g})"
        )
    if m.nope_every and p.name in ("absolute", "sinusoidal"):
        return (
            f"model.nope_every={m.nope_every} needs positions inside attention (rope, xpos, alibi, t5, fire, "
            f"kerple, cope); pos={p.name} adds them to the embeddings, which every layer sees"
        )
    return None


def _positions_reach(cfg: Config) -> Optional[str]:
    """pos.randomized and pos.pose_length: past T, and within a learned table."""
    p, T = cfg.pos, cfg.train.context_length
    table = p.max_positions or T
    limit = p.randomized_max if p.randomized_max is not None else evaluated_length(max(cfg.eval.factors), T)
    if p.randomized and limit < T:
        return f"pos.randomized_max={limit} must be at least train.context_length={T}"
    if p.randomized and p.name == "absolute" and table < limit:
        return f"pos.randomized with pos=absolute needs pos.max_positions >= {limit} (pos.randomized_max)"
    if p.pose_length and (p.name not in TAKES_POSITIONS or p.randomized or p.pose_length < T):
        return (
            f"pos.pose_length={p.pose_length} needs pos= one of {', '.join(TAKES_POSITIONS)}, no pos.randomized, "
            f"and at least train.context_length={T}"
        )
    if p.pose_length and p.name == "absolute" and table < p.pose_length:
        return f"pos.pose_length with pos=absolute needs pos.max_positions >= {p.pose_length}"
    return None


@dataclass
class ExtendConfig:
    steps: int = positive(200)  # optimizer steps of continued training at factor x T
    lr: float = positive(3e-4)  # peak learning rate (a tenth of the default train.lr: a fine-tune, not a retrain)
    warmup_steps: int = at_least(20, 0)  # linear warmup steps (the PI and YaRN fine-tunes use 20)
    min_lr_ratio: float = within(0.1, 0, 1, lo_open=True)  # cosine decays to lr * min_lr_ratio at the last step
    batch_size: Optional[int] = positive(None)  # sequences per step; null: train.batch_size * T / (factor * T)
    eval_every: Optional[int] = positive(None)  # validation at factor x T every N steps; null: train.eval_every
    pose: bool = False  # PoSE: continue at the parent's T with position ids covering factor x T (pos.pose_length)


@dataclass
class ExtendRootConfig(Config):
    """``posx extend``: the training config plus what to extend and how."""

    parent: Optional[str] = None  # the run to extend (path or name under results/runs); set by RUN
    method: ExtendMethod = ExtendMethod.yarn  # a RoPE method, or interpolate (learned absolute only)
    factor: float = at_least(4.0, 1, note=" (the new context is factor x T)")  # new context = factor x the parent's T
    extend: ExtendConfig = field(default_factory=ExtendConfig)  # the continued training at factor x T

    def check(self, at: str = "") -> Optional[str]:
        if not self.parent:
            return "name the run to extend: posx extend RUN method=<method> factor=<factor>"
        return Config.check(self, at)


# Keys (and those below them) a resumed run may change: none alters the weight updates (posx.configure.resume).
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
