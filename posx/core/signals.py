"""Stop requests from a scheduler: SIGTERM and SIGUSR2 become a flag checked between steps.

SLURM (``--signal``) and submitit send one of these some time before they kill a job. While
``StopSignals`` is active, the signal only records its name; the training loop checks
``received`` at each step boundary, writes a checkpoint and stops (``posx.errors.Preempted``).
Outside the main thread (where Python cannot install handlers) it does nothing.
"""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


class StopSignals:
    def __init__(self) -> None:
        self.received: str | None = None  # name of the first stop signal seen
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
