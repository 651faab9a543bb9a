"""User-facing errors: what a user can fix is a ``PosxError`` whose one-line message says what is
wrong and how to fix it; the CLI prints it and exits non-zero, without a traceback."""


class PosxError(Exception):
    """An error caused by user input; its message is shown as is, on one line."""


def choose(options) -> str:
    """The fix for a value outside its choices, worded in this one place."""
    return "choose one of " + ", ".join(str(o) for o in options)


def unknown(setting: str, value: object, options) -> PosxError:
    return PosxError(f"{setting}={value} is unknown; {choose(options)}")


class Preempted(PosxError):
    """Training stopped on SIGTERM/SIGUSR2 after writing a checkpoint. Exit 75 (EX_TEMPFAIL, "try
    again later"): a job script tells "preempted, requeue me" from success and from an error."""

    EXIT_CODE = 75


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with the line that says what the command left (printed by ``user_errors``, exit 130)."""
