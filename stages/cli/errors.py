"""The one place that turns an error reaching the command line into its exit code and one-line
messages on stderr: collobench's errors (those of `analysis` too) by their category in
`stages.contracts.errors`."""

from __future__ import annotations

from stages.cli.console import print_problems
from stages.contracts.errors import CollobenchError, ExitCode


def exit_for(error: BaseException) -> tuple[ExitCode, list[str]] | None:
    """The exit code and the lines to print for `error`; None for an error that is a bug (it
    keeps its traceback)."""
    if isinstance(error, CollobenchError):
        return error.exit_code, error.lines()
    return None


def report_error(error: BaseException) -> ExitCode | None:
    """Print what `error` says (see `exit_for`) on stderr; the code to exit with, or None when
    it is not one to map (the caller re-raises it)."""
    mapped = exit_for(error)
    if mapped is None:
        return None
    code, lines = mapped
    print_problems(lines)
    return code
