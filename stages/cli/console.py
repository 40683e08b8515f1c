"""The CLI's consoles and one-line input errors: what every command prints through
and how it refuses input (`where: reason` on stderr, exit 2, never a traceback)."""

from __future__ import annotations

import os

import typer
from rich.console import Console

from stages.contracts.errors import ExitCode
from stages.contracts.progress import JSONL, PROGRESS_ENV

out = Console()
if not out.is_terminal:
    out = Console(width=160)  # logs and pipes: do not squeeze tables into 80 columns
err = Console(stderr=True)
if os.environ.get(PROGRESS_ENV) == JSONL:
    out.quiet = True  # stdout carries progress records alone (stages.contracts.progress)


def print_problems(lines: list[str]) -> None:
    """Each line on stderr as it is: no markup, no wrapping (one line stays one line)."""
    for line in lines:
        err.print(line, markup=False, highlight=False, soft_wrap=True)


def fail_input(lines: list[str]) -> typer.Exit:
    """Print each problem as one line on stderr; the Exit (code 2) for the caller to raise."""
    print_problems(lines)
    return typer.Exit(ExitCode.INVALID_INPUT)
