"""The options of `collobench capacity` (its region options live in capacity_region), as typer
annotations, so the command's module holds only what it does."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

WithOption = Annotated[
    list[str] | None,
    typer.Option(
        "--with",
        help="A co-runner at a fixed offered rate, OTHER=RATE (queries/s), run next to the "
        "target in every probe; repeat for more. Default: the target alone.",
    ),
]


PipelineOption = Annotated[
    str | None, typer.Option("--pipeline", help="The pipeline whose capacity is searched.")
]
SloOption = Annotated[
    float | None,
    typer.Option("--slo-ms", help="Latency objective (default: the pipeline's slo_ms)."),
]
PercentileOption = Annotated[
    float, typer.Option("--percentile", help="The percentile the SLO bounds.")
]
PrecisionOption = Annotated[
    float, typer.Option("--precision", help="Stop when the bracket's hi / lo <= 1 + this.")
]
MaxProbesOption = Annotated[
    int, typer.Option("--max-probes", help="Probe budget, the ceiling probe included.")
]
ProbeSecondsOption = Annotated[
    float | None,
    typer.Option(
        "--probe-s",
        help="Each probe's shortest window (default: the pipeline's duration_s); a probe at a "
        "low rate runs longer, until it holds --probe-queries measured queries.",
    ),
]
BudgetOption = Annotated[
    float,
    typer.Option(
        "--budget-min",
        help="The search's time budget in minutes: no probe starts that would end past it, "
        "and none measures longer than a sixth of it.",
    ),
]
ProbeQueriesOption = Annotated[
    int | None,
    typer.Option(
        "--probe-queries",
        help="Measured queries a probe holds at least (default: the fewest with which "
        "LoadGen's rule can pass the percentile: 459 at p99, 90 at p95, 44 at p90).",
    ),
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", help="Parent folder of the search (default: <results dir>/capacity)."),
]
ResumeOption = Annotated[
    str | None,
    typer.Option("--resume", help="Continue this search (or region) from what it recorded."),
]
SearchIdOption = Annotated[
    str | None, typer.Option("--search-id", help="Name of a new search's (or region's) folder.")
]
MlflowOption = Annotated[
    bool, typer.Option("--mlflow/--no-mlflow", help="Record the search in MLflow.")
]
