"""Several processes training one run (torch.distributed): the process group, this rank, and how
all ranks agree; a no-op for rank 0 of 1 unless the rank variables are set (torchrun, or a
submitit job of several tasks). Design: docs/sweeps-and-clusters.md."""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Callable, Iterator, TypeVar

import torch
import torch.distributed as dist

from posx.core.device import pick_device
from posx.core.errors import PosxError
from posx.core.launcher import requested

T = TypeVar("T")
# How long a rank waits for the others in the control group (rank 0 may be evaluating).
CONTROL_TIMEOUT = datetime.timedelta(hours=12)

_state: dict = {"control": None, "device": None}


class PeerFailed(PosxError):
    """Another rank failed (its own message says why); this rank stops too."""


def export_submitit_ranks() -> None:
    """Inside a submitit job of several tasks (not under torchrun), export its rank variables."""
    if requested() or not os.environ.get("SUBMITIT_EXECUTOR"):
        return
    # submitit is the optional `slurm` extra; it is only imported inside a submitit job.
    import submitit.helpers

    env = submitit.helpers.TorchDistributedEnvironment()
    if env.world_size > 1:
        # Each task picks cuda:LOCAL_RANK among the GPUs it sees, so CUDA_VISIBLE_DEVICES stays SLURM's.
        env.export(set_cuda_visible_devices=False)


def enabled() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if enabled() else 0


def world_size() -> int:
    return dist.get_world_size() if enabled() else 1


def is_main() -> bool:
    return rank() == 0


def device(requested_device: str) -> torch.device:
    """The session's device (cuda:LOCAL_RANK under DDP on CUDA), else ``pick_device``'s."""
    return _state["device"] if enabled() else pick_device(requested_device)


@contextlib.contextmanager
def session(requested_device: str) -> Iterator[None]:
    """The process group while inside, when the rank variables are set; else a plain process."""
    export_submitit_ranks()
    if not requested() or enabled():
        yield
        return
    dev = pick_device(requested_device)
    if dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend, **({"device_id": dev} if dev.type == "cuda" else {}))
    except (RuntimeError, ValueError) as exc:
        message = " ".join(str(exc).split())[:300]
        raise PosxError(
            f"cannot join the process group ({backend}, rank {os.environ.get('RANK')} of "
            f"{os.environ.get('WORLD_SIZE')}): {message}"
        ) from exc
    _state["device"] = dev
    _state["control"] = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT) if backend != "gloo" else None
    try:
        yield
    finally:
        _state["control"], _state["device"] = None, None
        dist.destroy_process_group()


def _all_reduce(values: list[float], op: dist.ReduceOp) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op, group=_state["control"])  # None: the default group (gloo already)
    return t.tolist()


def agree_max(values: list[float]) -> list[float]:
    """Element-wise maximum over all ranks (flags, signal numbers)."""
    return _all_reduce(values, dist.ReduceOp.MAX) if enabled() else list(values)


def mean(value: float) -> float:
    """The mean of ``value`` over all ranks (the logged loss)."""
    return _all_reduce([value], dist.ReduceOp.SUM)[0] / world_size() if enabled() else value


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (pickled; small objects only)."""
    if not enabled():
        return obj
    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0, group=_state["control"])
    return box[0]


def on_main(fn: Callable[[], T], share: bool = False) -> T | None:
    """Run ``fn`` on rank 0 alone (``share``: its result on every rank); if it fails, the others
    raise ``PeerFailed``, so no rank waits in a collective."""
    result, error = None, None
    if is_main():
        try:
            result = fn()
        except BaseException as exc:  # KeyboardInterrupt too: the others must not hang
            error = exc
    if agree_max([1.0 if error is not None else 0.0])[0] > 0:  # on every rank when rank 0 failed
        if error is not None:
            raise error
        raise PeerFailed("rank 0 stopped with an error (its message is above); this rank stops too")
    return broadcast(result) if share else result
