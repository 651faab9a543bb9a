"""Where a training step's CPU time goes: attention, MLP, norm, embedding, loss, optimizer, other.

``split(profile)`` sorts the self CPU time of every op in a ``torch.profiler`` trace of training
steps into parts. A forward op belongs to the innermost labelled module it ran in
(``label_modules`` wraps each attention, MLP, norm and embedding module's forward in a
``record_function`` range; the class names of posx's and transformers' Llama modules are known),
to the loss when it ran under ``cross_entropy``, and to the optimizer under ``Optimizer.step`` /
``zero_grad`` or the gradient-norm clip. A backward op belongs to the part of the forward op
whose autograd node it evaluates (matched by the node's sequence number, which the profiler
records on both). What is left (the output projection, residual adds, casts) is ``other``.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.profiler import record_function

PREFIX = "split::"
# module class name -> part (posx.model.gpt / blocks, transformers' modeling_llama)
PARTS = {
    "CausalSelfAttention": "attention",
    "LlamaAttention": "attention",
    "LlamaRotaryEmbedding": "attention",
    "MLP": "mlp",
    "SwiGLU": "mlp",
    "LlamaMLP": "mlp",
    "LayerNorm": "norm",
    "RMSNorm": "norm",
    "LlamaRMSNorm": "norm",
    "Embedding": "embedding",
}
# op or range name prefix -> part, for what runs outside those modules
OPS = {
    "aten::cross_entropy_loss": "loss",
    "Optimizer.step": "optimizer",
    "Optimizer.zero_grad": "optimizer",
    "aten::_foreach_norm": "optimizer",
    "aten::linalg_vector_norm": "optimizer",
}
BACKWARD = "autograd::engine::evaluate_function"


def label_modules(model: torch.nn.Module) -> list:
    """Wrap the forward of each module ``PARTS`` names in a profiler range; returns the hooks'
    handles (``handle.remove()`` undoes it)."""
    handles = []
    for module in model.modules():
        part = PARTS.get(type(module).__name__)
        if part is None:
            continue
        ranges: list = []

        def enter(*_, part=part, ranges=ranges):
            ranges.append(record_function(PREFIX + part))
            ranges[-1].__enter__()

        def leave(*_, ranges=ranges):
            ranges.pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    return handles


def _own(event) -> str | None:
    if event.name.startswith(PREFIX):
        return event.name[len(PREFIX) :]
    return next((part for name, part in OPS.items() if event.name.startswith(name)), None)


def _lineage(event):
    while event is not None:
        yield event
        event = event.cpu_parent


def split(prof) -> dict[str, float]:
    """Self CPU seconds per part over the whole trace (see the module docstring)."""
    events = prof.events()
    by_node: dict[int, str] = {}  # autograd sequence number -> part of the forward op
    for ev in events:
        if ev.sequence_nr >= 0 and not ev.name.startswith("autograd::"):
            part = next((p for p in map(_own, _lineage(ev)) if p), None)
            if part is not None:
                by_node.setdefault(ev.sequence_nr, part)
    seconds: dict[str, float] = defaultdict(float)
    for ev in events:
        if ev.name.startswith(PREFIX):
            continue
        part = None
        for up in _lineage(ev):
            part = _own(up) or (by_node.get(up.sequence_nr) if up.name.startswith(BACKWARD) else None)
            if part:
                break
        seconds[part or "other"] += ev.self_cpu_time_total / 1e6
    return dict(seconds)
