"""The CLI's consoles, exit codes and one-line input errors: what every command prints through
and how it refuses input (`where: reason` on stderr, exit 2, never a traceback)."""

from __future__ import annotations

import typer
from rich.console import Console

out = Console()
if not out.is_terminal:
    out = Console(width=160)  # logs and pipes: do not squeeze tables into 80 columns
err = Console(stderr=True)

EXIT_FAILED_PIPELINES = 1
EXIT_INVALID_INPUT = 2
EXIT_DEVICE_BUSY = 3  # the pre-flight found a foreign compute process on a device of the run
EXIT_INTERRUPTED = 130


def fail_input(lines: list[str]) -> typer.Exit:
    """Print each problem as one line on stderr; the Exit (code 2) for the caller to raise."""
    for line in lines:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_INVALID_INPUT)
