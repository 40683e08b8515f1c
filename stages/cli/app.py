"""The `collobench` command line: the typer app, its commands registered in help order, and
usage errors as one line.

Exit codes: `stages.contracts.errors.ExitCode` (0 ok, 1 failed pipelines, 2 invalid input, which
includes a warehouse busy past COLLOBENCH_WAREHOUSE_WAIT_S or of another schema version, 3 device
busy, 130 interrupted); an error a command does not handle itself is mapped to its code and
one-line messages by stages.cli.errors, never a traceback. The commands live in
stages.cli.commands, one module per group; rendering in stages.cli.render, progress and summary.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
import typer.core

from stages.cli.commands import capacity, history, report, run, spec, warehouse
from stages.cli.commands.artifacts import artifacts_app
from stages.cli.console import err
from stages.cli.errors import report_error
from stages.contracts.errors import ExitCode
from stages.spec.checks import one_line


class _OneLineUsageErrors(typer.core.TyperGroup):
    """Click prints a usage error (an unknown option, a missing argument) as usage, a hint and
    the error, four lines; the contract is one `where: reason` line per problem and exit 2,
    `where` being the command path (`collobench sql`)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            code = super().main(*args, **{**kwargs, "standalone_mode": False})
        except typer.Abort:
            err.print("Aborted!", markup=False, highlight=False)
            sys.exit(1)
        except typer.TyperException as error:  # click's ClickException and UsageError
            _exit_on_usage_error(error)
        except Exception as error:
            code = report_error(error)
            if code is None:  # a bug: its traceback
                raise
            sys.exit(code)
        # non-standalone click returns a typer.Exit's code, or the command's value (None)
        sys.exit(code if isinstance(code, int) else 0)


def _exit_on_usage_error(error: Any) -> None:
    """Print a click error as one `where: reason` line (the help for `collobench` alone) and
    exit with its code (2 by default)."""
    if type(error).__name__ == "NoArgsIsHelpError":  # `collobench` alone: the help
        error.show()
        sys.exit(ExitCode.INVALID_INPUT)
    context = getattr(error, "ctx", None)
    where = context.command_path if context is not None else "collobench"
    format_message = getattr(error, "format_message", None)
    message = format_message() if callable(format_message) else str(error)
    err.print(one_line(f"{where}: {message}"), markup=False, highlight=False, soft_wrap=True)
    sys.exit(getattr(error, "exit_code", ExitCode.INVALID_INPUT))


app = typer.Typer(
    name="collobench",
    cls=_OneLineUsageErrors,
    help="Collocated ML pipeline benchmarks: validate specs, run them, query the results.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(artifacts_app, name="artifacts")
for command in (
    spec.validate,
    spec.schema,
    spec.graph,
    run.run,
    capacity.capacity,
    warehouse.load,
    report.report,
    warehouse.sql,
    warehouse.compare,
    history.history,
):
    app.command()(command)


def main() -> None:
    app()
