"""Stop requests from a scheduler: SIGTERM and SIGUSR2 become a flag checked between steps.

SLURM (``--signal``) and submitit send one of these some time before they kill a job. While
``StopSignals`` is active, the signal only records its name; the training loop checks
``received`` at each step boundary, writes a checkpoint and stops (``posx.core.errors.Preempted``).
Outside the main thread (where Python cannot install handlers) it does nothing.

The handler it replaced is not forgotten: once the checkpoint is written the loop calls
``chain(signum)``, which hands the signal to that handler (when it is a Python function).
Inside a submitit job that is submitit's USR2 handler
(``submitit.core.job_environment.SignalHandler.checkpoint_and_try_requeue``), which
resubmits the job and exits: a preempted or timed-out sweep job is requeued and resumes its
checkpoint. Where the previous handler is the default (a plain ``posx train``, torchrun),
nothing is chained and the run stops with exit status 75.
"""

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
        """Whether ``chain(signum)`` would call a handler."""
        return callable(self._previous.get(signum))

    def chain(self, signum: int) -> None:
        """Hand ``signum`` to the handler that was installed before this one, if it is a
        Python callable (not SIG_DFL / SIG_IGN). It may exit (submitit requeues and exits)."""
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
