"""``posx eval-extrapolate DIR`` on a local transformers checkpoint (a directory with config.json),
loaded from safetensors only (``local_files_only``; pickles refused before transformers could
unpickle them; config.json checked by ``posx.hf.checks``) and evaluated exactly as a run. Its one
rotary embedding (``inv_freq``, ``attention_scaling``) gets ``posx.rope.frequencies`` per row, its
rope type set to ``default`` so transformers' dynamic update leaves them alone. T, the tokenizer
and the data: docs/transformers.md, "Evaluating a transformers model".
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from rich.console import Console
from torch import Tensor

from posx.core import files
from posx.core.console import new_console
from posx.core.device import pick_device, set_threads
from posx.core.errors import PosxError
from posx.data import store
from posx.data import tokenizer as tok_mod
from posx.eval.extrapolate import evaluate
from posx.eval.run import show
from posx.eval.tables import Evaluation, write_tables
from posx.hf.checks import check_config_sizes, check_loading, config_refusal
from posx.hf.export import require_transformers
from posx.model.gpt import lm_loss
from posx.model.spec import ModelSpec
from posx.runs.records import RunMeta
from posx.schema.config import BYTES, Config, ModelConfig, PosConfig

LOGITS_BYTES = 2 * 1024**3  # a batch's (B, L, vocab) logits at 4 bytes a value: a 128k vocabulary stays small


def logits_batch_tokens(batch_tokens: int, vocab_size: int) -> int:
    """eval.batch_tokens lowered so one batch's logits stay within ``LOGITS_BYTES``."""
    return max(1, min(batch_tokens, LOGITS_BYTES // (4 * vocab_size)))


PROBE = "posx byte probe: é ☃ \n\t"  # a byte-level tokenizer encodes this to its UTF-8 bytes
# from_pretrained's options: nothing downloaded, no pickles, and sizes that do not fit load as random
# weights here, refused by check_loading.
LOADING = dict(local_files_only=True, use_safetensors=True, output_loading_info=True, ignore_mismatched_sizes=True)


class HFRotary:
    """posx.model.rotary.Rotary's rescaling interface on a transformers rotary embedding."""

    kind = "rope"
    uses_rope = True

    def __init__(self, module: torch.nn.Module):
        self.module = module
        module.rope_type = "default"  # transformers' dynamic_rope_update leaves inv_freq alone
        self.trained_inv_freq = module.inv_freq.detach().clone()
        self.trained_attention_factor = float(module.attention_scaling)
        self.attention_factor = self.trained_attention_factor

    def set_frequencies(self, inv_freq: torch.Tensor, attention_factor: float = 1.0) -> None:
        if inv_freq.shape != self.trained_inv_freq.shape:
            raise PosxError(
                f"frequencies of shape {tuple(inv_freq.shape)} do not fit the model's rotary "
                f"embedding of {self.trained_inv_freq.numel()} pairs"
            )
        self.module.inv_freq = inv_freq.to(device=self.module.inv_freq.device, dtype=torch.float32)
        self.module.attention_scaling = self.attention_factor = float(attention_factor)

    def reset(self) -> None:
        self.set_frequencies(self.trained_inv_freq.clone(), self.trained_attention_factor)

    def max_length(self) -> int | None:
        return None


class HFCausalLM(torch.nn.Module):
    """A transformers causal LM behind posx's model call, as ``GPT.forward``: idx (B, T) -> (logits, loss)."""

    supports_windowed = False  # transformers' attention is its own: windowed methods' rows are not_applicable

    def __init__(self, model: torch.nn.Module, rotary: torch.nn.Module):
        super().__init__()
        self.hf = model
        self.pos = HFRotary(rotary)

    def forward(self, idx: Tensor, targets: Tensor | None = None, offset: int = 0) -> tuple[Tensor, Tensor | None]:
        B, T = idx.shape
        positions = torch.arange(offset, offset + T, device=idx.device).expand(B, T)  # (B, T)
        logits = self.hf(input_ids=idx, position_ids=positions, use_cache=False).logits  # (B, T, vocab)
        return logits, None if targets is None else lm_loss(logits, targets)


def _rope_params(config, where: Path) -> dict:
    params = getattr(config, "rope_parameters", None)
    model_type = getattr(config, "model_type", "unknown")
    if not isinstance(params, dict) or "rope_theta" not in params:
        raise PosxError(
            f"{where} is a {model_type} model without RoPE (no flat rope_parameters in config.json); "
            "posx evaluates RoPE models (Llama, Mistral, Qwen2, ...)"
        )
    theta = params["rope_theta"]
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0:
        raise PosxError(f"{where}/config.json sets rope_theta={theta!r}; RoPE's base must be a number above 0")
    return params


def _rotary(model: torch.nn.Module, head_dim: int, where: Path) -> torch.nn.Module:
    scaling = [m for m in model.modules() if hasattr(m, "attention_scaling")]
    found = [m for m in scaling if isinstance(getattr(m, "inv_freq", None), torch.Tensor)]
    if len(found) != 1:
        raise PosxError(
            f"{where}: posx needs exactly one rotary embedding with inv_freq and attention_scaling, "
            f"found {len(found)}; this model's RoPE cannot be rescaled by posx"
        )
    if found[0].inv_freq.numel() != head_dim // 2:
        raise PosxError(
            f"{where}: the rotary embedding rotates {2 * found[0].inv_freq.numel()} of "
            f"{head_dim} head dimensions (partial rotary); posx rescales full-head RoPE only"
        )
    return found[0]


PICKLED = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # weight files only torch.load (unpickling) reads


def check_weights_format(model_dir: Path) -> None:
    """Safetensors weights, or one line: pickles (``pytorch_model.bin`` ...) are refused before torch.load."""
    if any(Path(model_dir).glob("*.safetensors")):
        return
    pickled = sorted(p.name for pattern in PICKLED for p in Path(model_dir).glob(pattern))
    if pickled:
        raise PosxError(
            f"{model_dir} holds its weights as pickles ({', '.join(pickled[:3])}), which posx does not "
            "load (unpickling can run code); convert them to safetensors where you trust them "
            "(model.save_pretrained(dir, safe_serialization=True)) and point posx at that directory"
        )
    raise PosxError(f"{model_dir} holds no weights (*.safetensors); save the model there with save_pretrained")


def _config(transformers: ModuleType, model_dir: Path) -> Any:
    """config.json read by transformers, its sizes checked first (``posx.hf.checks``)."""
    check_config_sizes(model_dir)
    try:
        return transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
    except Exception as exc:
        refusal = config_refusal(exc, model_dir)
        if refusal is not None:
            raise refusal from exc
        if not isinstance(exc, (OSError, ValueError, KeyError)):
            raise
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise PosxError(f"{model_dir}/config.json is not a config transformers can read ({first})") from exc


def _train_context(params: dict, config: Any, where: Path) -> int:
    """T: the RoPE's original context where it is scaled, else max_position_embeddings; at least 1."""
    key = "original_max_position_embeddings" if params.get("original_max_position_embeddings") is not None else None
    value = params[key] if key else config.max_position_embeddings
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 1:
        name = f"rope_parameters.{key}" if key else "max_position_embeddings"
        raise PosxError(
            f"{where}/config.json sets {name}={value!r}; it must be the context the model trained with (at least 1)"
        )
    return int(value)


def load_hf(model_dir: Path, device: torch.device) -> tuple[HFCausalLM, RunMeta]:
    """The checkpoint behind posx's model interface, and a RunMeta describing its RoPE."""
    transformers = require_transformers()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    config = _config(transformers, model_dir)
    params = _rope_params(config, model_dir)
    n_head = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_head
    dtype = torch.bfloat16 if device.type == "cuda" else (getattr(config, "dtype", None) or torch.float32)
    check_weights_format(model_dir)
    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **LOADING)
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0]
        raise PosxError(f"{model_dir} does not load as a transformers causal LM ({first})") from exc
    check_loading(info, model_dir)
    rotary = _rotary(model, head_dim, model_dir)
    T = _train_context(params, config, model_dir)
    sizes = ModelConfig(n_layer=config.num_hidden_layers, n_head=n_head, d_model=n_head * head_dim, block="llama")
    spec = ModelSpec.resolved(sizes, PosConfig(name="rope", base=float(params["rope_theta"])), T, T, config.vocab_size)
    meta = RunMeta(spec, T, {}, 0)  # describes the RoPE only: head_dim and base are what evaluate() reads
    return HFCausalLM(model, rotary).to(device), meta


def checkpoint_tokenizer(model_dir: Path, vocab_size: int, cache_dir: str | Path) -> str:
    """``data.tokenizer`` of this checkpoint: ``byte``, or its tokenizer.json under ``cache_dir``."""
    try:
        tok = require_transformers().AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError):
        tok = None
    if tok is None or tok.encode(PROBE, add_special_tokens=False) == list(PROBE.encode()):
        if vocab_size < BYTES:
            raise PosxError(
                f"{model_dir} has no tokenizer posx can load and a vocabulary of {vocab_size}, "
                f"fewer than posx's {BYTES} bytes; add its tokenizer files"
            )
        return tok_mod.BYTE
    if not tok.is_fast:
        raise PosxError(
            f"{model_dir}'s tokenizer ({type(tok).__name__}) has no tokenizer.json form; posx reads "
            "text with Hugging Face tokenizers: save a fast tokenizer into the checkpoint"
        )
    if not any(tok.backend_tokenizer.token_to_id(t) is not None for t in tok_mod.EOD_CANDIDATES):
        raise PosxError(
            f"{model_dir}'s tokenizer has none of the end-of-document tokens posx joins documents "
            f"with ({', '.join(tok_mod.EOD_CANDIDATES)}); add one to its tokenizer"
        )
    text = tok.backend_tokenizer.to_str()
    path = Path(cache_dir) / "tokenizers" / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.json"
    if not path.is_file():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            files.write_text(path, text)
        except OSError as e:
            raise PosxError(
                f"cannot write {path}: {e.strerror or e}; set data.cache_dir to a writable directory"
            ) from None
    return str(path)


def load_data(model_dir: Path, vocab_size: int, cfg: Config, console: Console) -> store.Store:
    """The token store of ``cfg.data`` in this checkpoint's tokens."""
    tokenizer = checkpoint_tokenizer(model_dir, vocab_size, cfg.data.cache_dir)
    corpus = store.load({**store.data_config(cfg.data), "tokenizer": tokenizer}, cfg.data.cache_dir, console)
    if corpus.tokenizer.vocab_size > vocab_size:
        raise PosxError(
            f"{model_dir}'s tokenizer has {corpus.tokenizer.vocab_size} tokens, more than the model's "
            f"vocabulary of {vocab_size}; its tokenizer files do not belong to this model"
        )
    if tokenizer != tok_mod.BYTE:
        console.print(
            f"[yellow]note:[/] {model_dir}'s tokenizer is not byte-level; the corpus is read in its "
            f"tokens ({corpus.fingerprint['val_tokens']:,} held out)"
        )
    return corpus


def evaluate_hf_dir(model_dir: Path, cfg: Config, console: Console | None = None) -> Evaluation:
    """Load a transformers checkpoint, evaluate it with ``cfg.eval`` on ``cfg.data``, write its tables."""
    console = console or new_console()
    device = pick_device(cfg.device)
    set_threads(cfg.threads)
    model, meta = load_hf(model_dir, device)
    rope_type = model.hf.config.rope_parameters.get("rope_type", "default")
    corpus = load_data(model_dir, model.hf.config.vocab_size, cfg, console)
    if rope_type != "default":
        console.print(
            f"[yellow]warning:[/] {model_dir} already rescales RoPE ({rope_type}); every row rescales "
            f"plain RoPE of base {meta.model.pos.base:g} from T={meta.train_context}, so `none` is "
            "not the checkpoint's own scaling"
        )
    console.print(
        f"[bold]posx eval-extrapolate[/] {model_dir}  transformers {model.hf.config.model_type} "
        f"T={meta.train_context} dtype={next(model.parameters()).dtype}"
    )
    vocab = model.hf.config.vocab_size
    ev = replace(cfg.eval, batch_tokens=logits_batch_tokens(cfg.eval.batch_tokens, vocab))
    result = evaluate(
        model,
        meta,
        corpus.val,
        ev,
        device,
        model_dir.name,
        console,
        long_tables=True,
        val_docs=corpus.val_docs,
        tokenizer=corpus.tokenizer,
    )
    show(result, model_dir, write_tables(result, model_dir), console)
    return result
