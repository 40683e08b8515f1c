"""The `collobench` command line: the typer app, its commands registered in help order, and
usage errors as one line.

Exit codes: `stages.contracts.errors.ExitCode` (0 ok, 1 failed pipelines, 2 invalid input, which
includes a warehouse busy past COLLOBENCH_WAREHOUSE_WAIT_S or of another schema version, 3 device
busy, 130 interrupted); an error a command does not handle itself is mapped to its code and
one-line messages by stages.cli.errors, never a traceback. The commands live in
stages.cli.commands, one module per group; rendering in stages.cli.render, progress and summary.

Start-up is part of every run's cost (users run many short runs, and A/B pairs): the console
script imports only the module of the command it was given (`collobench run` never imports
the capacity search, the warehouse or MLflow), and the processes a run spawns do not import
the console script again (`_spawned_children_skip_the_console_script`).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import typer
import typer.core
from typer.models import CommandInfo

from stages.cli.commands.artifacts import artifacts_app
from stages.cli.console import err
from stages.cli.errors import report_error
from stages.contracts.errors import ExitCode
from stages.validation.checks import one_line


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


COMMANDS = {
    "validate": "stages.cli.commands.spec",
    "schema": "stages.cli.commands.spec",
    "graph": "stages.cli.commands.spec",
    "run": "stages.cli.commands.run",
    "capacity": "stages.cli.commands.capacity",
    "load": "stages.cli.commands.warehouse",
    "report": "stages.cli.commands.report",
    "sql": "stages.cli.commands.warehouse",
    "compare": "stages.cli.commands.warehouse",
    "history": "stages.cli.commands.history",
    "ab": "stages.cli.commands.ab",
    "bisect": "stages.cli.commands.bisect",
}
"""Each command (its function's name) and its module, in help order; `artifacts` is a group."""


def _spawned_children_skip_the_console_script() -> None:
    """A `spawn`ed child runs its parent's `__main__` again (multiprocessing's preparation);
    for the console script that is this whole CLI, 1-2.5 s in every worker and sampler of a
    run. They need nothing of it (their targets live in stages.*), so `__main__` is named as
    the CLI's package main, which multiprocessing does not run again."""
    main_module = sys.modules.get("__main__")
    if main_module is not None and getattr(main_module, "__spec__", None) is None:
        main_module.__spec__ = importlib.util.find_spec("stages.cli.__main__")


class _LazyCommands(typer.Typer):
    """The app: its commands' modules are imported when click first asks for the commands,
    only the given one's when the console script names one (`collobench run ...`)."""

    _wanted: str | None = None
    _commands: list[CommandInfo]
    _loaded = False

    @property
    def registered_commands(self) -> list[CommandInfo]:
        if not self._loaded:
            self._loaded = True
            names = [self._wanted] if self._wanted in COMMANDS else list(COMMANDS)
            for name in names:
                self.command()(getattr(importlib.import_module(COMMANDS[name]), name))
        return self._commands

    @registered_commands.setter
    def registered_commands(self, commands: list[CommandInfo]) -> None:
        self._commands = commands

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _spawned_children_skip_the_console_script()
        arguments = kwargs.get("args", args[0] if args else sys.argv[1:])
        if not self._loaded and arguments:
            self._wanted = str(next(iter(arguments)))
        return super().__call__(*args, **kwargs)


app = _LazyCommands(
    name="collobench",
    cls=_OneLineUsageErrors,
    help="Collocated ML pipeline benchmarks: validate specs, run them, query the results.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(artifacts_app, name="artifacts")  # a group: `app` is never one bare command


def main() -> None:
    app()
