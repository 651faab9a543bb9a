"""Stop requests from a scheduler: SIGTERM and SIGUSR2 become a flag the training loop checks at
each step (it checkpoints and stops, exit 75); ``chain`` then hands the signal to the Python
handler it replaced (submitit's requeues the job). See docs/reliability.md."""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


class StopSignals:
    def __init__(self) -> None:
        self.received: str | None = None  # name of the first stop signal seen
        self.signum: int = 0  # its number (0: none)
        self._previous: dict[int, object] = {}
        self._frame = None

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
            self.signum = int(signum)
            self._frame = frame

    def chains(self, signum: int) -> bool:
        return callable(self._previous.get(signum))

    def chain(self, signum: int) -> None:
        """Hand ``signum`` to the handler this one replaced, if a Python callable (it may exit)."""
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, self._frame)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
