"""The one place that turns an error reaching the command line into its exit code and one-line
messages on stderr: collobench's errors by category (`stages.contracts.errors`), and the
analysis errors that do not derive from it yet, as the input errors they are."""

from __future__ import annotations

from stages.cli.console import print_problems
from stages.contracts.errors import CollobenchError, ExitCode


def _analysis_input_errors() -> tuple[type[Exception], ...]:
    """analysis's errors a command reports as invalid input (a manifest or warehouse that
    cannot be used, an unknown report or view); imported only once an error is being mapped."""
    from analysis.capacity_files import CapacityFileError
    from analysis.catalogue import CatalogueError
    from analysis.db import WarehouseError
    from analysis.loader import LoadError
    from analysis.report_entries import ReportCatalogueError

    return (CapacityFileError, CatalogueError, WarehouseError, LoadError, ReportCatalogueError)


def exit_for(error: BaseException) -> tuple[ExitCode, list[str]] | None:
    """The exit code and the lines to print for `error`; None for an error that is a bug (it
    keeps its traceback)."""
    if isinstance(error, CollobenchError):
        return error.exit_code, error.lines()
    if isinstance(error, _analysis_input_errors()):
        text = str(error)
        if isinstance(error, LookupError):  # str() of a KeyError quotes it
            text = text.strip("'\"")
        return ExitCode.INVALID_INPUT, [text]
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
