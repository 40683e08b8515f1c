"""Options shared by several commands, declared once so their help reads the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DbOption = Annotated[
    Path | None,
    typer.Option(
        "--db", help="DuckDB file (default: results.duckdb in $COLLOBENCH_RESULTS_DIR or the home)."
    ),
]
OverridesOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a value: path=value (e.g. pipelines.0.loadgen.rate=50)."),
]
