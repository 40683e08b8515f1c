"""The error root and the exit codes: every exception class of collobench derives from one of
`CollobenchError`'s categories, each of which says what the caller should do and carries the
exit code a command line ends with, so callers map errors by category instead of class by class.

A class that older code catches by a built-in base keeps that base beside its category
(`class SpecError(InvalidInputError, ValueError)`)."""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    """How a `collobench` command (and the Dagster Pipes children around it) ends."""

    OK = 0
    FAILED_RUN = 1
    INVALID_INPUT = 2
    DEVICE_BUSY = 3
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        """One line on what the code says (the README's exit-code table is checked against it)."""
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "ok",
    ExitCode.FAILED_RUN: "the run finished with failed pipelines (their data is kept)",
    ExitCode.INVALID_INPUT: "invalid input, including a warehouse that cannot be used "
    "(one `where: reason` line per problem, never a traceback)",
    ExitCode.DEVICE_BUSY: "device busy: the pre-flight found a foreign compute process on a "
    "device of the run (manifest status `device_busy`, nothing measured)",
    ExitCode.INTERRUPTED: "interrupted (what was measured is kept)",
}


class CollobenchError(Exception):
    """Root of collobench's errors; raise one of its categories, never the root itself."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILED_RUN

    def lines(self) -> list[str]:
        """What a command line prints for this error, one line per problem (a KeyError's own
        str() would quote its message)."""
        if isinstance(self, KeyError) and len(self.args) == 1:
            return [str(self.args[0])]
        return [str(self)]


class InvalidInputError(CollobenchError):
    """The input (a spec, an option, a file, what the machine offers) cannot be used: fix it
    and run again; nothing was measured."""

    exit_code = ExitCode.INVALID_INPUT


class DeviceBusyError(CollobenchError):
    """A device the run needs is taken by something else: wait or pick another device."""

    exit_code = ExitCode.DEVICE_BUSY


class RunInterruptedError(CollobenchError):
    """A signal (Ctrl-C, SIGTERM, the parent's death) stopped the work; what was measured is
    kept and may be resumed."""

    exit_code = ExitCode.INTERRUPTED


class RunFailedError(CollobenchError):
    """Something failed while running (a query, a worker, a service, a sampler): the run's
    record says what; rerunning as is may not help."""

    exit_code = ExitCode.FAILED_RUN


class WarehouseUnavailableError(CollobenchError):
    """The DuckDB warehouse cannot be used now (busy past the wait, another schema version):
    retry later or migrate; a command line treats it as invalid input."""

    exit_code = ExitCode.INVALID_INPUT
