"""Errors that reach the user: a sentence, a hint, an exit code. Mapped to the process exit in one place (cli.main)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a check or a run failed
EXIT_USAGE = 2  # bad usage or bad input
EXIT_INTERRUPTED = 130


class TraceaError(Exception):
    """An error meant for the user. `message` says what is wrong, `hint` what to do."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} {self.hint}"


class UsageError(TraceaError):
    """Bad options, bad input files, unwritable outputs: exit code 2."""

    exit_code = EXIT_USAGE


class RunFailed(TraceaError):
    """A check or a run failed (`--strict`, a benchmark regression): exit code 1."""

    exit_code = EXIT_FAILED


class ToolchainMissing(TraceaError):
    """An optional package or library the command needs is absent: exit code 2 with an install hint."""

    exit_code = EXIT_USAGE
